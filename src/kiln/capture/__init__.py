"""Capture: recording Python functions into graphs (``kiln.trace``; ``kiln.compile``).

- ``trace.py``: the tracer (recording tensors, symbolic input sizes, planning graph inputs);
- ``traced.py``: ``kiln.trace`` and ``TracedGraph``;
- ``compiled.py``: ``kiln.compile`` and ``CompiledFunction``, a cache of captures keyed by a
  call's abstract signature;
- ``signature.py``: a call flattened once (``CallSignature``) and what a capture recorded
  (``CapturedInputs``);
- ``policy.py``: what changed since a capture and what to do (``RecapturePolicy``);
- ``recorder.py``: recording one call into a capture (value guards, finalizing, the replay);
- ``replay.py``: a capture (``Capture``) and its replay (``Replay``).
"""

from __future__ import annotations

from . import control  # noqa: F401  # records kiln.cond / fori_loop / scan as one node
from .traced import TracedGraph, trace

__all__ = ["TracedGraph", "trace"]
