"""The ``kiln`` command (also ``python -m kiln``).

``kiln demo`` runs the main job on a transformer block; ``kiln export MODEL.onnx --triton REPO``
writes an ONNX model into a Triton model repository (:func:`kiln.io.save_triton`); ``kiln
inspect MODEL.onnx`` prints a model's graph as kiln reads it. A user's mistake (a missing file,
a file that is not an ONNX model, a model Triton cannot batch) is one line on stderr and exit
status 2, as for a bad option; never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from .errors import KilnError


def kiln_version() -> str:
    """The installed distribution's version (``tensorkiln``), or the package's own
    ``kiln.__version__`` when kiln runs from a source tree that is not installed."""
    from importlib import metadata

    try:
        return metadata.version("tensorkiln")
    except metadata.PackageNotFoundError:
        from . import __version__

        return __version__


def main(argv: list[str] | None = None) -> int:
    """Run the ``kiln`` command with ``argv`` (default ``sys.argv[1:]``); return its exit
    status (``--help`` and ``--version`` return 0 instead of exiting)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error argparse reported
        return exc.code if isinstance(exc.code, int) else 2
    command: Callable[[argparse.Namespace], int] = args.run
    try:
        return command(args)
    except (KilnError, OSError) as exc:
        print(f"kiln {args.command}: error: {_message(exc)}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kiln",
        description="kiln: capture Python tensor functions into graphs, optimize, run, deploy",
    )
    parser.add_argument("--version", action="version", version=f"kiln {kiln_version()}")
    commands = parser.add_subparsers(
        dest="command", required=True, title="commands", metavar="COMMAND"
    )

    demo = commands.add_parser(
        "demo",
        help="compile a transformer block and show the capture, graph and timings",
        description="Compile a pre-LN transformer block written in plain NumPy and show "
        "the capture state, the graph before and after optimize(), a shape drift and timings.",
    )
    demo.add_argument("--batch", type=int, default=2)
    demo.add_argument("--seq", type=int, default=64)
    demo.add_argument("--repeat", type=int, default=20)
    demo.set_defaults(run=_demo)

    export = commands.add_parser(
        "export",
        help="write an ONNX model into a Triton model repository",
        description="Write MODEL (an ONNX file) as <REPO>/<name>/<version>/model.onnx with "
        "the <REPO>/<name>/config.pbtxt that Triton's onnxruntime backend reads, and print "
        "the model's folder. kiln does not start Triton; start it with "
        "tritonserver --model-repository=REPO.",
    )
    export.add_argument("model", metavar="MODEL", help="the ONNX model file")
    export.add_argument(
        "--triton", metavar="REPO", required=True, help="the Triton model repository folder"
    )
    export.add_argument("--name", help="the model's name in the repository (default: MODEL's stem)")
    export.add_argument(
        "--version",
        dest="model_version",
        type=int,
        default=1,
        metavar="V",
        help="the version folder (default 1)",
    )
    export.add_argument(
        "--max-batch-size",
        type=int,
        default=0,
        metavar="B",
        help="let Triton batch requests along axis 0, up to B rows (default 0: no batching); "
        "axis 0 of every input and output must be dynamic",
    )
    export.add_argument(
        "--instances",
        type=int,
        default=1,
        metavar="K",
        help="how many copies of the model Triton runs (default 1)",
    )
    export.add_argument(
        "--no-dynamic-batching",
        dest="dynamic_batching",
        action="store_false",
        help="leave out the dynamic_batching block (with --max-batch-size)",
    )
    export.set_defaults(run=_export)

    inspect = commands.add_parser(
        "inspect",
        help="print an ONNX model's graph, opset, node count and size",
        description="Print MODEL's graph the way print(graph) does after kiln.io.load, then "
        "the file's size, its opsets and its node count.",
    )
    inspect.add_argument("model", metavar="MODEL", help="the ONNX model file")
    inspect.set_defaults(run=_inspect)
    return parser


# -- commands ------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    demo_main(batch=args.batch, seq=args.seq, repeat=args.repeat)
    return 0


def _export(args: argparse.Namespace) -> int:
    from .io import load, save_triton

    graph = load(_model_file(args.model))
    name = args.name if args.name is not None else _stem(args.model)
    model_dir = save_triton(
        graph,
        args.triton,
        name,
        version=args.model_version,
        max_batch_size=args.max_batch_size,
        dynamic_batching=args.dynamic_batching,
        instances=args.instances,
    )
    print(model_dir)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    import onnx

    from .io import load

    path = _model_file(args.model)
    graph = load(path)  # refuses what is not an ONNX model, with the reason
    model = onnx.load(path, load_external_data=False)
    opsets = ", ".join(
        f"{entry.domain or 'ai.onnx'} {entry.version}" for entry in model.opset_import
    )
    size = os.path.getsize(path)
    print(graph)
    print()
    print(f"file:   {path} ({_size_text(size)})")
    print(f"opset:  {opsets}")
    print(f"nodes:  {len(model.graph.node)} in the file, {len(graph.nodes)} in kiln's graph")
    if model.producer_name:
        version = f" {model.producer_version}" if model.producer_version else ""
        print(f"producer: {model.producer_name}{version}")
    return 0


# -- helpers -------------------------------------------------------------------------------


def _model_file(path: str) -> str:
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path!r} is a folder; give the .onnx file")
    return path


def _stem(path: str) -> str:
    base = os.path.basename(path)
    return base[: -len(".onnx")] if base.endswith(".onnx") else os.path.splitext(base)[0]


def _size_text(size: int) -> str:
    """``1,234 bytes`` with the size in KiB, MiB or GiB beside it when it is that large."""
    text = f"{size:,} bytes"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value /= 1024
        if value < 1024 or unit == "GiB":
            return f"{text}, {value:.1f} {unit}"
    return text


def _message(exc: BaseException) -> str:
    """An error's text without Python's ``[Errno 2]`` prefix."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        return f"{exc.strerror}: {exc.filename!r}"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
