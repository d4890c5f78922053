"""kiln.cond, kiln.fori_loop and kiln.scan: plain Python eagerly, one If/Loop/Scan node under
a capture (both branches recorded), the same answers as NumPy loops either way."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import ArgumentTypeError, CaptureError

from ..numerics import assert_close

W = np.array([1.0, 2.0, 3.0])


def model(x):
    y = kiln.cond(x.sum() > 0, lambda v: v * W, lambda v: v - W, x)
    z = kiln.fori_loop(0, 3, lambda i, acc: acc * 2 + y * i, y)
    c, ys = kiln.scan(lambda c, r: (c + r * z, c * 1.0), kiln.zeros(3), kiln.stack([x, x + 1]))
    return z, c, ys


def reference(x):
    y = x * W if x.sum() > 0 else x - W
    z = y
    for i in range(3):
        z = z * 2 + y * i
    c, ys = np.zeros(3), []
    for r in (x, x + 1):
        ys.append(c)
        c = c + r * z
    return z, c, np.stack(ys)


XS = [np.ones(3), -np.ones(3), np.array([0.5, -2.0, 1.0])]


@pytest.mark.parametrize("x", XS)
def test_eager_is_plain_python(x) -> None:
    for got, want in zip(model(x), reference(x)):
        assert_close(got, want)


def test_trace_records_one_node_each_and_both_branches() -> None:
    tg = kiln.trace(model, XS[0])
    ops = [n.op for n in tg.graph.nodes]
    assert ops.count("If") == 1 and ops.count("Loop") == 1 and ops.count("Scan") == 1
    (node,) = [n for n in tg.graph.nodes if n.op == "If"]
    assert [n.op for n in node.attrs["then_branch"].nodes] == ["Mul"]
    assert [n.op for n in node.attrs["else_branch"].nodes] == ["Sub"]
    tg.graph.verify()
    tg.graph.reassociation_allowed = True  # (the condition's sum is onnxruntime's)
    for engine in ("numpy", "reference", "onnxruntime"):
        if engine == "onnxruntime":
            pytest.importorskip("onnxruntime")
        tg.finalize(engine)
        for x in XS:  # the branch taken changes with the data, not the trace
            for got, want in zip(tg.run([x]), reference(x)):
                assert_close(got, want)


def test_a_long_loop_does_not_unroll() -> None:
    tg = kiln.trace(lambda x: kiln.fori_loop(0, 1000, lambda i, a: a * 0.5 + 1.0, x), np.zeros(2))
    assert len(tg.graph.nodes) == 1
    tg.finalize("numpy")
    want = np.zeros(2)
    for _ in range(1000):
        want = want * 0.5 + 1.0
    assert_close(tg.run([np.zeros(2)])[0], want)


def test_fori_loop_bounds_may_be_tensors() -> None:
    def f(x, n):
        return kiln.fori_loop(1, n, lambda i, a: a + i.astype(np.float64), x)

    tg = kiln.trace(f, np.zeros(2), np.array(4, np.int64))
    tg.finalize("numpy")
    for n in (1, 4, 7):
        assert_close(
            tg.run([np.zeros(2), np.array(n, np.int64)])[0],
            np.full(2, sum(range(1, n)), np.float64),
        )


@pytest.mark.parametrize("x", XS)
def test_compile_serves_and_replays_control_flow(x) -> None:
    w = np.array([1.0, 2.0, 3.0])

    @kiln.compile
    def f(x):
        return kiln.cond(x.sum() > 0, lambda v: v * w, lambda v: v - w, x)

    for _ in range(3):
        assert_close(f(x), x * w if x.sum() > 0 else x - w)
    w[0] = 10.0  # a closure array is an input of the capture, also inside a branch
    assert_close(f(x), x * w if x.sum() > 0 else x - w)


def test_nested_control_flow_captures_through_every_level() -> None:
    k = np.array([2.0, 3.0])

    def f(x):
        def body(i, a):
            return kiln.cond(i < 2, lambda: a + x * k, lambda: a - x)

        return kiln.fori_loop(0, 5, body, kiln.zeros(2))

    tg = kiln.trace(f, np.ones(2))
    tg.graph.verify()
    tg.finalize("numpy")
    x = np.array([1.0, -1.0])
    want = np.zeros(2)
    for i in range(5):
        want = want + x * k if i < 2 else want - x
    assert_close(tg.run([x])[0], want)
    assert_close(f(x), want)


def test_carried_values_keep_their_type() -> None:
    with pytest.raises(ArgumentTypeError, match="carried leaf 0"):
        kiln.trace(lambda x: kiln.fori_loop(0, 2, lambda i, a: a[:1], x), np.zeros(2))


def test_a_host_read_inside_a_traced_branch_is_refused() -> None:
    def f(x):
        return kiln.cond(x.sum() > 0, lambda: x * 2 if float(x[0]) > 0 else x, lambda: x)

    with pytest.raises(CaptureError, match="host"):
        kiln.trace(f, np.ones(2))
