"""What keeps recording cheap per op (issue 13, first-call budget) without changing what is
recorded: small constants shared by contents, box writes into a root found without recording
a read, and the builder's remembered ``infer`` answers."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir.builder import GraphBuilder
from kiln.ops.registry import TensorType

from ..numerics import assert_close

f64 = np.float64


def _finalized(traced):
    traced.graph.finalize()
    return traced


def test_small_constants_are_one_graph_constant_per_contents():
    x = np.linspace(-1.0, 1.0, 5)
    traced = _finalized(kiln.trace(lambda x: (x * 2.0 + 2.0) * 2.0, x))
    twos = [c for c in traced.graph.constants if c.data.shape == () and c.data == 2.0]
    assert len(twos) == 1
    assert_close(traced(x), (x * 2.0 + 2.0) * 2.0)


def test_shared_constants_are_copies_a_later_write_cannot_change():
    a, b = np.arange(4.0), np.arange(4.0)  # equal contents, two writable arrays
    ka, kb = kiln.asarray(a), kiln.asarray(b)
    x = np.ones(4)
    traced = _finalized(kiln.trace(lambda x: x * ka + kb, x))
    assert len(traced.graph.constants) == 1
    a[...] = 100.0
    b[...] = -7.0
    assert_close(traced(x), np.ones(4) * np.arange(4.0) + np.arange(4.0))


def test_read_only_small_arrays_keep_their_own_memory():
    w = np.arange(4.0)
    w.flags.writeable = False
    v = np.arange(4.0)
    kw, kv = kiln.asarray(w), kiln.asarray(v)
    traced = kiln.trace(lambda x: x * kv + kw, np.ones(4))
    assert any(np.shares_memory(c.data, w) for c in traced.graph.constants)


def _fill(x):
    D = np.zeros((5, 6))
    D[1, 2] = x[0]
    D[-1, 1:4] = x[1]
    D[2:5:2, ::-2] = x[2]
    D[np.int64(3)] = x[3]
    D[0, 7:9] = 5.0  # empty
    D[1:1, :] = 3.0  # empty
    D[:, -1] = 2.0
    D[-2, -3:] = x[:3]
    D[0] = x[4]
    return D


def test_box_writes_into_a_root_record_no_read_of_it():
    x = np.arange(1.0, 6.0)
    traced = _finalized(kiln.trace(_fill, x))
    # The reads are x[k] only; D is only written (one SliceUpdate per non-empty write).
    assert all(
        n.inputs[0] is not None and n.inputs[0].shape != (5, 6)
        for n in traced.graph.nodes
        if n.op in ("Slice", "Squeeze")
    )
    assert_close(traced(x), _fill(x))
    compiled = kiln.compile(_fill)
    for k in range(3):
        assert_close(compiled(x + k), _fill(x + k))


def test_a_box_write_out_of_bounds_raises_numpys_error():
    def f(x):
        D = np.zeros((3, 3))
        D[3, 0] = x[0]
        return D

    with pytest.raises(IndexError, match="out of bounds"):
        kiln.trace(f, np.ones(2))


def test_remembered_inference_gives_each_data_dependent_node_its_own_size():
    b = GraphBuilder()
    x = b.add_input("x", TensorType(np.dtype(bool), (4,)))
    (first,) = b.add("NonZero", [x])
    (second,) = b.add("NonZero", [x])
    assert str(first.shape[1]) != str(second.shape[1])
    y = b.add_input("y", TensorType(np.dtype(f64), (2, 3)))
    (s1,) = b.add("Exp", [y])
    (s2,) = b.add("Exp", [y])
    assert s1.type == s2.type and s1 is not s2 and s1.name != s2.name


def test_remembered_inference_still_refuses_a_bad_call():
    b = GraphBuilder()
    y = b.add_input("y", TensorType(np.dtype(f64), (2, 3)))
    b.add("Exp", [y])
    with pytest.raises(kiln.errors.OpArgumentError):
        b.add("Exp", [y, y])
