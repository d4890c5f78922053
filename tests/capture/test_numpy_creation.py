"""NumPy's creation functions inside captured functions (kiln.capture.numpy_creation): they
create recorded kiln tensors in the capturing thread only, follow NumPy's values and dtypes on
the capture call, on replays with new values and after a batch drift, and NumPy's functions are
restored exactly when captures end."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
from kiln import State
from kiln.capture import numpy_creation as nc
from kiln.capture.trace import TraceRef
from kiln.errors import CaptureWarning

from ..numerics import assert_close

ORIGINALS = {name: getattr(np, name) for name in nc.INTERCEPTED}
HELD = np.arange(3.0)  # an ndarray the functions below hold (made outside any capture)


class Counted:
    """A target that counts its Python calls (a replay does not call it)."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0
        self.__name__ = fn.__name__
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def rand(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def assert_restored():
    for name, original in ORIGINALS.items():
        assert getattr(np, name) is original, f"np.{name} was not restored"
    assert not nc.is_installed()


# Functions that create with NumPy's own functions; each is run eagerly (NumPy) as reference.
# They hold for any number of rows, so a batch drift replays one dynamic graph.


def zeros_like_fn(x):
    z = np.zeros_like(x)
    return z + x


def ones_full_fn(x):
    o = np.ones((x.shape[0], 4), dtype=np.float32)
    f = np.full((1, 4), 2.5)
    return o * x + f + np.empty_like(x).shape[0]  # empty contents are unspecified


def full_like_fn(x):
    return np.full_like(x, 3) * x - np.ones_like(x, dtype=np.int32)


def arange_fn(x):
    return x * np.arange(4) + np.arange(0.5, 2.5, 0.5) + np.arange(x.shape[0])[:, None]


def linspace_fn(x):
    return x + np.linspace(0, 1, 4) - np.linspace(-1, 1, 4, endpoint=False, dtype=np.float32)


def eye_fn(x):
    return x @ np.eye(4) + np.eye(x.shape[0], 4, k=1) + np.identity(4)[0]


def array_fn(x):
    a = np.array([1.0, 2.0, 3.0, 4.0])
    b = np.asarray([[1], [2]][0], dtype=np.float32)
    c = np.array([x[0, 0], x[0, 1], 2.0, 3])  # tensors and Python numbers: stacked
    return x * a + b + c + np.copy([0.5, 0.25, 0.0, 1.0])


def tensor_array_fn(x):
    return np.asarray(x) + np.array(x) + np.copy(x) + x.copy() + np.asarray(x, dtype=np.float32)


def shape_array_fn(x):
    return x * np.array(x.shape).sum() + np.array(x, ndmin=3)[0]  # a dynamic size stays one


FUNCTIONS = [
    zeros_like_fn,
    ones_full_fn,
    full_like_fn,
    arange_fn,
    linspace_fn,
    eye_fn,
    array_fn,
    tensor_array_fn,
    shape_array_fn,
]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_compiled_creation_matches_numpy_replays_and_drifts(fn):
    target = Counted(fn)
    cf = kiln.compile(target)
    x = rand(3, 4)
    assert_close(cf(x), fn(x))  # the capture call
    assert cf.state is State.Compiled, kiln.explain(cf)
    assert_restored()
    for seed in (1, 2):
        x = rand(3, 4, seed=seed)
        assert_close(cf(x), fn(x))  # replays with new values
    assert target.calls == 1
    for rows in (5, 7, 1):  # a batch drift: one re-capture, then the dynamic graph replays
        x = rand(rows, 4, seed=rows)
        assert_close(cf(x), fn(x))
    assert target.calls == 2, kiln.explain(cf)
    assert cf.state is State.Compiled
    assert_restored()


def test_the_graph_computes_the_arrays_instead_of_storing_them():
    def f(x):
        z = np.zeros_like(x)
        e = np.eye(x.shape[0], x.shape[1])
        r = np.arange(x.shape[1], dtype=np.float64)
        o = np.ones((x.shape[0], x.shape[1]))
        return z + x * e + r * o

    x = rand(300, 400)
    traced = kiln.trace(f, x)
    ops = [n.op for n in traced.graph.nodes]
    assert ops.count("ConstantOfShape") == 2 and ops.count("Range") == 3
    assert max(c.data.size for c in traced.graph.constants) <= 2
    cf = kiln.compile(f)
    assert_close(cf(x), f(x))
    assert_close(cf(x + 1), f(x + 1))
    graph = cf.take_graph()
    assert "ConstantOfShape" in [n.op for n in graph.nodes]
    assert max((c.data.size for c in graph.constants), default=0) < 1000  # no 300x400 array


def test_dynamic_axes_stay_dynamic_through_like():
    cf = kiln.compile(lambda x: np.zeros_like(x) + np.ones_like(x[:, :1]) + x)
    for rows in (2, 3, 6):
        x = rand(rows, 4, seed=rows)
        assert_close(cf(x), x + 1)
    graph = cf.take_graph()
    ops = [n.op for n in graph.nodes]
    assert "Shape" in ops and "ConstantOfShape" in ops
    assert not isinstance(graph.input_values[0].shape[0], int)


def test_created_arrays_are_fresh_recording_tensors():
    seen = {}

    def f(x):
        seen["zeros"] = np.zeros((2, 3))
        seen["empty"] = np.empty(3, dtype=np.int32)
        seen["arange"] = np.arange(5)
        seen["data"] = np.array([[1, 2], [3, 4]])
        seen["copy"] = np.array(x)
        seen["asarray"] = np.asarray(x)
        seen["x"] = x
        return x + 1

    traced = kiln.trace(f, np.ones((2, 2)))
    assert seen["asarray"] is seen["x"]  # no copy, no host read
    constants = [c.data for c in traced.graph.constants]
    for name in ("zeros", "empty", "arange", "data", "copy"):
        t = seen[name]
        assert isinstance(t, kiln.Tensor) and isinstance(t._trace, TraceRef), name
        assert (t._data if t._data.base is None else t._data.base).flags.writeable, name
        assert not any(np.shares_memory(t._data, c) for c in constants), name
        assert not np.shares_memory(t._data, seen["x"]._data), name
    assert seen["empty"].dtype == np.int32 and seen["data"].dtype == np.int64
    assert seen["zeros"].dtype == np.float64 and seen["arange"].dtype == np.arange(5).dtype


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: np.zeros(3), np.zeros(3)),
        (lambda: np.zeros((2, 2), dtype=None, order="F"), np.zeros((2, 2))),
        (lambda: np.ones(2, int), np.ones(2, int)),
        (lambda: np.full(3, 7), np.full(3, 7)),
        (lambda: np.full((2,), np.float32(1.5)), np.full((2,), np.float32(1.5))),
        (lambda: np.arange(stop=4, start=1, dtype=np.float32), np.arange(1, 4, dtype=np.float32)),
        (lambda: np.arange(np.float32(0), 5), np.arange(np.float32(0), 5)),
        (lambda: np.arange(stop=3), np.arange(stop=3)),
        (lambda: np.arange(2, step=0.5), np.arange(2, step=0.5)),
        (lambda: np.linspace(2, 3, 5, retstep=True)[1], np.linspace(2, 3, 5, retstep=True)[1]),
        (lambda: np.eye(2, dtype=np.int8), np.eye(2, dtype=np.int8)),
        (lambda: np.identity(3), np.identity(3)),
        (lambda: np.array(2.5), np.array(2.5)),
        (lambda: np.array([1, 2], ndmin=3), np.array([1, 2], ndmin=3)),
        (lambda: np.array([True, False]), np.array([True, False])),
        (lambda: np.asarray([1.0, 2.0], dtype=np.float32), np.asarray([1.0, 2.0], np.float32)),
    ],
)
def test_signatures_and_dtypes_follow_numpy(make, expected):
    out = {}
    traced = kiln.trace(lambda x: out.setdefault("v", make()) * 0 + x, np.zeros(()))
    assert traced is not None
    v = out["v"]
    if isinstance(expected, np.ndarray):
        assert isinstance(v, kiln.Tensor)
        assert_close(v._data, expected)
    else:
        assert v == expected


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros(3, dtype=np.longdouble),  # a dtype kiln lacks
        lambda: np.array(["a", "b"]),
        lambda: np.array([[1], [2, 3]], dtype=object),  # ragged
        lambda: np.zeros(3, like=HELD),
        lambda: np.asarray(HELD),  # a NumPy array keeps NumPy's behaviour
        lambda: np.array(HELD),
        lambda: np.copy(HELD),
        lambda: np.array(HELD, ndmin=2),
    ],
)
def test_what_kiln_does_not_take_is_numpys_own_call(make):
    out = {}
    kiln.trace(lambda x: out.setdefault("v", make()) is None or x, np.zeros(()))
    assert type(out["v"]) is np.ndarray
    np.testing.assert_array_equal(out["v"], make())


def test_numpy_errors_stay_numpys():
    def f(x):
        np.zeros(-1)
        return x

    with pytest.raises(ValueError, match="negative dimensions"):
        kiln.trace(f, np.zeros(2))
    assert_restored()


def test_another_thread_gets_plain_numpy_during_a_capture():
    started, release = threading.Event(), threading.Event()
    other: dict[str, object] = {}

    def f(x):
        started.set()
        release.wait(10)
        return np.zeros_like(x) + x

    def numpy_user():
        started.wait(10)
        other["zeros"] = np.zeros(3)
        other["array"] = np.array([1, 2])
        other["routed"] = np.zeros is not ORIGINALS["zeros"]
        release.set()

    thread = threading.Thread(target=numpy_user)
    thread.start()
    cf = kiln.compile(f)
    x = rand(2, 3)
    assert_close(cf(x), x)
    thread.join()
    assert other["routed"]  # the routing was installed: the thread used it and got NumPy
    assert type(other["zeros"]) is np.ndarray and type(other["array"]) is np.ndarray
    assert_restored()


def test_concurrent_captures_share_one_installation():
    barrier = threading.Barrier(2, timeout=10)
    results: dict[int, object] = {}

    def make(i):
        def f(x):
            barrier.wait()  # both captures are running here
            z = np.zeros_like(x)
            barrier.wait()  # the first to finish must not uninstall the other's routing
            return z + x * i

        return f

    def run(i):
        cf = kiln.compile(make(i))
        results[i] = (np.asarray(cf(rand(2, 2, seed=i))), cf.state)

    threads = [threading.Thread(target=run, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in (1, 2):
        out, state = results[i]
        assert_close(out, rand(2, 2, seed=i) * i)
        assert state is State.Compiled
    assert_restored()


def test_restored_after_an_exception_and_nested_captures():
    inner = kiln.compile(lambda x: np.ones_like(x) * x)

    def outer(x):
        assert np.zeros is not ORIGINALS["zeros"]
        y = inner(x)
        assert np.zeros is not ORIGINALS["zeros"]  # still installed for the outer capture
        return np.zeros_like(x) + y

    assert_close(kiln.compile(outer)(rand(2)), rand(2))
    assert_restored()

    def boom(x):
        np.zeros(3)
        raise RuntimeError("user error")

    with pytest.raises(RuntimeError, match="user error"):
        kiln.compile(boom)(rand(2))
    assert_restored()
    with pytest.raises(RuntimeError, match="user error"):
        kiln.trace(boom, rand(2))
    assert_restored()


def test_library_code_gets_numpys_functions():
    out = {}
    library = {"__name__": "scipy._fake_module", "np": np, "out": out}
    exec("def make():\n    out['v'] = np.zeros(2)\n", library)  # noqa: S102

    def f(x):
        library["make"]()
        out["user"] = np.zeros(2)
        return x

    kiln.trace(f, np.zeros(2))
    assert type(out["v"]) is np.ndarray
    assert isinstance(out["user"], kiln.Tensor)


def test_outside_a_capture_numpy_is_untouched():
    assert_restored()
    with nc.numpy_creation():
        assert np.zeros is not ORIGINALS["zeros"]
        assert type(np.zeros(2)) is np.ndarray  # routed, but no tracer is active
        assert np.zeros.__kiln_original__ is ORIGINALS["zeros"]
    assert_restored()


def test_only_direct_np_calls_are_routed():
    """A creation function that C code calls (a Generator's method, map) or that is reached
    through another name keeps NumPy's arrays: C code needs a real ndarray."""
    out = {}
    zeros = ORIGINALS["zeros"]

    def f(x):
        out["map"] = list(map(np.zeros, [2]))[0]
        out["alias"] = zeros(2)
        out["direct"] = np.zeros(2)
        out["draw"] = np.random.default_rng(0).standard_normal(3)  # C code calls np.empty
        return x

    with pytest.warns(CaptureWarning, match="default_rng"):  # a draw a replay cannot repeat
        kiln.compile(f)(rand(2))
    assert type(out["map"]) is np.ndarray and type(out["alias"]) is np.ndarray
    assert isinstance(out["direct"], kiln.Tensor)
    np.testing.assert_array_equal(out["draw"], np.random.default_rng(0).standard_normal(3))
    assert_restored()
