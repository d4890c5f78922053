"""kiln.compile: exactly when a CompiledFunction captures, replays and falls back.

Modelled on MLX's compile tests: each test counts the target's Python calls, so it pins down
which calls were captures (the target runs) and which were replays (it does not).
"""

from __future__ import annotations

import gc
import threading
import warnings
import weakref

import numpy as np
import pytest

import kiln
from kiln import State
from kiln.errors import (
    CaptureError,
    CaptureWarning,
    InputMismatchError,
    RecaptureWarning,
    StateError,
)

from ..numerics import assert_close

f32 = np.float32


def rand(*shape, seed=0, dtype=f32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


class Counted:
    """A target that counts its Python calls."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0
        self.__name__ = getattr(fn, "__name__", "counted")
        self.__wrapped__ = fn  # so inspect.signature (and input names) see the parameters

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def model(x, y):
    return np.tanh(x * 2.0 + y) - y


def test_first_call_captures_and_later_calls_replay():
    target = Counted(model)
    f = kiln.compile(target)
    assert f.state is State.Pending and f.input_names == []
    x, y = rand(3, 4), rand(3, 4, seed=1)
    for _ in range(5):
        out = f(x, y)
        assert_close(out, np.tanh(x * f32(2.0) + y) - y)
        assert type(out) is np.ndarray  # NumPy in, NumPy out (SPEC 5)
    assert target.calls == 1
    assert f.state is State.Compiled and f.recapture_count == 0
    assert f.input_names == ["x", "y"]


def test_new_static_value_captures_again():
    target = Counted(lambda x, n: x * n)
    f = kiln.compile(target)
    x = rand(4)
    f(x, 2)
    f(x, 2)
    assert target.calls == 1
    out = f(x, 3)
    assert_close(out, x * 3)
    assert target.calls == 2 and f.recapture_count == 1
    assert f.history[-1].kind == "static value"
    assert (f.history[-1].path, f.history[-1].old, f.history[-1].new) == ("n", 2, 3)
    f(x, 2)  # the first capture is still cached
    assert target.calls == 2


def test_new_structure_dtype_and_rank_capture_again():
    target = Counted(lambda xs: sum(xs[1:], xs[0]))
    f = kiln.compile(target)
    f([rand(3), rand(3)])
    f([rand(3), rand(3), rand(3)])  # structure
    f([rand(3, dtype=np.float64), rand(3, dtype=np.float64)])  # dtype
    f([rand(3, 1), rand(3, 1)])  # rank
    assert target.calls == 4 and f.recapture_count == 3
    assert [e.kind for e in f.history] == ["first", "structure", "dtype", "rank"]
    for _ in range(3):
        f([rand(3), rand(3)])
        f([rand(3, 1), rand(3, 1)])
    assert target.calls == 4


def test_shape_drift_makes_the_axis_dynamic_for_every_size():
    target = Counted(model)
    f = kiln.compile(target)
    f(rand(2, 4), rand(2, 4))
    f(rand(5, 4), rand(5, 4))  # drift: one re-capture with axis 0 dynamic
    assert target.calls == 2 and f.recapture_count == 1
    event = f.history[-1]
    assert event.kind == "shape drift" and (event.path, event.old, event.new) == ("x", 2, 5)
    assert ("x", 0) in event.axes and ("y", 0) in event.axes
    for batch in (0, 1, 3, 17, 2):
        x, y = rand(batch, 4, seed=batch), rand(batch, 4, seed=batch + 1)
        assert_close(f(x, y), np.tanh(x * f32(2.0) + y) - y)
    assert target.calls == 2 and f.state is State.Compiled


def test_dynamic_true_captures_once_for_all_shapes():
    target = Counted(model)
    f = kiln.compile(target, dynamic=True)
    for n in (1, 0, 4, 9):
        f(rand(n, 2), rand(n, 2))
    assert target.calls == 1 and f.recapture_count == 0


def test_dynamic_false_captures_each_shape():
    target = Counted(model)
    f = kiln.compile(target, dynamic=False)
    for n in (1, 2, 3, 1, 2):
        f(rand(n, 2), rand(n, 2))
    assert target.calls == 3 and f.recapture_count == 2
    assert f.history[-1].kind == "new shape"


def test_signature_names_inputs_and_rejects_calls_that_do_not_fit():
    target = Counted(lambda a, b: a + b)
    f = kiln.compile(
        target, signature=[kiln.TensorSpec(("B", 3), name="left"), kiln.TensorSpec(("B", 3))]
    )
    for n in (1, 4, 0):
        f(rand(n, 3), rand(n, 3))
    assert target.calls == 1 and f.input_names == ["left", "b"]
    with pytest.raises(InputMismatchError, match="axis 1"):
        f(rand(2, 4), rand(2, 4))
    with pytest.raises(InputMismatchError, match="symbolic size B"):
        f(rand(2, 3), rand(3, 3))
    with pytest.raises(InputMismatchError, match="float32"):
        f(rand(2, 3, dtype=np.float64), rand(2, 3, dtype=np.float64))


def test_budget_exhaustion_falls_back_with_one_warning_until_reset():
    target = Counted(lambda x, n: x + n)
    f = kiln.compile(target)
    x = rand(2)
    f(x, 0)
    for n in range(1, 9):
        f(x, n)
    assert f.recapture_count == 8 and f.state is State.Compiled
    with pytest.warns(RecaptureWarning, match="static input 'n' changed") as record:
        out = f(x, 100)
    assert len(record) == 1
    assert "dynamic=True" in str(record[0].message)
    assert_close(out, x + f32(100))
    assert f.state is State.Fallback and f.history[-1].kind == "budget"
    calls = target.calls
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        f(x, 0)
        f(x, 101)
    assert target.calls == calls + 2  # eager every call
    f.reset()
    assert f.state is State.Pending and f.recapture_count == 0
    f(x, 0)
    f(x, 0)
    assert target.calls == calls + 3 and f.state is State.Compiled


def test_take_graph_hands_out_the_graph_then_serves_eagerly():
    target = Counted(model)
    f = kiln.compile(target)
    with pytest.raises(StateError, match="call the function once"):
        f.take_graph()
    x, y = rand(2, 3), rand(2, 3, seed=1)
    f(x, y)
    graph = f.take_graph()
    assert isinstance(graph, kiln.io.ModelGraph) and graph.input_names == ["x", "y"]
    assert graph.is_finalized()
    assert_close(graph.run([x, y])[0], np.tanh(x * f32(2.0) + y) - y)
    assert f.state is State.Fallback
    with pytest.raises(StateError, match="reset"):
        f.take_graph()
    f(x, y)
    f(x, y)
    assert target.calls == 3
    f.reset()
    f(x, y)
    f(x, y)
    assert target.calls == 4 and f.state is State.Compiled


def test_value_guard_takes_both_branches_and_always_matches_eager():
    target = Counted(lambda x: x * 2.0 if x.sum() > 0 else x - 1.0)
    f = kiln.compile(target)
    pos, neg = np.ones(3, f32), -np.ones(3, f32)
    assert_close(f(pos), pos * 2)
    assert_close(f(pos), pos * 2)
    assert target.calls == 1
    assert_close(f(neg), neg - 1)  # the guard fails: eager + re-capture
    assert target.calls == 2 and f.history[-1].kind == "value guard"
    assert_close(f(neg), neg - 1)
    assert target.calls == 2
    assert_close(f(pos), pos * 2)
    assert target.calls == 3


def test_scalar_host_conversions_are_guarded():
    f = kiln.compile(lambda x: x * float(x.max()) + int(x.min()))
    for seed in range(4):
        x = np.arange(4, dtype=f32) + seed
        assert_close(f(x), x * f32(x.max()) + f32(int(x.min())))


@pytest.mark.parametrize(
    "body, what",
    [
        (lambda x: x * float(x.sum()), "float(tensor)"),
        (lambda x: x if x.sum() > 0 else -x, "bool(tensor)"),
        (lambda x: x * x.sum().item(), "Tensor.item()"),
        (lambda x: np.ascontiguousarray(x) * 2, "np.asarray(tensor)"),
    ],
)
def test_fullgraph_raises_capture_error_naming_op_and_line(body, what):
    f = kiln.compile(body, fullgraph=True)
    with pytest.raises(CaptureError) as info:
        f(np.ones(3, f32))
    assert what in str(info.value) and "test_compiled.py" in str(info.value)
    assert f.state is State.Pending


def test_whole_tensor_host_read_serves_that_structure_eagerly_with_one_warning():
    target = Counted(lambda x: kiln.asarray(np.ascontiguousarray(x) * 2) + x)
    f = kiln.compile(target)
    x = rand(3)
    with pytest.warns(CaptureWarning, match=r"np\.asarray\(tensor\).*test_compiled\.py"):
        out = f(x)
    assert_close(out, x * 3)
    assert f.state is State.Fallback and f.history[-1].kind == "abandoned"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_close(f(x), x * 3)
    assert target.calls == 2


def test_target_exceptions_propagate_unchanged_and_leave_state():
    class Boom(Exception):
        pass

    def target(x, fail):
        if fail:
            raise Boom("no")
        return x + 1.0

    f = kiln.compile(target)
    with pytest.raises(Boom, match="no"):
        f(rand(2), True)
    assert f.state is State.Pending and f.history == [] and f.recapture_count == 0
    f(rand(2), False)
    with pytest.raises(Boom):
        f(rand(2), True)
    assert f.state is State.Compiled and f.recapture_count == 0


def test_closures_are_constants_that_share_memory():
    w = rand(3, 3)
    f = kiln.compile(lambda x: x @ w)
    x = rand(2, 3)
    assert_close(f(x), x @ w)
    w *= 2  # the graph's constant is the same memory, so it sees this as eager would
    assert_close(f(x), x @ w)


def test_pytree_outputs_with_static_leaves():
    f = kiln.compile(lambda d: {"sum": d["a"] + d["b"], "tag": "ok", "pair": (d["a"], 7)})
    d = {"a": rand(2), "b": rand(2, seed=1)}
    for _ in range(2):
        out = f(d)
        assert out["tag"] == "ok" and out["pair"][1] == 7
        assert_close(out["sum"], d["a"] + d["b"])
        assert_close(out["pair"][0], d["a"])


def test_results_never_alias_across_calls():
    f = kiln.compile(lambda x: x * 2.0)
    a = f(np.ones(4, f32))
    b = f(np.full(4, 3, f32))
    assert_close(a, np.full(4, 2, f32))
    assert_close(b, np.full(4, 6, f32))
    assert not np.shares_memory(np.asarray(a), np.asarray(b))


def test_eight_threads_with_mixed_shapes():
    f = kiln.compile(model)
    errors = []

    def worker(seed):
        try:
            for i in range(30):
                n = (seed + i) % 4
                x, y = rand(n, 3, seed=seed), rand(n, 3, seed=seed + 100)
                np.testing.assert_allclose(
                    np.asarray(f(x, y)), np.tanh(x * 2 + y) - y, rtol=1e-5, atol=1e-6
                )
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert f.state is State.Compiled


def test_memory_is_released_after_reset_and_cache_info_reports_it():
    w = rand(64, 64)
    # kiln.tensor copies: a constant the graph holds (a closure array would be an implicit
    # input, read at each call and not held).
    f = kiln.compile(lambda x: x @ (kiln.tensor(w) + 1.0))
    f(rand(2, 64))
    info = f.cache_info()
    assert info.entries == 1 and info.bytes >= w.nbytes and info.captures == 1
    graph_ref = weakref.ref(f._current.graph)
    f.reset()
    gc.collect()
    assert graph_ref() is None
    assert f.cache_info().entries == 0 and f.cache_info().bytes == 0


def test_lru_keeps_at_most_eight_captures():
    f = kiln.compile(lambda x, n: x + n)
    for n in range(8):
        f(rand(2), n)
    assert f.cache_info().entries == 8
    target_calls = f.cache_info().captures
    f(rand(2), 0)  # still cached
    assert f.cache_info().captures == target_calls


def test_two_compiles_share_no_state():
    target = Counted(model)
    f, g = kiln.compile(target), kiln.compile(target)
    f(rand(2, 2), rand(2, 2))
    assert g.state is State.Pending
    g(rand(2, 2), rand(2, 2))
    assert target.calls == 2


def test_decorator_forms_and_explain():
    @kiln.compile
    def a(x):
        return x + 1.0

    @kiln.compile(dynamic=True, graph_name="bee")
    def b(x):
        return x * 2.0

    assert isinstance(a, kiln.CompiledFunction) and a.__name__ == "a"
    a(rand(2))
    b(rand(3))
    assert b.take_graph().name == "bee"
    a(rand(4))
    text = kiln.explain(a, file=False)
    assert "first" in text and "shape drift" in text
    assert [e.to_dict()["kind"] for e in a.history] == ["first", "shape drift"]


def test_unhashable_static_input_names_its_path():
    f = kiln.compile(lambda x, opts: x * opts["k"][0])
    with pytest.raises(TypeError, match=r"opts\.k"):
        f(rand(2), {"k": bytearray(b"\x02")})


def test_steady_state_calls_add_no_history():
    f = kiln.compile(model)
    x, y = rand(2, 2), rand(2, 2)
    f(x, y)
    before = len(f.history)
    for _ in range(20):
        f(x, y)
    assert len(f.history) == before


def test_optimize_false_runs_the_recorded_graph():
    f = kiln.compile(lambda x: (x + 0.0) * 1.0, optimize=False)
    x = rand(3)
    assert_close(f(x), x)
    assert len(f.take_graph().nodes) == 2


@pytest.mark.parametrize("specialize", [True, False, None])
def test_specialize_options_give_equal_results(specialize):
    f = kiln.compile(lambda x: x.reshape(x.shape[0], -1) * 2.0, dynamic=True, specialize=specialize)
    for n in (1, 3, 2, 3):  # (0, -1) is ambiguous for NumPy too
        x = rand(n, 2, 3)
        assert_close(f(x), x.reshape(n, -1) * 2)


def test_place_cuda_without_backend_raises_device_unavailable():
    with pytest.raises(kiln.DeviceUnavailableError, match="cupy"):
        kiln.compile(model, place="cuda:0")


def test_one_tensor_in_a_list_stays_a_list_on_replay():
    f = kiln.compile(lambda x: [x + 1.0])
    for _ in range(2):
        out = f(np.ones(2, f32))
        assert isinstance(out, list) and len(out) == 1
        assert_close(out[0], np.full(2, 2, f32))


def test_a_pinned_dynamic_size_is_in_the_history():
    w = rand(4, 5)
    f = kiln.compile(lambda x: x @ w, dynamic=True)
    assert_close(f(rand(2, 4)), rand(2, 4) @ w)
    pinned = [e for e in f.history if e.kind == "pinned"]
    assert len(pinned) == 1 and "MatMul" in pinned[0].message and "axis 1" in pinned[0].message
    assert_close(f(rand(6, 4)), rand(6, 4) @ w)
    assert f.recapture_count == 0


def test_warnings_point_at_the_callers_line():
    f = kiln.compile(lambda x, n: x + n)
    with pytest.warns(RecaptureWarning) as record:
        for n in range(10):
            f(rand(2), n)
    assert record[0].filename == __file__
    g = kiln.compile(lambda x: kiln.asarray(np.ascontiguousarray(x)))
    with pytest.warns(CaptureWarning) as record:
        g(rand(2))
    assert record[0].filename == __file__


# -- issue 10: memory bounds, least recently used, a scalar where an array was captured ------


def test_history_keeps_a_bounded_window_across_resets():
    from kiln.capture.compiled import HISTORY_LIMIT

    f = kiln.compile(lambda x: x + 1.0)
    for _ in range(HISTORY_LIMIT + 50):
        f(rand(2))
        f.reset()
    history = f.history
    assert len(history) == HISTORY_LIMIT == 256
    assert history[-1].kind == "reset" and history[-2].kind == "first"


def test_cache_bytes_count_a_shared_closure_array_once():
    w = rand(256, 256)  # 256 KiB, read by every capture
    f = kiln.compile(lambda x, k: x @ w + k)
    for k in range(4):  # four captures (a static value each time)
        assert_close(f(rand(2, 256), float(k)), rand(2, 256) @ w + float(k), rtol=1e-5)
    info = f.cache_info()
    assert info.entries >= 2
    # [issue 11] a closure array is an implicit input read at each call: no capture holds it
    assert info.bytes < 4096


def test_the_least_recently_used_capture_is_dropped_first():
    target = Counted(lambda x, n: x + n)
    f = kiln.compile(target)
    x = rand(2)
    for n in range(8):
        f(x, n)
    f(x, 0)  # used again: now the most recently used
    calls = target.calls
    f(x, 8)  # a ninth capture drops the least recently used: n=1, not n=0
    assert f.cache_info().entries == 8 and target.calls == calls + 1
    assert_close(f(x, 0), x + 0)
    assert target.calls == calls + 1  # n=0 still replays
    with pytest.warns(RecaptureWarning):  # n=1 was dropped: it misses (past the budget now)
        assert_close(f(x, 1), x + 1)
    assert target.calls == calls + 2


def test_a_python_scalar_where_an_array_was_captured_works_like_numpy():
    f = kiln.compile(lambda x: x * 2)
    assert_close(f(np.ones(3)), np.full(3, 2.0))
    assert f(3) == 6  # NumPy accepts it, so kiln does (it raised AttributeError)
    assert f.history[-1].kind == "structure" and f.history[-1].path == "x"
    assert_close(f(np.ones(3)), np.full(3, 2.0))
