"""The default pipeline on models written in plain NumPy, and on random expressions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.optim import default_pipeline, transform
from kiln.optim.fuse_elementwise import fuse_elementwise_regions
from kiln.optim.transform import DefaultsOptions

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(9)
D, H, FF = 32, 4, 64


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(f32)


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


PARAMS = {
    "ln1_w": rand(D, scale=0.1) + 1, "ln1_b": rand(D, scale=0.1),
    "wq": rand(D, D, scale=D**-0.5), "wk": rand(D, D, scale=D**-0.5),
    "wv": rand(D, D, scale=D**-0.5), "wo": rand(D, D, scale=D**-0.5),
    "bq": rand(D, scale=0.1), "bo": rand(D, scale=0.1),
    "ln2_w": rand(D, scale=0.1) + 1, "ln2_b": rand(D, scale=0.1),
    "w1": rand(FF, D, scale=D**-0.5), "b1": rand(FF, scale=0.1),
    "w2": rand(D, FF, scale=FF**-0.5), "b2": rand(D, scale=0.1),
}  # fmt: skip


def block(x):
    """A pre-norm transformer block on one sequence (S, D), as NumPy code."""
    p = PARAMS
    h = layer_norm(x, p["ln1_w"], p["ln1_b"])
    s = x.shape[0]
    q = (h @ p["wq"].T + p["bq"]).reshape(s, H, D // H).transpose(1, 0, 2)
    k = (h @ p["wk"].T).reshape(s, H, D // H).transpose(1, 0, 2)
    v = (h @ p["wv"].T).reshape(s, H, D // H).transpose(1, 0, 2)
    att = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(D // H)) @ v
    x = x + att.transpose(1, 0, 2).reshape(s, D) @ p["wo"].T + p["bo"]
    h = layer_norm(x, p["ln2_w"], p["ln2_b"])
    return x + gelu(h @ p["w1"].T + p["b1"]) @ p["w2"].T + p["b2"]


def mlp(x):
    p = PARAMS
    return gelu(x @ p["w1"].T + p["b1"]) @ p["w2"].T + p["b2"]


# The block's layer norms divide by the standard deviation, which LayerNormalization's product
# with the reciprocal rounds otherwise, and GELU's formula is written in another order than the
# Gelu kernel computes: they fuse where reassociation is allowed.
RELAXED = DefaultsOptions(allow_reassociation=True)


def check_model(fn, x, expected_ops, defaults=None, **trace_kwargs):
    g = traced(fn, x, **trace_kwargs)
    before = run(g, x)[0]
    report = g.optimize(defaults=defaults)
    g.verify()
    assert report.fixed_point, str(report)
    assert expected_ops <= set(ops(g)), f"{ops(g)}\n{report}"
    assert_close(run(g, x)[0], before, rtol=1e-4, atol=1e-4)
    assert_close(before, fn(x), rtol=1e-4, atol=1e-4)
    again = g.optimize(defaults=defaults)
    assert again.total_rewrites == 0 and again.iterations == 1
    return g


def test_transformer_block():
    x = rand(6, D)
    g = check_model(block, x, {"LayerNormalization", "Attention", "Gemm", "Gelu"}, RELAXED)
    # q, k, v, the output projection (taking the residual as C) and the two MLP layers:
    # k and v have no bias, so they stay MatMul.
    assert ops(g).count("LayerNormalization") == 2 and ops(g).count("Gemm") == 4
    assert len(g.nodes) < 40


def test_transformer_block_with_a_dynamic_sequence():
    x = rand(6, D)
    g = check_model(block, x, {"LayerNormalization", "Attention", "Gemm", "Gelu"}, RELAXED,
                    dynamic_axes={"x": [0]})  # fmt: skip
    longer = rand(9, D)
    assert_close(run(g, longer)[0], block(longer), rtol=1e-4, atol=1e-4)


def test_mlp():
    g = check_model(mlp, rand(5, D), {"Gemm", "Gelu"}, RELAXED)
    assert ops(g) == ["Gemm", "Gelu", "Gemm"]


def test_default_pipeline_order():
    names = [t.name for t in default_pipeline(elementwise_fusion=True)]
    assert names.index("simplify_algebra") < names.index("fuse_gelu")
    assert names.index("fuse_softmax") < names.index("fuse_attention") < names.index("fuse_gemm")
    assert names.index("fuse_gemm") < names.index("fuse_elementwise")
    assert names[-1] == "eliminate_dead_code" and "eliminate_common_subexpressions" in names
    assert "fuse_elementwise" not in [t.name for t in default_pipeline()]


# -- random elementwise expressions ---------------------------------------------------------

_UNARY = [
    np.exp,
    np.tanh,
    np.abs,
    np.negative,
    np.sin,
    lambda v: v * 1,
    lambda v: v**2,
    lambda v: v**3,
    lambda v: v + 0,
    lambda v: np.negative(-v),
    lambda v: np.maximum(v, 0.0),
]
_BINARY = [
    np.add,
    np.subtract,
    np.multiply,
    np.maximum,
    np.minimum,
    lambda a, b: np.where(a > b, a, b),
]


def _expression(draw_ops):
    def f(x, y):
        values = [x, y]
        for kind, i, j, k in draw_ops:
            a, b = values[i % len(values)], values[j % len(values)]
            if kind == "u":
                values.append(_UNARY[k % len(_UNARY)](a))
            else:
                values.append(_BINARY[k % len(_BINARY)](a, b))
        return values[-1]

    return f


_fuse_all = transform("fuse_elementwise_small")(lambda g, o: fuse_elementwise_regions(g, 1))

_steps = st.lists(
    st.tuples(st.sampled_from("ub"), st.integers(0, 9), st.integers(0, 9), st.integers(0, 20)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=40, deadline=None)
@given(_steps, st.sampled_from([np.float32, np.float64]))
def test_random_elementwise_expressions_optimize_to_equal_results(steps, dtype):
    fn = _expression(steps)
    x = np.linspace(-1.5, 1.5, 12).reshape(3, 4).astype(dtype)
    y = np.linspace(0.7, -0.9, 4).astype(dtype)
    g = traced(fn, x, y)
    before = run(g, x, y)[0]
    g.optimize([*default_pipeline(), _fuse_all])
    g.verify()
    assert_close(run(g, x, y)[0], before, rtol=1e-5, atol=1e-6)
    assert g.optimize([*default_pipeline(), _fuse_all]).total_rewrites == 0


def test_models_with_elementwise_fusion():
    def silu_mlp(x):
        p = PARAMS
        h = x @ p["w1"].T + p["b1"]
        return (h / (1.0 + np.exp(-h))) @ p["w2"].T + p["b2"]

    x = rand(6, D)
    g = traced(silu_mlp, x)
    g.optimize([*default_pipeline(), _fuse_all])
    g.verify()
    assert ops(g) == ["Gemm", "kiln.FusedElementwise", "Gemm"]
    assert_close(run(g, x)[0], silu_mlp(x), rtol=1e-4, atol=1e-4)
    assert g.optimize([*default_pipeline(), _fuse_all]).total_rewrites == 0


def test_the_pipeline_leaves_the_garbage_collector_as_it_found_it():
    """The collector is paused while a pipeline runs (passes make no cycles; its full
    collections walked every live object) and restored after, also when a pass raises."""
    import gc

    import kiln
    from kiln.optim import Transform

    seen = []

    def look(graph, options):
        seen.append(gc.isenabled())
        return graph, 0

    def fail(graph, options):
        raise RuntimeError("a pass that fails")

    g = kiln.trace(lambda x: x + 1.0, np.ones(3)).graph
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            g.optimize([Transform("look", look)])
            assert gc.isenabled() is enabled and seen[-1] is False
            with pytest.raises(RuntimeError, match="a pass that fails"):
                g.optimize([Transform("fail", fail)])
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
