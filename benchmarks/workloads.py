"""The benchmark workloads W0-W5, each written once per framework from the same weights.

A workload is a :class:`Workload`: its inputs (NumPy), ``numpy_fn`` (plain NumPy code, which
kiln captures through NumPy's protocols), ``kiln_fn`` (the function kiln compiles; the same
NumPy code, or ``kiln.nn`` where NumPy has no such operation, e.g. convolution),
``jax_fn`` (jax.numpy) and ``torch_fn`` (torch), each taking and returning arrays of its own
framework.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import kiln

__all__ = ["Workload", "workloads"]


@dataclass
class Workload:
    name: str
    title: str
    inputs: list[np.ndarray]
    numpy_fn: Callable[..., Any]
    kiln_fn: Callable[..., Any]
    jax_fn: Callable[..., Any] | None = None  # built lazily: (jnp, jax) -> fn
    torch_fn: Callable[..., Any] | None = None  # (torch) -> fn
    roofline: Callable[[], Any] | None = None  # the bound to compare with (W2: a copy)
    notes: dict[str, Any] = field(default_factory=dict)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _b(rng: np.random.Generator, n: int) -> np.ndarray:
    """A bias: small, non-zero (a zero bias would let the optimizer drop the add)."""
    return (rng.standard_normal(n) * 0.01).astype(np.float32)


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan_in = shape[0] if len(shape) == 2 else math.prod(shape[1:])
    return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)


# -- W0, W1, W2 --------------------------------------------------------------------------


def _identity(x: Any) -> Any:
    return x


def _five(x: Any, y: Any) -> Any:
    return ((x + y) * x - y) * 0.5 + x


C_GELU = math.sqrt(2.0 / math.pi)


def _gelu_np(x: Any) -> Any:
    return 0.5 * x * (1.0 + np.tanh(C_GELU * (x + 0.044715 * x * x * x)))


def _gelu_xp(xp: Any) -> Callable[[Any], Any]:
    def gelu(x: Any) -> Any:
        return 0.5 * x * (1.0 + xp.tanh(C_GELU * (x + 0.044715 * x * x * x)))

    return gelu


# -- W3: MLP 784-512-512-10 ---------------------------------------------------------------


def _mlp() -> Workload:
    rng = _rng(3)
    w1, b1 = _w(rng, 784, 512), _b(rng, 512)
    w2, b2 = _w(rng, 512, 512), _b(rng, 512)
    w3, b3 = _w(rng, 512, 10), _b(rng, 10)
    x = rng.standard_normal((64, 784)).astype(np.float32)

    def mlp(x: Any) -> Any:
        h = np.maximum(x @ w1 + b1, 0)
        h = np.maximum(h @ w2 + b2, 0)
        return h @ w3 + b3

    def jax_fn(jnp: Any, jax: Any) -> Callable[..., Any]:
        p = [jnp.asarray(a) for a in (w1, b1, w2, b2, w3, b3)]

        def f(x: Any) -> Any:
            h = jnp.maximum(x @ p[0] + p[1], 0)
            h = jnp.maximum(h @ p[2] + p[3], 0)
            return h @ p[4] + p[5]

        return f

    def torch_fn(torch: Any) -> Callable[..., Any]:
        p = [torch.from_numpy(a) for a in (w1, b1, w2, b2, w3, b3)]

        def f(x: Any) -> Any:
            h = torch.relu(x @ p[0] + p[1])
            h = torch.relu(h @ p[2] + p[3])
            return h @ p[4] + p[5]

        return f

    return Workload("W3", "MLP 784-512-512-10, batch 64", [x], mlp, mlp, jax_fn, torch_fn)


# -- W4: pre-LN transformer block -----------------------------------------------------------


def _transformer() -> Workload:
    rng = _rng(4)
    seq, d, heads, ffn = 128, 256, 4, 1024
    hd = d // heads
    wq, wk, wv, wo = (_w(rng, d, d) for _ in range(4))
    w1, b1 = _w(rng, d, ffn), _b(rng, ffn)
    w2, b2 = _w(rng, ffn, d), _b(rng, d)
    g1, be1 = 1 + _b(rng, d), _b(rng, d)
    g2, be2 = 1 + _b(rng, d), _b(rng, d)
    x = rng.standard_normal((seq, d)).astype(np.float32)
    scale = np.float32(1.0 / math.sqrt(hd))

    def make(xp: Any, p: dict[str, Any], swap: Callable[[Any], Any]) -> Callable[[Any], Any]:
        gelu = _gelu_xp(xp)

        def layer_norm(x: Any, g: Any, b: Any) -> Any:
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            return (x - mu) / xp.sqrt(var + 1e-5) * g + b

        def block(x: Any) -> Any:
            h = layer_norm(x, p["g1"], p["be1"])
            q = swap((h @ p["wq"]).reshape(seq, heads, hd))
            k = swap((h @ p["wk"]).reshape(seq, heads, hd))
            v = swap((h @ p["wv"]).reshape(seq, heads, hd))
            s = (q @ k.transpose(0, 2, 1)) * scale
            s = s - s.max(-1, keepdims=True)
            e = xp.exp(s)
            a = (e / e.sum(-1, keepdims=True)) @ v
            x = x + swap(a).reshape(seq, d) @ p["wo"]
            h = layer_norm(x, p["g2"], p["be2"])
            return x + gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]

        return block

    params = {
        "wq": wq,
        "wk": wk,
        "wv": wv,
        "wo": wo,
        "w1": w1,
        "b1": b1,
        "w2": w2,
        "b2": b2,
        "g1": g1,
        "be1": be1,
        "g2": g2,
        "be2": be2,
    }
    block = make(np, params, lambda t: t.transpose(1, 0, 2))

    def jax_fn(jnp: Any, jax: Any) -> Callable[..., Any]:
        p = {k: jnp.asarray(v) for k, v in params.items()}
        return make(jnp, p, lambda t: t.transpose(1, 0, 2))

    def torch_fn(torch: Any) -> Callable[..., Any]:
        p = {k: torch.from_numpy(v) for k, v in params.items()}
        gelu = _gelu_xp(torch)

        def layer_norm(x: Any, g: Any, b: Any) -> Any:
            mu = x.mean(-1, keepdim=True)
            var = ((x - mu) ** 2).mean(-1, keepdim=True)
            return (x - mu) / torch.sqrt(var + 1e-5) * g + b

        def f(x: Any) -> Any:
            h = layer_norm(x, p["g1"], p["be1"])
            q = (h @ p["wq"]).reshape(seq, heads, hd).transpose(0, 1)
            k = (h @ p["wk"]).reshape(seq, heads, hd).transpose(0, 1)
            v = (h @ p["wv"]).reshape(seq, heads, hd).transpose(0, 1)
            s = (q @ k.transpose(1, 2)) * float(scale)
            s = s - s.amax(-1, keepdim=True)
            e = torch.exp(s)
            a = (e / e.sum(-1, keepdim=True)) @ v
            x = x + a.transpose(0, 1).reshape(seq, d) @ p["wo"]
            h = layer_norm(x, p["g2"], p["be2"])
            return x + gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]

        return f

    return Workload(
        "W4",
        "pre-LN transformer block (seq 128, d 256, 4 heads, FFN 1024)",
        [x],
        block,
        block,
        jax_fn,
        torch_fn,
    )


# -- W5: small CNN ----------------------------------------------------------------------


def _conv_np(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """3x3 convolution, stride 1, padding 1, NCHW: im2col by sliding windows + one GEMM."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # N C H W 3 3
    y = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3]))  # N H W O
    return y.transpose(0, 3, 1, 2) + b[:, None, None]


def _pool_np(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def _cnn() -> Workload:
    rng = _rng(5)
    c1, b1 = _w(rng, 16, 3, 3, 3), _b(rng, 16)
    c2, b2 = _w(rng, 32, 16, 3, 3), _b(rng, 32)
    wl, bl = _w(rng, 10, 32 * 8 * 8), _b(rng, 10)
    x = rng.standard_normal((8, 3, 32, 32)).astype(np.float32)

    def cnn_np(x: np.ndarray) -> np.ndarray:
        h = _pool_np(np.maximum(_conv_np(x, c1, b1), 0))
        h = _pool_np(np.maximum(_conv_np(h, c2, b2), 0))
        return h.reshape(h.shape[0], -1) @ wl.T + bl

    def cnn_kiln(x: Any) -> Any:
        h = kiln.nn.max_pool2d(kiln.nn.relu(kiln.nn.conv2d(x, c1, b1, padding=1)), 2)
        h = kiln.nn.max_pool2d(kiln.nn.relu(kiln.nn.conv2d(h, c2, b2, padding=1)), 2)
        return kiln.nn.linear(h.reshape(h.shape[0], -1), wl, bl)

    def jax_fn(jnp: Any, jax: Any) -> Callable[..., Any]:
        p = [jnp.asarray(a) for a in (c1, b1, c2, b2, wl, bl)]

        def conv(x: Any, w: Any, b: Any) -> Any:
            y = jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)))
            return y + b[None, :, None, None]

        def pool(x: Any) -> Any:
            return jax.lax.reduce_window(
                x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"
            )

        def f(x: Any) -> Any:
            h = pool(jnp.maximum(conv(x, p[0], p[1]), 0))
            h = pool(jnp.maximum(conv(h, p[2], p[3]), 0))
            return h.reshape(h.shape[0], -1) @ p[4].T + p[5]

        return f

    def torch_fn(torch: Any) -> Callable[..., Any]:
        p = [torch.from_numpy(a) for a in (c1, b1, c2, b2, wl, bl)]
        fn = torch.nn.functional

        def f(x: Any) -> Any:
            h = fn.max_pool2d(torch.relu(fn.conv2d(x, p[0], p[1], padding=1)), 2)
            h = fn.max_pool2d(torch.relu(fn.conv2d(h, p[2], p[3], padding=1)), 2)
            return fn.linear(h.reshape(h.shape[0], -1), p[4], p[5])

        return f

    return Workload(
        "W5",
        "small CNN (8x3x32x32, two 3x3 convs, pooling, linear)",
        [x],
        cnn_np,
        cnn_kiln,
        jax_fn,
        torch_fn,
    )


def workloads() -> list[Workload]:
    """W0-W5, freshly built (deterministic weights and inputs)."""
    x8 = np.linspace(-1, 1, 8, dtype=np.float32)
    y8 = np.linspace(1, 2, 8, dtype=np.float32)
    big = _rng(2).standard_normal((4096, 1024)).astype(np.float32)
    w0 = Workload(
        "W0",
        "identity function (Python's floor)",
        [x8],
        _identity,
        _identity,
        lambda jnp, jax: _identity,
        lambda torch: _identity,
    )
    w1 = Workload(
        "W1",
        "five elementwise ops on 8-element inputs",
        [x8, y8],
        _five,
        _five,
        lambda jnp, jax: _five,
        lambda torch: _five,
    )
    w2 = Workload(
        "W2",
        "tanh-GELU on 4096x1024 float32",
        [big],
        _gelu_np,
        _gelu_np,
        lambda jnp, jax: _gelu_xp(jnp),
        lambda torch: _gelu_xp(torch),
        roofline=lambda: big.copy(),
    )
    return [w0, w1, w2, _mlp(), _transformer(), _cnn()]
