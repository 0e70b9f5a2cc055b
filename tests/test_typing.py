"""mypy --strict over the whole package, from [tool.mypy] in pyproject.toml (no file list here to drift)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support import ROOT


def test_mypy_strict_over_the_package() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    # the configuration reached every module of the package, not a part of it
    checked = re.search(r"no issues found in (\d+) source files", result.stdout)
    modules = list((ROOT / "mcpgate").rglob("*.py"))
    assert checked and int(checked.group(1)) == len(modules), result.stdout
