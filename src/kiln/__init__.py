"""kiln: capture Python tensor programs into operator graphs, optimize them and run them fast.

Example:
    >>> import kiln
    >>> x = kiln.tensor([1.0, -2.0, 3.0], dtype=kiln.float32)
    >>> kiln.nn.relu(x * 2).tolist()
    [2.0, 0.0, 6.0]
"""

from __future__ import annotations

from . import errors, io, nn, ops, optim, runtime, symbolic, tree
from .capture import TracedGraph, trace
from .capture.compiled import CompiledFunction, State, compile, explain
from .device import Device, PlaceLike, Stream
from .dtypes import (
    DType,
    bfloat16,
    bool_,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    result_type,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .errors import (
    CaptureError,
    DeviceUnavailableError,
    GraphNotFinalizedError,
    GraphValidationError,
    InputMismatchError,
    KilnError,
    StateError,
    UnsupportedOperationError,
)
from .functions import *  # noqa: F403
from .functions import __all__ as _functions_all
from .spec import DynamicAxes, TensorSpec
from .symbolic import SymDim
from .tensor import Tensor, asarray, from_dlpack, tensor

__version__ = "0.1.0"

__all__ = [
    "CaptureError",
    "CompiledFunction",
    "State",
    "compile",
    "explain",
    "DType",
    "Device",
    "DynamicAxes",
    "DeviceUnavailableError",
    "GraphNotFinalizedError",
    "GraphValidationError",
    "InputMismatchError",
    "KilnError",
    "PlaceLike",
    "StateError",
    "Stream",
    "SymDim",
    "Tensor",
    "TensorSpec",
    "TracedGraph",
    "UnsupportedOperationError",
    "asarray",
    "bfloat16",
    "bool_",
    "complex64",
    "complex128",
    "errors",
    "float16",
    "float32",
    "float64",
    "from_dlpack",
    "int8",
    "int16",
    "int32",
    "int64",
    "nn",
    "ops",
    "result_type",
    "symbolic",
    "tensor",
    "trace",
    "tree",
    "io",
    "optim",
    "runtime",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    *_functions_all,
]
