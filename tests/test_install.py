"""The README's first command, `pip install . && gunicorn mcpgate.wsgi`, followed in a fresh virtual environment
from the project root: the runtime dependencies alone must serve. (tests/test_packaging.py installs the wheel.)"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

from tests.support import ROOT, assert_serves_the_demo


def test_pip_install_then_gunicorn_serves_the_demo(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    install = subprocess.run(
        [str(bin_dir / "pip"), "install", "--quiet", "."], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert_serves_the_demo(str(bin_dir / "python"), ROOT)
