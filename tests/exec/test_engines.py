"""Every engine against the reference executor: on every registry sample, and on whole models.

For each operator, the samples are traced into graphs of one node each (all samples of one
operator in one graph, so an engine that compiles pays once per operator), finalized with each
engine and compared with the reference executor. An engine that cannot run a sample (no
lowering, an attribute combination it leaves to NumPy) skips it; the skip message lists them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.errors import DeviceUnavailableError, UnsupportedOperationError
from kiln.exec import ENGINES, build_plan
from kiln.ops.registry import OpDef, Sample, all_ops
from kiln.optim import DefaultsOptions
from kiln.tensor import dispatch

from ..numerics import assert_close, tolerance

FAST_ENGINES = [e for e in ENGINES if e != "reference"]


def _engine_available(engine: str) -> bool:
    if engine == "jax":
        return importlib.util.find_spec("jax") is not None
    if engine == "onnxruntime":
        return (
            importlib.util.find_spec("onnxruntime") is not None
            and importlib.util.find_spec("onnx") is not None
            and importlib.util.find_spec("kiln.io.onnx_export") is not None
        )
    return True


def _require(engine: str) -> None:
    if engine == "jax":
        pytest.importorskip("jax")
    elif engine == "onnxruntime":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnx")
        if importlib.util.find_spec("kiln.io.onnx_export") is None:
            pytest.skip("kiln.io.onnx_export (graph.to_onnx) does not exist yet")


# -- one-node graphs from samples ------------------------------------------------------------


def _layout(op: OpDef, sample: Sample) -> list[int] | None:
    """Which inputs of ``sample`` are graph inputs (the rest become constants), or None when
    it cannot be traced. Inputs are graph inputs; where the operator needs a value known at
    trace time (a shape, axes, pads), integer inputs after the first become constants."""
    for baked in (False, True):
        positions = [
            i
            for i, x in enumerate(sample.inputs)
            if x is not None and not (baked and i > 0 and x.dtype.kind in "iu")
        ]
        try:
            kiln.trace(_apply(op, [(sample, positions)]), *_runtime([(sample, positions)]))
            return positions
        except Exception:
            continue
    return None


def _apply(op: OpDef, group: list[tuple[Sample, list[int]]]) -> Callable[..., Any]:
    """A function applying ``op`` to every sample of ``group`` (graph inputs in order)."""

    def fn(*xs: Any) -> Any:
        given = iter(xs)
        outputs: list[Any] = []
        for sample, positions in group:
            args = [
                next(given) if i in positions else (None if x is None else kiln.asarray(x))
                for i, x in enumerate(sample.inputs)
            ]
            outputs.extend(dispatch(op, args, sample.attrs))
        return outputs

    return fn


def _runtime(group: list[tuple[Sample, list[int]]]) -> list[np.ndarray]:
    return [sample.inputs[i] for sample, positions in group for i in positions]


def _graph(op: OpDef, group: list[tuple[Sample, list[int]]]) -> tuple[Any, list[np.ndarray]]:
    arrays = _runtime(group)
    return kiln.trace(_apply(op, group), *arrays).graph, arrays


def _cases(op: OpDef) -> list[tuple[str, Sample, list[int]]]:
    out = []
    for i, sample in enumerate(op.samples()):
        positions = _layout(op, sample)
        if positions is not None:
            out.append((f"{op.qualified_name}-{i}-{sample.name}", sample, positions))
    return out


def _compare(engine: str, name: str, graph: Any, arrays: list[np.ndarray], tol: Sample) -> None:
    reference = build_plan(graph, None, "reference").run_arrays(arrays)
    plan = build_plan(graph, None, engine)
    got = plan.run_arrays(plan.check_inputs(list(arrays)))
    assert len(got) == len(reference), name
    for k, (g, r) in enumerate(zip(got, reference)):
        assert isinstance(g, np.ndarray), f"{name} output {k}: {type(g).__name__}"
        rtol, atol = tol.rtol, tol.atol
        if engine != "numpy" and r.dtype.kind == "f":
            # Another compiler's transcendental functions differ from NumPy's by a few ulp.
            base_r, base_a = tolerance(r.dtype)
            rtol = max(rtol or 0.0, 8 * base_r)
            atol = max(atol or 0.0, 8 * base_a)
        assert_close(g, r, rtol=rtol, atol=atol, what=f"{engine} {name} output {k}")


OPS = [pytest.param(op, id=op.qualified_name) for op in all_ops()]


@pytest.mark.parametrize("engine", FAST_ENGINES)
@pytest.mark.parametrize("op", OPS)
def test_engine_matches_reference_on_samples(engine: str, op: OpDef) -> None:
    """All samples of ``op`` in one graph (one compile per operator); when the engine cannot
    run that graph, sample by sample, listing those it cannot run."""
    _require(engine)
    cases = _cases(op)
    if not cases:
        pytest.skip(f"no sample of {op.qualified_name} traces")
    loose = max(cases, key=lambda c: (c[1].rtol or 0.0, c[1].atol or 0.0))[1]
    graph, arrays = _graph(op, [(s, p) for _, s, p in cases])
    try:
        _compare(engine, op.qualified_name, graph, arrays, loose)
        return
    except UnsupportedOperationError:
        assert engine != "numpy", "the numpy engine must run every graph"
    unsupported = []
    for name, sample, positions in cases:
        graph, arrays = _graph(op, [(sample, positions)])
        try:
            _compare(engine, name, graph, arrays, sample)
        except UnsupportedOperationError:
            unsupported.append(name)
    if unsupported:
        pytest.skip(f"{engine} does not run {len(unsupported)} sample(s): {unsupported}")


# -- plan behaviour -------------------------------------------------------------------------


def _gelu(x: Any) -> Any:
    return 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def test_numpy_plan_is_generated_code_with_inplace_reuse() -> None:
    x = np.linspace(-3, 3, 64 * 128, dtype=np.float32).reshape(64, 128)
    graph = kiln.trace(_gelu, x).graph
    graph.finalize("numpy")
    plan = graph.program.plan
    assert "out=" in plan.source and "del " in plan.source
    assert "for " not in plan.source  # straight-line: no interpretation loop
    (y,) = graph.run([x])
    assert_close(y, _gelu(x.astype(np.float64)).astype(np.float32), rtol=1e-5, atol=1e-6)


def test_numpy_plan_never_writes_inputs_or_returned_outputs() -> None:
    x = np.linspace(-3, 3, 8192, dtype=np.float32)
    keep = x.copy()
    graph = kiln.trace(lambda v: (np.exp(v) * 2 + 1, v), x).graph
    graph.finalize("numpy")
    first = graph.program.plan.run_arrays([x])
    snapshot = [a.copy() for a in first]
    second = graph.program.plan.run_arrays([x])
    np.testing.assert_array_equal(x, keep)
    for a, b in zip(first, snapshot):
        np.testing.assert_array_equal(a, b)
    assert first[0] is not second[0]


def test_numpy_plan_is_reentrant_across_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    graph = kiln.trace(_gelu, np.zeros((32, 256), np.float32)).graph
    graph.finalize("numpy")
    inputs = [np.full((32, 256), i / 10, np.float32) for i in range(16)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda a: graph.run([a])[0], inputs * 4))
    for a, y in zip(inputs * 4, results):
        assert_close(y, _gelu(a.astype(np.float64)).astype(np.float32), rtol=1e-5, atol=1e-6)


def test_numpy_plan_checks_inputs() -> None:
    graph = kiln.trace(lambda v: v + 1, np.zeros((2, 3), np.float32)).graph
    graph.finalize("numpy")
    with pytest.raises(kiln.errors.InputMismatchError, match="axis 1"):
        graph.run([np.zeros((2, 4), np.float32)])
    with pytest.raises(kiln.errors.InputMismatchError, match="dtype"):
        graph.run([np.zeros((2, 3), np.float64)])
    (y,) = graph.run({"v": kiln.ones((2, 3), "float32")})
    assert y.tolist() == [[2.0] * 3] * 2


def test_numpy_plan_symbolic_shapes() -> None:
    spec = kiln.TensorSpec(("B", 4), kiln.float32)
    graph = kiln.trace(lambda v: (v * 2).sum(axis=-1), signature=[spec]).graph
    graph.finalize("numpy")
    for batch in (0, 1, 5):
        (y,) = graph.run([np.ones((batch, 4), np.float32)])
        assert y.shape == (batch,)
        assert_close(y, np.full(batch, 8.0, np.float32))


def test_zero_d_outputs_are_arrays() -> None:
    a, b = np.asarray(2, np.float32), np.asarray(3, np.float32)
    graph = kiln.trace(lambda a, b: a * b + a, a, b).graph
    graph.finalize("numpy")
    (y,) = graph.program.plan.run_arrays([np.asarray(2, np.float32), np.asarray(3, np.float32)])
    assert type(y) is np.ndarray and y.shape == () and y == 8


def test_plan_time_folding_of_shape_arithmetic() -> None:
    graph = kiln.trace(lambda v: v.reshape(v.shape[0] * 2, -1), np.zeros((4, 6), np.float32)).graph
    graph.finalize("numpy")
    assert "Shape" not in graph.program.plan.source
    assert graph.run([np.ones((4, 6), np.float32)])[0].shape == (8, 3)


def test_unknown_and_missing_engines() -> None:
    graph = kiln.trace(lambda v: v + 1, np.zeros(3, np.float32)).graph
    with pytest.raises(ValueError, match="unknown engine"):
        graph.finalize("tvm")
    graph.finalize("reference")
    assert type(graph.program.plan).__name__ == "ReferencePlan"


def test_jax_missing_raises_device_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from kiln.exec import jax_engine

    monkeypatch.setattr(jax_engine, "_jax", None)
    monkeypatch.setitem(sys.modules, "jax", None)  # import jax now raises ImportError
    graph = kiln.trace(lambda v: v + 1, np.zeros(3, np.float32)).graph
    with pytest.raises(DeviceUnavailableError, match="pip install jax"):
        graph.finalize("jax")
    assert not jax_engine.available()


def test_automatic_selection_keeps_tiny_graphs_on_numpy() -> None:
    graph = kiln.trace(lambda v: np.exp(v) + 1, np.zeros(8, np.float32)).graph
    graph.finalize()
    assert graph.program.plan.engine == "numpy"
    assert graph.program.plan.selection["work"] < 100


def test_automatic_selection_measures_large_graphs() -> None:
    pytest.importorskip("jax")
    x = np.zeros((512, 1024), np.float32)
    graph = kiln.trace(_gelu, x).graph
    graph.optimize(defaults=DefaultsOptions(allow_reassociation=True))  # else NumPy's tanh
    graph.finalize()
    plan = graph.program.plan
    assert set(plan.selection["seconds"]) >= {"numpy", "jax"}
    assert plan.engine == plan.selection["chosen"]
    (y,) = graph.run([np.full((512, 1024), 0.5, np.float32)])
    assert_close(y, np.full((512, 1024), _gelu(0.5), np.float32), rtol=1e-5, atol=1e-6)


def test_jax_engine_retraces_per_shape_with_a_cap() -> None:
    pytest.importorskip("jax")
    from kiln.exec import jax_engine

    spec = kiln.TensorSpec(("B", 3), kiln.float32)
    graph = kiln.trace(lambda v: np.sqrt(np.abs(v)) * 2, signature=[spec]).graph
    graph.finalize("jax")  # (correctly rounded operations: NumPy's bits)
    for batch in range(jax_engine.MAX_TRACES + 3):
        x = np.full((batch, 3), 0.3, np.float32)
        (y,) = graph.run([x])
        np.testing.assert_array_equal(y, np.sqrt(np.abs(x)) * 2)
    assert len(graph.program.plan._shapes) == jax_engine.MAX_TRACES


# -- whole models ---------------------------------------------------------------------------


def _rng_array(rng: np.random.Generator, *shape: int, scale: float = 0.1) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _mlp() -> tuple[Callable[..., Any], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    w1, b1 = _rng_array(rng, 32, 64), _rng_array(rng, 64)
    w2, b2 = _rng_array(rng, 64, 10), _rng_array(rng, 10)

    def mlp(x: Any) -> Any:
        h = np.maximum(x @ w1 + b1, 0)
        return h @ w2 + b2

    return mlp, [_rng_array(rng, 8, 32, scale=1.0)]


def _transformer() -> tuple[Callable[..., Any], list[np.ndarray]]:
    rng = np.random.default_rng(1)
    d, heads, ffn = 32, 4, 64
    wq, wk, wv, wo = (_rng_array(rng, d, d) for _ in range(4))
    w1, w2 = _rng_array(rng, d, ffn), _rng_array(rng, ffn, d)
    g1, g2 = np.ones(d, np.float32), np.ones(d, np.float32)

    def layer_norm(x: Any, g: np.ndarray) -> Any:
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * g

    def block(x: Any) -> Any:
        s = x.shape[0]
        h = layer_norm(x, g1)
        q = (h @ wq).reshape(s, heads, d // heads).transpose(1, 0, 2)
        k = (h @ wk).reshape(s, heads, d // heads).transpose(1, 0, 2)
        v = (h @ wv).reshape(s, heads, d // heads).transpose(1, 0, 2)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(np.float32(d // heads))
        scores = scores - scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p = p / p.sum(axis=-1, keepdims=True)
        a = (p @ v).transpose(1, 0, 2).reshape(s, d)
        x = x + a @ wo
        h = layer_norm(x, g2)
        return x + _gelu(h @ w1) @ w2

    return block, [_rng_array(rng, 16, d, scale=1.0)]


def _cnn() -> tuple[Callable[..., Any], list[np.ndarray]]:
    rng = np.random.default_rng(2)
    c1, b1 = _rng_array(rng, 8, 3, 3, 3), _rng_array(rng, 8)
    c2, b2 = _rng_array(rng, 8, 8, 3, 3), _rng_array(rng, 8)
    wl = _rng_array(rng, 10, 8 * 4 * 4)

    def cnn(x: Any) -> Any:
        h = kiln.nn.relu(kiln.nn.conv2d(x, c1, b1, padding=1))
        h = kiln.nn.max_pool2d(h, 2)
        h = kiln.nn.relu(kiln.nn.conv2d(h, c2, b2, padding=1))
        h = kiln.nn.avg_pool2d(h, 2)
        return kiln.nn.linear(h.reshape(h.shape[0], -1), wl)

    return cnn, [_rng_array(rng, 2, 3, 16, 16, scale=1.0)]


MODELS: dict[str, Callable[[], tuple[Callable[..., Any], list[np.ndarray]]]] = {
    "mlp": _mlp,
    "transformer": _transformer,
    "cnn": _cnn,
}


@pytest.mark.parametrize("optimize", [False, True], ids=["recorded", "optimized"])
@pytest.mark.parametrize("engine", FAST_ENGINES)
@pytest.mark.parametrize("model", list(MODELS))
def test_engine_matches_reference_on_models(model: str, engine: str, optimize: bool) -> None:
    _require(engine)
    fn, inputs = MODELS[model]()
    graph = kiln.trace(fn, *inputs).graph
    # within tolerances, not bits: XLA's fused multiply-adds accepted (else jax refuses them)
    graph.reassociation_allowed = True
    if optimize:
        graph.optimize()
    reference = build_plan(graph, None, "reference").run_arrays(inputs)
    try:
        graph.finalize(engine)
    except UnsupportedOperationError as exc:
        # an engine refuses a node it would compute differently (onnxruntime's ReduceMax and
        # MaxPool skip NaN), naming it: tests/exec/test_engine_exactness.py
        assert "node '" in str(exc), str(exc)
        pytest.skip(f"{model} on {engine}: {exc}")
    got = graph.run(inputs)
    for g, r in zip(got, reference):
        assert_close(g, r, rtol=1e-4, atol=1e-5, what=f"{model} on {engine}")
