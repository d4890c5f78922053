"""The reference executor agrees with eager dispatch, node by node."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.exec.reference import interpret

from ..numerics import assert_close


def test_interpret_matches_eager():
    def f(x):
        return kiln.exp(x) + x

    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    g = kiln.trace(f, x).graph
    (out,) = interpret(g, [x])
    assert_close(out, np.asarray(f(kiln.asarray(x))))
