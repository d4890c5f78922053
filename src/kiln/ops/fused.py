"""kiln's own fused operator: ``kiln.FusedElementwise``, a straight-line elementwise program.

The ``program`` attribute lists one step per string, each a call of a registry elementwise
operator on earlier values, written as Python call syntax: ``v0``, ``v1``, ... are the node's
inputs, and each step's result takes the next number::

    program = ("Mul(v0, v0)", "Mul(v2, v0)", "Tanh(v3)")   # inputs v0, v1; steps v2, v3, v4
    outputs = (4,)                                          # the node's outputs (default: last)

Attributes follow as keywords (``"Cast(v0, to=11)"``) and ``None`` stands for an omitted
optional input. ``infer`` composes the member operators' own rules, the kernel evaluates the
whole program as one ``numexpr`` expression per output when every operator and dtype has a
numexpr form (one pass over memory, several threads), and otherwise runs the member kernels
step by step. ``expand`` gives back the ONNX nodes (for ONNX export).
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numexpr
import numpy as np

from .. import dtypes
from ..errors import OpArgumentError
from .dispatch import as_outputs
from .registry import (
    ELEMENTWISE,
    PURE,
    Attr,
    Input,
    NodeBuilder,
    OpDef,
    Sample,
    TensorType,
    get_op,
    register,
)
from .sampling import sample_array

__all__ = ["Step", "parse_program", "format_step", "numexpr_expression", "NUMEXPR_DTYPES"]

OP = "FusedElementwise"
NUMEXPR_DTYPES = frozenset(
    {dtypes.bool_, dtypes.int32, dtypes.int64, dtypes.float32, dtypes.float64}
)
_FLOATS = frozenset({dtypes.float32, dtypes.float64})
_NUMBERS = _FLOATS | {dtypes.int32, dtypes.int64}

# How each operator reads in numexpr, and for which input dtypes. ``{0}``, ``{1}`` are the
# operands; ``{one}``/``{zero}`` are constants of the operands' dtype (a bare literal like
# ``1.0`` would make numexpr compute float32 in float64).
_FUNCTIONS = {
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Asin": "arcsin",
    "Acos": "arccos",
    "Atan": "arctan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Tanh": "tanh",
    "Asinh": "arcsinh",
    "Acosh": "arccosh",
    "Atanh": "arctanh",
    "Floor": "floor",
    "Ceil": "ceil",
    "Abs": "abs",
}
_NUMEXPR: dict[str, tuple[str, frozenset]] = {
    **{op: (f"{fn}({{0}})", _FLOATS) for op, fn in _FUNCTIONS.items()},
    "Identity": ("{0}", NUMEXPR_DTYPES),
    "Add": ("({0} + {1})", _NUMBERS),
    "Sub": ("({0} - {1})", _NUMBERS),
    "Mul": ("({0} * {1})", _NUMBERS),
    "Div": ("({0} / {1})", _FLOATS),  # integer Div truncates, numexpr's does not
    "Pow": ("({0} ** {1})", _FLOATS),
    "Neg": ("(-{0})", _NUMBERS),
    "Reciprocal": ("({one} / {0})", _FLOATS),
    "Sigmoid": ("({one} / ({one} + exp(-{0})))", _FLOATS),
    "Relu": ("where({0} < {zero}, {zero}, {0})", _NUMBERS),  # NaN stays NaN
    "Max": ("where(({0} >= {1}) | ({0} != {0}), {0}, {1})", _NUMBERS),  # NaN propagates
    "Min": ("where(({0} <= {1}) | ({0} != {0}), {0}, {1})", _NUMBERS),
    "Equal": ("({0} == {1})", _NUMBERS),
    "Less": ("({0} < {1})", _NUMBERS),
    "LessOrEqual": ("({0} <= {1})", _NUMBERS),
    "Greater": ("({0} > {1})", _NUMBERS),
    "GreaterOrEqual": ("({0} >= {1})", _NUMBERS),
    "And": ("({0} & {1})", frozenset({dtypes.bool_})),
    "Or": ("({0} | {1})", frozenset({dtypes.bool_})),
    "Xor": ("({0} ^ {1})", frozenset({dtypes.bool_})),
    "Not": ("(~{0})", frozenset({dtypes.bool_})),
    "Where": ("where({0}, {1}, {2})", NUMEXPR_DTYPES),  # checked on X, the second operand
}
_ARITY = {"Max": 2, "Min": 2}  # numexpr forms for two operands only


@dataclass(frozen=True)
class Step:
    """One step of a program: operator, argument indices (None: omitted), attributes."""

    op: str
    args: tuple[int | None, ...]
    attrs: tuple[tuple[str, Any], ...]


def format_step(op: str, args: Sequence[int | None], attrs: Mapping[str, Any]) -> str:
    """The program string of one step.

    Example:
        >>> format_step("Cast", [0], {"to": 11})
        'Cast(v0, to=11)'
    """
    parts = ["None" if a is None else f"v{a}" for a in args]
    parts += [f"{k}={v!r}" for k, v in sorted(attrs.items())]
    return f"{op}({', '.join(parts)})"


@functools.lru_cache(maxsize=1024)
def parse_program(program: tuple[str, ...], inputs: int) -> tuple[Step, ...]:
    """Parse and check a program over ``inputs`` input values.

    Raises :class:`~kiln.errors.OpArgumentError` naming the step that is malformed, uses an
    unknown or non-elementwise operator, or refers to a value not yet computed.

    Example:
        >>> parse_program(("Mul(v0, v1)", "Tanh(v2)"), 2)[1]
        Step(op='Tanh', args=(2,), attrs=())
    """
    if not program:
        raise OpArgumentError(f"{OP}: attribute 'program' is empty; expected at least one step")
    steps = []
    for index, text in enumerate(program):
        where = f"{OP}: program step {index} {text!r}"
        try:
            call = ast.parse(text, mode="eval").body
        except SyntaxError:
            raise OpArgumentError(f"{where} is not of the form Op(v0, v1, attr=value)") from None
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            raise OpArgumentError(f"{where} is not of the form Op(v0, v1, attr=value)")
        name = call.func.id
        try:
            opdef = get_op(name)
        except OpArgumentError:
            raise OpArgumentError(f"{where}: no operator named {name!r} is registered") from None
        if ELEMENTWISE not in opdef.traits or len(opdef.outputs) != 1 or opdef.domain:
            raise OpArgumentError(f"{where}: {name} is not a one-output elementwise ONNX operator")
        args: list[int | None] = []
        for arg in call.args:
            if isinstance(arg, ast.Constant) and arg.value is None:
                args.append(None)
            elif isinstance(arg, ast.Name) and arg.id[:1] == "v" and arg.id[1:].isdigit():
                ref = int(arg.id[1:])
                if ref >= inputs + index:
                    raise OpArgumentError(
                        f"{where}: v{ref} is not computed yet (values v0..v{inputs + index - 1} "
                        "are available)"
                    )
                args.append(ref)
            else:
                raise OpArgumentError(f"{where}: arguments must be v<number> or None")
        try:
            attrs = tuple((k.arg, ast.literal_eval(k.value)) for k in call.keywords if k.arg)
        except ValueError:
            raise OpArgumentError(f"{where}: attribute values must be literals") from None
        steps.append(Step(name, tuple(args), attrs))
    return tuple(steps)


def _outputs(outputs: Sequence[int] | None, count: int) -> tuple[int, ...]:
    chosen = (count - 1,) if outputs is None else tuple(outputs)
    for o in chosen:
        if not 0 <= o < count:
            raise OpArgumentError(
                f"{OP}: attribute 'outputs' names value {o}; expected one of 0..{count - 1}"
            )
    return chosen


def _infer(types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
    steps = parse_program(attrs["program"], len(types))
    values: list[TensorType | None] = list(types)
    for index, step in enumerate(steps):
        opdef = get_op(step.op)
        args = [None if a is None else values[a] for a in step.args]
        try:
            opdef.check_arity(len(args))
            (out,) = opdef.infer(args, opdef.bind_attrs(dict(step.attrs)))[:1]
        except OpArgumentError as exc:
            raise OpArgumentError(f"{OP}: program step {index}: {exc}") from None
        values.append(TensorType(out.dtype, out.shape))  # contents are not propagated
    chosen = _outputs(attrs["outputs"], len(values))
    return [values[o] for o in chosen]  # type: ignore[misc]


def numexpr_expression(
    steps: Sequence[Step], dtypes_in: Sequence[np.dtype], target: int
) -> tuple[str, dict[str, np.ndarray]] | None:
    """The numexpr expression computing value ``target`` of a program whose inputs have
    ``dtypes_in``, with the constants it needs; None when some step has no numexpr form.

    Example:
        >>> steps = parse_program(("Mul(v0, v1)", "Tanh(v2)"), 2)
        >>> numexpr_expression(steps, [np.dtype("float32")] * 2, 3)[0]
        'tanh((v0 * v1))'
    """
    dts: list[np.dtype] = list(dtypes_in)
    if any(d not in NUMEXPR_DTYPES for d in dts):
        return None
    texts: list[str] = [f"v{i}" for i in range(len(dts))]
    constants: dict[str, np.ndarray] = {}
    for step in steps:
        form = _NUMEXPR.get(step.op)
        if form is None or step.attrs or None in step.args:
            return None
        if step.op in _ARITY and len(step.args) != _ARITY[step.op]:
            return None
        template, allowed = form
        args = [a for a in step.args if a is not None]
        checked = dts[args[1]] if step.op == "Where" else dts[args[0]]
        if checked not in allowed or any(dts[a] not in NUMEXPR_DTYPES for a in args):
            return None
        if step.op == "Pow" and dts[args[0]] != dts[args[1]]:
            return None
        one = f"one_{checked.name}"
        zero = f"zero_{checked.name}"
        if "{one}" in template:
            constants[one] = np.ones((), checked)
        if "{zero}" in template:
            constants[zero] = np.zeros((), checked)
        texts.append(template.format(*(texts[a] for a in args), one=one, zero=zero))
        dts.append(_result_dtype(step.op, dts, args))
    return texts[target], constants


def _result_dtype(op: str, dts: Sequence[np.dtype], args: Sequence[int]) -> np.dtype:
    if op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
        return dtypes.bool_
    return dts[args[1]] if op == "Where" else dts[args[0]]


def _kernel(*arrays: np.ndarray | None, program: tuple[str, ...], outputs: Any = None) -> Any:
    steps = parse_program(program, len(arrays))
    chosen = _outputs(outputs, len(arrays) + len(steps))
    if all(a is not None and a.size for a in arrays):
        in_dtypes = [a.dtype for a in arrays]  # type: ignore[union-attr]
        forms = [numexpr_expression(steps, in_dtypes, o) for o in chosen]
        if all(f is not None for f in forms) and all(o >= len(arrays) for o in chosen):
            names = {f"v{i}": a for i, a in enumerate(arrays)}
            results = []
            for form in forms:
                assert form is not None
                expression, constants = form
                results.append(numexpr.evaluate(expression, {**names, **constants}))
            return tuple(results) if len(results) > 1 else results[0]
    values: list[np.ndarray | None] = list(arrays)
    for step in steps:
        opdef = get_op(step.op)
        args = [None if a is None else values[a] for a in step.args]
        (out,) = as_outputs(opdef.kernel(*args, **opdef.bind_attrs(dict(step.attrs))))[:1]
        values.append(out)
    results = [values[o] for o in chosen]
    return tuple(results) if len(results) > 1 else results[0]


def _expand(
    builder: NodeBuilder, inputs: Sequence[Any], attrs: Mapping[str, Any], outputs: Sequence[Any]
) -> None:
    """The member operators as ONNX nodes: same inputs, the fused node's own output values."""
    steps = parse_program(attrs["program"], len(inputs))
    chosen = _outputs(attrs["outputs"], len(inputs) + len(steps))
    values = list(inputs)
    for index, step in enumerate(steps):
        position = len(inputs) + index
        args = [None if a is None else values[a] for a in step.args]
        defines = [outputs[chosen.index(position)]] if position in chosen else []
        (out,) = builder.add(step.op, args, dict(step.attrs), outputs=defines)
        values.append(out)


# -- samples ------------------------------------------------------------------------------

_F32, _F64 = dtypes.float32, dtypes.float64
_TANH_GELU = (
    "Mul(v0, v0)",  # v3 = x * x
    "Mul(v3, v0)",  # v4 = x ** 3
    "Mul(v2, v4)",  # v5 = 0.044715 * x ** 3
    "Add(v0, v5)",  # v6
    "Mul(v1, v6)",  # v7 = sqrt(2/pi) * (...)
    "Tanh(v7)",  # v8
)


def _gelu_reference(x: np.ndarray, c1: np.ndarray, c2: np.ndarray, **_: Any) -> np.ndarray:
    values = [
        math.tanh(float(c1) * (v + float(c2) * v**3)) for v in x.astype(np.float64).reshape(-1)
    ]
    return np.array(values).reshape(x.shape).astype(x.dtype)


def _where_max_reference(a: np.ndarray, b: np.ndarray, **_: Any) -> np.ndarray:
    shape = np.broadcast_shapes(a.shape, b.shape)
    pairs = zip(np.broadcast_to(a, shape).reshape(-1).tolist(), np.broadcast_to(b, shape).flat)
    return np.array([x if x > y else y for x, y in pairs], dtype=a.dtype).reshape(shape)


def _erf_reference(x: np.ndarray, d: np.ndarray, **_: Any) -> np.ndarray:
    flat = [math.erf(v / float(d)) for v in x.astype(np.float64).reshape(-1)]
    return np.array(flat).reshape(x.shape).astype(x.dtype)


def _poly_reference(a: np.ndarray, b: np.ndarray, **_: Any) -> tuple[np.ndarray, np.ndarray]:
    shape = np.broadcast_shapes(a.shape, b.shape)
    wa = np.broadcast_to(a, shape).astype(object)
    wb = np.broadcast_to(b, shape).astype(object)
    square = wa * wa - wb
    info = np.iinfo(a.dtype)
    span = int(info.max) - int(info.min) + 1

    def wrap(v: Any) -> np.ndarray:
        return np.vectorize(lambda t: (int(t) - int(info.min)) % span + int(info.min))(v)

    return (
        wrap(square).astype(a.dtype).reshape(shape),
        wrap(-square * wa).astype(a.dtype).reshape(shape),
    )


def _logic_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, **_: Any) -> np.ndarray:
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    flat = zip(*(np.broadcast_to(t, shape).reshape(-1).tolist() for t in (a, b, c)))
    return np.array([(x and not y) or (z != x) for x, y, z in flat], bool).reshape(shape)


def _samples() -> list[Sample]:
    out = []
    dt: np.dtype
    attrs: dict[str, Any]
    for dt in (_F32, _F64):
        for shape in ((3, 4), (1,), ()):
            inputs = (
                sample_array(shape, dt),
                np.asarray(math.sqrt(2 / math.pi), dt),
                np.asarray(0.044715, dt),
            )
            attrs = {"program": _TANH_GELU}
            out.append(Sample(inputs, attrs, _gelu_reference, name=f"tanh-gelu-{dt.name}{shape}"))
    for dt in (_F32, dtypes.int32, dtypes.int64):
        for sa, sb in (((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((0, 3), (3,))):
            a, b = sample_array(sa, dt), sample_array(sb, dt)
            attrs = {"program": ("Greater(v0, v1)", "Where(v2, v0, v1)")}
            out.append(Sample((a, b), attrs, _where_max_reference, name=f"max-{dt.name}{sa}{sb}"))
    for dt in (_F32, dtypes.float16):  # Erf and float16 have no numexpr form: step by step
        x = sample_array((2, 5), dt)
        attrs = {"program": ("Div(v0, v1)", "Erf(v2)")}
        out.append(Sample((x, np.asarray(1.5, dt)), attrs, _erf_reference, name=f"erf-{dt.name}"))
    for dt in (dtypes.int64, dtypes.int32):  # two outputs; v2 = a*a - b, v3 = -(v2 * a)
        a, b = sample_array((4, 3), dt, -50, 50), sample_array((3,), dt, -50, 50)
        attrs = {
            "program": ("Mul(v0, v0)", "Sub(v2, v1)", "Mul(v3, v0)", "Neg(v4)"),
            "outputs": (3, 5),
        }
        out.append(Sample((a, b), attrs, _poly_reference, name=f"two-outputs-{dt.name}"))
    logic = ("Not(v1)", "And(v0, v3)", "Xor(v2, v0)", "Or(v4, v5)")
    bools = tuple(sample_array(s, dtypes.bool_) for s in ((3, 4), (4,), (3, 1)))
    out.append(Sample(bools, {"program": logic}, _logic_reference, name="logic"))
    return out


def _cost(inputs: Sequence[Any], outputs: Sequence[Any], attrs: Mapping[str, Any]) -> float:
    """OpDef.cost: one element operation per program step and output element."""
    return max(len(attrs["program"]), 1)


def _raises(inputs: Sequence[Any], outputs: Sequence[Any], attrs: Mapping[str, Any]) -> bool:
    """OpDef.raises_on_values: a step's operator can raise on values (integer Pow); judged by
    operator, not by the step's types, so a fused node is kept whenever a member might."""
    steps = parse_program(tuple(attrs["program"]), len(inputs))
    return any(get_op(step.op).raises_on_values for step in steps)


def _bit_exact(inputs: Sequence[Any], outputs: Sequence[Any], attrs: Mapping[str, Any]) -> bool:
    """OpDef.bit_exact: every step is, with the types the steps compute."""
    steps = parse_program(tuple(attrs["program"]), len(inputs))
    values: list[Any] = list(inputs)
    for step in steps:
        opdef = get_op(step.op)
        args = [None if a is None else values[a] for a in step.args]
        step_attrs = opdef.bind_attrs(dict(step.attrs))
        out = opdef.infer(args, step_attrs)[0]
        if not opdef.is_bit_exact(args, [out], step_attrs):
            return False
        values.append(out)
    return True


register(
    OpDef(
        name=OP,
        doc="A straight-line program of elementwise operators (attribute 'program', one "
        "'Op(v0, v1, attr=value)' per step; 'outputs' picks the values returned, the last by "
        "default), evaluated in one pass.",
        inputs=(Input("inputs", variadic=True),),
        outputs=("outputs",),
        attrs={
            "program": Attr("strs", doc="one step per string, Op(v0, v1, attr=value)"),
            "outputs": Attr("ints", None, "the values returned; None: the last step's"),
        },
        infer=_infer,
        kernel=_kernel,
        traits=frozenset({ELEMENTWISE, PURE}),
        samples=_samples,
        domain="kiln",
        variadic_outputs=True,
        expand=_expand,
        cost=_cost,
        raises_on_values=_raises,
        bit_exact=_bit_exact,
    )
)
