"""Every registered operator against its NumPy reference, over all of its samples.

For each sample: the eager dispatch result equals the reference (or, where the kernel is itself
the NumPy reference, the kernel's own result), and the operator's ``infer`` rule agrees with the
dtype and shape the kernel actually produced.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.dispatch import run_kernel
from kiln.ops.registry import NEW_ARRAY, TensorType, all_ops
from kiln.symbolic import SymDim
from kiln.tensor import dispatch

from ..numerics import assert_close

CASES = [
    pytest.param(op, sample, id=f"{op.qualified_name}-{i}-{sample.name}")
    for op in all_ops()
    for i, sample in enumerate(op.samples())
]


def test_every_operator_has_samples() -> None:
    missing = [op.qualified_name for op in all_ops() if not list(op.samples())]
    assert not missing, f"operators without samples: {missing}"


def _as_tensor(x):
    return None if x is None else kiln.asarray(x)


@pytest.mark.parametrize("op, sample", CASES)
def test_sample_matches_reference(op, sample) -> None:
    inputs = [_as_tensor(x) for x in sample.inputs]
    outputs = dispatch(op, inputs, sample.attrs)
    bound = op.bind_attrs(sample.attrs)
    if sample.reference is not None:
        expected = sample.reference(*sample.inputs, **bound)
    else:
        expected = run_kernel(op, list(sample.inputs), bound)
    if not isinstance(expected, (tuple, list)):
        expected = (expected,)
    assert len(outputs) == len(expected)
    for i, (got, want) in enumerate(zip(outputs, expected)):
        assert_close(got, want, rtol=sample.rtol, atol=sample.atol, what=f"{op.name} output {i}")


@pytest.mark.parametrize("op, sample", CASES)
def test_infer_agrees_with_kernel(op, sample) -> None:
    bound = op.bind_attrs(sample.attrs)
    types = [None if x is None else kiln.asarray(x).type for x in sample.inputs]
    inferred = op.infer(types, bound)
    produced = run_kernel(op, list(sample.inputs), bound)
    assert len(inferred) == len(produced)
    for t, array in zip(inferred, produced):
        assert isinstance(t, TensorType)
        assert t.dtype == array.dtype, f"{op.name}: infer says {t.dtype}, kernel gave {array.dtype}"
        assert len(t.shape) == array.ndim, f"{op.name}: infer rank {t.shape} vs {array.shape}"
        for d, n in zip(t.shape, array.shape):
            assert isinstance(d, SymDim) or d == n, f"{op.name}: infer {t.shape} vs {array.shape}"


def test_sample_inputs_are_arrays() -> None:
    for op in all_ops():
        for sample in op.samples():
            for x in sample.inputs:
                assert x is None or isinstance(x, np.ndarray), op.name


VALUES_ONLY = [
    pytest.param(op, sample, id=f"{op.qualified_name}-{i}-{sample.name}")
    for op in all_ops()
    if any(formal.values_only for formal in op.inputs)
    for i, sample in enumerate(op.samples())
]


@pytest.mark.parametrize("op, sample", VALUES_ONLY)
def test_no_output_views_an_input_read_for_its_values(op, sample) -> None:
    # Input.values_only lets the plans hand such an output out without a copy
    # (kiln.exec.plan.output_copies): the kernel must never return a view of that input.
    assert VALUES_ONLY  # (Reshape, Slice, Expand, ... declare theirs)
    produced = run_kernel(op, list(sample.inputs), op.bind_attrs(sample.attrs))
    for k, (formal, x) in enumerate(zip(op.inputs, sample.inputs)):
        if formal.values_only and x is not None:
            for out in produced:
                assert not np.shares_memory(np.asarray(out), x), (op.name, k)


NEW_ARRAYS = [
    pytest.param(op, sample, id=f"{op.qualified_name}-{i}-{sample.name}")
    for op in all_ops()
    if op.has(NEW_ARRAY)
    for i, sample in enumerate(op.samples())
]


@pytest.mark.parametrize("op, sample", NEW_ARRAYS)
def test_a_new_array_kernel_never_returns_an_input_or_a_view_of_one(op, sample) -> None:
    # NEW_ARRAY lets the NumPy plan write into such a result in place (a mask write into a
    # scatter's result): the kernel must allocate every output.
    produced = run_kernel(op, list(sample.inputs), op.bind_attrs(sample.attrs))
    for out in produced:
        for x in sample.inputs:
            if x is not None and np.asarray(out).size and np.asarray(x).size:
                assert not np.shares_memory(np.asarray(out), x), op.name


def test_new_array_operators_are_marked() -> None:
    marked = {op.name for op in all_ops() if op.has(NEW_ARRAY)}
    assert {"ScatterND", "ScatterElements", "Concat", "Gather", "TopK"} <= marked
