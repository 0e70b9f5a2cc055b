"""Install the peer gateways into bench/.peers (on request: `python bench/run.py --install-peers`).

npm: supergateway 4.0.0 and mcp-proxy 6.7.19 into bench/.peers/npm.
PyPI: mcp-proxy 0.13.0 and mcp-stdio 0.45.2 into their own venv, bench/.peers/venv, so their
dependencies (mcp, uvicorn, httpx...) never mix with mcpgate's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PEERS = BENCH / ".peers"
NPM_DIR = PEERS / "npm"
VENV = PEERS / "venv"
NPM_PACKAGES = ("supergateway@4.0.0", "mcp-proxy@6.7.19")
PYPI_PACKAGES = ("mcp-proxy==0.13.0", "mcp-stdio==0.45.2")


def npm_bin(name: str) -> Path:
    return NPM_DIR / "node_modules" / ".bin" / name


def venv_bin(name: str) -> Path:
    return VENV / "bin" / name


def install() -> dict[str, str]:
    """Install every peer; returns {package: "ok" or why not}."""
    status: dict[str, str] = {}
    PEERS.mkdir(parents=True, exist_ok=True)
    npm = shutil.which("npm")
    if npm is None:
        for package in NPM_PACKAGES:
            status[package] = "not installed: npm not found on PATH"
    else:
        NPM_DIR.mkdir(exist_ok=True)
        if not (NPM_DIR / "package.json").exists():
            (NPM_DIR / "package.json").write_text(json.dumps({"name": "mcpgate-bench-peers", "private": True}))
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", *NPM_PACKAGES],
            cwd=NPM_DIR,
            capture_output=True,
            text=True,
            timeout=900,
        )
        for package in NPM_PACKAGES:
            status[package] = "ok" if done.returncode == 0 else f"npm install failed: {done.stderr.strip()[-300:]}"
    if not venv_bin("python").exists():
        made = subprocess.run([sys.executable, "-m", "venv", str(VENV)], capture_output=True, text=True)
        if made.returncode != 0:
            for package in PYPI_PACKAGES:
                status[package] = f"venv creation failed: {made.stderr.strip()[-300:]}"
            return status
    done = subprocess.run(
        [str(venv_bin("python")), "-m", "pip", "install", "-q", *PYPI_PACKAGES],
        capture_output=True,
        text=True,
        timeout=900,
    )
    for package in PYPI_PACKAGES:
        status[package] = "ok" if done.returncode == 0 else f"pip install failed: {done.stderr.strip()[-300:]}"
    return status


def installed_version(kind: str, name: str) -> str | None:
    """The installed version of a peer, or None."""
    if kind == "npm":
        manifest = NPM_DIR / "node_modules" / name / "package.json"
        return json.loads(manifest.read_text())["version"] if manifest.exists() else None
    python = venv_bin("python")
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


if __name__ == "__main__":
    for package, state in install().items():
        print(f"{package}: {state}")
