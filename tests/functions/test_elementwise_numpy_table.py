"""The elementwise front doors against NumPy, table-driven (issue 10, item 5).

Every binary front door (as a NumPy function on tensors and as a Tensor operator) and every
unary one, over bool, int8, int32, int64, uint8, float32 and float64 arrays holding edge values
(0, -0.0, +-1, inf, NaN, the integer limits), against each other and against Python scalars
(NEP 50: a Python scalar takes the array's dtype), eagerly and through a compiled replay: the
result dtype and shape are NumPy's, the values too (NaN where NumPy has NaN, the sign of every
zero); where NumPy raises, kiln raises the same kind of error.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln

DTYPES = ["bool", "int8", "int32", "int64", "uint8", "float32", "float64"]
FLOATS = ("float32", "float64")


def edge_values(dtype: str) -> np.ndarray:
    """The values every operator is tried on, for one dtype."""
    if dtype == "bool":
        return np.array([False, True])
    info: Any
    if dtype in FLOATS:
        info = np.finfo(dtype)
        values = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 3.0, -7.0, 0.5, 1e-10, -17.58, 40.0]
        values += [float(info.max), float(info.tiny), np.inf, -np.inf, np.nan]
        return np.array(values, dtype=dtype)
    info = np.iinfo(dtype)
    values = [0, 1, 2, 3, 7, 100, int(info.max), int(info.min)]
    if info.min < 0:
        values += [-1, -2, -7, int(info.min) + 1]
    return np.array(values, dtype=dtype)


SCALARS: list[Any] = [
    0,
    1,
    2,
    -1,
    -3,
    300,
    0.0,
    -0.0,
    0.5,
    2.5,
    -2.5,
    True,
    False,
    float("inf"),
    float("nan"),
]

# name: (the NumPy function, the Python operator or None). Both forms are checked.
BINARY: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any] | None]] = {
    "add": (np.add, operator.add),
    "subtract": (np.subtract, operator.sub),
    "multiply": (np.multiply, operator.mul),
    "true_divide": (np.true_divide, operator.truediv),
    "floor_divide": (np.floor_divide, operator.floordiv),
    "remainder": (np.remainder, operator.mod),
    "power": (np.power, operator.pow),
    "maximum": (np.maximum, None),
    "minimum": (np.minimum, None),
    "equal": (np.equal, operator.eq),
    "not_equal": (np.not_equal, operator.ne),
    "less": (np.less, operator.lt),
    "less_equal": (np.less_equal, operator.le),
    "greater": (np.greater, operator.gt),
    "greater_equal": (np.greater_equal, operator.ge),
    "logical_and": (np.logical_and, None),
    "logical_or": (np.logical_or, None),
    "logical_xor": (np.logical_xor, None),
    "bitwise_and": (np.bitwise_and, operator.and_),
    "bitwise_or": (np.bitwise_or, operator.or_),
    "bitwise_xor": (np.bitwise_xor, operator.xor),
}

# Unary front doors; those in EXACT compute with NumPy's own loops and match bit for bit, the
# others compose operators (expm1 from tanh and exp, log2 from log) and match within a few ulp.
UNARY: dict[str, Callable[[Any], Any]] = {
    "negative": np.negative,
    "positive": np.positive,
    "absolute": np.absolute,
    "sign": np.sign,
    "square": np.square,
    "reciprocal": np.reciprocal,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "rint": np.rint,
    "logical_not": np.logical_not,
    "invert": np.invert,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "log2": np.log2,
    "log10": np.log10,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "arctan": np.arctan,
    "sinh": np.sinh,
    "exp2": np.exp2,
}
INEXACT = {"expm1", "log1p", "log2", "log10", "exp2", "sinh"}
ULPS = 4


def _numpy(fn: Callable[..., Any], *args: Any) -> Any:
    """NumPy's result, or the kind of exception it raises: TypeError, or ValueError (which
    includes OverflowError: a Python integer out of range of the array's dtype)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return np.asarray(fn(*args))
        except (TypeError, ValueError, OverflowError) as exc:
            return TypeError if isinstance(exc, TypeError) else ValueError


def _kiln(fn: Callable[..., Any], *args: Any) -> Any:
    lifted = [kiln.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    try:
        return np.asarray(fn(*lifted))
    except (TypeError, ValueError, OverflowError) as exc:
        return TypeError if isinstance(exc, TypeError) else ValueError


def _compiled(fns: list[Callable[..., Any]], *args: Any) -> list[Any]:
    """Each of ``fns`` on ``args`` through kiln.compile's replay (the second call); the
    functions NumPy rejects are left out of the graph."""
    cf = kiln.compile(lambda *xs: tuple(fn(*xs) for fn in fns))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cf(*args)
        result = cf(*args)
    assert cf.state == kiln.State.Compiled
    return [np.asarray(r) for r in result]


def _check(what: str, got: Any, want: Any, exact: bool = True) -> None:
    if isinstance(want, type):
        raised = got is want
        assert raised, f"{what}: NumPy raises {want.__name__}, kiln gave {got!r}"
        return
    assert not isinstance(got, type), f"{what}: kiln raised {got.__name__}, NumPy gives {want!r}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, NumPy {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, NumPy {want.shape}"
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{what}: NaN positions")
    sign = np.signbit(got) == np.signbit(want)
    assert (sign | nan).all(), f"{what}: signs differ at {np.argwhere(~(sign | nan)).tolist()}"
    if exact:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        eps = np.finfo(want.dtype).eps
        np.testing.assert_allclose(got, want, rtol=ULPS * eps, atol=0, err_msg=what)


def _pair(name: str, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """All combinations of the edge values of dtypes ``x`` and ``y`` (an outer product)."""
    a, b = edge_values(x), edge_values(y)
    if name == "power" and y not in FLOATS:
        b = np.abs(b[: 4 if y != "bool" else 2]).astype(y)  # integers: no negative powers
    return a[:, None], b[None, :]


@pytest.mark.parametrize("y", DTYPES)
@pytest.mark.parametrize("x", DTYPES)
def test_binary_front_doors_on_two_arrays(x: str, y: str) -> None:
    compiled: list[tuple[str, Callable[..., Any], Any, tuple[np.ndarray, ...]]] = []
    for name, (fn, op) in BINARY.items():
        a, b = _pair(name, x, y)
        for form, f in ((f"np.{name}", fn), (f"operator {name}", op)):
            if f is None:
                continue
            want = _numpy(f, a, b)
            _check(f"{form}({x}, {y}) eager", _kiln(f, a, b), want)
            if not isinstance(want, type):
                compiled.append((f"{form}({x}, {y}) compiled", f, want, (a, b)))
    # One compiled function per operand layout (the power operands differ).
    for layout in {tuple(map(id, args)) for *_, args in compiled}:
        group = [c for c in compiled if tuple(map(id, c[3])) == layout]
        got = _compiled([c[1] for c in group], *group[0][3])
        for (what, _, want, _), g in zip(group, got):
            _check(what, g, want)


@pytest.mark.parametrize("x", DTYPES)
def test_binary_front_doors_with_python_scalars(x: str) -> None:
    a = edge_values(x)
    compiled: list[tuple[str, Callable[[Any], Any], Any]] = []
    for name, (fn, op) in BINARY.items():
        for s in SCALARS:
            for form, f in ((f"np.{name}", fn), (f"operator {name}", op)):
                if f is None:
                    continue
                for side, g in (
                    ("x op s", lambda t, f=f, s=s: f(t, s)),
                    ("s op x", lambda t, f=f, s=s: f(s, t)),
                ):
                    what = f"{form} {side} with x: {x}, s = {s!r}"
                    want = _numpy(g, a)
                    _check(f"{what} eager", _kiln(g, a), want)
                    if not isinstance(want, type):
                        compiled.append((f"{what} compiled", g, want))
    got = _compiled([c[1] for c in compiled], a)
    for (what, _, want), g in zip(compiled, got):
        _check(what, g, want)


@pytest.mark.parametrize("x", DTYPES)
def test_unary_front_doors(x: str) -> None:
    a = edge_values(x)
    compiled = []
    for name, fn in UNARY.items():
        want = _numpy(fn, a)
        exact = name not in INEXACT
        _check(f"np.{name}({x}) eager", _kiln(fn, a), want, exact)
        if not isinstance(want, type):
            compiled.append((f"np.{name}({x}) compiled", fn, want, exact))
    got = _compiled([c[1] for c in compiled], a)
    for (what, _, want, exact), g in zip(compiled, got):
        _check(what, g, want, exact)


def test_operator_neg_and_abs_match_numpy() -> None:
    for x in DTYPES:
        a = edge_values(x)
        for what, f in (("-x", operator.neg), ("abs(x)", operator.abs), ("~x", operator.invert)):
            _check(f"{what} on {x}", _kiln(f, a), _numpy(f, a))
