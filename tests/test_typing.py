"""mypy --strict over the typed parts: the pure core (a house rule), the server side and the relay."""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT

STRICT = ["mcpgate/core", "mcpgate/serve", "mcpgate/child.py", "mcpgate/pipes.py", "mcpgate/spawn.py", "mcpgate/orphans.py",
          "mcpgate/settings.py", "mcpgate/wsgi.py", "mcpgate/demo_server.py", "mcpgate/demo_tools.py", "mcpgate/relay"]


def test_mypy_strict() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", *STRICT], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
