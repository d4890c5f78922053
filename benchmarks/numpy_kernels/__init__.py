"""A corpus of plain NumPy kernels of the kinds scientists write, for ``numpy_kernels.py``.

Each kernel is a :class:`Kernel`: a plain NumPy function (its docstring is the description),
an input maker ``make(rng, n) -> tuple of arguments`` and the main size ``n`` at benchmark
scale and at test scale. The modules of this package register their kernels with
:func:`kernel`; :data:`KERNELS` lists them in registration order.

Flags a runner honours:

* ``drift``: the kernel is shape-dependent; successive calls use growing sizes
  (:func:`call_size`), so a compiled function re-captures with dynamic axes;
* ``global_seed``: the kernel draws from NumPy's legacy global stream (``np.random.rand``...);
  the runner seeds it identically before the plain and the compiled call;
* ``inplace``: the kernel writes into arrays (preallocated ones, views, ``out=``, its inputs);
  ``mutates`` names the arguments NumPy leaves changed (:func:`mutated_arguments` checks the
  declaration against NumPy), which a compiled kernel must leave changed alike.

:func:`compare` checks a compiled result against NumPy's: structure, container and array
types, shape, dtype and values (exact for integers and booleans, a tight tolerance for floats).
:func:`check_calls` runs a kernel plain and compiled on separate, identical fresh inputs and
compares results and arguments after every call; :func:`mode` says whether a graph served.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Kernel",
    "KERNELS",
    "kernel",
    "call_size",
    "check_calls",
    "compare",
    "make_args",
    "expected_captures",
    "mode",
    "mutated_arguments",
]


@dataclass(frozen=True)
class Kernel:
    name: str
    kind: str
    fn: Callable[..., Any]
    make: Callable[[np.random.Generator, int], tuple[Any, ...]]
    bench: int
    tiny: int
    description: str
    drift: bool = False
    global_seed: bool = False
    inplace: bool = False
    mutates: tuple[str, ...] = ()


KERNELS: list[Kernel] = []


def kernel(
    kind: str,
    *,
    make: Callable[[np.random.Generator, int], tuple[Any, ...]],
    bench: int,
    tiny: int,
    drift: bool = False,
    global_seed: bool = False,
    inplace: bool = False,
    mutates: tuple[str, ...] = (),
    name: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated plain NumPy function (or bound method) as a kernel, named
    ``name`` or the function's name; returns it unchanged."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        doc = (fn.__doc__ or fn.__name__).strip().splitlines()[0]
        unknown = set(mutates) - set(inspect.signature(fn).parameters)
        if unknown:
            raise ValueError(f"kernel {fn.__name__}: mutates names no argument: {sorted(unknown)}")
        KERNELS.append(
            Kernel(
                name or fn.__name__,
                kind,
                fn,
                make,
                bench,
                tiny,
                doc,
                drift,
                global_seed,
                inplace or bool(mutates),
                tuple(mutates),
            )
        )
        return fn

    return register


def call_size(k: Kernel, n: int, call: int) -> int:
    """The main size of call ``call`` (0-based): fixed, or growing for drifting kernels."""
    return n + 3 * call if k.drift else n


def make_args(
    k: Kernel, n: int, call: int, streams: dict[int, np.random.Generator] | None = None
) -> tuple[Any, ...]:
    """Fresh arguments for call ``call``: new values every call (so baked values show).

    A ``np.random.Generator`` argument is the caller's long-lived stream, as in real code: with
    ``streams`` (one dict per side, kept across calls) argument ``i`` is ``streams[i]``, seeded
    alike on both sides, so a compiled function must draw afresh from it at every call.
    """
    args = k.make(np.random.default_rng(1000 + call), call_size(k, n, call))
    if streams is None:
        return args
    return tuple(
        streams.setdefault(i, np.random.default_rng(7)) if isinstance(a, np.random.Generator) else a
        for i, a in enumerate(args)
    )


# (rtol, atol relative to the largest magnitude expected) per dtype kind/size.
_TOL = {"float64": (1e-10, 1e-12), "complex128": (1e-10, 1e-12)}
_TOL32 = (2e-5, 1e-6)


def _tol(dtype: np.dtype) -> tuple[float, float]:
    return _TOL.get(dtype.name, _TOL32)


def compare(expected: Any, got: Any, where: str = "result") -> str | None:
    """None when ``got`` matches NumPy's ``expected``, else one line saying the first mismatch."""
    if isinstance(expected, (tuple, list)):
        if type(got) is not type(expected) or len(got) != len(expected):
            return f"{where}: {type(got).__name__} != NumPy's {type(expected).__name__}"
        for i, (e, g) in enumerate(zip(expected, got)):
            bad = compare(e, g, f"{where}[{i}]")
            if bad:
                return bad
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"{where}: keys differ from NumPy's"
        for key in expected:
            bad = compare(expected[key], got[key], f"{where}[{key!r}]")
            if bad:
                return bad
        return None
    if expected is None or isinstance(expected, (str, bool, int)):
        if type(got) is type(expected) and got == expected:
            return None
        return f"{where}: {got!r} != NumPy's {expected!r}"
    if isinstance(expected, np.ndarray):
        if type(got) is not np.ndarray:
            return f"{where}: returns {type(got).__module__}.{type(got).__name__}, not np.ndarray"
    elif not isinstance(got, (np.generic, np.ndarray, float, int, complex, bool)):
        return f"{where}: returns {type(got).__name__} where NumPy returns a scalar"
    e = np.asarray(expected)
    g = np.asarray(got)
    if g.shape != e.shape:
        return f"{where}: shape {g.shape} != NumPy's {e.shape}"
    if isinstance(expected, (np.ndarray, np.generic)) and g.dtype != e.dtype:
        return f"{where}: dtype {g.dtype} != NumPy's {e.dtype}"
    if e.dtype.kind in "biuUSO" or e.size == 0:
        if not np.array_equal(g, e):
            return f"{where}: values differ ({int(np.sum(g != e))} of {e.size})"
        return None
    rtol, atol = _tol(e.dtype)
    finite = np.abs(e[np.isfinite(e)])
    scale = float(finite.max()) if finite.size else 1.0
    ok = np.isclose(g, e, rtol=rtol, atol=atol * max(scale, 1.0), equal_nan=True)
    if not ok.all():
        err = float(np.nanmax(np.abs(g.astype(e.dtype) - e)))
        return f"{where}: values differ ({int((~ok).sum())} of {e.size}; max abs err {err:.3g})"
    return None


def check_calls(k: Kernel, compiled: Callable[..., Any], n: int, calls: int = 3) -> dict[str, Any]:
    """Call ``k.fn`` and ``compiled`` ``calls`` times, each side on its own copy of identical
    fresh inputs (the legacy global stream seeded alike before each), then once more on the
    same argument objects again (state carried from one call to the next, as a time loop
    does). After every call, every output and every array argument (mutated inputs) must
    match, and the previous call's outputs and arguments must still match (nothing a call
    returned or wrote back is overwritten by the next call). Returns ``problem`` (None or the
    first mismatch, or the exception the compiled call raised), ``error`` (that exception) and
    ``first_s`` (first call seconds) and ``ready_s`` (seconds from the first call's start until
    its graph is ready: later for a trace planned in the background).
    """
    out: dict[str, Any] = {"problem": None, "error": None, "first_s": None, "ready_s": None}
    plain_streams: dict[int, np.random.Generator] = {}
    kiln_streams: dict[int, np.random.Generator] = {}
    plain_args: tuple[Any, ...] = ()
    kiln_args: tuple[Any, ...] = ()
    previous: tuple[Any, Any, tuple, tuple] | None = None
    for call in range(calls + 1):
        if call < calls:
            plain_args = make_args(k, n, call, plain_streams)
            kiln_args = make_args(k, n, call, kiln_streams)
            label = f"call {call + 1}"
        else:
            label = f"call {call + 1} (the arguments of call {call} again)"
        if k.global_seed:
            np.random.seed(call)
        expected = k.fn(*plain_args)
        if k.global_seed:
            np.random.seed(call)
        start = time.perf_counter()
        try:
            got = compiled(*kiln_args)
        except Exception as exc:  # reported, the corpus goes on
            out["problem"] = f"{label} raises {type(exc).__name__}: {exc}"
            out["error"] = exc
            return out
        if call == 0:
            out["first_s"] = time.perf_counter() - start
            # A big trace is optimized and planned in the background: when the graph is ready.
            getattr(compiled, "current_graph", None)
            out["ready_s"] = time.perf_counter() - start
        bad = _compare_call(k, expected, got, plain_args, kiln_args, "")
        if bad is None and previous is not None and call < calls:
            bad = _compare_call(k, *previous, f" of call {call} after call {call + 1}")
        if bad is not None and out["problem"] is None:
            out["problem"] = f"{label}: {bad}"
        previous = (expected, got, plain_args, kiln_args)
    return out


def _compare_call(
    k: Kernel, expected: Any, got: Any, plain_args: tuple, kiln_args: tuple, when: str
) -> str | None:
    """The first mismatch of one call's result or array arguments, or None."""
    bad = compare(expected, got, f"result{when}")
    for i, (pa, ka) in enumerate(zip(plain_args, kiln_args)):
        if bad is None and isinstance(pa, np.ndarray):
            bad = compare(pa, ka, f"argument {_arg_name(k, i)}{when or ' after the call'}")
    return bad


def _arg_name(k: Kernel, i: int) -> str:
    names = list(inspect.signature(k.fn).parameters)
    return f"{i} ({names[i]})" if i < len(names) else str(i)


def mutated_arguments(k: Kernel, n: int) -> tuple[str, ...]:
    """The names of the arguments that plain NumPy leaves changed after one call (run plain
    only, against pristine copies), to check a kernel's ``mutates`` declaration."""
    args = make_args(k, n, 0, {})
    before = [a.copy() if isinstance(a, np.ndarray) else None for a in args]
    if k.global_seed:
        np.random.seed(0)
    k.fn(*args)
    names = list(inspect.signature(k.fn).parameters)
    return tuple(
        names[i]
        for i, (a, b) in enumerate(zip(args, before))
        if b is not None and not np.array_equal(a, b, equal_nan=True)
    )


def expected_captures(k: Kernel) -> int:
    """Captures a compiled kernel needs for :func:`check_calls`: one, two when sizes drift
    (the first drift re-captures with the axis dynamic); more means calls keep re-capturing."""
    return 2 if k.drift else 1


def mode(k: Kernel, compiled: Any, caught: list[Any], error: BaseException | None) -> str:
    """How :func:`check_calls` was served: ``error`` (the compiled call raised), ``fallback``
    (the function's state is Fallback, or a capture or re-capture warning among the ``caught``
    warnings said a structure serves eagerly), ``recaptures`` (more captures than
    :func:`expected_captures`: a value guard or a static value changes at every call), else
    the state's value (``compiled``)."""
    import kiln

    if error is not None:
        return "error"
    kinds = (kiln.errors.CaptureWarning, kiln.errors.RecaptureWarning)
    if compiled.state == kiln.State.Fallback or any(isinstance(w.message, kinds) for w in caught):
        return "fallback"
    if compiled.cache_info().captures > expected_captures(k):
        return "recaptures"
    return str(compiled.state.value)


from . import (  # noqa: E402, I001  (registration order = table order)
    expressions,
    normalize,
    distances,
    stencils,
    simulations,
    rows,
    complex_kernels,
    montecarlo,
    shapes,
    implicit,
    fills,
    updates,
    loops,
)

del expressions, normalize, distances, stencils, simulations, rows, complex_kernels
del montecarlo, shapes, implicit, fills, updates, loops
