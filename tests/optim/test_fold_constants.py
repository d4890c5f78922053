"""fold_constants: structure and numerics before/after, the size limit, and the folder it uses."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.folding import FOLDING_LIMITS, fits, fold
from kiln.ops.registry import get_op
from kiln.optim import DefaultsOptions, eliminate_dead_code, fold_constants

from ..numerics import assert_close
from .graphs import ops, run, traced

f32 = np.float32
RNG = np.random.default_rng(3)
W = RNG.standard_normal(4).astype(f32)
X = RNG.standard_normal(4).astype(f32)


def folded(g, options=None):
    """Fold, drop what folding left unused, verify, compare numerics; return the new graph."""
    out, n = fold_constants(g, options)
    out, _ = eliminate_dead_code(out)
    out.verify()
    assert out.output_names == g.output_names
    assert_close(run(out, X)[0], run(g, X)[0])
    return out, n


def test_a_chain_over_constants_folds_in_one_pass():
    g = traced(lambda x: x + kiln.exp(kiln.asarray(W)) * 2.0, X)
    assert ops(g) == ["Exp", "Mul", "Add"]
    out, n = folded(g)
    assert n == 2 and ops(out) == ["Add"]
    assert_close(run(out, X)[0], X + np.exp(W) * f32(2))
    again, m = fold_constants(out)
    assert m == 0 and again is out


def test_folded_constants_keep_the_values_names_and_are_read_only():
    g = traced(lambda x: x * kiln.exp(kiln.asarray(W)), X)
    exp_out = g.nodes[0].outputs[0]
    out, n = fold_constants(g)
    assert n == 1
    (c,) = [c for c in out.constants if c.value is exp_out]
    assert not c.data.flags.writeable
    assert_close(c.data, np.exp(W))


def test_nodes_reading_inputs_are_left_alone():
    g = traced(lambda x: kiln.exp(x) * 2.0, X)
    out, n = fold_constants(g)
    assert n == 0 and out is g


def test_results_over_the_limit_stay_computed():
    g = traced(lambda x: x + kiln.exp(kiln.asarray(W)), X)
    out, n = folded(g, DefaultsOptions(constant_folding_limit=W.size))
    assert n == 1 and ops(out) == ["Add"]
    out, n = fold_constants(g, DefaultsOptions(constant_folding_limit=W.size - 1))
    assert n == 0 and out is g


def test_the_default_limit_is_the_optimizers_folding_limit():
    assert DefaultsOptions().constant_folding_limit == FOLDING_LIMITS.optimizer == 1 << 16


def test_fold_runs_the_kernel_and_freezes_its_results():
    a, b = np.arange(3, dtype=np.int64), np.int64(4) * np.ones(3, np.int64)
    (total,) = fold(get_op("Add"), [a, b], {}, limit=3)
    assert total.tolist() == [4, 5, 6] and not total.flags.writeable
    assert fold(get_op("Add"), [a, b], {}, limit=2) is None  # measured after computing
    assert fold(get_op("Add"), [a, b], {}, limit=None) is not None


def test_fold_with_known_shapes_never_computes_a_result_too_big():
    expand = get_op("Expand")
    huge = np.array([1 << 20, 1 << 20], dtype=np.int64)
    shapes = [(1 << 20, 1 << 20)]
    assert fold(expand, [np.ones(1, f32), huge], {}, limit=1 << 16, shapes=shapes) is None
    assert not fits(shapes, 1 << 16) and fits([(2, 3), (4,)], 10)
    assert not fits([(kiln.symbolic.symbol("n"), 3)], 1 << 16)  # a symbolic size never fits


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_folding_matches_the_unfolded_graph_per_dtype(dtype):
    w = np.arange(1, 5, dtype=dtype)
    x = np.arange(4, dtype=dtype)
    g = traced(lambda x: x - kiln.abs(kiln.asarray(w) * kiln.asarray(w)), x)
    out, n = fold_constants(g)
    out.verify()
    assert n == 2 and ops(out)[-1] == "Sub"
    assert_close(run(out, x)[0], run(g, x)[0])
