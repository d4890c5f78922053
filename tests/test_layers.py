"""The package's import structure: no import cycles, and no private state written across modules.

The layer contract itself (imports point down, SPEC section 10) is import-linter's job
(``lint-imports``, run by ``.ci/run``); these tests check what a layers contract cannot see.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")

SRC = Path(__file__).resolve().parents[1] / "src" / "kiln"


def _import_graph() -> dict[str, set[str]]:
    graph = grimp.build_graph("kiln", exclude_type_checking_imports=True)
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        imported = graph.find_modules_directly_imported_by(module)
        # A package re-exporting its own submodules is not a cycle.
        edges[module] = {m for m in imported if not m.startswith(module + ".")}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_package_has_no_import_cycles():
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# Private attributes of objects that other modules must not write (their owners give methods).
_OWNED = {
    "_program": "ir/graph.py",
    "_place": "ir/graph.py",
    "_data": "tensor.py",
    "_trace": "tensor.py",
}


@pytest.mark.parametrize("attribute", sorted(_OWNED))
def test_no_private_state_is_written_from_another_module(attribute):
    write = re.compile(rf"\b(?!self\b)\w+\.{attribute}\s*=(?!=)")
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative == _OWNED[attribute]:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if write.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert not offenders, f"{attribute} written outside {_OWNED[attribute]}:\n" + "\n".join(
        offenders
    )
