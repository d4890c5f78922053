"""Shape-family operators: value propagation over symbolic sizes, errors, and the cases the
generic sample harness does not single out (Slice clamping, Resize formulas, Split forms)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import OpArgumentError
from kiln.ops.dispatch import run_kernel
from kiln.ops.registry import DATA_DEPENDENT_SHAPE, TensorType, get_op
from kiln.ops.shape import INT64_MAX, INT64_MIN
from kiln.symbolic import SymDim, evaluate, is_fresh, symbol
from kiln.tensor import dispatch

from ..numerics import assert_close

B = symbol("B")
S = symbol("S")
F32 = np.dtype("float32")
I64 = np.dtype("int64")


def infer(op: str, types: list[TensorType | None], **attrs) -> list[TensorType]:
    opdef = get_op(op)
    return list(opdef.infer(types, opdef.bind_attrs(attrs)))


def vec(*values) -> TensorType:
    """A 1-D int64 type whose contents are known (ints or symbolic sizes)."""
    return TensorType(I64, (len(values),), tuple(values))


def run(op: str, *inputs, **attrs):
    tensors = [None if x is None else kiln.asarray(x) for x in inputs]
    return [np.asarray(t) for t in dispatch(op, tensors, attrs)]


# -- value propagation ---------------------------------------------------------------------


def test_shape_value_is_the_symbolic_shape() -> None:
    (out,) = infer("Shape", [TensorType(F32, (B, 3))])
    assert out.shape == (2,) and out.dtype == I64
    assert out.value == (B, 3)
    (tail,) = infer("Shape", [TensorType(F32, (B, 3, S))], start=-2)
    assert tail.value == (3, S)


def test_size_value_is_the_product() -> None:
    (out,) = infer("Size", [TensorType(F32, (B, 3))])
    assert out.shape == () and out.value == (B * 3,)


def test_reshape_infers_minus_one_symbolically() -> None:
    (out,) = infer("Reshape", [TensorType(F32, (B, 3, 4)), vec(B, -1)])
    assert out.shape == (B, 12)
    (flat,) = infer("Reshape", [TensorType(F32, (B, S)), vec(-1)])
    assert flat.shape == (B * S,)
    (copy,) = infer("Reshape", [TensorType(F32, (B, 6)), vec(0, 2, 3)])
    assert copy.shape == (B, 2, 3)


def test_shape_arithmetic_chain_stays_symbolic() -> None:
    x = TensorType(F32, (B, 3, 4))
    (shape,) = infer("Shape", [x])
    (first,) = infer("Gather", [shape, TensorType(I64, (1,), (0,))], axis=0)
    assert first.value == (B,)
    (sliced,) = infer("Slice", [shape, vec(0), vec(1)])
    assert sliced.value == (B,)
    (target,) = infer("Concat", [sliced, vec(-1)], axis=0)
    assert target.value == (B, -1)
    (out,) = infer("Reshape", [x, target])
    assert out.shape == (B, 12)


def test_unsqueeze_squeeze_keep_value() -> None:
    scalar = TensorType(I64, (), (B,))
    (one,) = infer("Unsqueeze", [scalar, vec(0)])
    assert one.shape == (1,) and one.value == (B,)
    (back,) = infer("Squeeze", [one, vec(0)])
    assert back.shape == () and back.value == (B,)


def test_consumers_of_shape_values() -> None:
    (e,) = infer("Expand", [TensorType(F32, (1, 4)), vec(B, 1)])
    assert e.shape == (B, 4)
    (c,) = infer("ConstantOfShape", [vec(B, 3)])
    assert c.shape == (B, 3) and c.dtype == F32
    (t,) = infer("Tile", [TensorType(F32, (2, S)), vec(B, 2)])
    assert t.shape == (2 * B, 2 * S)
    (r,) = infer("Range", [TensorType(I64, (), (0,)), TensorType(I64, (), (B,)), vec1(1)])
    assert r.shape == (B,)
    (p,) = infer("Pad", [TensorType(F32, (B, 3)), vec(1, 0, 2, 1)])
    assert p.shape == (B + 3, 4)
    (u,) = infer("Unsqueeze", [TensorType(F32, (B,)), vec(-1)])
    assert u.shape == (B, 1)


def vec1(v: int) -> TensorType:
    return TensorType(I64, (), (v,))


def test_small_results_carry_values() -> None:
    (r,) = infer("Range", [vec1(0), vec1(4), vec1(2)])
    assert r.value == (0, 2)
    (c,) = infer("Constant", [], value_ints=(3, 4))
    assert c.value == (3, 4)
    (k,) = infer("ConstantOfShape", [vec(3)], value=np.array([5], np.int64))
    assert k.value == (5, 5, 5)
    (e,) = infer("Expand", [TensorType(I64, (1,), (B,)), vec(2)])
    assert e.value == (B, B)


def test_nonzero_size_is_a_fresh_symbol() -> None:
    (a,) = infer("NonZero", [TensorType(F32, (2, 3))])
    (b,) = infer("NonZero", [TensorType(F32, (2, 3))])
    assert a.shape[0] == 2 and isinstance(a.shape[1], SymDim)
    assert a.shape[1] != b.shape[1]
    assert get_op("NonZero").has(DATA_DEPENDENT_SHAPE)


# -- shape-like inputs computed at run time ------------------------------------------------


def runtime(n: int) -> TensorType:
    """A 1-D int64 input of ``n`` entries whose contents are known only when the graph runs."""
    return TensorType(I64, (n,))


def pattern(shape) -> tuple:
    """``shape`` with each fresh size (known when the graph runs) written ``"?"``."""
    return tuple("?" if is_fresh(d) else d for d in shape)


@pytest.mark.parametrize(
    "op, types, attrs, expected",
    [
        ("Reshape", [TensorType(F32, (2, 3, 4)), runtime(2)], {}, ("?", "?")),
        ("Reshape", [TensorType(F32, (B, 3)), runtime(1)], {}, (B * 3,)),
        ("Expand", [TensorType(F32, (3, 1)), runtime(3)], {}, ("?", 3, "?")),
        ("Expand", [TensorType(F32, (2, 3, 4)), runtime(1)], {}, (2, 3, 4)),
        ("Unsqueeze", [TensorType(F32, (B, 3)), runtime(2)], {}, ("?",) * 4),
        ("Unsqueeze", [TensorType(F32, ()), runtime(2)], {}, (1, 1)),
        ("Squeeze", [TensorType(F32, (1, 3, 1)), runtime(2)], {}, ("?",)),
        ("Tile", [TensorType(F32, (B, 3)), runtime(2)], {}, ("?", "?")),
        ("ConstantOfShape", [runtime(3)], {}, ("?", "?", "?")),
        ("Slice", [TensorType(F32, (B, 5)), runtime(1), runtime(1)], {}, ("?", 5)),
        ("Slice", [TensorType(F32, (B, 5)), vec(0), vec(2), runtime(1)], {}, ("?", "?")),
        ("Slice", [TensorType(F32, (B, 5)), vec(0), vec(2), vec(1), runtime(1)], {}, (B, "?")),
        ("Pad", [TensorType(F32, (B, 5)), runtime(4)], {}, ("?", "?")),
        ("Pad", [TensorType(F32, (B, 5)), runtime(2), None, vec(1)], {}, (B, "?")),
        ("Pad", [TensorType(F32, (B, 5)), vec(1, 1), None, runtime(1)], {}, ("?", "?")),
        (
            "Resize",
            [TensorType(F32, (1, 2, 4)), None, None, runtime(2)],
            {"axes": (1, 2)},
            (1, "?", "?"),
        ),
    ],
)
def test_shape_inputs_computed_at_run_time_give_fresh_sizes(op, types, attrs, expected) -> None:
    (out,) = infer(op, types, **attrs)
    assert pattern(out.shape) == expected


def test_split_sizes_computed_at_run_time() -> None:
    outs = infer("Split", [TensorType(F32, (B, 6)), runtime(3)], axis=1)
    assert [pattern(o.shape) for o in outs] == [(B, "?")] * 3
    (whole,) = infer("Split", [TensorType(F32, (B, 6)), runtime(1)], axis=1)
    assert whole.shape == (B, 6)


@pytest.mark.parametrize(
    "op, inputs, attrs, words",
    [
        ("Slice", [np.ones((2, 3)), [0], [1], [2]], {}, "Slice: input 'axes' holds axis 2, out of"),
        ("Slice", [np.ones((2, 3)), [0, 0], [1, 1], [1, -1]], {}, "Slice: input 'axes' repeats"),
        ("Slice", [np.ones((2, 3)), [0], [1], [0], [0]], {}, "Slice: steps must not be 0"),
        (
            "Split",
            [np.ones((2, 3)), [1, 1]],
            {"axis": 1, "num_outputs": None},
            r"Split: split sizes \(1, 1\) .* 3",
        ),
        (
            "Split",
            [np.ones((2, 3)), [4, -1]],
            {"axis": 1, "num_outputs": None},
            "Split: split sizes .* >= 0",
        ),
        ("Pad", [np.ones((2, 3)), [0, -2, 0, -2]], {}, "Pad: pads .* negative size"),
        ("Pad", [np.ones((2, 3)), [1, 1], None, [5]], {}, "Pad: input 'axes' holds axis 5"),
    ],
)
def test_kernels_check_shape_inputs_known_only_at_run_time(op, inputs, attrs, words) -> None:
    arrays = [None if x is None else np.asarray(x) for x in inputs]
    arrays = [a.astype(np.int64) if a is not None and a.dtype.kind == "i" else a for a in arrays]
    with pytest.raises(OpArgumentError, match=words):
        run_kernel(get_op(op), arrays, {"mode": "constant"} if op == "Pad" else attrs)


@pytest.mark.parametrize("start", [0, 1, 3, -1, -2, -7, INT64_MAX, INT64_MIN])
@pytest.mark.parametrize("end", [0, 2, 5, -1, -3, -9, INT64_MAX, INT64_MIN])
@pytest.mark.parametrize("step", [1, 2, -1, -3])
def test_slice_on_symbolic_axis_matches_python(start: int, end: int, step: int) -> None:
    (out,) = infer("Slice", [TensorType(F32, (B, 2)), vec(start), vec(end), vec(0), vec(step)])
    assert out.shape[1] == 2
    for size in (0, 1, 2, 5, 8):
        expected = len(range(size)[slice(start, end, step)])
        assert evaluate(out.shape[0], {"B": size}) == expected, (size, start, end, step)


def test_full_slice_of_symbolic_axis_is_the_axis() -> None:
    (out,) = infer("Slice", [TensorType(F32, (B,)), vec(0), vec(INT64_MAX)])
    assert out.shape == (B,)
    (rev,) = infer("Slice", [TensorType(F32, (B,)), vec(-1), vec(INT64_MIN), vec(0), vec(-1)])
    assert rev.shape == (B,)


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, types, attrs, words",
    [
        ("Transpose", [TensorType(F32, (2, 3))], {"perm": (0, 0)}, ["Transpose", "perm"]),
        ("Reshape", [TensorType(F32, (2, 3)), vec(-1, -1)], {}, ["Reshape", "-1"]),
        ("Reshape", [TensorType(F32, (2, 3)), vec(4, 2)], {}, ["Reshape", "6 elements"]),
        ("Reshape", [TensorType(F32, (2, 3)), vec(4, -1)], {}, ["Reshape", "multiple"]),
        ("Reshape", [TensorType(F32, (2, 3)), TensorType(I64, (B,))], {}, ["'shape'", "static"]),
        ("Expand", [TensorType(F32, (3,)), TensorType(I64, (B,))], {}, ["Expand", "rank"]),
        ("Unsqueeze", [TensorType(F32, (3,)), TensorType(I64, (B,))], {}, ["'axes'", "constant_"]),
        ("Squeeze", [TensorType(F32, (1, 3)), TensorType(I64, (B,))], {}, ["Squeeze", "rank"]),
        ("Squeeze", [TensorType(F32, (1, 3)), TensorType(I64, (3,))], {}, ["Squeeze", "3 entries"]),
        ("Tile", [TensorType(F32, (3,)), TensorType(I64, (2,))], {}, ["Tile", "2 entries"]),
        ("Split", [TensorType(F32, (6,)), TensorType(I64, (S,))], {}, ["'split'", "length"]),
        ("Pad", [TensorType(F32, (2, 3)), TensorType(I64, (3,))], {}, ["Pad", "pads"]),
        ("Resize", [TensorType(F32, (1, 4)), None, None, TensorType(I64, (3,))], {}, ["sizes"]),
        ("ConstantOfShape", [TensorType(I64, (B,))], {}, ["ConstantOfShape", "rank"]),
        ("Slice", [TensorType(F32, (3,)), vec(0), TensorType(I64, (B,))], {}, ["'ends'"]),
        ("Tile", [TensorType(F32, (3,)), vec(1, 2)], {}, ["Tile", "repeats"]),
        ("Squeeze", [TensorType(F32, (3, 1)), vec(0)], {}, ["Squeeze", "size 3"]),
        ("Squeeze", [TensorType(F32, (B, 1))], {}, ["Squeeze", "axes"]),
        ("Concat", [TensorType(F32, (2, 3)), TensorType(F32, (3, 3))], {"axis": 1}, ["Concat"]),
        ("Gather", [TensorType(F32, (3,)), TensorType(I64, (1,), (3,))], {}, ["out of bounds"]),
        ("Split", [TensorType(F32, (6,))], {}, ["Split", "num_outputs"]),
        ("Split", [TensorType(F32, (6,)), vec(2, 2)], {}, ["Split", "add up"]),
        ("Flatten", [TensorType(F32, (2, 3))], {"axis": 3}, ["Flatten", "axis"]),
        ("Pad", [TensorType(F32, (2, 3)), vec(1, 1)], {}, ["Pad", "pads"]),
        ("Resize", [TensorType(F32, (1, 4))], {}, ["Resize", "exactly one"]),
        ("Constant", [], {}, ["Constant", "exactly one"]),
    ],
)
def test_errors_name_op_and_argument(op, types, attrs, words) -> None:
    with pytest.raises(OpArgumentError) as info:
        infer(op, types, **attrs)
    for word in words:
        assert word in str(info.value), str(info.value)


# -- numerics beyond the samples -----------------------------------------------------------


def test_slice_sentinels_and_negative_steps() -> None:
    x = np.arange(10, dtype=np.int32)
    cases = [
        (INT64_MAX, INT64_MIN, -1, x[::-1]),
        (-1, INT64_MIN, -2, x[::-2]),
        (0, INT64_MAX, 3, x[::3]),
        (8, 2, -2, x[8:2:-2]),
        (-20, 20, 1, x[:]),
        (5, 5, 1, x[5:5]),
    ]
    for start, end, step, expected in cases:
        (got,) = run("Slice", x, np.array([start]), np.array([end]), None, np.array([step]))
        assert_close(got, expected, what=f"Slice {start}:{end}:{step}")


def _resize1(values, *, size=None, scale=None, **attrs):
    x = np.asarray(values, np.float32).reshape(1, -1)
    if size is not None:
        (y,) = run("Resize", x, None, None, np.array([1, size], np.int64), **attrs)
    else:
        (y,) = run("Resize", x, None, np.array([1, scale], np.float32), **attrs)
    return y.reshape(-1)


def test_resize_textbook_values() -> None:
    # Nearest, asymmetric, x2: every input repeated.
    got = _resize1([1, 2, 3], scale=2.0, coordinate_transformation_mode="asymmetric")
    assert_close(got, np.array([1, 1, 2, 2, 3, 3], np.float32))
    # Linear, align_corners: the corners stay, the middle is the mean.
    got = _resize1([0, 1], size=3, mode="linear", coordinate_transformation_mode="align_corners")
    assert_close(got, np.array([0, 0.5, 1], np.float32))
    # Linear, half_pixel, x2: quarter points, edges clamped.
    got = _resize1([0, 1], scale=2.0, mode="linear")
    assert_close(got, np.array([0, 0.25, 0.75, 1], np.float32))
    # pytorch_half_pixel to one element takes the first one.
    got = _resize1(
        [4, 8], size=1, mode="linear", coordinate_transformation_mode="pytorch_half_pixel"
    )
    assert_close(got, np.array([4], np.float32))
    # Downscale with floor(size * scale) = floor(5 * 0.5) = 2.
    got = _resize1([0, 1, 2, 3, 4], scale=0.5, coordinate_transformation_mode="asymmetric")
    assert_close(got, np.array([0, 2], np.float32))


@pytest.mark.parametrize("mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes_on_half_points(mode: str) -> None:
    # asymmetric x2 puts the outputs at 0, 0.5, 1, 1.5, 2, 2.5 exactly.
    got = _resize1(
        [10, 11, 12], scale=2.0, nearest_mode=mode, coordinate_transformation_mode="asymmetric"
    )
    down = [10, 10, 11, 11, 12, 12]
    up = [10, 11, 11, 12, 12, 12]  # 2.5 rounds up to 3, clamped to the last element
    assert got.tolist() == (down if mode in ("round_prefer_floor", "floor") else up)


def test_split_forms() -> None:
    x = np.arange(7, dtype=np.float64)
    parts = run("Split", x, num_outputs=3)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6]]
    parts = run("Split", x, np.array([2, 0, 5], np.int64))
    assert [p.shape for p in parts] == [(2,), (0,), (5,)]
    types = infer("Split", [TensorType(F32, (B, 4))], axis=-1, num_outputs=2)
    assert [t.shape for t in types] == [(B, 2), (B, 2)]
    types = infer("Split", [TensorType(F32, (S,))], num_outputs=2)
    assert len(types) == 2 and all(isinstance(t.shape[0], SymDim) for t in types)
    with pytest.raises(OpArgumentError, match="not both"):
        infer("Split", [TensorType(F32, (4,)), vec(2, 2)], num_outputs=2)


def test_reshape_allowzero() -> None:
    x = np.zeros((0, 3), np.float32)
    (copied,) = run("Reshape", x, np.array([0, 3]))
    assert copied.shape == (0, 3)
    (zero,) = run("Reshape", x, np.array([3, 0]), allowzero=1)
    assert zero.shape == (3, 0)
    with pytest.raises(OpArgumentError, match="both 0 and -1"):
        run("Reshape", x, np.array([0, -1]), allowzero=1)


def test_scatter_nd_accumulates_repeats() -> None:
    data = np.zeros(4, np.float32)
    idx = np.array([[1], [1], [3]], np.int64)
    upd = np.array([1, 2, 5], np.float32)
    (out,) = run("ScatterND", data, idx, upd, reduction="add")
    assert out.tolist() == [0, 3, 0, 5]
    assert data.tolist() == [0, 0, 0, 0]  # the input is untouched


def test_gather_nd_batch_dims() -> None:
    data = np.arange(24).reshape(2, 3, 4)
    idx = np.array([[[0, 1]], [[2, 3]]], np.int64)
    (out,) = run("GatherND", data, idx, batch_dims=1)
    assert out.tolist() == [[data[0, 0, 1]], [data[1, 2, 3]]]


# -- Resize: cubic, antialias, tf_crop_and_resize, keep_aspect_ratio_policy ----------------


def run1(op: str, *inputs, **attrs) -> np.ndarray:
    """The first output of :func:`run`."""
    return run(op, *inputs, **attrs)[0]


def _keys_cubic(d: float, a: float = -0.75) -> float:
    d = abs(d)
    if d <= 1:
        return (a + 2) * d**3 - (a + 3) * d**2 + 1
    return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a if d < 2 else 0.0


def test_resize_cubic_matches_the_keys_kernel():
    x = np.array([[[[1.0, 4.0, 2.0, 8.0, 3.0]]]], np.float32)
    scales = np.array([1, 1, 1, 2], np.float32)
    got = run1("Resize", x, None, scales, mode="cubic")[0, 0, 0]
    want = []
    for j in range(10):
        c = (j + 0.5) / 2 - 0.5  # half_pixel
        base = int(np.floor(c))
        total = 0.0
        for t in range(base - 1, base + 3):  # four taps, edge-clamped
            total += _keys_cubic(c - t) * float(x[0, 0, 0, min(max(t, 0), 4)])
        want.append(total)
    assert_close(got, np.array(want, np.float32))


def test_resize_tf_crop_and_resize_extrapolates():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    roi = np.array([0, 0, 0.5, 0.5, 1, 1, 1.5, 1.5], np.float32)  # half outside the input
    sizes = np.array([1, 1, 3, 3], np.int64)
    got = run1(
        "Resize",
        x,
        roi,
        None,
        sizes,
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-1.0,
    )[0, 0]
    # source coordinate 1.5 + k * 1.5 along each axis: 1.5, 3.0 inside, 4.5 outside
    assert_close(got[:2, :2], np.array([[7.5, 9.0], [13.5, 15.0]], np.float32))
    assert (got[2] == -1).all() and (got[:, 2] == -1).all()


def test_resize_keep_aspect_ratio_policy_sizes():
    x = TensorType(F32, (1, 1, 4, 6))
    sizes = TensorType(np.dtype(np.int64), (2,), (2, 2))
    for policy, shape in (("not_larger", (1, 1, 1, 2)), ("not_smaller", (1, 1, 2, 3))):
        (t,) = infer("Resize", [x, None, None, sizes], axes=(2, 3), keep_aspect_ratio_policy=policy)
        assert t.shape == shape
        data = np.ones((1, 1, 4, 6), np.float32)
        out = run1(
            "Resize",
            data,
            None,
            None,
            np.array([2, 2]),
            axes=(2, 3),
            mode="linear",
            keep_aspect_ratio_policy=policy,
        )
        assert out.shape == shape


def test_resize_antialias_averages_when_downsampling():
    x = np.array([[0.0, 0.0, 4.0, 4.0]], np.float32)
    sizes = np.array([1, 2], np.int64)
    plain = run1("Resize", x, None, None, sizes, mode="linear")
    smooth = run1("Resize", x, None, None, sizes, mode="linear", antialias=1)
    # without antialias the taps at 0.5 / 2.5 straddle equal pairs; with it, a tent twice as
    # wide weights the 4 neighbours 1:3:3:1 (normalised), mixing in the other half
    assert_close(plain, np.array([[0.0, 4.0]], np.float32))
    assert_close(smooth, np.array([[0.5, 3.5]], np.float32))


def test_range_half_precision():
    got = run1("Range", np.float16(1.0), np.float16(2.0), np.float16(0.25))
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.array([1.0, 1.25, 1.5, 1.75], np.float16))
