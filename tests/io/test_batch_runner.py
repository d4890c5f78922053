"""kiln.io.BatchRunner: a model as a picklable batch function for Ray Data, Spark and Dask.

Every result is compared with the NumPy function the graph was traced from (values, dtype,
shape); the Ray Data and Dask tests run real pipelines on this machine.
"""

from __future__ import annotations

import importlib.util
import pickle
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.errors import ArgumentTypeError, InputMismatchError
from kiln.io import BatchRunner, ModelGraph

rng = np.random.default_rng(0)
W = rng.standard_normal((16, 4)).astype(np.float32)
B = rng.standard_normal(4).astype(np.float32)


def model_fn(x: np.ndarray) -> np.ndarray:
    return np.tanh(x @ W + B) * np.float32(2)


def model_graph() -> ModelGraph:
    example = np.ones((8, 16), np.float32)
    return kiln.trace(model_fn, example, dynamic_axes={"x": [0]}).graph


def features(n: int, start: int = 0) -> np.ndarray:
    rows = np.arange(start, start + n, dtype=np.float32)[:, None]
    return np.sin(rows * 0.01 * np.arange(1, 17, dtype=np.float32)).astype(np.float32)


def assert_same(got: Any, expected: np.ndarray) -> None:
    assert isinstance(got, np.ndarray)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("batch_runner") / "mlp.onnx"
    kiln.io.save(model_graph(), path)
    return path


SOURCES = ["path", "pathlike", "bytes", "graph", "traced"]


def make_source(kind: str, path: Path) -> Any:
    if kind == "path":
        return str(path)
    if kind == "pathlike":
        return path
    if kind == "bytes":
        return path.read_bytes()
    if kind == "graph":
        return model_graph()
    return kiln.trace(model_fn, np.ones((8, 16), np.float32), dynamic_axes={"x": [0]})


# -- values and columns -------------------------------------------------------------------


@pytest.mark.parametrize("kind", SOURCES)
def test_values_match_numpy_for_each_source(kind: str, model_path: Path) -> None:
    runner = BatchRunner(make_source(kind, model_path))
    for n in (128, 104, 1):  # full batches and a last, shorter one
        x = features(n)
        out = runner({"x": x})
        assert list(out) == ["output"]
        assert_same(out["output"], model_fn(x))


def test_other_columns_pass_through_unchanged(model_path: Path) -> None:
    runner = BatchRunner(model_path)
    x, ids, names = features(5), np.arange(5, 10), np.array(list("abcde"))
    out = runner({"id": ids, "x": x, "name": names})
    assert out["id"] is ids and out["name"] is names
    assert "x" not in out  # input columns are consumed
    assert_same(out["output"], model_fn(x))
    np.testing.assert_array_equal(x, features(5))  # the batch's arrays are not written


def test_output_replaces_a_column_of_the_same_name(model_path: Path) -> None:
    x = features(3)
    out = BatchRunner(model_path)({"x": x, "output": np.zeros(3)})
    assert_same(out["output"], model_fn(x))


def test_written_inputs_come_back_as_mutated_outputs() -> None:
    def zero_first_column(x: np.ndarray) -> np.ndarray:
        x[:, 0] = 0.0
        return x.sum(axis=1)

    example = np.ones((4, 3), np.float32)
    graph = kiln.trace(zero_first_column, example, dynamic_axes={"x": [0]}).graph
    x = features(6)[:, :3]
    expected = x.copy()
    total = zero_first_column(expected)
    out = BatchRunner(graph)({"x": x, "id": np.arange(6)})
    assert sorted(out) == ["id", "mutated.x", "output"]
    assert_same(out["output"], total)
    assert_same(out["mutated.x"], expected)
    np.testing.assert_array_equal(x, features(6)[:, :3])  # the column itself is untouched


def test_engine_is_forwarded_to_finalize(model_path: Path) -> None:
    runner = BatchRunner(model_path, engine="numpy")
    x = features(7)
    assert_same(runner({"x": x})["output"], model_fn(x))
    assert runner.graph.program is not None and runner.graph.program.engine == "numpy"
    assert runner.engine == "numpy"


# -- pickling and loading -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["path", "bytes", "graph"])
def test_pickle_round_trip_before_and_after_the_first_call(kind: str, model_path: Path) -> None:
    runner = BatchRunner(make_source(kind, model_path))
    x = features(9)
    before = pickle.loads(pickle.dumps(runner))
    assert_same(before({"x": x})["output"], model_fn(x))
    assert_same(runner({"x": x})["output"], model_fn(x))
    state = runner.__getstate__()
    assert set(state) == {"source", "engine"}  # the source only, never the finalized program
    if kind == "path":
        assert state["source"] == str(model_path)
    else:
        assert isinstance(state["source"], bytes)
        assert kiln.io.load(state["source"]).input_names == ["x"]
    payload = pickle.dumps(runner)
    assert len(payload) < len(pickle.dumps(state["source"])) + 500  # no plan, no arrays
    after = pickle.loads(payload)
    assert after.graph is not runner.graph  # loads its own copy
    assert_same(after({"x": x})["output"], model_fn(x))


def test_a_graph_source_is_copied_not_finalized() -> None:
    graph = model_graph()
    runner = BatchRunner(graph)
    runner({"x": features(2)})
    assert not graph.is_finalized()
    assert runner.graph is not graph


def test_concurrent_first_calls_load_the_model_once(
    model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kiln.io.batch as batch_module

    loads: list[object] = []

    def counting_load(source: Any) -> ModelGraph:
        loads.append(source)
        return kiln.io.load(source)

    monkeypatch.setattr(batch_module, "load", counting_load)
    runner = BatchRunner(model_path)
    start = threading.Barrier(4)
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        start.wait()
        results[i] = runner({"x": features(10, start=i)})["output"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1
    for i in range(4):
        assert_same(results[i], model_fn(features(10, start=i)))


# -- errors -------------------------------------------------------------------------------


def test_a_missing_input_column_names_the_input_and_the_keys(model_path: Path) -> None:
    runner = BatchRunner(model_path)
    with pytest.raises(InputMismatchError) as info:
        runner({"data": features(3), "id": np.arange(3)})
    message = str(info.value)
    assert "['x']" in message and "'data'" in message and "'id'" in message
    assert "rename_columns" in message


def test_a_bare_array_call_points_to_predict(model_path: Path) -> None:
    with pytest.raises(ArgumentTypeError, match=r"runner\.predict"):
        BatchRunner(model_path)(features(3))  # type: ignore[arg-type]


def test_a_model_of_another_type_is_refused() -> None:
    with pytest.raises(ArgumentTypeError, match="ModelGraph; got list"):
        BatchRunner([1, 2, 3])  # type: ignore[arg-type]


def test_a_wrong_dtype_names_the_input(model_path: Path) -> None:
    with pytest.raises(InputMismatchError, match="input 'x': expected dtype float32"):
        BatchRunner(model_path)({"x": features(3).astype(np.float64)})


# -- Spark's make_predict_fn / predict shape (plain arrays; pyspark is not needed) --------


def two_in_two_out(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    return {"total": x + y, "scaled": x * np.float32(3)}


def test_predict_fn_shape_for_spark(model_path: Path) -> None:
    runner = pickle.loads(pickle.dumps(BatchRunner(model_path)))
    predict = runner.make_predict_fn()  # what Spark calls once per executor
    x = features(100)
    assert_same(predict(x), model_fn(x))  # one input column -> one array, one output -> array

    xs = (np.ones((8,), np.float32), np.ones((8,), np.float32))
    graph = kiln.trace(two_in_two_out, *xs, dynamic_axes={"x": [0], "y": [0]}).graph
    predict2 = BatchRunner(graph).make_predict_fn()
    a, b = features(5)[:, 0], features(5)[:, 1]
    out = predict2(a, b)  # one positional array per input column, in input order
    assert isinstance(out, dict) and sorted(out) == ["scaled", "total"]  # a StructType's fields
    expected = two_in_two_out(a, b)
    assert_same(out["total"], expected["total"])
    assert_same(out["scaled"], expected["scaled"])
    with pytest.raises(InputMismatchError, match=r"in the order \['x', 'y'\]; got 1 array"):
        predict2(a)


# -- Dask map_blocks ----------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("dask") is None, reason="dask is not installed")
def test_dask_map_blocks(model_path: Path) -> None:
    import dask.array as da

    runner = BatchRunner(model_path)
    x_np = features(1000)
    x = da.from_array(x_np, chunks=(128, 16))  # 8 blocks, the last one of 104 rows
    y = x.map_blocks(
        runner.predict,
        dtype=np.float32,
        chunks=(x.chunks[0], (4,)),
        meta=np.empty((0, 4), np.float32),
    )
    got = y.compute(scheduler="threads", num_workers=2)
    assert_same(got, model_fn(x_np))


# -- Ray Data -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def ray_session() -> Any:
    """One local Ray (2 CPUs) shared by every Ray test of the run, shut down at the end."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'ray[data]')")
    import ray
    import ray.data

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        ignore_reinit_error=True,
    )
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    yield ray
    ray.shutdown()


def run_with_deadline(fn: Any, seconds: float) -> Any:
    """``fn()``, failing the test (instead of hanging the suite) if it takes over ``seconds``."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"the Ray Data pipeline did not finish in {seconds} s")
    if errors:
        raise errors[0]
    return result[0]


def test_ray_data_map_batches_with_two_workers(ray_session: Any, model_path: Path) -> None:
    import ray.data

    def add_features(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = batch["id"].astype(np.float32)[:, None]  # as features() computes them
        x = np.sin(rows * 0.01 * np.arange(1, 17, dtype=np.float32)).astype(np.float32)
        return {"id": batch["id"], "x": x}

    # The input is computed first (materialize): on a 2-CPU Ray, two actors holding a CPU each
    # would leave none for a read task running beside them (Ray Data then waits forever).
    ds = ray.data.range(1000).map_batches(add_features, batch_format="numpy").materialize()
    ds = ds.map_batches(
        kiln.io.BatchRunner,
        fn_constructor_args=(str(model_path),),
        batch_format="numpy",
        batch_size=128,
        compute=ray.data.ActorPoolStrategy(size=2),  # concurrency=2 before Ray 2.51
    )
    rows = run_with_deadline(ds.take_all, seconds=240)
    assert len(rows) == 1000
    ids = np.array([r["id"] for r in rows])
    got = np.stack([r["output"] for r in rows])
    assert sorted(rows[0]) == ["id", "output"]
    np.testing.assert_array_equal(np.sort(ids), np.arange(1000))  # every row, once
    assert_same(got, model_fn(features(1000)[ids]))
