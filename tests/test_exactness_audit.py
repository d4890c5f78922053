"""Bit for bit, not within a tolerance: every entry of ``tools/exactness_audit.py``'s catalog
(the NumPy functions and expressions kiln captures) compiled, replayed on fresh inputs and
compared with eager NumPy's values, dtype, shape and sign bits, on contiguous and
non-contiguous inputs. The fuzzer's tolerances cannot see an ulp; this can. docs/reliability.md
("Bit for bit") has the audit's findings; ``python tools/exactness_audit.py`` is the full run
(size-1, empty and special-value variants, trace mode, engines)."""

from __future__ import annotations

import pytest

from .tool_scripts import load_tool

# Entries that differ today (docs/reliability.md, "Bit for bit", Open): drop a rule once its
# fix lands.
KNOWN_OPEN: list[tuple[str, str]] = []


audit = load_tool("exactness_audit")


def _known_open(name: str) -> str | None:
    return next((why for part, why in KNOWN_OPEN if part in name), None)


CASES = [
    pytest.param(e, dtype, id=f"{e.name}-{dtype}") for e in audit.CATALOG for dtype in e.dtypes
]


@pytest.mark.parametrize("e, dtype", CASES)
def test_compiled_equals_eager_numpy_bit_for_bit(e, dtype):
    for variant in ("base", "noncontig"):
        if variant not in e.variants:
            continue
        out = audit.audit(e, "compile", dtype, variant, seed=0)
        if out.status in ("mismatch", "error") and _known_open(e.name):
            pytest.xfail(_known_open(e.name))
        assert out.status in ("ok", "fallback", "n/a"), f"{variant}: {out.detail}"
