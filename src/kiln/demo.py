"""``kiln demo``: compile a small transformer block written in plain NumPy and show what kiln
does with it: the capture lifecycle, the graph before and after optimization, a shape drift
turning an axis dynamic, and eager vs compiled timings."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kiln

__all__ = ["make_block", "main"]


def make_block(d_model: int = 128, heads: int = 4, ffn: int = 512, seed: int = 0) -> Callable:
    """A pre-LN transformer block over ``(batch, seq, d_model)`` float32, in plain NumPy."""
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    wq, wk, wv, wo = (weight(d_model, d_model) for _ in range(4))
    w1, w2 = weight(d_model, ffn), weight(ffn, d_model)
    b1, b2 = np.zeros(ffn, np.float32), np.zeros(d_model, np.float32)
    g1, g2 = np.ones(d_model, np.float32), np.ones(d_model, np.float32)
    head = d_model // heads

    def layer_norm(x: Any, gain: np.ndarray) -> Any:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-5) * gain

    def gelu(x: Any) -> Any:
        return 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))

    def block(x: Any) -> Any:
        batch, seq, _ = x.shape
        h = layer_norm(x, g1)
        q = (h @ wq).reshape(batch, seq, heads, head).transpose(0, 2, 1, 3)
        k = (h @ wk).reshape(batch, seq, heads, head).transpose(0, 2, 3, 1)
        v = (h @ wv).reshape(batch, seq, heads, head).transpose(0, 2, 1, 3)
        scores = (q @ k) * np.float32(1.0 / np.sqrt(head))
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attn = scores / scores.sum(axis=-1, keepdims=True)
        mixed = (attn @ v).transpose(0, 2, 1, 3).reshape(batch, seq, d_model)
        x = x + mixed @ wo
        return x + gelu(layer_norm(x, g2) @ w1 + b1) @ w2 + b2

    return block


def _timings(fn: Callable[[], Any], repeat: int) -> np.ndarray:
    """Seconds per call, ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return np.array(times)


def _spread(times: np.ndarray) -> str:
    """Median and range, in ms."""
    return (
        f"{np.median(times) * 1e3:8.3f} ms  (range {times.min() * 1e3:.3f} - "
        f"{times.max() * 1e3:.3f})"
    )


def _check(got: Any, x: np.ndarray, block: Callable[[np.ndarray], Any], what: str) -> float:
    """The largest difference of the compiled result from eager NumPy's on ``x``; raises if
    they are not close."""
    want = block(x)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4, err_msg=what)
    return float(np.max(np.abs(np.asarray(got) - want)))


def main(batch: int = 2, seq: int = 64, repeat: int = 20) -> None:
    """Run the demo, printing as it goes."""
    block = make_block()
    x = np.random.default_rng(1).standard_normal((batch, seq, 128)).astype(np.float32)

    print("== kiln demo: a pre-LN transformer block written in plain NumPy ==\n")
    f = kiln.compile(block)
    print(f"before any call:           state = {f.state.name}")
    start = time.perf_counter()
    y = f(x)
    first = time.perf_counter() - start
    print(f"call 1 {x.shape}:   state = {f.state.name}  (served eagerly while recording, "
          f"{first * 1e3:.1f} ms incl. capture + optimize + finalize)")
    y2 = f(x)
    print(f"call 2 {x.shape}:   state = {f.state.name}  (replayed the graph; the Python "
          "function was not called)")
    np.testing.assert_allclose(np.asarray(y2), np.asarray(y), rtol=1e-5, atol=1e-5)
    eager = block(x)
    err = float(np.max(np.abs(np.asarray(y2) - eager)))
    print(f"compiled vs eager NumPy:   max abs difference {err:.2e}\n")

    traced = kiln.trace(block, x)
    print(f"-- the recorded graph ({len(traced.nodes)} nodes) --")
    print(traced)
    report = traced.optimize()
    print(f"\n-- optimize() --\n{report}\n")
    print(f"-- the optimized graph ({len(traced.nodes)} nodes) --")
    print(traced)

    x3 = np.random.default_rng(2).standard_normal((batch + 1, seq, 128)).astype(np.float32)
    err3 = _check(f(x3), x3, block, "after the shape drift")
    print(f"\ncall 3 {x3.shape}:   state = {f.state.name}, recapture_count = "
          f"{f.recapture_count}  (shape drift; vs NumPy {err3:.2e})")
    errors = []
    for n in (1, 5):
        xn = np.random.default_rng(n).standard_normal((n, seq, 128)).astype(np.float32)
        errors.append(_check(f(xn), xn, block, f"batch {n} on the dynamic graph"))
    print(f"calls with batch 1 and 5:  recapture_count = {f.recapture_count}  (the batch axis "
          f"is dynamic now; vs NumPy {max(errors):.2e})")
    print("\n-- kiln.explain(f) --")
    print(kiln.explain(f))

    if hasattr(f, "wait_for_engines"):
        f.wait_for_engines()  # the engine chosen in the background serves from here on
    eager_t = _timings(lambda: block(x), repeat)
    compiled_t = _timings(lambda: f(x), repeat)
    ratio = float(np.median(eager_t) / np.median(compiled_t))
    print(f"\n-- timings, batch {batch}, median and range of {repeat} calls --")
    print(f"eager NumPy:  {_spread(eager_t)}")
    print(f"kiln compile: {_spread(compiled_t)}   ({ratio:.2f}x eager, medians)")
