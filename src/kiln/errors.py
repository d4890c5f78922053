"""Every exception kiln raises on purpose.

All derive from :class:`KilnError`, and from the built-in exception a Python user would catch
for the same mistake (``ValueError`` for a bad value, ``TypeError`` for a bad type), so both
``except kiln.KilnError`` and ``except ValueError`` work.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "KilnError",
    "CaptureError",
    "UnsupportedOperationError",
    "InputMismatchError",
    "GraphNotFinalizedError",
    "StateError",
    "DeviceUnavailableError",
    "EngineError",
    "GraphValidationError",
    "OpArgumentError",
    "OpTypeError",
    "AxisError",
    "ArgumentError",
    "ArgumentTypeError",
    "RecaptureWarning",
    "CaptureWarning",
]


class KilnError(Exception):
    """Base class of every kiln error."""


class CaptureError(KilnError, RuntimeError):
    """Something in the traced function cannot be recorded into a graph.

    The message names the operation (``float(t)``, ``np.asarray(t)``, ...) and the user's source
    line where it happened.
    """


class UnsupportedOperationError(KilnError, NotImplementedError):
    """A NumPy function or operator that kiln does not implement was called on a kiln tensor."""


class InputMismatchError(KilnError, ValueError):
    """Inputs given to a graph or compiled function do not fit its signature."""


class GraphNotFinalizedError(KilnError, RuntimeError):
    """``run`` was called on a graph that was not finalized; call ``finalize()`` first."""


class StateError(KilnError, RuntimeError):
    """An operation that the object's current state does not allow."""


class DeviceUnavailableError(KilnError, RuntimeError):
    """A place was asked for whose backend is not installed or not present."""


class EngineError(KilnError, RuntimeError):
    """An engine (onnxruntime, XLA) failed while running a graph; the message names the node
    where the engine says which one."""


class GraphValidationError(KilnError, ValueError):
    """A graph breaks an invariant of the IR (order, ownership, names or types)."""


class OpArgumentError(KilnError, ValueError):
    """An operator was called with a bad shape, axis, attribute or argument count."""


class OpTypeError(KilnError, TypeError):
    """An operator was called with an input of a dtype it does not accept."""


class AxisError(OpArgumentError, np.exceptions.AxisError):
    """An axis argument outside the axes of the tensor it indexes.

    Also NumPy's own ``AxisError`` (so both ``ValueError`` and ``IndexError``): code written
    against NumPy catches it as it catches NumPy's.

    Example:
        >>> issubclass(AxisError, (ValueError, IndexError)), str(AxisError("sum: axis 2"))
        (True, 'sum: axis 2')
    """


class ArgumentError(KilnError, ValueError):
    """An argument of a kiln function has a bad value (a ``dynamic_axes`` key that names no
    input, a size of ``10**19``, a zero ``arange`` step); the message names the argument,
    what was expected and what was given.

    Example:
        >>> issubclass(ArgumentError, ValueError)
        True
    """


class ArgumentTypeError(KilnError, TypeError):
    """An argument of a kiln function has the wrong type (``dynamic_axes=[0]`` instead of a
    mapping, ``'a'`` where a size is expected); a ``TypeError`` as Python's own would be.

    Example:
        >>> issubclass(ArgumentTypeError, TypeError)
        True
    """


class RecaptureWarning(UserWarning):
    """A compiled function re-captured too often and now serves eagerly."""


class CaptureWarning(UserWarning):
    """A capture was abandoned and the function serves that input structure eagerly."""
