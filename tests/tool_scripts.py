"""The scripts under ``tools/`` (not a package), loaded as modules for the tests that run a
slice of them (``tests/fuzz/test_fuzz.py``, ``tests/test_exactness_audit.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py`` as the module ``kiln_tools_<name>``."""
    spec = importlib.util.spec_from_file_location(f"kiln_tools_{name}", TOOLS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module
