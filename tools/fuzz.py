"""Differential fuzzer: random NumPy programs run by kiln on every path, compared with NumPy.

Each program is plain Python source over 1-3 inputs (float32, float64, int32, bool; sizes 0 and
1 included; NaN, infinities, signed zeros, huge and tiny values, integer extremes), built from a
small grammar of NumPy operations (ufuncs, scalar arithmetic, broadcasting, reductions with
axes and ``keepdims``, reshape/transpose/slicing/fancy indexing, matmul/dot/tensordot,
concatenate/stack/where, astype). The generator evaluates every candidate statement with NumPy
on the call-1 inputs and on the drifted inputs (a different leading size), so most programs are
valid NumPy; a few are kept that raise, since kiln must then raise too.

Every program is checked on these paths (a *check* is one call on one path):

* ``compile``: ``kiln.compile(f)``: call 1 (eager while capturing), call 2 (replay), a drifted
  call (another leading size: re-capture) and that call again (replay of the re-capture);
* ``dynamic``: ``kiln.compile(f, dynamic=True)``: call 1, call 2, the drifted call;
* ``trace:<engine>``: ``kiln.trace(f, *inputs)``, ``optimize()``, ``finalize(engine=...)``
  and a run, for each installed engine (numpy, reference, jax, onnxruntime).

Each check is one of: ``ok``; ``mismatch`` (a value, NaN position, dtype, shape, signed zero,
output type, aliasing or input mutation differs from NumPy, or kiln returned where NumPy
raised); ``kiln-error`` (a ``KilnError`` where NumPy succeeded); ``internal`` (a non-kiln
exception where NumPy succeeded, or of an unrelated type where NumPy raised); ``refused`` (a
``KilnError`` from ``kiln.trace``/``finalize`` on a trace path: a clean refusal); ``kill``
(the worker process died or ran past ``--timeout`` on that program).

Comparison (see docs/reliability.md): every path gives NumPy's bits (any NaN matches any
NaN; the kind of a difference says what differs first: NaN positions, infinities, the sign of
a zero, or other bits). kiln's own plans always do; a forced jax or onnxruntime engine refuses
a graph with a node it may round otherwise (SPEC 5b), which counts as ``refused``.

Programs run in worker processes (``--jobs``), one program at a time over a pipe; a worker
that dies or times out is recorded as a ``kill`` for its program and restarted. The table goes
to stdout; one reproducer per failure signature (path, step, class, kind or exception type and
first line), the shortest seen, goes to ``--out``.

Usage::

    python tools/fuzz.py --programs 5000 --jobs 2               # the long run
    python tools/fuzz.py --programs 200 --seed 7 --engines numpy jax
    python tools/fuzz.py --show 7:123                            # print program 123 of seed 7
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if "PYTHONPATH" not in os.environ:  # respect an explicit PYTHONPATH (e.g. another checkout)
    sys.path.insert(0, os.path.join(ROOT, "src"))

ENGINES = ("numpy", "reference", "jax", "onnxruntime")
CLASSES = ("ok", "mismatch", "kiln-error", "internal", "refused", "kill")
FAILING = ("mismatch", "internal", "kill")

# --------------------------------------------------------------------------------------------
# Program generation (pure NumPy; the parent regenerates a program to report a kill)
# --------------------------------------------------------------------------------------------

DTYPE_P = {"float32": 0.4, "float64": 0.25, "int32": 0.2, "bool": 0.15}
SIZES = (0, 1, 2, 3, 4, 5)
SIZE_P = (0.04, 0.16, 0.25, 0.25, 0.15, 0.15)
FLOAT_EDGES = {
    "float32": (np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -3e38, 1e-40, 1e-30, 1.0, -1.0, 88.5),
    "float64": (np.nan, np.inf, -np.inf, -0.0, 0.0, 1e300, -1.7e308, 5e-324, 1e-300, 1.0, 710.0),
}
INT_EDGES = (0, 0, -1, 1, -(2**31), 2**31 - 1)
MAX_ELEMENTS = 2000


@dataclass
class Program:
    """A generated program: its source, the call-1 inputs and the drifted inputs."""

    seed: int
    index: int
    names: list[str]
    body: list[str]
    returns: str
    inputs: list[np.ndarray]
    drift: list[np.ndarray]

    @property
    def source(self) -> str:
        lines = [f"def f({', '.join(self.names)}):"]
        lines += [f"    {s}" for s in self.body]
        lines.append(f"    return {self.returns}")
        return "\n".join(lines) + "\n"

    def function(self) -> Callable[..., Any]:
        namespace: dict[str, Any] = {"np": np, "nan": np.nan, "inf": np.inf, "itertools": itertools}
        exec(compile(self.source, f"<fuzz {self.seed}:{self.index}>", "exec"), namespace)
        return namespace["f"]


def array_literal(a: np.ndarray) -> str:
    """Python source that rebuilds ``a`` exactly (dtype, shape, NaN, signed zeros)."""
    dt = a.dtype.name
    if a.size == 0:
        return f"np.zeros({a.shape}, {dt!r})"
    if dt == "bool":
        items = ["True" if v else "False" for v in a.ravel()]
    elif dt.startswith("int"):
        items = [str(int(v)) for v in a.ravel()]
    else:
        items = [str(a.dtype.type(v)) for v in a.ravel()]
    body = f"np.array([{', '.join(items)}], {dt!r})"
    if a.ndim == 1:
        return body
    return f"{body}.reshape({a.shape})"


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values of ``shape`` and ``dtype``; half the arrays carry edge values."""
    edges = rng.random() < 0.5
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype == "int32":
        a = np.asarray(rng.integers(-6, 7, shape), np.int32)
        if edges:
            mask = rng.random(shape) < 0.2
            a[mask] = rng.choice(np.array(INT_EDGES, np.int64), size=int(mask.sum()))
        return a
    a = np.asarray(np.round(rng.uniform(-4, 4, shape), 2), dtype)
    if edges:
        mask = rng.random(shape) < 0.25
        a[mask] = rng.choice(np.array(FLOAT_EDGES[dtype]), size=int(mask.sum())).astype(dtype)
    return a


def pick_dtype(rng: np.random.Generator) -> str:
    return str(rng.choice(list(DTYPE_P), p=list(DTYPE_P.values())))


def pick_size(rng: np.random.Generator) -> int:
    return int(rng.choice(SIZES, p=SIZE_P))


@dataclass
class Var:
    name: str
    value: Any  # call-1 value
    drift: Any  # drifted value; None once the drifted call raises in NumPy

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self.value))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> str:
        return np.asarray(self.value).dtype.name


def _axis(rng: np.random.Generator, ndim: int, allow_none: bool = True) -> Any:
    if ndim == 0 or (allow_none and rng.random() < 0.2):
        return None
    axis = int(rng.integers(0, ndim))
    return axis - ndim if rng.random() < 0.3 else axis


def _pick(rng: np.random.Generator, vs: list[Var]) -> Var:
    """An operand, favouring the newest values so that programs chain rather than fan out."""
    if len(vs) > 2 and rng.random() < 0.6:
        return vs[-1 - int(rng.integers(0, 2))]
    return vs[int(rng.integers(0, len(vs)))]


UNARY = (
    "np.negative",
    "np.abs",
    "np.exp",
    "np.log",
    "np.sqrt",
    "np.tanh",
    "np.sin",
    "np.cos",
    "np.expm1",
    "np.log1p",
    "np.floor",
    "np.ceil",
    "np.sign",
    "np.reciprocal",
    "np.square",
    "np.isnan",
    "np.isinf",
    "np.isfinite",
    "np.logical_not",
    "np.exp2",
    "np.arctan",
    "np.trunc",
    "np.rint",
    "np.sinh",
    "np.cosh",
    "np.log2",
)
BINARY_OPS = ("+", "-", "*", "/", "//", "%", "**", "<", "<=", "==", "!=", ">", ">=", "&", "|", "^")
BINARY_FN = (
    "np.maximum",
    "np.minimum",
    "np.power",
    "np.logical_and",
    "np.logical_or",
    "np.logical_xor",
    "np.true_divide",
    "np.floor_divide",
    "np.remainder",
)
RARE_BINARY_FN = ("np.fmax", "np.fmin", "np.arctan2", "np.hypot", "np.copysign", "np.fmod")
SCALARS = (
    "0",
    "1",
    "2",
    "-1",
    "0.0",
    "-0.0",
    "1.0",
    "2.5",
    "-2.5",
    "0.5",
    "3",
    "7",
    "1e30",
    "nan",
    "inf",
    "-inf",
    "True",
    "np.float32(2.0)",
    "np.int32(3)",
)
IDENTITY_FORMS = (
    "{x} + 0",
    "{x} * 1",
    "{x} + 0.0",
    "{x} - 0.0",
    "{x} * 1.0",
    "{x}.T.T",
    "{x}.astype({x}.dtype)",
    "{x} + (-0.0)",
    "{x} / 1",
    "-(-{x})",
)


def _expr_unary(rng, vs):
    x = _pick(rng, vs)
    return f"{rng.choice(UNARY)}({x.name})"


def _expr_binary(rng, vs):
    x, y = _pick(rng, vs), _pick(rng, vs)
    if rng.random() < 0.5:
        return f"{x.name} {rng.choice(BINARY_OPS)} {y.name}"
    functions = RARE_BINARY_FN if rng.random() < 0.1 else BINARY_FN
    return f"{rng.choice(functions)}({x.name}, {y.name})"


def _expr_scalar(rng, vs):
    x = _pick(rng, vs)
    s = rng.choice(SCALARS)
    op = rng.choice(BINARY_OPS[:7] + ("max", "min"))
    if op == "max":
        return f"np.maximum({x.name}, {s})"
    if op == "min":
        return f"np.minimum({s}, {x.name})"
    if rng.random() < 0.3:
        return f"{s} {op} {x.name}"
    return f"{x.name} {op} {s}"


def _expr_identity(rng, vs):
    x = _pick(rng, vs)
    return str(rng.choice(IDENTITY_FORMS)).format(x=x.name)


def _expr_reduce(rng, vs):
    x = _pick(rng, vs)
    kind = rng.choice(
        ("sum", "mean", "max", "min", "argmax", "argmin", "prod", "any", "all", "cumsum")
    )
    axis = _axis(rng, x.ndim, allow_none=kind != "cumsum" or rng.random() < 0.1)
    if kind == "cumsum":
        return f"np.cumsum({x.name}, axis={axis})"
    keep = ", keepdims=True" if kind not in ("argmax", "argmin") and rng.random() < 0.3 else ""
    if rng.random() < 0.25 and kind in ("sum", "mean", "max", "min", "prod", "any", "all"):
        return (
            f"np.{'amax' if kind == 'max' else 'amin' if kind == 'min' else kind}"
            f"({x.name}, axis={axis}{keep})"
        )
    return f"{x.name}.{kind}(axis={axis}{keep})"


def _expr_shape(rng, vs):
    x = _pick(rng, vs)
    n = x.ndim
    options = []
    if n >= 1:
        options += [
            f"{x.name}.reshape(-1)",
            f"{x.name}[1:]",
            f"{x.name}[::-1]",
            f"{x.name}[..., :2]",
            f"{x.name}[None]",
            f"{x.name}[[0, -1]]",
            f"{x.name}[{x.name}.shape[0] // 2:]",
            f"np.expand_dims({x.name}, -1)",
            f"{x.name}[np.array([0, 0, -1])]",
            f"{x.name}[:, None]" if n >= 1 else "",
        ]
    if n >= 2:
        options += [
            f"{x.name}.reshape({x.name}.shape[0], -1)",
            f"{x.name}.T",
            f"np.swapaxes({x.name}, 0, -1)",
            f"{x.name}[:, ::2]",
            f"{x.name}[:, 0]",
            f"{x.name}[..., -1]",
            f"{x.name}.reshape(-1, {x.shape[-1]})",
            f"np.transpose({x.name}, {tuple(rng.permutation(n).tolist())})",
            f"{x.name}[[0, -1], 1:]",
            f"{x.name}[{x.name}.shape[0] - 1]",
        ]
    if n >= 3:
        options += [
            f"{x.name}.reshape({x.name}.shape[0], {x.shape[1]}, -1)",
            f"{x.name}[:, :, 1]",
            f"np.moveaxis({x.name}, 0, 1)",
        ]
    if n == 0:
        options += [f"{x.name}.reshape(1, 1)", f"np.broadcast_to({x.name}, (2, 3))"]
    if 1 in x.shape:
        options.append(f"np.squeeze({x.name}, axis={x.shape.index(1)})")
    if x.dtype == "bool" and n >= 1:
        options.append(f"np.where({x.name})[0]")
    options.append(f"{x.name}.astype({rng.choice(list(DTYPE_P))!r})")
    return str(rng.choice([o for o in options if o]))


def _expr_matmul(rng, vs):
    pairs = [
        (x, y)
        for x in vs
        for y in vs
        if x.ndim >= 1
        and y.ndim >= 1
        and x.dtype != "bool"
        and y.dtype != "bool"
        and (x.shape[-1] == y.shape[-2 if y.ndim >= 2 else 0])
    ]
    if pairs and rng.random() < 0.85:
        x, y = pairs[int(rng.integers(len(pairs)))]
        form = rng.choice(
            (
                "{x} @ {y}",
                "np.dot({x}, {y})",
                "np.matmul({x}, {y})",
                "np.tensordot({x}, {y}, axes=1)",
            )
        )
        return str(form).format(x=x.name, y=y.name)
    x = _pick(rng, vs)
    form = rng.choice(
        (
            "{x} @ {x}.T",
            "np.dot({x}, {x}.T)",
            "np.tensordot({x}, {x}, axes=1)",
            "np.tensordot({x}, {x}, axes=({a}, {a}))",
            "{x}.T @ {x}",
        )
    )
    return str(form).format(x=x.name, a=_axis(rng, max(x.ndim, 1), allow_none=False))


def _expr_combine(rng, vs):
    x, y = _pick(rng, vs), _pick(rng, vs)
    kind = rng.choice(("concatenate", "stack", "where", "where_scalar"))
    if kind == "concatenate":
        return f"np.concatenate([{x.name}, {y.name}], axis={_axis(rng, x.ndim, False)})"
    if kind == "stack":
        return f"np.stack([{x.name}, {y.name}], axis={_axis(rng, x.ndim + 1, False)})"
    c = _pick(rng, vs)
    cond = c.name if c.dtype == "bool" else f"{c.name} > 0"
    if kind == "where":
        return f"np.where({cond}, {x.name}, {y.name})"
    return f"np.where({cond}, {x.name}, {rng.choice(SCALARS)})"


def _expr_creation(rng, vs):
    x = _pick(rng, vs)
    return str(
        rng.choice(
            (
                f"np.zeros_like({x.name})",
                f"np.ones_like({x.name}) * {x.name}",
                f"np.full_like({x.name}, 2)",
                f"{x.name}.copy()",
                f"np.clip({x.name}, -1, 2)",
                f"np.abs({x.name}) ** 0.5",
                f"np.isclose({x.name}, 0)",
                f"np.nan_to_num({x.name})",
            )
        )
    )


def _expr_branch(rng, vs):
    """Python control flow and arithmetic on sizes (symbolic once an axis is dynamic)."""
    x = _pick(rng, vs)
    if x.ndim == 0:
        return f"{x.name} * 2"
    forms = (
        "({x}[0] * 10 if {x}.shape[0] == 1 else {x}.sum(0))",
        "({x} * 2 if {x}.shape[0] > 2 else {x} - 1)",
        "({x}[:1] if len({x}) >= 1 else {x})",
        "{x} / {x}.shape[0]",
        "{x} * len({x})",
        "{x}.reshape({x}.shape[0] * {x}.shape[-1], -1)" if x.ndim >= 2 else "{x}[::2]",
    )
    return str(rng.choice(forms)).format(x=x.name)


def _expr_loop(rng, vs):
    """A Python loop over rows or columns, as scientists write them (an unrolled trace that
    kiln's loop vectorizer batches back into array operations)."""
    x, y = _pick(rng, vs), _pick(rng, vs)
    u = str(rng.choice(UNARY))
    op = str(rng.choice(("+", "-", "*", "/")))
    forms = [
        "np.stack([{u}({x}[i]) {op} {y} for i in range(len({x}))])",
        "np.array([({x}[i] {op} {y}).sum() for i in range(len({x}))])",
        "np.stack([{x}[i] / ({x}[i].sum() + 1) for i in range(len({x}))])",
        "np.stack([{x}[i : i + 2].max(axis=0) for i in range(len({x}) - 1)])",
        "sum({x}[i] * {y} for i in range(len({x})))",
        "np.stack(list(itertools.accumulate({x})))",
        "np.array([[np.abs({x}[i] - {x}[j]).sum() for j in range(len({x}))]"
        " for i in range(len({x}))])",
    ]
    if x.ndim >= 2:
        forms.append("np.stack([{u}({x}[:, j]) {op} {y} for j in range({x}.shape[1])], axis=1)")
        forms.append("np.stack([{x}[i] @ {x}[i] for i in range(len({x}))])")
    return str(rng.choice(forms)).format(x=x.name, y=y.name, u=u, op=op)


TEMPLATES = (
    (_expr_unary, 0.16),
    (_expr_binary, 0.16),
    (_expr_scalar, 0.14),
    (_expr_identity, 0.05),
    (_expr_reduce, 0.16),
    (_expr_shape, 0.14),
    (_expr_matmul, 0.08),
    (_expr_combine, 0.08),
    (_expr_creation, 0.03),
    (_expr_branch, 0.04),
)


def _evaluate(expr: str, env: dict[str, Any]) -> Any:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the names as globals: a comprehension's body (a loop template) sees them there
        names = {"np": np, "nan": np.nan, "inf": np.inf, "itertools": itertools, **env}
        return eval(expr, names)  # noqa: S307


def _acceptable(value: Any) -> bool:
    if not isinstance(value, (np.ndarray, np.generic)):
        return False
    a = np.asarray(value)
    return a.dtype.kind in "biuf" and a.size <= MAX_ELEMENTS and a.ndim <= 4


def _make_inputs(rng: np.random.Generator) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    n_inputs = int(rng.choice((1, 2, 3), p=(0.4, 0.4, 0.2)))
    ndim = int(rng.choice((0, 1, 2, 3), p=(0.05, 0.3, 0.45, 0.2)))
    batch = int(rng.choice(SIZES, p=(0.04, 0.16, 0.3, 0.3, 0.1, 0.1)))
    drift_batch = int(rng.choice([s for s in (0, 1, 2, 3, 4, 6) if s != batch]))
    first = (batch, *(pick_size(rng) for _ in range(ndim - 1))) if ndim else ()
    shapes: list[tuple[tuple[int, ...], bool]] = [(first, ndim > 0)]
    for _ in range(n_inputs - 1):
        kind = rng.choice(
            ("same", "suffix", "matmul", "scalar", "other"), p=(0.35, 0.25, 0.2, 0.05, 0.15)
        )
        if kind == "same" or ndim == 0:
            shapes.append((first, ndim > 0))
        elif kind == "suffix":
            suffix = list(first[int(rng.integers(1, ndim + 1)) :])
            suffix = [1 if rng.random() < 0.25 else d for d in suffix]
            shapes.append((tuple(suffix), False))
        elif kind == "matmul":
            shapes.append(((first[-1], pick_size(rng)), False))
        elif kind == "scalar":
            shapes.append(((), False))
        else:
            rank = int(rng.integers(1, 3))
            shapes.append(((batch, *(pick_size(rng) for _ in range(rank - 1))), True))
    names = ["a", "b", "c"][:n_inputs]
    inputs, drift = [], []
    for shape, batched in shapes:
        dtype = pick_dtype(rng)
        inputs.append(random_array(rng, shape, dtype))
        drifted = (drift_batch, *shape[1:]) if batched else shape
        drift.append(random_array(rng, drifted, dtype) if batched else inputs[-1].copy())
    return names, inputs, drift


LOOP_P = 0.2  # the share of programs that end in a Python loop (tools/fuzz.py --help)


def _append_loop(
    rng: np.random.Generator,
    body: list[str],
    vs: list[Var],
    env1: dict[str, Any],
    env2: dict[str, Any] | None,
) -> None:
    """End the program with a loop statement (``_expr_loop``), when one evaluates."""
    name = f"t{len(body)}"
    for _attempt in range(8):
        expr = _expr_loop(rng, vs)
        try:
            v1 = _evaluate(expr, env1)
        except Exception:
            continue
        if not _acceptable(v1):
            continue
        if env2 is not None:
            try:
                _evaluate(expr, env2)
            except Exception:
                continue
        body.append(f"{name} = {expr}")
        vs.append(Var(name, v1, None))
        return


def generate(seed: int, index: int) -> Program:
    """Program ``index`` of ``seed``: the same pair always gives the same program."""
    rng = np.random.default_rng([seed, index])
    names, inputs, drift = _make_inputs(rng)
    vs = [Var(n, a, d) for n, a, d in zip(names, inputs, drift)]
    body: list[str] = []
    env1 = {v.name: v.value for v in vs}
    env2: dict[str, Any] | None = {v.name: v.drift for v in vs}
    funcs = [t for t, _ in TEMPLATES]
    weights = np.array([w for _, w in TEMPLATES])
    n_statements = int(rng.integers(1, 7))
    raised = False
    for k in range(n_statements):
        name = f"t{k}"
        for _attempt in range(12):
            expr = funcs[int(rng.choice(len(funcs), p=weights / weights.sum()))](rng, vs)
            try:
                v1 = _evaluate(expr, env1)
            except Exception:
                if rng.random() < 0.04:  # a program that raises in NumPy: kiln must raise too
                    body.append(f"{name} = {expr}")
                    raised = True
                    break
                continue
            if not _acceptable(v1):
                continue
            v2 = None
            if env2 is not None:
                try:
                    v2 = _evaluate(expr, env2)
                except Exception:
                    if rng.random() > 0.3:
                        continue
                    env2 = None  # keep: the drifted call raises in NumPy
            body.append(f"{name} = {expr}")
            env1[name] = v1
            if env2 is not None:
                env2[name] = v2
            vs.append(Var(name, v1, v2))
            break
        if raised:
            break
    if not body:
        body.append(f"t0 = {names[0]} * 2")
        vs.append(Var("t0", None, None))
    loops = np.random.default_rng([seed, index, 1])  # a stream of its own: the programs
    if not raised and loops.random() < LOOP_P:  # without a loop are the ones seeds always gave
        _append_loop(loops, body, vs, env1, env2)
    last = body[-1].split(" = ", 1)[0]
    returns = last
    made = [v.name for v in vs if v.name.startswith("t") and v.name != last]
    if made and rng.random() < 0.25:
        returns = f"{last}, {rng.choice(made)}"
    return Program(seed, index, names, body, returns, inputs, drift)


# --------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one call gave: its value or its exception, and the inputs as it left them."""

    value: Any = None
    error: BaseException | None = None
    inputs_after: list[np.ndarray] = field(default_factory=list)


def fresh(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.array(a, copy=True) for a in arrays]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def as_tuple(value: Any) -> tuple[Any, ...] | None:
    if isinstance(value, (tuple, list)):
        return tuple(value)
    return None


def compare_values(actual: Any, expected: Any) -> tuple[str, str] | None:
    """``(kind, detail)`` of the first difference between a result and NumPy's, bit for bit
    (any NaN matches any NaN), or None."""
    exp_t, act_t = as_tuple(expected), as_tuple(actual)
    if exp_t is not None or act_t is not None:
        if exp_t is None or act_t is None or len(exp_t) != len(act_t):
            return (
                "structure",
                f"result structure {type(actual).__name__} != {type(expected).__name__}",
            )
        for i, (a, e) in enumerate(zip(act_t, exp_t)):
            diff = compare_values(a, e)
            if diff is not None:
                return diff[0], f"output {i}: {diff[1]}"
        return None
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape:
        return "shape", f"shape {a.shape} != NumPy {e.shape}"
    if a.dtype != e.dtype:
        return "dtype", f"dtype {a.dtype} != NumPy {e.dtype}"
    if e.dtype.kind != "f":
        if not np.array_equal(a, e):
            bad = np.argwhere(a != e)[0].tolist() if a.ndim else []
            return "values", f"at {bad}: {a[tuple(bad)]!r} != NumPy {e[tuple(bad)]!r}"
        return None
    return compare_bits(a, e)


def compare_bits(a: np.ndarray, e: np.ndarray) -> tuple[str, str] | None:
    """The first float element whose bits differ (any NaN matches any NaN), or None; the kind
    says what differs: NaN positions, infinities, the sign of a zero, or the value."""
    with np.errstate(all="ignore"):
        nan_a, nan_e = np.isnan(a), np.isnan(e)
        same = (a == e) & (np.signbit(a) == np.signbit(e)) | (nan_a & nan_e)
    if same.all():
        return None
    idx = tuple(np.argwhere(~same)[0].tolist()) if a.ndim else ()
    got, want = a[idx], e[idx]
    if np.isnan(got) != np.isnan(want):
        kind = "nan"
    elif np.isinf(got) or np.isinf(want):
        kind = "inf"
    elif got == want:
        kind = "signed-zero"
    else:
        kind = "bits"
    return kind, f"{kind} differ at {list(idx)}: {got!r} vs NumPy {want!r}"


def leaves(value: Any) -> list[Any]:
    t = as_tuple(value)
    return list(t) if t is not None else [value]


# --------------------------------------------------------------------------------------------
# Running one program on every path (inside a worker)
# --------------------------------------------------------------------------------------------


@dataclass
class Check:
    path: str
    step: str
    cls: str
    kind: str = ""
    detail: str = ""

    @property
    def signature(self) -> str:
        detail = re.sub(r"\d+", "#", self.detail.splitlines()[0] if self.detail else "")
        if self.cls == "mismatch":
            detail = self.kind
        return f"{self.path} {self.cls} {detail}"[:200]


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def run_call(fn: Callable[..., Any], arrays: Sequence[np.ndarray]) -> Outcome:
    given = fresh(arrays)
    try:
        with np.errstate(all="ignore"):
            value = fn(*given)
        return Outcome(value=value, inputs_after=given)
    except Exception as error:  # noqa: BLE001 - every exception is a result here
        return Outcome(error=error, inputs_after=given)


def errors_compatible(kiln_error: BaseException, numpy_error: BaseException) -> bool:
    import kiln

    if isinstance(kiln_error, (kiln.KilnError, type(numpy_error))):
        return True
    bases = (ValueError, TypeError, IndexError, ArithmeticError)
    return any(isinstance(kiln_error, b) and isinstance(numpy_error, b) for b in bases)


def judge(
    path: str,
    step: str,
    got: Outcome,
    want: Outcome,
    program: Program,
    given: Sequence[np.ndarray],
    refusable: bool = False,
    want_numpy: bool = True,
) -> Check:
    """Classify one call of ``path`` against NumPy's outcome on the same inputs."""
    import kiln

    if want.error is not None:
        if got.error is None:
            return Check(
                path,
                step,
                "mismatch",
                "no-error",
                f"kiln returned a result; NumPy raised {first_line(want.error)}",
            )
        if errors_compatible(got.error, want.error):
            return Check(path, step, "ok")
        return Check(
            path,
            step,
            "internal",
            "",
            f"{first_line(got.error)} (NumPy raised {first_line(want.error)})",
        )
    if got.error is not None:
        if isinstance(got.error, kiln.KilnError):
            return Check(
                path, step, "refused" if refusable else "kiln-error", "", first_line(got.error)
            )
        return Check(path, step, "internal", "", first_line(got.error))
    diff = compare_values(got.value, want.value)
    if diff is not None:
        return Check(path, step, "mismatch", *diff)
    for i, (after, expected_after) in enumerate(zip(got.inputs_after, want.inputs_after)):
        if not same_bits(np.asarray(after), expected_after):
            return Check(
                path,
                step,
                "mismatch",
                "mutation",
                f"input {program.names[i]!r} was changed by the call",
            )
    outs, want_outs = leaves(got.value), leaves(want.value)
    arrays = [np.asarray(out) for out in outs]  # a kiln Tensor's own buffer (no copy)
    for i, out in enumerate(arrays):
        for j, inp in enumerate(got.inputs_after):
            if np.shares_memory(out, inp) and not np.shares_memory(
                want_outs[i], want.inputs_after[j]
            ):
                return Check(
                    path,
                    step,
                    "mismatch",
                    "alias",
                    f"output {i} shares memory with input {program.names[j]!r}",
                )
        for k in range(i):
            if np.shares_memory(out, arrays[k]) and not np.shares_memory(
                want_outs[i], want_outs[k]
            ):
                return Check(path, step, "mismatch", "alias", f"outputs {k} and {i} share memory")
    if want_numpy:  # NumPy in, NumPy out (SPEC section 5)
        for i, (out, e) in enumerate(zip(outs, want_outs)):
            numpy_typed = isinstance(e, (np.ndarray, np.generic))  # (an empty loop's sum: 0)
            if (
                not isinstance(out, (np.ndarray, np.generic))
                if numpy_typed
                else type(out) is not type(e)
            ):
                return Check(
                    path,
                    step,
                    "mismatch",
                    "type",
                    f"output {i} is a {type(out).__name__}, NumPy returns {type(e).__name__}",
                )
            if (
                isinstance(out, np.ndarray)
                and isinstance(e, np.ndarray)
                and e.flags.writeable
                and not out.flags.writeable
            ):
                return Check(path, step, "mismatch", "type", f"output {i} is a read-only array")
    return Check(path, step, "ok")


def check_compiled(
    program: Program,
    fn: Callable[..., Any],
    expected: dict[str, Outcome],
    path: str,
    options: dict[str, Any],
    steps: Sequence[str],
) -> list[Check]:
    import kiln

    checks: list[Check] = []
    try:
        compiled = kiln.compile(fn, **options)
    except Exception as error:  # noqa: BLE001
        return [Check(path, "compile()", "internal", "", first_line(error))]
    earlier: list[tuple[Any, Any]] = []  # (returned array, snapshot): results must stay put
    for step in steps:
        arrays = program.drift if step.startswith("drift") else program.inputs
        want = expected["drift" if step.startswith("drift") else "call"]
        got = run_call(compiled, arrays)
        check = judge(path, step, got, want, program, arrays)
        if check.cls == "ok":
            for out, snapshot in earlier:
                if not same_bits(np.asarray(out), snapshot):
                    check = Check(
                        path,
                        step,
                        "mismatch",
                        "overwritten",
                        "a result of an earlier call changed after this call",
                    )
                    break
        checks.append(check)
        if got.error is None:
            for out in leaves(got.value):
                array = np.asarray(out)  # a kiln Tensor's own buffer (no copy)
                earlier.append((array, array.copy()))
    return checks


def check_traced(program: Program, fn: Callable[..., Any], want: Outcome, engine: str) -> Check:
    import kiln

    path = f"trace:{engine}"
    arrays = program.inputs
    try:
        with np.errstate(all="ignore"):
            traced = kiln.trace(fn, *fresh(arrays))
            traced.optimize()
            traced.finalize(engine=engine)
    except Exception as error:  # noqa: BLE001
        return judge(
            path,
            "run",
            Outcome(error=error, inputs_after=fresh(arrays)),
            want,
            program,
            arrays,
            refusable=True,
        )

    def run(*given: np.ndarray) -> Any:
        result = traced(*given)
        return (
            tuple(np.asarray(t) for t in result)
            if isinstance(result, tuple)
            else np.asarray(result)
        )

    got = run_call(run, arrays)
    # A forced engine may refuse one call it cannot run exactly (jax: a subnormal input, which
    # XLA flushes to zero): a clean refusal, like one at finalize.
    refused = isinstance(got.error, kiln.UnsupportedOperationError)
    return judge(path, "run", got, want, program, arrays, refusable=refused, want_numpy=False)


def check_program(program: Program, engines: Sequence[str]) -> list[Check]:
    """Every check of ``program``: the compile paths and one trace per engine."""
    fn = program.function()
    expected = {"call": run_call(fn, program.inputs), "drift": run_call(fn, program.drift)}
    checks = check_compiled(
        program, fn, expected, "compile", {}, ("call1", "call2", "drift", "drift-replay")
    )
    checks += check_compiled(
        program, fn, expected, "dynamic", {"dynamic": True}, ("call1", "call2", "drift")
    )
    for engine in engines:
        checks.append(check_traced(program, fn, expected["call"], engine))
    return checks


# --------------------------------------------------------------------------------------------
# Reproducers
# --------------------------------------------------------------------------------------------


def reproducer(program: Program, check: Check) -> str:
    """Self-contained Python source reproducing ``check`` (the result printed beside NumPy's)."""
    lines = ["import itertools", "import numpy as np", "from numpy import nan, inf", "import kiln"]
    lines += ["", program.source]
    lines += [f"{n} = {array_literal(a)}" for n, a in zip(program.names, program.inputs)]
    call = ", ".join(program.names)
    if not check.path.startswith("trace:"):  # compile, dynamic, or a kill: the compile calls
        drifted = any(not same_bits(a, d) for a, d in zip(program.inputs, program.drift))
        if drifted:
            lines += [f"{n}2 = {array_literal(d)}" for n, d in zip(program.names, program.drift)]
        call2 = ", ".join(f"{n}2" for n in program.names) if drifted else call
        option = "dynamic=True" if check.path == "dynamic" else ""
        step = check.step if check.step in ("call1", "call2", "drift") else "drift-replay"
        lines.append(f"cf = kiln.compile(f{', ' + option if option else ''})")
        order = {
            "call1": [call],
            "call2": [call, call],
            "drift": [call, call, call2],
            "drift-replay": [call, call, call2, call2],
        }[step]
        if check.path == "dynamic" and check.step == "drift":
            order = [call, call, call2]
        for args in order[:-1]:
            lines.append(f"cf({args})")
        lines.append(f"print('kiln: ', cf({order[-1]}))")
        lines.append(f"print('numpy:', f({order[-1]}))")
    else:
        engine = check.path.split(":", 1)[1]
        lines += [
            f"tg = kiln.trace(f, {call})",
            "tg.optimize()",
            f"tg.finalize(engine={engine!r})",
            f"print('kiln: ', tg({call}))",
            f"print('numpy:', f({call}))",
        ]
    header = f"# {check.signature}\n# {check.detail}\n# program {program.seed}:{program.index}"
    return header + "\n" + "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Worker process and the parent's pool
# --------------------------------------------------------------------------------------------


def live_only(program: Program, returns: str) -> Program:
    """``program`` returning ``returns``, without the statements that do not feed it."""
    needed = set(re.findall(r"[A-Za-z_]\w*", returns))
    body: list[str] = []
    for statement in reversed(program.body):
        name, expr = statement.split(" = ", 1)
        if name in needed:
            body.insert(0, statement)
            needed |= set(re.findall(r"[A-Za-z_]\w*", expr))
    return Program(
        program.seed, program.index, program.names, body, returns, program.inputs, program.drift
    )


def shrink(program: Program, check: Check, engines: Sequence[str]) -> Program:
    """The smallest of a few reductions of ``program`` that still fails with ``check``'s
    signature (dead statements dropped, one output instead of two)."""
    last = program.body[-1].split(" = ", 1)[0]
    candidates = [live_only(program, last), live_only(program, program.returns)]
    for candidate in sorted(candidates, key=lambda p: len(p.source)):
        if len(candidate.source) >= len(program.source):
            continue
        try:
            again = check_program(candidate, engines)
        except Exception:  # noqa: BLE001
            continue
        if any(c.signature == check.signature for c in again):
            return candidate
    return program


def worker_main(seed: int, engines: Sequence[str], auto_select: bool = False) -> None:
    """Read program indices on stdin; write one JSON line of checks per program."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything the libraries print goes to stderr, not into the results
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")
    import kiln  # noqa: F401 - imported once, before the first program

    if auto_select:
        import importlib

        select = importlib.import_module("kiln.exec.select")
        if hasattr(select, "AUTO_MIN_WORK"):
            select.AUTO_MIN_WORK = 0  # every capture chooses its engine by measurement
        if hasattr(select, "COMPILE_BUDGET_RUNS"):
            select.COMPILE_BUDGET_RUNS = float("inf")  # whatever the compile costs
        os.environ["KILN_ENGINE_SELECTION"] = "sync"  # chosen during call 1: call 2 runs it
    crash_at = int(os.environ.get("KILN_FUZZ_CRASH_AT", "-1"))  # tests of the kill path
    out.write(json.dumps({"ready": True, "kiln": kiln.__file__}) + "\n")
    reported: dict[str, int] = {}  # signature -> length of the program last reported for it
    for line in sys.stdin:
        index = int(line)
        if index == crash_at:
            os.abort()
        started = time.perf_counter()
        try:
            program = generate(seed, index)
            checks = check_program(program, engines)
        except Exception:  # noqa: BLE001 - a bug of the fuzzer itself is reported, not fatal
            checks = [Check("fuzzer", "-", "internal", "", traceback.format_exc()[-300:])]
            program = None
        repros = {}
        for c in checks:
            if c.cls not in ("mismatch", "internal", "kiln-error") or program is None:
                continue
            if c.signature in repros or reported.get(c.signature, 1 << 30) <= len(program.source):
                continue
            smaller = shrink(program, c, engines)
            reported[c.signature] = len(smaller.source)
            repros[c.signature] = reproducer(smaller, c)
        out.write(
            json.dumps(
                {
                    "index": index,
                    "seconds": time.perf_counter() - started,
                    "checks": [c.__dict__ for c in checks],
                    "repros": repros,
                }
            )
            + "\n"
        )


class Worker:
    """One child process running :func:`worker_main`."""

    def __init__(self, seed: int, engines: Sequence[str], auto_select: bool = False) -> None:
        self.seed, self.engines, self.auto_select = seed, list(engines), auto_select
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            "--seed",
            str(seed),
            *(["--auto-select"] if auto_select else []),
            "--engines",
            *engines,
        ]
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.index: int | None = None
        self.started = 0.0
        self.ready = False
        self.kiln_file = ""

    def send(self, index: int) -> None:
        assert self.proc.stdin is not None
        self.index, self.started = index, time.perf_counter()
        self.proc.stdin.write(f"{index}\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@dataclass
class Report:
    """Everything a run found: per-program checks, counts and reproducers."""

    programs: int = 0
    seed: int = 0
    seconds: float = 0.0
    kiln_file: str = ""
    results: dict[int, list[Check]] = field(default_factory=dict)
    repros: dict[str, str] = field(default_factory=dict)
    signature_counts: collections.Counter[str] = field(default_factory=collections.Counter)

    def add(self, index: int, checks: list[Check], repros: dict[str, str]) -> None:
        self.results[index] = checks
        for c in checks:
            if c.cls in FAILING or c.cls == "kiln-error":
                self.signature_counts[c.signature] += 1
                text = repros.get(c.signature)
                if text and (
                    c.signature not in self.repros or len(text) < len(self.repros[c.signature])
                ):
                    self.repros[c.signature] = text

    def counts(self) -> collections.Counter[str]:
        return collections.Counter(c.cls for cs in self.results.values() for c in cs)

    def failing(self, index: int) -> list[Check]:
        return [c for c in self.results.get(index, []) if c.cls in FAILING]

    def table(self) -> str:
        counts = self.counts()
        checks = sum(counts.values())
        lines = [
            f"kiln: {self.kiln_file}",
            f"programs: {self.programs}   checks: {checks}   seconds: {self.seconds:.0f}",
            "",
            "| class | checks |",
            "|---|---:|",
        ]
        lines += [f"| {c} | {counts.get(c, 0)} |" for c in CLASSES]
        by_path: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for cs in self.results.values():
            for c in cs:
                by_path[f"{c.path} {c.step}"][c.cls] += 1
        lines += ["", "| path | " + " | ".join(CLASSES) + " |", "|---|" + "---:|" * len(CLASSES)]
        for path in sorted(by_path, key=_path_order):
            row = by_path[path]
            lines.append(f"| {path} | " + " | ".join(str(row.get(c, 0)) for c in CLASSES) + " |")
        return "\n".join(lines)

    def failures_text(self) -> str:
        parts = []
        for signature, count in self.signature_counts.most_common():
            text = self.repros.get(signature, f"# {signature}\n# (no reproducer recorded)\n")
            where = sorted(
                i for i, cs in self.results.items() if any(c.signature == signature for c in cs)
            )
            listed = " ".join(f"{self.seed}:{i}" for i in where)
            parts.append(f"# ===== {count} check(s) =====\n# in programs: {listed}\n{text}")
        return "\n".join(parts)


def _path_order(path: str) -> tuple[int, str]:
    order = [
        "compile call1",
        "compile call2",
        "compile drift",
        "compile drift-replay",
        "dynamic call1",
        "dynamic call2",
        "dynamic drift",
    ]
    return (order.index(path), "") if path in order else (len(order), path)


def installed_engines() -> list[str]:
    found = ["numpy", "reference"]
    for engine, modules in (("jax", ("jax",)), ("onnxruntime", ("onnxruntime", "onnx"))):
        try:
            for module in modules:
                __import__(module)
            found.append(engine)
        except Exception:  # noqa: BLE001
            pass
    return found


def run_fuzz(
    programs: int,
    seed: int = 0,
    jobs: int = 1,
    engines: Sequence[str] | None = None,
    timeout: float = 60.0,
    indices: Sequence[int] | None = None,
    progress: bool = False,
    auto_select: bool = False,
) -> Report:
    """Run programs ``indices`` (default ``range(programs)``) of ``seed`` in ``jobs`` workers."""
    engines = list(engines) if engines is not None else installed_engines()
    todo = collections.deque(indices if indices is not None else range(programs))
    report = Report(programs=len(todo), seed=seed)
    started = time.perf_counter()
    workers = [Worker(seed, engines, auto_select) for _ in range(max(1, min(jobs, len(todo))))]
    done = 0
    try:
        while todo or any(w.index is not None for w in workers):
            for w in workers:
                if w.index is None and todo and w.ready:
                    w.send(todo.popleft())
            streams = {w.proc.stdout.fileno(): w for w in workers}  # type: ignore[union-attr]
            readable, _, _ = select.select(list(streams), [], [], 0.5)
            for fd in readable:
                w = streams[fd]
                line = w.proc.stdout.readline()  # type: ignore[union-attr]
                if not line:
                    _record_kill(report, w, seed, f"the worker process died (exit {w.proc.poll()})")
                    workers[workers.index(w)] = _restart(w)
                    continue
                message = json.loads(line)
                if message.get("ready"):
                    w.ready, report.kiln_file = True, message["kiln"]
                    continue
                checks = [Check(**c) for c in message["checks"]]
                report.add(message["index"], checks, message["repros"])
                w.index = None
                done += 1
                if progress and done % 100 == 0:
                    print(
                        f"  {done} programs, {time.perf_counter() - started:.0f} s",
                        file=sys.stderr,
                        flush=True,
                    )
            now = time.perf_counter()
            for i, w in enumerate(workers):
                if w.index is not None and now - w.started > timeout:
                    _record_kill(report, w, seed, f"timed out after {timeout:.0f} s")
                    workers[i] = _restart(w)
                elif not w.ready and w.proc.poll() is not None:
                    raise RuntimeError(
                        f"a fuzz worker could not start: run {' '.join(w.proc.args)} to see why"
                    )  # type: ignore
    finally:
        for w in workers:
            w.stop()
    report.seconds = time.perf_counter() - started
    return report


def _record_kill(report: Report, worker: Worker, seed: int, why: str) -> None:
    index = worker.index
    if index is None:
        return
    check = Check("program", "-", "kill", "kill", why)
    program = generate(seed, index)
    text = reproducer(program, check)
    report.add(index, [check], {check.signature: text})
    worker.index = None


def _restart(worker: Worker) -> Worker:
    worker.stop()
    return Worker(worker.seed, worker.engines, worker.auto_select)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument(
        "--engines",
        nargs="*",
        default=None,
        help=f"trace engines to check (default: the installed ones of {', '.join(ENGINES)})",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per program")
    parser.add_argument(
        "--out",
        default=os.path.join(tempfile.gettempdir(), "kiln-fuzz-failures.py"),
        help="where the reproducers go (one per failure signature)",
    )
    parser.add_argument("--show", metavar="SEED:INDEX", help="print one program and exit")
    parser.add_argument(
        "--auto-select",
        action="store_true",
        help="make every capture choose its engine by measurement, as large graphs do "
        "(kiln.exec.select.AUTO_MIN_WORK = 0 in the workers; slower)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.seed, args.engines or installed_engines(), args.auto_select)
        return 0
    if args.show:
        seed, index = (int(x) for x in args.show.split(":"))
        program = generate(seed, index)
        print(reproducer(program, Check("compile", "drift-replay", "show")))
        return 0
    report = run_fuzz(
        args.programs,
        args.seed,
        args.jobs,
        args.engines,
        args.timeout,
        progress=True,
        auto_select=args.auto_select,
    )
    print(report.table())
    failing = sum(report.counts().get(c, 0) for c in FAILING)
    with open(args.out, "w") as f:
        f.write(report.failures_text())
    print(f"\n{len(report.signature_counts)} failure signatures; reproducers in {args.out}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
