"""Places (SPEC §8): Device, Stream, as_device/as_place, and missing backends."""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import device
from kiln.device import Device, Stream, as_device, as_place, require_backend


def _pretend_cupy(monkeypatch: pytest.MonkeyPatch, installed: bool) -> None:
    """Make ``find_spec("cupy")`` answer as if CuPy were (not) installed, whatever this host has."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "cupy":
            return ModuleSpec("cupy", None) if installed else None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_cpu_device() -> None:
    cpu = Device("cpu")
    assert cpu.type == "cpu" and cpu.index == 0
    assert str(cpu) == "cpu"
    assert repr(cpu) == "Device('cpu')"
    assert cpu == Device("CPU") == Device(" cpu ") == device.cpu
    assert kiln.Device is Device and kiln.Stream is Stream


def test_cuda_device_spellings_agree() -> None:
    assert Device("cuda", 0) == Device("cuda:0") == Device("cuda")
    assert Device("cuda", 1) == Device("cuda:1") != Device("cuda:0")
    assert str(Device("cuda", 1)) == "cuda:1"
    assert repr(Device("cuda:1")) == "Device('cuda:1')"
    assert Device("cuda", np.int64(2)).index == 2


def test_devices_are_hashable_values() -> None:
    assert len({Device("cuda:0"), Device("cuda", 0), Device("cpu")}) == 2
    with pytest.raises(AttributeError):
        Device("cpu").index = 1  # type: ignore[misc]


@pytest.mark.parametrize("text", ["cpu", "cuda:0", "cuda:3"])
def test_str_round_trips(text: str) -> None:
    assert str(Device(text)) == text
    assert Device(str(Device(text))) == Device(text)


def test_non_default_cpu_index_stays_visible() -> None:
    # Device("cpu", 1) != Device("cpu"), so its text must not pretend otherwise.
    d = Device("cpu", 1)
    assert str(d) == "cpu:1" and Device(str(d)) == d


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("tpu",), "unknown device type 'tpu'"),
        (("cuda:x",), "must be a non-negative integer"),
        (("cuda:",), "must be a non-negative integer"),
        (("cuda:-1",), "must be a non-negative integer"),
        (("cuda", -1), "must be a non-negative integer, got -1"),
        (("cuda:1", 1), "give the index once"),
    ],
)
def test_bad_device_values_raise_value_error(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Device(*args)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((3,), "Device type must be a str"),
        ((None,), "Device type must be a str"),
        (("cuda", "1"), "Device index must be a non-negative int, got str"),
        (("cuda", 1.0), "got float"),
        (("cuda", True), "got bool"),
    ],
)
def test_bad_device_types_raise_type_error(args: tuple, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        Device(*args)


def test_stream_on_a_device() -> None:
    s = Stream(Device("cpu"))
    assert s.device == Device("cpu")
    assert Stream("cuda:1").device == Device("cuda", 1)
    assert Stream().device == Device("cpu")
    s.synchronize()  # a no-op on the CPU
    # Each stream is its own queue; one with an explicit id is reproducible.
    assert Stream("cpu") != Stream("cpu")
    assert Stream("cpu", id=7) == Stream("cpu", id=7)
    assert s == s and hash(s) == hash(s)


def test_as_device() -> None:
    assert as_device(None) == Device("cpu")
    assert as_device("cuda:1") == Device("cuda", 1)
    d = Device("cuda", 2)
    assert as_device(d) is d
    assert as_device(Stream(d)) == d
    with pytest.raises(TypeError, match="expected a place .* got int 3"):
        as_device(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown device type"):
        as_device("gpu")


def test_as_place_keeps_streams_and_checks_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Stream("cpu")
    assert as_place(s) is s
    assert as_place(None) == Device("cpu")
    assert as_place("cpu") == Device("cpu")
    _pretend_cupy(monkeypatch, installed=False)
    with pytest.raises(kiln.DeviceUnavailableError, match="cupy"):
        as_place("cuda:0")
    with pytest.raises(kiln.DeviceUnavailableError, match="cupy"):
        as_place(Stream("cuda:0"))


def test_require_backend_cpu_is_always_available() -> None:
    require_backend(Device("cpu"))


def test_require_backend_without_cupy_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _pretend_cupy(monkeypatch, installed=False)
    with pytest.raises(kiln.DeviceUnavailableError) as info:
        require_backend(Device("cuda", 0))
    message = str(info.value)
    assert "cuda:0" in message
    assert "pip install cupy" in message
    assert "place='cpu'" in message
    assert isinstance(info.value, kiln.KilnError) and isinstance(info.value, RuntimeError)


def test_require_backend_with_cupy_but_no_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    _pretend_cupy(monkeypatch, installed=True)
    with pytest.raises(kiln.DeviceUnavailableError, match="no executor for 'cuda'"):
        require_backend(Device("cuda:1"))


def test_require_backend_on_this_host() -> None:
    # Whatever is installed here, CUDA is refused today, and the message points at CuPy.
    with pytest.raises(kiln.DeviceUnavailableError, match="cupy"):
        require_backend(Device("cuda"))
