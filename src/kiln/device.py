"""Places where tensors live and graphs run: :class:`Device` and :class:`Stream`.

A *place* is a device, an ordered stream of work on a device, a string such as ``"cpu"`` or
``"cuda:0"``, or ``None`` (the default: where the inputs are, the CPU today). The CPU backend is
embedded; any other device type needs its backend installed, and asking for one that is missing
raises :class:`~kiln.errors.DeviceUnavailableError` that says what to install.
"""

from __future__ import annotations

import importlib.util
import operator
from dataclasses import dataclass, field
from itertools import count
from typing import Union

from .errors import DeviceUnavailableError

__all__ = ["Device", "Stream", "PlaceLike", "as_device", "as_place", "cpu", "require_backend"]

_KNOWN_TYPES = ("cpu", "cuda")
# What each non-CPU backend needs, and how a user gets it.
_BACKEND_MODULES = {"cuda": ("cupy", "pip install cupy-cuda12x (and an NVIDIA GPU with a driver)")}


@dataclass(frozen=True, slots=True)
class Device:
    """A device: its type (``"cpu"`` or ``"cuda"``) and index.

    Example:
        >>> Device("cuda", 0) == Device("cuda:0")
        True
        >>> str(Device("cpu"))
        'cpu'
    """

    type: str
    index: int = 0

    def __init__(self, type: str, index: int | None = None) -> None:  # noqa: A002 - torch's name
        if not isinstance(type, str):
            raise TypeError(f"Device type must be a str such as 'cpu' or 'cuda:0', got {type!r}")
        name, colon, suffix = type.strip().lower().partition(":")
        if colon:
            if index is not None:
                raise ValueError(f"Device({type!r}, {index!r}): give the index once, not twice")
            if not (suffix.isascii() and suffix.isdigit()):
                raise ValueError(f"Device index in {type!r} must be a non-negative integer")
            index = int(suffix)
        if name not in _KNOWN_TYPES:
            raise ValueError(f"unknown device type {name!r}; expected one of {_KNOWN_TYPES}")
        if index is None:
            index = 0
        # bool is an int subclass, but Device("cuda", True) is a mistake, not cuda:1.
        if isinstance(index, bool) or not hasattr(index, "__index__"):
            raise TypeError(
                f"Device index must be a non-negative int, got {index.__class__.__name__} {index!r}"
            )
        index = operator.index(index)
        if index < 0:
            raise ValueError(f"Device index must be a non-negative integer, got {index!r}")
        object.__setattr__(self, "type", name)
        object.__setattr__(self, "index", index)

    def __str__(self) -> str:
        # The CPU is one device: "cpu" for index 0, but keep any other index visible so that
        # Device(str(d)) == d always holds.
        if self.type == "cpu" and self.index == 0:
            return "cpu"
        return f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"Device({str(self)!r})"


_stream_ids = count()


@dataclass(frozen=True, slots=True)
class Stream:
    """An ordered queue of work on one device.

    Work submitted to one stream runs in submission order. On the CPU every stream is
    synchronous; on an accelerator a stream maps to the backend's stream.

    Example:
        >>> Stream("cpu").device
        Device('cpu')
    """

    device: Device
    id: int = field(default_factory=lambda: next(_stream_ids), compare=True)

    def __init__(self, device: Device | str = "cpu", id: int | None = None) -> None:  # noqa: A002
        object.__setattr__(self, "device", as_device(device))
        object.__setattr__(self, "id", next(_stream_ids) if id is None else id)

    def synchronize(self) -> None:
        """Wait for the work queued on this stream (a no-op on the CPU)."""


PlaceLike = Union[Device, Stream, str, None]

cpu = Device("cpu")


def as_device(place: PlaceLike) -> Device:
    """The device of a place; ``None`` is the CPU.

    Example:
        >>> as_device("cuda:1")
        Device('cuda:1')
    """
    if place is None:
        return cpu
    if isinstance(place, Device):
        return place
    if isinstance(place, Stream):
        return place.device
    if isinstance(place, str):
        return Device(place)
    raise TypeError(
        f"expected a place (Device, Stream, a string such as 'cpu' or 'cuda:0', or None), "
        f"got {type(place).__name__} {place!r}"
    )


def as_place(place: PlaceLike) -> Device | Stream:
    """Normalise a place to a :class:`Device` or :class:`Stream`, checking its backend."""
    resolved: Device | Stream = place if isinstance(place, Stream) else as_device(place)
    require_backend(as_device(resolved))
    return resolved


def require_backend(device: Device) -> None:
    """Raise :class:`DeviceUnavailableError` unless ``device`` has a usable backend.

    The CPU is always available. Other devices need their backend module, and kiln's executor
    for them; the message says what to install.
    """
    if device.type == "cpu":
        return
    module, how = _BACKEND_MODULES[device.type]
    if importlib.util.find_spec(module) is None:
        raise DeviceUnavailableError(
            f"{device} is not available: its backend needs the '{module}' package, which is "
            f"not installed. Install it ({how}), or use place='cpu'."
        )
    raise DeviceUnavailableError(
        f"{device} is not available: '{module}' is installed but kiln has no executor for "
        f"'{device.type}' yet; use place='cpu'."
    )
