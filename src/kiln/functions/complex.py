"""Front doors of complex numbers: ``np.real``, ``np.imag``, ``np.conjugate``, ``np.angle``,
and ``Tensor.real`` / ``Tensor.imag`` / ``Tensor.conj()``.

On a complex tensor each lowers onto its kiln-domain operator (:mod:`kiln.ops.complex`); on a
real one it does what NumPy does there (``np.real`` gives the tensor itself, ``np.imag`` zeros
of its dtype, ``np.conjugate`` a copy). The parts are new tensors, not views: writing into
``x.real`` is not supported (``Tensor.real`` is a read-only property).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..tensor import Tensor, call, eager_plan
from .creation import zeros_like
from .numpy_protocol import implements
from .operands import as_tensor, constant, ufunc_operands

__all__ = ["real", "imag", "conj", "conjugate", "angle", "iscomplexobj", "isrealobj"]


def _complex(t: Tensor) -> bool:
    return t.dtype.kind == "c"


@implements(np.real)
@eager_plan(1)
def real(x: Any) -> Tensor:
    """The real part of each element (``np.real``); a real tensor is returned as it is.

    Example:
        >>> import kiln
        >>> kiln.real(kiln.tensor([1 + 2j])).tolist()
        [1.0]
    """
    t = as_tensor(x)
    return call("kiln.Real", t) if _complex(t) else t


@implements(np.imag)
@eager_plan(1)
def imag(x: Any) -> Tensor:
    """The imaginary part of each element (``np.imag``); zeros of a real tensor's dtype.

    Example:
        >>> import kiln
        >>> kiln.imag(kiln.tensor([1 + 2j])).tolist()
        [2.0]
    """
    t = as_tensor(x)
    return call("kiln.Imag", t) if _complex(t) else zeros_like(t)


@implements(np.conjugate)
@eager_plan(1)
def conjugate(x: Any) -> Tensor:
    """The complex conjugate of each element (``np.conjugate``, ``np.conj``); a copy of a real
    tensor.

    Example:
        >>> import kiln
        >>> kiln.conjugate(kiln.tensor([1 + 2j])).tolist()
        [(1-2j)]
    """
    (t,), _ = ufunc_operands(np.conjugate, x)
    return call("kiln.Conj", t) if _complex(t) else call("Identity", t)


conj = conjugate


@implements(np.angle)
@eager_plan(1)
def angle(z: Any, deg: bool = False) -> Tensor:
    """The angle of each element, ``atan2(imag, real)`` in radians (degrees with ``deg``), as
    ``np.angle``: float32 for complex64, and for real input the dtype ``np.arctan2(0, z)`` has.

    Example:
        >>> import kiln
        >>> kiln.angle(kiln.tensor([1j, -1.0])).tolist()
        [1.5707963267948966, 3.141592653589793]
    """
    t = as_tensor(z)
    if not _complex(t):
        # np.angle of a real array is arctan2(0, z): 0 or pi (by the sign bit), or NaN
        (_, t), _ = ufunc_operands(np.arctan2, 0, t, name="angle")
    result = call("kiln.Angle", t)
    if deg:
        result = call("Mul", result, constant(180 / np.pi, result.dtype))
    return result


@implements(np.iscomplexobj)
def iscomplexobj(x: Any) -> bool:
    """Whether ``x`` has a complex dtype (``np.iscomplexobj``: its dtype, not its values).

    Example:
        >>> import kiln
        >>> kiln.iscomplexobj(kiln.tensor([1.0])), kiln.iscomplexobj(kiln.tensor([1 + 0j]))
        (False, True)
    """
    return dtypes.is_complex(as_tensor(x).dtype) if not isinstance(x, complex) else True


@implements(np.isrealobj)
def isrealobj(x: Any) -> bool:
    """Whether ``x`` has no complex dtype (``np.isrealobj``).

    Example:
        >>> import kiln
        >>> kiln.isrealobj(kiln.tensor([1 + 0j]))
        False
    """
    return not iscomplexobj(x)


def real_property(self: Tensor) -> Tensor:
    """``Tensor.real``: the real part (``ndarray.real``), read-only."""
    return real(self)


def imag_property(self: Tensor) -> Tensor:
    """``Tensor.imag``: the imaginary part (``ndarray.imag``), read-only."""
    return imag(self)
