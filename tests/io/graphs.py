"""Helpers shared by the ONNX import/export tests."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

import kiln
from kiln.errors import CaptureWarning
from kiln.ops.registry import OpDef, Sample
from kiln.tensor import dispatch


def one_node_graph(op: OpDef, sample: Sample) -> tuple[kiln.io.ModelGraph, list[np.ndarray]]:
    """A graph applying ``op`` once to ``sample``'s inputs, and the arrays to feed it.

    Small integer (and short float) vectors after the first input (shapes, axes, pads, sizes,
    scales) become constants
    of the graph, as they are in real models: kiln computes output shapes from their values.
    """
    arrays = [None if x is None else np.asarray(x) for x in sample.inputs]
    is_const = [
        x is not None
        and x.ndim <= 1
        and (x.dtype.kind in "iu" or (x.dtype.kind == "f" and x.ndim == 1 and x.size <= 8))
        and (i > 0 or op.name in ("ConstantOfShape", "Range"))
        for i, x in enumerate(arrays)
    ]
    fed = [x for x, c in zip(arrays, is_const) if x is not None and not c]

    def apply(*xs: Any) -> Any:
        it = iter(xs)
        args: list[Any] = []
        for x, c in zip(arrays, is_const):
            if x is None:
                args.append(None)
            elif c:
                args.append(kiln.asarray(x))
            else:
                args.append(next(it))
        return dispatch(op, args, sample.attrs)

    with warnings.catch_warnings():
        # every input a constant (a Range of constants): a nullary trace, as meant here
        warnings.filterwarnings("ignore", "kiln.trace.*no tensor inputs", CaptureWarning)
        return kiln.trace(apply, *fed).graph, fed


def _same_subgraph(a: kiln.io.ModelGraph, b: kiln.io.ModelGraph) -> None:
    """A subgraph after a round trip: the same input and output types and operators (export
    copies an output that is an input with an Identity, and may rename values)."""
    assert [v.type for v in a.input_values] == [v.type for v in b.input_values]
    assert [v.type for v in a.output_values] == [v.type for v in b.output_values]
    ops = [[n.op for n in g.nodes if n.op != "Identity"] for g in (a, b)]
    assert ops[0] == ops[1]


def same_graph(a: kiln.io.ModelGraph, b: kiln.io.ModelGraph) -> None:
    """Assert two graphs have the same ops, names, types, attributes and constants."""

    def names(vs: Sequence[Any]) -> list[Any]:
        out = [None if v is None else v.name for v in vs]
        while out and out[-1] is None:
            out.pop()
        return out

    assert a.input_names == b.input_names
    assert a.output_names == b.output_names
    assert [v.type for v in a.input_values] == [v.type for v in b.input_values]
    assert [v.type for v in a.output_values] == [v.type for v in b.output_values]
    assert len(a.nodes) == len(b.nodes)
    for x, y in zip(a.nodes, b.nodes):
        assert (x.op, x.name) == (y.op, y.name)
        assert names(x.inputs) == names(y.inputs)
        assert [(v.name, v.type) for v in x.outputs] == [(v.name, v.type) for v in y.outputs]
        assert set(x.attrs) == set(y.attrs), x.name
        for k in x.attrs:
            if isinstance(x.attrs[k], kiln.io.ModelGraph):
                _same_subgraph(x.attrs[k], y.attrs[k])
            elif isinstance(x.attrs[k], np.ndarray):
                np.testing.assert_array_equal(x.attrs[k], y.attrs[k])
                assert x.attrs[k].dtype == y.attrs[k].dtype
            else:
                # ONNX stores float attributes as float32
                assert _f32(x.attrs[k]) == _f32(y.attrs[k]), (x.name, k)
    ca = {c.value.name: c for c in a.constants}
    cb = {c.value.name: c for c in b.constants}
    assert set(ca) == set(cb)
    for name, c in ca.items():
        assert c.value.type == cb[name].value.type
        np.testing.assert_array_equal(c.data, cb[name].data)


def _f32(v: Any) -> Any:
    if isinstance(v, float):
        return np.float32(v)
    if isinstance(v, tuple):
        return tuple(_f32(e) for e in v)
    return v
