"""Every batching rule of the registry: the operator over a batch equals the operator run once
per batch element, stacked (bit for bit, unless the rule says it reassociates).

Driven by the registry: each operator with a rule (its own, or the elementwise one) is run on
its samples, with each input in turn (and all inputs at once) batched over three variants of
the sample's data, the others shared.
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln.ir.builder import GraphBuilder
from kiln.ops import batching
from kiln.ops.dispatch import run_kernel
from kiln.ops.registry import all_ops, get_op

from ..numerics import assert_close

RULED = [op for op in all_ops() if batching.batching_rule(op) is not None]
SAMPLES_PER_OP = 8


def _variants(x: np.ndarray) -> list[np.ndarray]:
    """Three contiguous arrays of ``x``'s type: itself, its elements shuffled, and reversed
    (contiguous: NumPy's float32 transcendental loops round differently on strided data)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    shuffled = flat[np.random.default_rng(0).permutation(flat.size)] if flat.size else flat
    return [v.reshape(x.shape).copy() for v in (flat, shuffled, flat[::-1])]


def _evaluate(builder: GraphBuilder, outputs) -> list[np.ndarray]:
    values = {id(c.value): c.data for c in builder.constants}
    for node in builder.nodes:
        args = [None if v is None else values[id(v)] for v in node.inputs]
        results = run_kernel(get_op(node.op), args, dict(node.attrs))
        results = results if isinstance(results, (tuple, list)) else (results,)
        for v, r in zip(node.outputs, results):
            values[id(v)] = np.asarray(r)
    return [values[id(v)] for v in outputs]


def _unbatched(op, inputs, attrs) -> list[np.ndarray] | None:
    try:
        with np.errstate(all="ignore"):
            out = run_kernel(op, list(inputs), dict(attrs))
    except Exception:
        return None
    return [np.asarray(r) for r in (out if isinstance(out, (tuple, list)) else (out,))]


def _check(op, sample, flags) -> bool:
    """Whether the pattern ``flags`` was exercised (and, if so, it passed)."""
    bound = op.bind_attrs(sample.attrs)
    per_element = []
    for k in range(3):
        inputs = [
            None if x is None else (_variants(np.asarray(x))[k] if b else x)
            for x, b in zip(sample.inputs, flags)
        ]
        out = _unbatched(op, inputs, bound)
        if out is None:
            return False
        per_element.append(out)
    first = per_element[0]
    if any(
        len(o) != len(first)
        or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(o, first))
        for o in per_element
    ):
        return False  # the variants are not one batch (e.g. a shuffled shape input)
    builder = GraphBuilder()
    args = []
    for x, b in zip(sample.inputs, flags):
        if x is None:
            args.append(None)
        elif b:
            args.append(builder.add_constant(np.stack(_variants(np.asarray(x)))))
        else:
            args.append(builder.add_constant(np.asarray(x)))
    rule = batching.batching_rule(op)
    try:
        outputs = rule.fn(builder, op.qualified_name, args, list(flags), bound)
    except Exception as exc:  # the rule may decline by returning None, never by raising
        raise AssertionError(f"{op.name}: the batching rule raised {exc!r}") from exc
    if outputs is None:
        return False
    with np.errstate(all="ignore"):
        got = _evaluate(builder, outputs)
    for j, value in enumerate(got):
        want = np.stack([o[j] for o in per_element])
        assert value.dtype == want.dtype, f"{op.name} output {j}: dtype"
        assert value.shape == want.shape, f"{op.name} output {j}: {value.shape} != {want.shape}"
        if rule.reassociates:
            assert_close(value, want, what=f"{op.name} output {j}")
        else:
            np.testing.assert_array_equal(value, want, err_msg=f"{op.name} output {j}", strict=True)
    return True


@pytest.mark.parametrize("op", RULED, ids=lambda op: op.qualified_name)
def test_batched_equals_stacked(op) -> None:
    exercised = 0
    for sample in list(op.samples())[:SAMPLES_PER_OP]:
        present = [i for i, x in enumerate(sample.inputs) if x is not None]
        patterns = [tuple(i in present for i in range(len(sample.inputs)))]
        patterns += [tuple(i == j for i in range(len(sample.inputs))) for j in present]
        for flags in dict.fromkeys(patterns):
            exercised += _check(op, sample, flags)
    assert exercised, f"{op.name}: no sample exercised its batching rule"


def test_rules_cover_the_loop_operators() -> None:
    """The operators unrolled loops are made of have rules."""
    names = {op.qualified_name for op in RULED}
    for name in (
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Sqrt",
        "Where",
        "Cast",
        "Slice",
        "Gather",
        "Squeeze",
        "Unsqueeze",
        "Reshape",
        "Transpose",
        "Concat",
        "ReduceSum",
        "ReduceMax",
        "ArgMax",
        "Softmax",
        "MatMul",
        "kiln.Dot",
    ):
        assert name in names, name


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "a_shape, b_shape, flags",
    [
        ((64,), (64,), (True, False)),  # row @ w: one dot per row
        ((64,), (64,), (True, True)),
        ((64,), (64, 7), (True, False)),  # row @ W
        ((9, 64), (64,), (True, False)),
        ((9, 64), (64, 7), (True, False)),
        ((9, 64), (64,), (False, True)),  # W @ column
        ((64,), (64, 7), (False, True)),
        ((9, 64), (64, 7), (False, True)),
        ((9, 64), (64, 7), (True, True)),
    ],
)
def test_matmul_batches_bit_for_bit_at_blas_sizes(dtype, a_shape, b_shape, flags):
    """Where BLAS would sum in another order were the batch folded into a bigger matrix, the
    rule keeps one product per iteration: equal to the loop's products bit for bit."""
    rng = np.random.default_rng(1)
    a = [rng.standard_normal(a_shape).astype(dtype) for _ in range(5)]
    b = [rng.standard_normal(b_shape).astype(dtype) for _ in range(5)]
    want = np.stack(
        [np.matmul(a[i] if flags[0] else a[0], b[i] if flags[1] else b[0]) for i in range(5)]
    )
    builder = GraphBuilder()
    args = [builder.add_constant(np.stack(v) if flag else v[0]) for v, flag in zip((a, b), flags)]
    (out,) = batching.matmul.fn(builder, "MatMul", args, list(flags), {})
    np.testing.assert_array_equal(_evaluate(builder, [out])[0], want, strict=True)
