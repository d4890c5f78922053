"""The planned CPU executor: a graph compiled to one straight-line Python function over NumPy.

``finalize()`` on the CPU builds a :class:`CpuPlan`. Planning walks the graph once and writes
Python source with one line per node, ``v7 = k7(v3, c1)``, where every kernel, constant and
attribute set is bound as a default argument of the generated function, so the hot path is
local-variable loads and calls only: no per-node interpretation loop, no environment list, no
dict lookups. Planning also

* picks a kernel per node: the registry kernel, or a faster equivalent where the node's types
  allow one (``np.divide`` for a float Div, ``np.matmul`` for a float32/float64 MatMul,
  ``x.reshape(shape)`` for a Reshape whose output shape is static, ...);
* folds at plan time what the graph already determines: constants and static shapes flow
  through small shape-computing nodes (``Shape``, ``Gather`` of a shape, ``Concat`` ...), so an
  unoptimized static graph does no shape arithmetic per run;
* reuses buffers by liveness: an elementwise ufunc writes (``out=``) into an input buffer that
  the run itself allocated and that no later node reads, and every large intermediate is
  released (``del``) right after its last use, so the memory peak stays that of eager NumPy.

Every buffer a run writes into is allocated by that run, so concurrent runs of one plan share
nothing mutable, and a result handed to the caller is never written again.

Example:
    >>> import kiln, numpy as np
    >>> g = kiln.trace(lambda x: np.tanh(x) * 2, kiln.ones((2, 3), "float32")).graph
    >>> plan = CpuPlan(g)
    >>> plan.run_arrays([np.zeros((2, 3), np.float32)])[0].shape
    (2, 3)
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ops.dispatch import as_outputs
from ..ops.registry import ELEMENTWISE, PURE, SHAPE, get_op
from .inputs import InputChecker
from .plan import Plan

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph, Node, Value

__all__ = ["CpuPlan", "quiet_errors"]

# Below this many elements a buffer is not worth an ``out=`` or a ``del``: the extra keyword
# or statement costs more than NumPy's small-array allocation.
REUSE_MIN_ELEMENTS = 4096
# Plan-time folding runs kernels on known values only up to this many output elements.
FOLD_MAX_ELEMENTS = 4096


# -- silencing floating-point warnings once per run ----------------------------------------
#
# ``with np.errstate(all="ignore")`` costs ~2.5 us per call (it builds its state object on every
# entry), which is half of a five-op replay on small inputs. NumPy 2 keeps that state in a
# context variable; setting a prebuilt "ignore everything" value and resetting it is what
# errstate does, for ~0.1 us. Other NumPy versions use errstate itself.
try:
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj

    _QUIET_STATE: Any = _make_extobj(all="ignore")
    _errvar: contextvars.ContextVar[Any] | None = _extobj_contextvar
except (ImportError, AttributeError, TypeError):  # pragma: no cover - other NumPy layouts
    _QUIET_STATE = None
    _errvar = None


def quiet_errors() -> Callable[[], Callable[[], None]]:
    """A function that silences NumPy's floating-point warnings in this context and returns
    the function that restores them (``restore = quiet(); ...; restore()``).

    Example:
        >>> restore = quiet_errors()()
        >>> _ = np.float32(1) / np.float32(0)  # no RuntimeWarning
        >>> restore()
    """
    if _errvar is not None:
        var, state = _errvar, _QUIET_STATE

        def quiet() -> Callable[[], None]:
            token = var.set(state)
            return lambda: var.reset(token)

        return quiet

    def quiet_errstate() -> Callable[[], None]:
        ctx = np.errstate(all="ignore")
        ctx.__enter__()
        return lambda: ctx.__exit__(None, None, None)

    return quiet_errstate


# -- kernel choice --------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """How one node runs: ``call`` is a Python expression over the names in ``args`` (the
    node's inputs, ``{0}``, ``{1}``...) and the bound objects in ``binds``; ``fresh`` says the
    result is a new array the run owns (never a view of an input or a constant)."""

    template: str
    binds: tuple[Any, ...] = ()
    fresh: bool = False
    ufunc: np.ufunc | None = None  # an elementwise ufunc that may write ``out=`` an input


_VARIADIC_UFUNCS = {"Max": np.maximum, "Min": np.minimum, "Sum": np.add}
_FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float64))
_FLOATS_HALF = _FLOATS | {np.dtype(np.float16)}


def _static(shape: Sequence[Any]) -> bool:
    return all(isinstance(d, int) for d in shape)


def _numel(shape: Sequence[Any]) -> int | None:
    return math.prod(shape) if _static(shape) else None


def _gemm_fast(a: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """Gemm with alpha = beta = 1 on one float dtype: one matmul and an in-place add."""
    y = np.matmul(a, b)
    if c is not None:
        np.add(y, c, out=y)
    return y


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    """tanh-GELU in one buffer: x**3 as two multiplies (np.power is ~10x slower), in place."""
    y = np.multiply(x, x)
    y *= x
    y *= 0.044715
    y += x
    y *= _SQRT_2_OVER_PI
    np.tanh(y, out=y)
    y += 1.0
    y *= x
    y *= 0.5
    return y


def _choose(node: Node) -> Step:
    """The fastest correct way to run ``node``, from its recorded types."""
    op = node.op
    ins = node.inputs
    outs = node.outputs
    opdef = get_op(op)
    in_dtypes = [None if v is None else v.dtype for v in ins]
    out_dtype = outs[0].dtype if outs else None
    same = all(d == out_dtype for d in in_dtypes if d is not None)
    kernel = opdef.kernel
    attrs = opdef.bind_attrs(node.attrs)
    elementwise = opdef.has(ELEMENTWISE)

    if isinstance(kernel, np.ufunc) and not attrs and elementwise:
        # The registry kernel is itself the ufunc (Add, Mul, Exp, Tanh, Equal, ...).
        return Step(_call_template(len(ins)), (kernel,), True, kernel if same else None)
    if op in _VARIADIC_UFUNCS and len(ins) == 2 and same:
        ufunc = _VARIADIC_UFUNCS[op]  # Max/Min/Sum of two: the ufunc itself (NaN propagates)
        return Step("{b0}({0}, {1})", (ufunc,), True, ufunc)
    if op == "Div" and same and out_dtype in _FLOATS_HALF:
        return Step("{b0}({0}, {1})", (np.divide,), True, np.divide)
    if op == "Pow" and same and out_dtype in _FLOATS_HALF:
        return Step("{b0}({0}, {1})", (np.power,), True, np.power)
    if op == "Relu" and out_dtype in _FLOATS_HALF:
        return Step("{b0}({0}, {b1})", (np.maximum, out_dtype.type(0)), True)
    if op == "Gelu" and attrs["approximate"] == "tanh" and out_dtype in _FLOATS and outs[0].shape:
        return Step("{b0}({0})", (_gelu_tanh,), True)
    if op == "MatMul" and same and out_dtype in _FLOATS:
        return Step("{b0}({0}, {1})", (np.matmul,), True)
    if (
        op == "Gemm"
        and same
        and out_dtype in _FLOATS
        and attrs["alpha"] == 1.0
        and attrs["beta"] == 1.0
        and (len(ins) < 3 or ins[2] is None or len(ins[2].shape) <= 2)
    ):
        a = "{0}.T" if attrs["transA"] else "{0}"
        b = "{1}.T" if attrs["transB"] else "{1}"
        c = "{2}" if len(ins) > 2 and ins[2] is not None else "None"
        return Step(f"{{b0}}({a}, {b}, {c})", (_gemm_fast,), True)
    if op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze") and _static(outs[0].shape):
        return Step("{0}.reshape({b0})", (tuple(outs[0].shape),))
    if op == "Transpose":
        perm = attrs["perm"]
        perm = tuple(reversed(range(len(ins[0].shape)))) if perm is None else tuple(perm)
        return Step("{0}.transpose({b0})", (perm,))
    # The registry kernel with its attributes bound.
    if attrs:
        return Step(_call_template(len(ins), kwargs=True), (kernel, attrs))
    return Step(_call_template(len(ins)), (kernel,))


def _call_template(n: int, *, kwargs: bool = False) -> str:
    args = [f"{{{i}}}" for i in range(n)]
    if kwargs:
        args.append("**{b1}")
    return "{b0}(" + ", ".join(args) + ")"


# -- planning ---------------------------------------------------------------------------


class CpuPlan(Plan):
    """A graph compiled to straight-line NumPy code (see the module docstring).

    Same interface as :class:`~kiln.exec.reference.ReferencePlan`: ``check_inputs(inputs)``
    returns the arrays in signature order or raises :class:`~kiln.errors.InputMismatchError`,
    ``run_arrays(arrays)`` returns the output arrays, ``run(inputs)`` the output tensors.
    ``source`` is the generated code, for reading.
    """

    engine = "numpy"

    def __init__(self, graph: ModelGraph) -> None:
        self.graph = graph
        self.checker = InputChecker(graph)
        self.source, namespace = _generate(graph)
        env: dict[str, Any] = {}
        exec(compile(self.source, f"<kiln plan {graph.name}>", "exec"), namespace, env)  # noqa: S102
        self.run_arrays: Callable[[Sequence[np.ndarray]], list[np.ndarray]] = env["run"]
        self.check_inputs: Callable[[Any], list[np.ndarray]] = _fast_checker(self.checker)


def _fast_checker(checker: InputChecker) -> Callable[[Any], list[np.ndarray]]:
    """``checker`` behind a generated fast path for the replay case: a list of NumPy arrays of
    exactly the static dtypes and shapes. Anything else (tensors, a mapping, a mismatch, a
    symbolic graph) goes to the full check."""
    if not checker.static:
        return checker
    n = len(checker.names)
    binds: dict[str, Any] = {"_slow": checker, "_nd": np.ndarray, "_list": list}
    conds = []
    for i, (dtype, shape) in enumerate(zip(checker.dtypes, checker.shapes)):
        binds[f"d{i}"] = dtype
        binds[f"s{i}"] = tuple(shape)
        conds.append(f"type(a{i}) is _nd and a{i}.shape == s{i} and a{i}.dtype == d{i}")
    defaults = ", ".join(f"{k}={k}" for k in binds)
    if n == 0:
        body = ["    if type(arrays) is _list and not arrays:", "        return arrays"]
    else:
        unpack = ", ".join(f"a{i}" for i in range(n)) + ("," if n == 1 else "")
        body = [
            f"    if type(arrays) is _list and len(arrays) == {n}:",
            f"        {unpack} = arrays",
            "        if " + " and ".join(conds) + ":",
            "            return arrays",
        ]
    source = "\n".join([f"def check(arrays, *, {defaults}):", *body, "    return _slow(arrays)"])
    env: dict[str, Any] = {}
    exec(compile(source, "<kiln input check>", "exec"), dict(binds), env)  # noqa: S102
    return env["check"]  # type: ignore[no-any-return]


def _generate(graph: ModelGraph) -> tuple[str, dict[str, Any]]:
    """The source of ``run(arrays)`` for ``graph`` and the objects it binds."""
    names: dict[int, str] = {}  # id(value) -> expression (a local name, or a bound constant)
    binds: dict[str, Any] = {}
    known: dict[int, np.ndarray] = {}  # plan-time contents of values (constants, folded)

    def bind(obj: Any, prefix: str) -> str:
        name = f"{prefix}{len(binds)}"
        binds[name] = obj
        return name

    for c in graph.constants:
        known[id(c.value)] = c.data
        names[id(c.value)] = bind(c.data, "c")
    input_names = []
    for i, v in enumerate(graph.input_values):
        names[id(v)] = f"x{i}"
        input_names.append(f"x{i}")
        if _static(v.shape):
            # Only the shape is known; ops like Shape/Size may read it at plan time.
            pass

    # Which node reads each value last, and whether every reader leaves it unaliased.
    last_use: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None:
                last_use[id(v)] = index
                readers.setdefault(id(v), []).append(index)
    outputs = {id(v) for v in graph.output_values}

    lines: list[str] = []
    steps: list[Step | None] = []
    fresh: set[int] = set()  # values whose buffer the run allocated and nothing else views
    local = 0
    for index, node in enumerate(graph.nodes):
        folded = _fold(node, known)
        if folded is not None:
            for v, data in zip(node.outputs, folded):
                known[id(v)] = data
                names[id(v)] = bind(data, "c")
            steps.append(None)
            continue
        step = _choose(node)
        steps.append(step)
        args = ["None" if v is None else names[id(v)] for v in node.inputs]
        b = {f"b{k}": bind(obj, "k") for k, obj in enumerate(step.binds)}
        call = step.template.format(*args, **b)
        out_names = []
        for v in node.outputs:
            out_names.append(f"v{local}")
            names[id(v)] = f"v{local}"
            local += 1
        target = _reuse_target(node, index, step, graph, last_use, readers, outputs, fresh, names)
        if target is not None:
            call = call[:-1] + f", out={target})"
        single = len(get_op(node.op).outputs) == 1 and not get_op(node.op).variadic_outputs
        if single and len(node.outputs) == 1:
            line = f"{out_names[0]} = {call}"
            if len(node.outputs[0].shape) == 0:
                line = f"{out_names[0]} = _arr({call})"  # a ufunc on 0-d gives a scalar
            lines.append(line)
        else:
            lines.append(f"_r = _outs({call})")
            for k, name in enumerate(out_names):
                lines.append(f"{name} = _r[{k}]")
        if step.fresh:
            for v in node.outputs:
                if len(v.shape) > 0:
                    fresh.add(id(v))
        # Release large intermediates after their last reader, as eager NumPy would.
        dead = []
        for v in node.inputs:
            if (
                v is not None
                and last_use.get(id(v)) == index
                and id(v) not in outputs
                and names[id(v)].startswith("v")
                and _large(v)
                and names[id(v)] not in dead
            ):
                dead.append(names[id(v)])
        for v in node.outputs:
            if id(v) not in last_use and id(v) not in outputs and _large(v):
                dead.append(names[id(v)])
        if dead:
            lines.append("del " + ", ".join(dead))

    result = ", ".join(names[id(v)] for v in graph.output_values)
    binds["_arr"] = np.asarray
    binds["_outs"] = as_outputs
    binds["_quiet"] = _QUIET_STATE
    binds["_errvar"] = _errvar
    binds["_errstate"] = np.errstate
    defaults = ", ".join(f"{k}={k}" for k in binds)
    unpack = ", ".join(input_names) + ("," if len(input_names) == 1 else "")
    head = [f"def run(arrays, *, {defaults}):"]
    if input_names:
        head.append(f"    {unpack} = arrays")
    body = [f"        {line}" for line in lines] + [f"        return [{result}]"]
    if not lines:
        source = "\n".join([*head, f"    return [{result}]"])
    elif _errvar is not None:
        source = "\n".join(
            [
                *head,
                "    _token = _errvar.set(_quiet)",
                "    try:",
                *body,
                "    finally:",
                "        _errvar.reset(_token)",
            ]
        )
    else:  # pragma: no cover - NumPy without the context variable
        source = "\n".join([*head, "    with _errstate(all='ignore'):", *body])
    return source + "\n", binds


def _large(v: Value) -> bool:
    n = _numel(v.shape)
    return n is None or n >= REUSE_MIN_ELEMENTS


def _reuse_target(
    node: Node,
    index: int,
    step: Step,
    graph: ModelGraph,
    last_use: dict[int, int],
    readers: dict[int, list[int]],
    outputs: set[int],
    fresh: set[int],
    names: dict[int, str],
) -> str | None:
    """The name of an input buffer ``node`` may overwrite with its result, or None.

    Allowed when the node is an elementwise ufunc whose output has the buffer's dtype and
    shape, the buffer was allocated by this run (``fresh``: no view of an input or constant),
    this node is its last reader, it is not a graph output, and every reader of it is a fresh-
    producing step (so no view of it survives elsewhere)."""
    if step.ufunc is None or len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    if not _large(out) or not out.shape:
        return None
    for v in node.inputs:
        if v is None or id(v) not in fresh or id(v) in outputs:
            continue
        if last_use.get(id(v)) != index or v.dtype != out.dtype:
            continue
        if tuple(v.shape) != tuple(out.shape):
            continue
        if not all(_fresh_reader(graph.nodes[r]) for r in readers[id(v)]):
            continue
        return names[id(v)]
    return None


def _fresh_reader(node: Node) -> bool:
    """True when ``node``'s chosen step never returns a view of its inputs."""
    return _choose(node).fresh


def _fold(node: Node, known: dict[int, np.ndarray]) -> tuple[np.ndarray, ...] | None:
    """The outputs of ``node`` computed at plan time, when its inputs are known (constants or
    earlier folds) or only their static shapes matter (Shape, Size), and the outputs are
    small; otherwise None."""
    opdef = get_op(node.op)
    if PURE not in opdef.traits or not node.outputs:
        return None
    if any(_numel(v.shape) is None or _numel(v.shape) > FOLD_MAX_ELEMENTS for v in node.outputs):
        return None
    arrays: list[np.ndarray | None] = []
    for v in node.inputs:
        if v is None:
            arrays.append(None)
        elif id(v) in known:
            arrays.append(known[id(v)])
        elif opdef.has(SHAPE) and node.op in ("Shape", "Size") and _static(v.shape):
            # The contents do not matter: a zero-strided stand-in of the static shape.
            arrays.append(np.broadcast_to(np.zeros((), v.dtype), tuple(v.shape)))
        else:
            return None
    try:
        with np.errstate(all="ignore"):
            results = as_outputs(opdef.kernel(*arrays, **opdef.bind_attrs(node.attrs)))
    except Exception:  # the run will raise the same error with the real inputs' context
        return None
    frozen = []
    for r in results[: len(node.outputs)]:
        r = np.array(r)  # own copy: never a view of a stand-in
        r.setflags(write=False)
        frozen.append(r)
    return tuple(frozen)
