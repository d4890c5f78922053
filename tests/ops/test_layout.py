"""``kiln.ops.layout.layout_sensitive``: which NumPy kernels round otherwise on strided
operands than on contiguous ones, measured on this machine."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.ops.dispatch import run_kernel
from kiln.ops.layout import layout_sensitive
from kiln.ops.registry import ELEMENTWISE, all_ops, get_op

F64 = np.dtype(np.float64)


def test_integer_and_boolean_arithmetic_is_never_layout_sensitive():
    for name, dtype in [("Add", np.int64), ("Mul", np.int32), ("And", np.bool_)]:
        dt = np.dtype(dtype)
        assert not layout_sensitive(get_op(name), (dt, dt), {})


def test_exact_float_arithmetic_is_not_layout_sensitive():
    for name in ["Add", "Sub", "Div", "Max"]:
        assert not layout_sensitive(get_op(name), (F64, F64), {})
    assert not layout_sensitive(get_op("Sqrt"), (F64,), {})


def test_operators_that_are_not_elementwise_are_not_measured():
    assert not layout_sensitive(get_op("MatMul"), (F64, F64), {})


FLOAT_SAMPLES = [
    pytest.param(op, sample, id=f"{op.qualified_name}-{i}")
    for op in all_ops()
    if op.has(ELEMENTWISE)
    for i, sample in enumerate(op.samples())
    if sample.inputs
    and all(x is not None and x.ndim == 1 and x.size > 1 for x in sample.inputs)
    and any(x.dtype.kind in "fc" for x in sample.inputs)
]


@pytest.mark.parametrize("op, sample", FLOAT_SAMPLES)
def test_a_kernel_said_insensitive_gives_the_same_bits_reversed(op, sample):
    # the measurement's probe must not miss what the operator's own samples show
    inputs = list(sample.inputs)
    attrs = op.bind_attrs(sample.attrs)
    if layout_sensitive(op, tuple(x.dtype for x in inputs), attrs):
        return
    with np.errstate(all="ignore"):
        forward = run_kernel(op, inputs, attrs)
        backward = run_kernel(op, [x[::-1] for x in inputs], attrs)
    for a, b in zip(forward, backward):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[::-1], strict=True)
