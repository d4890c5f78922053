"""Arrays a compiled function reads without receiving them (closures, globals, ``self``) are
implicit inputs read afresh at every call: rebinding them or updating them in place is seen,
and a change of dtype or shape re-captures (SPEC section 5, "Nothing is baked silently")."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.capture.compiled import State

rng = np.random.default_rng(0)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def close(got, want):
    got = np.asarray(got)
    assert got.dtype == np.asarray(want).dtype and got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def kinds(f):
    return [e.kind for e in f.history]


# -- closures ------------------------------------------------------------------------------


def test_rebinding_a_closure_array_after_two_calls_is_seen():
    w = rand(3)
    g = rand(3, seed=1)

    def forward(x):
        return x * w + 1.0

    def step(lr):
        nonlocal w
        w = w - lr * g

    f = kiln.compile(forward)
    x = rand(4, 3, seed=2)
    for i in range(5):
        close(f(x), x * w + 1.0)
        if i >= 1:
            step(0.1)
    assert f.state is State.Compiled and f.recapture_count == 0
    assert kinds(f) == ["first"]


@pytest.mark.parametrize(
    "body",
    [lambda x, u: x @ u, lambda x, u: x @ (u * 2), lambda x, u: np.tanh(u * 2 - 1) @ x.T],
    ids=["x@u", "x@(u*2)", "tanh(u*2-1)@x.T"],
)
def test_updating_a_closure_array_in_place_is_seen_also_through_computations(body):
    u = rand(3, 3)
    f = kiln.compile(lambda x: body(x, u))
    x = rand(2, 3, seed=1)
    for _ in range(4):
        close(f(x), body(x, u))
        u -= 0.5  # in place: the closure still holds the same array
    assert f.recapture_count == 0 and f.state is State.Compiled


def test_a_closure_array_is_a_graph_input_not_a_constant():
    u = rand(3, 3)
    f = kiln.compile(lambda x: x @ (u * 2))
    f(rand(2, 3))
    graph = f.current_graph
    assert graph is not None
    assert graph.input_names == ["x", "u"]
    assert all(c.data.shape != (3, 3) for c in graph.constants)


def test_a_kiln_tensor_in_a_closure_is_read_afresh():
    t = kiln.tensor(rand(3))
    f = kiln.compile(lambda x: x + t)
    x = rand(3, seed=1)
    close(f(x), x + np.asarray(t))
    t = kiln.tensor(np.asarray(t) * 3)  # noqa: F841  # rebinding the cell the lambda reads
    close(f(x), x + np.asarray(t))


# -- globals and helpers -------------------------------------------------------------------

W = rand(3, 2)
B = rand(2, seed=5)


def _layer(x):
    return x @ W


def _model(x):
    return np.maximum(_layer(x) + B, 0.0)


def test_rebinding_a_module_global_is_seen_also_from_a_helper_function():
    global W, B
    saved = W, B
    try:
        f = kiln.compile(_model)
        x = rand(5, 3, seed=2)
        g = rand(3, 2, seed=3)
        for i in range(5):
            close(f(x), np.maximum(x @ W + B, 0.0))
            if i >= 1:
                W = W - 0.1 * g  # the update rule of a training loop
                B -= 0.25  # in place
        assert f.recapture_count == 0 and kinds(f) == ["first"]
    finally:
        W, B = saved


def test_a_global_that_changes_shape_or_dtype_recaptures_and_stays_correct():
    global W
    saved = W
    try:
        f = kiln.compile(_layer)
        x = rand(5, 3, seed=2)
        close(f(x), x @ W)
        W = rand(3, 4, seed=7)
        close(f(x), x @ W)
        W = W.astype(np.float32)
        close(f(x), x @ W)
        close(f(x), x @ W)
        events = [e for e in f.history if e.kind == "implicit input"]
        assert [(e.path, e.old, e.new) for e in events] == [
            ("W", "float64[3, 2]", "float64[3, 4]"),
            ("W", "float64[3, 4]", "float32[3, 4]"),
        ]
        assert f.recapture_count == 2 and f.state is State.Compiled
    finally:
        W = saved


def test_a_function_that_rebinds_a_global_itself_is_served_eagerly_like_numpy():
    state = {"calls": 0}
    ns: dict = {"acc": np.zeros(3), "np": np}
    exec("def accumulate(x):\n    global acc\n    acc = acc + x\n    return acc * 2\n", ns)
    f = kiln.compile(ns["accumulate"])
    x = rand(3)
    expected = np.zeros(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            expected = expected + x
            close(f(x), expected * 2)
            state["calls"] += 1
    close(ns["acc"], expected)
    assert type(ns["acc"]) is np.ndarray
    assert "abandoned" in kinds(f)


# -- attributes of self and reachable objects ----------------------------------------------


class Layer:
    def __init__(self):
        self.b = rand(2, seed=4)


class Model:
    def __init__(self):
        self.w = rand(3, 2)
        self.layer = Layer()
        self.scale = 2.0

    def forward(self, x):
        return (x @ self.w + self.layer.b) * self.scale


def test_attributes_of_self_and_nested_objects_are_read_afresh():
    m = Model()
    f = kiln.compile(m.forward)
    x = rand(4, 3, seed=1)
    for i in range(5):
        close(f(x), (x @ m.w + m.layer.b) * 2.0)
        m.w = m.w * 0.5  # rebinding
        m.layer.b += 1.0  # in place, one level down
        if i == 2:
            m.layer = Layer()  # the intermediate object is replaced
    assert f.recapture_count == 0 and f.state is State.Compiled


def test_self_passed_as_a_static_argument_is_searched_too():
    m = Model()
    f = kiln.compile(Model.forward)
    x = rand(4, 3, seed=1)
    for _ in range(3):
        close(f(m, x), (x @ m.w + m.layer.b) * 2.0)
        m.w -= 1.0
    assert f.recapture_count == 0


def test_an_attribute_rebound_to_something_else_recaptures_and_matches_numpy():
    m = Model()
    f = kiln.compile(m.forward)
    x = rand(4, 3, seed=1)
    close(f(x), (x @ m.w + m.layer.b) * 2.0)
    m.layer.b = 3.5  # no longer an array
    close(f(x), (x @ m.w + 3.5) * 2.0)
    assert [e.kind for e in f.history][-1] == "implicit input"


# -- what stays as it was --------------------------------------------------------------------


def test_the_originals_are_back_after_the_capture():
    u = rand(3)
    holder = Model()
    f = kiln.compile(lambda x: x + u + holder.w[:, 0])
    f(rand(3))
    assert type(u) is np.ndarray and type(holder.w) is np.ndarray
    assert u.flags.writeable and holder.w.flags.writeable


def test_kiln_trace_still_bakes_what_the_function_reaches():
    u = rand(3, 3)
    traced = kiln.trace(lambda x: x @ u, rand(2, 3))
    assert traced.graph.input_names == ["x"]
    assert any(c.data.shape == (3, 3) for c in traced.graph.constants)


def test_concurrent_captures_share_stand_ins_and_restore_the_originals():
    import threading

    u = rand(4)
    barrier = threading.Barrier(4)

    def target(x):
        barrier.wait(timeout=10)  # all four captures are inside the target at once
        return x * u + np.random.rand(1)

    f = kiln.compile(target, dynamic=False)
    results: dict[int, np.ndarray] = {}

    def call(n):
        results[n] = f(np.ones((n, 4)))

    threads = [threading.Thread(target=call, args=(n,)) for n in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [1, 2, 3, 4]
    assert type(u) is np.ndarray and u.flags.writeable
    assert getattr(np.random.rand, "__self__", None) is np.random.mtrand._rand  # unpatched
    barrier = threading.Barrier(1)
    u *= 2  # the captures read the closure afresh
    np.random.seed(0)
    got = f(np.ones((2, 4)))
    np.random.seed(0)
    np.testing.assert_array_equal(got, np.ones((2, 4)) * u + np.random.rand(1))


# -- callable objects, functions held in attributes, lists and dicts -------------------------


class Scaled:
    """A callable object: its attributes and what its ``__call__`` reaches are searched."""

    def __init__(self, fn, w):
        self.fn = fn
        self.w = w

    def __call__(self, x):
        return self.fn(x) * self.w


def test_a_callable_object_reads_its_attributes_and_its_functions_closures_afresh():
    u = rand(3)
    target = Scaled(lambda x: x + u, rand(3, seed=1))
    f = kiln.compile(target)
    x = rand(3, seed=2)
    f(x)
    f(x)
    u *= 2  # in the closure of the function held in target.fn
    target.w -= 1.0  # an attribute of the callable object
    close(f(x), (x + u) * target.w)
    target.fn = lambda x: x - u  # rebinding a function is a new structure (eager: traced again)
    assert kinds(f) == ["first"]


@pytest.mark.parametrize("container", ["list", "dict"])
def test_arrays_in_a_closure_list_or_dict_are_read_afresh(container):
    w, b = rand(3, 3), rand(3, seed=1)
    params = [w, b] if container == "list" else {"w": w, "b": b}
    keys = (0, 1) if container == "list" else ("w", "b")

    def layer(x):
        return x @ params[keys[0]] + params[keys[1]]

    f = kiln.compile(layer)
    x = rand(2, 3, seed=2)
    f(x)
    f(x)
    params[keys[0]] -= 0.5  # in place
    close(f(x), x @ params[keys[0]] + params[keys[1]])
    params[keys[1]] = rand(3, seed=3)  # an item rebound
    close(f(x), x @ params[keys[0]] + params[keys[1]])
    params[keys[1]] = rand(2, 3, seed=4)  # another shape: a re-capture
    close(f(x), x @ params[keys[0]] + params[keys[1]])
    assert kinds(f) == ["first", "implicit input"]
    assert type(params[keys[0]]) is np.ndarray  # the originals are back


def test_a_list_in_an_attribute_and_a_list_that_shrinks():
    class Model:
        def __init__(self):
            self.layers = [rand(3), rand(3, seed=1)]

        def __call__(self, x):
            return x * self.layers[0] + self.layers[-1]

    m = Model()
    f = kiln.compile(m)
    x = rand(3, seed=2)
    f(x)
    f(x)
    m.layers[0] *= 3
    close(f(x), x * m.layers[0] + m.layers[-1])
    m.layers.pop()  # layers[-1] is now layers[0]: a re-capture reads it
    close(f(x), x * m.layers[0] + m.layers[-1])


PARAMS = (rand(3), rand(3, seed=1))


def _affine(x):
    return x * PARAMS[0] + PARAMS[1]


def test_arrays_in_a_global_tuple_are_read_afresh_and_the_tuple_rebound_is_seen():
    global PARAMS
    f = kiln.compile(_affine)
    x = rand(3, seed=2)
    f(x)
    f(x)
    assert type(PARAMS) is tuple and all(type(p) is np.ndarray for p in PARAMS)
    PARAMS[0][:] = 2.0  # in place
    close(f(x), x * PARAMS[0] + PARAMS[1])
    PARAMS = (PARAMS[0] - 1.0, PARAMS[1] * 3)  # the tuple rebound, as an update step does
    close(f(x), x * PARAMS[0] + PARAMS[1])
    assert kinds(f) == ["first"]


def test_a_tuple_held_by_an_attribute():
    class Layer:
        def __init__(self):
            self.wb = (rand(3), rand(3, seed=1))

        def __call__(self, x):
            w, b = self.wb
            return x * w + b

    layer = Layer()
    f = kiln.compile(layer)
    x = rand(3, seed=2)
    f(x)
    f(x)
    layer.wb = (layer.wb[0] * 2, layer.wb[1])
    close(f(x), x * layer.wb[0] + layer.wb[1])
