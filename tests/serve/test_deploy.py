"""How gunicorn is started: the packaged config, the worker check, importing without spawning; and deploy/'s
recipes run as written, by the runner each names (honcho for the fleet's Procfile, haproxy -c, nginx -t)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from mcpgate.config.settings import Settings, SettingsError
from mcpgate.core.wire import PROTOCOL_VERSION, SESSION_ID
from tests.support import HEADERS, ROOT, Gateway, call, init_body, modern_body, modern_headers, reply_message
from tests.support.fleet import HAPROXY, installed
from tests.support.recipe import fleet_recipe, wait_gone

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def test_packaged_config_works_outside_the_project_root(gateway_factory: Any, tmp_path: Path) -> None:
    gw = gateway_factory(cwd=tmp_path, config="python:mcpgate.gunicorn_config")
    status, _headers, body = gw.request("POST", body=init_body(), headers=HEADERS)
    assert status == 200 and json.loads(body)["result"]["serverInfo"]["name"] == "mcpgate-demo"
    assert "Using worker: mcpgate.serve.front.lazy_worker.GatewayWorker" in gw.log()


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
        "import os, mcpgate.wsgi as w; from mcpgate.child.orphans import children_of; "
        "print(type(w.application).__name__, len(children_of(os.getpid())))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    # a plain configuration (no OAuth, no metrics) builds the Flask-free app: serve/front/bare.py
    assert out.stdout.split() == ["BareApp", "0"], out.stderr


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
    assert env_port.stdout.split() == ["0.0.0.0:5123", "mcpgate.serve.front.lazy_worker.GatewayWorker", "1"], (
        env_port.stderr
    )
    no_port = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert no_port.stdout.split()[0] == "127.0.0.1:8000"


# -- deploy/: every recipe as written, by the runner it names ------------------------------------------------

REDIS_PASSWORD = "recipe-redis-password-0123456789"
TOKEN = "recipe-token-0123456789"
FRONT_HOST = "mcp.test"  # behind the public front a loopback Host name is refused: the recipe names its host


def test_the_fleet_procfile_runs_under_honcho(tmp_path: Path) -> None:
    """`honcho -f deploy/Procfile.fleet start` with the .env the recipe describes: Redis with its ACL user and
    password, four instances, HAProxy; sessions on every instance through it, a 2026-07-28 call, Redis refusing
    a client without the password; then stopping one process stops them all (deploy/README.md says so)."""
    dotenv = {
        "MCPGATE_REDIS_PASSWORD": REDIS_PASSWORD,
        "MCPGATE_AUTH_TOKEN": TOKEN,
        "MCPGATE_ALLOWED_HOSTS": FRONT_HOST,
    }
    with fleet_recipe(tmp_path, dotenv) as recipe:
        recipe.wait_up()
        # the instances listen for handed connections in the recipe's directory (MCPGATE_HANDOFF_DIR), a private one
        handoff = (
            Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"mcpgate-handoff-{os.getuid()}-{recipe.ports['redis']}"
        )
        assert sorted(path.name for path in handoff.iterdir()) == ["i1.sock", "i2.sock", "i3.sock", "i4.sock"]
        assert stat.S_IMODE(handoff.stat().st_mode) == 0o700
        headers = {**HEADERS, "Host": FRONT_HOST, "Authorization": f"Bearer {TOKEN}"}
        owners = set()
        for index in range(4):  # HAProxy sends initializes round-robin: one session on each instance
            opened = recipe.request("POST", body=init_body(), headers=headers)
            assert opened.status == 200, (opened, recipe.log())
            session = {**headers, SESSION_ID: opened.headers["mcp-session-id"], PROTOCOL_VERSION: "2025-11-25"}
            owners.add(session[SESSION_ID].split(".", 1)[0])
            assert recipe.request("POST", body=INITIALIZED, headers=session).status == 202
            echoed = reply_message(recipe.request("POST", body=call("echo", {"message": f"m{index}"}), headers=session))
            assert echoed["result"]["content"][0]["text"] == f"m{index}", echoed
        assert owners == {"i1", "i2", "i3", "i4"}
        modern = {**modern_headers("tools/call", "echo"), "Host": FRONT_HOST, "Authorization": f"Bearer {TOKEN}"}
        answer = recipe.request(
            "POST", body=modern_body(9, "tools/call", {"name": "echo", "arguments": {"message": "n"}}), headers=modern
        )
        assert reply_message(answer)["result"]["content"][0]["text"] == "n", answer
        anonymous = {name: value for name, value in headers.items() if name != "Authorization"}
        assert recipe.request("POST", body=init_body(), headers=anonymous).status == 401

        redis_is_guarded(recipe.ports["redis"])
        started = recipe.started()
        assert sorted(started) == ["haproxy", "i1", "i2", "i3", "i4", "redis"], recipe.log()
        assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and REDIS_PASSWORD in cmdline(int(pid))]

        os.killpg(started["i2"], signal.SIGTERM)  # one process stops: the runner stops the others
        recipe.wait_stopped()
        assert wait_gone(list(started.values())) == [], recipe.log()
    assert list(handoff.iterdir()) == []  # each instance's socket removed as it stopped
    handoff.rmdir()


def redis_is_guarded(port: int) -> None:
    """The recipe's Redis: nothing without the password; its one user reaches mcpgate:* and no dangerous command."""
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=port).get("mcpgate:cluster-key")
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=port, password=REDIS_PASSWORD).ping()  # the default user is off
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=port, username="mcpgate", password="not-the-password").ping()
    user = redis.Redis(port=port, username="mcpgate", password=REDIS_PASSWORD)
    assert user.get("mcpgate:cluster-key"), "the instances made the cluster key"
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.get("another-application:key")
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.config_get("dir")


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as source:
            return source.read().decode(errors="replace")
    except OSError:
        return ""


def test_the_haproxy_recipe_checks() -> None:
    binary = installed("haproxy", HAPROXY)
    checked = subprocess.run(
        [binary, "-c", "-f", "deploy/haproxy.cfg"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_nginx_recipe_checks(tmp_path: Path) -> None:
    """deploy/nginx.conf is an http-block include: checked (nginx -t) inside a minimal main configuration."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.access(binary, os.X_OK):
        pytest.skip("nginx is not installed here (its recipe is checked with nginx -t where it is)")
    main = tmp_path / "nginx.conf"
    main.write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{\n    access_log off;\n    include {ROOT / 'deploy' / 'nginx.conf'};\n}}\n"
    )
    checked = subprocess.run([binary, "-t", "-p", str(tmp_path), "-c", str(main)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_port_with_a_bind_names_the_runner() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"PORT": "5000", "MCPGATE_BIND": "127.0.0.1:8001"})
    assert "PORT and MCPGATE_BIND are both set" in str(refused.value)
    assert "Procfile runners (honcho, foreman)" in str(refused.value) and "unset PORT" in str(refused.value)


def test_secrets_and_redis_data_stay_out_of_git() -> None:
    for path in (".env", "appendonlydir/appendonly.aof.1.base.rdb", "dump.rdb", "deploy/.env"):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, timeout=30)
        assert ignored.returncode == 0, f"{path} is not ignored by .gitignore"
