"""The NumPy kernels corpus (benchmarks/numpy_kernels/), correctness half: each kernel through
``kiln.compile`` gives NumPy's answer on tiny inputs for three calls (fresh inputs each call,
growing sizes for the shape-dependent kernels), outputs and mutated inputs alike. Falling back
is allowed here (the benchmark reports it); timing is not tested."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

import kiln

_PACKAGE = Path(__file__).resolve().parents[1] / "benchmarks" / "numpy_kernels"


def _load_corpus():
    name = "numpy_kernels"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, _PACKAGE / "__init__.py", submodule_search_locations=[str(_PACKAGE)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


corpus = _load_corpus()

# Kernels that do not give NumPy's answer today, with the issue-11 item (or later issue) that
# covers the cause. strict=False: they pass as soon as that work lands.
_INPLACE = (
    "issue 11 item 9 (never a raw error for code NumPy runs) and the in-place issue: "
    "t[index] = value on a lifted input/np.empty_like result raises 'kiln tensors are immutable'"
)
KNOWN_FAILURES: dict[str, str] = {
    "standardize_inplace": (
        "issue 11 item 2 and the in-place issue: x -= ... on a lifted input rebinds a kiln "
        "Tensor, so the caller's array is silently not mutated"
    ),
    "jacobi_sweeps": _INPLACE,
    "row_normalize_loop": _INPLACE,
    "rotate_phasors": "issue 11 item 8: a Python complex scalar (1j * theta) raises TypeError",
    "branch_on_size": (
        "issue 11 item 7: if x.shape[0] > 6 raises TypeError on the dynamic re-capture"
    ),
}


def _param(k):
    marks = ()
    if k.name in KNOWN_FAILURES:
        marks = (pytest.mark.xfail(strict=False, reason=KNOWN_FAILURES[k.name]),)
    return pytest.param(k, id=k.name, marks=marks)


def test_corpus_is_large_and_names_are_unique():
    names = [k.name for k in corpus.KERNELS]
    assert len(names) >= 30
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("k", [_param(k) for k in corpus.KERNELS])
def test_compiled_kernel_matches_numpy(k):
    compiled = kiln.compile(k.fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # falling back is allowed; correctness is not optional
        result = corpus.check_calls(k, compiled, k.tiny, calls=3)
    assert result["problem"] is None, f"{k.name}: {result['problem']}"


def test_compare_catches_mismatches():
    import numpy as np

    x = np.arange(4.0)
    assert corpus.compare(x, x.copy()) is None
    assert "dtype" in corpus.compare(x, x.astype(np.float32))
    assert "shape" in corpus.compare(x, x[:3])
    assert "values" in corpus.compare(x, x + 1e-6)
    assert "not np.ndarray" in corpus.compare(x, x.tolist())
    assert corpus.compare((x, 1), [x, 1]) is not None
    assert corpus.compare(np.float64(2.0), np.asarray(2.0)) is None
