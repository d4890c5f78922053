"""Graphs in and out: :class:`ModelGraph`, the IR users hold, and ONNX files.

``save``/``to_onnx`` write a graph as an ONNX model and ``load`` reads one back; both need the
``onnx`` extra (imported only when called).
"""

from __future__ import annotations

from ..ir.graph import ModelGraph
from ..optim.transform import DefaultsOptions, OptimizeReport
from .onnx_export import save, to_onnx
from .onnx_import import load

__all__ = ["ModelGraph", "DefaultsOptions", "OptimizeReport", "save", "load", "to_onnx"]
