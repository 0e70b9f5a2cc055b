"""What an idle gateway imports and weighs, per feature configuration: the worker's RSS and PSS (and the
master's), and the heavy top-level packages in the worker's sys.modules, each from the real gateway.

    python bench/imports.py                       # every configuration
    python bench/imports.py --only plain,metrics  # some of them
    python bench/imports.py --sessions 20 --json  # memory with 20 idle sessions; a JSON line per configuration
    python bench/imports.py --base /tmp/base      # before/after in one run: each configuration from the tree at
                                                  # /tmp/base (git archive <commit> | tar -x -C /tmp/base), then
                                                  # from this one, rows named name@base and name@head

Each configuration starts `gunicorn -c <config> mcpgate.wsgi` on a free loopback port, where <config> is a file
written here that takes every setting and hook of mcpgate.gunicorn_config and extends post_worker_init: the
worker's SIGUSR2 (unused by a gunicorn worker) writes its sorted sys.modules to a file, and `when_ready` (the
master, its start checks done) writes the master's (nothing is added to the gateway itself).
The gateway then answers /healthz, an initialize and a tools/call of the bundled demo server (auth off unless the
configuration is an OAuth one, whose token is then not sent: the refusal is answered, the modules imported), its
sessions are left idle, and its processes are measured. `relay` runs `mcpgate-relay` in front of the plain
gateway, answers one initialize through it, and measures the relay's process (its modules are written at exit).

Configurations: plain (MCPGATE_COMMAND unset: the demo server, auth off), metrics (MCPGATE_METRICS=true, /metrics
scraped once), resource-server (MCPGATE_OAUTH_ISSUER: tests/fixtures/oidc_issuer.py on loopback), embedded (the
gateway's own authorization server, one local user), redis (REDIS_URL: a private redis-server), relay, floor
(no mcpgate: gunicorn's stock gevent worker serving a three-line WSGI app, the least a gunicorn + gevent gateway
can weigh here). Each process's RSS is also split into anonymous pages (the Python heap; a worker maps every one
of the master's at its fork, so each of the master's counts twice in the RSS sum) and file pages (libpython,
libcrypto, extension modules).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateways

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
ISSUER = ROOT / "tests" / "fixtures" / "oidc_issuer.py"
# top-level packages reported by name; anything else outside the standard library is reported too
WATCHED = (
    "flask",
    "werkzeug",
    "jinja2",
    "click",
    "itsdangerous",
    "prometheus_client",
    "authlib",
    "joserfc",
    "cryptography",
    "redis",
    "requests",
    "urllib3",
    "httpx",
    "mcp",
    "pydantic",
)
OWN = (  # the project's modules that only a feature needs
    "mcpgate.relay",
    "mcpgate.serve.oauth.server",
    "mcpgate.serve.oauth.resource",
    "mcpgate.serve.oauth.embedded",
    "mcpgate.serve.metrics",
    "mcpgate.serve.cluster.redis_client",
    "mcpgate.serve.cluster.peers",
)
HOOK = """
import mcpgate.gunicorn_config as _gateway
from mcpgate.gunicorn_config import *  # noqa: F403


def post_worker_init(worker):  # noqa: ANN001, ANN201 - gunicorn's hook: the gateway's, then SIGUSR2 writes
    _gateway.post_worker_init(worker)
    import os, signal, sys

    def write(signum, frame):  # noqa: ANN001, ANN202
        with open({out!r} + ".tmp", "w") as f:
            f.write("\\n".join(sorted(sys.modules)))
        os.replace({out!r} + ".tmp", {out!r})

    signal.signal(signal.SIGUSR2, write)


def when_ready(server):  # noqa: ANN001, ANN201 - gunicorn's hook, in the master: its modules once
    import sys

    with open({out!r} + ".master", "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
"""
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "imports", "version": "1"}},
}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def memory(pid: int) -> dict[str, int]:
    """RSS and PSS, and RSS split into anonymous pages (the Python heap: a worker maps every one of the master's
    at its fork) and file pages (libpython, libcrypto, extension modules: mapped again as each process touches
    them)."""
    return {
        "rss_kb": gateways.kb(f"/proc/{pid}/status", b"VmRSS:"),
        "pss_kb": gateways.kb(f"/proc/{pid}/smaps_rollup", b"Pss:"),
        "anon_kb": gateways.kb(f"/proc/{pid}/status", b"RssAnon:"),
        "file_kb": gateways.kb(f"/proc/{pid}/status", b"RssFile:"),
    }


def children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(part) for part in f.read().split()]
    except OSError:
        return []


def wait_for(check: Callable[[], object], what: str, timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def request(
    port: int, method: str, path: str, body: object = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers=headers or {})
        reply = conn.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read()
    finally:
        conn.close()


def open_session(port: int, path: str = "/mcp") -> str | None:
    """initialize, notifications/initialized and one tools/call; the session id (None: refused, e.g. no token)."""
    status, headers, _ = request(port, "POST", path, INIT, HEADERS)
    session: str | None = {k.lower(): v for k, v in headers.items()}.get("mcp-session-id")
    if status != 200 or not session:
        return None
    more = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
    request(port, "POST", path, {"jsonrpc": "2.0", "method": "notifications/initialized"}, more)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}
    request(port, "POST", path, call, more)
    return session


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    port: int
    modules_file: Path
    log: Path

    def worker(self) -> int:
        return int(wait_for(lambda: children_of(self.proc.pid)[:1], "the worker")[0])  # type: ignore[index]

    def master_modules(self) -> list[str]:
        """The master's sys.modules when it was ready (written by its when_ready hook)."""
        path = Path(f"{self.modules_file}.master")
        return path.read_text().split() if path.exists() else []

    def modules(self) -> list[str]:
        """The worker's sys.modules now: SIGUSR2 makes the hook write them."""
        with contextlib.suppress(FileNotFoundError):
            self.modules_file.unlink()
        os.kill(self.worker(), signal.SIGUSR2)
        wait_for(self.modules_file.exists, "the worker's modules")
        return self.modules_file.read_text().split()


def tree_env(tree: Path) -> dict[str, str]:
    """The environment whose processes import mcpgate from `tree` (ahead of the installed checkout)."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH", "")]))}


@contextlib.contextmanager
def gateway(env: dict[str, str], tmp: Path, tree: Path = ROOT) -> Iterator[Gateway]:
    port = gateways.free_port()
    out = tmp / f"modules-{port}.txt"
    config = tmp / f"gunicorn-{port}.py"
    config.write_text(HOOK.format(out=str(out)))
    log = tmp / f"gateway-{port}.log"
    given = {name: value.replace("{port}", str(port)) for name, value in env.items()}  # "{port}": its port
    full = {**os.environ, **tree_env(tree), "PYTHONUNBUFFERED": "1", "MCPGATE_LOG_LEVEL": "WARNING", **given}
    full.pop("PORT", None)
    with open(log, "wb") as log_file:
        args = [sys.executable, "-m", "gunicorn", "-c", str(config), "-b", f"127.0.0.1:{port}", "mcpgate.wsgi"]
        proc = subprocess.Popen(args, cwd=tree, env=full, stdout=log_file, stderr=subprocess.STDOUT)
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                return request(port, "GET", "/healthz")[0] in (200, 503)
            except OSError:
                return False

        wait_for(ready, "the gateway")
        yield Gateway(proc, port, out, log)
    finally:
        stop(proc)


@contextlib.contextmanager
def redis_url() -> Iterator[dict[str, str]]:
    server = shutil.which("redis-server")
    if server is None:
        raise RuntimeError("redis-server is not installed")
    port = gateways.free_port()
    args = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, "redis-server")
        yield {"REDIS_URL": f"redis://127.0.0.1:{port}/0", "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}"}
    finally:
        stop(proc)


@contextlib.contextmanager
def issuer() -> Iterator[dict[str, str]]:
    proc = subprocess.Popen([sys.executable, str(ISSUER)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        if not url.startswith("http://"):
            raise RuntimeError("the OIDC issuer did not start")
        yield {"MCPGATE_OAUTH_ISSUER": url, "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}"}
    finally:
        stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def embedded(tmp: Path) -> Iterator[dict[str, str]]:
    from werkzeug.security import generate_password_hash

    yield {
        "MCPGATE_OAUTH_USERS": "alice:" + generate_password_hash("correct horse", "pbkdf2:sha256:1000"),
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_STATE_DIR": str(tmp / "state"),
    }


@contextlib.contextmanager
def nothing(**env: str) -> Iterator[dict[str, str]]:
    yield env


@dataclass
class Configuration:
    name: str
    what: str
    env: Callable[[Path], contextlib.AbstractContextManager[dict[str, str]]]
    scrape: list[str] = field(default_factory=list)  # paths asked once more after the session opened


CONFIGURATIONS = [
    Configuration("plain", "the demo server, auth off", lambda tmp: nothing()),
    Configuration(
        "metrics", "MCPGATE_METRICS=true, /metrics scraped", lambda tmp: nothing(MCPGATE_METRICS="true"), ["/metrics"]
    ),
    Configuration("resource-server", "MCPGATE_OAUTH_ISSUER (a loopback issuer)", lambda tmp: issuer()),
    Configuration(
        "embedded", "the embedded authorization server", embedded, ["/.well-known/oauth-authorization-server"]
    ),
    Configuration("redis", "REDIS_URL (a private redis-server)", lambda tmp: redis_url()),
]


def heavy(modules: list[str]) -> dict[str, int]:
    """Top-level packages outside the standard library (and the feature modules of the project): module counts."""
    counts: dict[str, int] = {}
    for name in modules:
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top.startswith("_") or top == "mcpgate":
            own = next((prefix for prefix in OWN if name == prefix or name.startswith(prefix + ".")), None)
            if own is not None:
                counts[own] = counts.get(own, 0) + 1
            continue
        counts[top] = counts.get(top, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (item[0] not in WATCHED, -item[1])))


def measure(config: Configuration, tmp: Path, sessions: int, tree: Path = ROOT) -> dict[str, object]:
    with config.env(tmp) as extra, gateway(extra, tmp, tree) as gw:
        opened = [open_session(gw.port) for _ in range(sessions)]
        for path in config.scrape:
            request(gw.port, "GET", path)
        worker = gw.worker()
        time.sleep(1.0)  # let the worker's allocator settle after the last request
        master, work = memory(gw.proc.pid), memory(worker)
        modules = gw.modules()
        master_modules = gw.master_modules()
    return {
        "name": config.name,
        "sessions": sum(1 for s in opened if s),
        "master": master,
        "worker": work,
        "rss_kb": master["rss_kb"] + work["rss_kb"],
        "pss_kb": master["pss_kb"] + work["pss_kb"],
        "modules": len(modules),
        "heavy": heavy(modules),
        "master_modules": len(master_modules),
        "master_heavy": heavy(master_modules),
    }


FLOOR_APP = """
def application(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]
"""


def measure_floor(tmp: Path) -> dict[str, object]:
    """What gunicorn and gevent weigh alone: gunicorn's own gevent worker (`-k gevent`, one worker) serving a
    three-line WSGI app, asked once, measured as the gateway is. No setting or hook of mcpgate's; the same for
    every tree."""
    app = tmp / "floor_app.py"
    app.write_text(FLOOR_APP)
    port = gateways.free_port()
    args = [sys.executable, "-m", "gunicorn", "-k", "gevent", "-w", "1", "-b", f"127.0.0.1:{port}"]
    args += ["--chdir", str(tmp), "--log-level", "warning", "floor_app:application"]
    log = tmp / f"floor-{port}.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(args, cwd=tmp, stdout=log_file, stderr=subprocess.STDOUT)
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                return request(port, "GET", "/")[0] == 200
            except OSError:
                return False

        wait_for(ready, "the floor's gunicorn")
        worker = int(wait_for(lambda: children_of(proc.pid)[:1], "the floor's worker")[0])  # type: ignore[index]
        time.sleep(1.0)
        master, work = memory(proc.pid), memory(worker)
    finally:
        stop(proc)
    return {
        "name": "floor",
        "sessions": 0,
        "master": master,
        "worker": work,
        "rss_kb": master["rss_kb"] + work["rss_kb"],
        "pss_kb": master["pss_kb"] + work["pss_kb"],
    }


RELAY_MAIN = """
import atexit, sys
def dump():
    with open({out!r}, "w") as f:
        f.write("\\n".join(sorted(name for name, module in sys.modules.items() if module is not None)))
atexit.register(dump)
from mcpgate.relay.cli import main
sys.exit(main([{url!r}]))
"""


def measure_relay(tmp: Path, tree: Path = ROOT) -> dict[str, object]:
    """mcpgate-relay (from `tree`) in front of the plain gateway, after one initialize: its one process."""
    with gateway({}, tmp) as gw:
        out = tmp / "relay-modules.txt"
        with contextlib.suppress(FileNotFoundError):
            out.unlink()
        code = RELAY_MAIN.format(out=str(out), url=f"http://127.0.0.1:{gw.port}/mcp")
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=tree,
            env={**os.environ, **tree_env(tree)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write((json.dumps(INIT) + "\n").encode())
            proc.stdin.flush()
            proc.stdout.readline()
            time.sleep(1.0)
            mem = memory(proc.pid)
            proc.stdin.close()
            proc.wait(30)
        finally:
            stop(proc)
            if proc.stdout is not None:
                proc.stdout.close()
        modules = out.read_text().split() if out.exists() else []
    return {"name": "relay", "sessions": 1, "relay": mem, **mem, "modules": len(modules), "heavy": heavy(modules)}


def show(row: dict[str, object]) -> str:
    def mb(value: object) -> str:
        return f"{int(value) / 1024:5.1f}" if isinstance(value, int) else "  -  "

    parts = [f"{row['name']:<16}", f"RSS {mb(row.get('rss_kb'))} MB", f"PSS {mb(row.get('pss_kb'))} MB"]
    for part in ("master", "worker"):
        mem = row.get(part)
        if isinstance(mem, dict):
            anon, file = (mb(mem.get(key)).strip() for key in ("anon_kb", "file_kb"))
            split = f" (anon {anon} file {file})" if "anon_kb" in mem else ""
            parts.append(f"{part} {mb(mem['rss_kb'])}/{mb(mem['pss_kb'])}{split}")
    if "heavy" not in row:  # the floor: no modules listed
        return "  ".join(parts)
    heavy_mods = row.get("heavy") or {}
    assert isinstance(heavy_mods, dict)
    listed = " ".join(f"{name}({count})" for name, count in heavy_mods.items())
    shown = "  ".join(parts) + f"  modules {row.get('modules')}\n{'':<18}worker: {listed}"
    master_mods = row.get("master_heavy")
    if isinstance(master_mods, dict):
        master_listed = " ".join(f"{name}({count})" for name, count in master_mods.items())
        shown += f"\n{'':<18}master ({row.get('master_modules')} modules): {master_listed}"
    return shown


def measure_one(name: str, tmp: Path, sessions: int, tree: Path) -> dict[str, object]:
    try:
        if name == "relay":
            return measure_relay(tmp, tree)
        if name == "floor":
            return measure_floor(tmp)
        config = next(c for c in CONFIGURATIONS if c.name == name)
        return measure(config, tmp, sessions, tree)
    except Exception as exc:  # noqa: BLE001 - one configuration that cannot run here: say so, go on
        return {"name": name, "error": repr(exc)[:400]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    names = [c.name for c in CONFIGURATIONS] + ["relay", "floor"]
    parser.add_argument("--only", default=",".join(names), help=f"comma-separated, of: {','.join(names)}")
    parser.add_argument("--sessions", type=int, default=1, help="idle sessions held when measured (default 1)")
    parser.add_argument("--json", action="store_true", help="one JSON line per configuration")
    parser.add_argument("--base", type=Path, help="a tree measured too, before this one, each configuration")
    args = parser.parse_args()
    wanted = [name.strip() for name in args.only.split(",") if name.strip()]
    trees = [("base", args.base.resolve()), ("head", ROOT)] if args.base else [("", ROOT)]
    print("RSS/PSS: master + worker, MB (master and worker: RSS/PSS each); each one's heavy packages (modules)")
    with tempfile.TemporaryDirectory(prefix="mcpgate-imports-") as tmp_dir:
        tmp = Path(tmp_dir)
        for name in wanted:
            for label, tree in trees:  # interleaved: base then head, configuration by configuration
                row = measure_one(name, tmp, args.sessions, tree)
                if label:
                    row["name"] = f"{name}@{label}"
                print(
                    json.dumps(row)
                    if args.json
                    else (show(row) if "error" not in row else f"{row['name']}: {row['error']}")
                )
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
