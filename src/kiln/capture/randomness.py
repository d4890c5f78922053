"""Random draws in a compiled function: drawn afresh at each call, from eager NumPy's stream.

While ``kiln.compile`` records a call, the legacy ``np.random`` functions (``rand``, ``randn``,
``normal``, ``uniform``, ``randint``, ...) and every NumPy ``Generator`` or ``RandomState`` the
function receives or reaches (an argument, a closure, a global, an attribute of ``self``) are
replaced by recording stand-ins. A draw whose arguments are static (sizes, bounds and scales
given as Python values) still draws from the real stream, so the capture call returns what
eager NumPy would, and becomes a graph input that the replay fills by making the same draw,
from the same generator, before the graph runs: every replay advances the stream exactly as an
eager call would, in the same order, and gets the same values. A draw the replay cannot repeat
faithfully (tensor-valued parameters, ``shuffle``/``permutation``, ``seed``, a generator made
inside the function) makes that structure serve eagerly, with a warning (an error under
``fullgraph=True``). Nothing random is baked into a graph.

``kiln.trace`` does not do this: a traced graph is a snapshot, and a draw made while tracing is
a constant of it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..ops.dispatch import current_handler
from ..tensor import Tensor

__all__ = ["DRAWS", "RecordingGenerator", "is_generator", "recording_draws", "Draws"]

# Methods that draw from a stream with their arguments as the distribution's parameters; a
# replay repeats them with the same (static) arguments.
DRAWS = frozenset(
    {
        "rand", "randn", "random", "random_sample", "ranf", "sample", "uniform", "normal",
        "standard_normal", "randint", "integers", "random_integers", "exponential",
        "standard_exponential", "poisson", "binomial", "beta", "gamma", "standard_gamma",
        "laplace", "logistic", "lognormal", "standard_t", "gumbel", "rayleigh", "weibull",
        "triangular", "geometric", "choice", "chisquare", "standard_cauchy", "pareto",
        "multinomial", "dirichlet", "multivariate_normal", "bytes",
    }
)  # fmt: skip
# What changes a stream other than a draw, or draws in a way a replay cannot repeat.
_NOT_REPEATABLE = frozenset(
    {
        "seed", "set_state", "shuffle", "permutation", "permuted", "default_rng",
        "RandomState", "Generator", "spawn", "jumped", "set_bit_generator",
    }
)  # fmt: skip

_PATCH_LOCK = threading.Lock()  # guards patching np.random and the active captures


def is_generator(x: Any) -> bool:
    """A NumPy ``Generator`` or legacy ``RandomState``."""
    return isinstance(x, (np.random.Generator, np.random.RandomState))


class Draws:
    """What a capture needs from its tracer to record draws: ``add`` makes a drawn array a
    graph input at once (``read`` repeats the draw at a replay), ``abandon`` says why the
    structure must serve eagerly. ``tracer`` is the handler the draws of this capture see."""

    def __init__(
        self,
        tracer: Any,
        add: Callable[[Tensor, Callable[[], Any], str], None],
        abandon: Callable[[str], None],
    ) -> None:
        self.tracer = tracer
        self.add = add
        self.abandon = abandon
        self.count = 0

    def draw(
        self, owner: str, name: str, method: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        """``method(*args, **kwargs)`` drawn now and recorded (or, when it cannot be repeated,
        drawn now and the capture abandoned)."""
        if not all(_is_static(a) for a in (*args, *kwargs.values())):
            self.abandon(f"{owner}.{name}() with array or tensor arguments")
            return method(*_plain(args), **_plain_kwargs(kwargs))
        value = np.asarray(method(*args, **kwargs))
        read = functools.partial(_redraw, method, args, kwargs)
        t = Tensor._wrap(value)
        self.count += 1
        self.add(t, read, f"random.{name}")
        return t


def _redraw(method: Callable[..., Any], args: Any, kwargs: Any) -> np.ndarray:
    return np.asarray(method(*args, **kwargs))


def _is_static(x: Any) -> bool:
    if x is None or isinstance(x, (bool, int, float, complex, str, np.generic, np.dtype, type)):
        return True
    if isinstance(x, (tuple, list)):
        return all(_is_static(v) for v in x)
    return False


def _plain(args: Any) -> tuple[Any, ...]:
    return tuple(np.asarray(a) if isinstance(a, Tensor) else a for a in args)


def _plain_kwargs(kwargs: Any) -> dict[str, Any]:
    return {k: np.asarray(v) if isinstance(v, Tensor) else v for k, v in kwargs.items()}


def _active_draws() -> Draws | None:
    """The draws of the capture running in this context, if any."""
    handler = current_handler()
    return None if handler is None else _ACTIVE.get(id(handler))


class RecordingGenerator:
    """A stand-in for a ``Generator``/``RandomState`` while captures record: a draw made under
    a capture is recorded by that capture (see :class:`Draws`); everything else reaches the
    real generator. Concurrent captures may share one stand-in."""

    def __init__(self, generator: Any, name: str) -> None:
        self._generator = generator
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        real = getattr(self._generator, attr)
        draws = _active_draws()
        if draws is None or not callable(real):
            return real
        if attr in DRAWS:

            def draw(*args: Any, **kwargs: Any) -> Any:
                return draws.draw(self._name, attr, real, args, kwargs)

            return draw
        if attr in _NOT_REPEATABLE:

            def not_repeatable(*args: Any, **kwargs: Any) -> Any:
                draws.abandon(f"{self._name}.{attr}()")
                return real(*_plain(args), **_plain_kwargs(kwargs))

            return not_repeatable
        return real


# Captures recording now: id(tracer) -> its draws; np.random is patched while any is.
_ACTIVE: dict[int, Draws] = {}
_SAVED: dict[str, Any] = {}


@contextmanager
def recording_draws(draws: Draws) -> Iterator[None]:
    """While the block runs, the legacy ``np.random`` functions record draws made under
    ``draws.tracer`` (other threads and eager code get the real functions). The module is
    patched while any capture records; no lock is held while the target runs."""
    module = np.random
    with _PATCH_LOCK:
        if not _ACTIVE:
            for attr in DRAWS | _NOT_REPEATABLE:
                real = module.__dict__.get(attr)
                if real is None or isinstance(real, type):
                    continue
                _SAVED[attr] = real
                setattr(module, attr, _module_function(attr, real))
        _ACTIVE[id(draws.tracer)] = draws
    try:
        yield
    finally:
        with _PATCH_LOCK:
            del _ACTIVE[id(draws.tracer)]
            if not _ACTIVE:
                for attr, real in _SAVED.items():
                    setattr(module, attr, real)
                _SAVED.clear()


def _module_function(attr: str, real: Callable[..., Any]) -> Callable[..., Any]:
    repeatable = attr in DRAWS

    @functools.wraps(real)
    def recording(*args: Any, **kwargs: Any) -> Any:
        draws = _active_draws()
        if draws is None:
            return real(*args, **kwargs)
        if repeatable:
            return draws.draw("np.random", attr, real, args, kwargs)
        draws.abandon(f"np.random.{attr}()")
        return real(*_plain(args), **_plain_kwargs(kwargs))

    return recording


def legacy_function(x: Any) -> str | None:
    """The name of the legacy ``np.random`` function ``x`` is (``from numpy.random import
    rand`` binds it under the user's own name), else None."""
    self = getattr(x, "__self__", None)
    if self is None or self is not np.random.mtrand._rand:
        return None
    name = getattr(x, "__name__", None)
    return name if name in DRAWS or name in _NOT_REPEATABLE else None


def module_function(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    """The recording stand-in of the legacy function ``real`` (bound under a user's name)."""
    return _module_function(name, real)
