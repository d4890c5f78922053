"""Linear-algebra operators: infer on symbolic shapes and the errors for bad shapes. Values over
the samples are checked by tests/ops/test_samples.py."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import OpArgumentError, OpTypeError
from kiln.ops import get_op
from kiln.ops.linalg import einsum_shape, parse_einsum
from kiln.ops.registry import TensorType
from kiln.symbolic import symbol
from kiln.tensor import dispatch

B, S, N = symbol("B"), symbol("S"), symbol("N")
F32 = np.dtype(np.float32)


def _infer(op: str, shapes, dtype=F32, **attrs):
    opdef = get_op(op)
    types = [None if s is None else TensorType(np.dtype(dtype), s) for s in shapes]
    return opdef.infer(types, opdef.bind_attrs(attrs))


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ((B, S, 64), (64, 32), (B, S, 32)),
        ((B, 1, S, 8), (4, 8, S), (B, 4, S, S)),
        ((64,), (B, 64, 3), (B, 3)),
        ((B, S, 64), (64,), (B, S)),
        ((64,), (64,), ()),
        ((S, N), (N, 2), (S, 2)),
        ((3, S), (7, 2), (3, 2)),  # a symbolic contraction size is checked at run time
    ],
)
def test_matmul_infer_symbolic(a, b, expected) -> None:
    (out,) = _infer("MatMul", [a, b])
    assert out.shape == expected and out.dtype == F32


def test_matmul_contraction_mismatch_names_shapes_and_axis() -> None:
    with pytest.raises(OpArgumentError) as info:
        _infer("MatMul", [(B, 3, 5), (4, 2)])
    message = str(info.value)
    assert "MatMul" in message and "(B, 3, 5)" in message and "(4, 2)" in message
    assert "axis -1 of A has size 5" in message and "axis -2 of B has size 4" in message
    with pytest.raises(OpArgumentError, match="axis -1 of B has size 4"):
        _infer("MatMul", [(3, 5), (4,)])


def test_matmul_other_errors() -> None:
    with pytest.raises(OpArgumentError, match="MatMul: input 'A' must have rank >= 1"):
        _infer("MatMul", [(), (3,)])
    with pytest.raises(OpArgumentError, match="MatMul: shapes .* do not broadcast"):
        _infer("MatMul", [(2, 3, 4), (5, 4, 2)])
    with pytest.raises(OpTypeError, match="MatMul: input 'A' has dtype int8"):
        _infer("MatMul", [(2, 2), (2, 2)], dtype=np.int8)
    opdef = get_op("MatMul")
    mixed = [TensorType(F32, (2, 2)), TensorType(np.dtype(np.float64), (2, 2))]
    with pytest.raises(OpTypeError, match="must have the same dtype"):
        opdef.infer(mixed, {})


def test_gemm_infer() -> None:
    assert _infer("Gemm", [(B, 4), (4, 5), (5,)])[0].shape == (B, 5)
    assert _infer("Gemm", [(4, B), (5, 4), None], transA=1, transB=1)[0].shape == (B, 5)
    with pytest.raises(OpArgumentError, match=r"Gemm: inputs 'A' \(3, 4\).*4 columns.*5 rows"):
        _infer("Gemm", [(3, 4), (5, 6)])
    with pytest.raises(OpArgumentError, match=r"Gemm: input 'C' \(4,\) does not broadcast"):
        _infer("Gemm", [(3, 4), (4, 5), (4,)])
    with pytest.raises(OpArgumentError, match="Gemm: input 'A' must be a matrix"):
        _infer("Gemm", [(2, 3, 4), (4, 5)])


def test_gemm_values() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((2, 3), np.float32)
    c = np.asarray([1.0, -1.0], np.float32)
    (y,) = dispatch(
        "Gemm",
        [kiln.asarray(a), kiln.asarray(b), kiln.asarray(c)],
        {"transB": 1, "alpha": 2.0, "beta": 3.0},
    )
    np.testing.assert_allclose(np.asarray(y), 2.0 * a @ b.T + 3.0 * c)


@pytest.mark.parametrize(
    "equation, shapes, expected",
    [
        ("ij,jk->ik", [(B, 4), (4, 5)], (B, 5)),
        ("ij,jk", [(B, 4), (4, 5)], (B, 5)),  # implicit: labels seen once, sorted
        ("ba", [(2, 3)], (3, 2)),  # implicit output sorts: "ab"
        ("...ij,...jk->...ik", [(B, 1, 3, 4), (S, 4, 2)], (B, S, 3, 2)),
        ("...ij,jk", [(B, S, 3, 4), (4, 2)], (B, S, 3, 2)),  # implicit keeps '...' first
        ("ii->i", [(N, N)], (N,)),
        ("ii", [(3, 3)], ()),
        ("i...->...", [(4, B, S)], (B, S)),
        ("b i d, b j d -> b i j", [(B, S, 8), (B, N, 8)], (B, S, N)),
        ("ij,->ij", [(2, 3), ()], (2, 3)),
    ],
)
def test_einsum_infer(equation, shapes, expected) -> None:
    (out,) = _infer("Einsum", shapes, equation=equation)
    assert out.shape == expected


@pytest.mark.parametrize(
    "equation, shapes, message",
    [
        ("ij,jk->ik", [(2, 3)], "has 2 input term"),
        ("ij->i", [(2, 3, 4)], "input 0 has rank 3"),
        ("ij,jk->ik", [(2, 3), (4, 5)], "label 'j' has size 3 in one input and 4"),
        ("ij->k", [(2, 3)], "output label 'k' does not appear"),
        ("...i->i", [(2, 3)], r"no '\.\.\.' to hold them"),
        ("ii->i", [(2, 3)], "label 'i' repeats in input 0"),
        ("i1->i", [(2, 3)], "invalid character '1'"),
        ("ij->ii", [(2, 3)], "the output repeats a label"),
        ("...i...->i", [(2, 3)], "more than one ellipsis"),
    ],
)
def test_einsum_errors(equation, shapes, message) -> None:
    with pytest.raises(OpArgumentError, match=message):
        _infer("Einsum", shapes, equation=equation)


def test_einsum_parse_and_shape_helpers() -> None:
    assert parse_einsum("Ab,bC", 2).output == ("A", "C")
    assert parse_einsum("...a,a", 2).output == ("...",)
    assert einsum_shape("ij,ij->ij", [(2, 3), (1, 3)]) == (2, 3)


def test_einsum_kernel_dtypes() -> None:
    a = np.arange(6, dtype=np.int8).reshape(2, 3)
    (y,) = dispatch("Einsum", [kiln.asarray(a), kiln.asarray(a)], {"equation": "ij,ij->i"})
    assert np.asarray(y).dtype == np.int8
    np.testing.assert_array_equal(np.asarray(y), np.einsum("ij,ij->i", a, a))
