"""If, Loop and Scan: closed subgraphs, their type rules, and their kernels on every CPU engine
(eager, the NumPy plan, the reference interpreter), against plain Python loops."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import kiln
from kiln.errors import (
    GraphValidationError,
    OpArgumentError,
    OpTypeError,
    UnsupportedOperationError,
)
from kiln.ir.builder import GraphBuilder
from kiln.ir.graph import Node, graph_from_ops
from kiln.ops.registry import TensorType, get_op
from kiln.optim.eliminate_common_subexpressions import eliminate_common_subexpressions
from kiln.optim.transform import DefaultsOptions
from kiln.symbolic import SymDim, symbol

from ..numerics import assert_close

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
CPU_ENGINES = ("numpy", "reference")


def t(dtype: np.dtype, *shape: object) -> TensorType:
    return TensorType(dtype, tuple(shape))  # type: ignore[arg-type]


def run_all(graph: kiln.io.ModelGraph, feeds: list[np.ndarray]) -> list[list[np.ndarray]]:
    """The results on every engine (jax's flush-to-zero of subnormal results accepted: these
    tests are about control flow)."""
    results = []
    graph.reassociation_allowed = True
    for engine in CPU_ENGINES:
        graph.finalize(engine)
        results.append([np.asarray(r) for r in graph.run(feeds)])
    return results


# -- If ------------------------------------------------------------------------------------


def if_graph(n: object = 3) -> kiln.io.ModelGraph:
    """y = If(c) then (x + w) * 2 else x - w, reading x and w as captures."""
    two = t(F32, n)
    then = graph_from_ops([two, two], [("Add", (0, 1), {}), ("Add", (2, 2), {})], [3])
    other = graph_from_ops([two, two], [("Sub", (0, 1), {})], [2])
    b = GraphBuilder()
    c = b.add_input("c", t(BOOL))
    x = b.add_input("x", two)
    w = b.add_input("w", two)
    (y,) = b.add("If", [c, x, w], {"then_branch": then, "else_branch": other})
    return b.graph("g", [y])


@pytest.mark.parametrize("cond", [True, False])
def test_if_runs_the_branch_the_condition_picks(cond: bool) -> None:
    g = if_graph()
    g.verify()
    x = np.array([1.0, -2.0, 3.5], np.float32)
    w = np.array([0.5, 0.25, -1.0], np.float32)
    want = (x + w) * 2 if cond else x - w
    for got in run_all(g, [np.array(cond), x, w]):
        assert_close(got[0], want)


def test_if_with_symbolic_sizes_keeps_them() -> None:
    n = symbol("n")
    g = if_graph(n)
    assert g.outputs[0].shape == (n,)
    x = np.arange(5, dtype=np.float32)
    for got in run_all(g, [np.array(False), x, x]):
        assert_close(got[0], np.zeros(5, np.float32))


def test_if_branches_of_different_sizes_give_a_fresh_size() -> None:
    a = t(F32, 3)
    then = graph_from_ops([a], [("Neg", (0,), {})], [1])
    other = graph_from_ops([a], [("Concat", (0, 0), {"axis": 0})], [1])
    (out,) = get_op("If").infer([t(BOOL), a], {"then_branch": then, "else_branch": other})
    assert out.dtype == F32 and isinstance(out.shape[0], SymDim)
    builder = GraphBuilder()
    c = builder.add_input("c", t(BOOL))
    x = builder.add_input("x", a)
    (y,) = builder.add("If", [c, x], {"then_branch": then, "else_branch": other})
    g = builder.graph("g", [y])
    g.verify()
    xs = np.array([1, 2, 3], np.float32)
    for got in run_all(g, [np.array(True), xs]):
        assert_close(got[0], -xs)
    for got in run_all(g, [np.array(False), xs]):
        assert_close(got[0], np.concatenate([xs, xs]))


def test_if_refuses_branches_that_do_not_fit() -> None:
    a = t(F32, 3)
    one = graph_from_ops([a], [("Neg", (0,), {})], [1])
    two = graph_from_ops([a, a], [("Add", (0, 1), {})], [2])
    with pytest.raises(OpArgumentError, match="else_branch.*takes 2 input"):
        get_op("If").infer([t(BOOL), a], {"then_branch": one, "else_branch": two})
    ints = graph_from_ops([t(I64, 3)], [("Neg", (0,), {})], [1])
    with pytest.raises(OpTypeError, match="then_branch.*input 0"):
        get_op("If").infer([t(BOOL), a], {"then_branch": ints, "else_branch": one})
    with pytest.raises(OpTypeError, match="cond"):
        get_op("If").infer([t(F32), a], {"then_branch": one, "else_branch": one})


def test_if_result_is_not_an_input() -> None:
    """A branch that returns its input: the result never shares memory with the caller's."""
    a = t(F32, 3)
    same = graph_from_ops([a], [], [0])
    b = GraphBuilder()
    c = b.add_input("c", t(BOOL))
    x = b.add_input("x", a)
    (y,) = b.add("If", [c, x], {"then_branch": same, "else_branch": same})
    g = b.graph("g", [y])
    xs = np.ones(3, np.float32)
    for engine in CPU_ENGINES:
        g.finalize(engine)
        (out,) = g.run([np.array(True), xs])
        assert not np.shares_memory(np.asarray(out), xs)


# -- Loop ----------------------------------------------------------------------------------


def loop_graph(m_known: int | None, stop_early: bool = False) -> kiln.io.ModelGraph:
    """acc <- acc * w + i for i < M (while acc[0] < 100 when ``stop_early``); stacks each acc."""
    vec = t(F32, 3)
    if stop_early:  # inputs i, cond, acc, w, limit; the next condition: min(acc) < limit
        inputs = [t(I64), t(BOOL), vec, vec, t(F32)]
        nodes = [("Cast", (0,), {"to": 1}), ("Mul", (2, 3), {}), ("Add", (6, 5), {})]
        nodes += [("ReduceMin", (7,), {"keepdims": 0}), ("Less", (8, 4), {})]
        out_refs = [9, 7, 2]
    else:  # inputs i, cond, acc, w; the condition passes through
        inputs = [t(I64), t(BOOL), vec, vec]
        nodes = [("Cast", (0,), {"to": 1}), ("Mul", (2, 3), {}), ("Add", (5, 4), {})]
        out_refs = [1, 6, 2]
    body = graph_from_ops(inputs, nodes, out_refs)
    b = GraphBuilder()
    if m_known is None:
        m = b.add_input("m", t(I64))
    else:
        m = b.add_constant(np.array(m_known, np.int64), name="m")
    acc = b.add_input("acc", vec)
    w = b.add_input("w", vec)
    captures = [w]
    if stop_early:
        captures.append(b.add_constant(np.float32(100), name="limit"))
    outs = b.add("Loop", [m, None, acc, *captures], {"body": body, "num_captures": len(captures)})
    return b.graph("g", list(outs))


def loop_reference(m: int, acc: np.ndarray, w: np.ndarray, stop_early: bool = False):
    seen = []
    for i in range(m):
        seen.append(acc)
        acc = (acc * w + np.float32(i)).astype(np.float32)
        if stop_early and not acc.min() < 100:
            break
    return acc, np.array(seen, np.float32).reshape(len(seen), 3)


@pytest.mark.parametrize("m", [0, 1, 5])
def test_loop_with_a_known_trip_count(m: int) -> None:
    g = loop_graph(m)
    g.verify()
    assert g.outputs[1].shape == (m, 3)  # the trip count is known: the scan output's size too
    acc = np.array([1.0, 2.0, -1.0], np.float32)
    w = np.array([0.5, 2.0, 1.5], np.float32)
    for got in run_all(g, [acc, w]):
        for a, b in zip(got, loop_reference(m, acc, w)):
            assert_close(a, b)


def test_loop_with_a_run_time_trip_count_and_early_exit() -> None:
    g = loop_graph(None, stop_early=True)
    g.verify()
    assert isinstance(g.outputs[1].shape[0], SymDim)  # known when the graph runs
    acc = np.array([1.0, 2.0, 3.0], np.float32)
    w = np.array([3.0, 2.0, 2.0], np.float32)
    for m in (0, 2, 50):
        want = loop_reference(m, acc, w, stop_early=True)
        for got in run_all(g, [np.array(m, np.int64), acc, w]):
            for a, b in zip(got, want):
                assert_close(a, b)


def test_loop_zero_iterations_hands_out_a_copy() -> None:
    g = loop_graph(0)
    acc = np.ones(3, np.float32)
    for engine in CPU_ENGINES:
        g.finalize(engine)
        final, _ = g.run([acc, acc])
        assert not np.shares_memory(np.asarray(final), acc)


def test_loop_refuses_a_body_that_does_not_fit() -> None:
    vec = t(F32, 3)
    body = graph_from_ops([t(I64), t(BOOL), vec], [], [1, 2])
    loop = get_op("Loop")
    with pytest.raises(OpArgumentError, match="body.*takes 3 input"):
        loop.infer([t(I64), None, vec, vec], {"body": body, "num_captures": 1})
    with pytest.raises(OpArgumentError, match="num_captures=5"):
        loop.infer([t(I64), None, vec], {"body": body, "num_captures": 5})


# -- Scan ----------------------------------------------------------------------------------


@pytest.mark.parametrize("reverse_in", [0, 1])
@pytest.mark.parametrize("reverse_out", [0, 1])
def test_scan_axes_and_directions(reverse_in: int, reverse_out: int) -> None:
    state, row = t(F32, 2), t(F32, 2)
    body = graph_from_ops([state, row, row], [("Add", (0, 1), {}), ("Mul", (3, 2), {})], [3, 4])
    b = GraphBuilder()
    s0 = b.add_input("s0", state)
    xs = b.add_input("xs", t(F32, 2, 5))
    k = b.add_input("k", row)
    attrs = {
        "body": body,
        "num_scan_inputs": 1,
        "num_captures": 1,
        "scan_input_axes": (1,),
        "scan_input_directions": (reverse_in,),
        "scan_output_axes": (-1,),
        "scan_output_directions": (reverse_out,),
    }
    outs = b.add("Scan", [s0, xs, k], attrs)
    g = b.graph("g", list(outs))
    g.verify()
    assert g.outputs[1].shape == (2, 5)
    s = np.array([0.5, -1.0], np.float32)
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    kk = np.array([1.0, 2.0], np.float32)
    cols = range(4, -1, -1) if reverse_in else range(5)
    ys = []
    for c in cols:
        s = s + x[:, c]
        ys.append(s * kk)
    if reverse_out:
        ys = ys[::-1]
    want = [s, np.stack(ys, axis=-1)]
    feeds = [np.array([0.5, -1.0], np.float32), x, kk]
    for got in run_all(g, feeds):
        for a, w in zip(got, want):
            assert_close(a, w)
    if importlib.util.find_spec("jax") is not None:
        g.finalize("jax")
        for a, w in zip(g.run(feeds), want):
            assert_close(a, w)


def test_scan_over_a_symbolic_length() -> None:
    n = symbol("n")
    body = graph_from_ops([t(F32), t(F32)], [("Add", (0, 1), {})], [2, 2])
    b = GraphBuilder()
    s0 = b.add_input("s0", t(F32))
    xs = b.add_input("xs", t(F32, n))
    outs = b.add("Scan", [s0, xs], {"body": body, "num_scan_inputs": 1})
    g = b.graph("g", list(outs))
    assert g.outputs[1].shape == (n,)
    for size in (0, 4):
        x = np.arange(size, dtype=np.float32)
        for got in run_all(g, [np.float32(1.0).reshape(()), x]):
            assert_close(got[0], np.float32(1 + x.sum()).reshape(()))
            assert_close(got[1], (1 + np.cumsum(x)).astype(np.float32))


# -- the IR around subgraphs -----------------------------------------------------------------


def test_printer_indents_subgraphs() -> None:
    text = str(if_graph())
    assert (
        "    else_branch: graph body(x0: float32[3], x1: float32[3]) -> (sub: float32[3])" in text
    )
    assert "      sub: float32[3] = Sub(x0, x1)" in text


def test_verify_checks_subgraphs_against_the_node() -> None:
    g = if_graph()
    node = g.nodes[0]
    wrong = graph_from_ops([t(F32, 3)], [("Neg", (0,), {})], [1])
    bad = Node(node.op, node.inputs, node.outputs, {**node.attrs, "then_branch": wrong}, "if")
    with pytest.raises(GraphValidationError, match="(?s)then_branch.*takes 1 input"):
        g.with_body([bad]).verify()


def test_verify_refuses_a_subgraph_reading_an_outer_value() -> None:
    """Subgraphs are closed: a body node reading a value of the outer graph is invalid."""
    g = if_graph()
    node = g.nodes[0]
    then = node.attrs["then_branch"]
    x = g.input_values[1]
    inner = then.nodes[0]
    leaky = then.with_body(
        [Node(inner.op, (x, inner.inputs[1]), inner.outputs, {}, inner.name), *then.nodes[1:]]
    )
    bad = Node(node.op, node.inputs, node.outputs, {**node.attrs, "then_branch": leaky}, "if")
    with pytest.raises(GraphValidationError, match="(?s)subgraph .then_branch.*used before"):
        g.with_body([bad]).verify()


def test_cse_merges_only_nodes_with_the_same_subgraph() -> None:
    vec = t(F32, 3)
    neg = graph_from_ops([vec], [("Neg", (0,), {})], [1])
    neg_again = graph_from_ops([vec], [("Neg", (0,), {})], [1])
    b = GraphBuilder()
    c = b.add_input("c", t(BOOL))
    x = b.add_input("x", vec)
    (y1,) = b.add("If", [c, x], {"then_branch": neg, "else_branch": neg})
    (y2,) = b.add("If", [c, x], {"then_branch": neg, "else_branch": neg})
    (y3,) = b.add("If", [c, x], {"then_branch": neg_again, "else_branch": neg})
    (s,) = b.add("Sum", [y1, y2, y3])
    g = b.graph("g", [s])
    merged, count = eliminate_common_subexpressions(g, DefaultsOptions())
    assert count == 1
    assert [n.op for n in merged.nodes].count("If") == 2


def test_optimize_keeps_the_captures() -> None:
    g = loop_graph(4)
    g.optimize()
    g.verify()
    acc = np.array([1.0, 2.0, -1.0], np.float32)
    w = np.array([0.5, 2.0, 1.5], np.float32)
    g.finalize("numpy")
    for a, b in zip(g.run([acc, w]), loop_reference(4, acc, w)):
        assert_close(a, b)


def test_jax_lowers_control_flow_with_static_shapes() -> None:
    """If as lax.cond, Loop as lax.scan (known trip count) or lax.while_loop, Scan as
    lax.scan: the same answers as NumPy."""
    pytest.importorskip("jax")
    x = np.array([1.0, -2.0, 3.5], np.float32)
    w = np.array([0.5, 0.25, -1.0], np.float32)
    g = if_graph()
    g.reassociation_allowed = True  # (XLA's flush-to-zero of subnormal results: accepted)
    g.finalize("jax")
    for cond in (True, False):
        assert_close(g.run([np.array(cond), x, w])[0], (x + w) * 2 if cond else x - w)
    g = loop_graph(4)
    g.reassociation_allowed = True
    g.finalize("jax")
    for a, b in zip(g.run([x, w]), loop_reference(4, x, w)):
        assert_close(a, b)


def test_jax_lowers_a_while_loop_without_scan_outputs() -> None:
    pytest.importorskip("jax")
    vec = t(F32, 3)
    # body(i, cond, acc, limit) -> (sum(acc * 2) < limit, acc * 2) (a sum: jax refuses a
    # float ReduceMin, whose zero's sign is XLA's)
    body = graph_from_ops(
        [t(I64), t(BOOL), vec, t(F32)],
        [("Add", (2, 2), {}), ("ReduceSum", (4,), {"keepdims": 0}), ("Less", (5, 3), {})],
        [6, 4],
    )
    b = GraphBuilder()
    m = b.add_input("m", t(I64))
    acc = b.add_input("acc", vec)
    limit = b.add_input("limit", t(F32))
    (out,) = b.add("Loop", [m, None, acc, limit], {"body": body, "num_captures": 1})
    g = b.graph("g", [out])
    g.reassociation_allowed = True  # (the body's sum is XLA's)
    start = np.array([1.0, 3.0, 2.0], np.float32)
    for engine in ("jax", "numpy", "reference"):
        g.finalize(engine)
        for m_value, lim in ((10, 50.0), (2, 1000.0), (0, 5.0)):
            want = start.copy()
            for _ in range(m_value):
                want = want * 2
                if not want.sum() < lim:
                    break
            got = g.run([np.array(m_value, np.int64), start, np.array(lim, np.float32)])[0]
            assert_close(got, want)


def test_jax_refuses_sizes_known_only_at_run_time() -> None:
    pytest.importorskip("jax")
    g = loop_graph(None)  # scan outputs over a trip count known only when it runs
    with pytest.raises(UnsupportedOperationError, match="Loop with an output size known only"):
        g.finalize("jax")


def test_onnxruntime_runs_control_flow() -> None:
    pytest.importorskip("onnxruntime")
    g = loop_graph(None)
    acc = np.array([1.0, 2.0, 3.0], np.float32)
    w = np.array([3.0, 2.0, 2.0], np.float32)
    g.finalize("onnxruntime")
    for a, b in zip(g.run([np.array(7, np.int64), acc, w]), loop_reference(7, acc, w)):
        assert_close(a, b)


def test_onnxruntime_refuses_a_body_it_would_compute_differently() -> None:
    """The records' engine limits apply inside subgraphs too (ReduceMin skips NaN there)."""
    pytest.importorskip("onnxruntime")
    g = loop_graph(None, stop_early=True)
    with pytest.raises(UnsupportedOperationError, match="body: 'reduce_min'.*ReduceMin"):
        g.finalize("onnxruntime")


def test_engine_selection_weighs_the_iterations() -> None:
    """A node's cost is its subgraph's work times its iterations, so a long loop is worth
    measuring faster engines for."""
    from kiln.exec.select import work_estimate

    one, many = work_estimate(loop_graph(1)), work_estimate(loop_graph(100))
    assert one is not None and many is not None
    assert many > 50 * one
