"""onnxruntime and half precision: its CPU kernels mostly run float16 in float32 between Casts
it inserts and then merges with neighbouring Casts, the caller's own included, so values skip
NumPy's rounding to float16. Only operators it runs in half precision itself
(``ort_engine._HALF_NATIVE``, measured here) may read or make a float16 value on it; any other
such node refuses the graph, naming the node (SPEC 5b; fuzz 36:1807)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import UnsupportedOperationError
from kiln.ir import expand_node
from kiln.ops.registry import get_op

pytest.importorskip("onnxruntime")
from kiln.exec import ort_engine  # noqa: E402

X = np.array([[-0.7, 0.61, 1 / 3], [0.1, 0.2, 0.3]], np.float32)  # not float16 values


def h(x):
    return x.astype(np.float16)


def up(v):  # back to float32, where ORT's merged Casts would show as float32 digits
    return v.astype(np.float32) * 3


def set_one(x):
    y = h(x)
    y[0, 1] = np.float16(2)
    return up(y)


# Programs that round to float16 (the caller's Cast), run native operators on the result and
# cast it back up: each must give NumPy's bits on onnxruntime.
NATIVE = {
    "transpose": lambda x: up(h(x).T),
    "reshape": lambda x: up(h(x).reshape(-1)),
    "slice": lambda x: up(h(x)[:, 1:]),
    "split": lambda x: up(np.split(h(x), 3, axis=1)[1]),
    "concat": lambda x: up(np.concatenate([h(x), h(x)])),
    "squeeze": lambda x: up(np.squeeze(h(x)[None, :, None], axis=(0, 2))),
    "expand": lambda x: up(np.broadcast_to(h(x)[:1], (3, 3))),
    "gather": lambda x: up(h(x)[[1, 0]]),
    "gather_elements": lambda x: up(np.take_along_axis(h(x), np.array([[1, 0, 2], [0, 0, 1]]), 1)),
    "gather_nd": lambda x: up(h(x)[[1, 0], [2, 1]]),
    "scatter_nd": set_one,
    "isnan": lambda x: np.isnan(h(x)),
    "isinf": lambda x: np.isinf(h(x * 1e5)),  # float32 digits would be finite
    "cast": lambda x: h(x * 100).astype(np.int32),
}

# Operators onnxruntime runs in float32: each program here computed float32 digits there.
REFUSED = {
    "abs": lambda x: up(np.abs(h(x))),
    "neg": lambda x: up(-h(x)),
    "add": lambda x: up(h(x) + h(x)),
    "tile": lambda x: up(np.tile(h(x), 2)),
    "pad": lambda x: up(np.pad(h(x), 1)),
    "triu": lambda x: up(np.triu(h(x))),
    "equal": lambda x: h(x) == h(x * np.float32(1.0001)),
    "cos_dot": lambda x: np.dot(x[0], np.cos(np.isfinite(x[0]))),  # fuzz 36:1807
}


def _graph(fn):
    traced = kiln.trace(fn, X)
    traced.graph.optimize()
    return traced.graph


@pytest.mark.parametrize("name", NATIVE)
def test_native_half_operators_run_with_numpys_rounding(name):
    fn = NATIVE[name]
    graph = _graph(fn)
    graph.finalize(engine="onnxruntime")
    got = np.asarray(graph.run([X])[0])
    want = fn(X)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _half_ops(graph) -> set[str]:
    """The operators of ``graph``'s ONNX form (kiln-domain nodes expanded) that read or make a
    float16 value."""
    ops = set()
    for node in graph.nodes:
        opdef = get_op(node.op)
        inner = expand_node(node, graph.name_scope()) if opdef.domain else [node]
        for n in inner:
            if any(v is not None and v.dtype == np.float16 for v in (*n.inputs, *n.outputs)):
                ops.add(n.op)
    return ops


def test_every_native_half_operator_is_measured():
    measured = set().union(*(_half_ops(_graph(fn)) for fn in NATIVE.values()))
    assert ort_engine._HALF_NATIVE - {"Constant"} <= measured, measured  # (no kernel)


@pytest.mark.parametrize("name", REFUSED)
def test_other_half_operators_refuse_naming_the_node(name):
    graph = _graph(REFUSED[name])
    problems = ort_engine.unsupported_nodes(graph)
    assert any("float16, which onnxruntime computes in float32" in p for p in problems), problems
    with pytest.raises(UnsupportedOperationError, match=r"node '\w+': \w+ on float16"):
        graph.finalize(engine="onnxruntime")
