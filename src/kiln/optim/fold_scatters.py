"""Chains of writes into constant positions folded into one ``ScatterND``.

A loop ``for i in range(n): out[i] = f(i)`` records ``n`` scatters, each copying the whole
array to write one row. When every scatter of a chain has constant indices of the same depth
(see :mod:`~kiln.optim.scatter_writes`) and each intermediate version is read only by the next
scatter, the chain is one scatter of all the rows::

    ScatterND(ScatterND(x, i1, u1), i2, u2)   -> ScatterND(x, Concat(i1, i2), Concat(u1, u2))

NumPy's "last write wins" is kept exactly: a row some later row of the chain writes again is
dropped before concatenating (a scatter entirely rewritten later disappears; a partly
rewritten one keeps a ``Gather`` of its surviving rows), so the folded indices never repeat.
Writes recorded as 1-D ``ScatterElements`` fold the same way, into one ``ScatterElements``.
When the last write rewrites every earlier one, it alone stays, writing into the first
version (any operator). A chain of ``kiln.SliceUpdate`` boxes (``out[i] = row``) folds into one
``ScatterND`` only when the boxes together cover the whole array, which
:mod:`fold_full_overwrites` turns into a ``Concat``: a plan assigns boxes in place at memory
speed, which beats a scatter through an index array or copying the array whole.
Chains longer than :attr:`DefaultsOptions.constant_folding_limit` rows are left alone.
"""

from __future__ import annotations

import numpy as np

from ..ir.builder import GraphBuilder
from ..ir.graph import ModelGraph, Node
from .scatter_writes import (
    SLICE_UPDATE,
    ConstantWrites,
    added_since,
    last_writes,
    previous_writes,
    scatter,
    scatter_writes,
    splice,
    update_rows,
)
from .transform import DefaultsOptions, transform

__all__ = ["fold_scatters"]


def _chains(graph: ModelGraph) -> list[list[ConstantWrites]]:
    """The maximal chains (first write first) of two or more constant writes where each
    version but the last is read only by the next write."""
    writes = scatter_writes(graph)
    links = previous_writes(graph, writes)

    def previous(w: ConstantWrites) -> ConstantWrites | None:
        return links.get(id(w.node))

    inner = {id(p.node) for w in writes.values() if (p := previous(w)) is not None}
    chains = []
    for w in writes.values():
        if id(w.node) in inner:
            continue  # not the last write of its chain
        chain = [w]
        while (p := previous(chain[-1])) is not None:
            chain.append(p)
        if len(chain) > 1:
            chains.append(chain[::-1])
    return chains


def _last_covers(chain: list[ConstantWrites]) -> bool:
    """Whether the last write rewrites every position the earlier ones wrote."""
    rewritten = np.zeros(chain[-1].cells, np.bool_)
    rewritten[chain[-1].positions] = True
    return all(rewritten[w.positions].all() for w in chain[:-1])


def _full(chain: list[ConstantWrites]) -> bool:
    """Whether the chain writes every position (then it becomes a ``Concat``)."""
    written = np.zeros(chain[0].cells, np.bool_)
    for w in chain:
        written[w.positions] = True
    return bool(written.all())


def _fold(chain: list[ConstantWrites], builder: GraphBuilder) -> None:
    """Add the one scatter standing for ``chain`` (defining its last node's output)."""
    first, last = chain[0], chain[-1]
    positions = np.concatenate([w.positions for w in chain])
    kept = last_writes(positions)
    out = last.node.outputs[0]
    if np.array_equal(kept, np.arange(len(positions) - len(last.positions), len(positions))):
        # the last write rewrites all the others (and repeats none): it alone, into the first
        # version
        inputs = [first.data, *last.node.inputs[1:]]
        builder.add(last.node.op, inputs, last.node.attrs, outputs=[out])
        return
    parts = []
    # kept is sorted: the rows of each write are one slice of it (found for all at once)
    starts = np.cumsum([0, *(len(w.positions) for w in chain)])
    bounds = np.searchsorted(kept, starts).tolist()
    for k, w in enumerate(chain):
        lo, hi = bounds[k], bounds[k + 1]
        if hi - lo == len(w.positions) and hi > lo:
            parts.append(update_rows(builder, w))  # every row survives
        elif hi > lo:  # some rows are written again later: gather the others
            select = builder.add_constant(kept[lo:hi] - starts[k], hint="rows")
            parts.append(builder.add("Gather", [update_rows(builder, w), select], {"axis": 0})[0])
    if not parts:  # nothing written at all
        builder.add("Identity", [first.data], outputs=[out])
        return
    updates = parts[0] if len(parts) == 1 else builder.add("Concat", parts, {"axis": 0})[0]
    scatter(builder, last, first.data, positions[kept], updates, outputs=[out])


@transform("fold_scatters")
def fold_scatters(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Fold each chain of scatters into constant positions into one scatter (NumPy's last
    write wins; see the module docstring)."""
    chains = [
        chain
        for chain in _chains(graph)
        if sum(len(w.positions) * w.depth for w in chain) <= options.constant_folding_limit
        and (chain[0].node.op != SLICE_UPDATE or _last_covers(chain) or _full(chain))
    ]
    if not chains:
        return graph, 0
    builder = GraphBuilder(graph.name_scope())
    replacements: dict[str, tuple[Node, ...]] = {}
    for chain in chains:
        before = builder.node_count
        builder.source = chain[-1].node.source
        _fold(chain, builder)
        replacements[chain[-1].node.name] = added_since(builder, before)
        replacements.update((w.node.name, ()) for w in chain[:-1])  # in bounds: cannot raise
    return splice(graph, replacements, builder), len(chains)
