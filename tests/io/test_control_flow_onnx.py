"""ONNX If/Loop/Scan: import (outer-scope references become captures), export (captures become
outer-scope references again), and agreement with onnxruntime on the same models."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

from ..numerics import assert_close

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
h = onnx.helper
T = onnx.TensorProto


def vi(name: str, elem: int, shape: list | None) -> object:
    return h.make_tensor_value_info(name, elem, shape)


def init(name: str, data: np.ndarray) -> object:
    return onnx.numpy_helper.from_array(np.asarray(data), name)


def model(graph: object, opset: int = 17) -> object:
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    onnx.checker.check_model(m, full_check=True)
    return m


def if_outer() -> object:
    """y = If(c) then x * 2 + w else x - w: both branches read the outer x and w."""
    then = h.make_graph(
        [h.make_node("Mul", ["x", "two"], ["t1"]), h.make_node("Add", ["t1", "w"], ["ty"])],
        "then",
        [],
        [vi("ty", T.FLOAT, ["N", 3])],
        initializer=[init("two", np.float32(2))],
    )
    other = h.make_graph(
        [h.make_node("Sub", ["x", "w"], ["ey"])], "else", [], [vi("ey", T.FLOAT, ["N", 3])]
    )
    g = h.make_graph(
        [h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        "g",
        [vi("c", T.BOOL, []), vi("x", T.FLOAT, ["N", 3])],
        [vi("y", T.FLOAT, ["N", 3])],
        initializer=[init("w", np.array([1, 2, 3], np.float32))],
    )
    return model(g)


def loop_nested() -> object:
    """M iterations of acc += (x if i < 2 else -x), stacking acc: an If inside the body reads x
    from two scopes out."""
    then = h.make_graph([h.make_node("Identity", ["x"], ["tx"])], "t", [], [vi("tx", T.FLOAT, [3])])
    other = h.make_graph([h.make_node("Neg", ["x"], ["nx"])], "e", [], [vi("nx", T.FLOAT, [3])])
    body = h.make_graph(
        [
            h.make_node("Less", ["i", "two"], ["even"]),
            h.make_node("If", ["even"], ["step"], then_branch=then, else_branch=other),
            h.make_node("Add", ["acc", "step"], ["acc2"]),
            h.make_node("Identity", ["cin"], ["cout"]),
        ],
        "body",
        [vi("i", T.INT64, []), vi("cin", T.BOOL, []), vi("acc", T.FLOAT, [3])],
        [vi("cout", T.BOOL, []), vi("acc2", T.FLOAT, [3]), vi("acc2", T.FLOAT, [3])],
        initializer=[init("two", np.int64(2))],
    )
    g = h.make_graph(
        [h.make_node("Loop", ["M", "", "a0"], ["a", "trace"], body=body)],
        "g",
        [vi("M", T.INT64, []), vi("a0", T.FLOAT, [3]), vi("x", T.FLOAT, [3])],
        [vi("a", T.FLOAT, [3]), vi("trace", T.FLOAT, [None, 3])],
    )
    return model(g)


def loop_growing() -> object:
    """while i < limit: v = concat(v, [i]): the loop-carried value grows each iteration."""
    body = h.make_graph(
        [
            h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
            h.make_node("Unsqueeze", ["fi", "ax"], ["fi1"]),
            h.make_node("Concat", ["v", "fi1"], ["v2"], axis=0),
            h.make_node("Less", ["i", "limit"], ["c2"]),
        ],
        "body",
        [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("v", T.FLOAT, [None])],
        [vi("c2", T.BOOL, []), vi("v2", T.FLOAT, [None])],
        initializer=[init("ax", np.array([0], np.int64))],
    )
    g = h.make_graph(
        [h.make_node("Loop", ["", "go", "v0"], ["v"], body=body)],
        "g",
        [vi("go", T.BOOL, []), vi("v0", T.FLOAT, [2]), vi("limit", T.INT64, [])],
        [vi("v", T.FLOAT, [None])],
    )
    return model(g)


def scan_axes() -> object:
    body = h.make_graph(
        [h.make_node("Add", ["s", "xi"], ["s2"]), h.make_node("Mul", ["s2", "k"], ["o"])],
        "body",
        [vi("s", T.FLOAT, [2]), vi("xi", T.FLOAT, [2])],
        [vi("s2", T.FLOAT, [2]), vi("o", T.FLOAT, [2])],
    )
    node = h.make_node(
        "Scan",
        ["s0", "xs"],
        ["sf", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[1],
        scan_output_axes=[-1],
        scan_output_directions=[1],
    )
    g = h.make_graph(
        [node],
        "g",
        [vi("s0", T.FLOAT, [2]), vi("xs", T.FLOAT, [2, 5]), vi("k", T.FLOAT, [2])],
        [vi("sf", T.FLOAT, [2]), vi("ys", T.FLOAT, [2, 5])],
    )
    return model(g)


def scan8() -> object:
    """Scan-8: axis 0 of every input and output is a batch axis."""
    body = h.make_graph(
        [h.make_node("Add", ["s", "xi"], ["s2"]), h.make_node("Mul", ["s2", "s2"], ["o"])],
        "body",
        [vi("s", T.FLOAT, [2]), vi("xi", T.FLOAT, [2])],
        [vi("s2", T.FLOAT, [2]), vi("o", T.FLOAT, [2])],
    )
    node = h.make_node(
        "Scan", ["", "s0", "xs"], ["sf", "ys"], body=body, num_scan_inputs=1, directions=[1]
    )
    g = h.make_graph(
        [node],
        "g",
        [vi("s0", T.FLOAT, [3, 2]), vi("xs", T.FLOAT, [3, 4, 2])],
        [vi("sf", T.FLOAT, [3, 2]), vi("ys", T.FLOAT, [3, 4, 2])],
    )
    return model(g, opset=8)


RNG = np.random.default_rng(0)
CASES = [
    (if_outer, {"c": np.array(True), "x": RNG.standard_normal((2, 3)).astype(np.float32)}),
    (if_outer, {"c": np.array(False), "x": RNG.standard_normal((4, 3)).astype(np.float32)}),
    (
        loop_nested,
        {
            "M": np.array(5, np.int64),
            "a0": np.zeros(3, np.float32),
            "x": np.arange(3.0, dtype=np.float32),
        },
    ),
    (
        loop_nested,
        {
            "M": np.array(0, np.int64),
            "a0": np.ones(3, np.float32),
            "x": np.arange(3.0, dtype=np.float32),
        },
    ),
    (
        loop_growing,
        {"go": np.array(True), "v0": np.zeros(2, np.float32), "limit": np.array(4, np.int64)},
    ),
    (
        scan_axes,
        {
            "s0": np.zeros(2, np.float32),
            "xs": RNG.standard_normal((2, 5)).astype(np.float32),
            "k": np.array([1, 2], np.float32),
        },
    ),
    (
        scan8,
        {
            "s0": RNG.standard_normal((3, 2)).astype(np.float32),
            "xs": RNG.standard_normal((3, 4, 2)).astype(np.float32),
        },
    ),
]
IDS = [f"{make.__name__}-{k}" for k, (make, _) in enumerate(CASES)]


def _ort(m: object, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(m.SerializeToString()).run(None, feeds)


@pytest.mark.parametrize("make, feeds", CASES, ids=IDS)
def test_imported_control_flow_agrees_with_onnxruntime(make, feeds) -> None:
    m = make()
    want = _ort(m, feeds)
    g = kiln.io.load(m)
    g.verify()
    for engine in ("numpy", "reference", "onnxruntime"):
        g.finalize(engine)
        got = g.run(feeds)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert_close(a, b)
    g.optimize()
    g.verify()
    g.finalize("numpy")
    for a, b in zip(g.run(feeds), want):
        assert_close(a, b)


@pytest.mark.parametrize("make, feeds", CASES, ids=IDS)
def test_control_flow_round_trips_through_onnx(make, feeds) -> None:
    """ONNX -> kiln -> ONNX -> (onnxruntime, and kiln again) gives the same answers."""
    want = _ort(make(), feeds)
    g = kiln.io.load(make())
    exported = kiln.io.to_onnx(g)  # checked by onnx.checker inside
    for a, b in zip(_ort(exported, feeds), want):
        assert_close(a, b)
    back = kiln.io.load(exported)
    back.verify()
    back.finalize("numpy")
    for a, b in zip(back.run(feeds), want):
        assert_close(a, b)


def test_import_makes_outer_references_explicit_captures() -> None:
    g = kiln.io.load(loop_nested())
    (loop,) = g.nodes
    assert [v.name if v else None for v in loop.inputs] == ["M", None, "a0", "x"]
    assert loop.attrs["num_captures"] == 1
    body = loop.attrs["body"]
    assert [v.name for v in body.input_values] == ["i", "cin", "acc", "x"]
    (inner,) = [n for n in body.nodes if n.op == "If"]
    assert inner.inputs[1] is body.input_values[3]  # passed down explicitly, again
    for branch in ("then_branch", "else_branch"):
        assert [v.name for v in inner.attrs[branch].input_values] == ["x"]


def test_export_turns_captures_back_into_outer_references() -> None:
    exported = kiln.io.to_onnx(kiln.io.load(loop_nested()))
    (loop,) = exported.graph.node
    assert list(loop.input) == ["M", "", "a0"]  # ONNX's inputs only
    body = next(a.g for a in loop.attribute if a.name == "body")
    assert [i.name for i in body.input][:2] == ["i", "cin"] and len(body.input) == 3
    inner = next(n for n in body.node if n.op_type == "If")
    assert list(inner.input) == [inner.input[0]]
    then = next(a.g for a in inner.attribute if a.name == "then_branch")
    assert "x" in {name for n in then.node for name in n.input}  # read from the outer scope


def test_a_growing_loop_carried_value_gets_a_symbolic_size() -> None:
    g = kiln.io.load(loop_growing())
    body = g.nodes[0].attrs["body"]
    assert not isinstance(body.input_values[2].shape[0], int)
    assert not isinstance(g.outputs[0].shape[0], int)


def test_an_if_on_a_known_condition_imports_the_chosen_branch_only() -> None:
    """The untaken branch may be invalid for these types (a function expanded for several
    ranks): it is not imported, and no If node is left."""
    x = vi("x", T.FLOAT, [4])
    then = h.make_graph([h.make_node("Neg", ["x"], ["n"])], "then", [], [vi("n", T.FLOAT, [4])])
    bad = h.make_graph(  # a Split of 4 into 3 equal parts: wrong for this x
        [h.make_node("Split", ["x"], ["a", "b", "c"], num_outputs=3, axis=0)],
        "else",
        [],
        [vi("a", T.FLOAT, None)],
    )
    nodes = [
        h.make_node("Size", ["x"], ["n_el"]),
        h.make_node("Equal", ["n_el", "four"], ["is4"]),
        h.make_node("If", ["is4"], ["y"], then_branch=then, else_branch=bad),
    ]
    g = h.make_graph(
        nodes, "g", [x], [vi("y", T.FLOAT, [4])], initializer=[init("four", np.int64(4))]
    )
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    loaded = kiln.io.load(m)
    assert "If" not in [n.op for n in loaded.nodes]
    loaded.finalize("numpy")
    xs = np.arange(4, dtype=np.float32)
    assert_close(loaded.run([xs])[0], -xs)


def test_traced_control_flow_round_trips_kiln_onnx_kiln() -> None:
    """kiln -> ONNX -> kiln of a traced graph with nested control flow (a cond inside a
    fori_loop, then a scan): onnxruntime and the graph read back agree with the original."""
    k = np.array([2.0, 3.0], np.float32)

    def f(x):
        def body(i, a):
            return kiln.cond(i < 2, lambda: a + x * k, lambda: a - x)

        a = kiln.fori_loop(0, 5, body, kiln.zeros(2, np.float32))
        return kiln.scan(lambda c, r: (c + r * a, c), kiln.zeros(2, np.float32), kiln.stack([x, a]))

    x = np.array([1.0, -0.5], np.float32)
    graph = kiln.trace(f, x).graph
    graph.finalize("numpy")
    want = [np.asarray(r) for r in graph.run([x])]
    exported = kiln.io.to_onnx(graph)
    for a, b in zip(_ort(exported, {"x": x}), want):
        assert_close(a, b)
    back = kiln.io.load(exported)
    back.verify()
    assert [n.op for n in back.nodes if n.op in ("Loop", "Scan")] == ["Loop", "Scan"]
    back.finalize("numpy")
    for a, b in zip(back.run([x]), want):
        assert_close(a, b)
