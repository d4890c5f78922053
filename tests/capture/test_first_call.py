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


# -- per-op recording cost (issue 13 item 1): what the hot path remembers ------------------


def _ops_and_constants(graph):
    nodes = [(n.op, tuple(v.name for v in n.inputs if v is not None)) for n in graph.nodes]
    constants = {
        c.value.name: (c.data.dtype, c.data.shape, c.data.tobytes()) for c in graph.constants
    }
    return nodes, constants


@pytest.mark.parametrize(
    "index",
    [1, -1, (2, 0), (slice(1, 3),), (slice(None, None, -2), 1), (0, slice(-2, None)), ()],
)
def test_the_basic_index_fast_path_records_what_the_general_path_records(index):
    x = np.arange(24.0).reshape(4, 6)
    items = index if isinstance(index, tuple) else (index,)
    fast = kiln.trace(lambda x: x[index], x).graph
    general = kiln.trace(lambda x: x[(*items, Ellipsis)], x).graph  # ``...``: the general path
    assert _ops_and_constants(fast) == _ops_and_constants(general)
    assert_close(kiln.asarray(x)[index].numpy(), x[index])


def test_the_basic_index_fast_path_raises_numpys_errors():
    x = kiln.asarray(np.arange(6.0).reshape(2, 3))
    with pytest.raises(IndexError, match="out of bounds"):
        x[2]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        x[::0]
    with pytest.raises(IndexError, match="out of bounds"):
        kiln.trace(lambda x: x[0, -4], np.zeros((2, 3)))


def test_shared_int_vectors_are_read_only_and_one_constant_per_contents():
    from kiln.functions.operands import int_vector

    v = int_vector((3, 4))
    assert v is int_vector((3, 4)) and not v.numpy().flags.writeable
    assert v.dtype == np.int64 and v.shape == (2,)

    def rows(x):  # every x[k] slices with bounds of the same few contents
        return [x[k % 2] for k in range(6)]

    graph = kiln.trace(rows, np.ones((2, 3))).graph
    contents = [(c.data.shape, c.data.tobytes()) for c in graph.constants]
    assert len(contents) == len(set(contents))  # one constant per contents


def test_a_loop_of_remembered_calls_matches_numpy():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 3))

    def f(x):
        D = np.zeros((6, 6))
        for i in range(6):
            for j in range(6):
                D[i, j] = np.sqrt(np.sum((x[i] - x[j]) ** 2))
        return D

    expected = f(x)
    traced = _finalized(kiln.trace(f, x))
    assert_close(traced(x), expected)
    compiled = kiln.compile(f)
    for k in range(2):
        assert_close(compiled(x + k), f(x + k))


def test_a_float_attribute_zero_keeps_its_sign_across_remembered_calls():
    x = np.array([-1.0, 0.0, 2.0])

    def f(x):
        out = []
        for alpha in (0.0, -0.0, 0.0, -0.0):  # LeakyRelu's slope: 0.0 and -0.0 share a key
            out.append(kiln.nn.leaky_relu(x, negative_slope=alpha))
        return out

    got = [np.asarray(t) for t in _finalized(kiln.trace(f, x))(x)]
    for g, alpha in zip(got, (0.0, -0.0, 0.0, -0.0)):
        want = np.where(x >= 0, x, x * alpha)
        assert np.array_equal(np.signbit(g), np.signbit(want)) and np.array_equal(g, want)


def test_a_wrong_arity_is_refused_inside_a_trace_too():
    from kiln.tensor import call

    x = kiln.asarray(np.ones(3))
    with pytest.raises(kiln.errors.OpArgumentError):
        call("Relu", x, x)

    def twice(x):
        call("Relu", x)
        return call("Relu", x, x)

    with pytest.raises(kiln.errors.OpArgumentError):
        kiln.trace(twice, np.ones(3))


def test_kernel_templates_are_compiled_once_and_bind_their_own_objects():
    from kiln.ops.dispatch import _compile_call
    from kiln.ops.registry import KernelCall

    a = np.arange(10)
    first = _compile_call(KernelCall("{0}[{b0}]", ((slice(1, 3),),)), 1)
    second = _compile_call(KernelCall("{0}[{b0}]", ((slice(5, 9, 2),),)), 1)
    assert first(a).tolist() == [1, 2] and second(a).tolist() == [5, 7]


def test_a_source_line_is_the_line_of_each_call():
    from kiln.source import user_source

    lines = [user_source() for _ in range(2)]
    other = user_source()
    assert lines[0] == lines[1] and lines[0] != other
    assert lines[0].split(":")[1] != other.split(":")[1]


def test_recording_freezes_old_objects_only_while_it_runs():
    import gc

    from kiln.capture.trace import old_objects_frozen

    assert gc.get_freeze_count() == 0
    seen = []

    def f(x):
        seen.append(gc.get_freeze_count() > 0)
        return x + 1.0

    kiln.trace(f, np.ones(2))
    assert seen == [True] and gc.get_freeze_count() == 0

    def fails(x):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        kiln.trace(fails, np.ones(2))
    assert gc.get_freeze_count() == 0
    with old_objects_frozen():
        with old_objects_frozen():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    gc.freeze()  # an application's own frozen objects stay frozen
    try:
        count = gc.get_freeze_count()
        with old_objects_frozen():
            pass
        assert gc.get_freeze_count() == count
    finally:
        gc.unfreeze()


def test_a_long_recording_freezes_what_it_made_and_releases_it_after():
    import gc

    from kiln.capture.trace import _REFREEZE_MASK, old_objects_frozen, refreeze

    counts = []

    def f(x):
        y = x
        for _ in range(_REFREEZE_MASK + 10):  # past one refreeze
            y = y + 1.0
        counts.append(gc.get_freeze_count())
        return y

    before = gc.get_freeze_count()
    assert before == 0
    kiln.trace(f, np.ones(2))
    assert counts[0] > 0 and gc.get_freeze_count() == 0
    with old_objects_frozen():
        first = gc.get_freeze_count()
        junk = [[] for _ in range(1000)]  # made after the freeze: frozen by a refreeze
        refreeze()
        assert gc.get_freeze_count() >= first + len(junk)
    assert gc.get_freeze_count() == 0
    refreeze()  # outside a recording: nothing to do
    assert gc.get_freeze_count() == 0
