"""The exception hierarchy of SPEC §7: every kiln error is a KilnError and the matching built-in."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import errors

# (class, the built-in a Python user would catch for the same mistake)
HIERARCHY = [
    (errors.CaptureError, RuntimeError),
    (errors.UnsupportedOperationError, NotImplementedError),
    (errors.InputMismatchError, ValueError),
    (errors.GraphNotFinalizedError, RuntimeError),
    (errors.StateError, RuntimeError),
    (errors.DeviceUnavailableError, RuntimeError),
    (errors.GraphValidationError, ValueError),
    (errors.OpArgumentError, ValueError),
    (errors.OpTypeError, TypeError),
    (errors.EngineError, RuntimeError),
    (errors.ArgumentError, ValueError),
    (errors.ArgumentTypeError, TypeError),
    (errors.AxisError, errors.OpArgumentError),
    (errors.AxisError, IndexError),  # NumPy's AxisError is a ValueError and an IndexError
    (errors.AxisError, np.exceptions.AxisError),
]

SPEC_ERRORS = [
    "CaptureError",
    "UnsupportedOperationError",
    "InputMismatchError",
    "GraphNotFinalizedError",
    "StateError",
    "DeviceUnavailableError",
    "GraphValidationError",
]


def test_kiln_error_is_an_exception() -> None:
    assert issubclass(kiln.KilnError, Exception)
    assert kiln.KilnError is errors.KilnError


@pytest.mark.parametrize(("cls", "builtin"), HIERARCHY, ids=lambda c: c.__name__)
def test_error_derives_from_kiln_error_and_builtin(cls: type, builtin: type) -> None:
    assert issubclass(cls, errors.KilnError)
    assert issubclass(cls, builtin)
    # Both ways of catching work on a raised instance, and the message survives.
    with pytest.raises(builtin, match="what went wrong"):
        raise cls("what went wrong")
    with pytest.raises(kiln.KilnError):
        raise cls("what went wrong")


@pytest.mark.parametrize("name", SPEC_ERRORS)
def test_spec_errors_are_exported_from_kiln(name: str) -> None:
    assert getattr(kiln, name) is getattr(errors, name)
    assert name in kiln.__all__


def test_errors_module_all_lists_every_class() -> None:
    for name in errors.__all__:
        assert isinstance(getattr(errors, name), type), name
    assert set(SPEC_ERRORS) <= set(errors.__all__)


def test_warnings_are_user_warnings_not_errors() -> None:
    for warning in (errors.RecaptureWarning, errors.CaptureWarning):
        assert issubclass(warning, UserWarning)
        assert not issubclass(warning, errors.KilnError)


def test_unrelated_builtins_do_not_catch() -> None:
    # A ValueError-family error must not be swallowed by ``except TypeError`` and vice versa.
    assert not issubclass(errors.OpArgumentError, TypeError)
    assert not issubclass(errors.OpTypeError, ValueError)
    assert not issubclass(errors.InputMismatchError, RuntimeError)
