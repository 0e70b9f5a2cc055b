"""House rule 1: importing the core loads no gevent, flask, werkzeug, requests or gunicorn."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CORE = REPO_ROOT / "mcpgate" / "core"
MODULES = sorted(f"mcpgate.core.{p.stem}" for p in CORE.glob("*.py") if p.stem != "__init__")
FORBIDDEN = {"gevent", "flask", "werkzeug", "requests", "gunicorn"}


def test_expected_modules_present() -> None:
    assert {"framing", "jsonrpc", "versions", "cancel", "sse", "sessions", "routing"} <= {
        m.rsplit(".", 1)[1] for m in MODULES
    }


def test_core_import_loads_no_io_stack() -> None:
    code = (
        f"import {', '.join(MODULES)}; import sys; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FORBIDDEN)!r}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_core_import_loads_only_the_stdlib_and_the_core() -> None:
    """What importing the core loads in a fresh interpreter, dynamic imports (importlib, __import__) included,
    which the import statements checked below do not show: the standard library, mcpgate and mcpgate.core."""
    code = (
        "import json, sys; before = set(sys.modules); "
        f"import {', '.join(MODULES)}; print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    inside = [m for m in loaded if m in ("mcpgate", "mcpgate.core") or m.startswith("mcpgate.core.")]
    assert set(MODULES) <= set(inside)
    assert [m for m in loaded if m not in inside and m.split(".")[0] not in sys.stdlib_module_names] == []


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_imports_only_stdlib_and_itself(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path.name}: a relative import (the project's imports are absolute)"
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            inside = name == "mcpgate.core" or name.startswith("mcpgate.core.")
            assert inside or top in sys.stdlib_module_names or name == "__future__", f"{path.name} imports {name}"
