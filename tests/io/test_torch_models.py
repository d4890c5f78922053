"""Models exported from PyTorch load, optimize, finalize and run in kiln, equal to torch."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import kiln

from ..numerics import assert_close

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
nn = torch.nn


def _export(module, example, dynamic_batch: bool = True) -> bytes:
    module.eval()
    buffer = io.BytesIO()
    dynamic_axes = {"x": {0: "batch"}, "y": {0: "batch"}} if dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (example,),
            buffer,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes=dynamic_axes,
            opset_version=17,
            dynamo=False,
        )
    return buffer.getvalue()


def _check(module, example, batches=(2,), rtol=1e-4, atol=1e-5, dynamic_batch=True):
    graph = kiln.io.load(_export(module, example, dynamic_batch))
    graph.verify()
    graph.optimize()
    graph.verify()
    graph.finalize()
    for b in batches:
        x = torch.randn((b,) + tuple(example.shape[1:]), generator=torch.Generator().manual_seed(b))
        with torch.no_grad():
            want = module(x).numpy()
        (got,) = graph.run({"x": x.numpy()})
        assert_close(got, want, rtol=rtol, atol=atol)
    return graph


def test_mlp() -> None:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
    graph = _check(mlp, torch.randn(2, 8), batches=(1, 3, 5))
    assert str(graph.inputs[0].shape[0]) == "batch"


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = torch.relu(self.bn2(self.conv2(x)))
        x = torch.flatten(self.avg(x), 1)
        return torch.log_softmax(self.fc(x), dim=-1)


def test_small_cnn() -> None:
    torch.manual_seed(0)
    cnn = SmallCNN()
    with torch.no_grad():  # non-trivial running statistics
        for bn in (cnn.bn1, cnn.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    _check(cnn, torch.randn(2, 3, 16, 16), batches=(1, 2))


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True
        )

    def forward(self, x):
        return self.layer(x)


def test_tiny_transformer_layer() -> None:
    torch.manual_seed(0)
    model = TinyTransformer().eval()
    try:
        data = _export(model, torch.randn(2, 5, 16), dynamic_batch=False)
    except Exception as exc:  # pragma: no cover - depends on the torch build
        pytest.skip(f"torch could not export the transformer layer: {exc}")
    graph = kiln.io.load(data)
    graph.optimize()
    graph.finalize()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        want = model(x).numpy()
    assert_close(graph.run([x.numpy()])[0], want, rtol=1e-4, atol=1e-4)
    assert np.isfinite(want).all()


class ViewBatch(nn.Module):
    """``x.view(x.size(0), -1)``: exported without constant folding, the target shape is
    computed from ``Shape`` when the graph runs (issue 14)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 5)

    def forward(self, x):
        return torch.tanh(self.fc(x.view(x.size(0), -1)))


def test_view_of_a_run_time_batch_runs_at_unseen_batch_sizes() -> None:
    torch.manual_seed(0)
    module = ViewBatch().eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                module,
                (torch.randn(2, 3, 4),),
                buffer,
                input_names=["x"],
                output_names=["y"],
                dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                opset_version=17,
                do_constant_folding=False,
                dynamo=False,
            )
        except Exception as exc:  # pragma: no cover - depends on the torch build
            pytest.skip(f"torch could not export without constant folding: {exc}")
    graph = kiln.io.load(buffer.getvalue())  # no constant_inputs: the shape is computed
    assert any(n.op == "Shape" for n in graph.nodes)
    graph.verify()
    graph.finalize()
    for batch in (1, 3, 6):  # 2 at export
        x = torch.randn(batch, 3, 4, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            want = module(x).numpy()
        (got,) = graph.run({"x": x.numpy()})
        assert np.asarray(got).shape == (batch, 5)
        assert_close(got, want, rtol=1e-5, atol=1e-6)
