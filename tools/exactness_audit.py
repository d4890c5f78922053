"""Exactness audit: does a compiled function give eager NumPy's answer bit for bit?

The differential fuzzer (``tools/fuzz.py``) compares with a tolerance, so it cannot see an ulp.
This script runs a catalog of NumPy functions and expressions through kiln and compares every
replayed result with eager NumPy on the same inputs: equal values (``array_equal`` with
``equal_nan``), equal dtype and shape, and equal sign bits for floats (``-0.0`` vs ``0.0``).

    python tools/exactness_audit.py                  # everything (~2-3 minutes on 2 cores)
    python tools/exactness_audit.py --only norm sum  # catalog entries whose name has a word
    python tools/exactness_audit.py --modes compile  # one mode (compile, trace)
    python tools/exactness_audit.py --engines jax onnxruntime  # also those engines (trace)
    python tools/exactness_audit.py --modes compile trace select  # + automatic selection (~1 min)

Modes:

- ``compile``: ``kiln.compile(fn)`` called three times, call 1 (eager, records) on one input
  set and calls 2 and 3 (replays, default engine selection) on fresh inputs of the same shapes
  and dtypes. A call 1 that warns ``CaptureWarning`` (served eagerly) counts as a fallback.
- ``trace``: ``kiln.trace(fn, *inputs)``, optimized, finalized with ``engine="numpy"`` (the
  NumPy plan named explicitly), run on two fresh input sets. ``--engines`` adds the same with
  other engines (``jax``, ``onnxruntime``, ``reference``); an engine that declines a graph
  (``UnsupportedOperationError``: it cannot give NumPy's results) counts as ``refused``. For
  the catalog's small inputs the default selection is the NumPy plan (graphs below
  ``kiln.exec.select.AUTO_MIN_WORK`` are never handed to another engine), so ``--engines``
  is how the optional engines are audited at all.

- ``select`` (opt-in): a few graphs on 1000 x 1200 inputs, large enough for the automatic
  engine selection (``KILN_ENGINE_SELECTION=sync``) to consider jax and onnxruntime; each line
  names the engine chosen (``kiln.explain``'s ``engine:`` line).

Variants per entry and dtype: ``base`` (the entry's shapes), ``noncontig`` (each array a
transposed or strided view), ``size1`` (every size 1), ``empty`` (every size 0); and, in a
second pass, ``special`` (the base shapes with NaN, inf, -inf, -0.0 and 0.0 sprinkled in).
A variant where eager NumPy itself raises is skipped (``n/a``). 0-d arrays for NumPy scalars are
kiln's documented result kind, so results are compared as arrays.

Output: one line per mismatch (mode, entry, dtype, variant, input shapes, what differs, max ulp
and a reproducer), then the fallbacks, then a summary count.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import kiln
from kiln.errors import CaptureWarning

F32_64 = ("float32", "float64")
INTS = ("int64", "int32")

# -- the catalog ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Arg:
    """One array argument: its shape, value domain and dtype (``None``: the entry's dtype)."""

    shape: tuple[int, ...]
    domain: str = "any"
    dtype: str | None = None


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    fn: Callable[..., Any]
    args: tuple[Arg, ...]
    dtypes: tuple[str, ...] = F32_64
    variants: tuple[str, ...] = ("base", "noncontig", "size1", "empty")
    src: str = ""  # the expression, for the reproducer


CATALOG: list[Entry] = []


def entry(
    name: str,
    src: str,
    *args: Arg | tuple[int, ...],
    dtypes: Sequence[str] = F32_64,
    variants: Sequence[str] = ("base", "noncontig", "size1", "empty"),
) -> None:
    """Add an entry computing ``src`` (a lambda's text over a, b, c) on ``args``."""
    fn = eval(src, {"np": np})  # noqa: S307 - our own catalog text
    specs = tuple(a if isinstance(a, Arg) else Arg(a) for a in args)
    CATALOG.append(Entry(name, fn, specs, tuple(dtypes), tuple(variants), src))


M = (7, 5)  # a matrix
V = (9,)  # a vector
T3 = (3, 4, 5)  # a 3-d array

# reductions
for expr in ("np.sum(a)", "np.sum(a, axis=0)", "np.sum(a, axis=1, keepdims=True)",
             "a.sum(axis=-1)", "np.add.reduce(a, axis=0)", "np.mean(a)", "np.mean(a, axis=0)",
             "np.mean(a, axis=1)", "np.var(a)", "np.var(a, axis=0)", "np.var(a, axis=1, ddof=1)",
             "np.std(a)", "np.std(a, axis=0, ddof=1)", "np.std(a, axis=1, keepdims=True)",
             "np.prod(a, axis=0)", "np.prod(a)", "np.min(a, axis=0)", "np.max(a)",
             "np.amax(a, axis=1)", "np.argmin(a, axis=0)", "np.argmax(a)", "np.argmax(a, axis=1)",
             "np.cumsum(a, axis=0)", "np.cumsum(a)", "np.cumprod(a, axis=1)",
             "np.nansum(a, axis=0)", "np.nanmean(a)", "np.nanmax(a, axis=0)",
             "np.average(a, axis=0)", "np.median(a)", "np.median(a, axis=0)",
             "np.percentile(a, 30.0, axis=1)", "np.quantile(a, 0.75)",
             "np.quantile(a, [0.1, 0.5, 0.9], axis=0)", "np.ptp(a, axis=0)",
             "np.sum(a, axis=0, where=a > 0)", "np.count_nonzero(a > 0, axis=0)"):  # fmt: skip
    entry(expr, f"lambda a: {expr}", M)
entry("np.sum(a) int", "lambda a: np.sum(a, axis=0)", Arg(M, "int"), dtypes=INTS)
entry("np.mean(a) int", "lambda a: np.mean(a, axis=0)", Arg(M, "int"), dtypes=INTS)
entry("np.var(a) int", "lambda a: np.var(a)", Arg(M, "int"), dtypes=INTS)
entry("np.sum 3d axes", "lambda a: np.sum(a, axis=(0, 2))", T3)
entry("np.mean 3d axes", "lambda a: np.mean(a, axis=(1, 2))", T3)
entry("np.sum big vector", "lambda a: np.sum(a)", (1003,))
entry("np.mean big", "lambda a: np.mean(a, axis=1)", (3, 517))
entry("np.var big", "lambda a: np.var(a)", (41, 37))
entry("np.std big axis0", "lambda a: np.std(a, axis=0)", (301, 3))

# linear algebra
entry("np.dot 1d", "lambda a, b: np.dot(a, b)", V, V)
entry("np.dot 2d", "lambda a, b: np.dot(a, b)", M, (5, 6))
entry("np.dot 2d-1d", "lambda a, b: np.dot(a, b)", M, (5,))
entry("np.dot Nd", "lambda a, b: np.dot(a, b)", T3, (5, 2))
entry("np.dot 1d big", "lambda a, b: np.dot(a, b)", (513,), (513,))
entry("np.matmul", "lambda a, b: a @ b", M, (5, 6))
entry("np.matmul batch", "lambda a, b: np.matmul(a, b)", (2, 3, 4), (2, 4, 5))
entry("np.matmul bcast", "lambda a, b: a @ b", (2, 3, 4), (4, 5))
entry("np.matmul vec", "lambda a, b: a @ b", (4,), (4,))
entry("np.inner", "lambda a, b: np.inner(a, b)", (3, 4), (5, 4))
entry("np.outer", "lambda a, b: np.outer(a, b)", (4,), (6,))
entry("np.vdot", "lambda a, b: np.vdot(a, b)", M, M)
entry("np.tensordot", "lambda a, b: np.tensordot(a, b, axes=([1, 2], [0, 1]))", T3, (4, 5, 2))
entry("np.tensordot 1", "lambda a, b: np.tensordot(a, b, axes=1)", M, (5, 3))
for spec in ("ij,jk->ik", "ij->i", "ij,ij->i", "i,i->", "ij->ji", "bij,bjk->bik", "ii->i"):
    shapes = {
        "ij,jk->ik": (M, (5, 3)),
        "ij->i": (M,),
        "ij,ij->i": (M, M),
        "i,i->": (V, V),
        "ij->ji": (M,),
        "bij,bjk->bik": ((2, 3, 4), (2, 4, 5)),
        "ii->i": ((5, 5),),
    }[spec]
    names = "a, b" if len(shapes) == 2 else "a"
    entry(f"np.einsum {spec}", f"lambda {names}: np.einsum('{spec}', {names})", *shapes)
for expr, shape in (("np.linalg.norm(a)", V), ("np.linalg.norm(a)", M),
                    ("np.linalg.norm(a, 'fro')", M), ("np.linalg.norm(a, axis=0)", M),
                    ("np.linalg.norm(a, axis=1, keepdims=True)", M), ("np.linalg.norm(a, 1)", V),
                    ("np.linalg.norm(a, np.inf)", V), ("np.linalg.norm(a, 3)", V),
                    ("np.linalg.norm(a, 0)", V), ("np.linalg.norm(a, -np.inf)", V),
                    ("np.linalg.norm(a, 1)", M), ("np.linalg.norm(a, np.inf)", M),
                    ("np.linalg.norm(a, ord=2)", M), ("np.linalg.norm(a, axis=(0, 1))", M),
                    ("np.linalg.norm(a, keepdims=True)", T3), ("np.linalg.norm(a, axis=2)", T3),
                    ("np.linalg.norm(a)", (301,)), ("np.linalg.norm(a)", T3),
                    ("np.trace(a)", M), ("np.kron(a, b)", None)):  # fmt: skip
    if shape is None:
        entry(expr, f"lambda a, b: {expr}", (2, 3), (3, 2))
    else:
        entry(f"{expr} {shape}", f"lambda a: {expr}", shape)

# elementwise math
for expr, domain in (("np.exp(a)", "any"), ("np.exp2(a)", "any"), ("np.log(a)", "pos"),
                     ("np.log2(a)", "pos"), ("np.log10(a)", "pos"), ("np.log1p(a)", "pos"),
                     ("np.expm1(a)", "any"), ("np.sqrt(a)", "pos"), ("np.cbrt(a)", "any"),
                     ("np.square(a)", "any"), ("np.reciprocal(a)", "pos"), ("np.sin(a)", "any"),
                     ("np.cos(a)", "any"), ("np.tan(a)", "any"), ("np.arcsin(a)", "unit"),
                     ("np.arccos(a)", "unit"), ("np.arctan(a)", "any"), ("np.sinh(a)", "any"),
                     ("np.cosh(a)", "any"), ("np.tanh(a)", "any"), ("np.arcsinh(a)", "any"),
                     ("np.arccosh(a)", "ge1"), ("np.arctanh(a)", "unit"), ("np.sign(a)", "any"),
                     ("np.abs(a)", "any"), ("-a", "any"), ("np.floor(a)", "any"),
                     ("np.ceil(a)", "any"), ("np.trunc(a)", "any"), ("np.rint(a)", "any"),
                     ("np.round(a)", "any"), ("np.round(a, 2)", "any"),
                     ("np.around(a, -1)", "big"), ("np.round(a * 100, 1)", "any"),
                     ("np.clip(a, -0.5, 0.5)", "any"), ("np.deg2rad(a)", "any"),
                     ("np.rad2deg(a)", "any"), ("np.sinc(a)", "any"), ("a ** 2", "any"),
                     ("a ** 3", "any"), ("a ** -1", "pos"), ("a ** 0.5", "pos"),
                     ("a ** 1.7", "pos"), ("a ** -2.5", "pos"), ("np.power(a, 4)", "any"),
                     ("np.float_power(a, 1.5)", "pos"), ("np.exp(a) - 1 / (1 + a * a)", "any"),
                     ("1 / (1 + np.exp(-a))", "any"), ("np.sqrt(a * a + 1.0)", "any"),
                     ("a * 0.1 + 0.3", "any"), ("2.5 * a - a / 3", "any"),
                     ("np.maximum(a, 0)", "any"), ("np.nan_to_num(a)", "any"),
                     ("np.isnan(a) | np.isinf(a)", "any"), ("np.signbit(a)", "any"),
                     ("np.copysign(a, -1.0)", "any"), ("np.heaviside(a, 0.5)", "any")):  # fmt: skip
    entry(expr, f"lambda a: {expr}", Arg(M, domain))
for expr, d2 in (("np.power(a, b)", "small"), ("np.hypot(a, b)", "any"),
                 ("np.arctan2(a, b)", "any"), ("np.mod(a, b)", "any"), ("np.fmod(a, b)", "any"),
                 ("np.remainder(a, b)", "any"), ("np.divmod(a, b)", "any"),
                 ("np.floor_divide(a, b)", "any"), ("a // b", "any"), ("a % b", "any"),
                 ("a / b", "any"), ("np.maximum(a, b)", "any"), ("np.minimum(a, b)", "any"),
                 ("np.fmax(a, b)", "any"), ("np.fmin(a, b)", "any"), ("np.logaddexp(a, b)", "any"),
                 ("np.logaddexp2(a, b)", "any"), ("np.copysign(a, b)", "any"),
                 ("np.nextafter(a, b)", "any"), ("np.where(a > b, a, b)", "any"),
                 ("np.where(a > 0, a * b, b - a)", "any"), ("a < b", "any"), ("a == b", "any"),
                 ("np.logical_and(a > 0, b > 0)", "any"), ("np.isclose(a, b)", "any"),
                 ("np.allclose(a, b)", "any")):  # fmt: skip
    entry(expr, f"lambda a, b: {expr}", Arg(M), Arg(M, d2))
entry("np.power(a, b) pos", "lambda a, b: np.power(a, b)", Arg(M, "pos"), Arg(M, "small"))
entry("broadcast a+b", "lambda a, b: a + b * 2", (4, 1, 5), (3, 1))
entry("broadcast hypot", "lambda a, b: np.hypot(a, b)", (4, 1), (5,))
# integers and mixed dtypes
for expr in ("a // b", "a % b", "np.floor_divide(a, b)", "np.remainder(a, b)", "a / b",
             "a ** 2", "np.abs(a)", "np.sign(a)", "a * b + 3", "np.maximum(a, b)",
             "a & b", "a ^ b", "~a", "np.sqrt(np.abs(a))", "np.mean(a * b)"):  # fmt: skip
    entry(f"{expr} int", f"lambda a, b: {expr}", Arg(M, "int"), Arg(M, "nzint"), dtypes=INTS)
for expr in ("a * 0.1", "a + 1e-3", "a / 3.0", "a ** 2.0", "0.7 - a", "a * np.float64(0.1)",
             "a + np.float32(2.5)", "np.exp(a * 0.5)", "a * 3", "a + True"):  # fmt: skip
    entry(f"{expr} scalar", f"lambda a: {expr}", M)
entry("f32 + f64", "lambda a, b: a + b", Arg(M, dtype="float32"), Arg(M, dtype="float64"),
      dtypes=("float32",))  # fmt: skip
entry("int * float", "lambda a, b: a * b", Arg(M, "int", "int64"), M)
entry("int32 / float32", "lambda a, b: a / b", Arg(M, "int", "int32"), M, dtypes=("float32",))
entry("int16 + float32", "lambda a, b: a + b", Arg(M, "int", "int16"), M, dtypes=("float32",))
entry("bool arith", "lambda a, b: (a > 0) + (b > 0) * 2", M, M)
entry("bool sum", "lambda a: np.sum(a > 0, axis=0)", M)
entry("bool mean", "lambda a: np.mean(a > 0)", M)
entry("int mean f32", "lambda a: np.mean(a, dtype=np.float32)", Arg(M, "int"), dtypes=INTS)
entry("sum dtype f64", "lambda a: np.sum(a, dtype=np.float64)", M, dtypes=("float32",))
entry("astype", "lambda a: a.astype(np.float16).astype(np.float32) * 2", M)
entry("astype int", "lambda a: (a * 10).astype(np.int32)", M)

# shape ops, sorting, misc
for expr, shapes in (("np.concatenate([a, b])", (M, M)), ("np.stack([a, b], axis=1)", (M, M)),
                     ("np.hstack([a, b])", (M, M)), ("np.vstack([a, b])", (M, M)),
                     ("np.split(a, [2, 5])", (M,)), ("np.array_split(a, 3, axis=1)", (M,)),
                     ("a.T @ b", (M, M)), ("np.transpose(a, (2, 0, 1)) * 2", (T3,)),
                     ("np.reshape(a, (5, -1)) + 1", (M,)), ("np.flip(a, 0) - a", (M,)),
                     ("np.roll(a, 3, axis=1)", (M,)), ("np.roll(a, -2)", (M,)),
                     ("np.tile(a, (2, 1))", (M,)), ("np.repeat(a, 2, axis=0)", (M,)),
                     ("np.pad(a, 1)", (M,)), ("np.pad(a, ((1, 2), (0, 1)), mode='edge')", (M,)),
                     ("np.diff(a, axis=0)", (M,)), ("np.diff(a, n=2)", (M,)),
                     ("np.gradient(a, axis=0)", (M,)), ("np.gradient(a, 0.5, axis=1)", (M,)),
                     ("np.gradient(a, edge_order=2)", (V,)), ("np.cross(a, b)", ((4, 3), (4, 3))),
                     ("np.triu(a)", (M,)), ("np.tril(a, -1)", (M,)), ("np.diag(a)", (M,)),
                     ("np.diag(a)", (V,)), ("np.diagonal(a, 1)", (M,)),
                     ("np.sort(a, axis=0)", (M,)),
                     ("np.argsort(a, kind='stable')", (M,)), ("np.partition(a, 2)", (M,)),
                     ("np.searchsorted(np.sort(a), b)", (V, V)),
                     ("np.interp(a, np.arange(9.0), b)", (V, V)), ("np.cov(a)", (M,)),
                     ("np.corrcoef(a)", (M,)), ("np.take(a, [0, 2, 4], axis=1)", (M,)),
                     ("a[::2, 1:] * 2", (M,)), ("a[a > 0]", (M,)), ("np.where(a > 0)", (M,)),
                     ("np.clip(a, b, 1.0)", (M, M)), ("np.moveaxis(a, 0, -1) + 0", (T3,)),
                     ("np.broadcast_to(a, (3, 9)) + 0", (V,)), ("np.squeeze(a) * 2", ((1, 5),)),
                     ("np.expand_dims(a, 1) * b", (V, (4,))),
                     ("np.take_along_axis(a, np.argmax(a, 0)[None], 0)", (M,)),
                     ("np.trapezoid(a, axis=0)", (M,)), ("np.convolve(a, b)", (V, (3,))),
                     ("np.histogram(a, bins=4, range=(-2, 2))[0]", (V,)),
                     ("np.unique(a)", (V,)), ("np.cumsum(a[::-1], axis=1)", (M,))):  # fmt: skip
    names = "a, b" if len(shapes) == 2 else "a"
    entry(f"{expr} {shapes[0]}", f"lambda {names}: {expr}", *shapes)
# masked reductions (where=) along the contiguous axis, NumPy scalars in Python arithmetic
entry("np.sum(a, axis=-1, where=a > 0)", "lambda a: np.sum(a, axis=-1, where=a > 0)", (5, 13))
SCALAR_MATH = (
    "np.sum(a) ** 1.7",
    "np.sum(a * a) ** (1 / 3)",
    "np.max(a) ** 3",
    "np.sum(a) ** 0.5",
    "np.mean(a) % 0.7",
    "np.sum(a) // 0.3",
    "np.sum(a) * 0.1 + 2.0",
    "np.min(a) ** -2",
)
entry("np.sum(a, where=a > 0)", "lambda a: np.sum(a, where=a > 0)", (5, 13))
entry("np.mean(a, axis=1, where=a > 0)", "lambda a: np.mean(a, axis=1, where=a > 0)", (5, 13))
for expr in SCALAR_MATH:
    entry(f"{expr} scalar math", f"lambda a: {expr}", Arg(M, "pos"))
# matrix products NumPy sends to other BLAS routines (syrk for a @ a.T, gemv, ddot per element)
entry("a @ a.T", "lambda a: a @ a.T", M)
entry("a.T @ a", "lambda a: a.T @ a", M)
entry("np.dot(a, a.T)", "lambda a: np.dot(a, a.T)", M)
entry("np.dot 2d x Nd", "lambda a, b: np.dot(a, b)", (3, 5), (2, 5, 4))
entry("np.inner 1d", "lambda a, b: np.inner(a, b)", V, V)
entry("np.inner 3d", "lambda a, b: np.inner(a, b)", (2, 3, 4), (5, 4))
entry("np.tensordot 0", "lambda a, b: np.tensordot(a, b, axes=0)", (3,), (4,))
entry("np.matmul 3d x 1d", "lambda a, b: a @ b", T3, (5,))
entry("np.dot mat-vec big", "lambda a, b: np.dot(a, b)", (9, 300), (300,))
# composite expressions as users write them
entry("softmax", "lambda a: np.exp(a - a.max(1, keepdims=True)) / "
      "np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True)", M)  # fmt: skip
entry("layernorm", "lambda a: (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True)"
      " + 1e-5)", M)  # fmt: skip
entry("cosine", "lambda a, b: (a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))", V, V)
entry("pairwise", "lambda a, b: np.sqrt(((a[:, None, :] - b[None]) ** 2).sum(-1))", (4, 3), (5, 3))
entry("gemm+bias", "lambda a, b, c: a @ b + c", (4, 6), (6, 3), (3,))
entry("logsumexp", "lambda a: np.log(np.sum(np.exp(a), axis=0))", M)
entry("zscore", "lambda a: (a - a.mean(0)) / a.std(0)", M)
entry("gelu tanh x*x*x", "lambda a: 0.5 * a * (1.0 + np.tanh(0.7978845608028654 * "
      "(a + 0.044715 * a * a * a)))", M)  # fmt: skip
entry("gelu tanh a**3", "lambda a: a * (1 + np.tanh(0.7978845608028654 * "
      "(a + 0.044715 * a**3))) / 2", M)  # fmt: skip
entry("layernorm rsqrt", "lambda a: (a - a.mean(-1, keepdims=True)) * (1.0 / np.sqrt("
      "((a - a.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True) + 1e-5))", M)  # fmt: skip
entry("rmsnorm", "lambda a: a / np.sqrt(np.mean(a * a, axis=-1, keepdims=True) + 1e-6)", M)
entry("attention", "lambda a, b, c: (lambda s: np.exp(s - s.max(-1, keepdims=True)) / "
      "np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True))(a @ b.transpose(0, 2, 1) "
      "/ 2.0) @ c", (2, 4, 4), (2, 5, 4), (2, 5, 3))  # fmt: skip

# -- inputs -----------------------------------------------------------------------------------

VARIANTS = ("base", "noncontig", "size1", "empty")
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0])


def values(spec: Arg, dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random values of ``spec``'s domain in ``dtype``."""
    d = spec.domain
    if np.dtype(dtype).kind in "iu":
        lo, hi = (1, 6) if d == "nzint" else (-6, 7)
        x = rng.integers(lo, hi, shape)
        if d == "nzint":
            x = x * rng.choice([-1, 1], shape)
        return x.astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    if d in ("int", "nzint"):
        x = rng.integers(-6, 7, shape).astype(float)
    elif d == "pos":
        x = np.abs(rng.standard_normal(shape)) * 2 + 0.05
    elif d == "unit":
        x = rng.uniform(-0.95, 0.95, shape)
    elif d == "ge1":
        x = 1 + np.abs(rng.standard_normal(shape)) * 3
    elif d == "small":
        x = rng.uniform(-3, 3, shape)
    elif d == "big":
        x = rng.standard_normal(shape) * 1000
    else:
        x = rng.standard_normal(shape) * 2
    return x.astype(dtype)


def variant_shape(shape: tuple[int, ...], variant: str) -> tuple[int, ...]:
    """``shape`` as the variant takes it: every size 1 (``size1``) or 0 (``empty``)."""
    if variant == "size1":
        return tuple(1 for _ in shape)
    if variant == "empty":
        return tuple(0 for _ in shape)
    return shape


def make_inputs(
    e: Entry, dtype: str, variant: str, special: bool, rng: np.random.Generator
) -> list[np.ndarray]:
    out = []
    for spec in e.args:
        dt = spec.dtype or dtype
        shape = variant_shape(spec.shape, variant)
        if variant == "noncontig" and len(shape) >= 2:
            x = values(spec, dt, shape[::-1], rng).T  # a transposed (F-ordered) view
        elif variant == "noncontig" and len(shape) == 1:
            x = values(spec, dt, (shape[0] * 2,), rng)[::2]
        else:
            x = values(spec, dt, shape, rng)
        if special and x.size and x.dtype.kind == "f":
            mask = rng.random(x.shape) < 0.3
            x = x.copy()
            x[mask] = rng.choice(SPECIALS, int(mask.sum())).astype(x.dtype)
        out.append(x)
    return out


# -- comparison -------------------------------------------------------------------------------


def leaves(result: Any) -> list[Any]:
    if isinstance(result, (tuple, list)):
        return [y for x in result for y in leaves(x)]
    return [result]


def ordered(x: np.ndarray) -> np.ndarray:
    """Floats as integers in the order of their values (adjacent floats differ by 1)."""
    ints = {2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]
    i = x.view(ints).astype(np.int64)
    return np.where(i < 0, np.int64(np.iinfo(ints).min) - i, i)


def compare(want: Any, got: Any) -> str | None:
    """None when ``got`` is ``want`` bit for bit; else what differs (with max ulp)."""
    w, g = leaves(want), leaves(got)
    if len(w) != len(g):
        return f"{len(g)} results, NumPy {len(w)}"
    for k, (a, b) in enumerate(zip(w, g)):
        a, b = np.asarray(a), np.asarray(b)
        tag = f"[{k}] " if len(w) > 1 else ""
        if a.dtype != b.dtype:
            return f"{tag}dtype {b.dtype}, NumPy {a.dtype}"
        if a.shape != b.shape:
            return f"{tag}shape {b.shape}, NumPy {a.shape}"
        if not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
            if a.dtype.kind == "f":
                an, bn = np.isnan(a), np.isnan(b)
                if (an != bn).any():
                    return f"{tag}NaN placement ({int((an != bn).sum())} of {a.size})"
                fin = np.isfinite(a) & np.isfinite(b)
                if (a[~fin] != b[~fin]).any():
                    return f"{tag}inf placement"
                ulps = np.abs(ordered(a[fin]) - ordered(b[fin]))
                n = int((ulps > 0).sum())
                return f"{tag}values: max {int(ulps.max())} ulp, {n} of {a.size} differ"
            diff = int((a != b).sum())
            return f"{tag}values: {diff} of {a.size} differ (e.g. {a[a != b][0]} vs {b[a != b][0]})"
        if a.dtype.kind == "f" and (np.signbit(a) != np.signbit(b)).any():
            return f"{tag}sign of zero ({int((np.signbit(a) != np.signbit(b)).sum())})"
    return None


# -- running ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    mode: str
    entry: Entry
    dtype: str
    variant: str
    shapes: str
    status: str  # "ok", "mismatch", "fallback", "refused" (an engine declines), "error", "n/a"
    detail: str = ""


def eager(fn: Callable[..., Any], xs: Sequence[np.ndarray]) -> Any:
    """Eager NumPy on the inputs themselves (same layout as the compiled call gets)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*xs)


def run_compile(e: Entry, sets: list[list[np.ndarray]], wait: bool = False) -> tuple[str, str]:
    f = kiln.compile(e.fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with np.errstate(all="ignore"):
            f(*sets[0])
    fell = [w for w in caught if issubclass(w.category, CaptureWarning)]
    if fell:
        return "fallback", str(fell[0].message).split(" at ")[0][:150]
    if str(getattr(f, "state", "")).endswith("Fallback"):
        return "fallback", "state Fallback"
    engine = ""
    if wait:
        f.wait_for_engines(120)
        engine = str(kiln.explain(f)).strip().splitlines()[-1].strip()
    for xs in sets[1:]:
        want = eager(e.fn, xs)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            got = f(*xs)
        why = compare(want, got)
        if why:
            return "mismatch", why + (f" [{engine[:110]}]" if engine else "")
    return "ok", engine[:110]


def run_trace(e: Entry, sets: list[list[np.ndarray]], engine: str) -> tuple[str, str]:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            tg = kiln.trace(e.fn, *sets[0])
        except (kiln.errors.UnsupportedOperationError, kiln.errors.CaptureError) as err:
            return "fallback", f"{type(err).__name__}: {str(err)[:140]}"
        tg.optimize()
        try:
            tg.finalize(engine=engine)
        except (kiln.errors.UnsupportedOperationError, kiln.errors.EngineError) as err:
            return "refused", f"{type(err).__name__}: {str(err)[:140]}"
    for xs in sets[1:]:
        want = eager(e.fn, xs)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            got = tg(*xs)
        got = [np.asarray(t) for t in leaves(got)]
        why = compare(want, got)
        if why:
            return "mismatch", why
    return "ok", ""


def audit(e: Entry, mode: str, dtype: str, variant: str, seed: int) -> Outcome:
    special = variant == "special"
    rng = np.random.default_rng(seed)
    base = "base" if special else variant
    sets = [make_inputs(e, dtype, base, special, rng) for _ in range(3)]
    shapes = " ".join(
        f"{x.dtype}{list(x.shape)}{'' if x.flags.c_contiguous else '(view)'}" for x in sets[0]
    )
    out = Outcome(mode, e, dtype, variant, shapes, "ok")
    try:
        for xs in sets:
            eager(e.fn, xs)
    except Exception:  # noqa: BLE001 - NumPy itself refuses this variant
        out.status = "n/a"
        return out
    try:
        if mode == "compile":
            out.status, out.detail = run_compile(e, sets)
        else:
            out.status, out.detail = run_trace(e, sets, mode.split(":")[1])
    except Exception as err:  # noqa: BLE001 - a kiln failure on a call NumPy runs
        out.status = "error"
        tb = traceback.extract_tb(err.__traceback__)[-1]
        out.detail = (
            f"{type(err).__name__}: {str(err)[:120]} ({tb.filename.split('/')[-1]}:{tb.lineno})"
        )
    return out


# Graphs big enough (AUTO_MIN_WORK) for the automatic engine selection to consider jax and
# onnxruntime: mode "select" runs them with the selection synchronous and reports the engine.
BIG = (
    ("sum rows", "lambda a: a.sum(1)"),
    ("mean rows", "lambda a: a.mean(1)"),
    ("sum of squares", "lambda a: (a * a).sum(1) + a.mean(1)"),
    ("var cols", "lambda a: a.var(0)"),
    ("exp chain", "lambda a: np.tanh(np.exp(a * 0.5) - 1.0) * a"),
    ("matmul", "lambda a: a[:, :300] @ a[:300, :300]"),
    ("softmax rows", "lambda a: np.exp(a - a.max(1, keepdims=True)) / "
     "np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True)"),
    # correctly rounded steps only: an engine may take these, and must give NumPy's bits
    ("softsign minus", "lambda a: a / (abs(a) + 1.0) - a"),
    ("clip shift", "lambda a: np.clip(a - 0.25, -0.5, 0.5) / 3.0"),
    ("multiply-add", "lambda a: a * 3.0 + a[::-1] * -3.0"),  # XLA's fma: 0 vs a residue
)  # fmt: skip


def run_select(dtypes: Sequence[str], seed: int) -> list[Outcome]:
    """The automatic engine selection (synchronous) on BIG graphs of 1000 x 1200 inputs."""
    os.environ["KILN_ENGINE_SELECTION"] = "sync"
    outcomes = []
    for name, src in BIG:
        fn = eval(src, {"np": np})  # noqa: S307 - our own catalog text
        e = Entry(f"{name} (1000x1200)", fn, (Arg((1000, 1200)),), src=src)
        for dtype in dtypes:
            rng = np.random.default_rng(seed := seed + 1)
            sets = [[rng.standard_normal((1000, 1200)).astype(dtype)] for _ in range(3)]
            status, detail = run_compile(e, sets, wait=True)
            out = Outcome("select", e, dtype, "base", f"{dtype}[1000, 1200]", status, detail)
            outcomes.append(out)
    return outcomes


def construct(spec: Arg, dtype: str, variant: str) -> str:
    """Python text making one input like the audit's (R = random normal in a dtype)."""
    dt = spec.dtype or dtype
    shape = variant_shape(spec.shape, variant)
    if variant == "noncontig" and len(shape) >= 2:
        return f"R({shape[::-1]}, '{dt}').T"
    if variant == "noncontig" and len(shape) == 1:
        return f"R(({shape[0] * 2},), '{dt}')[::2]"
    text = f"R({shape}, '{dt}')"
    return text + (" (NaN/inf/-0.0 sprinkled)" if variant == "special" else "")


def reproducer(o: Outcome) -> str:
    made = ", ".join(construct(spec, o.dtype, o.variant) for spec in o.entry.args)
    return (
        f"f = {o.entry.src}; g = kiln.compile(f); xs = [{made}]; g(*xs); g(*new xs) vs f(*new xs)"
    )


def ulp_of(detail: str) -> int:
    if "ulp" not in detail:
        return 1 << 62  # NaN/inf placement, sign, dtype, shape: worse than any ulp count
    return int(detail.split("max ")[1].split(" ulp")[0])


def report(outcomes: list[Outcome], verbose: bool) -> list[tuple[str, str]]:
    """Print the mismatches grouped by entry and dtype (worst first within an entry); returns
    the (entry, status) classes."""
    bad = [o for o in outcomes if o.status in ("mismatch", "error")]
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for o in bad:
        groups.setdefault((o.entry.name, o.dtype), []).append(o)
    print(f"{'entry':44} {'dtype':8} {'worst':>6}  variants / modes / what differs")
    for (name, dtype), items in groups.items():
        # the worst ordinary-value run first (a special-value run only when there is no other)
        items.sort(key=lambda o: (o.variant == "special", -ulp_of(o.detail)))
        worst = items[0]
        ulps = [ulp_of(o.detail) for o in items if o.status == "mismatch"]
        finite = [u for u in ulps if u < 1 << 62]
        shown = str(max(finite)) if finite else ("special" if ulps else "error")
        variants = ",".join(sorted({o.variant for o in items}))
        modes = ",".join(sorted({o.mode for o in items}))
        print(f"{name[:44]:44} {dtype:8} {shown:>6}  {variants} / {modes} / {worst.detail}")
        base = next((o for o in items if o.variant == "base"), None)
        first = base or next((o for o in items if o.variant != "special"), worst)
        print(f"{'':6}repro: {reproducer(first)}")
        if verbose:
            for o in items:
                print(f"{'':6}{o.mode:12} {o.variant:9} {o.shapes}: {o.status}: {o.detail}")
    return sorted({(o.entry.name, o.status) for o in bad})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="entries whose name has a word")
    parser.add_argument("--modes", nargs="*", default=["compile", "trace"])
    parser.add_argument("--engines", nargs="*", default=[], help="more engines for trace mode")
    parser.add_argument("--no-special", action="store_true", help="skip the special-value pass")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-v", "--verbose", action="store_true", help="every failing run")
    args = parser.parse_args()
    modes = []
    select = "select" in args.modes
    for m in [m for m in args.modes if m != "select"]:
        modes += ["trace:numpy"] if m == "trace" else [m]
    modes += [f"trace:{eng}" for eng in args.engines]
    entries = [e for e in CATALOG if not args.only or any(w in e.name for w in args.only)]
    variants_extra = () if args.no_special else ("special",)
    start = time.perf_counter()
    outcomes: list[Outcome] = []
    seed = args.seed
    for e in entries:
        for dtype in e.dtypes:
            for variant in e.variants + variants_extra:
                for mode in modes:
                    seed += 1
                    outcomes.append(audit(e, mode, dtype, variant, seed))
    if select:
        outcomes += run_select(F32_64, seed)
        for o in outcomes[-len(BIG) * 2 :]:
            print(f"select: {o.entry.name:28} {o.dtype:8} {o.status}: {o.detail}")
    elapsed = time.perf_counter() - start

    classes = report(outcomes, args.verbose)
    whole = {o.entry.name for o in outcomes if o.status == "fallback" and o.variant == "base"}
    partial: dict[str, set[str]] = {}
    for o in outcomes:
        if o.status == "fallback" and o.entry.name not in whole:
            partial.setdefault(o.entry.name, set()).add(o.variant)
    print(f"\nfallbacks (served eagerly, exact): {len(whole)} entries:")
    print("  " + "; ".join(sorted(whole)))
    if partial:
        print("fallbacks in some variants only:")
        print("  " + "; ".join(f"{k} [{','.join(sorted(v))}]" for k, v in sorted(partial.items())))
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    print(
        f"\nsummary: {len(entries)} entries, {len(outcomes)} runs in {elapsed:.0f} s: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + f"; {len({c[0] for c in classes})} entries with a mismatch or error"
    )
    return 1 if classes else 0


if __name__ == "__main__":
    sys.exit(main())
