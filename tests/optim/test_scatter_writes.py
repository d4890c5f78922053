"""scatter_writes: what the passes over writes share (positions of constant writes)."""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest

import kiln

sw = importlib.import_module("kiln.optim.scatter_writes")


def _box_positions_reference(dims, starts, ends, axes, steps):
    """Every cell of the box, counted in C order over ``dims`` (the definition)."""
    index = np.arange(int(np.prod(dims)), dtype=np.int64).reshape(dims)
    box = [slice(None)] * len(dims)
    for a, start, end, step in zip(axes, starts, ends, steps):
        box[a % len(dims)] = slice(int(start), int(end), int(step))
    return index[tuple(box)]


@pytest.mark.parametrize("dims", [(4,), (3, 5), (2, 3, 4)])
def test_box_positions_match_the_cells_of_every_box(dims):
    """One-cell boxes (out[i] = row, D[i, j] = v) take a short path: every box, of one cell
    or more, negative bounds and steps included, gives the cells NumPy's slicing takes."""
    bounds = range(-len(dims) - 2, max(dims) + 2)
    for axis in range(-len(dims), len(dims)):
        for start, end, step in itertools.product(bounds, bounds, (1, 2, -1, -3)):
            args = ([start], [end], [axis], [step])
            got = sw.box_positions(dims, *(np.array(a, np.int64) for a in args))
            want = _box_positions_reference(dims, *args)
            assert got.dtype == np.int64 and got.shape == want.shape
            assert np.array_equal(got, want), (dims, args)


def _writes_graph():
    def fill(x):
        out = np.zeros((4, 3))
        for i in range(4):
            out[i] = x[i] * 2.0
        return out

    return kiln.trace(fill, np.ones((4, 3))).graph


def test_constant_writes_are_remembered_only_for_the_same_node_and_constants():
    """What constant_writes found is reused while the node and the arrays its inputs hold
    are the very same objects; other constants (or none) are looked at again."""
    g = _writes_graph()
    constants = {id(c.value): c.data for c in g.constants}
    node = next(n for n in g.nodes if n.op == sw.SLICE_UPDATE)
    first = sw.constant_writes(node, constants)
    assert first is not None and sw.constant_writes(node, constants) is first
    assert not first.positions.flags.writeable  # shared: nobody may change it
    assert sw.constant_writes(node, {}) is None  # no constant bounds: not a constant write
    moved = dict(constants)  # another box: its bounds one further
    for bound in node.inputs[2:4]:
        moved[id(bound)] = constants[id(bound)] + 1
    other = sw.constant_writes(node, moved)
    assert other is not None and other is not first
    assert other.positions.tolist() == sw._constant_writes(node, moved).positions.tolist()
    assert other.positions.tolist() != first.positions.tolist()
    sw.forget_writes()
    again = sw.constant_writes(node, constants)
    assert again is not first and again.positions.tolist() == first.positions.tolist()


def test_the_pipeline_forgets_the_writes_it_read():
    g = _writes_graph()
    g.optimize()
    assert not sw._WRITES


def test_added_since_gives_only_the_new_nodes():
    from kiln.ir.builder import GraphBuilder
    from kiln.ops.registry import TensorType

    b = GraphBuilder()
    x = b.add_input("x", TensorType(np.dtype("float64"), (3,)))
    b.add("Exp", [x])
    before = b.node_count
    assert sw.added_since(b, before) == ()  # nothing added (not every node so far)
    b.add("Neg", [x])
    b.add("Abs", [x])
    assert [n.op for n in sw.added_since(b, before)] == ["Neg", "Abs"]
