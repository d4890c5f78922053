"""Every registered operator, traced over each of its samples: the graph equals eager."""

from __future__ import annotations

import pytest

import kiln
from kiln.errors import OpArgumentError
from kiln.ops.registry import all_ops
from kiln.tensor import dispatch

from ..numerics import assert_close

# Operators with no inputs (a constant Range, ConstantOfShape) trace nullary functions, which
# kiln.trace rightly warns about; here that is the point.
pytestmark = pytest.mark.filterwarnings("ignore:.*no tensor inputs:kiln.errors.CaptureWarning")


CASES = [
    pytest.param(op, sample, id=f"{op.qualified_name}-{i}-{sample.name}")
    for op in all_ops()
    for i, sample in enumerate(op.samples())
]


def _trace(op, sample, constant_ints: bool):
    """Trace a one-node graph; integer inputs become closure constants when asked, since
    shape-like inputs (Reshape's shape, Slice's starts) must be known to infer the output."""
    fed = [x is not None and not (constant_ints and x.dtype.kind in "iu") for x in sample.inputs]
    fixed = [
        kiln.asarray(x) if x is not None and not f else None for x, f in zip(sample.inputs, fed)
    ]

    def one_node(*given):
        it = iter(given)
        inputs = [next(it) if f else c for f, c in zip(fed, fixed)]
        return list(dispatch(op, inputs, sample.attrs))

    args = [x for x, f in zip(sample.inputs, fed) if f]
    return kiln.trace(one_node, *args), args


@pytest.mark.parametrize("op, sample", CASES)
def test_traced_graph_equals_eager(op, sample):
    try:
        tg, args = _trace(op, sample, constant_ints=False)
    except OpArgumentError:
        tg, args = _trace(op, sample, constant_ints=True)
    tg.graph.verify()
    tg.finalize()
    got = tg.run(args)
    want = dispatch(
        op, [None if x is None else kiln.asarray(x) for x in sample.inputs], sample.attrs
    )
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, rtol=sample.rtol, atol=sample.atol, what=f"{op.name} output {i}")
