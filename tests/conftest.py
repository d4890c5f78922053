"""Shared pytest configuration: a fast, deterministic hypothesis profile."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "kiln",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("kiln")
