"""Graphs in and out: :class:`ModelGraph`, the IR users hold, and ONNX files.

``save``/``to_onnx`` write a graph as an ONNX model and ``load`` reads one back; both need the
``onnx`` extra (imported only when called). ``save_triton`` writes a Triton Inference Server
model repository entry (docs/deploy.md). ``BatchRunner`` runs a model on batches in Ray Data,
Spark or Dask workers.
"""

from __future__ import annotations

from ..ir.graph import ModelGraph
from ..optim.transform import DefaultsOptions, OptimizeReport
from .batch import BatchRunner
from .onnx_export import save, to_onnx
from .onnx_import import load
from .triton import save_triton

__all__ = [
    "ModelGraph",
    "DefaultsOptions",
    "OptimizeReport",
    "save",
    "load",
    "to_onnx",
    "save_triton",
    "BatchRunner",
]
