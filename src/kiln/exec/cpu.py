"""The planned CPU executor: a graph compiled to one straight-line Python function over NumPy.

``finalize()`` on the CPU builds a :class:`CpuPlan`. Planning walks the graph once and writes
Python source with one line per node, ``v7 = k7(v3, c1)``, where every kernel, constant and
attribute set is bound as a default argument of the generated function, so the hot path is
local-variable loads and calls only: no per-node interpretation loop, no environment list, no
dict lookups. Planning also

* picks a kernel per node: the registry kernel, or the faster call its record offers
  (``OpDef.fast_kernel``) where the node's types allow one (``np.divide`` for a float Div,
  ``np.matmul`` for a float32/float64 MatMul, ``x.reshape(shape)`` for a Reshape whose output
  shape is static, ...);
* folds at plan time what the graph already determines: constants and static shapes flow
  through small shape-computing nodes (``Shape``, ``Gather`` of a shape, ``Concat`` ...), so an
  unoptimized static graph does no shape arithmetic per run;
* reuses buffers by liveness: an elementwise ufunc writes (``out=``) into an input buffer that
  the run itself allocated and that no later node reads, and every large intermediate is
  released (``del``) right after its last use, so the memory peak stays that of eager NumPy;
* hands out outputs that share memory with nothing else (:func:`~kiln.exec.plan.output_copies`):
  an output that is an input, a constant or a plan-time fold is copied, one that may be a view
  (``x.T``, a cast to the same dtype) is copied unless the run's array owns its memory, and
  one a ufunc allocated is handed out as is.

Every buffer a run writes into is allocated by that run, so concurrent runs of one plan share
nothing mutable, and a result handed to the caller is never written again. The one exception
is asked for: :meth:`CpuPlan.donating` writes a run whose outputs that are the new contents of
inputs (a compiled function's write-backs) are computed straight into those inputs' buffers,
where that is safe (see :meth:`CpuPlan.donating`), as the NumPy code wrote them in place.

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
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ir.collector import collector_paused
from ..ir.rewrite import can_raise
from ..ops.control import bind_subgraphs, has_subgraphs
from ..ops.dispatch import as_outputs
from ..ops.folding import FOLDING_LIMITS
from ..ops.reduce import topk_values
from ..ops.registry import (
    ELEMENTWISE,
    NEW_ARRAY,
    PURE,
    REDUCTION,
    SHAPE_ONLY,
    KernelCall,
    get_op,
    same_dtype,
)
from ..ops.shape import known_box, scatter_nd_into
from ..ops.writes import assign_box, slice_update_into
from ..symbolic import SOURCE_FUNCTIONS, SymDim, python_source
from .inputs import InputChecker
from .plan import Plan, output_copies

if TYPE_CHECKING:
    from ..ir.graph import ModelGraph, Node, Value

__all__ = ["CpuPlan", "quiet_errors"]

# Below this many elements a buffer is not worth an ``out=``: the extra keyword costs more
# than NumPy's small-array allocation.
REUSE_MIN_ELEMENTS = 4096
# A dead intermediate of at least this many bytes is released (``del``) after its last read,
# as eager NumPy frees it: NumPy caches data blocks below 1 KiB, and a run that kept every
# larger one alive would grow the heap on each call and fault its pages in again (300 live
# 32 KiB arrays made a 2.6 ms run take 21 ms).
RELEASE_MIN_BYTES = 1024
# Plan-time folding runs kernels on known values only up to this many output elements.
FOLD_MAX_ELEMENTS = FOLDING_LIMITS.plan


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


def _static(shape: Sequence[Any]) -> bool:
    return all(isinstance(d, int) for d in shape)


def _numel(shape: Sequence[Any]) -> int | None:
    return math.prod(shape) if _static(shape) else None


def _choose(node: Node) -> KernelCall:
    """The fastest correct way to run ``node``, from its recorded types: the registry kernel
    when it is itself a ufunc, else the operator's ``fast_kernel`` where it covers the node
    (``np.divide`` for a float Div, ``x.reshape(shape)`` for a static Reshape, ...), else the
    registry kernel with its attributes bound."""
    opdef = get_op(node.op)
    kernel = opdef.kernel
    attrs = opdef.bind_attrs(node.attrs)
    ins = node.inputs
    if has_subgraphs(opdef):
        # If/Loop/Scan (the call that runs is made in _PlanWriter.add_node, with the
        # subgraphs planned once); the results are new arrays (a plan's outputs share memory
        # with nothing).
        return KernelCall(_call_template(len(ins), kwargs=True), (kernel, attrs))
    if isinstance(kernel, np.ufunc) and not attrs and opdef.has(ELEMENTWISE):
        # The registry kernel is itself the ufunc (Add, Mul, Exp, Tanh, Equal, ...); it may
        # write into an input buffer only when that buffer has the output's dtype.
        ufunc = kernel if same_dtype(ins, node.outputs) else None
        return KernelCall(_call_template(len(ins)), (kernel,), ufunc=ufunc)
    if opdef.fast_kernel is not None:
        fast = opdef.fast_kernel(ins, node.outputs, attrs)
        if fast is not None:
            return fast
    # A registry kernel may hand back a view of an input (Identity, Expand, ...); a reduction's
    # result, and a NEW_ARRAY kernel's (a scatter, Concat, Gather), is always a new array.
    view = not (opdef.has(REDUCTION) or opdef.has(NEW_ARRAY))
    if attrs:
        return KernelCall(_call_template(len(ins), kwargs=True), (kernel, attrs), returns_view=view)
    return KernelCall(_call_template(len(ins)), (kernel,), returns_view=view)


def _compile_subgraph(graph: ModelGraph) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]]:
    """A subgraph's run on the NumPy engine (its inputs are not checked again: the node's
    types already were)."""
    return CpuPlan(graph).run_arrays


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
        with collector_paused():  # (kiln.ir.collector: its full passes walk every node)
            self.source, namespace = _generate(graph)
            env: dict[str, Any] = {}
            code = compile(self.source, f"<kiln plan {graph.name}>", "exec")
            exec(code, namespace, env)  # noqa: S102
        self.run_arrays: Callable[[Sequence[np.ndarray]], list[np.ndarray]] = env["run"]
        self.check_inputs: Callable[[Any], list[np.ndarray]] = _fast_checker(self.checker)

    def donating(
        self, donate: Mapping[int, int], unread: Collection[int] = ()
    ) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]] | None:
        """A ``run_arrays`` that may use the buffer of input ``donate[k]`` as its own, for
        output ``k``: the input's new contents (a compiled function's write-back), of its
        dtype and shape. Steps then compute in place in the input (``out=``, in-place writes)
        wherever they could in a buffer of their own; when output ``k`` ends up there, the run
        returns the input array itself as it (the replay then has nothing to copy back). The
        outputs ``unread`` (by index) come back as None, uncopied: the caller does not read
        them (a result that is the caller's own input array). None when no step would write
        into a donated input and no output is unread (``run_arrays`` is as good).

        The input is written only by a step after every read of it (or of a view of it), and
        after which no step can raise: a run that fails leaves the caller's array as it was;
        a run that succeeds leaves it for the caller's write-back to complete. Only
        ``run_arrays`` itself is the plan's pure run.
        """
        writer = _PlanWriter(self.graph, donate, unread)
        for index, node in enumerate(self.graph.nodes):
            writer.add_node(index, node)
        if not writer.lent and not unread:
            return None
        source, namespace = writer.finish()
        env: dict[str, Any] = {}
        exec(compile(source, f"<kiln plan {self.graph.name} donating>", "exec"), namespace, env)  # noqa: S102
        return env["run"]  # type: ignore[no-any-return]


def _fast_checker(checker: InputChecker) -> Callable[[Any], list[np.ndarray]]:
    """``checker`` behind a generated fast path for the replay case: a list of NumPy arrays of
    exactly the expected dtypes, ranks and static sizes, each symbolic size the same wherever it
    appears, derived sizes (``2*n``) and the graph's shape guards holding (compiled to Python
    expressions over the sizes, once). Anything else (tensors, a mapping, any mismatch) goes
    to the full check, which names what is wrong."""
    n = len(checker.names)
    binds: dict[str, Any] = {"_slow": checker, "_nd": np.ndarray, "_list": list}
    conds = []
    first: dict[str, str] = {}  # symbol -> the expression of its first occurrence
    derived: list[tuple[str, Any]] = []
    for i, (dtype, shape) in enumerate(zip(checker.dtypes, checker.shapes)):
        binds[f"d{i}"] = dtype
        if all(isinstance(d, int) for d in shape):
            binds[f"s{i}"] = tuple(shape)
            conds.append(f"type(a{i}) is _nd and a{i}.shape == s{i} and a{i}.dtype == d{i}")
            continue
        conds.append(f"type(a{i}) is _nd and a{i}.ndim == {len(shape)} and a{i}.dtype == d{i}")
        for axis, d in enumerate(shape):
            size = f"a{i}.shape[{axis}]"
            if isinstance(d, int):
                conds.append(f"{size} == {d}")
            elif not d.is_symbol():
                derived.append((size, d))
            elif d.name in first:
                conds.append(f"{size} == {first[d.name]}")
            else:
                first[d.name] = size
    try:
        conds += [f"{size} == {python_source(d, first)}" for size, d in derived]
        conds += [f"({guard.python_source(first)})" for guard in checker.guards]
    except KeyError:  # a size no input binds on its own: the full check says what is wrong
        return checker
    binds.update(SOURCE_FUNCTIONS)
    defaults = ", ".join(f"{k}={k}" for k in binds)
    if n == 0:
        body = ["    if type(arrays) is _list and not arrays:", "        return arrays"]
    else:
        unpack = ", ".join(f"a{i}" for i in range(n)) + ("," if n == 1 else "")
        body = [
            f"    if type(arrays) is _list and len(arrays) == {n}:",
            f"        {unpack} = arrays",
            "        try:",  # sizes that do not broadcast raise: the full check explains
            "            ok = " + " and ".join(conds),
            "        except ValueError:",
            "            ok = False",
            "        if ok:",
            "            return arrays",
        ]
    source = "\n".join([f"def check(arrays, *, {defaults}):", *body, "    return _slow(arrays)"])
    env: dict[str, Any] = {}
    exec(compile(source, "<kiln input check>", "exec"), dict(binds), env)  # noqa: S102
    return env["check"]  # type: ignore[no-any-return]


def _generate(graph: ModelGraph) -> tuple[str, dict[str, Any]]:
    """The source of ``run(arrays)`` for ``graph`` and the objects it binds."""
    writer = _PlanWriter(graph)
    for index, node in enumerate(graph.nodes):
        writer.add_node(index, node)
    return writer.finish()


class _PlanWriter:
    """Writes the body of ``run`` one node at a time (see the module docstring).

    ``names`` maps each value (by id) to the expression holding it in the generated code (an
    input ``x0``, a local ``v3``, a bound constant ``c1``); ``binds`` are the objects the code
    names, passed as default arguments; ``known`` holds the plan-time contents of constants and
    folded values; ``fresh`` the values whose buffer the run allocated and nothing else views;
    ``allocated`` the values a call computes into a buffer of its own (for the outputs' copies).
    """

    def __init__(
        self,
        graph: ModelGraph,
        donate: Mapping[int, int] | None = None,
        unread: Collection[int] = (),
    ) -> None:
        self.graph = graph
        self.unread = frozenset(unread)  # outputs (by index) handed out as None
        self.names: dict[int, str] = {}
        self.binds: dict[str, Any] = {}
        self.known: dict[int, np.ndarray] = {}
        self.fresh: set[int] = set()
        self.allocated: set[int] = set()
        self.lines: list[str] = []
        self.locals = 0  # v0, v1, ...: the locals made so far
        # Locals whose value is dead (after its last reader), reused by the next outputs:
        # Python compiles a function of many distinct locals slowly (a 93k-node plan took
        # seconds), and rebinding a name releases its value as ``del`` would.
        self.free: list[str] = []
        for c in graph.constants:
            self.known[id(c.value)] = c.data
            self.names[id(c.value)] = self.bind(c.data, "c")
        self.input_names = [f"x{i}" for i in range(len(graph.input_values))]
        self.sizes: dict[str, str] = {}  # a symbolic size -> where the run reads it
        self.sized: set[str] = set()  # the locals computed from sizes (_from_sizes)
        # kiln.SliceUpdate nodes (by id) whose update a ufunc computed in the box of their
        # data's buffer (_update_target) -> that buffer's value
        self.updated: dict[int, Value] = {}
        self.box_chain: dict[int, str] = {}  # later ufunc steps of such a chain -> the box
        self.in_box: set[int] = set()  # the values (by id) those steps computed there
        self.cast_away: dict[int, Value] = {}  # bool->int casts only a count reads (_counted)
        for name, v in zip(self.input_names, graph.input_values):
            self.names[id(v)] = name
            for axis, d in enumerate(v.shape):
                if isinstance(d, SymDim) and d.is_symbol():
                    self.sizes.setdefault(d.name, f"{name}.shape[{axis}]")
        self.last_use, self.readers = _readers(graph)
        self.outputs = {id(v) for v in graph.output_values}
        self.producer = {id(v): node for node in graph.nodes for v in node.outputs}
        self.index_parts = self._plan_index_parts()
        # The value (by id) whose buffer a value's array is, where a step wrote it in place
        # (``out=``, an in-place write); by default its own.
        self.buffer: dict[int, int] = {}
        # CpuPlan.donating: each donated input (by id) -> the output of its new contents; the
        # steps that wrote into one (``lent``); whether a step at or after each can raise.
        self.donors: dict[int, int] = {}
        self.lent: set[int] = set()
        self.place: dict[int, Value] = {}  # a value (by id) -> the donated input it goes to
        self.raises_from: list[bool] = []
        if donate:
            self._donate(donate)
        # Concat parts computed straight into the Concat's result (see _plan_concats):
        # part value (by id) -> (id of the Concat node, index bounds along its axis).
        self.placed: dict[int, tuple[Node, tuple[slice, ...]]] = {}
        self.concat_buffers: dict[int, str] = {}  # id(Concat node) -> its buffer's name
        self._plan_concats()

    def _plan_index_parts(self) -> dict[int, list[Value]]:
        """The ``Concat`` nodes (by id) that only join index columns for fancy indexing
        (``a[rows, cols] = v`` records ``ScatterND(a, Concat(rows[:, None], cols[:, None]),
        v)``; ``a[rows, cols]`` a GatherND), and the ``Unsqueeze``/``Reshape`` nodes that
        make one column of an index array (``a[keys] = v``): their readers take the columns
        as a tuple, as NumPy's indexing does, instead of a joined copy (see
        :func:`~kiln.ops.shape.index_columns`). The columns then count as read where the
        node's readers read it, so nothing writes their buffers in place before."""
        found: dict[int, list[Value]] = {}
        for node in self.graph.nodes:
            out = node.outputs[0] if node.outputs else None
            if out is None or id(out) in self.outputs or out.dtype.kind != "i" or not out.shape:
                continue
            if node.op in ("Unsqueeze", "Reshape"):
                # One index column made from an index array of one axis less (``a[keys] = v``
                # records ScatterND(a, Unsqueeze(keys, -1), v)): the array itself is the column.
                x = node.inputs[0]
                if x is None or out.shape[-1:] != (1,) or tuple(x.shape) != tuple(out.shape[:-1]):
                    continue
                parts = [x]
            elif node.op == "Concat":
                axis = node.opdef.bind_attrs(node.attrs)["axis"] % len(out.shape)
                if axis != len(out.shape) - 1:
                    continue
                parts = [v for v in node.inputs if v is not None]
                if len(parts) != len(node.inputs) or any(v.shape[-1:] != (1,) for v in parts):
                    continue
            else:
                continue
            readers = self.readers.get(id(out), [])
            if not readers or not all(
                self._takes_columns(self.graph.nodes[r], out) for r in readers
            ):
                continue
            found[id(node)] = parts
            for v in parts:
                self.readers[id(v)] = sorted({*self.readers[id(v)], *readers})
                self.last_use[id(v)] = max(self.last_use[id(v)], *readers)
        return found

    @staticmethod
    def _takes_columns(reader: Node, indices: Value) -> bool:
        """Whether ``reader`` reads ``indices`` only as a ScatterND's or a plain GatherND's
        index argument (whose kernels take a tuple of index columns)."""
        if reader.op == "ScatterND":
            return reader.inputs[1] is indices and indices not in (
                reader.inputs[0],
                reader.inputs[2],
            )
        if reader.op == "GatherND":
            attrs = reader.opdef.bind_attrs(reader.attrs)
            return (
                reader.inputs[1] is indices
                and reader.inputs[0] is not indices
                and not attrs["batch_dims"]
            )
        return False

    def _donate(self, donate: Mapping[int, int]) -> None:
        """Lend the run the buffers of the inputs ``donate`` names (see CpuPlan.donating): each
        counts as a buffer the run allocated, so in-place steps may write into it."""
        graph = self.graph
        outputs = graph.output_values
        later = False
        for node in reversed(graph.nodes):
            later = later or can_raise(node)
            self.raises_from.append(later)
        self.raises_from.reverse()
        for k, position in donate.items():
            out, x = outputs[k], graph.input_values[position]
            if out.dtype != x.dtype or tuple(out.shape) != tuple(x.shape):
                continue
            if id(x) in self.outputs or sum(o is out for o in outputs) != 1:
                continue
            self.donors[id(x)] = id(out)
            self.fresh.add(id(x))
            # The step making the new contents may put them straight there, also when it does
            # not read the input (``np.multiply(a, b, out=x)``), and when they are returned
            # too (an Identity of them is the write-back).
            self.place[id(out)] = x
            maker = self.producer.get(id(out))
            if maker is not None and maker.op == "Identity" and maker.inputs[0] is not None:
                self.place[id(maker.inputs[0])] = x

    def _keeps(self, v: Value, out: Value) -> bool:
        """Whether ``out`` may be computed in ``v``'s buffer as far as donation goes: unless
        that buffer is a donated input's and ``out`` is a result other than the input's new
        contents (handing it out would cost a copy)."""
        buffer = self.buffer.get(id(v), id(v))
        if buffer not in self.donors or id(out) not in self.outputs:
            return True
        return self.donors[buffer] == id(out) or self.place.get(id(out)) is not None

    def _plan_concats(self) -> None:
        """Which parts of each ``Concat`` a ufunc computes straight into the Concat's result
        (``out=`` a slice of it, allocated once): a part a ufunc makes (possibly through a
        reshape that only the Concat reads), read by other steps only, no graph output. A
        row-by-row fill (``out[i] = f(...)``, lowered to a Concat of its rows) then writes
        each row once, as NumPy did, instead of copying them all at the end. Only where the
        slices are contiguous (every axis before the Concat's is of size 1)."""
        for node in self.graph.nodes:
            if node.op != "Concat" or len({id(v) for v in node.inputs}) != len(node.inputs):
                continue
            out = node.outputs[0]
            if not _static(out.shape) or not out.shape:
                continue
            axis = node.opdef.bind_attrs(node.attrs)["axis"] % len(out.shape)
            if math.prod(out.shape[:axis]) != 1:  # type: ignore[arg-type]
                continue
            start = 0
            for part in node.inputs:
                assert part is not None
                if not _static(part.shape):
                    break
                stop = start + int(part.shape[axis])  # type: ignore[arg-type]
                maker = self._part_maker(part, node)
                if maker is not None:
                    box = (slice(None),) * axis + (slice(start, stop),)
                    self.placed[id(maker.outputs[0])] = (node, box)
                start = stop

    def _part_maker(self, part: Value, concat: Node) -> Node | None:
        """The ufunc step making Concat ``part``, directly or through a reshape only the
        Concat reads; None when it cannot compute into the Concat's result."""
        if id(part) in self.outputs or self.readers.get(id(part)) != [
            self.graph.nodes.index(concat)
        ]:
            return None
        maker = self.producer.get(id(part))
        if maker is not None and maker.op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten"):
            value = maker.inputs[0]
            if value is None or id(value) in self.outputs:
                return None
            maker = self.producer.get(id(value))
        if maker is None or len(maker.outputs) != 1 or _choose(maker).ufunc is None:
            return None
        made = maker.outputs[0]
        if made.dtype != part.dtype or not _static(made.shape) or id(made) in self.outputs:
            return None
        return maker if _numel(made.shape) == _numel(part.shape) else None

    def _concat_target(self, node: Node) -> str | None:
        """``out=`` for a step placed in a Concat's result (allocated at the first one)."""
        placed = self.placed.get(id(node.outputs[0]))
        if placed is None:
            return None
        concat, box = placed
        buffer = self.concat_buffers.get(id(concat))
        if buffer is None:
            out = concat.outputs[0]
            buffer = self.concat_buffers[id(concat)] = self._local()
            empty, shape = self.bind(np.empty, "k"), self.bind(tuple(out.shape), "k")
            self.lines.append(f"{buffer} = {empty}({shape}, {self.bind(out.dtype, 'k')})")
        made = node.outputs[0]
        return f"{buffer}[{self.bind(box, 'k')}].reshape({self.bind(tuple(made.shape), 'k')})"

    def _concat_into(self, index: int, node: Node) -> bool:
        """A Concat some of whose parts were computed in its result: copy the others in."""
        buffer = self.concat_buffers.get(id(node))
        if buffer is None:
            return False
        out = node.outputs[0]
        axis = node.opdef.bind_attrs(node.attrs)["axis"] % len(out.shape)
        start = 0
        for part in node.inputs:
            assert part is not None
            stop = start + int(part.shape[axis])  # type: ignore[arg-type]
            maker = self.producer.get(id(part))
            inner = maker.inputs[0] if maker is not None and maker.opdef.is_view else None
            placed = any(v is not None and id(v) in self.placed for v in (part, inner))
            if not placed:
                box = self.bind((slice(None),) * axis + (slice(start, stop),), "k")
                self.lines.append(f"{buffer}[{box}] = {self.names[id(part)]}")
            start = stop
        self.names[id(out)] = buffer
        self.fresh.add(id(out))
        self.allocated.add(id(out))
        self._release(index, node)
        return True

    def _may_write(self, v: Value, index: int, atomic: bool) -> bool:
        """Whether step ``index`` may write into ``v``'s buffer: always, unless the buffer is a
        donated input's and the step (unless its write is ``atomic``: checked before it
        writes) or a later one can raise."""
        if self.buffer.get(id(v), id(v)) not in self.donors:
            return True
        after = index + 1 < len(self.raises_from) and self.raises_from[index + 1]
        here = self.raises_from[index] and not after
        return not after and (atomic or not here)

    def _wrote(self, index: int, out: Value, into: Value) -> None:
        """Step ``index``'s output ``out`` is in ``into``'s buffer."""
        buffer = self.buffer.get(id(into), id(into))
        self.buffer[id(out)] = buffer
        if buffer in self.donors:
            self.lent.add(index)

    def _read_after(self, x: Value, index: int) -> bool:
        """Whether ``x`` or a view of it is read after node ``index``, or is a graph output
        (``index``'s own output is the input's new contents, not a view of it)."""
        readers, view_out = self._reads(x, skip=index)
        return view_out or any(r > index for r in readers)

    def _reads(self, x: Value, skip: int = -1) -> tuple[set[int], bool]:
        """The steps reading ``x`` or a view of it (through steps that return views, except
        step ``skip``), and whether such a view is a graph output."""
        found: set[int] = set()
        view_out = False
        pending, seen = [x], {id(x)}
        while pending:
            v = pending.pop()
            view_out = view_out or (v is not x and id(v) in self.outputs)
            for r in self.readers.get(id(v), ()):
                found.add(r)
                reader = self.graph.nodes[r]
                if r != skip and _choose(reader).returns_view:
                    for w in reader.outputs:
                        if id(w) not in seen:
                            seen.add(id(w))
                            pending.append(w)
        return found, view_out

    def _update_target(self, node: Node, index: int) -> str | None:
        """``out=`` for a large ufunc result whose one reader is a ``kiln.SliceUpdate`` writing
        it into a box of a buffer this run allocated (``d[1:-1] = (y[2:] - y[:-2]) / h``): the
        box itself, as NumPy's assignment does, instead of a buffer of its own copied there.
        Only where that write may happen in place (nothing reads the old contents at or after
        it) and may happen now (no step from this one to the write reads the buffer); the box
        is known at plan time and has the result's dtype and shape exactly (no broadcast)."""
        placed = self.box_chain.pop(id(node), None)
        if placed is not None:  # a later step of a chain computed in the box
            self.in_box.add(id(node.outputs[0]))
            return placed
        if len(node.outputs) != 1:
            return None
        made = node.outputs[0]
        computed = made  # the value the chain computes (``made`` may be a reshape of it)
        chain: list[Node] = []  # the steps after this one computing in the box, in order
        while True:
            readers = self.readers.get(id(made), [])
            if id(made) in self.outputs or len(readers) != 1 or not _large(made):
                return None
            at = readers[0]
            write = self.graph.nodes[at]
            if write.op == "kiln.SliceUpdate":
                break
            if write.op in _UNIT_AXES_VIEWS and _unit_axes_only(made, write.outputs[0]):
                made = write.outputs[0]  # (v.reshape(n, 1) for a box d[:, k:k+1])
                continue
            # An elementwise ufunc step of the same dtype and shape reading it: computed in
            # the box too (NumPy's ufuncs take an output that is one of their inputs).
            if made is not computed or len(write.outputs) != 1 or _choose(write).ufunc is None:
                return None
            nxt = write.outputs[0]
            if nxt.dtype != made.dtype or tuple(nxt.shape) != tuple(made.shape):
                return None
            chain.append(write)
            made = computed = nxt
        data = write.inputs[0]
        if write.op != "kiln.SliceUpdate" or write.inputs[1] is not made or data is None:
            return None
        if id(data) not in self.names or data.dtype != made.dtype or not _static(data.shape):
            return None
        box = known_box(data, write.inputs[2:])
        stand_in = np.broadcast_to(np.zeros((), data.dtype), tuple(data.shape))
        if box is None or stand_in[box].shape != tuple(made.shape):
            return None
        base = self._fresh_base(data)
        if base is None or id(base) in self.outputs or id(base) in self.donors:
            return None
        if self.buffer.get(id(base), id(base)) in self.donors:
            return None
        if not self._keeps(base, write.outputs[0]):
            return None
        reads = self._reads(base)[0]
        if any(index < r != at for r in reads):
            # Read by a later step of the chain (after the first wrote the box), between here
            # and the write, or the old contents after it.
            return None
        if index in reads and not self._reads_beside(node, base, data, box):
            # This step reads it where it would write (NumPy would copy the overlapping
            # operand first: no gain), or somewhere not known at plan time.
            return None
        self.updated[id(write)] = base
        target = f"{self.names[id(data)]}[{self.bind(box, 'k')}]"
        if tuple(made.shape) != tuple(computed.shape):  # a view: only size-1 axes differ
            target = f"{target}.reshape({self.bind(tuple(computed.shape), 'k')})"
        for step in chain:
            self.box_chain[id(step)] = target
        self.in_box.add(id(node.outputs[0]))
        return target

    def _reads_beside(self, node: Node, base: Value, data: Value, box: tuple[slice, ...]) -> bool:
        """Whether every operand of ``node`` in ``base``'s buffer is a box of ``data`` (through
        views that only add or drop size-1 axes) known at plan time and disjoint from ``box``:
        ``d[:, k] = d[:, k - 1] * x`` may then compute in ``d[:, k]`` (a ufunc reads its
        operands as if before it writes; NumPy copies nothing it can tell apart)."""
        for v in node.inputs:
            if v is None or self._fresh_base(v) is not base:
                continue
            while v is not None and v is not data:
                maker = self.producer.get(id(v))
                if maker is None:
                    return False
                if maker.op in _UNIT_AXES_VIEWS:
                    v = maker.inputs[0]
                    continue
                if maker.op != "Slice" or maker.inputs[0] is not data:
                    return False
                read = known_box(data, maker.inputs[1:])
                if read is None or not _disjoint(read, box, tuple(data.shape)):
                    return False
                break
            else:
                return False  # (data itself, read whole)
        return True

    def bind(self, obj: Any, prefix: str) -> str:
        """A new name for ``obj`` in the generated code."""
        name = f"{prefix}{len(self.binds)}"
        self.binds[name] = obj
        return name

    def add_node(self, index: int, node: Node) -> None:
        """Fold ``node`` at plan time, or write the lines that run it."""
        folded = _fold(node, self.known)
        if folded is not None:
            for v, data in zip(node.outputs, folded):
                self.known[id(v)] = data
                self.names[id(v)] = self.bind(data, "c")
            return
        parts = self.index_parts.get(id(node))
        if parts is not None:  # index columns, passed to the readers as a tuple
            if node.op != "Concat":  # the index array itself
                columns = f"{self.names[id(parts[0])]}, "
            else:
                columns = "".join(f"{self.names[id(v)]}[..., 0], " for v in parts)
            self.names[id(node.outputs[0])] = f"({columns})"
            return
        if node.op in _UNIT_AXES_VIEWS and node.inputs and id(node.inputs[0]) in self.in_box:
            self.in_box.add(id(node.outputs[0]))  # (a size-1 reshape of a result in a box)
        base = self.updated.get(id(node))
        if base is not None and id(node.inputs[1]) in self.in_box:
            # Its update was computed in the box already (_update_target).
            out = node.outputs[0]
            name = self.names[id(out)] = self._local()
            self.lines.append(f"{name} = {self.names[id(node.inputs[0])]}")
            self.fresh.add(id(out))
            self.allocated.add(id(out))
            self._wrote(index, out, base)
            self._release(index, node)
            return
        if node.op in _WRITES and _in_place_fits(node) and self._overwritable(node, index):
            self._scatter_in_place(index, node)
            return
        if node.op == "ReduceSumSquare" and self._square_in_place(index, node):
            return
        if self._counted(index, node):
            return
        if node.op == "Concat" and self._concat_into(index, node):
            return
        sized = self._from_sizes(node)
        call = sized or self._values_only(node) or _choose(node)
        if has_subgraphs(node.opdef):  # If/Loop/Scan: each subgraph planned once, here
            attrs = node.opdef.bind_attrs(node.attrs)
            kernel = bind_subgraphs(node.op, attrs, _compile_subgraph)
            call = KernelCall(_call_template(len(node.inputs)), (kernel,))
        args = ["None" if v is None else self.names[id(v)] for v in node.inputs]
        binds = {f"b{k}": self.bind(obj, "k") for k, obj in enumerate(call.binds)}
        text = call.template.format(*args, **binds)
        out_names = []
        for v in node.outputs:
            local = self._local()
            out_names.append(local)
            self.names[id(v)] = local
        into_concat = self._concat_target(node) if call.ufunc is not None else None
        if into_concat is None and call.ufunc is not None:
            into_concat = self._update_target(node, index)  # (also a box of a buffer)
        target = None if into_concat is not None else self._reuse_target(node, index, call)
        if into_concat is not None:
            text = text[:-1] + f", out={into_concat})"
        elif target is not None:
            text = text[:-1] + f", out={self.names[id(target)]})"
            self._wrote(index, node.outputs[0], target)
        elif node.op == "Identity" and node.inputs[0] is not None:
            self._wrote(index, node.outputs[0], node.inputs[0])  # the kernel returns its input
        self._assign(node, out_names, text, wrap=sized is None)
        if sized is not None and node.op != "Slice":
            self.sized.update(out_names)
        if not call.returns_view and into_concat is None:  # (a slice of a Concat is not)
            self.fresh.update(id(v) for v in node.outputs if len(v.shape) > 0)
            self.allocated.update(id(v) for v in node.outputs)
        self._release(index, node)

    def _counted(self, index: int, node: Node) -> bool:
        """A sum of a boolean array cast to integers (``np.sum(b == k)``: ONNX's ReduceSum
        takes no bool) is NumPy's ``count_nonzero`` of the booleans, without the integer
        array. The Cast writes nothing when the ReduceSum is its one reader; the ReduceSum
        counts. Integer sums (wrapping as the count's cast does) and float64 ones (exact
        below 2**53) only."""
        if node.op == "Cast":
            if self._count_axes(node) is not None:
                self.cast_away[id(node.outputs[0])] = node.inputs[0]  # type: ignore[assignment]
                self.names[id(node.outputs[0])] = "None"  # never computed
                return True
            return False
        if node.op != "ReduceSum" or node.inputs[0] is None:
            return False
        booleans = self.cast_away.get(id(node.inputs[0]))
        if booleans is None:
            return False
        axes, keepdims = self._reduce_axes(node)  # type: ignore[misc]
        out = node.outputs[0]
        name = self._local()
        self.names[id(out)] = name
        fn = self.bind(count_true, "k")
        args = f"{self.names[id(booleans)]}, {self.bind(axes, 'k')}, {keepdims}"
        self.lines.append(f"{name} = {fn}({args}, {self.bind(out.dtype, 'k')})")
        self.fresh.update(id(v) for v in node.outputs if len(v.shape) > 0)
        self.allocated.add(id(out))
        self._release(index, node)
        cast = self.producer[id(node.inputs[0])]
        if self.last_use.get(id(booleans)) == self.graph.nodes.index(cast):
            free = self.names[id(booleans)]  # read last by the cast: released now
            if free.startswith("v") and id(booleans) not in self.outputs and _releasable(booleans):
                self.lines.append(f"del {free}")
        return True

    def _count_axes(self, cast: Node) -> tuple[int, ...] | None:
        """The axes a ReduceSum sums ``cast``'s booleans over, when it is the cast's one
        reader and the cast is from bool to an integer or float64; else None."""
        x, out = cast.inputs[0], cast.outputs[0]
        if x is None or x.dtype != np.bool_ or id(out) in self.outputs:
            return None
        if out.dtype.kind not in "iu" and out.dtype != np.float64:
            return None
        readers = self.readers.get(id(out), [])
        if len(readers) != 1:
            return None
        reduce = self.graph.nodes[readers[0]]
        if reduce.op != "ReduceSum" or reduce.inputs[0] is not out:
            return None
        found = self._reduce_axes(reduce)
        return None if found is None else found[0]

    def _reduce_axes(self, node: Node) -> tuple[tuple[int, ...], bool] | None:
        """A ReduceSum's axes (normalized) and keepdims, known at plan time; None when they
        are computed at run time or the sum reduces nothing (empty axes, no-op)."""
        attrs = node.opdef.bind_attrs(node.attrs)
        ndim = len(node.inputs[0].shape)  # type: ignore[union-attr]
        given = node.inputs[1] if len(node.inputs) > 1 else None
        known = () if given is None else given.type.value
        if known is None or not ndim or not all(isinstance(a, int) for a in known):
            return None
        if not known:  # no axes: every axis, or none at all (no-op)
            every = tuple(range(ndim))
            return None if attrs["noop_with_empty_axes"] else (every, bool(attrs["keepdims"]))
        return tuple(sorted({int(a) % ndim for a in known})), bool(attrs["keepdims"])

    def _values_only(self, node: Node) -> KernelCall | None:
        """A ``TopK`` whose indices nothing reads (``np.median``, ``np.percentile``, a sort of
        values): the values alone (:func:`~kiln.ops.reduce.topk_values`, NumPy's value sort),
        the indices left ``None``."""
        if node.op != "TopK" or len(node.outputs) != 2:
            return None
        indices = node.outputs[1]
        if id(indices) in self.outputs or self.readers.get(id(indices)):
            return None
        attrs = node.opdef.bind_attrs(node.attrs)
        return KernelCall("({b0}({0}, {1}, **{b1}), None)", (topk_values, attrs))

    def _from_sizes(self, node: Node) -> KernelCall | None:
        """``node`` computed from the inputs' sizes, where its recorded types say how: a small
        integer result whose contents are known as expressions of symbolic sizes (shape
        arithmetic: ``Shape``, ``Mod``, ``Concat``, ... of a dynamic axis), or a ``Cast`` of
        one to another number type (``x.sum(0) / x.shape[0]``), becomes one
        ``np.array([...], dtype)`` of those expressions, and a ``Slice`` whose bounds are such
        expressions NumPy's basic slicing (a view), instead of a kernel per step. Only for
        nodes that cannot raise, and expressions that cannot either (no division by a size)."""
        if can_raise(node):
            return None
        if node.op == "Slice":
            return self._sized_slice(node)
        if len(node.outputs) != 1 or node.op == "Constant":
            return None
        out = node.outputs[0]
        value = out.type.value
        if node.op == "Cast" and value is None and node.inputs[0] is not None:
            value = node.inputs[0].type.value  # sizes cast to floats: exact below 2**53
            if out.dtype.kind not in "iuf":
                return None
        elif value is None or out.dtype.kind not in "iu":
            return None
        if value is None or len(out.shape) > 1:
            return None
        if all(isinstance(d, int) for d in value) or len(value) > 16:
            return None
        entries = [self._size_source(d) for d in value]
        if any(e is None for e in entries):
            return None
        items = entries[0] if not out.shape else "[" + ", ".join(entries) + "]"  # type: ignore[arg-type]
        return KernelCall("{b0}(" + items + ", {b1})", (np.array, out.dtype))

    def _sized_slice(self, node: Node) -> KernelCall | None:
        data = node.inputs[0]
        if data is None:
            return None
        values: list[tuple[Any, ...] | None] = []
        for p in node.inputs[1:]:
            known = None if p is None else p.type.value
            if p is not None and known is None:
                return None
            values.append(known)
        starts, ends = values[0], values[1]
        assert starts is not None and ends is not None
        axes = values[2] if len(values) > 2 and values[2] is not None else range(len(starts))
        steps = values[3] if len(values) > 3 and values[3] is not None else (1,) * len(starts)
        if not all(isinstance(v, int) for v in (*axes, *steps)) or 0 in steps:
            return None
        ndim = len(data.shape)
        index = [":"] * ndim
        for axis, start, end, step in zip(axes, starts, ends, steps):
            bounds = [self._size_source(start), self._size_source(end)]
            if None in bounds or not -ndim <= axis < ndim:  # type: ignore[operator]
                return None
            index[axis % ndim] = f"{bounds[0]}:{bounds[1]}:{step}"  # type: ignore[operator]
        return KernelCall("{0}[" + ", ".join(index) + ",]", returns_view=True)

    def _size_source(self, d: Any) -> str | None:
        """The Python expression of the size ``d`` over the inputs' shapes, or None (a size no
        input has, a float, or an expression that could raise: a division by a size)."""
        if isinstance(d, (int, np.integer)):
            return str(int(d))
        if not isinstance(d, SymDim) or not _safe_size(d):
            return None
        try:
            return python_source(d, self.sizes)
        except KeyError:
            return None

    def _assign(self, node: Node, out_names: list[str], call: str, wrap: bool = True) -> None:
        """Write ``call``'s result(s) to the locals of ``node``'s outputs (a 0-d result through
        ``np.asarray`` when ``wrap``: a ufunc on 0-d gives a scalar)."""
        opdef = get_op(node.op)
        single = len(opdef.outputs) == 1 and not opdef.variadic_outputs
        if single and len(node.outputs) == 1:
            if wrap and len(node.outputs[0].shape) == 0:
                call = f"_arr({call})"
            self.lines.append(f"{out_names[0]} = {call}")
        else:
            self.lines.append(f"_r = _outs({call})")
            for k, name in enumerate(out_names):
                self.lines.append(f"{name} = _r[{k}]")

    def _local(self) -> str:
        """A name for a new local: a dead one's (see ``free``), else a new one."""
        if self.free:
            return self.free.pop()
        name = f"v{self.locals}"
        self.locals += 1
        return name

    def _release(self, index: int, node: Node) -> None:
        """Release intermediates after their last reader, as eager NumPy would: the inputs
        ``node`` reads last, and outputs of it that nothing reads (``del`` for those of 1 KiB
        or more; every such local's name is free for the next outputs)."""
        ending = [v for v in node.inputs if v is not None and self.last_use.get(id(v)) == index]
        ending += [v for v in node.outputs if id(v) not in self.last_use]
        dead: list[str] = []
        freed: list[str] = []
        for v in ending:
            name = self.names[id(v)]
            if id(v) in self.outputs or not _LOCAL.fullmatch(name) or name in freed:
                continue
            freed.append(name)
            if _releasable(v):
                dead.append(name)
        if dead:
            self.lines.append("del " + ", ".join(dead))
        self.free.extend(freed)

    def _overwritable(self, node: Node, index: int) -> bool:
        """Whether ``node`` may write into its data's buffer (``_WRITES``: the first input,
        Where's third): a buffer this run allocated (``fresh``), or a view of one (through
        view operators), that is no graph output and that nothing reads after ``node``,
        itself or through a view. (A chain of functionalized writes then updates one buffer,
        as the NumPy code it came from does, even when each version is read, through a slice,
        before the next write.)"""
        base = self._fresh_base(node.inputs[_WRITES[node.op][0]])
        if base is None or id(base) in self.outputs or self._read_after(base, index):
            return False
        if not self._keeps(base, node.outputs[0]):
            return False
        atomic = node.attrs.get("reduction", "none") == "none"  # NumPy checks, then assigns
        return self._may_write(base, index, atomic)

    def _fresh_base(self, v: Value | None) -> Value | None:
        """The buffer this run allocated (``fresh``) that ``v`` is, or is a view of through
        view operators; None for an input's, a constant's, or maybe a read-only broadcast."""
        while v is not None and id(v) not in self.fresh:
            maker = self.producer.get(id(v))
            if maker is None or not maker.opdef.is_view or maker.op == "Expand":
                return None
            v = maker.inputs[0]
        return v

    def _dead_after(self, v: Value, index: int) -> bool:
        """Whether ``v``'s buffer may be overwritten by step ``index``: the run allocated it,
        no graph output holds it, that step reads it last, and no step made a view of it."""
        if id(v) not in self.fresh or id(v) in self.outputs or self.last_use.get(id(v)) != index:
            return False
        if any(_choose(self.graph.nodes[r]).returns_view for r in self.readers[id(v)]):
            return False
        return self._may_write(v, index, atomic=False)

    def _square_in_place(self, index: int, node: Node) -> bool:
        """``ReduceSumSquare(x)`` of a large float ``x`` this run allocated and nothing reads
        after it: ``np.multiply(x, x, out=x)``, then ReduceSum's reduction of it (what NumPy's
        ``var`` does: the same values, without a buffer for the squares). False otherwise."""
        x = node.inputs[0]
        if x is None or x.dtype.kind != "f" or not _large(x) or not self._dead_after(x, index):
            return False
        reduce = get_op("ReduceSum").fast_kernel
        call = (
            None
            if reduce is None
            else reduce(node.inputs, node.outputs, node.opdef.bind_attrs(node.attrs))
        )
        if call is None:
            return False
        name = self.names[id(x)]
        self.lines.append(f"{self.bind(np.multiply, 'k')}({name}, {name}, out={name})")
        binds = {f"b{k}": self.bind(obj, "k") for k, obj in enumerate(call.binds)}
        out = self._local()
        self.names[id(node.outputs[0])] = out
        self._assign(node, [out], call.template.format(name, **binds))
        self.fresh.update(id(v) for v in node.outputs if len(v.shape) > 0)
        self.allocated.update(id(v) for v in node.outputs)
        self._release(index, node)
        return True

    def _scatter_in_place(self, index: int, node: Node) -> None:
        args = ["None" if v is None else self.names[id(v)] for v in node.inputs]
        if node.op == "ScatterND":
            args.append(repr(node.attrs.get("reduction", "none")))
        name = self._local()
        self.names[id(node.outputs[0])] = name
        box = known_box(node.inputs[0], node.inputs[2:]) if node.op == "kiln.SliceUpdate" else None
        position, into = _WRITES[node.op]
        if box is not None:  # a box known at plan time: NumPy's slice assignment, in place
            fn, bound = self.bind(assign_box, "k"), self.bind(box, "k")
            self.lines.append(f"{name} = {fn}({args[0]}, {args[1]}, {bound})")
        else:
            fn = self.bind(into, "k")
            self.lines.append(f"{name} = {fn}({', '.join(args)})")
        self.fresh.add(id(node.outputs[0]))
        self.allocated.add(id(node.outputs[0]))
        base = self._fresh_base(node.inputs[position])
        assert base is not None  # (_overwritable found it)
        self._wrote(index, node.outputs[0], base)
        self._release(index, node)

    def _reuse_target(self, node: Node, index: int, call: KernelCall) -> Value | None:
        """The input whose buffer ``node`` may overwrite with its result, or None.

        Allowed when the node is an elementwise ufunc (or a call that ``takes_out``) whose
        output has the buffer's dtype and shape, the buffer was allocated by this run
        (``fresh``: no view of an input or constant) or lent to it (a donated input, at any
        size), this node is its last reader, it is not a graph output, and every reader of it
        is a step that returns no view (so no view of it survives elsewhere)."""
        if (call.ufunc is None and not call.takes_out) or len(node.outputs) != 1:
            return None
        out = node.outputs[0]
        if not out.shape:
            return None
        x = self.place.get(id(out))
        if x is not None and not self._read_after(x, index) and self._may_write(x, index, False):
            return x  # the new contents of a donated input, put in place (no copy back)
        large = _large(out)
        for v in node.inputs:
            if v is None or v.dtype != out.dtype or tuple(v.shape) != tuple(out.shape):
                continue
            if not large and self.buffer.get(id(v), id(v)) not in self.donors:
                continue
            if self._dead_after(v, index) and self._keeps(v, out):
                return v
        return None

    def _hand_out(self) -> list[str]:
        """The expression of each output, after lines that copy the outputs that could share
        memory with an input, a constant or another output (see
        :func:`~kiln.exec.plan.output_copies`)."""
        copies = output_copies(
            self.graph,
            allocates=lambda v: id(v) in self.allocated,
            constant=lambda v: id(v) in self.known,
        )
        results = []
        for index, (v, copy) in enumerate(zip(self.graph.output_values, copies)):
            if index in self.unread:
                results.append("None")
                continue
            name = self.names[id(v)]
            buffer = self.buffer.get(id(v), id(v))
            if buffer in self.donors:
                if self.donors[buffer] == id(v):  # the caller's own array, written as asked
                    results.append(name)
                else:  # a result computed in a caller's array: handed out as a copy
                    results.append(f"{name}.copy()")
                continue
            if copy.action == "copy":
                results.append(f"{name}.copy()")
                continue
            if copy.action == "check":
                same = "".join(f" or {name} is {self.names[id(w)]}" for w in copy.distinct)
                self.lines.append(f"if {name}.base is not None{same}: {name} = {name}.copy()")
            results.append(name)
        return results

    def _drop_unread_sizes(self, result: str) -> None:
        """Drop the steps computing shape arithmetic from sizes (:meth:`_from_sizes`) that no
        line reads any more: the slices and sizes after them read the inputs' shapes
        directly."""
        if not self.sized:
            return
        text = "\n".join([*self.lines, result])
        words = re.findall(r"\bv\d+\b", text)
        counts: dict[str, int] = {}
        for w in words:
            counts[w] = counts.get(w, 0) + 1
        dead = set()
        for name in self.sized:
            dels = sum(line.startswith("del ") and name in line.split() for line in self.lines)
            if counts.get(name, 0) == 1 + dels:  # its assignment (and its release) only
                dead.add(name)
        if not dead:
            return
        kept = []
        for line in self.lines:
            if line.split(" = ", 1)[0] in dead:
                continue
            if line.startswith("del "):
                names = [n for n in line[4:].split(", ") if n not in dead]
                if not names:
                    continue
                line = "del " + ", ".join(names)
            kept.append(line)
        self.lines = kept

    def finish(self) -> tuple[str, dict[str, Any]]:
        """The source of ``run`` and the objects it binds."""
        result = ", ".join(self._hand_out())
        self._drop_unread_sizes(result)
        binds = self.binds
        binds["_arr"] = np.asarray
        binds["_outs"] = as_outputs
        binds["_quiet"] = _QUIET_STATE
        binds["_errvar"] = _errvar
        binds["_errstate"] = np.errstate
        return _run_source(self.input_names, self.lines, result, list(binds)), binds


def count_true(b: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """The number of true elements of ``b`` over ``axes``, as ``dtype`` (ReduceSum of the
    booleans cast to ``dtype``, bit for bit)."""
    return np.asarray(np.count_nonzero(b, axis=axes, keepdims=keepdims)).astype(dtype)


_LOCAL = re.compile(r"v\d+")  # a local of the run (not an input, a constant or an expression)

# Views that only add or drop size-1 axes: of a view of a box, always a view again.
_UNIT_AXES_VIEWS = frozenset({"Reshape", "Squeeze", "Unsqueeze"})


def _disjoint(a: tuple[slice, ...], b: tuple[slice, ...], shape: tuple[int, ...]) -> bool:
    """Whether the boxes ``a`` and ``b`` of an array of ``shape`` share no element: along
    some axis, their index ranges do not meet (each taken from its first to its last index)."""
    for sa, sb, size in zip(a, b, shape):
        ra, rb = range(*sa.indices(size)), range(*sb.indices(size))
        if not ra or not rb:
            return True
        if max(ra) < min(rb) or max(rb) < min(ra):
            return True
    return False


def _unit_axes_only(a: Value, b: Value) -> bool:
    """Whether ``a`` and ``b`` have static shapes that differ only by size-1 axes."""
    if not (_static(a.shape) and _static(b.shape)) or a.dtype != b.dtype:
        return False
    return [d for d in a.shape if d != 1] == [d for d in b.shape if d != 1]


def _where_into(cond: np.ndarray, values: np.ndarray, data: np.ndarray) -> np.ndarray:
    """``Where(cond, values, data)`` in ``data``'s own buffer (a copy first when it is
    read-only): the mask assignment NumPy code did, ``data[cond] = values`` for one value and
    a mask of ``data``'s shape (it skips the false stretches: 2-3x faster than ``np.copyto``
    on a sparse mask), else ``np.copyto(data, values, where=cond)``."""
    if not data.flags.writeable:
        data = data.copy()
    if np.ndim(values) == 0 and cond.shape == data.shape:
        data[cond] = values
    else:
        np.copyto(data, values, where=cond)
    return data


# Writes a plan may run in their data's own buffer (see _PlanWriter._overwritable): the
# position of the data among the node's inputs, and the call writing into it.
_WRITES: dict[str, tuple[int, Callable[..., np.ndarray]]] = {
    "ScatterND": (0, scatter_nd_into),
    "kiln.SliceUpdate": (0, slice_update_into),
    "Where": (2, _where_into),
}


def _in_place_fits(node: Node) -> bool:
    """Whether ``node``'s result has its data's dtype and shape (always for the writes; for a
    Where only when its third input is not broadcast)."""
    data = node.inputs[_WRITES[node.op][0]]
    out = node.outputs[0]
    return data is not None and data.dtype == out.dtype and tuple(data.shape) == tuple(out.shape)


def _readers(graph: ModelGraph) -> tuple[dict[int, int], dict[int, list[int]]]:
    """For each value read by a node (by id): the index of its last reader, and of every
    reader in order."""
    last_use: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None:
                last_use[id(v)] = index
                readers.setdefault(id(v), []).append(index)
    return last_use, readers


def _run_source(input_names: list[str], lines: list[str], result: str, bound: list[str]) -> str:
    """``def run(arrays, *, <bound>=<bound>)``: unpack the inputs, run ``lines`` with NumPy's
    floating-point warnings silenced, return ``[result]``."""
    defaults = ", ".join(f"{k}={k}" for k in bound)
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
    return source + "\n"


def _large(v: Value) -> bool:
    n = _numel(v.shape)
    return n is None or n >= REUSE_MIN_ELEMENTS


def _releasable(v: Value) -> bool:
    n = _numel(v.shape)
    return n is None or n * v.dtype.itemsize >= RELEASE_MIN_BYTES


def _safe_size(d: SymDim) -> bool:
    """Whether computing ``d`` cannot raise: its divisions (``//``, ``%``) are by non-zero
    constants, and it broadcasts no two sizes (``bcast`` checks that they agree)."""
    for mono, _ in d._terms:
        for atom, _ in mono:
            if isinstance(atom, str):
                continue
            kind, a, b = atom
            if kind == "bcast" or (kind in ("//", "%") and (not isinstance(b, int) or b == 0)):
                return False
            if any(isinstance(x, SymDim) and not _safe_size(x) for x in (a, b)):
                return False
    return True


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
        elif opdef.has(SHAPE_ONLY) and _static(v.shape):
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
