"""One check for a NumPy-named kiln function on every path a user reaches it by: eager kiln
tensors, ``kiln.trace`` of plain NumPy code (run on the NumPy engine), and ``kiln.compile``
with NumPy arrays in and out (``fullgraph=True``: a fall back would raise), each compared
with NumPy's own result bit for bit (values, NaNs, dtype, shape, result structure)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import kiln


def assert_same(got: Any, want: Any, what: str = "") -> None:
    """``got`` is NumPy's ``want`` exactly: the same tuple/list structure, and per array the
    same shape, dtype and values (NaN where NaN; -0.0 equals 0.0)."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{what}: {got!r}"
        assert type(got) is type(want) or isinstance(got, tuple) == isinstance(want, tuple)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{what}[{i}]")
        return
    g, w = np.asarray(got), np.asarray(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != NumPy's {w.shape}"
    assert g.dtype == w.dtype, f"{what}: dtype {g.dtype} != NumPy's {w.dtype}"
    assert np.array_equal(g, w, equal_nan=g.dtype.kind in "fc"), f"{what}: {g} != NumPy's {w}"


def check_paths(fn: Callable[..., Any], *arrays: np.ndarray, trace: bool = True) -> None:
    """``fn`` (plain NumPy code) on ``arrays``: eager on kiln tensors, traced, compiled."""
    want = fn(*arrays)
    eager = fn(*(kiln.asarray(a) for a in arrays))
    assert_same(eager, want, "eager")
    if trace:
        traced = kiln.trace(fn, *arrays)
        traced.finalize("numpy")
        assert_same(traced(*arrays), want, "trace")
    compiled = kiln.compile(fn, fullgraph=True)
    for call in ("capture", "replay", "replay again"):
        assert_same(compiled(*(a.copy() for a in arrays)), want, f"compile ({call})")
    assert compiled.recapture_count == 0


def check_onnxruntime(fn: Callable[..., Any], *arrays: np.ndarray) -> None:
    """``fn`` traced, exported to ONNX and run by onnxruntime itself gives NumPy's result
    (the graph is built from standard operators onnxruntime implements)."""
    import pytest

    ort = pytest.importorskip("onnxruntime")
    traced = kiln.trace(fn, *arrays)
    traced.graph.optimize()
    model = kiln.io.to_onnx(traced.graph)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(session.get_inputs(), arrays)}
    want = fn(*arrays)
    got = session.run(None, feeds)
    assert_same(tuple(got) if isinstance(want, tuple) else got[0], want, "onnxruntime")
