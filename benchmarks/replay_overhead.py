"""Per-call cost of a compiled call on tiny tensors: guard, flatten, execute, unflatten.

For 2 and 16 tensor leaves of 8 float32 each, the same function (``x * 2 + 1`` per leaf) runs as:
NumPy eager (the target called on arrays), kiln eager (on kiln tensors), kiln compiled (graph
replay), and jax.jit when jax is installed. Run: ``python benchmarks/replay_overhead.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import machine, median_seconds, write_json  # noqa: E402

import kiln  # noqa: E402


def target(xs):
    return [x * 2.0 + 1.0 for x in xs]


def main() -> dict:
    results = {"machine": machine(), "rows": []}
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_platforms", "cpu")
    except ImportError:
        jax = None
    for leaves in (2, 16):
        xs = [np.full(8, i, np.float32) for i in range(leaves)]
        row = {"leaves": leaves}
        row["numpy_eager_us"] = median_seconds(lambda xs=xs: target(xs)) * 1e6
        kxs = [kiln.asarray(x) for x in xs]
        row["kiln_eager_us"] = median_seconds(lambda kxs=kxs: target(kxs)) * 1e6
        compiled = kiln.compile(target)
        compiled(xs)
        row["kiln_compiled_us"] = median_seconds(lambda f=compiled, xs=xs: f(xs)) * 1e6
        assert compiled.recapture_count == 0 and compiled.state is kiln.State.Compiled
        if jax is not None:
            jitted = jax.jit(lambda ys: [y * 2.0 + 1.0 for y in ys])
            jxs = [jnp.asarray(x) for x in xs]

            def run_jax(jitted=jitted, jxs=jxs):
                for y in jitted(jxs):
                    y.block_until_ready()

            row["jax_jit_us"] = median_seconds(run_jax) * 1e6
        results["rows"].append(row)
    print(
        f"{'leaves':>6} {'numpy eager':>12} {'kiln eager':>11} {'kiln compiled':>14} "
        f"{'jax.jit':>9} {'kiln/jax':>9} {'kiln/numpy':>11}"
    )
    for row in results["rows"]:
        jax_us = row.get("jax_jit_us")
        ratio_jax = f"{row['kiln_compiled_us'] / jax_us:9.2f}" if jax_us else f"{'-':>9}"
        print(
            f"{row['leaves']:>6} {row['numpy_eager_us']:10.1f}us {row['kiln_eager_us']:9.1f}us "
            f"{row['kiln_compiled_us']:12.1f}us "
            f"{(f'{jax_us:7.1f}us' if jax_us else '-'):>9} {ratio_jax} "
            f"{row['kiln_compiled_us'] / row['numpy_eager_us']:11.2f}"
        )
    write_json(Path(__file__).parent / "results" / "replay_overhead.json", results)
    return results


if __name__ == "__main__":
    main()
