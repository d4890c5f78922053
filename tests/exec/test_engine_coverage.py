"""Which registered operators each engine cannot run, computed from the registry and the
engines' own tables, against the explicit lists below.

Registering an operator makes this fail until someone decides, for every engine, whether it
runs the operator: give the engine what it needs (a jax lowering in ``exec/jax_engine.py``'s
``LOWERINGS``, an ``expand`` hook for a kiln-domain operator, ...) or list the operator as
missing for that engine here. The same goes for the nodes an engine refuses by an
operator's ``OpDef.engine_limits``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest

from kiln.ops.registry import OpDef, all_ops

ENGINES = ("numpy", "reference", "jax", "onnxruntime")

# Operators each engine cannot run at all.
CANNOT_RUN: dict[str, set[str]] = {
    "numpy": set(),
    "reference": set(),
    "jax": {
        "CastLike",
        "Celu",
        "ConvTranspose",
        "GatherND",
        "Hardmax",
        "LRN",
        "NonZero",
        "PRelu",
        "Resize",
        "ScatterElements",
        "ScatterND",
        "Shrink",
        "ThresholdedRelu",
        "TopK",
        # complex numbers stay on NumPy (XLA's complex arithmetic differs: jax_engine.py)
        *("kiln.Angle", "kiln.ComplexAbs", "kiln.Conj", "kiln.Imag", "kiln.Real"),
    },
    # ONNX has no complex operators (io/onnx_export.py refuses complex values)
    "onnxruntime": {"kiln.Angle", "kiln.ComplexAbs", "kiln.Conj", "kiln.Imag", "kiln.Real"},
}

# Operators of which each engine refuses some nodes: by the record's ``engine_limits``, or on
# jax by a lowering that leaves some outputs out.
REFUSES_SOME: dict[str, set[str]] = {
    "numpy": set(),
    "reference": set(),
    "jax": {
        "Cast",  # to or from strings (as CastLike): XLA has no string type
        "CastLike",
        "CumSum",  # on floats: XLA's parallel scan rounds differently from NumPy's sequence
        "If",  # control flow with an output size known only when it runs (as Loop, Scan)
        "Loop",
        "Scan",
        "MaxPool",  # when its Indices output is read
        "Pow",  # on integers: NumPy wraps and raises for a negative exponent
        "ReduceMax",  # on floats: the sign of a zero result is XLA's (as ReduceMin)
        "ReduceMin",
        # on float64: results differ from NumPy's by ulps (elementwise.FLOAT64_ULPS)
        *("Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cosh", "Elu", "Erf", "Exp"),
        *("Gelu", "HardSigmoid", "Log", "LogSoftmax", "Mish", "Selu", "Sigmoid", "Sinh"),
        *("Softmax", "Softplus", "Tan", "Tanh", "kiln.Exp2", "kiln.Log10", "kiln.Log2"),
    },
    "onnxruntime": {
        "ArgMax",  # on floats: onnxruntime skips NaN (as ReduceMax/Min, MaxPool, GlobalMaxPool)
        "ArgMin",
        "BatchNormalization",  # on float64
        "Cast",  # to or from strings (as CastLike): onnxruntime formats numbers its own way
        "CastLike",
        "Dropout",  # with a training_mode not known to be False (it would drop at random)
        "Div",  # on integers: onnxruntime fails on a zero divisor (as Mod)
        "Einsum",  # spaces or upper-case labels in the equation; an empty input (crashes)
        "GlobalMaxPool",
        "MaxPool",
        "Mod",
        "Gelu",  # on float64
        "RMSNormalization",  # on float64
        "ReduceL1",  # of an empty tensor, as every Reduce*
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "ReduceSumSquare",
        "ScatterElements",  # on bool with a reduction
        "ScatterND",
        "Pow",  # on integers: onnxruntime's overflow differs, no error for a negative exponent
        "Max",  # on floats: the sign of a zero result (as Min, Clip, Relu, Where)
        "Min",
        "Clip",
        "Relu",
        "Where",
        # on float64: results differ from NumPy's by ulps (elementwise.FLOAT64_ULPS)
        *("Cos", "Exp", "Log", "LogSoftmax", "Shrink", "Sigmoid", "Sin", "Softmax", "Tanh"),
        *("kiln.Exp2", "kiln.Log10", "kiln.Log2"),
    },
}

# The engines that read OpDef.engine_limits (the NumPy and reference engines run every node).
LIMITED_ENGINES = ("jax", "onnxruntime")


def _require(engine: str) -> None:
    """Skip where the engine's package is not installed."""
    if engine == "jax":
        pytest.importorskip("jax")
    elif engine == "onnxruntime":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnx")
        if importlib.util.find_spec("kiln.io.onnx_export") is None:
            pytest.skip("kiln.io.onnx_export (graph.to_onnx) does not exist")


# -- why an engine cannot run an operator (None: it can) -------------------------------------


def _kernel_gap(op: OpDef) -> str | None:
    """The NumPy and reference engines run every operator by its registry kernel."""
    return None if callable(op.kernel) else "its record has no callable kernel"


def _jax_gap(op: OpDef) -> str | None:
    from kiln.exec.jax_engine import ENGINE, LOWERINGS

    limit = op.engine_limits.get(ENGINE)
    if limit is not None and limit.when is None:
        return f"its record's engine_limits refuse every node ({limit.reason})"
    if op.qualified_name in LOWERINGS or op.expand is not None:
        return None  # a lowering, or its expansion into ONNX-domain nodes
    return "no lowering in kiln.exec.jax_engine.LOWERINGS and no expand hook"


def _onnxruntime_gap(op: OpDef) -> str | None:
    import onnx

    from kiln.exec.ort_engine import ENGINE
    from kiln.io.onnx_export import NEWEST_OPSET

    limit = op.engine_limits.get(ENGINE)
    if limit is not None and limit.when is None:
        return f"its record's engine_limits refuse every node ({limit.reason})"
    if op.domain:
        return None if op.expand is not None else "a kiln-domain operator without expand"
    opset = max(NEWEST_OPSET, op.since_version)
    if not onnx.defs.has(op.name, opset, ""):
        return f"ONNX defines no {op.name} up to opset {opset}, so it cannot be exported"
    return None


GAPS: dict[str, Callable[[OpDef], str | None]] = {
    "numpy": _kernel_gap,
    "reference": _kernel_gap,
    "jax": _jax_gap,
    "onnxruntime": _onnxruntime_gap,
}


def _refuses_some(engine: str, op: OpDef) -> bool:
    limit = op.engine_limits.get(engine)
    if limit is not None and limit.when is not None:
        return True
    if engine == "jax":
        from kiln.exec.jax_engine import LOWERINGS, FirstOutputs

        return isinstance(LOWERINGS.get(op.qualified_name), FirstOutputs)
    return False


# -- the tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_runs_every_operator_not_listed_as_missing(engine: str) -> None:
    _require(engine)
    problems = []
    for op in all_ops():
        name = op.qualified_name
        why = GAPS[engine](op)
        listed = name in CANNOT_RUN[engine]
        if why is not None and not listed:
            problems.append(
                f"{name} cannot run on {engine}: {why}. Give {engine} what it needs, or add "
                f"{name!r} to CANNOT_RUN[{engine!r}]"
            )
        elif why is None and listed:
            problems.append(f"{name} now runs on {engine}: remove it from CANNOT_RUN[{engine!r}]")
    unknown = CANNOT_RUN[engine] - {op.qualified_name for op in all_ops()}
    problems += [f"CANNOT_RUN[{engine!r}] lists {n}, which is not registered" for n in unknown]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_refuses_some_nodes_of_listed_operators_only(engine: str) -> None:
    _require(engine)
    problems = []
    for op in all_ops():
        name = op.qualified_name
        refuses = _refuses_some(engine, op)
        listed = name in REFUSES_SOME[engine]
        if refuses and not listed:
            problems.append(
                f"{engine} refuses some {name} nodes: add {name!r} to REFUSES_SOME[{engine!r}]"
            )
        elif listed and not refuses:
            problems.append(
                f"{engine} no longer refuses any {name} node: remove it from "
                f"REFUSES_SOME[{engine!r}]"
            )
    assert not problems, "\n".join(problems)


def test_engine_limits_name_engines_that_read_them() -> None:
    for op in all_ops():
        for engine in op.engine_limits:
            assert engine in LIMITED_ENGINES, (
                f"{op.qualified_name}: engine_limits names {engine!r}, which does not read "
                f"them (the engines that do: {', '.join(LIMITED_ENGINES)})"
            )
