"""The built-in transforms of the graphs issue: structure and numerics before/after."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.optim import (
    DefaultsOptions,
    OptimizeReport,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    fold_shapes,
    specialize_graph,
)

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32


def test_dead_code_is_removed():
    def f(x):
        unused = kiln.exp(x)  # noqa: F841 - dead on purpose
        return x + 1.0

    g = traced(f, np.ones(3, f32))
    out, n = eliminate_dead_code(g)
    assert n == 1 and ops(out) == ["Add"]
    out.verify()
    assert_close(run(out, np.ones(3, f32))[0], np.full(3, 2, f32))


def test_common_subexpressions_merge():
    g = traced(lambda x: kiln.exp(x) + kiln.exp(x), np.ones(3, f32))
    out, n = eliminate_common_subexpressions(g)
    out, _ = eliminate_dead_code(out)
    assert n >= 1 and ops(out) == ["Exp", "Add"]
    out.verify()
    x = np.arange(3, dtype=f32)
    assert_close(run(out, x)[0], run(g, x)[0])


def test_constants_fold_within_the_size_limit():
    w = np.arange(4, dtype=f32)
    g = traced(lambda x: x + kiln.exp(kiln.asarray(w)), np.ones(4, f32))
    out, n = fold_constants(g)
    out, _ = eliminate_dead_code(out)
    assert n == 1 and ops(out) == ["Add"]
    out.verify()
    assert_close(run(out, np.ones(4, f32))[0], 1 + np.exp(w))
    limited, n = fold_constants(g, DefaultsOptions(constant_folding_limit=2))
    assert n == 0 and limited is g


def test_shapes_fold_once_sizes_are_known_and_stay_symbolic_otherwise():
    def f(x):
        return x.reshape(x.shape[0], -1)

    dynamic = traced(f, np.ones((2, 3, 4), f32), dynamic_axes={"x": [0]})
    d, n = fold_shapes(dynamic)
    assert n == 0 and "Shape" in ops(d)
    special = specialize_graph(dynamic, {"s0": 5})
    special.verify()
    s, n = fold_shapes(special)
    s, _ = eliminate_dead_code(s)
    assert n == 2 and ops(s) == ["Reshape"]
    s.verify()
    x = np.arange(60, dtype=f32).reshape(5, 3, 4)
    assert_close(run(s, x)[0], x.reshape(5, 12))
    assert run(dynamic, np.ones((7, 3, 4), f32))[0].shape == (7, 12)


def test_optimize_reaches_a_fixed_point_and_a_second_run_changes_nothing():
    w = np.ones(3, f32)
    g = traced(lambda x: kiln.exp(x) + kiln.exp(x) + kiln.exp(kiln.asarray(w)), np.ones(3, f32))
    x = np.arange(3, dtype=f32)
    before = run(g, x)[0]
    report = g.optimize()
    assert isinstance(report, OptimizeReport) and report.fixed_point
    assert report.nodes_before == 5 and report.nodes_after == 3
    assert report.total_rewrites > 0 and "fold_constants" in str(report)
    assert report.to_dict()["iterations"] == report.iterations
    assert '"fixed_point": true' in report.to_json()
    g.verify()
    assert_close(run(g, x)[0], before)
    again = g.optimize()
    assert again.total_rewrites == 0 and again.iterations == 1


def test_iteration_cap_and_explicit_transforms():
    g = traced(lambda x: kiln.exp(x) + kiln.exp(x), np.ones(3, f32))
    report = g.optimize([eliminate_common_subexpressions], max_num_iterations=1)
    assert report.iterations == 1 and not report.fixed_point
    with pytest.raises(TypeError, match="Transform"):
        g.optimize([lambda graph: graph])
    with pytest.raises(ValueError, match="at least 1"):
        g.optimize(max_num_iterations=0)


def test_optimizing_a_finalized_graph_keeps_it_runnable():
    g = traced(lambda x: kiln.exp(x) + kiln.exp(x), np.ones(2, f32))
    g.finalize()
    g.optimize()
    assert g.is_finalized()
    assert_close(g.run([np.zeros(2, f32)])[0], np.full(2, 2, f32))
