"""An idle gateway imports only what its configured features use (issue 24): with the plain configuration (the
demo server, auth off, no metrics, no Redis) neither the worker nor the gunicorn master holds the OAuth
libraries, Redis's client, requests, prometheus_client or the relay; with a feature configured, its modules are
there.

Each test starts the real gateway with a gunicorn config file of its own that takes every setting and hook of
mcpgate.gunicorn_config and adds two hooks that only write: `when_ready` (the master, its start checks done)
writes the master's sys.modules to a file, and the worker's SIGUSR2 (no gunicorn worker uses it) writes the
worker's. Nothing is added to the gateway itself.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from werkzeug.security import generate_password_hash

from tests.support import HEADERS, Gateway, call, direct_children, open_session, serving, wait_for
from tests.support.fleet import redis_server
from tests.support.oauth import embedded_env, oidc_issuer, resource_server_env

HOOKS = """
import mcpgate.gunicorn_config as _gateway
from mcpgate.gunicorn_config import *  # noqa: F403

_OUT = {out!r}


def _write(path):
    import os, sys

    with open(path + ".tmp", "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
    os.replace(path + ".tmp", path)


def when_ready(server):
    _write(_OUT + ".master")


def post_worker_init(worker):
    _gateway.post_worker_init(worker)
    import signal

    signal.signal(signal.SIGUSR2, lambda signum, frame: _write(_OUT + ".worker"))
"""
# never in a plain gateway's processes
FEATURE_ONLY = ("authlib", "joserfc", "redis", "requests", "prometheus_client", "mcpgate.relay")
# this session's features (issue 25 and 26), each imported only when configured: a remote upstream in
# MCPGATE_CONFIG, the management API's token or scope, the vault's SQLite store and its sealing
NEW_FEATURES = ("mcpgate.serve.remote", "mcpgate.serve.admin", "sqlite3", "_sqlite3", "cryptography")
# imported at module level by modules every worker loads (serve/servers/published.py and server.py,
# serve/sessions/session.py, serve/errors.py, serve/modern/pool.py and stateless.py): still in a plain worker
NOT_YET_LAZY = (
    "mcpgate.serve.hub",
    "mcpgate.core.hub",
    "mcpgate.serve.pins",
    "mcpgate.core.pins",
    "mcpgate.serve.vault",
    "mcpgate.core.views",
    "mcpgate.core.tool_search",
)
# only with a feature that adds routes (an OAuth mode, metrics): a plain worker's app is a BareApp
FLASK = ("flask", "werkzeug", "jinja2", "click", "itsdangerous")
# the OAuth modes' modules: only the mode's dispatcher (oauth/setup.py, standard library only) is always there
OAUTH_ALWAYS = {"mcpgate.serve.oauth", "mcpgate.serve.oauth.setup"}
# the master checks the configuration and starts the worker: none of the app's libraries
MASTER_NEVER = (*FEATURE_ONLY, "flask", "jinja2", "werkzeug", "cryptography")
# nor the serving stack: the servers' start checks run in a process forked for them (serve/front/preflight.py), so
# the worker imports the stack after its fork and no page of it is counted in both processes
MASTER_NOT_SERVING = (
    "mcpgate.serve.servers.published",
    "mcpgate.serve.sessions",
    "mcpgate.serve.modern",
    "mcpgate.serve.hub",
)


def of(modules: set[str], package: str) -> set[str]:
    return {name for name in modules if name == package or name.startswith(package + ".")}


def config_file(tmp_path: Path) -> tuple[str, Path]:
    out = tmp_path / "modules"
    path = tmp_path / "gunicorn_hooks.py"
    path.write_text(HOOKS.format(out=str(out)))
    return str(path), out


def worker_modules(gw: Gateway, out: Path) -> set[str]:
    """The worker's sys.modules now (its SIGUSR2 makes the hook write them)."""
    [worker] = direct_children(gw.proc.pid)
    written = Path(f"{out}.worker")
    os.kill(worker, signal.SIGUSR2)
    wait_for(written.exists, timeout=20)
    return set(written.read_text().split())


def used(gw: Gateway) -> None:
    """The paths an idle gateway has served: /healthz, an initialize and a tools/call (their lazy imports done)."""
    assert gw.request("GET", "/healthz").status in (200, 503)  # 503: a fleet's instance not yet in the directory
    session = open_session(gw)
    reply = gw.request("POST", body=call("echo", {"text": "lazy"}), headers=session)
    assert reply.status == 200, reply


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[tuple[Gateway, Path]]:
    config, out = config_file(tmp_path)
    with serving({"MCPGATE_METRICS": "false"}, config=config) as gw:
        yield gw, out


def test_a_plain_worker_holds_no_feature_module(plain: tuple[Gateway, Path]) -> None:
    gw, out = plain
    used(gw)
    modules = worker_modules(gw, out)
    for package in FEATURE_ONLY:
        assert not of(modules, package), f"{package} in a plain worker: {sorted(of(modules, package))[:5]}"
    for package in FLASK:
        assert not of(modules, package), f"{package} in a plain worker: {sorted(of(modules, package))[:5]}"
    oauth = of(modules, "mcpgate.serve.oauth") - OAUTH_ALWAYS
    assert not oauth, f"OAuth modules in a plain worker: {sorted(oauth)}"
    assert "mcpgate.serve.cluster.redis_client" not in modules
    for package in NEW_FEATURES:
        assert not of(modules, package), f"{package} in a plain worker: {sorted(of(modules, package))[:5]}"


@pytest.mark.xfail(strict=True, reason="hub, pins, vault, views and search are imported by every worker yet")
def test_a_plain_worker_holds_none_of_the_hubs_modules(plain: tuple[Gateway, Path]) -> None:
    gw, out = plain
    used(gw)
    modules = worker_modules(gw, out)
    held = {package: sorted(of(modules, package))[:3] for package in NOT_YET_LAZY if of(modules, package)}
    assert not held, f"in a plain worker: {held}"


def test_a_plain_master_holds_none_of_the_apps_libraries(plain: tuple[Gateway, Path]) -> None:
    _, out = plain
    modules = set(Path(f"{out}.master").read_text().split())  # written before the worker was started
    assert "mcpgate.gunicorn_config" in modules
    for package in (*MASTER_NEVER, *NEW_FEATURES, *MASTER_NOT_SERVING):
        assert not of(modules, package), f"{package} in the master: {sorted(of(modules, package))[:5]}"


def test_a_plain_worker_answers_beside_the_endpoint_as_the_flask_app_did(plain: tuple[Gateway, Path]) -> None:
    """/healthz: GET and HEAD, OPTIONS names them, other methods 405 with Allow; any other path 404; the errors
    JSON-RPC errors, the 404 naming the endpoint."""
    gw, _ = plain
    health = gw.request("GET", "/healthz")
    assert health.status == 200 and health.json()["status"] == "ok", health
    head = gw.request("HEAD", "/healthz")
    assert head.status == 200 and head.body == b"" and head.headers["content-length"] == str(len(health.body))
    options = gw.request("OPTIONS", "/healthz")
    assert options.status == 200 and options.headers["allow"] == "GET, HEAD, OPTIONS", options
    refused = gw.request("POST", "/healthz", body={})
    assert refused.status == 405 and refused.headers["allow"] == "GET, HEAD, OPTIONS", refused
    assert refused.json()["error"] == {"code": -32600, "message": "Method Not Allowed"}
    for path in ("/nope", "/healthz/", "/mcp/x"):
        missing = gw.request("GET", path)
        assert missing.status == 404, (path, missing)
        assert missing.json()["error"]["message"] == "Not Found: the MCP endpoint here is /mcp", missing


def test_metrics_import_prometheus_client(tmp_path: Path) -> None:
    config, out = config_file(tmp_path)
    with serving({"MCPGATE_METRICS": "true"}, config=config) as gw:
        used(gw)
        assert gw.request("GET", "/metrics").status == 200
        modules = worker_modules(gw, out)
    assert of(modules, "prometheus_client") and of(modules, "flask") and not of(modules, "authlib")


def test_the_resource_server_imports_its_verifier(tmp_path: Path) -> None:
    config, out = config_file(tmp_path)
    with oidc_issuer() as issuer, serving(resource_server_env(issuer), config=config) as gw:
        assert gw.request("POST", body=call("echo", {}), headers=HEADERS).status == 401
        modules = worker_modules(gw, out)
    assert {"joserfc", "requests", "mcpgate.serve.oauth.resource"} <= modules
    assert not of(modules, "authlib") and not of(modules, "redis")


def test_the_embedded_server_imports_authlib(tmp_path: Path) -> None:
    config, out = config_file(tmp_path)
    users = "alice:" + generate_password_hash("a password", "pbkdf2:sha256:1000")
    with serving(embedded_env(tmp_path / "state", users), config=config) as gw:
        assert gw.request("GET", "/.well-known/oauth-authorization-server").status == 200
        modules = worker_modules(gw, out)
    assert {"authlib", "joserfc", "mcpgate.serve.oauth.embedded"} <= modules
    assert not of(modules, "redis")


def test_redis_url_imports_the_redis_client(tmp_path: Path) -> None:
    config, out = config_file(tmp_path)
    env = {"MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}", "MCPGATE_CLUSTER_SECRET": "s" * 32}
    with redis_server() as url, serving({**env, "REDIS_URL": url}, config=config) as gw:
        used(gw)
        modules = worker_modules(gw, out)
    assert {"redis", "mcpgate.serve.cluster.redis_client"} <= modules
    assert not of(modules, "authlib") and not of(modules, "prometheus_client")


def test_the_admin_token_imports_the_management_api(tmp_path: Path) -> None:
    config, out = config_file(tmp_path)
    env = {"MCPGATE_ADMIN_TOKEN": "t" * 32, "MCPGATE_STATE_DIR": str(tmp_path / "state")}
    with serving(env, config=config) as gw:
        used(gw)
        assert gw.request("GET", "/admin/servers").status == 401  # no token sent: refused, the API is there
        modules = worker_modules(gw, out)
    assert "mcpgate.serve.admin.api" in modules
    assert not of(modules, "sqlite3") and not of(modules, "mcpgate.serve.remote")
