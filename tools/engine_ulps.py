"""How far each optional engine's floating-point results are from the NumPy plan's, per
operator and dtype: the measurement behind ``FLOAT64_ULPS`` in ``kiln/ops/elementwise.py`` (and
Softmax/LogSoftmax in ``kiln/ops/nn.py``), which keep float64 nodes off an engine whose results
differ (SPEC 5b, issue 10, docs/reliability.md).

    python tools/engine_ulps.py                 # float64 and float32, both engines
    python tools/engine_ulps.py --dtypes float64 --values 50000

Each line: dtype, operator, then per engine ``differs/max-ulp`` (the fraction of elements not
bit-identical to the NumPy plan, and the largest difference in units of the last place of
NumPy's value), or ``refused`` when the engine declines the node (its limits, or no lowering).
Operators run on uniform values in a range suited to their domain.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import kiln
from kiln.exec import build_plan
from kiln.ops.registry import ELEMENTWISE, REQUIRED, all_ops
from kiln.tensor import dispatch

EXTRA = ("Softmax", "LogSoftmax", "ReduceLogSumExp", "ReduceLogSum")
POSITIVE = {"Log", "Sqrt", "ReduceLogSum"}
UNIT = {"Asin", "Acos", "Atanh"}


def inputs(op: str, count: int, dtype: str, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    xs = [rng.uniform(-4, 4, n).astype(dtype) for _ in range(count)]
    if op == "Acosh":
        xs = [np.abs(x) + 1 for x in xs]
    elif op in UNIT:
        xs = [x / 4 for x in xs]
    elif op in POSITIVE:
        xs = [np.abs(x) for x in xs]
    elif op == "Pow":
        xs = [np.abs(xs[0]) + 0.01, xs[1] * 5]
    return [x.reshape(-1, 100) for x in xs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="*", default=["float64", "float32"])
    parser.add_argument("--engines", nargs="*", default=["jax", "onnxruntime"])
    parser.add_argument("--values", type=int, default=20_000)
    parser.add_argument("--all", action="store_true", help="print identical operators too")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    n = max(100, args.values // 100 * 100)
    for dtype in args.dtypes:
        for op in all_ops():
            if op.domain or not (op.has(ELEMENTWISE) or op.name in EXTRA):
                continue
            if any(a.default is REQUIRED for a in op.attrs.values()):
                continue
            count = sum(1 for i in op.inputs if not i.optional and not i.variadic) or 1
            if count > 2:
                continue
            xs = inputs(op.name, count, dtype, n, rng)
            try:
                graph = kiln.trace(lambda *a, op=op: dispatch(op, list(a), {}), *xs).graph
                graph.reassociation_allowed = True  # (measuring the engines' rounding)
                want = build_plan(graph, None, "numpy").run_arrays(xs)[0]
            except Exception:  # noqa: BLE001 - not an operator of this dtype
                continue
            if want.dtype.kind != "f":
                continue
            row = []
            for engine in args.engines:
                try:
                    got = build_plan(graph, None, engine).run_arrays(xs)[0]
                except Exception:  # noqa: BLE001 - refused, or not installed
                    row.append(f"{engine}:refused")
                    continue
                same = (got == want) | (np.isnan(got) & np.isnan(want))
                ok = np.isfinite(want) & np.isfinite(got) & (want != 0)
                w = want[ok].astype(np.float64)
                ulps = np.abs(got[ok].astype(np.float64) - w) / np.spacing(np.abs(want[ok]))
                worst = float(ulps.max()) if ulps.size else 0.0
                row.append(f"{engine}:{(~same).mean():.3f}/{worst:.0f}u")
            if args.all or any(not r.endswith(":0.000/0u") for r in row):
                print(dtype, op.name, *row, flush=True)


if __name__ == "__main__":
    main()
