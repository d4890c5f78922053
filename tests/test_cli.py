"""The ``kiln`` command line: ``--help`` lists every command, ``--version``, ``kiln export``
into a Triton repository, ``kiln inspect``, and user mistakes as one line on stderr with exit
status 2 (no traceback). In-process through ``main``; one subprocess proves the entry point."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest

import kiln
from kiln.__main__ import main

from .numerics import assert_close

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

COMMANDS = ("demo", "export", "inspect")


def scaled_tanh(x):
    return np.tanh(x) * 2


@pytest.fixture
def model_file(tmp_path):
    """An ONNX file of a graph with a dynamic batch axis named ``batch``."""
    tg = kiln.trace(scaled_tanh, np.ones((4, 3), np.float32), dynamic_axes={"x": {0: "batch"}})
    path = tmp_path / "scaled_tanh.onnx"
    kiln.io.save(tg.graph, path)
    return path


def command_lines(help_text: str) -> dict[str, str]:
    """``{command: its one-line description}`` from the ``commands:`` section of --help."""
    section = help_text.split("commands:", 1)[1]
    found = {}
    for line in section.splitlines():
        words = line.split(maxsplit=1)
        if len(words) == 2 and words[0] in COMMANDS:
            found[words[0]] = words[1]
    return found


def test_help_lists_every_command_with_a_description(capsys):
    assert main(["--help"]) == 0
    lines = command_lines(capsys.readouterr().out)
    assert sorted(lines) == sorted(COMMANDS)
    assert "Triton" in lines["export"]
    assert "graph" in lines["inspect"]


def test_version_is_the_installed_distributions(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"kiln {metadata.version('tensorkiln')}"
    assert metadata.version("tensorkiln") == kiln.__version__


def test_no_command_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "required: COMMAND" in capsys.readouterr().err


def test_export_writes_a_triton_repository(model_file, tmp_path, capsys):
    repo = tmp_path / "repo"
    argv = [str(model_file), "--triton", str(repo), "--max-batch-size", "8"]
    assert main(["export", *argv, "--version", "2", "--instances", "3"]) == 0
    model_dir = repo / "scaled_tanh"  # the file's stem
    assert capsys.readouterr().out.strip() == str(model_dir)
    assert sorted(str(p.relative_to(repo)) for p in repo.rglob("*")) == [
        "scaled_tanh",
        "scaled_tanh/2",
        "scaled_tanh/2/model.onnx",
        "scaled_tanh/config.pbtxt",
    ]
    config = (model_dir / "config.pbtxt").read_text()
    assert 'name: "scaled_tanh"' in config
    assert "max_batch_size: 8" in config and "dynamic_batching { }" in config
    assert "count: 3" in config and "dims: [ 3 ]" in config
    session = ort.InferenceSession(
        str(model_dir / "2" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    (got,) = session.run(None, {"x": x})
    assert_close(got, scaled_tanh(x))


def test_export_name_and_no_dynamic_batching(model_file, tmp_path, capsys):
    repo = tmp_path / "repo"
    argv = ["export", str(model_file), "--triton", str(repo), "--name", "tanh_model"]
    assert main([*argv, "--max-batch-size", "4", "--no-dynamic-batching"]) == 0
    config = (repo / "tanh_model" / "config.pbtxt").read_text()
    assert 'name: "tanh_model"' in config and "max_batch_size: 4" in config
    assert "dynamic_batching" not in config
    assert (repo / "tanh_model" / "1" / "model.onnx").is_file()


def test_export_config_is_triton_schema_valid(model_file, tmp_path):
    model_config_pb2 = pytest.importorskip(
        "tritonclient.grpc.model_config_pb2", reason="tritonclient[grpc] is not installed"
    )
    from google.protobuf import text_format

    repo = tmp_path / "repo"
    assert main(["export", str(model_file), "--triton", str(repo)]) == 0
    text = (repo / "scaled_tanh" / "config.pbtxt").read_text()
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert config.max_batch_size == 0
    assert [list(i.dims) for i in config.input] == [[-1, 3]]


def test_inspect_prints_graph_opset_nodes_and_size(model_file, capsys):
    assert main(["inspect", str(model_file)]) == 0
    out = capsys.readouterr().out
    graph = kiln.io.load(model_file)
    assert out.startswith(str(graph) + "\n")
    assert "x: float32[batch, 3]" in out
    assert f"({model_file.stat().st_size:,} bytes)" in out
    assert "opset:  ai.onnx 21" in out
    assert f"nodes:  {len(onnx.load(str(model_file)).graph.node)} in the file" in out


def assert_one_line_error(capsys, command: str, *needles: str) -> None:
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert err.startswith(f"kiln {command}: error: ") and "\n" not in err, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("command", ["export", "inspect"])
def test_missing_file_is_exit_2(tmp_path, capsys, command):
    missing = tmp_path / "missing.onnx"
    extra = ["--triton", str(tmp_path / "repo")] if command == "export" else []
    assert main([command, str(missing), *extra]) == 2
    assert_one_line_error(capsys, command, "no such file", "missing.onnx")
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize("command", ["export", "inspect"])
def test_not_onnx_is_exit_2(tmp_path, capsys, command):
    text_file = tmp_path / "notes.onnx"
    text_file.write_text("these are not the bytes of an ONNX model\n")
    extra = ["--triton", str(tmp_path / "repo")] if command == "export" else []
    assert main([command, str(text_file), *extra]) == 2
    assert_one_line_error(capsys, command, "not an ONNX model", "notes.onnx")


def test_folder_is_exit_2(tmp_path, capsys):
    assert main(["inspect", str(tmp_path)]) == 2
    assert_one_line_error(capsys, "inspect", "is a folder")


def test_export_refusal_is_exit_2(tmp_path, capsys):
    static = tmp_path / "static.onnx"
    kiln.io.save(kiln.trace(scaled_tanh, np.ones((4, 3), np.float32)).graph, static)
    argv = ["export", str(static), "--triton", str(tmp_path / "repo"), "--max-batch-size", "8"]
    assert main(argv) == 2
    assert_one_line_error(capsys, "export", "axis 0 of input 'x'", "static (size 4)")


def test_python_dash_m_kiln_help_lists_the_commands():
    result = subprocess.run(
        [sys.executable, "-m", "kiln", "--help"], capture_output=True, text=True, check=True
    )
    assert sorted(command_lines(result.stdout)) == sorted(COMMANDS)
