"""Sizes that shape guards pin (``kiln.ir.sizes``): a size the run decides is never pinned."""

from __future__ import annotations

from kiln.ir.sizes import pinned_sizes
from kiln.symbolic import ShapeGuard, fresh_symbol, symbol


def test_a_size_known_only_at_run_time_is_never_pinned() -> None:
    """A fresh size (NonZero's count, a run-time Reshape's size) takes a new value on every
    run, so an equality on it pins nothing, while the input sizes beside it are pinned."""
    s, count = symbol("s"), fresh_symbol("reshape")
    guards = [ShapeGuard(count, "==", 4), ShapeGuard(s + 1, "==", 3)]
    assert pinned_sizes(guards) == {"s": 2}
    assert pinned_sizes([ShapeGuard(count - s, "==", 0), ShapeGuard(s, "==", 5)]) == {"s": 5}
