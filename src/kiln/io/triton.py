"""Write a graph as a Triton Inference Server model repository entry.

kiln does not serve models itself: it writes what Triton loads. :func:`save_triton` exports the
graph with kiln's ONNX exporter and writes, beside the model, the ``config.pbtxt`` that Triton's
onnxruntime backend reads::

    <repository>/<name>/config.pbtxt
    <repository>/<name>/<version>/model.onnx

The configuration is derived from the exported ``ModelProto`` itself, not from the graph: Triton
matches inputs and outputs by the ONNX model's names, and the exporter may write a size static
that the graph kept symbolic (a size its shape guards pin), so the model is the one source of
names, element types and dims. See "Triton model repositories" in docs/design.md.
"""

from __future__ import annotations

import os
import pathlib
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import dtype_from_onnx_code
from ..errors import ArgumentError, ArgumentTypeError, OpTypeError, UnsupportedOperationError
from ..ir.graph import ModelGraph, Value
from ..symbolic import SymDim
from .onnx_export import to_onnx

if TYPE_CHECKING:
    import onnx

__all__ = ["save_triton", "TRITON_DTYPES"]

# kiln dtype name -> Triton's DataType (model_config.proto). Triton has no complex type.
TRITON_DTYPES: dict[str, str] = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "bfloat16": "TYPE_BF16",
}


def save_triton(
    graph: ModelGraph,
    repository: str | os.PathLike[str],
    name: str,
    *,
    version: int = 1,
    max_batch_size: int = 0,
    dynamic_batching: bool = True,
    instances: int = 1,
) -> pathlib.Path:
    """Write ``graph`` into a Triton model repository for the onnxruntime backend.

    Writes ``<repository>/<name>/<version>/model.onnx`` (kiln's ONNX export of the graph) and
    ``<repository>/<name>/config.pbtxt``: the backend, ``max_batch_size``, one ``input`` and
    ``output`` entry per model input and output (the ONNX model's names, Triton data types,
    dims with dynamic sizes as ``-1``), a ``dynamic_batching`` block and an ``instance_group``
    of ``instances`` CPU instances. Existing files of the same model and version are replaced
    (as :func:`kiln.io.save` replaces a file), each written to a temporary file first and
    renamed, so a Triton server polling the repository never reads half a file. Triton keeps
    one configuration per model, for all its versions.

    Args:
        graph: The graph to serve (a :class:`ModelGraph`, or a ``TracedGraph``'s ``graph``).
        repository: The model repository folder (created if missing).
        name: The model's name: its folder and the name clients ask Triton for.
        version: The version folder, an int >= 1 (Triton ignores other folder names).
        max_batch_size: 0 for a model Triton does not batch (dims are the full shapes); above
            0, Triton batches requests along the leading axis, which must then be a dynamic
            axis of every input and output (trace with ``dynamic_axes={"x": {0: "batch"}}``)
            and is left out of ``dims``.
        dynamic_batching: Write a ``dynamic_batching {}`` block (Triton then combines
            concurrent requests into one batch); only with ``max_batch_size > 0``.
        instances: How many copies of the model Triton runs (``instance_group`` count, on the
            CPU; Triton's own configuration can move them to GPUs).

    Returns:
        The model's folder, ``<repository>/<name>``.

    Raises:
        ArgumentError: for a name that is empty or holds a path separator, a version below 1,
            a negative ``max_batch_size``, ``instances`` below 1, or ``max_batch_size > 0``
            with an input or output whose leading axis is not a dynamic batch axis.
        UnsupportedOperationError: for an input or output dtype Triton has no type for
            (complex), or a graph the ONNX exporter refuses.

    Example:
        >>> import kiln, numpy as np, tempfile
        >>> tg = kiln.trace(np.tanh, np.ones((4, 3), np.float32), dynamic_axes={"x": [0]})
        >>> repo = tempfile.mkdtemp()
        >>> path = kiln.io.save_triton(tg.graph, repo, "tanh", max_batch_size=8)
        >>> sorted(str(p.relative_to(repo)) for p in path.rglob("*"))
        ['tanh/1', 'tanh/1/model.onnx', 'tanh/config.pbtxt']
    """
    graph = _model_graph(graph)
    _check_arguments(name, version, max_batch_size, instances, dynamic_batching)
    for kind, values in (("input", graph.input_values), ("output", graph.output_values)):
        for value in values:  # before exporting: ONNX has no form for some of these either
            _triton_type(graph.name, kind, value.name, np.dtype(value.dtype).name)
    model = to_onnx(graph)
    config = triton_config(
        model,
        name,
        graph=graph,
        max_batch_size=max_batch_size,
        dynamic_batching=dynamic_batching,
        instances=instances,
    )
    model_dir = pathlib.Path(repository) / name
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    _write_atomically(version_dir / "model.onnx", model.SerializeToString())
    _write_atomically(model_dir / "config.pbtxt", config.encode("utf-8"))
    return model_dir


def triton_config(
    model: onnx.ModelProto,
    name: str,
    *,
    graph: ModelGraph | None = None,
    max_batch_size: int = 0,
    dynamic_batching: bool = True,
    instances: int = 1,
) -> str:
    """The ``config.pbtxt`` text (Triton's ``ModelConfig`` in protobuf text format) for
    ``model`` served under ``name``; see :func:`save_triton`. ``graph``, the graph the model
    was exported from, lets the batch-axis check name sizes computed from other sizes.

    Example:
        >>> import kiln, numpy as np
        >>> g = kiln.trace(np.tanh, np.ones((2, 3), np.float32)).graph
        >>> print(triton_config(kiln.io.to_onnx(g), "tanh").splitlines()[1])
        name: "tanh"
    """
    graph_name = graph.name if graph is not None else model.graph.name
    values: dict[str, dict[str, Value]] = {"input": {}, "output": {}}
    if graph is not None:
        values["input"] = {v.name: v for v in graph.input_values}
        values["output"] = {v.name: v for v in graph.output_values}
    initializers = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    entries: dict[str, list[str]] = {"input": [], "output": []}
    for kind, infos in (("input", inputs), ("output", list(model.graph.output))):
        for info in infos:
            tensor_type = info.type.tensor_type
            data_type = _triton_type(graph_name, kind, info.name, _dtype_name(tensor_type))
            dims: list[int | str] = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in tensor_type.shape.dim
            ]
            if max_batch_size > 0:
                _check_batch_axis(graph_name, kind, info.name, dims, values[kind].get(info.name))
                dims = dims[1:]
            entries[kind].append(_tensor_entry(info.name, data_type, dims))
    lines = [
        f"# Triton model configuration written by kiln.io.save_triton from graph {graph_name!r}",
        f"name: {_quote(name)}",
        'platform: "onnxruntime_onnx"',
        'backend: "onnxruntime"',
        f"max_batch_size: {max_batch_size}",
    ]
    for kind in ("input", "output"):
        lines.append(f"{kind} [")
        lines.append(",\n".join(entries[kind]))
        lines.append("]")
    if dynamic_batching and max_batch_size > 0:
        lines.append("dynamic_batching { }")
    lines += [
        "instance_group [",
        "  {",
        f"    count: {instances}",
        "    kind: KIND_CPU",
        "  }",
        "]",
    ]
    return "\n".join(lines) + "\n"


def _dtype_name(tensor_type: Any) -> str:
    """The kiln dtype name of an ONNX tensor type (ONNX's own name where kiln has none)."""
    try:
        return dtype_from_onnx_code(tensor_type.elem_type).name
    except OpTypeError:
        import onnx  # there is a ModelProto: onnx is installed

        return str(onnx.TensorProto.DataType.Name(tensor_type.elem_type)).lower()


# -- checks --------------------------------------------------------------------------------


def _model_graph(graph: Any) -> ModelGraph:
    if isinstance(graph, ModelGraph):
        return graph
    inner = getattr(graph, "graph", None)  # a TracedGraph (kiln.trace's result)
    if isinstance(inner, ModelGraph):
        return inner
    raise ArgumentTypeError(
        f"save_triton: graph must be a kiln.io.ModelGraph or the result of kiln.trace, got "
        f"{type(graph).__name__}; load an ONNX file with kiln.io.load(path) first"
    )


def _check_arguments(
    name: str, version: int, max_batch_size: int, instances: int, dynamic_batching: bool
) -> None:
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or any(sep in name for sep in ("/", "\\", "\0", os.sep))
    ):
        raise ArgumentError(
            f"save_triton: name={name!r} is not a model name Triton can load: it is the "
            "model's folder in the repository, so give a non-empty name without path "
            "separators (such as 'classifier')"
        )
    for arg, value, least in (
        ("version", version, 1),
        ("max_batch_size", max_batch_size, 0),
        ("instances", instances, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ArgumentTypeError(f"save_triton: {arg} must be an int, got {value!r}")
        if value < least:
            why = " (Triton ignores version folders that are not positive numbers)"
            raise ArgumentError(
                f"save_triton: {arg}={value} is below {least}"
                + (why if arg == "version" else "")
                + f"; give {arg} >= {least}"
            )
    if not isinstance(dynamic_batching, bool):
        raise ArgumentTypeError(
            f"save_triton: dynamic_batching must be True or False, got {dynamic_batching!r}"
        )


def _triton_type(graph_name: str, kind: str, value_name: str, dtype_name: str) -> str:
    """Triton's data type for a kiln dtype name; refuses dtypes Triton has no type for."""
    data_type = TRITON_DTYPES.get(dtype_name)
    if data_type is None:
        raise UnsupportedOperationError(
            f"graph {graph_name!r}: {kind} {value_name!r} has dtype {dtype_name}, which "
            f"Triton has no data type for (it has {', '.join(sorted(TRITON_DTYPES))}); "
            f"convert the {kind} in the traced function (for complex values, return the "
            "real and imaginary parts as two float outputs)"
        )
    return data_type


def _check_batch_axis(
    graph_name: str, kind: str, value_name: str, dims: list[int | str], value: Value | None
) -> None:
    """With ``max_batch_size > 0``, Triton batches along the leading axis: it must exist and be
    dynamic (a symbolic size), and an output's must be a plain size, not one computed from
    others (``2*s0`` rows cannot be split back into requests)."""
    where = f"{kind} {value_name!r} of graph {graph_name!r}"
    batching = "max_batch_size > 0 makes Triton batch requests along axis 0"
    fix = (
        "trace with axis 0 of every input dynamic (kiln.trace(fn, x, dynamic_axes={'x': "
        "{0: 'batch'}})), or pass max_batch_size=0 to serve the model without Triton's batching"
    )
    if not dims:
        raise ArgumentError(f"save_triton: {batching}, but {where} is a scalar; {fix}")
    leading = dims[0]
    if isinstance(leading, int):
        pinned = ""
        if value is not None and value.shape and isinstance(value.shape[0], SymDim):
            pinned = " (a shape guard of the graph pins it, so the ONNX model has it static)"
        raise ArgumentError(
            f"save_triton: {batching}, but axis 0 of {where} is static (size {leading})"
            f"{pinned}; {fix}"
        )
    first = value.shape[0] if value is not None and value.shape else None
    if isinstance(first, SymDim) and not first.is_symbol():
        raise ArgumentError(
            f"save_triton: {batching}, but axis 0 of {where} has size {first}, computed from "
            "other sizes, so Triton cannot split it back into requests; return outputs whose "
            "axis 0 is the batch, or pass max_batch_size=0"
        )


# -- writing -------------------------------------------------------------------------------


def _tensor_entry(name: str, data_type: str, dims: list[int | str]) -> str:
    lines = ["  {", f"    name: {_quote(name)}", f"    data_type: {data_type}"]
    if dims:
        text = ", ".join(str(d) if isinstance(d, int) else "-1" for d in dims)
        lines.append(f"    dims: [ {text} ]")
    else:  # Triton wants at least one dim: a scalar is [1] reshaped to no axes
        lines += ["    dims: [ 1 ]", "    reshape: { shape: [ ] }"]
    lines.append("  }")
    return "\n".join(lines)


def _quote(text: str) -> str:
    """``text`` as a protobuf text-format string literal (UTF-8 kept, C escapes)."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _write_atomically(path: pathlib.Path, data: bytes) -> None:
    """Write ``data`` to a hidden file beside ``path`` (permissions from the umask, as for any
    new file) and rename it over ``path``: readers see the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
