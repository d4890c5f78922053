"""The shortcut of ``Slice``'s and SliceUpdate's ``infer`` (``x[i]``, ``t[box] = v``) for a box
whose bounds are all known (a tracer infers each new box of an unrolled loop): it gives exactly
what ``Slice``'s general ``infer`` gives, and leaves every box that it refuses to it."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from kiln.errors import OpArgumentError
from kiln.ops.registry import TensorType, get_op
from kiln.ops.shape import _slice_infer, _slice_infer_general, static_box

_BIG = np.iinfo(np.int64).max


def _vector(values: list[int], dtype: str = "int64") -> TensorType:
    return TensorType(np.dtype(dtype), (len(values),), tuple(values))


def _random_box(rng: np.random.Generator, ndim: int) -> list[TensorType | None]:
    n = int(rng.integers(0, ndim + 2))  # sometimes more bounds than axes
    bound = [-_BIG, -9, -4, -1, 0, 1, 2, 3, 5, 9, _BIG]
    starts = [int(v) for v in rng.choice(bound, n)]
    ends = [int(v) for v in rng.choice(bound, n + int(rng.random() < 0.1))]
    dtype = str(rng.choice(["int64", "int64", "int32", "int8"]))
    box: list[TensorType | None] = [_vector(starts, dtype), _vector(ends)]
    if rng.random() < 0.7:
        axes = [int(a) for a in rng.integers(-ndim - 1, ndim + 1, n)]
        box.append(_vector(axes))
    elif rng.random() < 0.5:
        box.append(None)  # axes omitted, steps given
    if len(box) == 3 and rng.random() < 0.7:
        box.append(_vector([int(s) for s in rng.choice([-3, -1, 0, 1, 2], n)]))
    return box


def test_known_boxes_infer_as_slice_does() -> None:
    rng = np.random.default_rng(0)
    answered = refused = 0
    for _ in range(3000):
        ndim = int(rng.integers(0, 4))
        data = TensorType(np.dtype("float64"), tuple(int(d) for d in rng.integers(0, 6, ndim)))
        box = _random_box(rng, ndim)
        fast = static_box(data.shape, box)
        try:
            (expected,) = _slice_infer_general([data, *box])
        except Exception:  # noqa: BLE001 - Slice refuses: the shortcut must not answer
            assert fast is None, (data, box)
            with pytest.raises(type(sys.exc_info()[1])):  # and Slice's infer raises the same
                _slice_infer([data, *box], {})
            refused += 1
            continue
        assert _slice_infer([data, *box], {}) == [expected]
        if fast is not None:
            assert fast == expected.shape, (data, box)
            answered += 1
    assert answered > 300 and refused > 300  # both kinds were drawn


def test_slice_update_infer_keeps_its_errors() -> None:
    op = get_op("kiln.SliceUpdate")
    data = TensorType(np.dtype("float64"), (4, 5))
    ok = op.infer([data, TensorType(data.dtype, (1, 1)), _vector([1, 2]), _vector([2, 3])], {})
    assert ok[0].shape == (4, 5)
    with pytest.raises(OpArgumentError, match=r"'updates' has shape \(2, 1\)"):
        op.infer([data, TensorType(data.dtype, (2, 1)), _vector([1, 2]), _vector([2, 3])], {})
    with pytest.raises(OpArgumentError, match="repeats an axis"):
        box = [_vector([1, 2]), _vector([2, 3]), _vector([0, -2])]
        op.infer([data, TensorType(data.dtype, (1, 1)), *box], {})
    with pytest.raises(OpArgumentError, match="steps must not be 0"):
        box = [_vector([1]), _vector([2]), _vector([0]), _vector([0])]
        op.infer([data, TensorType(data.dtype, (1, 5)), *box], {})
