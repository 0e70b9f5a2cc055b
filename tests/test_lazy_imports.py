"""An idle gateway imports only what its configured features use (issue 24): with the plain configuration (the
demo server, auth off, no metrics, no Redis) neither the worker nor the gunicorn master holds the OAuth
libraries, Redis's client, the fleet's modules, requests, prometheus_client or the relay; with a feature
configured, its modules are there. An idle relay (tests at the end) holds neither the 2026-07-28 wire and bridges
while host and upstream speak 2025, nor tracing unless --tracing.

Each test starts the real gateway with a gunicorn config file of its own that takes every setting and hook of
mcpgate.gunicorn_config and adds hooks that only write: `when_ready` (the master, its start checks done)
writes the master's sys.modules to a file, and the worker's SIGUSR2 (no gunicorn worker uses it) writes the
worker's; from its fork, the worker notes each OpenSSL digest asked of hashlib or hmac (and makes it). Nothing
is added to the gateway itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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


def post_fork(server, worker):
    _gateway.post_fork(server, worker)
    import hashlib, hmac, traceback

    def noting(module, name):  # the digest still made as asked: the caller noted first
        made = getattr(module, name)

        def note(*args, **kwargs):
            with open(_OUT + ".digests", "a") as f:
                f.write(f"{{module.__name__}}.{{name}} from {{traceback.format_stack(limit=2)[0].strip()}}\\n")
            return made(*args, **kwargs)

        setattr(module, name, note)

    for module, name in ((hashlib, "sha256"), (hashlib, "new"), (hmac, "new"), (hmac, "digest")):
        noting(module, name)


def post_worker_init(worker):
    _gateway.post_worker_init(worker)
    import signal

    signal.signal(signal.SIGUSR2, lambda signum, frame: _write(_OUT + ".worker"))
"""
# never in a plain gateway's processes
FEATURE_ONLY = ("authlib", "joserfc", "redis", "requests", "prometheus_client", "mcpgate.relay")
# the fleet's (REDIS_URL): its directory, forwarder, nonces and peers. A plain worker holds of serve/cluster only
# what its handlers raise or use alone (forwarding.Forward, caps' in-memory count, the issuer, takeover's checks)
FLEET_ONLY = (
    "redis",
    "mcpgate.serve.cluster.instances",
    "mcpgate.serve.cluster.directory",
    "mcpgate.serve.cluster.forward",
    "mcpgate.serve.cluster.exchange",
    "mcpgate.serve.cluster.relayed",
    "mcpgate.serve.cluster.nonces",
    "mcpgate.serve.cluster.peers",
    "mcpgate.serve.cluster.resent",
    "mcpgate.serve.cluster.gone",
    "mcpgate.serve.cluster.redis_client",
)
# this session's features (issue 25 and 26), each imported only when configured: a remote upstream in
# MCPGATE_CONFIG, the management API's token or scope, the vault's SQLite store and its sealing
NEW_FEATURES = ("mcpgate.serve.remote", "mcpgate.serve.admin", "sqlite3", "_sqlite3", "cryptography")
# MCPGATE_CONFIG's features (its reader, groups, views, pins, the search view, the vault) and metrics: each imported
# where it is configured (serve/servers/published.py and server.py), not by a plain worker
CONFIGURED_ONLY = (
    "mcpgate.serve.hub",
    "mcpgate.core.hub",
    "mcpgate.serve.pins",
    "mcpgate.core.pins",
    "mcpgate.serve.vault",
    "mcpgate.core.views",
    "mcpgate.core.tool_search",
    "mcpgate.serve.servers.config_file",
    "mcpgate.serve.servers.remote_entry",
    "mcpgate.serve.servers.views_file",
    "mcpgate.serve.servers.search_view",
    "mcpgate.serve.metrics",
    "mcpgate.observe.otlp_wire",  # tracing's encoders (a table of 16,384 varints built at import): with tracing on
    "mcpgate.observe.trace_spans",
)
# of the vault, only its errors (standard library only): the endpoint's table and the pool catch SlotsEmpty
VAULT_ALWAYS = {"mcpgate.serve.vault", "mcpgate.serve.vault.errors"}
# only with a feature that adds routes (an OAuth mode, metrics): a plain worker's app is a BareApp
FLASK = ("flask", "werkzeug", "jinja2", "click", "itsdangerous")
# the OAuth modes' modules: only the mode's dispatcher (oauth/setup.py, standard library only) is always there
OAUTH_ALWAYS = {"mcpgate.serve.oauth", "mcpgate.serve.oauth.setup"}
# modules a plain gateway's processes do without: difflib only names the setting nearest to a mistyped MCPGATE_
# variable (config/declarations.unknown_variables); typing_extensions only serves msgspec's typed decoding, which
# the gateway never asks for (mcpgate/fast_json.py loads msgspec without it); the idna codec (with stringprep and
# unicodedata) only turns a non-ASCII host name into ASCII: the master's address check asks for an ASCII one in bytes
STDLIB_UNUSED = ("difflib", "typing_extensions", "encodings.idna", "stringprep", "unicodedata")
# the master checks the configuration and starts the worker: none of the app's libraries, nor gevent (the worker
# class it loads is a stand-in: serve/front/lazy_worker.py)
MASTER_NEVER = (
    *FEATURE_ONLY,
    *("flask", "jinja2", "werkzeug", "cryptography", "gevent"),
    *("mcpgate.serve.front.worker", "mcpgate.serve.front.connection"),
)
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
    assert wait_for(written.exists, timeout=20), "the worker wrote no modules"
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
    for package in (*FLEET_ONLY, *NEW_FEATURES, *STDLIB_UNUSED):
        assert not of(modules, package), f"{package} in a plain worker: {sorted(of(modules, package))[:5]}"


def test_a_plain_worker_holds_none_of_the_hubs_modules(plain: tuple[Gateway, Path]) -> None:
    gw, out = plain
    used(gw)
    modules = worker_modules(gw, out)
    held = {package: sorted(of(modules, package) - VAULT_ALWAYS)[:3] for package in CONFIGURED_ONLY}
    assert not any(held.values()), f"in a plain worker: { {k: v for k, v in held.items() if v} }"


def test_a_plain_worker_runs_no_openssl_digest(plain: tuple[Gateway, Path]) -> None:
    """A process's first OpenSSL digest maps about 1 MB of libcrypto's code into its RSS (core/digest.py): a plain
    worker, its app made and a session opened and called, has asked hashlib and hmac for none."""
    gw, out = plain
    used(gw)
    worker_modules(gw, out)  # the worker has answered a signal since: what it noted is written
    digests = Path(f"{out}.digests")
    assert not digests.exists(), digests.read_text()


def test_a_plain_master_holds_none_of_the_apps_libraries(plain: tuple[Gateway, Path]) -> None:
    _, out = plain
    modules = set(Path(f"{out}.master").read_text().split())  # written before the worker was started
    assert "mcpgate.gunicorn_config" in modules
    for package in (*MASTER_NEVER, *NEW_FEATURES, *MASTER_NOT_SERVING, *CONFIGURED_ONLY, *FLEET_ONLY, *STDLIB_UNUSED):
        assert not of(modules, package), f"{package} in the master: {sorted(of(modules, package))[:5]}"


def test_the_worker_beats_the_heart_the_master_watches(plain: tuple[Gateway, Path]) -> None:
    """The stand-in the master made hands its heartbeat file to the gateway's worker: the file the master holds is
    touched by the worker (else the master would kill it after `timeout` seconds)."""
    gw, _ = plain
    fds = Path(f"/proc/{gw.proc.pid}/fd")
    [beat] = [fd for fd in fds.iterdir() if "wgunicorn-" in os.readlink(fd)]  # gunicorn's WorkerTmp, unlinked
    first = beat.stat().st_mtime
    assert wait_for(lambda: beat.stat().st_mtime != first, timeout=20), "the heartbeat file the master holds is still"


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
    master = set(Path(f"{out}.master").read_text().split())  # its exposure checked in the forked checker
    assert not held(master, ("mcpgate.serve.metrics", "prometheus_client", "gevent"), allowed=set())


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
    master = set(Path(f"{out}.master").read_text().split())  # the users' hashes checked in the forked checker
    assert not held(master, ("werkzeug", "mcpgate.serve.oauth.users", "gevent"), allowed=set())


def test_redis_url_imports_the_redis_client(tmp_path: Path) -> None:
    config, out = config_file(tmp_path)
    env = {"MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}", "MCPGATE_CLUSTER_SECRET": "s" * 32}
    with redis_server() as url, serving({**env, "REDIS_URL": url}, config=config) as gw:
        used(gw)
        modules = worker_modules(gw, out)
    assert {"redis", "mcpgate.serve.cluster.redis_client", "mcpgate.serve.cluster.instances"} <= modules
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


# -- what one import loads, in a fresh interpreter (no gateway started): each cut above, one module at a time --


def imported(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a fresh interpreter holds after running `code`, with none of the gateway's settings in its
    environment but `env`'s."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MCPGATE_", "REDIS_", "OTEL_"))}
    dump = "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code + dump],
        env={**clean, "MCPGATE_LOG_LEVEL": "WARNING", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stdout.split())


WORKER_APP = "from gevent import monkey\nmonkey.patch_all()\nimport mcpgate.wsgi"  # what a worker loads


def held(modules: set[str], packages: tuple[str, ...], allowed: set[str] = VAULT_ALWAYS) -> dict[str, list[str]]:
    found = {package: sorted(of(modules, package) - allowed)[:3] for package in packages}
    return {package: names for package, names in found.items() if names}


def test_the_plain_app_imports_no_configured_feature() -> None:
    modules = imported(WORKER_APP)
    assert {"mcpgate.serve.servers.published", "mcpgate.serve.cluster.forwarding"} <= modules
    assert not held(modules, (*CONFIGURED_ONLY, *FEATURE_ONLY, *FLASK, *NEW_FEATURES, *FLEET_ONLY))


def test_the_master_config_imports_no_server_module() -> None:
    """mcpgate.gunicorn_config (the master's settings and hooks) without MCPGATE_CONFIG: not the file's reader."""
    modules = imported("import mcpgate.gunicorn_config")
    assert not held(modules, (*CONFIGURED_ONLY, *MASTER_NOT_SERVING, *MASTER_NEVER), allowed=set())


def test_the_worker_class_the_master_loads_imports_no_gevent() -> None:
    """gunicorn loads the configured worker class in the master: the stand-in, not the gateway's worker."""
    modules = imported(
        "import mcpgate.gunicorn_config as c\nfrom gunicorn import util\nutil.load_class(c.worker_class)"
    )
    assert "mcpgate.serve.front.lazy_worker" in modules
    worker_side = ("mcpgate.serve.front.worker", "mcpgate.serve.front.connection")
    assert not held(modules, ("gevent", "greenlet", "gunicorn.workers.ggevent", *worker_side))


def test_the_masters_start_checks_import_no_serving_module() -> None:
    """The start checks (serve/front/preflight.py) with metrics on: the metrics' exposure and the servers are
    checked in the forked checker, so the master loads neither the metrics module nor the serving stack."""
    code = (
        "import logging\nimport mcpgate.gunicorn_config as c\nfrom mcpgate.serve.front import preflight\n"
        "assert preflight.run(c._settings, ['127.0.0.1:1'], logging.getLogger('x')) is None"
    )
    modules = imported(code, {"MCPGATE_METRICS": "true"})
    assert "mcpgate.serve.front.preflight" in modules
    assert not held(modules, ("mcpgate.serve.metrics", "gevent", *MASTER_NOT_SERVING), allowed=set())


def test_a_config_file_without_groups_imports_the_reader_not_the_hub(tmp_path: Path) -> None:
    """One server in MCPGATE_CONFIG: the file's reader and groups' plan, not the hub's children, pins or views."""
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"one": {"command": sys.executable, "args": ["-V"]}}}))
    modules = imported(WORKER_APP, {"MCPGATE_CONFIG": str(config)})
    assert {"mcpgate.serve.servers.config_file", "mcpgate.serve.hub.groups"} <= modules
    assert not held(modules, ("mcpgate.serve.hub.server", "mcpgate.serve.hub.child", "mcpgate.core.hub"))
    assert not held(modules, ("mcpgate.serve.pins", "mcpgate.serve.servers.search_view", "mcpgate.serve.metrics"))


def test_a_group_imports_the_hub(tmp_path: Path) -> None:
    """Two servers: the aggregate publishes them together, its modules are there (the test above can fail)."""
    entry = {"command": sys.executable, "args": ["-V"]}
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"one": entry, "two": entry}}))
    modules = imported(WORKER_APP, {"MCPGATE_CONFIG": str(config)})
    assert {"mcpgate.serve.hub.server", "mcpgate.serve.hub.child", "mcpgate.core.hub"} <= modules


def test_each_feature_setting_imports_its_module() -> None:
    """The settings that bring a module in (the plain app's test above holds none of them)."""
    features = {
        "MCPGATE_TOOL_PINS": ("warn", "mcpgate.serve.pins.guard"),
        "MCPGATE_TOOL_SEARCH": ("true", "mcpgate.serve.servers.search_view"),
        "MCPGATE_METRICS": ("true", "mcpgate.serve.metrics"),
    }
    env = {name: value for name, (value, _module) in features.items()}
    modules = imported(WORKER_APP, env)
    assert {module for _value, module in features.values()} <= modules


def test_the_named_servers_listing_path_is_the_config_files() -> None:
    """published.PREFIX is named there so that a plain worker does not load the file's reader for GET /servers."""
    from mcpgate.serve.servers import config_file, published

    assert published.PREFIX == config_file.PREFIX


def test_forward_is_the_one_the_fleet_catches() -> None:
    """The handlers raise forwarding.Forward; the fleet (instances.py) catches the same class."""
    from mcpgate.serve.cluster import forwarding, instances

    assert instances.Forward is forwarding.Forward


# -- the relay: what an idle mcpgate-relay holds after its first exchange --

# imported only when a route needs them: the 2026-07-28 wire and the bridges (relay/eras.py), tracing (--tracing),
# decimal (core/header_values.py compares numbers with it only when asked); and the gateway's settings (the relay
# reads config/relay_settings.py alone, not config/settings.py and every other *_settings module)
RELAY_IDLE_NEVER = (
    "mcpgate.config.settings",
    "mcpgate.config.auth_settings",
    "mcpgate.config.fleet_settings",
    "mcpgate.relay.modern",
    "mcpgate.relay.host_bridge",
    "mcpgate.relay.server_bridge",
    "mcpgate.relay.bridge_calls",
    "mcpgate.relay.session_listens",
    "mcpgate.core.continuation",
    "mcpgate.core.request_state",
    "mcpgate.core.mrtr",
    "mcpgate.observe",
    "decimal",
    "_decimal",
    # and what it never needs: the serving side, OAuth libraries, a charset detector (cli.py keeps them out)
    "mcpgate.serve",
    "flask",
    "authlib",
    "joserfc",
)
RELAY_MAIN = """
import atexit, sys

def dump():
    with open({out!r}, "w") as f:
        f.write("\\n".join(sorted(name for name, module in sys.modules.items() if module is not None)))

atexit.register(dump)
from mcpgate.relay.cli import main
sys.exit(main([{url!r}, *{extra!r}]))
"""
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "lazy", "version": "1"}},
}


def relay_modules(url: str, out: Path, extra: tuple[str, ...] = ()) -> set[str]:
    """A real relay (its main: gevent patched first) in front of `url`: one initialize answered, stdin closed;
    the modules it held as it exited (not the None entries cli.py sets to keep a module out)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MCPGATE_", "REDIS_", "OTEL_"))}
    code = RELAY_MAIN.format(out=str(out), url=url, extra=list(extra))
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**clean, "MCPGATE_LOG_LEVEL": "WARNING"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        assert reply["id"] == 1 and "result" in reply, reply
        proc.stdin.close()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    return set(out.read_text().split())


def test_an_idle_relay_holds_no_bridge_nor_tracing(plain: tuple[Gateway, Path], tmp_path: Path) -> None:
    """2025 host, 2025 upstream (the plain gateway), tracing off: the relay's wire and pump only."""
    gw, _ = plain
    modules = relay_modules(f"http://{gw.host}:{gw.port}/mcp", tmp_path / "relay-modules")
    assert {"mcpgate.relay.eras", "mcpgate.relay.streamable", "mcpgate.core.modern"} <= modules
    assert not held(modules, (*RELAY_IDLE_NEVER, "charset_normalizer", "chardet"), allowed=set())


# requests and what it brings (urllib3, idna, certifi, the cookie jar): ~4 MB of an idle relay
REQUESTS_STACK = ("requests", "urllib3", "idna", "certifi", "http.cookiejar")


def test_an_idle_relay_in_front_of_a_plain_upstream_loads_no_requests(
    plain: tuple[Gateway, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain-HTTP upstream, no proxy, no static token (the relay could sign in): the relay's own HTTP/1.1 client
    (relay/fast_http.py) carries every exchange and requests loads only for a route that needs it (HTTPS, a proxy,
    cookies, HTTP+SSE, signing in: relay/http_routes.py)."""
    for name in [name for name in os.environ if name.lower() in ("http_proxy", "all_proxy")]:
        monkeypatch.delenv(name)
    gw, _ = plain
    modules = relay_modules(f"http://{gw.host}:{gw.port}/mcp", tmp_path / "relay-modules")
    assert {"mcpgate.relay.fast_http", "mcpgate.relay.oauth.session"} <= modules
    assert not held(modules, REQUESTS_STACK, allowed=set())


def test_the_relays_start_imports_no_bridge_nor_tracing() -> None:
    """What main imports before the first message (its modules, gevent patched first), in a fresh interpreter."""
    code = (
        "from gevent import monkey\nmonkey.patch_all(select=False, subprocess=False)\n"
        "from mcpgate.relay import cli, eras, http_client, pump, stdio, transport"
    )
    modules = imported(code)
    assert not held(modules, RELAY_IDLE_NEVER, allowed=set())


def test_a_modern_route_imports_the_wire_and_bridges() -> None:
    """The routes build what they need (the tests above can fail): a 2025 host in front of a 2026-07-28 upstream
    goes through LegacyHostBridge over the modern wire, a 2026-07-28 host in front of a 2025 one through
    ModernHostBridge."""
    code = (
        "from gevent import monkey\nmonkey.patch_all(select=False, subprocess=False)\n"
        "from mcpgate.relay.eras import LEGACY, MODERN, EraTransport\n"
        "from mcpgate.relay.http_client import HttpClient, HttpOptions\n"
        "from mcpgate.config.settings import RelaySettings\n"
        "url = 'http://127.0.0.1:9/mcp'\n"
        "http = HttpClient(HttpOptions.from_settings(RelaySettings()), url)\n"
        "for era, host in (('modern', LEGACY), ('legacy', MODERN)):\n"
        "    routes = EraTransport(url, http, lambda message: None, era=era, transport_mode='auto')\n"
        "    routes._route(host)\n"
        "    routes.close()\n"
        "http.close()"
    )
    modules = imported(code)
    bridged = {"mcpgate.relay.modern", "mcpgate.relay.host_bridge", "mcpgate.relay.server_bridge"}
    assert {*bridged, "mcpgate.core.continuation"} <= modules
