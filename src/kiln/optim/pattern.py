"""Patterns over the graph, rewrite rules as data, and the one driver that applies them.

A :class:`Pattern` describes a little tree of operators: ``op("Mul", var("x"), const(1.0))``
matches a ``Mul`` node one of whose inputs is a constant holding only ones (operands of a
commutative operator match in either order). Named leaves capture values; a name used twice must
bind the same value both times, so ``op("Sub", x, op("ReduceMean", x))`` only matches ``x`` minus
its *own* mean. A :class:`Rule` pairs a pattern with a function that builds the replacement (or
declines by returning ``None``). Passes are lists of rules, one rule per line::

    RULES = [
        Rule(op("Mul", X, const(1.0)), keep("x")),  # x * 1 -> x
        Rule(op("Neg", op("Neg", X)), keep("x")),  # -(-x) -> x
    ]

:func:`rewrite_with_rules` walks the graph in topological order and replaces the first node
each rule matches, repeats the sweep until nothing changes, and refuses to loop forever. The
graph it returns is in topological order whatever the rules replaced
(:func:`kiln.ir.rewrite.topological_order`).
Every replacement must have exactly the dtype and shape of the value it replaces; graph outputs
keep their names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import OpArgumentError, OpTypeError
from ..ir.builder import GraphBuilder
from ..ir.graph import AttrValue, Constant, ModelGraph, NameScope, Node, Value
from ..ir.rewrite import remove_unused, substitute_node, topological_order
from ..ops.registry import COMMUTATIVE
from .transform import DefaultsOptions

__all__ = [
    "Pattern",
    "Match",
    "Builder",
    "Rule",
    "var",
    "const",
    "op",
    "either",
    "keep",
    "rewrite_with_rules",
    "RewriteLoopError",
    "constant_equals",
    "prune",
]

# A rule set that still changes the graph after this many sweeps is taken to cycle.
MAX_SWEEPS = 32


class RewriteLoopError(RuntimeError):
    """Rewrite rules kept changing the graph: two rules undo each other, or one never stops."""


# -- patterns -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """A pattern over values. Build one with :func:`var`, :func:`const`, :func:`op` and
    :func:`either` rather than directly.

    Attributes:
        ops: Operator names a node must have (empty: a leaf matching any value).
        inputs: Patterns for the node's inputs, in order (for a commutative two-input
            operator either order matches).
        name: Capture the matched value (and, for an operator, its node) under this name.
        constant: For a leaf: the value must be a graph constant, and if this is not None,
            every element must equal it (up to the rounding of the constant's dtype).
        attrs: Attribute values the node must have (after defaults are filled in).
        alternatives: For :func:`either`: the patterns tried in turn.
    """

    ops: tuple[str, ...] = ()
    inputs: tuple[Pattern, ...] = ()
    name: str | None = None
    constant: float | bool | None = None
    is_constant: bool = False
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)
    alternatives: tuple[Pattern, ...] = ()


def var(name: str | None = None) -> Pattern:
    """A leaf matching any value, captured as ``name``.

    Example:
        >>> var("x").name
        'x'
    """
    return Pattern(name=name)


def const(value: float | bool | None = None, name: str | None = None) -> Pattern:
    """A leaf matching a graph constant; with ``value``, one whose elements all equal it.

    Example:
        >>> const(1.0).constant
        1.0
    """
    return Pattern(name=name, constant=value, is_constant=True)


def op(
    ops: str | Sequence[str], *inputs: Pattern, name: str | None = None, **attrs: Any
) -> Pattern:
    """A node of operator ``ops`` (or any of several) whose inputs match ``inputs``.

    Example:
        >>> p = op("Neg", op("Neg", var("x")))
        >>> p.ops, p.inputs[0].ops
        (('Neg',), ('Neg',))
    """
    names = (ops,) if isinstance(ops, str) else tuple(ops)
    return Pattern(ops=names, inputs=tuple(inputs), name=name, attrs=attrs)


def either(*alternatives: Pattern, name: str | None = None) -> Pattern:
    """A pattern matching whichever of ``alternatives`` matches first.

    Example:
        >>> len(either(op("Sqrt", var("x")), op("Pow", var("x"), const(0.5))).alternatives)
        2
    """
    return Pattern(name=name, alternatives=tuple(alternatives))


def constant_equals(data: np.ndarray, target: float | bool) -> bool:
    """True when every element of ``data`` equals ``target`` up to the rounding of its dtype.

    A float32 constant ``1/sqrt(2)`` written as ``1 / math.sqrt(2)`` or ``math.sqrt(0.5)``
    differs in the last bit; both count as ``sqrt(0.5)``. Anything further off does not.

    Example:
        >>> constant_equals(np.float32(0.5), 0.5), constant_equals(np.float32(0.51), 0.5)
        (True, False)
    """
    data = np.asarray(data)
    if data.size == 0 or data.dtype.kind == "c":
        return False  # complex: no rule's real constant (x * 1j is not x * 0)
    if data.size == 1 and data.dtype.kind == "f":
        # The common case (a Python scalar in the user's code), without array temporaries:
        # the same test on the one element, widened exactly to a Python float.
        eps, tiny = _float_limits(data.dtype)
        tolerance = 4 * eps * max(abs(float(target)), tiny)
        return abs(float(data.reshape(-1)[0]) - float(target)) <= tolerance
    if data.dtype == np.bool_:
        return bool(np.all(data == bool(target)))
    if data.dtype.kind in "iu":
        return float(target) == int(target) and bool(np.all(data == int(target)))
    wide = data.astype(np.float64)
    eps = float(np.finfo(data.dtype).eps)
    tolerance = 4 * eps * max(abs(float(target)), np.finfo(data.dtype).tiny)
    return bool(np.all(np.abs(wide - float(target)) <= tolerance))


_FLOAT_LIMITS: dict[np.dtype, tuple[float, float]] = {}


def _float_limits(dtype: np.dtype) -> tuple[float, float]:
    """``(eps, tiny)`` of a float dtype, looked up once (``np.finfo`` costs microseconds)."""
    limits = _FLOAT_LIMITS.get(dtype)
    if limits is None:
        info = np.finfo(dtype)
        limits = _FLOAT_LIMITS[dtype] = (float(info.eps), float(info.tiny))
    return limits


# -- matching -----------------------------------------------------------------------------


class Match:
    """What a pattern matched: captured values and nodes, and the nodes it passed through."""

    def __init__(
        self,
        root: Node,
        values: dict[str, Value],
        nodes: dict[str, Node],
        interior: tuple[Node, ...],
        constants: Mapping[int, np.ndarray],
        producers: Mapping[int, Node] | None = None,
    ) -> None:
        self.root = root
        self.values = values
        self.nodes = nodes
        self.interior = interior
        self._constants = constants
        self._producers = producers or {}

    def __getitem__(self, name: str) -> Value:
        return self.values[name]

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def node(self, name: str) -> Node:
        """The node that produced the value captured as ``name``."""
        return self.nodes[name]

    def attrs(self, name: str) -> dict[str, Any]:
        """The bound attributes (defaults filled in) of the node captured as ``name``."""
        node = self.nodes[name]
        return node.opdef.bind_attrs(node.attrs)

    def data(self, name: str) -> np.ndarray | None:
        """The contents of the value captured as ``name`` if it is a constant, else None."""
        return self._constants.get(id(self.values[name]))

    def producer(self, name: str) -> Node | None:
        """The node that makes the value captured as ``name`` (None: a graph input or a
        constant)."""
        return self._producers.get(id(self.values[name]))

    def scalar(self, name: str) -> float | None:
        """The single value of the constant captured as ``name`` (None: not a one-element
        constant)."""
        data = self.data(name)
        if data is None or data.size != 1 or data.dtype.kind == "c":
            return None  # complex: not a real number a rule could use
        return float(data.reshape(()))

    def axes(self, name: str) -> tuple[int, ...] | None:
        """The axes of the reduction captured as ``name`` (from its constant ``axes`` input),
        normalised to be non-negative and sorted; None when they are not constant."""
        node = self.nodes[name]
        rank = len(node.inputs[0].shape)  # type: ignore[union-attr]
        if len(node.inputs) < 2 or node.inputs[1] is None:
            return tuple(range(rank))
        data = self._constants.get(id(node.inputs[1]))
        if data is None:
            return None
        return tuple(sorted(int(a) % rank for a in data.reshape(-1))) if rank else ()


# Whether a pattern is flat (see _is_flat), by id; the pattern is kept, so its id is not reused.
_FLAT: dict[int, tuple[Pattern, bool]] = {}


def _is_flat(pattern: Pattern) -> bool:
    """Whether ``pattern`` is one operator (no alternatives) over leaves that are not
    alternatives either: :meth:`_Matcher._flat_matches` matches it."""
    known = _FLAT.get(id(pattern))
    if known is not None and known[0] is pattern:
        return known[1]
    flat = (
        bool(pattern.ops)
        and not pattern.alternatives
        and all(not (q.ops or q.alternatives) for q in pattern.inputs)
    )
    if len(_FLAT) < 1 << 12:
        _FLAT[id(pattern)] = (pattern, flat)
    return flat


class _Matcher:
    """Matches patterns against values, looking up producers and constants of the graph."""

    def __init__(self, producers: Mapping[int, Node], constants: Mapping[int, np.ndarray]) -> None:
        self.producers = producers
        self.constants = constants
        # constant_equals per (constant, target): a constant is compared with the same few
        # targets at every node that reads it.
        self._equals: dict[tuple[int, float | bool], bool] = {}

    def constant_fits(self, pattern: Pattern, value: Value) -> bool:
        """Whether ``value`` is a graph constant that the leaf ``pattern`` accepts."""
        data = self.constants.get(id(value))
        if data is None:
            return False
        target = pattern.constant
        if target is None:
            return True
        key = (id(value), target)
        known = self._equals.get(key)
        if known is None:
            known = self._equals[key] = constant_equals(data, target)
        return known

    def matches(self, pattern: Pattern, root: Node) -> Iterator[Match]:
        """Every way ``pattern`` matches at ``root`` (commutative operands give several)."""
        if _is_flat(pattern):
            yield from self._flat_matches(pattern, root)
            return
        for values, nodes, interior in self._value(pattern, root.outputs[0], {}, {}, ()):
            yield Match(root, values, nodes, interior, self.constants, self.producers)

    def _producer(self, pattern: Pattern, value: Value) -> Node | None:
        """The node making ``value`` when its operator and attributes are ``pattern``'s."""
        node = self.producers.get(id(value))
        if node is None or node.op not in pattern.ops or node.outputs[0] is not value:
            return None
        if pattern.attrs:
            bound = node.opdef.bind_attrs(node.attrs)
            if any(bound.get(k) != v for k, v in pattern.attrs.items()):
                return None
        return node

    def _flat_matches(self, pattern: Pattern, root: Node) -> Iterator[Match]:
        """:meth:`matches` for an operator pattern whose inputs are all leaves (``x * 1``,
        ``reshape(x, s)``: most rules), without the generic matcher's nested generators:
        the same matches, bound the same way, in the same order."""
        value = root.outputs[0]
        node = self._producer(pattern, value)
        if node is None:
            return
        orders = _orders(node)
        leaves = pattern.inputs
        for inputs in orders:
            if len(inputs) != len(leaves):
                continue
            values: dict[str, Value] = {}
            for leaf, v in zip(leaves, inputs):
                if v is None:
                    break
                name = leaf.name
                if name is not None and name in values:
                    if values[name] is not v:
                        break  # a name bound again must bind the same value
                    continue
                if leaf.is_constant and not self.constant_fits(leaf, v):
                    break
                if name is not None:
                    values[name] = v
            else:
                nodes: dict[str, Node] = {}
                if pattern.name is not None:
                    nodes[pattern.name] = node
                    values[pattern.name] = value
                yield Match(root, values, nodes, (node,), self.constants, self.producers)

    def may_match(self, pattern: Pattern, value: Value | None, depth: int) -> bool:
        """A quick necessary condition for :meth:`matches`: the operators (and constants) of
        ``pattern`` down to ``depth`` levels are there, in some order of commutative operands.
        It binds nothing, so most nodes are turned away without building a single match.
        Only for patterns :func:`_names_agree` accepts (the matcher checks the structure of
        a name bound twice only where it binds first)."""
        if value is None:
            return False
        if pattern.alternatives:
            for alternative in pattern.alternatives:
                if self.may_match(alternative, value, depth):
                    return True
            return False
        if not pattern.ops:
            return not pattern.is_constant or self.constant_fits(pattern, value)
        node = self.producers.get(id(value))
        if node is None or node.op not in pattern.ops or node.outputs[0] is not value:
            return False
        inputs, patterns = node.inputs, pattern.inputs
        if len(inputs) != len(patterns):
            return False
        if not depth:
            return True
        depth -= 1
        for p, v in zip(patterns, inputs):
            if not self.may_match(p, v, depth):
                break
        else:
            return True
        return (
            len(inputs) == 2
            and COMMUTATIVE in node.opdef.traits
            and self.may_match(patterns[0], inputs[1], depth)
            and self.may_match(patterns[1], inputs[0], depth)
        )

    def _value(
        self,
        pattern: Pattern,
        value: Value | None,
        values: dict[str, Value],
        nodes: dict[str, Node],
        interior: tuple[Node, ...],
    ) -> Iterator[tuple[dict[str, Value], dict[str, Node], tuple[Node, ...]]]:
        if value is None:
            return
        if pattern.name is not None and pattern.name in values:
            # A name used again must bind the same value; its structure was checked then.
            if values[pattern.name] is value:
                yield values, nodes, interior
            return
        if pattern.alternatives:
            for alternative in pattern.alternatives:
                for found in self._value(alternative, value, values, nodes, interior):
                    yield self._bind(pattern, value, *found)
            return
        if not pattern.ops:
            if pattern.is_constant and not self.constant_fits(pattern, value):
                return
            yield self._bind(pattern, value, values, nodes, interior)
            return
        node = self._producer(pattern, value)
        if node is None:
            return
        for inputs in _orders(node):
            if len(inputs) != len(pattern.inputs):
                continue
            for found in self._all(pattern.inputs, inputs, values, nodes, (*interior, node)):
                v, n, i = found
                if pattern.name is not None:
                    n = {**n, pattern.name: node}
                yield self._bind(pattern, value, v, n, i)

    def _all(
        self,
        patterns: Sequence[Pattern],
        inputs: Sequence[Value | None],
        values: dict[str, Value],
        nodes: dict[str, Node],
        interior: tuple[Node, ...],
    ) -> Iterator[tuple[dict[str, Value], dict[str, Node], tuple[Node, ...]]]:
        if not patterns:
            yield values, nodes, interior
            return
        for found in self._value(patterns[0], inputs[0], values, nodes, interior):
            yield from self._all(patterns[1:], inputs[1:], *found)

    @staticmethod
    def _bind(
        pattern: Pattern,
        value: Value,
        values: dict[str, Value],
        nodes: dict[str, Node],
        interior: tuple[Node, ...],
    ) -> tuple[dict[str, Value], dict[str, Node], tuple[Node, ...]]:
        if pattern.name is None:
            return values, nodes, interior
        return {**values, pattern.name: value}, nodes, interior


# -- building replacements ----------------------------------------------------------------


_UNSET_SCOPE = NameScope()  # a lazy Builder's scope until it is made (never named from)


def _orders(node: Node) -> list[Sequence[Value | None]]:
    """``node``'s inputs in the orders a pattern may match them: also swapped for a
    commutative operator of two inputs."""
    orders: list[Sequence[Value | None]] = [node.inputs]
    if len(node.inputs) == 2 and COMMUTATIVE in node.opdef.traits:
        orders.append(node.inputs[::-1])
    return orders


class Builder(GraphBuilder):
    """Makes the nodes and constants of one replacement: a :class:`~kiln.ir.GraphBuilder`
    over the graph's name scope, with the rules' shorthand (attributes as keywords).

    The driver makes one per attempt and keeps its nodes until it accepts the replacement,
    so a rule that gives up half way leaves nothing behind. ``scope`` may be a function
    giving the scope, called when the first name is needed (most attempts name nothing, and
    a graph's name scope costs a pass over the graph).
    """

    def __init__(
        self, scope: NameScope | Callable[[], NameScope] | None = None, source: str = ""
    ) -> None:
        self._made_scope: NameScope | None = None
        self._scope_of = None if scope is None or isinstance(scope, NameScope) else scope
        lazy = self._scope_of is not None
        super().__init__(_UNSET_SCOPE if lazy else scope, source)  # type: ignore[arg-type]
        if lazy:
            self._made_scope = None  # made by _scope_of when first needed

    @property  # type: ignore[override]
    def scope(self) -> NameScope:
        if self._made_scope is None and self._scope_of is not None:
            self._made_scope = self._scope_of()
        assert self._made_scope is not None
        return self._made_scope

    @scope.setter
    def scope(self, value: NameScope) -> None:
        self._made_scope = value

    def op(self, name: str, *inputs: Value | None, **attrs: Any) -> Value:
        """Add a node of the single-output operator ``name``; returns its output value.

        Raises the operator's own error when the inputs or attributes do not fit.
        """
        return self.ops(name, *inputs, count=1, **attrs)[0]

    def ops(self, name: str, *inputs: Value | None, count: int = 1, **attrs: Any) -> list[Value]:
        """Add a node of operator ``name`` declaring its first ``count`` outputs."""
        return list(self.add(name, inputs, attrs, n_outputs=count))

    def const(self, data: np.ndarray, hint: str = "const") -> Value:
        """Add a constant holding ``data`` (read-only; copied unless it already is)."""
        return self.add_constant(data, hint=hint)


# What a rule's builder returns: the replacement for the root's (first) output, one per
# output, or None to leave the node as it is.
Replacement = Value | Sequence[Value] | None
BuildFn = Callable[[Match, Builder, DefaultsOptions], Replacement]


@dataclass(frozen=True)
class Rule:
    """A pattern and what to replace its root with.

    Attributes:
        pattern: What to match; its root must be an operator pattern.
        build: ``build(match, builder, options)`` returns the replacement value(s) for the
            root node's outputs, made with ``builder``, or None to decline.
        name: For error messages.
        exclusive: Only rewrite when no value the pattern passes through (other than the
            root's) is used outside the match or is a graph output: fusions that would
            otherwise compute those intermediates twice set it.
    """

    pattern: Pattern
    build: BuildFn
    name: str = ""
    exclusive: bool = False


def keep(name: str) -> BuildFn:
    """A builder that replaces the root by the value captured as ``name``.

    Example:
        >>> Rule(op("Neg", op("Neg", var("x"))), keep("x")).exclusive
        False
    """

    def build(match: Match, builder: Builder, options: DefaultsOptions) -> Replacement:
        return match[name]

    return build


# -- the driver ---------------------------------------------------------------------------


def _same_type(a: Value, b: Value) -> bool:
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)


@dataclass(frozen=True)
class _Indexed:
    """A rule with what the driver reads before matching it: the operators every match
    contains (:func:`_required_ops`), and whether the quick check may turn nodes away (both
    only for patterns whose names agree, :func:`_names_agree`; others are always matched)."""

    rule: Rule
    roots: tuple[str, ...]
    required: frozenset[frozenset[str]]
    prefilter: bool
    # For a prefiltered operator root: the number of inputs, and per input the operators
    # its producer must have (None: any value). What may_match checks first, read once per
    # kind of node instead of once per node (see _Sweep._candidates).
    children: tuple[frozenset[str] | None, ...] | None = None
    # For a rule whose decline at a node is remembered (see _Declined): its bit.
    bit: int = 0

    def may_fit(self, in_ops: tuple[str | None, ...], commutative: bool) -> bool:
        """Whether a node whose inputs' producers have the operators ``in_ops`` (None: not
        a node's first output) can match, as far as the root's inputs tell."""
        children = self.children
        if children is None:
            return True
        if len(children) != len(in_ops):
            return False
        if all(c is None or o in c for c, o in zip(children, in_ops)):
            return True
        if commutative and len(in_ops) == 2:
            return all(c is None or o in c for c, o in zip(children, reversed(in_ops)))
        return False


def _index(rules: Sequence[Rule]) -> list[_Indexed]:
    indexed = []
    for rule in rules:
        agree = _names_agree(rule.pattern)
        # Where names disagree, a sub-pattern under a name bound more than once may be
        # matched by the value alone (another place bound it first): what every match
        # contains is then read from the rest of the pattern.
        required = _required_ops(rule.pattern, frozenset() if agree else _repeated(rule.pattern))
        children = None
        p = rule.pattern
        if agree and p.ops and not p.alternatives:
            children = tuple(
                frozenset(q.ops) if q.ops and not q.alternatives else None for q in p.inputs
            )
        # A flat pattern (one operator over leaves) sees only the node, and the constants
        # among its inputs: whether it declines there is remembered (_Declined).
        bit = 1 << len(indexed) if _is_flat(p) and not rule.exclusive else 0
        indexed.append(_Indexed(rule, _root_ops(p), required, agree, children, bit))
    return indexed


class _Declined:
    """Which rules declined at which node: for the flat rules (one operator over leaves,
    not exclusive), a pure function of the node (its operator, attributes, input values and
    their types) and of which of its inputs are constants (a constant's contents never
    change), under one rule set and one set of options. A node that no rule changed comes
    back as the same object in the next sweep and in the next pass's graph (the confirming
    sweep, the pipeline's next iteration): the rules that declined there are not matched
    again, and a node where every rule that may fit declined is not looked at. Only a
    decline is remembered (no match, a builder that returned None or raised the operator's
    error), not a replacement the driver refused (that depends on the node's users).

    A value is a constant or not for good, except that folding (``fold_constants``,
    ``fold_shapes``) makes a node's output a constant, the same value: when a value that was
    not a constant at a remembered node is one in a later sweep's graph, the table is
    forgotten. Entries hold their nodes and values, so the ids they are keyed by are not
    reused while the table lives: one ``rewrite_with_rules`` call, or while a pipeline runs
    (:func:`remember_declines`).
    """

    def __init__(self, rules: tuple[Rule, ...], options: DefaultsOptions) -> None:
        self.rules = rules
        self.options = options
        self.table: dict[int, tuple[Node, int]] = {}  # id(node) -> (node, declined bits)
        # The inputs of remembered nodes that were not constants then, by id.
        self.variables: dict[int, Value] = {}

    def check(self, constants: Mapping[int, Any]) -> None:
        """Forget everything if a value that was not a constant is one in ``constants``."""
        if not self.variables.keys().isdisjoint(constants):
            self.table.clear()
            self.variables.clear()


# The tables of the pipelines running now, per rule set and options (see remember_declines).
_DECLINED: dict[tuple[int, int, int], _Declined] = {}
_declining = 0  # pipelines running now
_declined_lock = threading.Lock()


# The graphs prune returned while a pipeline runs, by id (see prune).
_PRUNED: dict[int, ModelGraph] = {}


def remember_declines(on: bool) -> None:
    """Keep what rules declined at which nodes across ``rewrite_with_rules`` calls, and which
    graphs have no dead code (:func:`prune`), from when a pipeline starts (``on``) until the
    last pipeline running ends (``not on``), which forgets it all. The pipeline's passes run
    the same rule sets under the same options on graphs that share most of their nodes."""
    global _declining
    with _declined_lock:
        _declining += 1 if on else -1
        if not _declining:
            _DECLINED.clear()
            _PRUNED.clear()


def prune(graph: ModelGraph) -> tuple[ModelGraph, int]:
    """:func:`~kiln.ir.rewrite.remove_unused`, which is idempotent: while a pipeline runs, a
    graph it returned is not walked again (``eliminate_dead_code`` after a pass that ends
    with it: the rewrite driver, ``splice``, ``vectorize_loops``)."""
    if _PRUNED.get(id(graph)) is graph:
        return graph, 0
    result, removed = remove_unused(graph)
    if _declining:
        _PRUNED[id(result)] = result  # (held: its id is not reused while remembered)
    return result, removed


def _declined_for(rules: Sequence[Rule], options: DefaultsOptions) -> _Declined:
    snapshot = tuple(rules)
    if not _declining:
        return _Declined(snapshot, options)
    # (per thread too: another pipeline's sweep may forget the table, by check, while this
    # one's remembers a node both graphs share)
    key = (id(rules), id(options), threading.get_ident())
    found = _DECLINED.get(key)
    if (
        found is None
        or found.options is not options
        or len(found.rules) != len(snapshot)
        or not all(a is b for a, b in zip(found.rules, snapshot))
    ):
        # (a rule list changed since: start over; the entry keeps ``rules`` alive through
        # its snapshot only, so its id may name another list: compared by contents)
        found = _DECLINED[key] = _Declined(snapshot, options)
    return found


# How deep the quick check looks below a root (the matcher then looks at the rest).
_PREFILTER_DEPTH = 2


class _Sweep:
    """One pass over the graph in topological order, applying the first rule that fits.

    Everything it does is linear in the graph: the nodes are visited once, and per node only
    the rules rooted at its operator whose operators all occur in the graph are tried (most
    rules of a fusion pass never are), each behind a quick structural check.
    """

    def __init__(
        self,
        graph: ModelGraph,
        rules: Sequence[_Indexed],
        options: DefaultsOptions,
        declined: _Declined | None = None,
    ) -> None:
        self.graph = graph
        self.options = options
        self.rules = rules
        if declined is None:
            declined = _Declined(tuple(i.rule for i in rules), options)
        self.declined = declined.table
        self._variables = declined.variables
        # The operators of the graph, and of the nodes this sweep adds: a rule needing one
        # that is absent cannot match, so it is left out of by_op until one appears.
        self.present = {node.op for node in graph.nodes}
        self.by_op = self._by_op()
        # The rules that may fit a node, by its operator and its inputs' producers' operators
        # (an unrolled loop has many nodes and few kinds of them); reset with by_op.
        self._fitting: dict[tuple[str, tuple[str | None, ...]], tuple[list[_Indexed], int]] = {}
        self.constants: dict[int, np.ndarray] = {id(c.value): c.data for c in graph.constants}
        declined.check(self.constants)
        self.new_constants: list[Constant] = []
        self.producers: dict[int, Node] = {}
        self.outputs = {id(v) for v in graph.output_values}
        self._users: dict[int, set[str]] | None = None  # made when a rule first needs it
        self._scope: NameScope | None = None
        # Values whose users changed during this sweep: exclusive rules wait for the next one.
        self.stale: set[int] = set()
        self.mapping: dict[int, Value] = {}
        self.nodes: list[Node] = []
        self.count = 0

    def _by_op(self) -> dict[str, list[_Indexed]]:
        present = self.present
        by_op: dict[str, list[_Indexed]] = {}
        for indexed in self.rules:
            if all(not present.isdisjoint(clause) for clause in indexed.required):
                for name in indexed.roots:
                    by_op.setdefault(name, []).append(indexed)
        return by_op

    @property
    def users(self) -> dict[int, set[str]]:
        """The names of the nodes of the graph (as the sweep began) reading each value."""
        if self._users is None:
            users: dict[int, set[str]] = {}
            for node in self.graph.nodes:
                for v in node.inputs:
                    if v is not None:
                        users.setdefault(id(v), set()).add(node.name)
            self._users = users
        return self._users

    @property
    def scope(self) -> NameScope:
        if self._scope is None:
            self._scope = self.graph.name_scope()
        return self._scope

    def _shared_scope(self) -> NameScope:
        return self.scope

    def run(self) -> None:
        matcher = _Matcher(self.producers, self.constants)
        for node in self.graph.nodes:
            if self.mapping:
                node = substitute_node(node, self.mapping)
            if not self._rewrite(node, matcher):
                self._emit(node)

    def _emit(self, node: Node) -> None:
        self.nodes.append(node)
        for v in node.outputs:
            self.producers[id(v)] = node

    def _rewrite(self, node: Node, matcher: _Matcher) -> bool:
        rules = self.by_op.get(node.op)
        if not rules:
            return False
        candidates, flat_bits = self._candidates(node, rules)
        if not candidates:
            return False
        known = 0
        if flat_bits:  # what the flat rules declined here before (see _Declined)
            entry = self.declined.get(id(node))
            if entry is not None and entry[0] is node:
                known = entry[1]
                if flat_bits & known == flat_bits and len(candidates) == flat_bits.bit_count():
                    return False  # every rule that may fit declined here before
        for v in node.outputs:  # the root is matched like any producer
            self.producers[id(v)] = node
        refused = self._apply(node, candidates, matcher, known)
        if refused < 0:
            return True
        for v in node.outputs:
            del self.producers[id(v)]
        declined = known | (flat_bits & ~refused)
        if declined != known:  # remember it (_Declined), and which inputs were no constants
            self.declined[id(node)] = (node, declined)
            constants, variables = self.constants, self._variables
            for v in node.inputs:
                if id(v) not in constants:
                    variables[id(v)] = v  # (an omitted input: None, which no value is)
        return False

    def _candidates(self, node: Node, rules: list[_Indexed]) -> tuple[list[_Indexed], int]:
        """``rules`` (those rooted at ``node``'s operator) less those whose root inputs
        cannot fit ``node``'s (:meth:`_Indexed.may_fit`), and the bits of the flat rules
        among them (_Declined)."""
        producers = self.producers
        in_ops = []
        for v in node.inputs:
            made = None if v is None else producers.get(id(v))
            in_ops.append(made.op if made is not None and made.outputs[0] is v else None)
        key = (node.op, tuple(in_ops))
        fitting = self._fitting.get(key)
        if fitting is None:
            commutative = COMMUTATIVE in node.opdef.traits
            rules = [r for r in rules if r.may_fit(key[1], commutative)]
            bits = 0
            for r in rules:
                bits |= r.bit
            fitting = self._fitting[key] = (rules, bits)
        return fitting

    def _apply(
        self, node: Node, rules: Sequence[_Indexed], matcher: _Matcher, known: int = 0
    ) -> int:
        """Apply the first of ``rules`` that fits ``node``: -1 when one did, else the bits
        of the rules whose replacement the driver refused (:meth:`_accept`). Rules whose bit
        is in ``known`` declined at this node before and are not matched again."""
        root = node.outputs[0]
        builder: Builder | None = None
        refused = 0
        for indexed in rules:
            if indexed.bit & known:
                continue
            rule = indexed.rule
            if indexed.prefilter and not matcher.may_match(rule.pattern, root, _PREFILTER_DEPTH):
                continue
            for match in matcher.matches(rule.pattern, node):
                if rule.exclusive and not self._exclusive(match):
                    continue
                if builder is None or builder.node_count or builder.constants or builder.inputs:
                    # (a rule that declined without adding anything leaves its builder as new)
                    builder = Builder(self._shared_scope, node.source)
                try:
                    result = rule.build(match, builder, self.options)
                except (OpArgumentError, OpTypeError):
                    continue  # the replacement does not type-check: the rule does not apply
                if result is not None:
                    if self._accept(node, result, builder):
                        return -1
                    refused |= indexed.bit
        return refused

    def _accept(self, node: Node, result: Value | Sequence[Value], builder: Builder) -> bool:
        """Check a replacement and commit it; False leaves the node as it was."""
        replacements = [result] if isinstance(result, Value) else list(result)
        if len(replacements) > len(node.outputs) or not all(
            _same_type(old, new) for old, new in zip(node.outputs, replacements)
        ):
            return False
        if any(
            id(v) in self.users or id(v) in self.outputs for v in node.outputs[len(replacements) :]
        ):
            return False  # an output the rule does not replace is still used
        if (
            node.op == "Identity"
            and replacements[0] is node.inputs[0]
            and self._kept_by_name(node.outputs[0], replacements[0])
        ):
            return False  # an output's Identity that only exists to carry the output's name
        for c in builder.constants:
            self.constants[id(c.value)] = c.data
            self.new_constants.append(c)
        for made in builder.nodes:
            self._emit(made)
            self.stale.update(id(v) for v in (*made.inputs, *made.outputs) if v is not None)
            if made.op not in self.present:  # rules that needed it may match from now on
                self.present.add(made.op)
                self.by_op = self._by_op()
                self._fitting = {}
        for old, new in zip(node.outputs, replacements):
            self.mapping[id(old)] = new
            self.stale.add(id(new))
        self.count += 1
        return True

    def _exclusive(self, match: Match) -> bool:
        inside = {n.name for n in match.interior}
        for node in match.interior:
            if node is match.root:
                continue
            for v in node.outputs:
                if id(v) in self.outputs or id(v) in self.stale:
                    return False
                if not self.users.get(id(v), set()) <= inside:
                    return False
        return True

    def _kept_by_name(self, output: Value, replacement: Value) -> bool:
        """True when ``output`` is a graph output that ``replacement`` cannot be renamed to
        (it is an input, a constant or another output), so removing the Identity would only
        bring it back."""
        if id(output) not in self.outputs:
            return False
        return id(replacement) not in self.producers or id(replacement) in self.outputs

    def finish(self) -> ModelGraph:
        """The rewritten graph, with every output under its original name."""
        nodes = self.nodes
        outputs: list[Value] = []
        renames: dict[int, Value] = {}
        claimed: set[int] = set()
        extra: list[Node] = []
        for old in self.graph.output_values:
            new = self.mapping.get(id(old), old)
            if new is old:
                outputs.append(old)
                claimed.add(id(old))
                continue
            renamable = (
                id(new) in self.producers
                and id(new) not in self.outputs
                and id(new) not in claimed
                and id(new) not in renames
            )
            if renamable:
                renamed = Value(old.name, new.type)
                renames[id(new)] = renamed
                outputs.append(renamed)
            else:
                carrier = Value(old.name, old.type)
                copy = GraphBuilder(self.scope)
                copy.add("Identity", [new], outputs=[carrier], name=old.name)
                extra.extend(copy.nodes)
                outputs.append(carrier)
            claimed.add(id(new))
        if renames:
            # Every user of a renamed value reads the new name, the carriers of other outputs
            # included (two outputs replaced by one value: one renames it, one copies it).
            extra = [substitute_node(node, renames) for node in extra]
            taken = {n.name for n in nodes}
            rebuilt = []
            for node in nodes:
                node = substitute_node(node, renames)
                if any(id(v) in renames for v in node.outputs):
                    outs = tuple(renames.get(id(v), v) for v in node.outputs)
                    # The node takes its output's name too when that is free (it usually is:
                    # the replaced node that had it is gone), as the tracer names nodes.
                    name = node.name
                    if outs[0].name not in taken:
                        taken.discard(name)
                        name = outs[0].name
                        taken.add(name)
                    node = Node(node.op, node.inputs, outs, node.attrs, name, node.source)
                rebuilt.append(node)
            nodes = rebuilt
        constants = [*self.graph.constants, *self.new_constants]
        defined = [*self.graph.input_values, *(c.value for c in constants)]
        body = topological_order([*nodes, *extra], defined)
        return self.graph.with_body(body, outputs=outputs, constants=constants)


def _names_agree(pattern: Pattern) -> bool:
    """True when every name ``pattern`` binds more than once stands for one and the same
    sub-pattern wherever it appears, or for plain leaves (:func:`var`). The matcher checks
    a name's pattern only where it binds first, and then only that the value is the same;
    when names agree, what :func:`_required_ops` and :meth:`_Matcher.may_match` read from
    every place holds for every match."""
    seen: dict[str, Pattern] = {}

    def plain(p: Pattern) -> bool:
        return not (p.ops or p.alternatives or p.is_constant)

    def visit(p: Pattern) -> bool:
        if p.name is not None:
            first = seen.setdefault(p.name, p)
            if first is not p and not (plain(p) and plain(first)):
                return False
        return all(visit(q) for q in (*p.inputs, *p.alternatives))

    return visit(pattern)


def _repeated(pattern: Pattern) -> frozenset[str]:
    """The names ``pattern`` binds at more than one place."""
    seen: set[str] = set()
    repeated: set[str] = set()

    def visit(p: Pattern) -> None:
        if p.name is not None:
            (repeated if p.name in seen else seen).add(p.name)
        for q in (*p.inputs, *p.alternatives):
            visit(q)

    visit(pattern)
    return frozenset(repeated)


def _required_ops(
    pattern: Pattern, skipped: frozenset[str] = frozenset()
) -> frozenset[frozenset[str]]:
    """What every match of ``pattern`` contains: for each set returned, a node whose operator
    is one of that set. A rule one of whose sets a graph has no operator of cannot apply to it.
    Sub-patterns named in ``skipped`` are read as any value (the matcher may not look at
    their structure: see :func:`_names_agree`).

    Example:
        >>> sorted(sorted(c) for c in _required_ops(op("Neg", op("Exp", var()))))
        [['Exp'], ['Neg']]
        >>> named = op("Neg", op("Exp", var(), name="e"))
        >>> sorted(sorted(c) for c in _required_ops(named, frozenset({"e"})))
        [['Neg']]
    """
    if pattern.name is not None and pattern.name in skipped:
        return frozenset()
    if pattern.alternatives:
        each = [_required_ops(a, skipped) for a in pattern.alternatives]
        common = frozenset.intersection(*each)
        if all(a.ops for a in pattern.alternatives):  # one of the roots, whichever matches
            common |= {frozenset(name for a in pattern.alternatives for name in a.ops)}
        return common
    if not pattern.ops:
        return frozenset()
    clauses = {frozenset(pattern.ops)}
    for p in pattern.inputs:
        clauses |= _required_ops(p, skipped)
    return frozenset(clauses)


def _root_ops(pattern: Pattern) -> tuple[str, ...]:
    if pattern.alternatives:
        return tuple(name for alt in pattern.alternatives for name in _root_ops(alt))
    if not pattern.ops:
        raise ValueError("a rule's pattern must have an operator at its root")
    return pattern.ops


def rewrite_with_rules(
    graph: ModelGraph, rules: Sequence[Rule], options: DefaultsOptions
) -> tuple[ModelGraph, int]:
    """Apply ``rules`` until none matches; return the graph and how many rewrites were made.

    Each sweep visits the nodes in order; the first rule whose pattern matches a node and whose
    builder accepts replaces the node's outputs. Nodes left unused are removed at the end.
    Raises :class:`RewriteLoopError` if the graph still changes after ``MAX_SWEEPS`` sweeps.

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(lambda x: -(-x) * 2, np.ones(3, np.float32)).graph
        >>> rules = [Rule(op("Neg", op("Neg", var("x"))), keep("x"))]
        >>> g, n = rewrite_with_rules(g, rules, DefaultsOptions())
        >>> n, [node.op for node in g.nodes]
        (1, ['Mul'])
    """
    total = 0
    indexed = _index(rules)
    declined = _declined_for(rules, options)
    for _ in range(MAX_SWEEPS):
        sweep = _Sweep(graph, indexed, options, declined)
        if not sweep.by_op:  # no rule can match an operator of the graph
            return graph, total
        sweep.run()
        if not sweep.count:
            return graph, total
        total += sweep.count
        graph, _ = prune(sweep.finish())
    names = ", ".join(sorted({r.name or "?" for r in rules}))
    raise RewriteLoopError(
        f"rewrite rules ({names}) still changed graph {graph.name!r} after {MAX_SWEEPS} sweeps; "
        "two rules probably undo each other"
    )
