"""The NumPy kernels corpus (benchmarks/numpy_kernels/), correctness half: each kernel through
``kiln.compile`` gives NumPy's answer on tiny inputs for three calls (fresh inputs each call,
growing sizes for the shape-dependent kernels) and a fourth on the same arguments again,
outputs and mutated inputs alike. Falling back is allowed there (the benchmark reports it);
the kernels that write into arrays must also compile: one graph (two for drifting sizes)
serves every call without running the Python body. Timing is not tested."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import kiln

_PACKAGE = Path(__file__).resolve().parents[1] / "benchmarks" / "numpy_kernels"


def _load_corpus():
    name = "numpy_kernels"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, _PACKAGE / "__init__.py", submodule_search_locations=[str(_PACKAGE)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


corpus = _load_corpus()

# Kernels that do not give NumPy's answer today, with the issue-11 item (or later issue) that
# covers the cause. strict=False: they pass as soon as that work lands.
_ISSUE12 = "needs in-place functionalization (issue 12)"
KNOWN_FAILURES: dict[str, str] = {}
# (dft_matrix, rotate_phasors and mandelbrot compile since complex capture, issue 11 item 8;
# power_spectrum's np.fft.rfft falls back.)


def _param(k):
    marks = ()
    if k.name in KNOWN_FAILURES:
        marks = (pytest.mark.xfail(strict=False, reason=KNOWN_FAILURES[k.name]),)
    return pytest.param(k, id=k.name, marks=marks)


def test_corpus_is_large_and_names_are_unique():
    names = [k.name for k in corpus.KERNELS]
    assert len(names) >= 30
    assert len(set(names)) == len(names)


def test_corpus_covers_the_inplace_kinds():
    """Issue 12: preallocate-and-fill, recurrences, scatters, stencil updates, time steps that
    mutate inputs, out=, masks; several kernels mutate their inputs."""
    inplace = [k for k in corpus.KERNELS if k.inplace]
    assert len(inplace) >= 20
    kinds = {k.kind for k in inplace}
    assert {"fill", "recurrence", "scatter", "stencil update", "time step", "out=", "mask"} <= kinds
    assert sum(bool(k.mutates) for k in inplace) >= 8


@pytest.mark.parametrize("k", [pytest.param(k, id=k.name) for k in corpus.KERNELS])
def test_mutates_declaration_matches_numpy(k):
    """A kernel's ``mutates`` names exactly the arguments plain NumPy changes (so that the
    corpus checks write-backs where they happen and the report names them)."""
    assert corpus.mutated_arguments(k, k.tiny) == k.mutates
    assert not k.mutates or k.inplace


@pytest.mark.parametrize("k", [_param(k) for k in corpus.KERNELS])
def test_compiled_kernel_matches_numpy(k):
    compiled = kiln.compile(k.fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # falling back is allowed; correctness is not optional
        result = corpus.check_calls(k, compiled, k.tiny, calls=3)
    assert result["problem"] is None, f"{k.name}: {result['problem']}"


# Issue 12: the kernels that write into arrays and do not compile yet (fall back, re-capture,
# or run the body on replay), with the cause. When the corpus grew (before the issue-12 work
# landed) every one of them raised, fell back or re-captured.
NOT_COMPILED: dict[str, str] = {}


def _inplace_param(k):
    marks = ()
    if k.name in NOT_COMPILED:
        marks = (pytest.mark.xfail(strict=False, reason=NOT_COMPILED[k.name]),)
    return pytest.param(k, id=k.name, marks=marks)


@pytest.mark.parametrize("k", [_inplace_param(k) for k in corpus.KERNELS if k.inplace])
def test_inplace_kernel_compiles(k):
    """Issue 12's goal for the kernels that write into arrays: correct (results and mutated
    inputs), no fallback, one capture (two for drifting sizes), and the Python body runs only
    to capture, never on replay."""
    body_calls = 0

    def body(*args):
        nonlocal body_calls
        body_calls += 1
        return k.fn(*args)

    compiled = kiln.compile(body)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = corpus.check_calls(k, compiled, k.tiny, calls=3)
    assert result["problem"] is None, f"{k.name}: {result['problem']}"
    reasons = [str(w.message) for w in caught]
    assert corpus.mode(k, compiled, caught, None) == "compiled", (k.name, reasons)
    captures = compiled.cache_info().captures
    assert captures == corpus.expected_captures(k)
    assert body_calls == captures, f"{k.name}: body ran {body_calls}x for {captures} captures"


def _heat_step(u):
    u[1:-1] += 0.5 * (u[2:] - 2 * u[1:-1] + u[:-2])


def _heat_copy(u):
    u = u.copy()
    _heat_step(u)
    return u


def test_check_calls_catches_a_lost_write_back_and_a_stale_replay():
    """The harness fails a compiled function that computes on a copy of its inputs (the
    caller's array is left unmutated) or that replays the first call's values."""
    k = corpus.Kernel(
        "heat_step", "stencil update", _heat_step, lambda rng, n: (rng.random(n),), 8, 5, "-"
    )

    def on_a_copy(u):
        return _heat_step(u.copy())

    problem = corpus.check_calls(k, on_a_copy, 5, calls=2)["problem"]
    assert problem is not None and "argument 0 (u) after the call" in problem

    first: list = []

    def stale(u):
        if not first:
            first.append(u.copy())
        u[...] = first[0]
        _heat_step(u)

    problem = corpus.check_calls(k, stale, 5, calls=2)["problem"]
    assert problem is not None and problem.startswith("call 2")

    calls: list = []

    def stale_state(u):  # right for fresh inputs, wrong when the same array comes back
        calls.append(1)
        if len(calls) == 3:
            return
        _heat_step(u)

    problem = corpus.check_calls(k, stale_state, 5, calls=2)["problem"]
    assert problem is not None and problem.startswith("call 3 (the arguments of call 2 again)")

    buffer: list = []

    def one_buffer(u):  # right values, but every call returns (and overwrites) one buffer
        if not buffer:
            buffer.append(np.empty_like(u))
        buffer[0][...] = _heat_copy(u)
        return buffer[0]

    k = corpus.Kernel("heat_copy", "stencil update", _heat_copy, k.make, 8, 5, "-")
    problem = corpus.check_calls(k, one_buffer, 5, calls=2)["problem"]
    assert problem is not None and problem.startswith("call 2: result of call 1 after call 2")


def test_compare_catches_mismatches():
    x = np.arange(4.0)
    assert corpus.compare(x, x.copy()) is None
    assert "dtype" in corpus.compare(x, x.astype(np.float32))
    assert "shape" in corpus.compare(x, x[:3])
    assert "values" in corpus.compare(x, x + 1e-6)
    assert "not np.ndarray" in corpus.compare(x, x.tolist())
    assert corpus.compare((x, 1), [x, 1]) is not None
    assert corpus.compare(np.float64(2.0), np.asarray(2.0)) is None
