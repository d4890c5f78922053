"""Tensor's NumPy-style methods, attached by kiln.functions.tensor_methods, match what
kiln/tensor.py declares for type checkers (its ``if TYPE_CHECKING:`` block in the class)."""

from __future__ import annotations

import ast
import importlib
import inspect

import numpy as np

import kiln
from kiln.functions.tensor_methods import set_tensor_methods

tensor_module = importlib.import_module("kiln.tensor")  # kiln.tensor is also a function


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _declared() -> set[str]:
    tree = ast.parse(inspect.getsource(tensor_module))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    blocks = [n for n in cls.body if isinstance(n, ast.If) and _is_type_checking(n.test)]
    assert len(blocks) == 1
    return {n.name for n in blocks[0].body if isinstance(n, ast.FunctionDef)}


def _attached() -> set[str]:
    names = set()
    for name, member in vars(kiln.Tensor).items():
        fn = member.fget if isinstance(member, property) else member
        if getattr(fn, "__module__", "").startswith("kiln.functions"):
            names.add(name)
    return names


def test_the_declared_methods_are_the_attached_ones() -> None:
    assert _declared() == _attached()


def test_attaching_again_changes_nothing() -> None:
    t = kiln.tensor([[1.0, 2.0], [3.0, 4.0]])
    before = ((1 - t.T) @ t).sum(axis=0).tolist()
    set_tensor_methods()
    assert ((1 - t.T) @ t).sum(axis=0).tolist() == before
    assert kiln.Tensor.__add__.__doc__ == kiln.add.__doc__  # help() shows the function's doc
    assert np.add(t, 1).tolist() == (t + 1).tolist()  # the NumPy protocols are attached too


def test_complex_operand_is_captured() -> None:
    # complex scalars and arrays promote as NumPy's (tests/functions/test_complex.py), and a
    # compiled function records them without a warning.
    x = np.array([1.0, -2.0, 0.5])
    t = kiln.asarray(x)
    for got, want in [
        (-2j * np.pi * t, -2j * np.pi * x),
        (t * np.complex64(1j), x * np.complex64(1j)),
        (t + np.array([1j, 2j, 3j]), x + np.array([1j, 2j, 3j])),
    ]:
        got = np.asarray(got)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)

    def dft(v):
        k = np.arange(v.shape[0])
        return np.exp(-2j * np.pi * np.outer(k, k) / v.shape[0]) @ v

    f = kiln.compile(dft, fullgraph=True)
    np.testing.assert_allclose(f(x), dft(x), rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(f(x * 2), dft(x * 2), rtol=1e-15, atol=1e-15)
