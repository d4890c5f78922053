"""Unrolled Python loops turned back into array operations.

Tracing unrolls a loop: ``for i in range(n): D[i] = np.sqrt(((x - x[i]) ** 2).sum(axis=1))``
records ``n`` copies of the body, each reading ``x[i]`` through a ``Slice`` whose bounds hold
the loop index, and the writes fold (:mod:`fold_scatters`, :mod:`fold_full_overwrites`) into
one ``Concat`` of the ``n`` results. This pass finds such a ``Concat`` whose parts are
*isomorphic*: the same operators with the same attributes, wired the same way, reading the
same values, and differing only in constants of one type. It then builds the body once over a
batch, as ``jax.vmap`` does: values that differ between iterations get a leading axis with
one entry per iteration (constants stacked, nodes batched by their operator's batching rule,
:mod:`kiln.ops.batching`), values shared by every iteration stay as they are, and the batched
result is laid out as the ``Concat`` was. A 64-row distance matrix goes from 449 nodes to 9.

Parts that are not all isomorphic are grouped into runs of consecutive isomorphic parts (the
first row of a loop computed differently still lets the rest vectorize). Batching keeps each
iteration's arithmetic: elementwise operations and data movement are exact, reductions reduce
the same elements along the same axis, a matrix product stays one product per iteration (a
batch axis of ``MatMul``); a rule that may round differently is used only where
``DefaultsOptions.allow_reassociation`` allows.
Operators without a rule (random draws, operators with side effects or data-dependent shapes)
leave their loop as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .. import dtypes
from ..errors import KilnError
from ..ir.builder import GraphBuilder
from ..ir.graph import Constant, ModelGraph, NameScope, Node, Value
from ..ir.rewrite import topological_order
from ..ir.rewrite import uses as count_uses
from ..ops.batching import batching_rule
from ..ops.layout import layout_sensitive
from ..ops.reduce import ACCUMULATE_DTYPES, ORDERED_DTYPES
from ..ops.registry import ELEMENTWISE, NEW_ARRAY, PURE, REDUCTION, get_op
from .pattern import prune
from .transform import DefaultsOptions, transform

__all__ = ["vectorize_loops", "MIN_ITERATIONS", "MIN_ACCUMULATION"]

# The fewest iterations a run must have to be batched: below it the per-node saving does not
# pay for the gathers and reshapes batching adds.
MIN_ITERATIONS = 3
# The deepest body the matcher follows (a deeper one is left alone; the limit keeps the
# matcher's recursion bounded).
_MAX_DEPTH = 150
# The most elements a stack of per-iteration constants may hold.
_MAX_STACKED = 1 << 22
# The most elements an accumulated value may have for its chain of additions to become one
# CumSum: the running sums take (iterations x elements) memory, and adding big arrays one
# by one costs no more than the stacked sum (a stencil's four shifted slices stay as added).
_MAX_TERM = 1 << 12
# The fewest additions a chain must have to become one CumSum (which costs about five nodes:
# a shorter chain, like ``a + b + c + d``, is cheaper added as it is).
MIN_ACCUMULATION = 8


@dataclass(frozen=True, eq=False)
class _Shared:
    """A value every iteration reads as it is."""

    value: Value


@dataclass(frozen=True, eq=False)
class _Stacked:
    """Constants, one per iteration, of one type: stacked along a new leading axis."""

    data: tuple[np.ndarray, ...]


@dataclass(frozen=True, eq=False)
class _Batched:
    """Output ``index`` of the nodes ``nodes``, one per iteration, all alike."""

    nodes: tuple[Node, ...]
    index: int
    inputs: tuple[_Shared | _Stacked | _Batched | None, ...]


_Entry = _Shared | _Stacked | _Batched


class _Matcher:
    """Matches the bodies of iterations value by value (see the module docstring)."""

    def __init__(self, graph: ModelGraph, options: DefaultsOptions) -> None:
        self.producer: dict[int, tuple[Node, int]] = {}
        for node in graph.nodes:
            for i, out in enumerate(node.outputs):
                self.producer[id(out)] = (node, i)
        self.constants: dict[int, Constant] = {id(c.value): c for c in graph.constants}
        self.reassociate = options.allow_reassociation
        self.memo: dict[tuple[Value, ...], _Entry | None] = {}
        # Per node (by id), what _alike compares, as one hashable key: equal keys mean alike
        # nodes; a node whose attributes make no key (arrays) is compared the long way.
        self.signatures: dict[int, tuple[Any, ...]] = {}
        self._interned: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # equal keys: one object

    def match(self, values: Sequence[Value], depth: int = 0) -> _Entry | None:
        key = tuple(values)  # (values hash and compare by identity)
        memo = self.memo
        if key in memo:
            return memo[key]
        entry = self._match(values, depth) if depth < _MAX_DEPTH else None
        memo[key] = entry
        return entry

    def signature(self, node: Node) -> tuple[Any, ...]:
        """``node``'s operator, output count, omitted inputs and attributes (a key of None
        when they make none), computed once per node."""
        sig = self.signatures.get(id(node))
        if sig is None:
            inputs = node.inputs
            attrs = node.attrs
            sig = (
                node.op,
                len(node.outputs),
                tuple([v is None for v in inputs]) if None in inputs else len(inputs),
                _attrs_key(attrs) if attrs else (),
            )
            if sig[3] is not None:  # hashable: alike nodes share one signature object
                sig = self._interned.setdefault(sig, sig)
            self.signatures[id(node)] = sig
        return sig

    def _match(self, values: Sequence[Value], depth: int) -> _Entry | None:
        first = values[0]
        for v in values:
            if v is not first:
                break
        else:
            return _Shared(first)
        ftype = first.type
        dtype, shape = ftype.dtype, ftype.shape
        for v in values:
            t = v.type
            if t is not ftype and (t.dtype != dtype or t.shape != shape):
                return None
        get = self.constants.get
        if get(id(first)) is not None:
            constants = [get(id(v)) for v in values]
            if all(c is not None for c in constants):
                if dtype == np.dtype(object) or len(values) * _size(first) > _MAX_STACKED:
                    return None
                return _Stacked(tuple(c.data for c in constants if c is not None))
        get = self.producer.get
        made = [get(id(v)) for v in values]
        if None in made:
            return None  # a graph input that differs between iterations
        nodes = tuple([m[0] for m in made])  # type: ignore[index]
        index = made[0][1]  # type: ignore[index]
        head = nodes[0]
        if not self._alike(nodes, made, index):  # (a node may repeat: x[i] in row i)
            return None
        opdef = get_op(head.op)
        if not opdef.has(PURE):
            return None  # a random draw per iteration stays one
        inputs: list[_Entry | None] = []
        for position, given in enumerate(head.inputs):
            if given is None:
                inputs.append(None)
                continue
            entry = self.match([n.inputs[position] for n in nodes], depth + 1)  # type: ignore[misc]
            if entry is None:
                return None
            inputs.append(entry)
        if all(e is None or isinstance(e, _Shared) for e in inputs):
            return _Shared(first)  # the same pure computation in every iteration
        rule = batching_rule(opdef)
        if rule is None or (rule.reassociates and not self.reassociate):
            return None
        return _Batched(nodes, index, tuple(inputs))

    def _alike(
        self, nodes: Sequence[Node], made: Sequence[tuple[Node, int] | None], index: int
    ) -> bool:
        """Whether ``nodes`` (made[k] = (nodes[k], output index)) all give their output
        ``index`` and have the operator, output count, omitted inputs and attributes of the
        first."""
        head = nodes[0]
        want = self.signature(head)
        keyed = want[3] is not None
        signatures = self.signatures
        for n, m in zip(nodes, made):
            if m is None or m[1] != index:
                return False
            if n is head:
                continue
            sig = signatures.get(id(n))
            if sig is None:
                sig = self.signature(n)
            if keyed and sig is want:
                continue  # (interned: equal keyed signatures are one object)
            if not (sig[:3] == want[:3] and _same_attrs(n.attrs, head.attrs)):
                return False
        return True


def _size(v: Value) -> int:
    size = 1
    for d in v.shape:
        if not isinstance(d, int):
            return _MAX_STACKED + 1
        size *= d
    return size


def _attrs_key(attrs: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """A key of ``attrs`` such that equal keys mean :func:`_same_attrs`; None when a value
    is an array or unhashable (such attributes are compared by :func:`_same_attrs`)."""
    if not attrs:
        return ()
    items = []
    for k, v in attrs.items():
        if isinstance(v, np.ndarray):
            return None
        items.append((k, type(v), v))
    items.sort(key=_first)
    key = tuple(items)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _first(item: tuple[Any, ...]) -> Any:
    return item[0]


def _same_attrs(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)  # plain values (an array's == is ambiguous: compared below)
    except ValueError:
        pass
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (
                isinstance(x, np.ndarray)
                and isinstance(y, np.ndarray)
                and x.dtype == y.dtype
                and np.array_equal(x, y)
            ):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


class _Unbatchable(Exception):
    """A batching rule declined a node: the run is left as it is."""


class _Build:
    """Builds one matched run over a batch of ``size`` iterations."""

    def __init__(self, builder: GraphBuilder, size: int) -> None:
        self.builder = builder
        self.size = size
        self.built: dict[int, tuple[Value, bool]] = {}  # entry id -> (value, batched)
        self.outputs: dict[tuple[int, ...], tuple[Value, ...]] = {}  # node ids -> outputs

    def value(self, entry: _Entry) -> tuple[Value, bool]:
        done = self.built.get(id(entry))
        if done is None:
            done = self._value(entry)
            self.built[id(entry)] = done
        return done

    def _value(self, entry: _Entry) -> tuple[Value, bool]:
        if isinstance(entry, _Shared):
            return entry.value, False
        if isinstance(entry, _Stacked):
            return self.builder.add_constant(np.stack(entry.data), hint="stacked"), True
        key = tuple(id(n) for n in entry.nodes)  # one batched node per tuple of nodes
        outs = self.outputs.get(key)
        if outs is None:
            outs = self._node(entry)
            self.outputs[key] = outs
        return outs[entry.index], True

    def _node(self, entry: _Batched) -> tuple[Value, ...]:
        head = entry.nodes[0]
        args: list[Value | None] = []
        flags: list[bool] = []
        for e in entry.inputs:
            if e is None:
                args.append(None)
                flags.append(False)
            else:
                v, b = self.value(e)
                args.append(v)
                flags.append(b)
        rule = batching_rule(get_op(head.op))
        assert rule is not None  # the matcher checked
        if _reads_layout(head):
            args = self._contiguous(head, entry, args, flags)
        try:
            outs = rule.fn(self.builder, head.op, args, flags, head.attrs)
        except KilnError:
            outs = None  # the rule built something the operator refuses: leave the loop
        if outs is None or len(outs) < len(head.outputs):
            raise _Unbatchable(head.op)
        for out, original in zip(outs, head.outputs):
            if out.dtype != original.dtype or tuple(out.shape) != (self.size, *original.shape):
                raise _Unbatchable(head.op)  # a rule's result must be one row per iteration
        return tuple(outs)

    def _contiguous(
        self, head: Node, entry: _Batched, args: list[Value | None], flags: list[bool]
    ) -> list[Value | None]:
        """The batched operands of ``head``, whose NumPy kernel rounds otherwise on strided
        operands than on contiguous ones (:func:`kiln.ops.layout.layout_sensitive`), laid out
        densely with positive strides (``kiln.Contiguous`` with ``batch_axes=0``), so NumPy
        takes the contiguous loop each iteration's operand took: a new array, a constant or
        a single element. Raises :class:`_Unbatchable` for an
        operand that was a view of more elements (a column: NumPy's strided loop), which a
        batch cannot reproduce."""
        laid = list(args)
        for k, (e, batched) in enumerate(zip(entry.inputs, flags)):
            if not batched or e is None:
                continue
            if isinstance(e, _Batched) and not _contiguous_per_iteration(e):
                raise _Unbatchable(head.op)
            (laid[k],) = self.builder.add("kiln.Contiguous", [args[k]], {"batch_axes": 0})
        return laid


def _reads_layout(node: Node) -> bool:
    """Whether ``node``'s NumPy kernel rounds differently on contiguous and strided operands
    of its input dtypes (measured once on this machine)."""
    dtypes_in = tuple(v.dtype for v in node.inputs if v is not None)
    return layout_sensitive(node.opdef, dtypes_in, node.opdef.bind_attrs(node.attrs))


def _contiguous_per_iteration(entry: _Batched) -> bool:
    """Whether each iteration's value of ``entry`` was contiguous for NumPy: a new array (an
    elementwise result, a reduction, a scatter, ...), or a view of at most one element."""
    node = entry.nodes[0]
    opdef = node.opdef
    if opdef.has(ELEMENTWISE) or opdef.has(REDUCTION) or opdef.has(NEW_ARRAY):
        return True
    n = 1
    for d in node.outputs[entry.index].shape:
        if not isinstance(d, int):
            return False
        n *= d
    return n <= 1


def _runs(matcher: _Matcher, parts: Sequence[Value]) -> list[tuple[int, int]]:
    """Maximal runs ``[start, stop)`` of consecutive parts alike pairwise, of at least
    :data:`MIN_ITERATIONS` parts."""
    if len(parts) < MIN_ITERATIONS:
        return []
    # Most loops are one run: match every part at once, and read from that match which
    # neighbours would match as a pair (the work of one match instead of len(parts) - 1).
    whole = matcher.match(parts)
    runs = []
    start = 0
    for i in range(1, len(parts) + 1):
        if i < len(parts) and (
            not _pair_shared(whole, i)
            if isinstance(whole, _Batched)
            else isinstance(matcher.match([parts[i - 1], parts[i]]), _Batched)
        ):
            continue
        if i - start >= MIN_ITERATIONS:
            runs.append((start, i))
        start = i
    return runs


def _pair_shared(entry: _Batched, i: int) -> bool:
    """Whether iterations ``i - 1`` and ``i`` of the run ``entry`` matched compute the same
    thing (matched as a pair, they would be one ``_Shared`` value; any other pair of a run
    that matches whole matches as a ``_Batched`` pair): every input where they differ is made
    by nodes that again compute the same thing."""
    a, b = entry.nodes[i - 1], entry.nodes[i]
    if a is b:
        return True
    for position, child in enumerate(entry.inputs):
        if child is None or isinstance(child, _Shared):
            continue  # shared by the whole run: by the pair too
        if a.inputs[position] is b.inputs[position]:
            continue
        if isinstance(child, _Batched) and _pair_shared(child, i):
            continue
        return False  # stacked constants, or nodes computing different things
    return True


def _laid_out(
    builder: GraphBuilder, batched: Value, axis: int, define: Value | None
) -> Value | None:
    """``batched`` (iterations first) as the ``Concat`` of its rows along ``axis`` (defining
    ``define`` when given)."""
    shape = batched.shape[1:]
    rest = shape[axis + 1 :]
    value = batched
    if axis:
        perm = (*range(1, axis + 1), 0, *range(axis + 1, len(shape) + 1))
        (value,) = builder.add("Transpose", [value], {"perm": perm})
    size = batched.shape[0]
    if all(isinstance(d, int) for d in (size, *shape)):  # every size known: say them
        target, attrs = [*shape[:axis], size * shape[axis], *rest], {"allowzero": 1}
    elif all(isinstance(d, int) and d for d in (shape[axis], *rest)):
        # symbolic sizes before the axis are copied (0); the rest are said, none of them 0
        # (a 0 would read as "copy"), and never inferred (-1 is ambiguous on empty arrays)
        target, attrs = [0] * axis + [size * shape[axis], *rest], {}
    else:
        return None
    constant = builder.add_constant(np.asarray(target, np.int64), hint="shape")
    return builder.add("Reshape", [value, constant], attrs, outputs=[define])[0]


def _unit_free(shape: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(d for d in shape if not (isinstance(d, int) and d == 1))


def _canonical(v: Value, producer: Mapping[int, tuple[Node, int]]) -> Value:
    """``v`` before any reshapes that only add or drop size-1 axes (a row written as
    ``out[i] = row`` is recorded as a ``(1, n)`` reshape of the ``(n,)`` row)."""
    while (made := producer.get(id(v))) is not None and made[0].op in _UNIT_RESHAPES:
        source = made[0].inputs[0]
        if source is None or _unit_free(source.shape) != _unit_free(v.shape):
            break
        v = source
    return v


_UNIT_RESHAPES = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Identity"})


def _step(parts: Sequence[Value], i: int, producer: Mapping[int, tuple[Node, int]]) -> Value | None:
    """``g`` when ``parts[i] = parts[i - 1] + g`` up to size-1 axes (a running sum stored row
    by row)."""
    made = producer.get(id(_canonical(parts[i], producer)))
    if made is None or made[0].op != "Add" or parts[i].dtype not in _CUMULATIVE_DTYPES:
        return None
    previous = _canonical(parts[i - 1], producer)
    a, b = made[0].inputs
    if a is None or b is None:
        return None
    a_is, b_is = _canonical(a, producer) is previous, _canonical(b, producer) is previous
    if a_is and not b_is:
        return b
    if b_is and not a_is:
        return a
    return None


def _chains(matcher: _Matcher, parts: Sequence[Value], taken: set[int]) -> list[tuple[int, int]]:
    """Maximal runs ``[start, stop)`` of parts, none in ``taken``, each after the first being
    the one before plus an alike term, of at least :data:`MIN_ITERATIONS` parts."""
    chains = []
    start = 0
    for i in range(1, len(parts) + 1):
        if (
            i < len(parts)
            and i not in taken
            and i - 1 not in taken
            and parts[i].shape == parts[i - 1].shape
            and _step(parts, i, matcher.producer) is not None
        ):
            continue
        if i - start >= MIN_ITERATIONS:
            chains.append((start, i))
        start = i
    return chains


# Dtypes whose running sum NumPy computes exactly as the loop's additions (np.cumsum adds in
# sequence, in the dtype; float16 and bfloat16 sums would be computed wider and round once).
_CUMULATIVE_DTYPES = frozenset((dtypes.float32, dtypes.float64, *dtypes.INT_DTYPES))
# The dtypes each reduction takes (its record's), less those NumPy would combine wider.
_NARROW_FLOATS = frozenset((dtypes.float16, dtypes.bfloat16))
_SUMS = ACCUMULATE_DTYPES - _NARROW_FLOATS


class _Fold(NamedTuple):
    """A loop's accumulation ``acc = acc op f(i)`` as one reduction over the stacked terms:
    its operator, the reduction and the dtypes that reduction takes as they are."""

    reduce: str
    dtypes: frozenset[np.dtype]


# The accumulations a chain of ``op`` nodes folds into (``total += f(i)``, ``best =
# np.maximum(best, f(i))``, ``ok &= f(i)``). Products of float16 would be computed wider.
_FOLDS = {
    "Add": _Fold("ReduceSum", _SUMS),
    "Mul": _Fold("ReduceProd", _SUMS),
    "Max": _Fold("ReduceMax", ORDERED_DTYPES),
    "Min": _Fold("ReduceMin", ORDERED_DTYPES),
    "And": _Fold("ReduceMin", frozenset((dtypes.bool_,))),
    "Or": _Fold("ReduceMax", frozenset((dtypes.bool_,))),
}


def _terms(
    matcher: _Matcher, builder: GraphBuilder, terms: Sequence[Value], shape: tuple[Any, ...]
) -> Value:
    """The alike ``terms``, one row each, broadcast to ``shape`` (raises _Unbatchable)."""
    entry = matcher.match(terms)
    if entry is None or not all(isinstance(d, int) for d in shape):
        raise _Unbatchable("terms")
    if isinstance(entry, _Shared):  # the same term every time (x += dt)
        zero = builder.add_constant(np.asarray([0], np.int64), hint="axes")
        (value,) = builder.add("Unsqueeze", [entry.value, zero])
    else:
        value, _ = _Build(builder, len(terms)).value(entry)
    if tuple(value.shape) != (len(terms), *shape):  # broadcast each term as the Add did
        missing = len(shape) - (len(value.shape) - 1)
        if missing > 0:
            axes = builder.add_constant(np.arange(1, 1 + missing, dtype=np.int64), hint="axes")
            (value,) = builder.add("Unsqueeze", [value, axes])
        target = builder.add_constant(np.asarray([len(terms), *shape], np.int64), hint="shape")
        (value,) = builder.add("Expand", [value, target])
    return value


def _stacked(
    matcher: _Matcher, builder: GraphBuilder, first: Value, terms: Sequence[Value]
) -> Value:
    """``first, t1, t2, ...`` stacked along a new leading axis (a new, C-ordered array)."""
    rows = _terms(matcher, builder, terms, tuple(first.shape))
    zero = builder.add_constant(np.asarray([0], np.int64), hint="axes")
    (head,) = builder.add("Unsqueeze", [first, zero])
    return builder.add("Concat", [head, rows], {"axis": 0})[0]


def _running_sum(
    matcher: _Matcher, builder: GraphBuilder, first: Value, terms: Sequence[Value]
) -> Value:
    """``first, first + t1, first + t1 + t2, ...`` (iterations first), summed in the loop's
    order by one ``CumSum``."""
    return _cumsum(builder, _stacked(matcher, builder, first, terms))


def _cumsum(builder: GraphBuilder, stacked: Value) -> Value:
    """The running sums of ``stacked``'s rows, in order (``np.cumsum`` adds in sequence)."""
    axis = builder.add_constant(np.asarray(0, np.int64), hint="axis")
    return builder.add("CumSum", [stacked, axis])[0]


def _in_order(shape: Sequence[Any], dtype: np.dtype) -> bool:
    """Whether NumPy's reduction along the leading axis of a new C-ordered array of ``shape``
    combines the rows in the loop's order, as the loop's own binary operation did:
    integers and booleans always (wrapping sums and products, extrema and logic do not
    depend on it); floats when the elements after the leading axis are at least 2 (NumPy's
    reduction then runs its inner loop over them and combines the rows one by one; over a
    single column the inner loop is the reduced axis, which NumPy sums pairwise)."""
    return dtype.kind in "iub" or int(np.prod([int(d) for d in shape[1:]])) >= 2


def _vectorize(
    matcher: _Matcher, node: Node, scope: NameScope
) -> tuple[list[Node], list[Constant]] | None:
    """The nodes and constants computing ``node`` (a Concat) with each run of alike parts
    built batched, and each running sum stored part by part built as one ``CumSum``; None
    when neither was found."""
    parts: list[Value] = [v for v in node.inputs if v is not None]
    out = node.outputs[0]
    axis = node.attrs["axis"] % len(out.shape)
    segments = [(start, stop, True) for start, stop in _runs(matcher, parts)]
    taken = {i for start, stop, _ in segments for i in range(start, stop)}
    segments += [(start, stop, False) for start, stop in _chains(matcher, parts, taken)]
    nodes: list[Node] = []
    constants: list[Constant] = []
    kept: list[Value] = []
    done = 0
    for start, stop, alike in sorted(segments):
        builder = GraphBuilder(scope, node.source)
        whole = start == 0 and stop == len(parts)
        try:
            if alike:
                entry = matcher.match(parts[start:stop])
                if not isinstance(entry, _Batched):
                    continue
                root, _ = _Build(builder, stop - start).value(entry)
            else:
                terms = [_step(parts, i, matcher.producer) for i in range(start + 1, stop)]
                root = _running_sum(matcher, builder, parts[start], terms)  # type: ignore[arg-type]
            merged = _laid_out(builder, root, axis, out if whole else None)
        except _Unbatchable:
            continue  # nodes and names the attempt made are dropped
        if merged is None:
            continue
        kept.extend(parts[done:start])
        kept.append(merged)
        done = stop
        nodes.extend(builder.nodes)
        constants.extend(builder.constants)
    if not nodes:
        return None
    if len(kept) > 1 or done < len(parts):
        builder = GraphBuilder(scope, node.source)
        builder.add("Concat", [*kept, *parts[done:]], node.attrs, outputs=[out])
        nodes.extend(builder.nodes)
    return nodes, constants


def _accumulations(graph: ModelGraph, matcher: _Matcher) -> list[list[Node]]:
    """Chains ``acc = acc + term`` (a loop accumulating into one value; also ``*``, maximum,
    minimum, and, or: :data:`_FOLDS`): the chain's nodes of one operator in order, each
    intermediate value read only by the next, at least :data:`MIN_ACCUMULATION` long."""
    uses = count_uses(graph.nodes)
    for v in graph.output_values:
        uses[id(v)] = uses.get(id(v), 0) + 2  # an output is read outside the chain
    previous: dict[int, Node] = {}  # Add -> the Add whose sum it adds to (Mul, Max, ... alike)
    for node in graph.nodes:
        out = node.outputs[0]
        fold = _FOLDS.get(node.op)
        if fold is None or len(node.inputs) != 2:
            continue
        if out.dtype not in (_CUMULATIVE_DTYPES if node.op == "Add" else fold.dtypes):
            continue
        for acc in node.inputs:  # acc + term first (total += f(i)), then term + acc
            made = matcher.producer.get(id(acc)) if acc is not None else None
            if (
                made is not None
                and made[0].op == node.op
                and uses.get(id(acc)) == 1
                and acc.shape == out.shape  # type: ignore[union-attr]
            ):
                previous[id(node)] = made[0]
                break
    inner = {id(p) for p in previous.values()}
    chains = []
    for node in graph.nodes:
        if id(node) not in previous or id(node) in inner:
            continue  # not the last Add of a chain
        chain = [node]
        while (p := previous.get(id(chain[-1]))) is not None:
            chain.append(p)
        chain.reverse()
        if len(chain) >= MIN_ACCUMULATION:
            chains.append(chain)
    return chains


def _term(node: Node, acc: Value) -> Value | None:
    a, b = node.inputs
    return b if a is acc else a if b is acc else None


def _accumulate(
    matcher: _Matcher, chain: list[Node], scope: NameScope
) -> tuple[list[Node], list[Constant]] | None:
    """The nodes computing the chain's last sum over its terms stacked, in the loop's order
    (so exactly): one reduction (``ReduceSum``, ``ReduceProd``, ``ReduceMax``, ...) over the
    rows where NumPy combines them one by one (:func:`_in_order`), else, for a sum, a
    ``CumSum`` and its last row; or None. Either input of the first node may be the
    accumulator it starts from (``0 + f(0)``, or ``f(0) + f(1)`` once ``0 +`` folded)."""
    for base in chain[0].inputs:
        built = _accumulate_from(matcher, chain, base, scope) if base is not None else None
        if built is not None:
            return built
    return None


def _accumulate_from(
    matcher: _Matcher, chain: list[Node], base: Value, scope: NameScope
) -> tuple[list[Node], list[Constant]] | None:
    out = chain[-1].outputs[0]
    shape = tuple(out.shape)
    if _size(out) > _MAX_TERM:
        return None  # a few big terms: adding them as they are is as fast, with no copies
    terms = []
    acc = base
    for node in chain:
        term = _term(node, acc)
        if term is None:
            return None
        terms.append(term)
        acc = node.outputs[0]
    builder = GraphBuilder(scope, chain[-1].source)
    try:
        first = base
        if tuple(base.shape) != shape:  # an initial 0 broadcast by the first Add
            if not all(isinstance(d, int) for d in shape):
                return None
            target = builder.add_constant(np.asarray(shape, np.int64), hint="shape")
            (first,) = builder.add("Expand", [base, target])
        stacked = _stacked(matcher, builder, first, terms)
    except _Unbatchable:
        return None
    fold = _FOLDS[chain[-1].op]
    if stacked.dtype in fold.dtypes and _in_order(stacked.shape, stacked.dtype):
        # The total alone: one reduction over the rows.
        axes = builder.add_constant(np.asarray([0], np.int64), hint="axes")
        builder.add(fold.reduce, [stacked, axes], {"keepdims": 0}, outputs=[out])
    elif chain[-1].op != "Add":
        return None  # (no cumulative product, maximum, ...: the chain stays as recorded)
    else:  # the running sums in order, then the last
        sums = _cumsum(builder, stacked)
        last = builder.add_constant(np.asarray(-1, np.int64), hint="last")
        builder.add("Gather", [sums, last], {"axis": 0}, outputs=[out])
    return list(builder.nodes), list(builder.constants)


@transform("vectorize_loops")
def vectorize_loops(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Build the unrolled iterations of a loop once over a batch (see the module docstring)."""
    concats = [n for n in graph.nodes if n.op == "Concat" and len(n.inputs) >= MIN_ITERATIONS]
    adds = sum(1 for n in graph.nodes if n.op in _FOLDS)  # the operators a chain may fold
    if not concats and adds < MIN_ACCUMULATION:
        return graph, 0
    try:
        return _vectorize_graph(graph, options, concats, adds)
    except RecursionError:  # a body nested deeper than the interpreter's stack allows
        return graph, 0


def _vectorize_graph(
    graph: ModelGraph, options: DefaultsOptions, concats: list[Node], adds: int
) -> tuple[ModelGraph, int]:
    matcher = _Matcher(graph, options)
    scope = graph.name_scope()
    replacements: dict[str, list[Node]] = {}
    constants = list(graph.constants)
    for node in concats:
        built = _vectorize(matcher, node, scope)
        if built is not None:
            replacements[node.name] = built[0]
            constants.extend(built[1])
    if adds >= MIN_ACCUMULATION:
        for chain in _accumulations(graph, matcher):
            built = _accumulate(matcher, chain, scope)
            if built is not None and chain[-1].name not in replacements:
                replacements[chain[-1].name] = built[0]
                constants.extend(built[1])
    if not replacements:
        return graph, 0
    body: list[Node] = []
    for node in graph.nodes:
        body.extend(replacements.get(node.name, (node,)))
    defined = [*graph.input_values, *(c.value for c in constants)]
    rebuilt = graph.with_body(topological_order(body, defined), constants=constants)
    return prune(rebuilt)[0], len(replacements)
