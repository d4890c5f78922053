"""The optimizer's layout: a pass is one module and one test file, and imports no other pass."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from kiln.optim import default_pipeline

TESTS = Path(__file__).parent
PASSES = {t.name: t.rewrite.__module__ for t in default_pipeline(elementwise_fusion=True)}
PASS_MODULES = set(PASSES.values())


def _imported_modules(module: str) -> set[str]:
    """The kiln modules ``module`` imports at run time (not under ``if TYPE_CHECKING``)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    found: set[str] = set()
    for node in tree.body:  # top-level imports only: TYPE_CHECKING blocks are If nodes
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one level up per extra dot
                base = ".".join(module.split(".")[: -node.level])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_each_pass_is_its_own_module():
    for name, module in PASSES.items():
        assert module == f"kiln.optim.{name}", (name, module)


@pytest.mark.parametrize("name", sorted(PASSES))
def test_each_pass_has_its_own_test_file(name):
    assert (TESTS / f"test_{name}.py").is_file(), f"tests/optim/test_{name}.py is missing"


@pytest.mark.parametrize("module", sorted(PASS_MODULES | {"kiln.optim.pattern"}))
def test_no_pass_and_not_the_rewrite_driver_imports_a_pass(module):
    others = (PASS_MODULES - {module}) & _imported_modules(module)
    assert not others, f"{module} imports the pass(es) {sorted(others)}"
