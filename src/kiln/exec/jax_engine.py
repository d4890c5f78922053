"""The XLA engine: a graph lowered to ``jax.numpy`` / ``jax.lax`` and compiled with ``jax.jit``.

XLA fuses elementwise chains into single loops and picks its own GEMM and convolution
kernels, so large graphs run far faster than NumPy's one-op-at-a-time execution (a tanh-GELU
on 4096x1024 float32 runs at about the speed of a memory copy). The engine is optional: it
needs ``jax`` (``pip install jax``).

Lowering is one table, :data:`LOWERINGS`, from registry operator name to a function over jax
arrays with the operator's ONNX semantics; an operator missing from it makes the graph
ineligible (:func:`unsupported_ops`). A kiln-domain (fused) operator without a lowering is
lowered through its ``expand`` into ONNX-domain nodes. Values known when tracing (constants,
``Shape`` of a traced array, arithmetic on those) stay NumPy and are computed by the registry
kernel, so shape subgraphs never reach XLA and Reshape/Slice/... read static values. jit
traces again for every new set of input shapes; a plan keeps at most :data:`MAX_TRACES` and
runs further shapes on the NumPy plan.

Exactness (SPEC 5b, docs/design.md "Engines never change an answer"): XLA's algebraic
simplifier rewrites ``log(exp(x))`` to ``x``, ``convert(x > 5) * x`` to a select (0 at NaN) and
``n - n`` to 0 (then constant-folds an integer division by it, which kills the process with
SIGFPE), so the plan compiles with that pass off (:data:`COMPILER_OPTIONS`), and the constant
operands of elementwise nodes reach XLA behind an optimization barrier, so no rewrite keyed on
a constant's value (``x + 0.0 -> x`` loses ``-0.0 + 0.0 = +0.0``) applies. Lowerings compute
NumPy's answer where XLA's primitive differs: integer Div/Mod guard a zero divisor (NumPy
gives 0, XLA -1), Sign of -0.0 is +0.0, Max/Min/Relu/Clip are NumPy's comparisons and selects
(the sign of a zero result, NaN). Nodes no lowering makes exact are kept off this engine by
their records (``OpDef.engine_limits["jax"]``: float CumSum, integer Pow, float64
transcendentals).

Subnormals: XLA's CPU runtime flushes subnormal floats to zero, as inputs and as results of
arithmetic, and no compiler option turns that off (``np.log(5e-324)`` would be -inf). A plan
refuses a graph with a subnormal constant, and checks its floating-point inputs on every run
(a reduction over their bits, fused into the XLA program): a call with a subnormal input runs on the
NumPy plan when the engine was chosen automatically, and raises
:class:`~kiln.errors.UnsupportedOperationError` naming the input when jax was forced. A
subnormal that arises inside the graph from normal inputs (``np.float32(1e-20) * 1e-20``,
``1 / np.float32(-3e38)``) would still be flushed, so a node that can make one (floating-point
arithmetic: :func:`flushes`) keeps the graph off jax unless it opted out of NumPy's bits.

Example:
    >>> import kiln, numpy as np
    >>> g = kiln.trace(lambda x: np.tanh(x) * 2, kiln.ones((2, 3), "float32")).graph
    >>> plan = JaxPlan(g)  # doctest: +SKIP
    >>> plan.run_arrays([np.zeros((2, 3), np.float32)])[0].shape  # doctest: +SKIP
    (2, 3)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import dtype_from_onnx_code, is_floating
from ..errors import DeviceUnavailableError, EngineError, KilnError, UnsupportedOperationError
from ..ir.builder import expand_node
from ..ops.control import subgraph_attrs
from ..ops.dispatch import as_outputs
from ..ops.fused import parse_program
from ..ops.registry import ELEMENTWISE, LAYOUT, get_op
from .inputs import InputChecker
from .plan import Plan, refuse_rounding

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph, Node

__all__ = [
    "JaxPlan",
    "LOWERINGS",
    "ROUNDING_CHECKS",
    "contracts",
    "flushes",
    "FirstOutputs",
    "available",
    "unsupported_ops",
    "has_subnormal",
    "MAX_TRACES",
]

ENGINE = "jax"  # the key of this engine's facts in OpDef.engine_limits
MAX_TRACES = 8  # input-shape sets one plan compiles; further shapes run on the NumPy plan
# Constants up to this many elements are embedded in the XLA program; larger ones (weights)
# are passed as device-resident arguments, which keeps compilation fast.
EMBED_MAX_ELEMENTS = 64
# XLA compiler options of every plan: the algebraic simplifier off, since its rewrites change
# answers (log(exp(x)) -> x; select for convert(pred) * x; n - n -> 0 feeding an integer
# division that constant folding then traps on). Measured on a tanh-GELU of 2048x1024 float32:
# no slower (the fusion passes do the work).
COMPILER_OPTIONS = {"xla_disable_hlo_passes": "algsimp"}

_jax: Any = None
_jnp: Any = None
_lax: Any = None


# XLA on the CPU always contracts a multiplication whose result an addition reads into one
# fused multiply-add, rounded once (its LLVM target options allow FP-op fusion, with no flag
# to turn it off): NumPy rounds twice, and where the two products cancel, the contracted
# result can be orders of magnitude off (openxla/xla#41579: ``a*x + b*x``).
_MULTIPLIES = frozenset({"Mul", "PRelu", "LeakyRelu"})
_ADDS = frozenset({"Add", "Sub", "Sum"})
# Nodes a multiplication's exact product may pass through on its way to an add inside one
# XLA fusion (LLVM folds a negation into the fused multiply-add; layout ops are index math).
_TRANSPARENT = frozenset({"Neg", "Identity", "Where"})


def contracts(graph: ModelGraph) -> str | None:
    """Why XLA would round ``graph`` differently from NumPy by contracting a multiply-add
    (None when it would not): an addition of real floats reads a multiplication's result,
    directly or through a negation, a selection or a layout operator, or a fused node's
    steps hold both. Asked by the automatic engine choice when results must be NumPy's bits
    (:func:`kiln.exec.select.rounding_differs`); a forced or reassociating choice accepts it.

    Example:
        >>> import kiln, numpy as np
        >>> x = kiln.ones((4,), "float32")
        >>> contracts(kiln.trace(lambda x: x * 2 + 1, x).graph)[:19]
        'XLA contracts a mul'
        >>> contracts(kiln.trace(lambda x: (x + 1) * 2, x).graph) is None
        True
    """
    products: dict[int, str] = {}  # id of a value holding an unrounded product: its maker
    for node in graph.nodes:
        if not any(v.dtype.kind == "f" or v.dtype.name == "bfloat16" for v in node.outputs):
            continue
        steps: set[str] = set()
        if node.op == "kiln.FusedElementwise":
            program = tuple(node.attrs["program"])
            steps = {step.op for step in parse_program(program, len(node.inputs))}
        multiplies = node.op in _MULTIPLIES or bool(steps & _MULTIPLIES)
        fed = next((products[id(v)] for v in node.inputs if id(v) in products), None)
        if (node.op in _ADDS or steps & _ADDS) and (fed or (steps & _MULTIPLIES)):
            maker = fed or f"node {node.name!r}"
            return (
                f"XLA contracts a multiplication and an addition into one fused multiply-add "
                f"(rounded once, NumPy rounds twice): {maker} into node {node.name!r} ({node.op})"
            )
        if multiplies:
            products.update((id(v), f"node {node.name!r} ({node.op})") for v in node.outputs)
        elif fed and (node.op in _TRANSPARENT or get_op(node.op).has(LAYOUT)):
            products.update((id(v), fed) for v in node.outputs)
    return None


# Operators whose floating-point results are never subnormal when their inputs are not: they
# pick, move, compare or round to whole numbers (or take a square root, which brings a tiny
# number nearer 1). Any other floating-point node can underflow from normal inputs
# (``x * 1e-30``, ``1 / x``, ``a - b`` of close numbers, a float64 to float32 Cast), which
# XLA's CPU runtime would flush to zero.
_NO_UNDERFLOW = frozenset(
    {
        *("Abs", "Neg", "Sign", "Floor", "Ceil", "Round", "Sqrt", "Relu", "Max", "Min"),
        *("Clip", "Where", "Identity", "Constant", "ConstantOfShape", "Trilu", "Hardmax"),
        *("ReduceMax", "ReduceMin", "MaxPool", "GlobalMaxPool", "TopK"),
        *("ScatterND", "ScatterElements", "kiln.SliceUpdate", "kiln.Contiguous"),
    }
)


def flushes(graph: ModelGraph) -> str | None:
    """Why XLA's flush-to-zero may change a result of ``graph`` (None when it cannot): the
    first node with a floating-point output that can underflow to a subnormal number from
    normal inputs (see ``_NO_UNDERFLOW``; a Cast only when it narrows; a control-flow node
    as its subgraphs). Asked, as :func:`contracts` is, wherever results must be NumPy's bits.

    Example:
        >>> import kiln, numpy as np
        >>> x = kiln.ones((4,), "float32")
        >>> flushes(kiln.trace(lambda x: x * 1e-30, x).graph)[:23]
        "node 'output' (Mul) can"
        >>> flushes(kiln.trace(lambda x: np.maximum(np.abs(x), 2.0), x).graph) is None
        True
    """
    known = {id(c.value): c.data for c in graph.constants}
    for node in graph.nodes:
        opdef = get_op(node.op)
        subgraphs = subgraph_attrs(opdef, opdef.bind_attrs(node.attrs))
        if subgraphs:  # If, Loop, Scan: as their bodies
            for key, sub in subgraphs.items():
                why = flushes(sub)
                if why is not None:
                    return f"node {node.name!r} ({node.op}, {key}): {why}"
            continue
        if not any(is_floating(v.dtype) for v in node.outputs):
            continue
        if node.op in _NO_UNDERFLOW or opdef.has(LAYOUT):
            continue
        if node.op in ("Cast", "CastLike") and not _narrows(node):
            continue
        if _scales_up(node, known):
            continue
        return (
            f"node {node.name!r} ({node.op}) can underflow to a subnormal number, which XLA's "
            "CPU runtime flushes to zero"
        )
    return None


def _scales_up(node: Node, known: Mapping[int, np.ndarray]) -> bool:
    """Whether ``node`` multiplies by constants of magnitude at least 1 (or 0), or divides by
    nonzero constants of magnitude at most 1: its results are then no smaller than its other
    input's (``x * 2``, ``x / 0.5``)."""
    if node.op not in ("Mul", "Div") or len(node.inputs) != 2:
        return False
    operands = [known.get(id(v)) if v is not None else None for v in node.inputs]
    if node.op == "Div":
        c = operands[1]
        return c is not None and c.size > 0 and bool(np.all((np.abs(c) <= 1) & (c != 0)))
    c = next((o for o in operands if o is not None), None)
    if c is None or c.size == 0 or not np.all(np.isfinite(c)):
        return False
    return bool(np.all((np.abs(c) >= 1) | (c == 0)))


# The exponent range of each float dtype, in order (bfloat16 has float32's).
_EXPONENT_RANGE = {"float16": 0, "bfloat16": 1, "float32": 1, "float64": 2}


def _narrows(node: Node) -> bool:
    """Whether a Cast's floating-point result has a smaller exponent range than its input
    (from an integer or bool: whole numbers, never subnormal)."""
    source = node.inputs[0]
    before = _EXPONENT_RANGE.get(source.dtype.name) if source is not None else None
    return before is not None and _EXPONENT_RANGE[node.outputs[0].dtype.name] < before


# XLA's own ways of rounding otherwise than NumPy beyond each operator's record: what the
# automatic choice (kiln.exec.select.rounding_differs) and a forced jax engine both ask.
ROUNDING_CHECKS = (contracts, flushes)


def available() -> bool:
    """True when ``jax`` can be imported."""
    try:
        _load()
    except DeviceUnavailableError:
        return False
    return True


def _load() -> None:
    global _jax, _jnp, _lax
    if _jax is not None:
        return
    try:
        import jax
        import jax.numpy as jnp
        from jax import lax
    except ImportError as exc:
        raise DeviceUnavailableError(
            "the 'jax' engine needs the 'jax' package, which is not installed: "
            "pip install jax (or finalize with engine='numpy')"
        ) from exc
    _jax, _jnp, _lax = jax, jnp, lax


class NotLowerable(UnsupportedOperationError):
    """A node the jax engine cannot express (an attribute combination, a traced shape input)."""


# The bits of each float dtype XLA flushes: (unsigned view, mask of everything but the sign,
# largest subnormal pattern). float16 is computed in float32 on the CPU, so its subnormals
# survive.
_SUBNORMAL_BITS: dict[str, tuple[Any, int, int]] = {
    "float32": (np.uint32, 0x7FFF_FFFF, 0x007F_FFFF),
    "float64": (np.uint64, 0x7FFF_FFFF_FFFF_FFFF, 0x000F_FFFF_FFFF_FFFF),
    "bfloat16": (np.uint16, 0x7FFF, 0x007F),
}


def has_nan(x: np.ndarray) -> bool:
    """True when ``x`` (a floating or complex array) holds a NaN.

    Example:
        >>> has_nan(np.float32([1.0, np.nan])), has_nan(np.int64([1]))
        (True, False)
    """
    return x.dtype.kind in "fc" and bool(np.isnan(x).any())


def has_subnormal(x: np.ndarray) -> bool:
    """True when ``x`` (a float32, float64 or bfloat16 array) holds a subnormal number, which
    XLA would read as zero. Other dtypes: False.

    Example:
        >>> has_subnormal(np.float32([1.0, 1e-40])), has_subnormal(np.float32([0.0, -0.0]))
        (True, False)
    """
    bits = _SUBNORMAL_BITS.get(x.dtype.name)
    if bits is None or x.size == 0:
        return False
    unsigned, magnitude, largest = bits
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    u = np.ascontiguousarray(x).view(unsigned) & unsigned(magnitude)
    u -= unsigned(1)  # 0 wraps to the largest value; subnormals land in [0, largest)
    return bool((u < unsigned(largest)).any())


def _any_subnormal(x: Any) -> Any:
    """A traced bool: whether ``x`` holds a subnormal number (:func:`has_subnormal` in XLA,
    on the bits, which flushing does not touch)."""
    unsigned, magnitude, largest = _SUBNORMAL_BITS[x.dtype.name]
    u = _lax.bitcast_convert_type(x, unsigned) & unsigned(magnitude)
    return _jnp.any((u - unsigned(1)) < unsigned(largest))


def _is_static(x: Any) -> bool:
    return x is None or isinstance(x, np.ndarray)


def _static_ints(op: str, name: str, x: Any) -> list[int]:
    if not isinstance(x, np.ndarray):
        raise NotLowerable(
            f"{op}: input {name!r} must be known when compiling for jax, but it is computed "
            "at run time (from input values): the output shape it decides is known only then, "
            "and XLA compiles for static shapes. Use engine='numpy' or 'onnxruntime' (or "
            "engine=None to let kiln choose)"
        )
    return [int(v) for v in x.reshape(-1)]


# -- the lowering table ---------------------------------------------------------------------
# Each entry takes the node's inputs (jax arrays, NumPy arrays for known values, None for an
# omitted optional input) and its bound attributes, and returns an array or a tuple of them.


def _unary(name: str) -> Callable[..., Any]:
    def lower(x: Any) -> Any:
        return getattr(_jnp, name)(x)

    return lower


def _binary(name: str) -> Callable[..., Any]:
    def lower(a: Any, b: Any) -> Any:
        return getattr(_jnp, name)(a, b)

    return lower


def _float_only(op: str, x: Any) -> None:
    if not np.issubdtype(x.dtype, np.floating) and x.dtype.name != "bfloat16":
        raise NotLowerable(f"{op}: the jax lowering covers floating-point inputs only")


def _nonzero_divisor(b: Any) -> tuple[Any, Any]:
    """``b`` with 1 where it is 0 (XLA never divides by zero), and where it was 0."""
    zero = b == 0
    return _jnp.where(zero, _jnp.ones((), b.dtype), b), zero


def _div(a: Any, b: Any) -> Any:
    if np.issubdtype(a.dtype, np.integer):
        a, b = _jnp.broadcast_arrays(a, b)
        safe, zero = _nonzero_divisor(b)
        # truncates toward zero, as ONNX integer Div; x / 0 is 0, as NumPy (XLA: -1)
        return _jnp.where(zero, _jnp.zeros((), a.dtype), _lax.div(a, safe))
    return _jnp.divide(a, b)


def _pow(x: Any, y: Any) -> Any:
    if x.dtype != y.dtype or not (
        np.issubdtype(x.dtype, np.floating) or x.dtype.name == "bfloat16"
    ):
        raise NotLowerable("Pow: the jax lowering covers one floating-point dtype only")
    return _jnp.power(x, y)


def _mod(a: Any, b: Any, *, fmod: int) -> Any:
    if np.issubdtype(a.dtype, np.integer):
        a, b = _jnp.broadcast_arrays(a, b)
        safe, zero = _nonzero_divisor(b)
        rem = _jnp.fmod(a, safe) if fmod else _jnp.remainder(a, safe)
        return _jnp.where(zero, _jnp.zeros((), a.dtype), rem)  # x % 0 is 0, as NumPy
    return _jnp.fmod(a, b) if fmod else _jnp.remainder(a, b)


def _sign(x: Any) -> Any:
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        # NumPy: sign(-0.0) is +0.0; XLA keeps -0.0
        return _jnp.where(x == 0, _jnp.zeros((), x.dtype), _jnp.sign(x))
    return _jnp.sign(x)


def _cast(x: Any, *, to: int, saturate: int, round_mode: str) -> Any:
    target = dtype_from_onnx_code(to)
    if np.issubdtype(x.dtype, np.floating) and not np.issubdtype(target, np.floating):
        raise NotLowerable("Cast: float to integer/bool casts stay on NumPy (edge semantics)")
    return x.astype(target)


def _numpy_extremum(greater: bool) -> Callable[[Any, Any], Any]:
    """NumPy's maximum (``greater``) or minimum of two arrays. XLA's max/min give +0.0 (min:
    -0.0) for a pair of zeros; NumPy returns the second operand of equal values (float16:
    the first), and NaN when either is NaN."""

    def pick(a: Any, b: Any) -> Any:
        if not (a.dtype.kind == "f" or a.dtype.name == "bfloat16"):
            return _jnp.maximum(a, b) if greater else _jnp.minimum(a, b)
        first_on_tie = a.dtype == np.float16
        if greater:
            wins = a >= b if first_on_tie else a > b
        else:
            wins = a <= b if first_on_tie else a < b
        return _jnp.where(wins | _jnp.isnan(a), a, b)

    return pick


_maximum = _numpy_extremum(greater=True)
_minimum = _numpy_extremum(greater=False)


def _clip(x: Any, lo: Any = None, hi: Any = None) -> Any:
    if lo is not None and hi is not None:  # np.clip: x where it equals a bound, NaN bounds win
        lo, hi = _jnp.asarray(lo).reshape(()), _jnp.asarray(hi).reshape(())
        x = _jnp.where((x < lo) | _jnp.isnan(lo), lo, x)
        return _jnp.where((x > hi) | _jnp.isnan(hi), hi, x)
    if lo is not None:
        x = _maximum(x, _jnp.asarray(lo).reshape(()))
    if hi is not None:
        x = _minimum(x, _jnp.asarray(hi).reshape(()))
    return x


def _relu(x: Any) -> Any:
    return _maximum(x, _jnp.zeros((), x.dtype))


def _gelu(x: Any, *, approximate: str) -> Any:
    _float_only("Gelu", x)
    return _jax.nn.gelu(x, approximate=approximate == "tanh")


def _leaky_relu(x: Any, *, alpha: float) -> Any:
    return _jnp.where(x >= 0, x, (alpha * x).astype(x.dtype))


def _elu(x: Any, *, alpha: float) -> Any:
    return _jnp.where(x >= 0, x, (alpha * _jnp.expm1(_jnp.minimum(x, 0))).astype(x.dtype))


def _selu(x: Any, *, alpha: float, gamma: float) -> Any:
    w = x.astype(_jnp.float32) if x.dtype.itemsize < 4 else x
    y = _jnp.where(w > 0, gamma * w, gamma * (alpha * _jnp.exp(_jnp.minimum(w, 0)) - alpha))
    return y.astype(x.dtype)


def _hard_sigmoid(x: Any, *, alpha: float, beta: float) -> Any:
    return _jnp.clip(alpha * x + beta, 0, 1).astype(x.dtype)


def _hard_swish(x: Any) -> Any:
    w = x.astype(_jnp.float32) if x.dtype.itemsize < 4 else x
    return (w * _jnp.clip(w / 6 + 0.5, 0, 1)).astype(x.dtype)


def _softplus(x: Any) -> Any:
    w = x.astype(_jnp.float32) if x.dtype.itemsize < 4 else x
    return _jax.nn.softplus(w).astype(x.dtype)


def _mish(x: Any) -> Any:
    w = x.astype(_jnp.float32) if x.dtype.itemsize < 4 else x
    return (w * _jnp.tanh(_jax.nn.softplus(w))).astype(x.dtype)


def _is_inf(x: Any, *, detect_negative: int, detect_positive: int) -> Any:
    pos = _jnp.isposinf(x) if detect_positive else _jnp.zeros(x.shape, bool)
    neg = _jnp.isneginf(x) if detect_negative else _jnp.zeros(x.shape, bool)
    return pos | neg


def _variadic(name: str) -> Callable[..., Any]:
    def lower(*xs: Any) -> Any:
        fn = {"maximum": _maximum, "minimum": _minimum}.get(name) or getattr(_jnp, name)
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return _jnp.broadcast_to(out, np.broadcast_shapes(*(x.shape for x in xs)))

    return lower


def _mean(*xs: Any) -> Any:
    if not np.issubdtype(xs[0].dtype, np.floating):
        raise NotLowerable("Mean: the jax lowering covers floating-point inputs only")
    total = _variadic("add")(*xs)
    return (total / len(xs)).astype(xs[0].dtype)


def _matmul(a: Any, b: Any) -> Any:
    return _jnp.matmul(a, b).astype(a.dtype)


def _gemm(
    a: Any, b: Any, c: Any = None, *, alpha: float, beta: float, transA: int, transB: int
) -> Any:  # noqa: N803
    _float_only("Gemm", a)
    y = _jnp.matmul(a.T if transA else a, b.T if transB else b)
    if alpha != 1.0:
        y = y * _jnp.asarray(alpha, y.dtype)
    if c is not None and beta != 0.0:
        y = y + (c * _jnp.asarray(beta, y.dtype) if beta != 1.0 else c)
    return y.astype(a.dtype)


def _einsum(*xs: Any, equation: str) -> Any:
    return _jnp.einsum(equation, *xs).astype(xs[0].dtype)


def _reduce_axes(op: str, x: Any, axes: Any, noop: int) -> tuple[int, ...] | None:
    if axes is None:
        return None if not noop else ()
    values = _static_ints(op, "axes", axes)
    if not values:
        return None if not noop else ()
    return tuple(a % max(x.ndim, 1) for a in values)


def _reduction(name: str, float_only: bool = False) -> Callable[..., Any]:
    def lower(x: Any, axes: Any = None, *, keepdims: int, noop_with_empty_axes: int) -> Any:
        if float_only:
            _float_only(name, x)
        ax = _reduce_axes(name, x, axes, noop_with_empty_axes)
        if x.size == 0 and name in ("ReduceMax", "ReduceMin"):
            raise NotLowerable(f"{name}: reducing an empty array stays on NumPy")
        if ax == ():
            return _REDUCE_IDENTITY.get(name, lambda v: v)(x)
        keep = bool(keepdims)
        if name == "ReduceSum":
            y = _jnp.sum(x, axis=ax, keepdims=keep, dtype=x.dtype)
        elif name == "ReduceMean":
            y = _jnp.mean(x, axis=ax, keepdims=keep)
        elif name == "ReduceMax":
            y = _jnp.max(x, axis=ax, keepdims=keep)
        elif name == "ReduceMin":
            y = _jnp.min(x, axis=ax, keepdims=keep)
        elif name == "ReduceProd":
            y = _jnp.prod(x, axis=ax, keepdims=keep, dtype=x.dtype)
        elif name == "ReduceL1":
            y = _jnp.sum(_jnp.abs(x), axis=ax, keepdims=keep, dtype=x.dtype)
        elif name == "ReduceL2":
            y = _jnp.sqrt(_jnp.sum(x * x, axis=ax, keepdims=keep))
        elif name == "ReduceSumSquare":
            y = _jnp.sum(x * x, axis=ax, keepdims=keep, dtype=x.dtype)
        elif name == "ReduceLogSum":
            y = _jnp.log(_jnp.sum(x, axis=ax, keepdims=keep))
        else:  # ReduceLogSumExp
            y = _jax.scipy.special.logsumexp(x, axis=ax, keepdims=keep)
        return y.astype(x.dtype)

    return lower


_REDUCE_IDENTITY: dict[str, Callable[[Any], Any]] = {
    "ReduceL1": lambda x: _jnp.abs(x),
    "ReduceL2": lambda x: _jnp.abs(x),
    "ReduceSumSquare": lambda x: x * x,
    "ReduceLogSum": lambda x: _jnp.log(x),
    "ReduceLogSumExp": lambda x: x,
}


def _arg(name: str) -> Callable[..., Any]:
    def lower(x: Any, *, axis: int, keepdims: int, select_last_index: int) -> Any:
        fn = _jnp.argmax if name == "ArgMax" else _jnp.argmin
        ax = axis % x.ndim
        if select_last_index:
            n = x.shape[ax]
            y = n - 1 - fn(_jnp.flip(x, ax), axis=ax, keepdims=bool(keepdims))
        else:
            y = fn(x, axis=ax, keepdims=bool(keepdims))
        return y.astype(_jnp.int64)

    return lower


def _softmax(x: Any, *, axis: int) -> Any:
    return _jax.nn.softmax(x, axis=axis)


def _log_softmax(x: Any, *, axis: int) -> Any:
    return _jax.nn.log_softmax(x, axis=axis)


def _stash(x: Any, stash_type: int) -> Any:
    if stash_type != 1:
        raise NotLowerable("LayerNormalization: only stash_type=1 (float32) is lowered")
    return _jnp.float64 if x.dtype == _jnp.float64 else _jnp.float32


def _layer_norm(
    x: Any, scale: Any, bias: Any = None, *, axis: int, epsilon: float, stash_type: int
) -> Any:
    work = _stash(x, stash_type)
    axes = tuple(range(axis % x.ndim, x.ndim))
    w = x.astype(work)
    mean = _jnp.mean(w, axis=axes, keepdims=True)
    centered = w - mean
    inv_std = _lax.rsqrt(_jnp.mean(centered * centered, axis=axes, keepdims=True) + epsilon)
    y = centered * inv_std * scale.astype(work)
    if bias is not None:
        y = y + bias.astype(work)
    return y.astype(x.dtype), mean.astype(_jnp.float32), inv_std.astype(_jnp.float32)


def _rms_norm(x: Any, scale: Any, *, axis: int, epsilon: float, stash_type: int) -> Any:
    work = _stash(x, stash_type)
    axes = tuple(range(axis % x.ndim, x.ndim))
    w = x.astype(work)
    inv = _lax.rsqrt(_jnp.mean(w * w, axis=axes, keepdims=True) + epsilon)
    return (w * inv * scale.astype(work)).astype(x.dtype)


def _batch_norm(
    x: Any,
    scale: Any,
    b: Any,
    mean: Any,
    var: Any,
    *,
    epsilon: float,
    momentum: float,
    training_mode: int,
) -> Any:
    if training_mode:
        raise NotLowerable("BatchNormalization: training_mode=1 stays on NumPy")
    _float_only("BatchNormalization", x)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = _lax.rsqrt(var.reshape(shape).astype(x.dtype) + _jnp.asarray(epsilon, x.dtype))
    y = (x - mean.reshape(shape).astype(x.dtype)) * inv * scale.reshape(shape).astype(x.dtype)
    return (y + b.reshape(shape).astype(x.dtype)).astype(x.dtype)


def _instance_norm(x: Any, scale: Any, b: Any, *, epsilon: float) -> Any:
    _float_only("InstanceNormalization", x)
    axes = tuple(range(2, x.ndim))
    w = x.astype(_jnp.float32) if x.dtype.itemsize < 4 else x
    mean = _jnp.mean(w, axis=axes, keepdims=True)
    var = _jnp.mean((w - mean) ** 2, axis=axes, keepdims=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (w - mean) * _lax.rsqrt(var + epsilon) * scale.reshape(shape) + b.reshape(shape)
    return y.astype(x.dtype)


def _reshape(x: Any, shape: Any, *, allowzero: int) -> Any:
    target = _static_ints("Reshape", "shape", shape)
    if not allowzero:
        target = [x.shape[i] if s == 0 else s for i, s in enumerate(target)]
    return _jnp.reshape(x, target)


def _flatten(x: Any, *, axis: int) -> Any:
    a = axis + x.ndim if axis < 0 else axis
    return _jnp.reshape(x, (math.prod(x.shape[:a]), math.prod(x.shape[a:])))


def _squeeze(x: Any, axes: Any = None) -> Any:
    if axes is None:
        return _jnp.squeeze(x)
    return _jnp.squeeze(x, tuple(a % x.ndim for a in _static_ints("Squeeze", "axes", axes)))


def _unsqueeze(x: Any, axes: Any) -> Any:
    values = _static_ints("Unsqueeze", "axes", axes)
    rank = x.ndim + len(values)
    return _jnp.expand_dims(x, tuple(sorted(a % rank for a in values)))


def _transpose(x: Any, *, perm: Sequence[int] | None) -> Any:
    return _jnp.transpose(x, None if perm is None else tuple(perm))


def _concat(*xs: Any, axis: int) -> Any:
    return _jnp.concatenate(xs, axis=axis)


def _split(x: Any, split: Any = None, *, axis: int, num_outputs: int | None) -> Any:
    n = x.shape[axis]
    if split is not None:
        sizes = _static_ints("Split", "split", split)
    else:
        parts = num_outputs or 1
        size = -(-n // parts)
        sizes = [min(size, n - i * size) for i in range(parts)]
    bounds = np.cumsum(sizes)[:-1].tolist()
    return tuple(_jnp.split(x, bounds, axis=axis))


def _slice(x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Any:
    st = _static_ints("Slice", "starts", starts)
    en = _static_ints("Slice", "ends", ends)
    ax = list(range(len(st))) if axes is None else _static_ints("Slice", "axes", axes)
    sp = [1] * len(st) if steps is None else _static_ints("Slice", "steps", steps)
    index = [slice(None)] * x.ndim
    for s, e, a, p in zip(st, en, ax, sp):
        index[a % x.ndim] = slice(s, e, p)
    return x[tuple(index)]


def _gather(x: Any, idx: Any, *, axis: int) -> Any:
    ax = axis % x.ndim
    if isinstance(idx, np.ndarray):
        idx = np.where(idx < 0, idx + x.shape[ax], idx)
    else:
        idx = _jnp.where(idx < 0, idx + x.shape[ax], idx)
    return _jnp.take(x, idx, axis=ax)


def _gather_elements(x: Any, idx: Any, *, axis: int) -> Any:
    ax = axis % x.ndim
    idx = _jnp.where(idx < 0, idx + x.shape[ax], idx)
    return _jnp.take_along_axis(x, idx, axis=ax)


def _expand(x: Any, shape: Any) -> Any:
    target = _static_ints("Expand", "shape", shape)
    return _jnp.broadcast_to(x, np.broadcast_shapes(tuple(x.shape), tuple(target)))


def _tile(x: Any, repeats: Any) -> Any:
    return _jnp.tile(x, _static_ints("Tile", "repeats", repeats))


def _pad(x: Any, pads: Any, value: Any = None, axes: Any = None, *, mode: str) -> Any:
    p = _static_ints("Pad", "pads", pads)
    ax = (
        list(range(x.ndim))
        if axes is None
        else [a % x.ndim for a in _static_ints("Pad", "axes", axes)]
    )
    if any(v < 0 for v in p):
        raise NotLowerable("Pad: negative pads stay on NumPy")
    width = [(0, 0)] * x.ndim
    k = len(ax)
    for i, a in enumerate(ax):
        width[a] = (p[i], p[i + k])
    if mode == "constant":
        fill = 0 if value is None else value.reshape(())
        return _jnp.pad(x, width, mode="constant", constant_values=fill)
    if mode in ("reflect", "edge", "wrap"):
        return _jnp.pad(x, width, mode=mode)
    raise NotLowerable(f"Pad: mode {mode!r}")


def _where(c: Any, x: Any, y: Any) -> Any:
    return _jnp.where(c, x, y)


def _trilu(x: Any, k: Any = None, *, upper: int) -> Any:
    kk = 0 if k is None else _static_ints("Trilu", "k", k)[0]
    return _jnp.triu(x, kk) if upper else _jnp.tril(x, kk)


def _cumsum(x: Any, axis: Any, *, exclusive: int, reverse: int) -> Any:
    ax = _static_ints("CumSum", "axis", axis)[0] % x.ndim
    y = _jnp.flip(x, ax) if reverse else x
    s = _jnp.cumsum(y, axis=ax, dtype=x.dtype)
    if exclusive:
        s = s - y
    return _jnp.flip(s, ax) if reverse else s


def _dropout(x: Any, ratio: Any = None, training: Any = None, *, seed: int) -> Any:
    if training is not None and (not isinstance(training, np.ndarray) or bool(training)):
        raise NotLowerable("Dropout: training mode stays on NumPy")
    return x, _jnp.ones(x.shape, bool)


def _window_pads(
    op: str, x: Any, attrs: Mapping[str, Any], kernel: Sequence[int]
) -> list[tuple[int, int]]:
    n = len(kernel)
    if attrs.get("ceil_mode"):
        raise NotLowerable(f"{op}: ceil_mode=1 stays on NumPy")
    auto = attrs.get("auto_pad", "NOTSET")
    strides = list(attrs.get("strides") or [1] * n)
    dil = list(attrs.get("dilations") or [1] * n)
    if auto in ("NOTSET", "VALID"):
        pads = list(attrs.get("pads") or [0] * (2 * n)) if auto == "NOTSET" else [0] * (2 * n)
        return [(pads[i], pads[i + n]) for i in range(n)]
    out = []
    for i in range(n):
        size = x.shape[2 + i]
        want = -(-size // strides[i])
        total = max(0, (want - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size)
        small, big = total // 2, total - total // 2
        out.append((small, big) if auto == "SAME_UPPER" else (big, small))
    return out


def _conv(x: Any, w: Any, b: Any = None, **attrs: Any) -> Any:
    _float_only("Conv", x)
    kernel = list(attrs["kernel_shape"] or w.shape[2:])
    n = len(kernel)
    pads = _window_pads("Conv", x, attrs, kernel)
    y = _lax.conv_general_dilated(
        x,
        w,
        window_strides=tuple(attrs["strides"] or [1] * n),
        padding=pads,
        rhs_dilation=tuple(attrs["dilations"] or [1] * n),
        feature_group_count=attrs["group"],
    )
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * n)
    return y.astype(x.dtype)


def _pool_geometry(op: str, x: Any, attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    kernel = list(attrs["kernel_shape"])
    n = len(kernel)
    pads = _window_pads(op, x, attrs, kernel)
    strides = tuple(attrs.get("strides") or [1] * n)
    dil = tuple(attrs.get("dilations") or [1] * n)
    return (
        (1, 1, *kernel),
        (1, 1, *strides),
        ((0, 0), (0, 0), *pads),
        (1, 1, *dil),
    )


def _max_pool(x: Any, **attrs: Any) -> Any:
    if attrs.get("storage_order"):
        raise NotLowerable("MaxPool: storage_order=1 stays on NumPy")
    window, strides, pads, dil = _pool_geometry("MaxPool", x, attrs)
    lowest = -_jnp.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    y = _lax.reduce_window(
        x, _jnp.asarray(lowest, x.dtype), _lax.max, window, strides, pads, window_dilation=dil
    )
    return (y, None)  # Indices: a node that reads them is not lowered (see _lower_node)


def _avg_pool(x: Any, **attrs: Any) -> Any:
    _float_only("AveragePool", x)
    window, strides, pads, dil = _pool_geometry("AveragePool", x, attrs)
    zero = _jnp.asarray(0, x.dtype)
    total = _lax.reduce_window(x, zero, _lax.add, window, strides, pads, window_dilation=dil)
    if attrs.get("count_include_pad"):
        count = math.prod(window)
        return (total / count).astype(x.dtype)
    ones = _jnp.ones(x.shape[2:], x.dtype)[None, None]
    counts = _lax.reduce_window(ones, zero, _lax.add, window, strides, pads, window_dilation=dil)
    return (total / counts).astype(x.dtype)


def _global_avg(x: Any) -> Any:
    return _jnp.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype)


def _global_max(x: Any) -> Any:
    return _jnp.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


def _attention(
    q: Any,
    k: Any,
    v: Any,
    mask: Any = None,
    past_key: Any = None,
    past_value: Any = None,
    nonpad_kv_seqlen: Any = None,
    *,
    is_causal: int,
    kv_num_heads: int,
    q_num_heads: int,
    qk_matmul_output_mode: int | None,
    scale: float | None,
    softcap: float,
    softmax_precision: int | None,
    **newer: Any,  # attributes of newer opsets: lowered only at their defaults
) -> Any:
    if (
        q.ndim != 4
        or past_key is not None
        or past_value is not None
        or nonpad_kv_seqlen is not None
        or qk_matmul_output_mode is not None
        or any(value not in (None, 0, -1) for value in newer.values())
    ):
        raise NotLowerable(
            "Attention: only the 4-D form without past keys, sequence lengths or extra outputs "
            "is lowered"
        )
    _float_only("Attention", q)
    work = _jnp.float32 if q.dtype.itemsize < 4 else q.dtype
    qw, kw, vw = q.astype(work), k.astype(work), v.astype(work)
    if k.shape[1] != q.shape[1]:
        reps = q.shape[1] // k.shape[1]
        kw, vw = _jnp.repeat(kw, reps, axis=1), _jnp.repeat(vw, reps, axis=1)
    factor = 1.0 / math.sqrt(q.shape[3]) if scale is None else scale
    scores = (qw * _jnp.asarray(factor, work)) @ _jnp.swapaxes(kw, -1, -2)
    if softcap > 0:
        scores = softcap * _jnp.tanh(scores / softcap)
    if mask is not None:
        if mask.dtype == np.bool_:
            scores = _jnp.where(mask, scores, -_jnp.inf)
        else:
            scores = scores + mask.astype(work)
    if is_causal:
        allowed = np.tri(q.shape[2], k.shape[2], dtype=np.bool_)
        scores = _jnp.where(allowed, scores, -_jnp.inf)
    weights = _jax.nn.softmax(scores, axis=-1)
    return (weights @ vw).astype(q.dtype)


def _shape(x: Any, *, start: int, end: int | None) -> np.ndarray:
    n = x.ndim
    lo = min(max(start + n if start < 0 else start, 0), n)
    hi = n if end is None else min(max(end + n if end < 0 else end, 0), n)
    return np.array(x.shape[lo:hi], dtype=np.int64).reshape(-1)


def _size(x: Any) -> np.ndarray:
    return np.array(math.prod(x.shape), dtype=np.int64)


def _known_only(op: str) -> Callable[..., Any]:
    """The lowering of an operator that makes shapes and small constants from known values:
    :func:`_lower_node` runs its registry kernel when every input is known, and reaching this
    means one is traced."""

    def lower(*inputs: Any, **attrs: Any) -> Any:
        raise NotLowerable(
            f"{op}: its inputs must be known when compiling for jax, but one is computed at "
            "run time (from input values), and XLA compiles for static shapes. Use "
            "engine='numpy' or 'onnxruntime' (or engine=None to let kiln choose)"
        )

    return lower


class FirstOutputs:
    """A lowering that computes only the first ``count`` outputs of its operator (it gives
    None for the others): a graph that reads another output is not lowered (see
    :func:`unsupported_ops`)."""

    def __init__(self, count: int, lower: Callable[..., Any]) -> None:
        self.count = count
        self.lower = lower

    def __call__(self, *inputs: Any, **attrs: Any) -> Any:
        return self.lower(*inputs, **attrs)


LOWERINGS: dict[str, Callable[..., Any]] = {
    # elementwise, one input
    "Abs": _unary("abs"),
    "Acos": _unary("arccos"),
    "Acosh": _unary("arccosh"),
    "Asin": _unary("arcsin"),
    "Asinh": _unary("arcsinh"),
    "Atan": _unary("arctan"),
    "Atanh": _unary("arctanh"),
    "BitwiseNot": _unary("bitwise_not"),
    "Ceil": _unary("ceil"),
    "Cos": _unary("cos"),
    "Cosh": _unary("cosh"),
    "Exp": _unary("exp"),
    "Floor": _unary("floor"),
    "Identity": lambda x: x,
    "IsNaN": _unary("isnan"),
    "Log": _unary("log"),
    "Neg": _unary("negative"),
    "Not": _unary("logical_not"),
    "Reciprocal": _unary("reciprocal"),
    "Round": _unary("round"),  # half to even, as ONNX
    "Sign": _sign,
    "Sin": _unary("sin"),
    "Sinh": _unary("sinh"),
    "Sqrt": _unary("sqrt"),
    "Tan": _unary("tan"),
    "Tanh": _unary("tanh"),
    "Erf": lambda x: _jax.lax.erf(x),
    "Sigmoid": lambda x: _jax.nn.sigmoid(x),
    "Softsign": lambda x: x / (1 + _jnp.abs(x)),
    "Relu": _relu,
    "Gelu": _gelu,
    "LeakyRelu": _leaky_relu,
    "Elu": _elu,
    "Selu": _selu,
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish,
    "Softplus": _softplus,
    "Mish": _mish,
    "IsInf": _is_inf,
    "Cast": _cast,
    "Clip": _clip,
    # elementwise, two or more inputs
    "Add": _binary("add"),
    "Sub": _binary("subtract"),
    "Mul": _binary("multiply"),
    "Div": _div,
    "Pow": _pow,
    "Mod": _mod,
    "And": _binary("logical_and"),
    "Or": _binary("logical_or"),
    "Xor": _binary("logical_xor"),
    "BitwiseAnd": _binary("bitwise_and"),
    "BitwiseOr": _binary("bitwise_or"),
    "BitwiseXor": _binary("bitwise_xor"),
    "Equal": _binary("equal"),
    "Greater": _binary("greater"),
    "GreaterOrEqual": _binary("greater_equal"),
    "Less": _binary("less"),
    "LessOrEqual": _binary("less_equal"),
    "Where": _where,
    "Max": _variadic("maximum"),
    "Min": _variadic("minimum"),
    "Sum": _variadic("add"),
    "Mean": _mean,
    # linear algebra
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Einsum": _einsum,
    # reductions
    **{
        name: _reduction(
            name, float_only=name in ("ReduceMean", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp")
        )
        for name in (
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceSumSquare",
            "ReduceLogSum",
            "ReduceLogSumExp",
        )
    },
    "ArgMax": _arg("ArgMax"),
    "ArgMin": _arg("ArgMin"),
    "CumSum": _cumsum,
    # neural-network operators
    "Softmax": _softmax,
    "LogSoftmax": _log_softmax,
    "LayerNormalization": _layer_norm,
    "RMSNormalization": _rms_norm,
    "BatchNormalization": _batch_norm,
    "InstanceNormalization": _instance_norm,
    "Conv": _conv,
    "MaxPool": FirstOutputs(1, _max_pool),  # Y, not Indices
    "AveragePool": _avg_pool,
    "GlobalAveragePool": _global_avg,
    "GlobalMaxPool": _global_max,
    "Dropout": _dropout,
    "Attention": _attention,
    # layout and shapes
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Transpose": _transpose,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "Expand": _expand,
    "Tile": _tile,
    "Pad": _pad,
    "Trilu": _trilu,
    "Shape": _shape,
    "Size": _size,
    # outputs from known values only: run by the registry kernel when tracing
    "Constant": _known_only("Constant"),
    "ConstantOfShape": _known_only("ConstantOfShape"),
    "Range": _known_only("Range"),
}


def unsupported_ops(graph: ModelGraph) -> list[str]:
    """Why the jax engine cannot run nodes of ``graph`` with NumPy's answer, one line per
    node (``"node 'div' (Div): ..."``): operators it has no lowering for, and nodes their
    records keep off it (``OpDef.engine_limits``); empty: eligible."""
    missing: dict[str, None] = {}
    read = {id(v) for n in graph.nodes for v in n.inputs if v is not None}
    read.update(id(v) for v in graph.output_values)

    def visit(node: Node, scope: Any, where: str) -> None:
        opdef = get_op(node.op)
        limit = opdef.engine_limits.get(ENGINE)
        if limit is not None:
            why = limit.reason_for(node.inputs, node.outputs, opdef.bind_attrs(node.attrs))
            if why is not None:
                missing[f"{where}: {node.op} {why}"] = None
                return
        for key, sub in subgraph_attrs(opdef, node.attrs).items():  # If/Loop/Scan bodies
            for why in unsupported_ops(sub):
                missing[f"{where} ({key}): {why}"] = None
            if any(has_subnormal(c.data) for c in sub.constants):
                missing[f"{where} ({key}): a constant holds a subnormal number"] = None
            if any(has_nan(c.data) for c in sub.constants):  # (see JaxPlan: embedded NaN)
                missing[f"{where} ({key}): a constant holds a NaN, which XLA miscompiles"] = None
        lower = LOWERINGS.get(node.op)
        if lower is not None:
            if isinstance(lower, FirstOutputs):
                count = lower.count
                left_out = zip(node.outputs[count:], opdef.outputs[count:])
                names = [name for v, name in left_out if id(v) in read]
                if names:
                    missing[f"{where}: {node.op} with {', '.join(names)} read"] = None
            return
        if opdef.expand is not None:
            for inner in expand_node(node, scope):
                visit(inner, scope, where)
            return
        missing[f"{where}: no jax lowering for {node.op}"] = None

    scope = graph.name_scope()
    for node in graph.nodes:
        visit(node, scope, f"node {node.name!r}")
    return list(missing)


# -- the plan ----------------------------------------------------------------------------


class JaxPlan(Plan):
    """A graph compiled with ``jax.jit`` (see the module docstring). Same interface as
    :class:`~kiln.exec.reference.ReferencePlan`.

    Raises :class:`~kiln.errors.DeviceUnavailableError` when jax is not installed and
    :class:`~kiln.errors.UnsupportedOperationError` naming the operators it cannot lower.
    """

    engine = ENGINE

    def __init__(self, graph: ModelGraph, fallback: Any = None) -> None:
        _load()
        # Complex values stay on NumPy: XLA flushes subnormal parts to zero, contracts complex
        # products into fused multiply-adds and has its own complex division and functions
        # (Mul, Div, Exp, Angle, MatMul differ from NumPy by ulps; docs/design.md "Complex").
        for v in graph.values():
            if v.dtype.kind == "c":
                raise UnsupportedOperationError(
                    f"graph {graph.name!r} cannot run on the jax engine with NumPy's results: "
                    f"{v.name!r} is {v.dtype}, and XLA's complex arithmetic differs from "
                    "NumPy's. Use engine='numpy' (or engine=None to let kiln choose)"
                )
        missing = unsupported_ops(graph)
        if missing:
            raise UnsupportedOperationError(
                f"graph {graph.name!r} cannot run on the jax engine with NumPy's results: "
                f"{'; '.join(missing)}. Use engine='numpy' (or engine=None to let kiln choose)"
            )
        for c in graph.constants:
            if has_subnormal(c.data):
                raise UnsupportedOperationError(
                    f"graph {graph.name!r} cannot run on the jax engine with NumPy's results: "
                    f"constant {c.value.name!r} holds a subnormal number, which XLA flushes to "
                    "zero. Use engine='numpy' (or engine=None to let kiln choose)"
                )
        refuse_rounding(graph, "jax", *ROUNDING_CHECKS)
        self.graph = graph
        self.checker = InputChecker(graph)
        self.check_inputs: Callable[[Any], list[np.ndarray]] = self.checker
        self.fallback = fallback
        self._numpy: Any = None
        self._lock = threading.Lock()
        self._shapes: set[tuple[tuple[int, ...], ...]] = set()
        self._x64 = any(v.dtype.itemsize == 8 and v.dtype.kind in "iuf" for v in graph.values())
        # (position, name) of the inputs XLA would flush subnormals of, checked on every run
        self._flushed = tuple(
            (i, v.name) for i, v in enumerate(graph.input_values) if v.dtype.name in _SUBNORMAL_BITS
        )
        embedded: dict[int, Any] = {}
        passed: list[Any] = []
        passed_ids: list[int] = []
        for c in graph.constants:
            # A NaN XLA can see miscompiles: exp(x - nan) on the CPU gives 0 or garbage, even
            # behind an optimization barrier (jax 0.10); a NaN passed at run time does not.
            if c.data.size <= EMBED_MAX_ELEMENTS and not has_nan(c.data):
                embedded[id(c.value)] = c.data
            else:
                passed_ids.append(id(c.value))
                passed.append(c.data)
        self._embedded = embedded
        self._passed_ids = tuple(passed_ids)
        with self._config():
            self._weights = tuple(_jnp.asarray(a) for a in passed)
            self._jitted = _jax.jit(self._program, compiler_options=COMPILER_OPTIONS)
        # Trace once now for a static graph: unsupported attribute combinations surface at
        # finalize, not on the first call.
        if InputChecker(graph).static:
            with self._config():
                specs = [_jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in graph.input_values]
                weights = [_jax.ShapeDtypeStruct(w.shape, w.dtype) for w in self._weights]
                _jax.eval_shape(self._program, weights, *specs)

    def _config(self) -> Any:
        return _jax.enable_x64(True) if self._x64 else _NullContext()

    def _program(self, weights: Sequence[Any], *inputs: Any) -> list[Any]:
        env: dict[int, Any] = dict(self._embedded)
        env.update(zip(self._passed_ids, weights))
        for v, x in zip(self.graph.input_values, inputs):
            env[id(v)] = x
        scope = self.graph.name_scope()
        for node in self.graph.nodes:
            try:
                _lower_node(node, env, scope)
            except KilnError:
                raise
            except Exception as exc:  # jax's own errors while tracing, named by node
                raise EngineError(
                    f"the jax engine cannot lower node {node.name!r} ({node.op}) of graph "
                    f"{self.graph.name!r}: {type(exc).__name__}: {exc}"
                ) from exc
        outputs = [_jnp.asarray(env[id(v)]) for v in self.graph.output_values]
        if self._flushed:
            # one flag per input XLA would flush: computed from the bits, inside the program
            # (a fused read of the input, no NumPy pass), before any arithmetic flushes them
            outputs.append(_jnp.stack([_any_subnormal(inputs[i]) for i, _ in self._flushed]))
        return outputs

    def run_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        shapes = tuple(a.shape for a in arrays)
        if shapes not in self._shapes:
            with self._lock:
                if len(self._shapes) >= MAX_TRACES:
                    return self._numpy_fallback().run_arrays(arrays)
                self._shapes.add(shapes)
        try:
            with self._config():
                outs = self._jitted(self._weights, *_jax.device_put(list(arrays)))
            if self._flushed:
                flags = np.asarray(outs[-1])
                outs = outs[:-1]
            results = [np.array(o) for o in outs]  # writable, owned: never a jax buffer
        except Exception as exc:
            if self.fallback is not None:  # chosen automatically: NumPy's answer instead
                return self.fallback.run_arrays(arrays)
            if isinstance(exc, KilnError):
                raise
            raise EngineError(
                f"the jax engine failed running graph {self.graph.name!r}: "
                f"{type(exc).__name__}: {exc}. Finalize with engine='numpy' to run it on NumPy"
            ) from exc
        if self._flushed and flags.any():
            if self.fallback is not None:  # chosen automatically: NumPy's answer instead
                return self.fallback.run_arrays(arrays)
            name = self._flushed[int(np.argmax(flags))][1]
            raise UnsupportedOperationError(
                f"the jax engine cannot run graph {self.graph.name!r} on this call with "
                f"NumPy's results: input {name!r} holds a subnormal number, which XLA "
                "flushes to zero. Finalize with engine='numpy' (or engine=None, which runs "
                "such calls on NumPy)"
            )
        return results

    def _numpy_fallback(self) -> Any:
        """The NumPy plan of the graph (the automatic selection's, or one of its own)."""
        if self.fallback is not None:
            return self.fallback
        if self._numpy is None:
            from .cpu import CpuPlan

            self._numpy = CpuPlan(self.graph)
        return self._numpy


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _lower_node(node: Node, env: dict[int, Any], scope: Any) -> None:
    """Compute ``node``'s outputs into ``env``: by the registry kernel when every input is
    known, else by its lowering (or its expansion, for a fused operator)."""
    opdef = get_op(node.op)
    ins = [None if v is None else env[id(v)] for v in node.inputs]
    attrs = opdef.bind_attrs(node.attrs)
    if all(_is_static(x) for x in ins):
        with np.errstate(all="ignore"):
            results: Sequence[Any] = as_outputs(opdef.kernel(*ins, **attrs))
        for v, r in zip(node.outputs, results):
            env[id(v)] = r
        return
    for v, x in zip(node.inputs, ins):
        if isinstance(x, np.ndarray) and has_subnormal(x):
            raise NotLowerable(
                f"node {node.name!r} ({node.op}): input {v.name!r} is known when compiling "
                "and holds a subnormal number, which XLA flushes to zero"
            )
    if opdef.has(ELEMENTWISE):
        # A constant operand reaches XLA opaque, so no rewrite keyed on its value applies
        # (x + 0.0 -> x, x * 1.0 -> x, x / c -> x * (1 / c)) and nothing folds a division.
        ins = [_opaque(x) if isinstance(x, np.ndarray) else x for x in ins]
    lower = LOWERINGS.get(node.op)
    if lower is None:
        if opdef.expand is None:
            raise NotLowerable(f"{node.op}: no jax lowering")
        for inner in expand_node(node, scope):
            _lower_node(inner, env, scope)
        return
    result = lower(*ins, **attrs)
    results = result if isinstance(result, tuple) else (result,)
    for v, r in zip(node.outputs, results):
        if r is not None:  # None: an output the lowering leaves out, never read (see
            env[id(v)] = r  # unsupported_ops)


def _opaque(x: np.ndarray) -> Any:
    """``x`` as a traced value XLA cannot see the contents of."""
    return _lax.optimization_barrier(_jnp.asarray(x))


# -- control flow: If, Loop, Scan as lax.cond, lax.while_loop / lax.scan ---------------------
# (the nodes jax cannot run with static shapes, those whose outputs have a size known only
# when the graph runs, are kept off by the records' engine limits; see kiln.ops.control)


def _run_subgraph(graph: ModelGraph, inputs: Sequence[Any]) -> list[Any]:
    """The outputs of subgraph ``graph`` on ``inputs``, lowered node by node."""
    env: dict[int, Any] = {id(c.value): c.data for c in graph.constants}
    for v, x in zip(graph.input_values, inputs):
        env[id(v)] = x
    scope = graph.name_scope()
    for node in graph.nodes:
        _lower_node(node, env, scope)
    return [_jnp.asarray(env[id(v)]) for v in graph.output_values]


def _lower_if(cond: Any, *captures: Any, then_branch: Any, else_branch: Any) -> Any:
    if _is_static(cond):  # known when compiling: the branch is too
        chosen = then_branch if bool(np.asarray(cond).reshape(-1)[0]) else else_branch
        return tuple(_run_subgraph(chosen, captures))
    return tuple(
        _lax.cond(
            _jnp.asarray(cond).reshape(-1)[0],
            lambda ops: _run_subgraph(then_branch, ops),
            lambda ops: _run_subgraph(else_branch, ops),
            list(captures),
        )
    )


def _lower_loop(m: Any, cond: Any, *rest: Any, body: Any, num_captures: int) -> Any:
    carried = len(rest) - num_captures
    state = [_jnp.asarray(x) for x in rest[:carried]]
    captured = list(rest[carried:])
    if len(body.output_values) > 1 + carried:  # scan outputs: a trip count known now
        if not _is_static(m):
            raise NotLowerable("Loop: scan outputs need a trip count known when compiling")
        count = int(np.asarray(m).reshape(-1)[0])

        def step(values: list[Any], i: Any) -> tuple[list[Any], list[Any]]:
            outs = _run_subgraph(body, [i, _jnp.asarray(True), *values, *captured])
            return outs[1 : 1 + carried], outs[1 + carried :]

        final, ys = _lax.scan(step, state, _jnp.arange(max(count, 0), dtype=_jnp.int64))
        return (*final, *ys)
    limit = None if m is None else _jnp.asarray(m).reshape(-1)[0]
    go = _jnp.asarray(True if cond is None else cond).reshape(-1)[0]

    def keep_going(loop: tuple[Any, Any, list[Any]]) -> Any:
        i, flag, _ = loop
        return flag if limit is None else flag & (i < limit)

    def iterate(loop: tuple[Any, Any, list[Any]]) -> tuple[Any, Any, list[Any]]:
        i, flag, values = loop
        outs = _run_subgraph(body, [i, flag, *values, *captured])
        return i + 1, outs[0].reshape(-1)[0], outs[1 : 1 + carried]

    _, _, final = _lax.while_loop(keep_going, iterate, (_jnp.int64(0), go, state))
    return tuple(final)


def _lower_scan(
    *inputs: Any,
    body: Any,
    num_scan_inputs: int,
    scan_input_axes: Sequence[int],
    scan_input_directions: Sequence[int],
    scan_output_axes: Sequence[int],
    scan_output_directions: Sequence[int],
    num_captures: int,
) -> Any:
    states = len(inputs) - num_scan_inputs - num_captures
    state = [_jnp.asarray(x) for x in inputs[:states]]
    captured = list(inputs[states + num_scan_inputs :])
    seqs = []
    for j, x in enumerate(inputs[states : states + num_scan_inputs]):
        x = _jnp.asarray(x)
        axis = (scan_input_axes[j] if scan_input_axes else 0) % x.ndim
        x = _jnp.moveaxis(x, axis, 0)
        seqs.append(_jnp.flip(x, 0) if scan_input_directions and scan_input_directions[j] else x)

    def step(values: list[Any], slices: list[Any]) -> tuple[list[Any], list[Any]]:
        outs = _run_subgraph(body, [*values, *slices, *captured])
        return outs[:states], outs[states:]

    final, ys = _lax.scan(step, state, seqs)
    stacked = []
    for j, y in enumerate(ys):
        if scan_output_directions and scan_output_directions[j]:
            y = _jnp.flip(y, 0)
        axis = (scan_output_axes[j] if scan_output_axes else 0) % y.ndim
        stacked.append(_jnp.moveaxis(y, 0, axis))
    return (*final, *stacked)


LOWERINGS.update({"If": _lower_if, "Loop": _lower_loop, "Scan": _lower_scan})
