"""The re-capture policy on its own: what changed, and whether to capture (with which dynamic
axes) or fall back, from a call's signature and the previous capture's inputs.

tests/capture/test_compiled.py pins the same decisions end to end (when the target runs).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.capture.policy import CaptureEvent, Decision, RecapturePolicy
from kiln.capture.signature import CallSignature, CapturedInputs
from kiln.errors import InputMismatchError
from kiln.symbolic import symbol

f32, f64 = np.float32, np.float64


def call(*args, **kwargs):
    return CallSignature(args, kwargs, with_shapes=False)


def captured(signature, names, *, shapes=None, drift=None):
    """The inputs a capture of ``signature`` records (static shapes unless given)."""
    arrays = signature.arrays
    return CapturedInputs(
        treespec=signature.treespec,
        tensor_positions=signature.tensor_positions,
        static_leaves=signature.static_leaves,
        names=tuple(names),
        dtypes=tuple(a.dtype for a in arrays),
        shapes=tuple(shapes) if shapes is not None else tuple(a.shape for a in arrays),
        drift=dict(drift or {}),
    )


def mismatch():
    return InputMismatchError("input 'x' axis 0 has size 5, the graph takes 2")


# -- the call's signature -------------------------------------------------------------------


def test_signature_key_holds_dtype_and_rank_or_shape():
    x = np.ones((2, 3), f32)
    assert call(x, 4).key == call(np.zeros((7, 1), f32), 4).key
    assert call(x, 4).key != call(x, 5).key
    assert call(x, 4).key != call(x.astype(f64), 4).key
    with_shapes = CallSignature((x,), {}, with_shapes=True)
    assert with_shapes.key != CallSignature((np.ones((3, 3), f32),), {}, with_shapes=True).key


def test_signature_arrays_positions_and_statics():
    x, y = np.ones(2, f32), kiln.asarray(np.zeros(3, f32))
    sig = call({"b": y, "a": x}, "tag", n=3)
    assert sig.tensor_positions == (0, 1)
    assert sig.static_leaves == ("tag", 3)
    assert sig.arrays[0] is x and np.array_equal(sig.arrays[1], np.zeros(3, f32))
    assert sig.paths == [(0, 0, "a"), (0, 0, "b"), (0, 1), (1, "n")]


def test_unhashable_static_input_is_named_by_its_path():
    sig = call(np.ones(2), {"k": [bytearray(b"x")]})
    with pytest.raises(TypeError):
        hash(sig.key)
    error = sig.unhashable_error("f", ["x", "opts"])
    assert "'opts.k.0'" in str(error) and "bytearray" in str(error)


# -- a new structure key ----------------------------------------------------------------------


def test_first_capture():
    decision = RecapturePolicy("f", ["x"]).first(1)
    assert decision == Decision(CaptureEvent(1, "first", message="first call"))
    assert decision.captures and dict(decision.drift) == {}


def test_static_value_change_names_the_input():
    x = np.ones(3, f32)
    previous = captured(call(x, 2), ["x"])
    decision = RecapturePolicy("f", ["x", "n"]).changed(4, call(x, 3), previous, [previous])
    event = decision.event
    assert (event.call, event.kind, event.path, event.old, event.new) == (
        4,
        "static value",
        "n",
        2,
        3,
    )
    assert event.message == "static input 'n' changed from 2 to 3"
    assert decision.captures and dict(decision.drift) == {}


def test_static_value_of_another_type_is_a_change():
    x = np.ones(3, f32)
    previous = captured(call(x, 2), ["x"])
    event = RecapturePolicy("f", ["x", "n"]).changed(2, call(x, 2.0), previous, [previous]).event
    assert (event.kind, event.old, event.new) == ("static value", 2, 2.0)


@pytest.mark.parametrize(
    "now, kind, old, new",
    [
        (np.ones((2, 3), f64), "dtype", np.dtype(f32), np.dtype(f64)),
        (np.ones((2, 3, 1), f32), "rank", 2, 3),
        (np.ones((4, 3), f32), "new shape", (2, 3), (4, 3)),
    ],
)
def test_tensor_changes(now, kind, old, new):
    previous = captured(call(np.ones((2, 3), f32)), ["x"])
    event = RecapturePolicy("f", ["x"]).changed(2, call(now), previous, [previous]).event
    assert (event.kind, event.path, event.old, event.new) == (kind, "x", old, new)
    assert event.message.startswith(f"input 'x' {kind.split()[-1]} changed from")


def test_structure_changes():
    policy = RecapturePolicy("f", ["xs"])
    two = captured(call([np.ones(2), np.ones(2)]), ["xs.0", "xs.1"])
    event = policy.changed(2, call([np.ones(2)] * 3), two, [two]).event
    assert event.kind == "structure" and event.message.startswith("the input structure changed")
    # A tensor where a static value was: the same tree, other tensor positions.
    static = captured(call(np.ones(2), 1), ["x"])
    event = policy.changed(3, call(np.ones(2), np.ones(2)), static, [static]).event
    assert event.kind == "structure"
    assert policy.changed(4, call(np.ones(2)), None, []).event.message == "a new input structure"


def test_change_is_described_against_the_closest_capture():
    policy = RecapturePolicy("f", ["x", "n"])
    x32, x64 = np.ones(2, f32), np.ones(2, f64)
    old32 = captured(call(x32, 1), ["x"])
    other = captured(call(x32), ["x"])  # another structure: never the closest
    new64 = captured(call(x64, 1), ["x"])
    # The current capture is float64; the call is float32 with a new static value: the float32
    # capture of the same structure is closer, so the change is the static value alone.
    event = policy.changed(5, call(x32, 2), new64, [old32, other, new64]).event
    assert (event.kind, event.old, event.new) == ("static value", 1, 2)
    # Without an equal-dtype capture, the most recent of the same structure.
    event = policy.changed(6, call(np.ones(2, np.int32), 1), other, [old32, other, new64]).event
    assert (event.kind, event.old) == ("dtype", np.dtype(f64))


def test_signature_size_mismatch_is_an_error_not_a_capture():
    policy = RecapturePolicy("f", ["a", "b"], signature_size=2)
    previous = captured(call(np.ones(2), np.ones(2)), ["a", "b"])
    with pytest.raises(InputMismatchError, match="the signature has 2 TensorSpec"):
        policy.changed(2, call(np.ones(2)), previous, [previous])


# -- a replay that could not serve the call ---------------------------------------------------


def test_drift_makes_axes_that_moved_together_one_dynamic_size():
    policy = RecapturePolicy("f", ["x", "y"])
    previous = captured(call(np.ones((2, 4)), np.ones((2, 4))), ["x", "y"])
    arrays = [np.ones((5, 4)), np.ones((5, 4))]
    decision = policy.drifted(2, previous, arrays, mismatch())
    event = decision.event
    assert (event.kind, event.path, event.old, event.new) == ("shape drift", "x", 2, 5)
    assert event.axes == (("x", 0), ("y", 0))
    assert event.message == (
        "input 'x' axis 0 changed size from 2 to 5; axes made dynamic: [('x', 0), ('y', 0)]"
    )
    drift = dict(decision.drift)
    assert set(drift) == {(0, 0), (1, 0)} and drift[(0, 0)] == drift[(1, 0)]
    assert decision.captures


def test_drift_to_different_sizes_gives_different_names_never_reused():
    policy = RecapturePolicy("f", ["x", "y"])
    previous = captured(call(np.ones((2, 4)), np.ones((2, 4))), ["x", "y"])
    first = dict(policy.drifted(2, previous, [np.ones((5, 4)), np.ones((3, 4))], mismatch()).drift)
    assert first[(0, 0)] != first[(1, 0)]
    again = dict(policy.drifted(3, previous, [np.ones((5, 4)), np.ones((5, 4))], mismatch()).drift)
    assert not set(again.values()) & set(first.values())


def test_drift_splits_a_dynamic_size_whose_axes_now_differ():
    policy = RecapturePolicy("f", ["x", "y"])
    d = symbol("d7")
    previous = captured(
        call(np.ones((2, 4)), np.ones((2, 4))),
        ["x", "y"],
        shapes=[(d, 4), (d, 4)],
        drift={(0, 0): "d7", (1, 0): "d7"},
    )
    decision = policy.drifted(3, previous, [np.ones((3, 4)), np.ones((6, 4))], mismatch())
    assert decision.event.kind == "shape drift" and decision.event.path is None
    assert decision.event.message.startswith("dynamic sizes that were equal now differ")
    drift = dict(decision.drift)
    assert drift[(0, 0)] == "d7" and drift[(1, 0)] not in ("d7", None)


def test_no_drifted_axis_or_a_signature_raises_the_mismatch_itself():
    previous = captured(
        call(np.ones((2, 4))), ["x"], shapes=[(symbol("B"), 4)], drift={(0, 0): "B"}
    )
    error = mismatch()
    with pytest.raises(InputMismatchError) as info:
        RecapturePolicy("f", ["x"]).drifted(2, previous, [np.ones((3, 4))], error)
    assert info.value is error
    static = captured(call(np.ones((2, 4))), ["x"])
    with pytest.raises(InputMismatchError) as info:
        RecapturePolicy("f", ["x"], signature_size=1).drifted(2, static, [np.ones((3, 4))], error)
    assert info.value is error


def test_value_guard_miss_keeps_the_dynamic_axes():
    previous = captured(
        call(np.ones((2, 4))), ["x"], shapes=[(symbol("d0"), 4)], drift={(0, 0): "d0"}
    )
    decision = RecapturePolicy("f", ["x"]).guard_missed(
        9, previous, "bool(tensor) at f.py:3", np.array(True), np.array(False)
    )
    event = decision.event
    assert (event.call, event.kind, event.path, event.old, event.new) == (
        9,
        "value guard",
        "bool(tensor) at f.py:3",
        True,
        False,
    )
    assert event.message == "the value read by bool(tensor) at f.py:3 changed from True to False"
    assert dict(decision.drift) == {(0, 0): "d0"}


# -- the budget -----------------------------------------------------------------------------


def test_within_budget_keeps_the_decision_and_past_it_falls_back():
    policy = RecapturePolicy("f", ["x", "n"], budget=2)
    change = Decision(CaptureEvent(7, "static value", "n", 2, 3, message="n changed"))
    assert policy.within_budget(change, spent=1, history=[]) is change
    history = [
        CaptureEvent(1, "first", message="first call"),
        CaptureEvent(3, "static value", message="n went to 1"),
        CaptureEvent(5, "static value", message="n went to 2"),
    ]
    decision = policy.within_budget(change, spent=2, history=history)
    assert not decision.captures
    assert decision.fall_back == "the re-capture budget of 2 is spent"
    event = decision.event
    assert (event.call, event.kind, event.path, event.old, event.new) == (7, "budget", "n", 2, 3)
    assert "re-captured 2 times" in event.message and "Last change: n changed." in event.message
    assert event.message.endswith("Recent causes: n went to 1; n went to 2")
    assert "dynamic=True" in event.message


def test_within_budget_reads_a_bounded_history_deque():
    from collections import deque

    policy = RecapturePolicy("f", ["x"], budget=1)
    history = deque([CaptureEvent(2, "static value", message="n went to 1")], maxlen=4)
    decision = policy.within_budget(Decision(CaptureEvent(3, "rank")), spent=1, history=history)
    assert decision.event.message.endswith("Recent causes: n went to 1")


# -- an array where a static value was captured, and back -------------------------------------


def test_a_python_scalar_where_an_array_was_captured_is_a_new_structure():
    # f(np.ones(3)) then f(3): NumPy accepts both, so the change is a new structure (it raised
    # AttributeError: 'int' object has no attribute 'dtype').
    policy = RecapturePolicy("f", ["x"])
    before = captured(call(np.ones(3)), ["x"])
    decision = policy.changed(4, call(3), before, [before])
    event = decision.event
    assert decision.captures and (event.call, event.kind, event.path) == (4, "structure", "x")
    assert event.message == (
        "input 'x' was an array (float64, rank 1) and is now a static int (3): "
        "a new input structure"
    )


def test_an_array_where_a_static_value_was_captured_is_a_new_structure():
    policy = RecapturePolicy("f", ["x", "n"])
    before = captured(call(np.ones(2, f32), 2.5), ["x"])
    event = policy.changed(5, call(np.ones(2, f32), np.ones(3)), before, [before]).event
    assert (event.kind, event.path) == ("structure", "n")
    assert event.message == (
        "input 'n' was a static float (2.5) and is now an array (float64, rank 1): "
        "a new input structure"
    )


def test_static_dtype_and_type_leaves_and_arrays_have_distinct_keys():
    # np.dtype("int64") == int holds: the key parts must not rely on it.
    keys = {
        call(np.dtype("int64")).key,
        call(int).key,
        call(np.int64).key,
        call(np.ones(1, np.int64)).key,
        call(1).key,
    }
    assert len(keys) == 5
    assert call(np.ones(1, np.int64)).key != call(1).key  # equal parts once compared equal
