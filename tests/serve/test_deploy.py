"""How gunicorn is started: the packaged config, the worker check, importing without spawning."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import HEADERS, ROOT, Gateway, init_body


def test_packaged_config_works_outside_the_project_root(gateway_factory: Any, tmp_path: Path) -> None:
    gw = gateway_factory(cwd=tmp_path, config="python:mcpgate.gunicorn_config")
    status, _headers, body = gw.request("POST", body=init_body(), headers=HEADERS)
    assert status == 200 and json.loads(body)["result"]["serverInfo"]["name"] == "mcpgate-demo"
    assert "Using worker: mcpgate.serve.worker.GatewayWorker" in gw.log()


def test_a_non_gevent_worker_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    gw = Gateway(cwd=tmp_path)  # no gunicorn.conf.py here: gunicorn's default sync worker
    try:
        gw.proc.wait(30)
        assert gw.proc.returncode != 0
        assert "needs gunicorn's gevent worker" in gw.log()
        assert "-c python:mcpgate.gunicorn_config" in gw.log()
    finally:
        gw.stop()


def test_importing_the_wsgi_module_spawns_nothing() -> None:
    code = (
        "import os, mcpgate.wsgi as w; from mcpgate.orphans import children_of; "
        "print(type(w.application).__name__, len(children_of(os.getpid())))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["Flask", "0"], out.stderr


def test_procfile_and_root_config() -> None:
    assert (ROOT / "Procfile").read_text().strip() == "web: gunicorn mcpgate.wsgi"
    assert "mcpgate.gunicorn_config" in (ROOT / "gunicorn.conf.py").read_text()


def test_port_selects_the_heroku_bind() -> None:
    code = "import mcpgate.gunicorn_config as c; print(c.bind[0], c.worker_class, c.workers)"
    env_port = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PORT": "5123"},
        timeout=60,
    )
    assert env_port.stdout.split() == ["0.0.0.0:5123", "mcpgate.serve.worker.GatewayWorker", "1"], env_port.stderr
    no_port = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert no_port.stdout.split()[0] == "127.0.0.1:8000"
