"""Methods (SPEC 5, issue 11 item 4): ``@kiln.compile`` on a method binds ``self`` (descriptor
protocol) and the bound function shares the function's cache, keyed by the instance's identity,
so two instances never share a capture; ``kiln.compile(obj.method)`` compiles a bound method;
staticmethods and classmethods bind as Python binds them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import kiln
from kiln import State
from kiln.capture.compiled import BoundCompiledFunction

F32 = np.float32


class Layer:
    """A layer holding weights and a static (non-array) setting."""

    def __init__(self, w, scale):
        self.w = w
        self.scale = scale
        self.calls = 0

    @kiln.compile
    def forward(self, x):
        self.calls += 1
        return np.tanh(x @ self.w) * self.scale


def test_a_compiled_method_binds_self_and_two_instances_keep_their_own_captures():
    x = np.linspace(-1, 1, 6, dtype=F32).reshape(2, 3)
    a = Layer(np.eye(3, dtype=F32), 2.0)
    b = Layer(np.full((3, 3), 0.5, F32), 3.0)  # same shapes and dtypes, other values
    for _ in range(3):
        for layer in (a, b):
            got = layer.forward(x)
            want = np.tanh(x @ layer.w) * layer.scale
            assert type(got) is np.ndarray and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-6)
    assert a.calls == 1 and b.calls == 1  # each captured once, then replayed
    assert isinstance(a.forward, BoundCompiledFunction)
    assert a.forward.__func__ is Layer.forward and a.forward.__self__ is a
    assert a.forward == a.forward and a.forward != b.forward
    # One cache, belonging to the function: both instances' captures are in it.
    info = Layer.forward.cache_info()
    assert info.entries >= 2 and a.forward.state is State.Compiled
    assert "forward" in kiln.explain(a.forward)


def test_the_class_attribute_is_the_compiled_function_and_takes_self_explicitly():
    x = np.ones((1, 3), F32)
    a = Layer(np.eye(3, dtype=F32), 1.0)
    assert isinstance(Layer.__dict__["forward"], kiln.CompiledFunction)
    np.testing.assert_allclose(Layer.forward(a, x), np.tanh(x), rtol=1e-6)


@dataclasses.dataclass
class Affine:
    """A dataclass: value equality and no __hash__, so only its identity can key a capture."""

    w: np.ndarray
    b: np.ndarray

    @kiln.compile
    def __call__(self, x):
        return x @ self.w + self.b


def test_an_unhashable_instance_is_keyed_by_identity():
    x = np.ones((2, 2), F32)
    p = Affine(np.eye(2, dtype=F32), np.zeros(2, F32))
    q = Affine(2 * np.eye(2, dtype=F32), np.ones(2, F32))
    for _ in range(2):
        np.testing.assert_allclose(p(x), x, rtol=1e-6)
        np.testing.assert_allclose(q(x), 2 * x + 1, rtol=1e-6)


def test_equal_instances_do_not_share_a_capture():
    class Scaled:
        def __init__(self, k):
            self.k = k

        def __eq__(self, other):  # every instance compares equal and hashes alike
            return isinstance(other, Scaled)

        def __hash__(self):
            return 0

        @kiln.compile
        def apply(self, x):
            return x * self.k

    x = np.ones(3, F32)
    two, five = Scaled(2.0), Scaled(5.0)
    for _ in range(2):
        np.testing.assert_allclose(two.apply(x), 2 * x)
        np.testing.assert_allclose(five.apply(x), 5 * x)


def test_compiling_a_bound_method_serves_that_instance():
    class Plain:
        def __init__(self, k):
            self.k = k

        def run(self, x):
            return x * self.k + 1

    p = Plain(3.0)
    f = kiln.compile(p.run)
    x = np.arange(3, dtype=F32)
    for _ in range(2):
        got = f(x)
        assert type(got) is np.ndarray
        np.testing.assert_allclose(got, x * 3 + 1)
    assert f.state is State.Compiled and f.input_names == ["x"]


class Ops:
    factor = 3.0

    @kiln.compile
    @staticmethod
    def double(x):
        return x * 2

    @kiln.compile
    @classmethod
    def triple(cls, x):
        return x * cls.factor


class MoreOps(Ops):
    factor = 5.0


@pytest.mark.parametrize("via", ["class", "instance"])
def test_staticmethods_and_classmethods_bind_as_python_binds_them(via):
    x = np.arange(4, dtype=F32)
    ops, more = (Ops, MoreOps) if via == "class" else (Ops(), MoreOps())
    for _ in range(2):
        np.testing.assert_allclose(ops.double(x), x * 2)
        np.testing.assert_allclose(ops.triple(x), x * 3)
        np.testing.assert_allclose(more.triple(x), x * 5)  # the subclass, by identity


def test_a_method_call_with_a_kiln_tensor_returns_kiln_tensors():
    a = Layer(np.eye(3, dtype=F32), 1.0)
    x = kiln.asarray(np.ones((1, 3), F32))
    for _ in range(2):
        got = a.forward(x)
        assert type(got) is kiln.Tensor
        np.testing.assert_allclose(np.asarray(got), np.tanh(np.ones((1, 3), F32)), rtol=1e-6)
