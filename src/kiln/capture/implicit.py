"""Implicit inputs: the arrays a compiled function reads without receiving them.

A function may read NumPy arrays (or kiln tensors) from its closure cells, from module globals
it names, from attributes of ``self`` or of other objects it reaches (a static argument, an
object in a global). Baking their values into a graph would be silent: ``w = w - lr * g``
after a call, or ``u -= 0.5`` in place, would not be seen. So a capture finds them first
(:func:`discover`: where each one lives and how to read it again), lets the target see a
stand-in while it records (:meth:`ImplicitSlots.substituted`: an ndarray is replaced by a
kiln tensor over the same memory, so NumPy code on it, ``u * 2`` included, is recorded), and
the tracer makes each stand-in a graph input the first time an operator uses it
(:meth:`kiln.capture.trace.Tracer.lift_implicit`). The replay reads the used ones afresh at
every call through precomputed getters (:class:`ImplicitReads`), guarded on dtype and shape:
a change of those is an :class:`ImplicitMiss`, which re-captures.

What is searched: the target's closure cells and the globals its code names (nested code
included), the same for Python functions reached that way (user code, not libraries), and
the attributes of ``self`` (a bound method), of static arguments and of objects found in
cells and globals, two levels deep. Arrays inside lists or dicts are not searched.

``kiln.trace`` does none of this: a traced graph is a snapshot for export, and what the
function reaches becomes a constant.
"""

from __future__ import annotations

import functools
import itertools
import operator
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tensor import Tensor
from .randomness import RecordingGenerator, is_generator, legacy_function, module_function
from .replay import ReplayMiss

__all__ = ["ImplicitSlot", "ImplicitSlots", "ImplicitReads", "ImplicitMiss", "discover"]

_MAX_DEPTH = 2  # attribute levels searched below an object, and function levels below target
_MAX_SLOTS = 256  # implicit arrays a capture offers at most
_MAX_ITEMS = 64  # items of a list or dict searched (a longer one is data, not state)
# What reading a place that changed shape raises: a deleted attribute or key, an empty cell,
# a list grown shorter, a container replaced by something else.
_GONE = (AttributeError, KeyError, ValueError, IndexError, TypeError)
# Functions from these packages are not searched: their globals are not the user's state.
_LIBRARIES = frozenset({"numpy", "kiln", "scipy", "jax", "jaxlib", "torch", "optree", "onnx"})
# One capture with stand-ins at a time: two concurrent captures must not save each other's
# stand-in as the original.
_SUBSTITUTION_LOCK = threading.RLock()


@dataclass(frozen=True, eq=False)
class ImplicitSlot:
    """One place holding an array the target reads: its name for messages and graph inputs
    (``closure.w``, ``global.W``, ``self.layer.b``), how to read it, how to set it (for the
    stand-in during the capture) and what it held when found."""

    name: str
    read: Callable[[], Any]
    write: Callable[[Any], None]
    original: Any
    where: tuple[int, str]  # the place: (id of the cell / namespace / object, name)
    random: str | None = None  # "generator", or the legacy np.random function's name


class ImplicitMiss(ReplayMiss):
    """An implicit input no longer fits the capture: rebound to another dtype or shape, or to
    something that is not an array."""

    def __init__(self, name: str, old: str, new: str) -> None:
        super().__init__(f"implicit input {name!r} changed from {old} to {new}")
        self.name = name
        self.old = old
        self.new = new


def _describe(value: Any) -> str:
    if isinstance(value, (np.ndarray, Tensor)):
        return f"{value.dtype}{list(value.shape)}"
    return f"a {type(value).__name__}"


class ImplicitReads:
    """The replay's getters of the implicit inputs a graph takes, in graph-input order, with
    the dtype and shape each must have, and whether it is a random draw (``draws``: some
    are, and reading them advances a random stream, so a replay checks the call's own
    arrays first, against :meth:`prototypes`)."""

    __slots__ = ("_reads", "draws")
    gone = _GONE  # what a getter raises when its place no longer holds anything

    def __init__(
        self,
        reads: Sequence[tuple[str, Callable[[], Any], np.dtype, tuple[int, ...]]],
        draws: bool = False,
    ):
        self._reads = tuple(reads)
        self.draws = draws

    def __len__(self) -> int:
        return len(self._reads)

    @property
    def getters(self) -> tuple[tuple[Callable[[], Any], np.dtype, tuple[int, ...]], ...]:
        """Each implicit input's getter, dtype and shape, in graph-input order (what
        :meth:`fetch` runs and checks; a replay's quick path inlines them)."""
        return tuple((read, dtype, shape) for _, read, dtype, shape in self._reads)

    def fetch(self) -> list[np.ndarray]:
        """Each implicit input's array as it is now.

        Raises:
            ImplicitMiss: One is missing or has another dtype or shape than at the capture.
        """
        arrays = []
        for name, read, dtype, shape in self._reads:
            try:
                value = read()
            except _GONE:  # deleted, an empty cell, a shorter list
                raise ImplicitMiss(name, f"{dtype}{list(shape)}", "nothing (deleted)") from None
            cls = type(value)
            if cls is Tensor:
                value = value._data
            elif cls is not np.ndarray:
                raise ImplicitMiss(name, f"{dtype}{list(shape)}", _describe(value))
            if value.dtype != dtype or value.shape != shape:
                raise ImplicitMiss(name, f"{dtype}{list(shape)}", _describe(value))
            arrays.append(value)
        return arrays

    def prototypes(self) -> list[np.ndarray]:
        """An array of each implicit input's dtype and shape (a broadcast zero: no memory),
        read from nothing and drawing nothing: what an input check sees in their place."""
        return [np.broadcast_to(np.zeros((), dtype), shape) for _, _, dtype, shape in self._reads]

    def wrap(self, run: Callable[[list[np.ndarray]], list[np.ndarray]]) -> Any:
        """``run`` taking the call's arrays followed by the implicit inputs read now."""
        fetch = self.fetch

        def run_with_implicit(arrays: list[np.ndarray]) -> list[np.ndarray]:
            return run([*arrays, *fetch()])

        return run_with_implicit


class ImplicitSlots:
    """The implicit arrays found for one capture (see :func:`discover`)."""

    def __init__(self, slots: Sequence[ImplicitSlot]) -> None:
        self.slots = tuple(slots)
        self.rebound: list[str] = []  # slots the target itself rebound during the capture

    @contextmanager
    def substituted(self, lift: Callable[[Tensor, ImplicitSlot], None]) -> Iterator[None]:
        """While the block runs, each slot holding an ndarray holds a kiln tensor over the
        same memory (a kiln tensor stays itself); ``lift`` registers each with the tracer. A
        slot holding a random generator or a legacy ``np.random`` function holds a recording
        stand-in (:mod:`kiln.capture.randomness`) whose draws the running capture records.
        Afterwards the originals are back; a slot the target rebound keeps the target's new
        value (an array as a NumPy array) and is listed in ``rebound``."""
        if not self.slots:
            yield
            return
        entries: list[_Entry] = []
        with _SUBSTITUTION_LOCK:  # held while stand-ins go in and out, not while the target runs
            for slot in self.slots:
                entry = _entry(slot)
                if entry is None:
                    continue
                entries.append(entry)
                if isinstance(entry.standin, Tensor):
                    lift(entry.standin, slot)
        try:
            yield
        finally:
            with _SUBSTITUTION_LOCK:
                for entry in entries:
                    self._release(entry)

    def _release(self, entry: _Entry) -> None:
        """One capture is done with ``entry``; the last puts the original back (or, when the
        target rebound the place, keeps the target's value, as a NumPy array)."""
        entry.users -= 1
        if entry.users:
            return
        del _PLACES[entry.slot.where]
        slot = entry.slot
        try:
            now = slot.read()
        except _GONE:
            now = entry.standin
        if now is entry.standin:
            if entry.standin is not entry.original:
                try:
                    slot.write(entry.original)
                except _GONE:  # (a list the target shortened)
                    pass
            return
        self.rebound.append(slot.name)
        if (
            slot.random is None
            and isinstance(now, Tensor)
            and not isinstance(entry.original, Tensor)
        ):
            data = now._data
            if data is not None:
                slot.write(np.array(data))


@dataclass(eq=False)
class _Entry:
    """A place holding a stand-in: the first slot that put it there, what it held, and how
    many captures running now use it."""

    slot: ImplicitSlot
    original: Any
    standin: Any
    users: int = 1


# Places holding a stand-in now, by (id of the cell / namespace / object, name): concurrent
# captures of functions reading one place share its stand-in; the last one restores it.
_PLACES: dict[tuple[int, str], _Entry] = {}


def _entry(slot: ImplicitSlot) -> _Entry | None:
    """The stand-in entry of ``slot``'s place, put there now or shared with a running capture
    (None when the place cannot be set)."""
    entry = _PLACES.get(slot.where)
    if entry is not None:
        entry.users += 1
        return entry
    original = slot.original
    standin: Any
    if slot.random == "generator":
        standin = RecordingGenerator(original, slot.name)
    elif slot.random is not None:
        standin = module_function(slot.random, original)
    elif isinstance(original, Tensor):
        standin = original  # a kiln tensor stands for itself
    else:
        standin = Tensor._wrap(original)
    if standin is not original:
        try:
            slot.write(standin)
        except (AttributeError, TypeError, IndexError):  # read-only, slots, frozen
            return None
    entry = _PLACES[slot.where] = _Entry(slot, original, standin)
    return entry


def discover(target: Callable[..., Any], static_leaves: Sequence[Any]) -> ImplicitSlots:
    """The arrays ``target`` can read without receiving them (see the module docstring)."""
    finder = _Finder()
    fn: Any = target
    if isinstance(fn, types.MethodType):
        finder.object(fn.__self__, "self", 0, _constant(fn.__self__), "")
        fn = fn.__func__
    if isinstance(fn, functools.partial):
        for i, arg in enumerate(fn.args):
            finder.value(arg, f"partial.{i}", None, 0)
        fn = fn.func
    if isinstance(fn, types.FunctionType):
        finder.function(fn, 0)
    elif _is_object(fn):  # a callable object: its attributes and its __call__'s code
        finder.object(fn, "self", 0, _constant(fn), "")
        call = getattr(type(fn), "__call__", None)  # noqa: B004 (its code, not whether it is)
        if isinstance(call, types.FunctionType):
            finder.function(call, 0)
    for i, leaf in enumerate(static_leaves):
        if _is_object(leaf):
            finder.object(leaf, "self" if i == 0 else f"arg{i}", 0, _constant(leaf), "")
    return ImplicitSlots(finder.slots)


def _is_object(x: Any) -> bool:
    """A user object whose attributes may hold arrays."""
    return (
        hasattr(x, "__dict__")
        and not isinstance(
            x, (type, types.ModuleType, types.FunctionType, types.MethodType, Tensor, np.ndarray)
        )
        and not callable(getattr(x, "__array__", None))
        and (type(x).__module__ or "").split(".")[0] not in _LIBRARIES
    )


class _Finder:
    def __init__(self) -> None:
        self.slots: list[ImplicitSlot] = []
        self._seen_arrays: set[tuple[int, str]] = set()
        self._seen: set[int] = set()

    def add(
        self,
        name: str,
        value: Any,
        read: Callable[[], Any],
        write: Any,
        where: tuple[int, str],
    ) -> None:
        if len(self.slots) >= _MAX_SLOTS:
            return
        if isinstance(value, np.ndarray):
            if type(value) is not np.ndarray or not value.dtype.isnative:
                return  # np.matrix, masked and big-endian arrays stay as they are
        random = "generator" if is_generator(value) else legacy_function(value)
        key = (id(value), name)
        if key in self._seen_arrays:
            return
        self._seen_arrays.add(key)
        self.slots.append(ImplicitSlot(name, read, write, value, where, random))

    def value(self, value: Any, name: str, place: Any, depth: int) -> None:
        """A value found at ``place`` (read, write, where), or None when it cannot be set."""
        if isinstance(value, (np.ndarray, Tensor)):
            if place is not None:
                self.add(name, value, *place)
        elif is_generator(value) or legacy_function(value) is not None:
            if place is not None:
                self.add(name, value, *place)
        elif isinstance(value, types.FunctionType):
            self.function(value, depth + 1)
        elif isinstance(value, types.MethodType):
            holder = value.__self__
            self.object(holder, name, depth + 1, _constant(holder), "")
        elif isinstance(value, functools.partial):
            self.value(value.func, name, None, depth)
            for i, arg in enumerate(value.args):
                self.value(arg, f"{name}.{i}", None, depth + 1)
        elif type(value) in (list, dict, tuple) and place is not None:
            self.items(value, name, place[0], place[1], depth)
        elif _is_object(value) and place is not None:
            self.object(value, name, depth + 1, place[0], "")

    def items(
        self,
        container: list[Any] | dict[Any, Any] | tuple[Any, ...],
        name: str,
        root: Callable[[], Any],
        put: Callable[[Any], None],
        depth: int,
    ) -> None:
        """The arrays held directly in a list, dict or tuple (``params[0]``,
        ``weights["w1"]``), read as ``root()[key]`` (a rebound container is seen): one level,
        the first ``_MAX_ITEMS`` items. A list or dict item holds its stand-in itself; a
        tuple's is put in a copy of the tuple, which ``put`` stores where the tuple was."""
        if depth > _MAX_DEPTH or id(container) in self._seen:
            return
        self._seen.add(id(container))
        keyed = container.items() if type(container) is dict else enumerate(container)
        for key, value in itertools.islice(keyed, _MAX_ITEMS):
            if isinstance(value, (np.ndarray, Tensor)) or is_generator(value):
                read = _chained(root, operator.itemgetter(key))
                if type(container) is tuple:
                    write: Callable[[Any], None] = functools.partial(_tuple_put, root, put, key)
                else:
                    write = functools.partial(container.__setitem__, key)
                self.add(f"{name}[{key!r}]", value, read, write, (id(container), f"[{key!r}]"))

    def function(self, fn: types.FunctionType, depth: int) -> None:
        if depth > _MAX_DEPTH or id(fn) in self._seen:
            return
        module = (getattr(fn, "__module__", None) or "").split(".")[0]
        if depth > 0 and module in _LIBRARIES:
            return
        self._seen.add(id(fn))
        code = fn.__code__
        for var, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            read = functools.partial(getattr, cell, "cell_contents")
            write = functools.partial(setattr, cell, "cell_contents")
            self.value(value, var, (read, write, (id(cell), "")), depth)
        namespace = fn.__globals__
        for var in _names(code):
            if var in namespace:
                read = functools.partial(namespace.__getitem__, var)
                write = functools.partial(namespace.__setitem__, var)
                self.value(namespace[var], var, (read, write, (id(namespace), var)), depth)

    def object(self, obj: Any, name: str, depth: int, root: Callable[[], Any], chain: str) -> None:
        """The attributes of ``obj``, which is ``root()`` followed by the attribute ``chain``:
        a replay reads them through the chain, so replacing an object on the way is seen."""
        if depth > _MAX_DEPTH or id(obj) in self._seen:
            return
        self._seen.add(id(obj))
        try:
            attributes = list(vars(obj).items())
        except TypeError:
            return
        for attr, value in attributes:
            if not isinstance(attr, str) or attr.startswith("__"):
                continue
            path = f"{chain}.{attr}" if chain else attr
            read = _chained(root, operator.attrgetter(path))
            write = functools.partial(setattr, obj, attr)
            if isinstance(value, (np.ndarray, Tensor)) or is_generator(value):
                self.add(f"{name}.{attr}", value, read, write, (id(obj), attr))
            elif _is_object(value):
                self.object(value, f"{name}.{attr}", depth + 1, root, path)
            elif type(value) in (list, dict, tuple):
                self.items(value, f"{name}.{attr}", read, write, depth + 1)
            elif isinstance(value, (types.FunctionType, types.MethodType, functools.partial)):
                self.value(value, f"{name}.{attr}", None, depth)  # (self.fn's closure)


def _tuple_put(root: Callable[[], Any], put: Callable[[Any], None], i: int, value: Any) -> None:
    """Store, where the tuple ``root()`` is, a copy of it with item ``i`` set to ``value``."""
    held = root()
    if type(held) is not tuple or i >= len(held):
        raise TypeError("the tuple was replaced")  # (read as gone: _GONE)
    put((*held[:i], value, *held[i + 1 :]))


def _constant(x: Any) -> Callable[[], Any]:
    return functools.partial(_identity, x)


def _identity(x: Any) -> Any:
    return x


def _chained(root: Callable[[], Any], get: Callable[[Any], Any]) -> Callable[[], Any]:
    def read() -> Any:
        return get(root())

    return read


def _names(code: types.CodeType) -> list[str]:
    """The global names ``code`` and the code nested in it (comprehensions, lambdas) use."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_names(const))
    return list(dict.fromkeys(names))
