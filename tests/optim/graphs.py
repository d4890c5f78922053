"""Helpers the pass tests share: trace a graph, run a finalized copy, list its ops."""

from __future__ import annotations

import numpy as np

import kiln


def traced(fn, *args, **kwargs):
    """The recorded graph of ``fn`` on example inputs (``kiln.trace`` keywords allowed)."""
    return kiln.trace(fn, *args, **kwargs).graph


def run(graph, *inputs):
    """The outputs of a finalized copy of ``graph`` (the graph itself is left as it is)."""
    graph = graph.copy()
    graph.finalize()
    return [np.asarray(t) for t in graph.run(list(inputs))]


def ops(graph):
    """The graph's operator names, in order."""
    return [n.op for n in graph.nodes]
