"""NumPy in, NumPy out (SPEC 5, issue 11 items 1 and 2): a call of NumPy arrays gets fresh,
writable NumPy arrays on every path (capture, replay, drift re-capture, fallback, abandoned
structure, taken graph, kiln failure, a concurrent capture of the key); a call with a kiln
tensor among its leaves gets kiln tensors. Serving eagerly calls the target with the caller's
own leaves, untouched."""

from __future__ import annotations

import copy as copy_module
import threading
import warnings

import numpy as np
import pytest

import kiln
import kiln.runtime
from kiln import State
from kiln.errors import CaptureWarning, RecaptureWarning
from kiln.tensor import Tensor

F32 = np.float32


def kernel(x, y):
    return np.tanh(x) * 2 + y


def check_numpy(got, want, *inputs, earlier=()):
    """``got`` is a fresh, writable ndarray equal to ``want`` (values, dtype, shape)."""
    assert type(got) is np.ndarray, type(got)
    assert got.flags.writeable
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    for other in (*inputs, *earlier):
        assert not np.shares_memory(got, other)


def check_tensor(got, want):
    assert type(got) is Tensor, type(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def inputs(n=5):
    return np.linspace(-1, 1, n, dtype=F32), np.arange(n, dtype=F32)


def test_capture_replay_and_drift_return_fresh_numpy_arrays():
    f = kiln.compile(kernel)
    x, y = inputs()
    earlier = []
    for _ in range(3):  # call 1 (capture), then replays
        got = f(x, y)
        check_numpy(got, kernel(x, y), x, y, earlier=earlier)
        earlier.append(got)
    x7, y7 = inputs(7)  # a shape drift re-captures with a dynamic axis, then replays
    for _ in range(2):
        got = f(x7, y7)
        check_numpy(got, kernel(x7, y7), x7, y7, earlier=earlier)
        earlier.append(got)
    assert f.state is State.Compiled and f.recapture_count == 1
    got[0] = 123.0  # writable, and no later call sees it
    check_numpy(f(x7, y7), kernel(x7, y7))


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_result_structures_keep_their_containers_and_static_leaves(dynamic):
    def many(x, y):
        return {"a": x + y, "pair": (x * 2, [y - 1, 3]), "none": None}

    f = kiln.compile(many, dynamic=dynamic)
    x, y = inputs()
    for _ in range(2):
        got = f(x, y)
        want = many(x, y)
        assert set(got) == {"a", "pair", "none"} and got["none"] is None
        assert type(got["pair"]) is tuple and type(got["pair"][1]) is list
        assert got["pair"][1][1] == 3
        check_numpy(got["a"], want["a"], x, y)
        check_numpy(got["pair"][0], want["pair"][0], x, y)
        check_numpy(got["pair"][1][0], want["pair"][1][0], x, y)
    flat = kiln.compile(lambda x, y: [x + y, x - y])
    for _ in range(2):
        got = flat(x, y)
        assert type(got) is list
        for g, w in zip(got, [x + y, x - y]):
            check_numpy(g, w, x, y)


def test_views_of_inputs_are_views_of_the_callers_array_and_other_results_fresh():
    def fn(x):
        return x.T.T, x[1:], x[::-1].T, x + 1, x + 1

    f = kiln.compile(fn)
    for _ in range(3):
        x = np.arange(6, dtype=F32).reshape(3, 2)
        got, want = f(x), fn(x.copy())
        for g, w in zip(got, want):
            assert type(g) is np.ndarray and g.flags.writeable
            np.testing.assert_array_equal(g, w, strict=True)
        assert [np.shares_memory(g, x) for g in got] == [True, True, True, False, False]
        assert not np.shares_memory(got[3], got[4])
        got[1][0, 0] = 42  # a write through the view reaches the caller's array, as in NumPy
        assert x[1, 0] == 42


def test_a_view_of_a_written_input_shows_its_final_contents():
    def fn(x):
        tail = x[1:]
        x += 1  # after the view was made: NumPy's view sees it
        return tail

    f = kiln.compile(fn)
    for _ in range(3):
        x, y = np.arange(4.0), np.arange(4.0)
        got, want = f(x), fn(y)
        np.testing.assert_array_equal(got, want, strict=True)
        np.testing.assert_array_equal(x, y, strict=True)
        assert np.shares_memory(got, x)


@pytest.mark.parametrize("kind", ["numpy", "tensor"])
def test_a_result_that_is_an_input_is_the_callers_own_object(kind):
    """As NumPy: ``return out`` after writing into it, or ``return x``, hands back the caller's
    array itself on every path (capture, quick replay, full replay), written as NumPy left it."""

    def into(a, b, out):
        np.multiply(a, b, out=out)
        np.clip(out, -1.0, 1.0, out=out)
        return out, a, a + b

    wrap = kiln.asarray if kind == "tensor" else (lambda v: v)
    f = kiln.compile(into)
    rng = np.random.default_rng(0)
    for call in range(4):
        a, b = rng.normal(size=(5, 3)) * 3, rng.normal(size=3)
        out = np.full((5, 3), np.nan)
        ta, tb, tout = wrap(a), wrap(b), wrap(out)
        got = f(ta, tb, tout) if call < 3 else f(ta, tb, out=tout)  # keyword: the full path
        assert got[0] is tout and got[1] is ta
        assert not np.shares_memory(np.asarray(got[2]), a)
        np.testing.assert_array_equal(np.asarray(tout), np.clip(a * b, -1.0, 1.0))
        np.testing.assert_array_equal(np.asarray(got[2]), a + b)
    assert f.cache_info().captures == 2  # positional, then the keyword structure


def test_kiln_tensors_in_give_kiln_tensors_out_and_mixed_calls_give_tensors():
    f = kiln.compile(kernel)
    x, y = inputs()
    tx, ty = kiln.asarray(x), kiln.asarray(y)
    want = kernel(x, y)
    check_tensor(f(tx, ty), want)  # capture
    check_tensor(f(tx, ty), want)  # replay
    check_tensor(f(tx, y), want)  # mixed: any kiln tensor in, tensors out
    check_numpy(f(x, y), want, x, y)  # the same capture serves NumPy calls NumPy arrays
    assert f.cache_info().captures == 1
    g = kiln.compile(lambda xs: [x * 2 for x in xs])
    check_tensor(g([x, ty])[0], x * 2)  # a tensor nested in a list counts
    check_tensor(g([x, ty])[0], x * 2)
    check_numpy(g([x, y])[1], y * 2, x, y)


class Spy:
    """A target that records the types and identities of the leaves it is called with."""

    def __init__(self, fn):
        self.fn = fn
        self.seen = []
        self.__name__ = fn.__name__

    def __call__(self, *args, **kwargs):
        self.seen.append(args)
        return self.fn(*args, **kwargs)


def test_falling_back_calls_the_target_with_the_callers_own_arrays():
    spy = Spy(lambda x: x * 2)
    f = kiln.compile(spy, dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecaptureWarning)
        for n in range(1, 13):  # every shape its own capture: past the budget, it falls back
            x = np.ones(n, F32)
            check_numpy(f(x), x * 2, x)
    assert f.state is State.Fallback
    spy.seen.clear()
    x = np.arange(3, dtype=F32)
    check_numpy(f(x), x * 2, x)
    ((arg,),) = spy.seen
    assert arg is x  # untouched: no wrapping into a kiln tensor, no copy
    t = kiln.asarray(x)
    check_tensor(f(t), x * 2)
    assert spy.seen[-1][0] is t


def abandoned(x):
    return np.sort(x) + np.asarray(x).sum()  # a whole-tensor host read: served eagerly


def test_an_abandoned_structure_serves_numpy_arrays_from_the_callers_arrays():
    spy = Spy(abandoned)
    f = kiln.compile(spy)
    x = np.array([3.0, 1.0, 2.0], F32)
    with pytest.warns(CaptureWarning):
        got = f(x)
    check_numpy(got, abandoned(x), x)
    assert f.state is State.Fallback
    for _ in range(2):
        spy.seen.clear()
        check_numpy(f(x), abandoned(x), x)
        assert spy.seen[0][0] is x
    check_tensor(f(kiln.asarray(x)), abandoned(x))


def test_a_taken_graph_leaves_the_function_serving_numpy_eagerly():
    spy = Spy(kernel)
    f = kiln.compile(spy)
    x, y = inputs()
    f(x, y)
    graph = f.take_graph()
    (out,) = graph.run([x, y])  # take_graph speaks kiln tensors, unchanged
    assert type(out) is Tensor
    spy.seen.clear()
    check_numpy(f(x, y), kernel(x, y), x, y)
    assert spy.seen[0][0] is x and spy.seen[0][1] is y


def test_a_kiln_failure_returns_numpy_arrays_and_serves_them_eagerly(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("planning exploded")

    monkeypatch.setattr(kiln.runtime, "build_plan", boom)
    f = kiln.compile(kernel)
    x, y = inputs()
    with pytest.warns(CaptureWarning, match="planning exploded"):
        got = f(x, y)
    check_numpy(got, kernel(x, y), x, y)
    monkeypatch.undo()
    check_numpy(f(x, y), kernel(x, y), x, y)
    assert f.state is State.Fallback


def test_a_call_served_while_another_thread_captures_its_key_gets_the_callers_arrays():
    entered, release = threading.Event(), threading.Event()
    seen = []

    def slow(x):
        if type(x) is Tensor:  # the capturing call records on kiln tensors
            entered.set()
            assert release.wait(30)
        else:
            seen.append(x)
        return x * 2

    f = kiln.compile(slow)
    x = np.arange(4, dtype=F32)
    results = {}
    worker = threading.Thread(target=lambda: results.setdefault("a", f(x)))
    worker.start()
    assert entered.wait(30)
    mine = x + 1
    results["b"] = f(mine)  # the same key, being captured: served eagerly
    release.set()
    worker.join(30)
    assert seen and seen[0] is mine
    check_numpy(results["a"], x * 2, x)
    check_numpy(results["b"], mine * 2, mine)


def test_eager_results_of_kiln_functions_on_numpy_inputs_are_numpy_arrays():
    # np.unique is not captured, so the structure serves eagerly; the target also calls
    # kiln's own functions, which return tensors: a NumPy call still gets NumPy arrays.
    def mixed(x):
        return kiln.exp(x) + np.unique(x).sum(), np.unique(x)

    f = kiln.compile(mixed)
    x = np.array([1.0, 1.0, 2.0], F32)
    for _ in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CaptureWarning)
            a, b = f(x)
        check_numpy(a, np.exp(x) + 3, x)
        check_numpy(b, np.array([1.0, 2.0], F32), x)


def test_trace_and_run_still_speak_kiln_tensors():
    x, y = inputs()
    tg = kiln.trace(kernel, x, y)
    tg.finalize()
    assert type(tg(x, y)) is Tensor
    assert all(type(o) is Tensor for o in tg.run([x, y]))


def test_explain_returns_text_a_repl_shows_once(capsys):
    f = kiln.compile(kernel)
    f(*inputs())
    text = kiln.explain(f)
    assert capsys.readouterr().out == ""  # returned, not printed
    assert isinstance(text, str) and repr(text) == str(text)
    assert text.startswith("kernel: state compiled, 1 capture(s)")
    print(text)
    assert capsys.readouterr().out == text + "\n"
    kiln.explain(f, file=None)
    assert capsys.readouterr().out == ""
    import sys

    kiln.explain(f, file=sys.stdout)
    assert capsys.readouterr().out == text + "\n"


# Functions that may hand back their argument, a new view of it or a new array: NumPy's
# choice is observable (a write into the result reaches the caller's array or not), and a
# compiled call makes the same one, on the capture call and on replays.
IDENTITY_CASES = [
    "x",
    "x[...]",
    "x[:]",
    "x[:, :]",
    "x.T",
    "x.transpose()",
    "np.transpose(x, (0, 1))",
    "x.swapaxes(0, 0)",
    "np.moveaxis(x, 0, 0)",
    "x.squeeze()",
    "np.squeeze(x)",
    "x.reshape(x.shape)",
    "x.ravel()",
    "x.conj()",
    "np.conj(x)",
    "np.trunc(x)",
    "np.round(x)",
    "x.round()",
    "np.clip(x, None, None)",
    "np.roll(x, 0)",
    "np.flip(x, axis=())",
    "x.astype(x.dtype)",
    "x.astype(x.dtype, copy=False)",
    "x.copy()",
    "np.positive(x)",
    "np.atleast_2d(x)",
    "np.asarray(x)",
    "np.ascontiguousarray(x)",
    "np.asarray(x, dtype=x.dtype)",
    "+x",
]


@pytest.mark.parametrize("dtype", ["int32", "float64", "bool", "complex128"])
@pytest.mark.parametrize("expr", IDENTITY_CASES)
def test_a_result_is_the_argument_exactly_when_numpy_hands_it_back(expr, dtype):
    fn = eval(f"lambda x: {expr}")  # noqa: S307 - the test's own expressions
    base = np.arange(6).astype(dtype).reshape(2, 3)
    x = base.copy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = fn(x)
    except TypeError:
        pytest.skip(f"NumPy refuses {expr} for {dtype}")
    itself = want is x
    f = kiln.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (an abandoned capture warns once)
        for _ in range(3):
            x = base.copy()
            got = f(x)
            assert (got is x) == itself, (expr, dtype)
            np.testing.assert_array_equal(got, want)


def test_one_array_returned_twice_is_one_object_twice():
    def fn(x):
        y = x * 2
        r = np.exp(x, out=np.empty_like(x))
        return y, y, r, r, x, x

    f = kiln.compile(fn)
    for _ in range(3):
        x = np.arange(3.0)
        got = f(x)
        assert got[0] is got[1] and got[2] is got[3] and got[4] is x and got[5] is x
        assert not np.shares_memory(got[0], got[2])
        for g, w in zip(got, fn(x.copy())):
            np.testing.assert_array_equal(g, w, strict=True)


LAYOUT_SUMS = {
    # A float sum adds in memory order: each new array must be laid out as NumPy lays it out.
    "minimum of a transpose": lambda a: np.minimum(1, a.T).sum(axis=(1, 2)),  # fuzz 59:4763
    "maximum of a transpose": lambda a: np.maximum(a.T, -1).sum(),
    "copy of a transpose": lambda a: a.T.copy().sum(),  # C order, whatever the input's
    "copy, then a write": lambda a: _written_copy(a).sum(axis=0),
    "same-dtype astype": lambda a: a.T.astype(a.dtype).sum(),
    "copy.copy": lambda a: copy_module.copy(a.T).sum(),
}


def _written_copy(a):
    y = a.T.copy()
    y[0] = 5
    return y


@pytest.mark.parametrize("name", list(LAYOUT_SUMS))
def test_new_arrays_are_laid_out_as_numpys_so_sums_add_alike(name):
    fn = LAYOUT_SUMS[name]
    rng = np.random.default_rng(4)
    for _ in range(4):
        f = kiln.compile(fn)  # the capture call (call 1) computes on the recording's arrays
        for _ in range(3):
            a = rng.standard_normal((7, 5, 40)).astype(np.float32)
            before = a.copy()
            got, want = f(a), fn(before.copy())
            np.testing.assert_array_equal(got, want, strict=True)
            np.testing.assert_array_equal(a, before)  # the caller's array untouched


STRIDED_SUMS = {
    # NumPy's reduction buffers a strided operand in chunks of 8,192 elements, so a big strided
    # view sums otherwise than its dense copy: a no-op that makes a new array must stay a copy.
    "same-dtype astype of a strided view": lambda a: a[::2, ::2].astype(np.float32).sum(),
    "times one": lambda a: (a[::2, ::2] * 1).sum(),
    "over one": lambda a: (a.T[::2] / 1).sum(),
    "double negation": lambda a: np.negative(-a[:, ::2]).sum(),
}


@pytest.mark.parametrize("name", list(STRIDED_SUMS))
def test_no_op_copies_of_big_strided_views_sum_as_numpys(name):
    fn = STRIDED_SUMS[name]
    rng = np.random.default_rng(5)
    f = kiln.compile(fn)
    for _ in range(6):
        a = rng.standard_normal((300, 300)).astype(np.float32)
        np.testing.assert_array_equal(f(a), fn(a), strict=True)


def test_a_strided_view_passed_in_sums_as_numpys_after_a_no_op_cast():
    def fn(x):
        return x.astype(np.float32).sum()

    rng = np.random.default_rng(6)
    f = kiln.compile(fn)
    for _ in range(6):
        v = rng.standard_normal((400, 400)).astype(np.float32)[::2, ::2]
        np.testing.assert_array_equal(f(v), fn(v), strict=True)
