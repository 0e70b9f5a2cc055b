"""The README's first command in a fresh virtual environment: the runtime dependencies alone must serve."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path
from tests.support import ROOT, Gateway
from tests.support import HEADERS, init_body


def test_pip_install_then_gunicorn_serves_the_demo(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(ROOT)], capture_output=True,
                             text=True, timeout=900)
    assert install.returncode == 0, install.stdout + install.stderr
    gw = Gateway(cwd=ROOT, python=str(python))
    try:
        gw.wait_ready()
        status, headers, body = gw.request("POST", body=init_body(), headers=HEADERS)
        assert status == 200 and b"mcpgate-demo" in body, gw.log()
    finally:
        gw.stop()
