"""kiln.trace and TracedGraph through the public API."""

from __future__ import annotations

import collections
import threading
import warnings

import numpy as np
import pytest

import kiln
from kiln.errors import CaptureError, CaptureWarning, GraphNotFinalizedError, InputMismatchError

from ..numerics import assert_close

f32 = np.float32


def ones(*shape):
    return np.ones(shape, f32)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(f32)


def finalized(tg):
    tg.finalize()
    return tg


def test_trace_records_and_runs_equal_to_eager():
    def f(x, y):
        return kiln.exp(x) + y * 2.0

    x, y = rand(3, 4), rand(3, 4, seed=1)
    tg = finalized(kiln.trace(f, x, y))
    (out,) = tg.run([x, y])
    assert_close(out, np.exp(x) + y * f32(2.0))
    assert out.dtype == f32  # the Python scalar stayed weak
    assert [n.op for n in tg.nodes] == ["Exp", "Mul", "Add"]


def test_graph_arrives_unfinalized_and_run_says_to_finalize():
    tg = kiln.trace(lambda x: x + 1.0, ones(2))
    assert not tg.is_finalized()
    with pytest.raises(GraphNotFinalizedError, match=r"finalize\(\)"):
        tg.run([ones(2)])
    tg.finalize()
    plan = tg.graph.program.plan
    tg.finalize()  # idempotent
    assert tg.graph.program.plan is plan and tg.is_finalized()


def test_input_names_come_from_argument_paths():
    def f(x, params, batch, *, scale):
        return x @ params["w"] + batch[0] * scale["s"]

    tg = kiln.trace(
        f,
        ones(2, 3),
        {"w": ones(3, 3)},
        (ones(2, 3), ones(2, 3)),
        scale={"s": ones(3)},
    )
    assert tg.input_names == ["x", "params.w", "batch.0", "batch.1", "scale.s"]


def test_tensor_spec_names_inputs():
    tg = kiln.trace(
        lambda a, b: a + b,
        ones(2),
        ones(2),
        signature=[kiln.TensorSpec((2,), "float32", name="left"), kiln.TensorSpec((2,))],
    )
    assert tg.input_names == ["left", "b"]


Point = collections.namedtuple("Point", ["x", "y"])


def test_pytrees_in_and_out():
    def f(p, extra, flag):
        assert extra is None and flag == "on"
        return {"sum": p.x + p.y, "pair": (p.x, [p.y * 2.0]), "none": None, "n": 3}

    p = Point(rand(2), rand(2, seed=1))
    tg = finalized(kiln.trace(f, p, None, "on"))
    out = tg(p, None, "on")
    assert set(out) == {"sum", "pair", "none", "n"}
    assert out["none"] is None and out["n"] == 3
    assert_close(out["sum"], p.x + p.y)
    assert_close(out["pair"][0], p.x)
    assert_close(out["pair"][1][0], p.y * f32(2.0))
    assert tg.output_names == ["pair.0", "pair.1.0", "sum"]


def test_calling_with_another_structure_or_static_value_raises():
    tg = finalized(kiln.trace(lambda x, n: x * n, ones(2), 3))
    assert_close(tg(ones(2), 3), np.full(2, 3, f32))
    with pytest.raises(InputMismatchError, match="static value 3"):
        tg(ones(2), 4)
    with pytest.raises(InputMismatchError, match="structure"):
        tg((ones(2),), 3)


def test_closure_tensors_become_copied_constants_a_later_write_cannot_change():
    w = rand(3, 3)
    wt = kiln.asarray(w)
    tg = finalized(kiln.trace(lambda x: x + wt, ones(3, 3)))
    (const,) = tg.graph.constants
    assert not np.shares_memory(const.data, w)  # a writable array is copied
    assert tg.input_names == ["x"]
    want = ones(3, 3) + w
    w[...] = 100.0  # the closure's array changes after tracing, as NumPy allows
    wt[0, 0] = -1.0
    assert w[0, 0] == -1.0 and w[1, 1] == 100.0  # the writes are NumPy's, on w
    (out,) = tg.run([ones(3, 3)])
    assert_close(out, want)  # the traced graph keeps the values it saw
    assert_close(tg(ones(3, 3)), want)


def test_closure_read_only_arrays_become_constants_without_copy():
    w = rand(3, 3)
    w.flags.writeable = False  # nothing can change it: shared, not copied
    wt = kiln.asarray(w)
    tg = finalized(kiln.trace(lambda x: x + wt, ones(3, 3)))
    (const,) = tg.graph.constants
    assert np.shares_memory(const.data, w)
    assert tg.input_names == ["x"]
    (out,) = tg.run([ones(3, 3)])
    assert_close(out, ones(3, 3) + w)


def test_signature_only_trace_runs_for_every_batch_size():
    tg = kiln.trace(lambda x: kiln.exp(x) + 1.0, signature=[kiln.TensorSpec(("B", 3), "float32")])
    assert tg.in_spec is None
    assert str(tg.graph.inputs[0].shape[0]) == "B"
    tg.finalize()
    for batch in (0, 1, 7):
        x = rand(batch, 3)
        (out,) = tg.run([x])
        assert_close(out, np.exp(x) + f32(1.0))
    with pytest.raises(TypeError, match="signature"):
        tg(ones(1, 3))


def test_dynamic_axes_by_name_and_index():
    tg = kiln.trace(
        lambda x, y: x + y, ones(2, 3), ones(2, 3), dynamic_axes={"x": {0: "B"}, 1: {0: "B"}}
    )
    assert [str(d) for d in tg.graph.inputs[0].shape] == ["B", "3"]
    assert "B" in str(tg.graph)
    tg.finalize()
    (out,) = tg.run([ones(5, 3), ones(5, 3)])
    assert out.shape == (5, 3)
    with pytest.raises(InputMismatchError, match="symbolic size B"):
        tg.run([ones(5, 3), ones(4, 3)])


def test_anonymous_dynamic_axes():
    tg = finalized(kiln.trace(lambda x: x * 2.0, ones(2, 3), dynamic_axes={"x": [0, 1]}))
    (out,) = tg.run([ones(4, 1)])
    assert out.shape == (4, 1)


def test_run_by_name_and_input_errors():
    tg = finalized(kiln.trace(lambda x, y: x - y, ones(2), ones(2)))
    (out,) = tg.run({"y": ones(2), "x": np.full(2, 3, f32)})
    assert_close(out, np.full(2, 2, f32))
    with pytest.raises(InputMismatchError, match="no input named 'z'"):
        tg.run({"x": ones(2), "z": ones(2)})
    with pytest.raises(InputMismatchError, match="'y' is missing"):
        tg.run({"x": ones(2)})
    with pytest.raises(InputMismatchError, match="takes 2 input"):
        tg.run([ones(2)])
    with pytest.raises(InputMismatchError, match="'x': expected dtype float32, got float64"):
        tg.run([np.ones(2), ones(2)])
    with pytest.raises(InputMismatchError, match="'y': expected rank 1"):
        tg.run([ones(2), ones(2, 1)])
    with pytest.raises(InputMismatchError, match="'x' axis 0: expected size 2, got 3"):
        tg.run([ones(3), ones(2)])


@pytest.mark.parametrize(
    "body, what",
    [
        (lambda x: x * float(x), "float(tensor)"),
        (lambda x: x + 1.0 if x else x, "bool(tensor)"),
        (lambda x: x * int(x), "int(tensor)"),
        (lambda x: x.item(), "Tensor.item()"),
        (lambda x: np.ascontiguousarray(x), "np.asarray(tensor)"),
        (lambda x: x.tolist(), "Tensor.tolist()"),
    ],
)
def test_host_conversions_raise_capture_error_naming_op_and_line(body, what):
    with pytest.raises(CaptureError) as info:
        kiln.trace(body, ones(1))
    message = str(info.value)
    assert what in message
    assert "test_trace.py" in message


def test_unsupported_numpy_function_raises_naming_it():
    with pytest.raises(kiln.UnsupportedOperationError, match="np.fft.fft|np.fft"):
        kiln.trace(lambda x: np.fft.fft(x), ones(4))


def test_unsupported_numpy_function_computes_eagerly_outside_capture():
    out = np.fft.fft(kiln.asarray(np.ones(4)))
    assert_close(np.abs(np.asarray(out)), np.abs(np.fft.fft(np.ones(4))))


def test_output_names_and_graph_name():
    tg = kiln.trace(
        lambda x: (x + 1.0, x * 2.0), ones(2), output_names=["a", "b"], graph_name="pair"
    )
    assert tg.output_names == ["a", "b"] and tg.graph.name == "pair"
    with pytest.raises(InputMismatchError, match="output_names has 1"):
        kiln.trace(lambda x: (x, x), ones(2), output_names=["a"])


def test_input_returned_unchanged_and_duplicate_outputs():
    tg = finalized(kiln.trace(lambda x: (x, x, x + 1.0), ones(2)))
    assert len(set(tg.output_names)) == 3
    tg.graph.verify()
    a, b, c = tg.run([np.full(2, 5, f32)])
    assert_close(a, np.full(2, 5, f32))
    assert_close(b, np.full(2, 5, f32))
    assert_close(c, np.full(2, 6, f32))


def test_traced_graph_surface_reaches_the_graph():
    tg = kiln.trace(lambda x: kiln.exp(x), ones(2, 2))
    assert tg.nodes == tg.graph.nodes
    assert tg.inputs[0].shape == (2, 2)
    assert isinstance(tg.out_spec, kiln.tree.TreeSpec)
    assert "Exp" in str(tg)


def test_concurrent_runs_from_eight_threads():
    tg = finalized(kiln.trace(lambda x: kiln.exp(x) * 2.0 + x, signature=[kiln.TensorSpec(("B",))]))
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for i in range(50):
                x = rand(seed % 5 + i % 3, seed=seed)
                (out,) = tg.run([x])
                np.testing.assert_allclose(np.asarray(out), np.exp(x) * 2 + x, rtol=1e-6)
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_an_op_that_pins_a_dynamic_size_is_named_and_the_guard_checks_it():
    w = np.ones((4, 5), f32)
    with pytest.warns(kiln.errors.CaptureWarning, match=r"MatMul at .*test_trace.py.*'x' axis 1"):
        tg = kiln.trace(lambda x: x @ w, ones(3, 4), dynamic_axes={"x": [0, 1]})
    assert tg.graph.inputs[0].shape[1] == 4 and not isinstance(tg.graph.inputs[0].shape[0], int)
    tg.finalize()
    assert tg.run([ones(7, 4)])[0].shape == (7, 5)
    with pytest.raises(InputMismatchError, match="'x' axis 1: expected size 4, got 6"):
        tg.run([ones(7, 6)])


def test_broadcasting_a_dynamic_size_against_a_static_one_pins_it():
    with pytest.warns(kiln.errors.CaptureWarning, match=r"Add .*pins the dynamic size"):
        tg = kiln.trace(lambda x: x + ones(3), ones(3), dynamic_axes={"x": [0]})
    assert tg.graph.inputs[0].shape == (3,)


def test_a_function_without_tensor_inputs_warns_that_everything_was_baked():
    weights = np.arange(3.0)
    with pytest.warns(CaptureWarning, match="no tensor inputs"):
        tg = kiln.trace(lambda: weights * 2)
    assert list(tg.graph.input_names) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an input: no warning
        kiln.trace(lambda x: x * weights, np.ones(3))
