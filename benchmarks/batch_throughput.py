"""Batch inference throughput: kiln.io.BatchRunner in process and on Ray Data, against a plain
onnxruntime loop over the same rows.

The model is an MLP (64 -> 512 -> 512 -> 8, ReLU, float32) traced with ``kiln.trace`` with a
dynamic batch axis and saved as ONNX. Every row of the table runs the same 100,000 rows in
batches of 128:

* onnxruntime loop: one ``InferenceSession`` (session creation not timed), ``sess.run`` per batch;
* BatchRunner: ``runner({"x": batch})`` per batch in this process (the first call loads and
  finalizes the graph, choosing the engine; its time is included and also shown apart);
* Ray Data: ``ds.map_batches(kiln.io.BatchRunner, fn_constructor_args=(path,),
  batch_format="numpy", batch_size=128, compute=ActorPoolStrategy(size=N))`` over a
  materialized dataset of 16 blocks, timed end to end (actor start included) and from the
  first batch back to the last.

Every runner uses one thread per worker (``OMP_NUM_THREADS=1``, ``OPENBLAS_NUM_THREADS=1``, set
before NumPy loads; onnxruntime ``intra_op_num_threads=1``), as Ray does for an actor with one
CPU, so the rows compare one core's work and the concurrency=2 row shows what a second worker
adds (``--threads N`` changes it). Outputs are checked against the onnxruntime loop (the Ray
runs by an order-free checksum).
Run: ``python benchmarks/batch_throughput.py`` (about a minute on 2 cores; ``--no-ray`` skips
Ray). Timings on a shared machine are noisy; compare rows of one run.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path


def _threads_from_argv() -> str:
    """``--threads N`` read before NumPy (and its BLAS) loads; argparse checks it later."""
    argv = sys.argv[1:]
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return "1"


if __name__ == "__main__":
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _threads_from_argv()

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import machine  # noqa: E402

import kiln  # noqa: E402

FEATURES, HIDDEN, CLASSES = 64, 512, 8


def make_model(path: Path) -> None:
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((FEATURES, HIDDEN)) / 8).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, HIDDEN)) / 32).astype(np.float32)
    w3 = (rng.standard_normal((HIDDEN, CLASSES)) / 32).astype(np.float32)
    b1, b2 = np.zeros(HIDDEN, np.float32), np.zeros(HIDDEN, np.float32)

    def mlp(x: np.ndarray) -> np.ndarray:
        h = np.maximum(x @ w1 + b1, 0)
        h = np.maximum(h @ w2 + b2, 0)
        return h @ w3

    example = np.ones((4, FEATURES), np.float32)
    traced = kiln.trace(mlp, example, dynamic_axes={"x": [0]})
    traced.optimize()
    kiln.io.save(traced.graph, path)


def batches(x: np.ndarray, size: int) -> list[np.ndarray]:
    return [x[i : i + size] for i in range(0, len(x), size)]


def time_onnxruntime(
    path: Path, x: np.ndarray, size: int, threads: int
) -> tuple[float, np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    sess.run(None, {"x": x[:size]})  # warm up
    start = time.perf_counter()
    outs = [sess.run(None, {"x": b})[0] for b in batches(x, size)]
    return time.perf_counter() - start, np.concatenate(outs)


def time_runner(
    path: Path, x: np.ndarray, size: int, engine: str | None
) -> tuple[float, float, str, np.ndarray]:
    """Seconds of the first call (load, finalize) and of the other calls, the engine that
    ran, and the outputs."""
    runner = kiln.io.BatchRunner(path, engine=engine)
    parts = batches(x, size)
    start = time.perf_counter()
    first = runner({"x": parts[0]})["output"]  # loads and finalizes
    first_call = time.perf_counter() - start
    start = time.perf_counter()
    outs = [first] + [runner({"x": b})["output"] for b in parts[1:]]
    loop = time.perf_counter() - start
    program = runner.graph.program
    assert program is not None
    return first_call, loop, program.engine, np.concatenate(outs)


def time_ray(path: Path, x: np.ndarray, size: int, workers: int) -> tuple[float, float, float]:
    """Seconds for all rows end to end (actor start included), the rows/s after the first
    batch came back (the workers' steady pace), and the outputs' checksum."""
    import ray.data

    blocks = np.array_split(x, 16)  # 16 blocks, so that workers share the rows
    ds = ray.data.from_numpy(blocks).rename_columns({"data": "x"}).materialize()
    start = time.perf_counter()
    out = ds.map_batches(
        kiln.io.BatchRunner,
        fn_constructor_args=(str(path),),
        batch_format="numpy",
        batch_size=size,
        compute=ray.data.ActorPoolStrategy(size=workers),  # concurrency=workers before Ray 2.51
    )
    total, count, first, first_rows = 0.0, 0, 0.0, 0
    for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
        if not count:
            first, first_rows = time.perf_counter(), len(batch["output"])
        total += float(batch["output"].astype(np.float64).sum())
        count += len(batch["output"])
    end = time.perf_counter()
    assert count == len(x), (count, len(x))
    return end - start, (count - first_rows) / max(end - first, 1e-9), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="threads per worker (BLAS, ORT)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray Data rows")
    args = parser.parse_args()

    rng = np.random.default_rng(1)
    x = rng.standard_normal((args.rows, FEATURES)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mlp.onnx"
        make_model(path)
        rows: list[tuple[str, float, str]] = []

        seconds, expected = time_onnxruntime(path, x, args.batch, args.threads)
        rows.append(("onnxruntime InferenceSession loop", seconds, "session creation not timed"))

        first, loop, chosen, got = time_runner(path, x, args.batch, None)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
        note = f"engine {chosen} (kiln's choice); first call (load, finalize) {first * 1e3:.0f} ms"
        rows.append(("BatchRunner in process", first + loop, note))

        if not args.no_ray:
            import ray

            start = time.perf_counter()
            ray.init(
                num_cpus=os.cpu_count() or 2,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            ray.data.DataContext.get_current().enable_progress_bars = False
            logging.getLogger("ray.data").setLevel(logging.WARNING)
            ray_start = time.perf_counter() - start
            try:
                for workers in (1, 2):
                    seconds, steady, checksum = time_ray(path, x, args.batch, workers)
                    assert np.isclose(checksum, float(expected.astype(np.float64).sum()), 1e-4)
                    note = f"end to end, actor start included; {steady:,.0f} rows/s after batch 1"
                    rows.append((f"Ray Data map_batches, concurrency={workers}", seconds, note))
            finally:
                ray.shutdown()
            print(f"(ray.init: {ray_start:.1f} s, not counted)")

    m = machine()
    print(
        f"\n{args.rows:,} rows x {FEATURES} float32, batches of {args.batch}; MLP "
        f"{FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}; {args.threads} thread(s) per worker; "
        f"{m['cores']} cores, Python {m['python']}\n"
    )
    print("| runner | seconds | rows/s | notes |")
    print("|---|---:|---:|---|")
    for label, seconds, note in rows:
        print(f"| {label} | {seconds:.2f} | {args.rows / seconds:,.0f} | {note} |")


if __name__ == "__main__":
    main()
