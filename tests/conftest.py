"""Shared pytest configuration: a fast, deterministic hypothesis profile, and the optimizer
checking the IR after every transform (a pass that breaks a graph fails the test that ran it,
naming the pass)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from kiln.optim.pipeline import verify_every_transform

settings.register_profile(
    "kiln",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("kiln")
verify_every_transform(True)
