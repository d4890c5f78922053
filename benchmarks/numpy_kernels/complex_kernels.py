"""Complex arithmetic: DFT by matrix, rotations, Mandelbrot, spectra."""

from __future__ import annotations

import numpy as np

from . import kernel


def _real_signal(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal(n),)


@kernel("complex", make=_real_signal, bench=256, tiny=8)
def dft_matrix(x):
    """Discrete Fourier transform as a complex matrix product W @ x; power and phase."""
    n = x.shape[0]
    k = np.arange(n)
    w = np.exp(-2j * np.pi * np.outer(k, k) / n)
    spectrum = w @ x
    return np.abs(spectrum) ** 2, np.angle(spectrum)


def _phasors(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    z = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    return z, rng.uniform(-np.pi, np.pi, n)


@kernel("complex", make=_phasors, bench=200_000, tiny=8)
def rotate_phasors(z, theta):
    """Rotate complex phasors by exp(1j*theta), conjugate product, magnitude (complex128)."""
    rotated = z * np.exp(1j * theta)
    cross = rotated * np.conj(z)
    return rotated.real, rotated.imag, np.abs(cross), np.sum(cross)


def _plane(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    re = np.linspace(-2.0, 0.6, n) + rng.uniform(0, 1e-3)
    im = np.linspace(-1.2, 1.2, n)
    return (re[None, :] + 1j * im[:, None],)


@kernel("complex", make=_plane, bench=200, tiny=5)
def mandelbrot(c):
    """Escape counts of 20 Mandelbrot iterations z <- z^2 + c, clamped to stay finite."""
    z = np.zeros_like(c)
    count = np.zeros(c.shape, dtype=np.int64)
    for _ in range(20):
        z = z * z + c
        inside = np.abs(z) <= 2.0
        count = count + inside
        z = np.where(inside, z, 2.0 + 0j)
    return count


@kernel("complex", make=_real_signal, bench=65_536, tiny=16)
def power_spectrum(x):
    """One-sided power spectrum by np.fft.rfft with a Hann window."""
    window = np.hanning(x.shape[0])
    return np.abs(np.fft.rfft(x * window)) ** 2
