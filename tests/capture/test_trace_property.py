"""Property: for random elementwise programs over random shapes, graph == eager."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import kiln

from ..numerics import assert_close

UNARY = [np.tanh, np.exp, np.abs, np.negative, lambda x: x * x, lambda x: x * 0.5]
BINARY = [np.add, np.subtract, np.multiply, np.maximum, np.minimum]


@st.composite
def programs(draw):
    steps = draw(
        st.lists(
            st.tuples(st.booleans(), st.integers(0, 4), st.integers(0, 4), st.integers(0, 9)),
            min_size=1,
            max_size=6,
        )
    )
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=3)))
    return steps, shape


def run_program(steps, x, y):
    values = [x, y]
    for is_binary, a, b, op in steps:
        lhs = values[a % len(values)]
        if is_binary:
            values.append(BINARY[op % len(BINARY)](lhs, values[b % len(values)]))
        else:
            values.append(UNARY[op % len(UNARY)](lhs))
    return values[-1]


@given(programs(), st.sampled_from([np.float32, np.float64]), st.booleans())
def test_random_elementwise_programs(program, dtype, dynamic):
    steps, shape = program
    rng = np.random.default_rng(len(steps))
    x = rng.uniform(-2, 2, shape).astype(dtype)
    y = rng.uniform(-2, 2, shape).astype(dtype)
    axes = {"a": list(range(len(shape))), "b": list(range(len(shape)))} if dynamic else None
    tg = kiln.trace(lambda a, b: run_program(steps, a, b), x, y, dynamic_axes=axes)
    tg.optimize()
    tg.finalize()
    (out,) = tg.run([x, y])
    assert_close(out, np.asarray(run_program(steps, x, y)))
