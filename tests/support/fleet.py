"""Helpers for the fleet tests: a private redis-server and HAProxy (the distribution's binaries; .ci/run installs
them) on free loopback ports, each stopped by PID, and gateway instances sharing a Redis. The generic pieces
(gateways, processes, requests) are tests/support/'s.

A port picked free is free only at that moment: under load another test's server or an outgoing connection may
take it before the server binds it (then a check that the port answers is fooled by whoever took it). So each
starter waits until its own process listens (waiting.listens), HAProxy's ports are held from the pick until the
end (`held_port`: HAProxy shares them, nobody else can bind them), and redis-server, which cannot share a held
port, is started again on another port when its bind failed."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import ROOT, Gateway, free_port, stop_all, stop_process
from tests.support.http import Served
from tests.support.waiting import wait_for, wait_own_listener

# -- Redis and HAProxy for the cluster tests (the distribution's binaries; .ci/run installs them) --

REDIS_SERVER = "/usr/bin/redis-server"
HAPROXY = "/usr/sbin/haproxy"


def installed(name: str, usual: str) -> str:
    """The path of a server binary (on PATH, else its usual place). Missing: the test is skipped, naming what to
    install (a developer's machine may lack it), or fails under CI (.ci/run installs it: a skip there would hide
    the fleet tests)."""
    import shutil

    found = shutil.which(name) or (usual if os.access(usual, os.X_OK) else None)
    if found is None:
        why = f"{name} is not installed (looked on PATH and at {usual}); the fleet tests drive it for real"
        if os.environ.get("CI"):
            pytest.fail(f"{why}, and .ci/run installs it")
        pytest.skip(f"{why}: install it (Debian: apt-get install redis-server haproxy)")
    return found


START_TRIES = 5  # starts of a server whose free port was taken before it bound it (each on another port)
BIND_FAILED = ("Address already in use", "cannot bind socket")  # redis-server's and HAProxy's words for it


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A private redis-server on a free loopback port (no persistence) for a `with` block: yields its
    REDIS_URL (redis://127.0.0.1:<port>/0) once it listens there itself; stopped by PID at the end."""
    binary = installed("redis-server", REDIS_SERVER)
    for _ in range(START_TRIES):
        port = free_port()
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"mcpgate-test-redis-{port}.log"
        args = [binary, "--port", str(port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--logfile", str(log), "--dir", str(log.parent)]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            if wait_own_listener(port, proc, log):
                yield f"redis://127.0.0.1:{port}/0"
                return
            said = log.read_text(errors="replace") if log.exists() else ""
            if not any(words in said for words in BIND_FAILED):
                raise RuntimeError(f"redis-server exited with {proc.returncode}:\n{said}")
        finally:
            stop_process(proc)
    raise RuntimeError(f"redis-server found its port taken {START_TRIES} times")


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A free loopback port held for a `with` block: bound, never listening, with SO_REUSEPORT, so no other
    process binds it (nor is it given to a free_port() or to an outgoing connection), while HAProxy, which binds
    its listeners with SO_REUSEPORT as the same user, listens on it. For HAProxy's ports, and for a port a test
    must name before HAProxy starts (a gateway's MCPGATE_PUBLIC_URL): `haproxy(..., port=held)`."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


@contextlib.contextmanager
def instances(secret: str, **common: str) -> Iterator[tuple[str, Callable[[str], Gateway]]]:
    """A private redis-server and a starter of a fleet's instances on it for a `with` block: yields its REDIS_URL
    and `start(instance_id)`, which returns a ready gateway (MCPGATE_CLUSTER_SECRET `secret`, its internal URL its
    loopback port, no spare children; `common`: more settings of every instance). Each is stopped at the end."""
    started: list[Gateway] = []
    with redis_server() as url:

        def start(instance: str) -> Gateway:
            env = {
                "REDIS_URL": url,
                "MCPGATE_CLUSTER_SECRET": secret,
                "MCPGATE_INSTANCE_ID": instance,
                "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}",
                "MCPGATE_POOL_SPARES": "0",
                **common,
            }
            gw = Gateway(env)
            started.append(gw)
            gw.wait_ready()
            return gw

        try:
            yield url, start
        finally:
            stop_all(started)


class Balancer(Served):
    """A running HAProxy: `request` as Gateway's (so open_session and the others take it), `url` its /mcp,
    `admin(command)` a line to its runtime API when the config opened one at "{admin}"."""

    def __init__(self, port: int, proc: subprocess.Popen[Any], admin_path: Path, log_path: Path) -> None:
        self.port, self.proc, self.admin_path, self.log_path = port, proc, admin_path, log_path
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}/mcp"

    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def admin(self, command: str, timeout: float = 5.0) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(self.admin_path))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def servers_up(self) -> dict[str, bool]:
        """Each backend server ("backend/server") and whether HAProxy routes to it (its health checks pass)."""
        rows = [line.split() for line in self.admin("show servers state").splitlines()[2:] if line.strip()]
        return {f"{row[1]}/{row[3]}": row[5] == "2" for row in rows}  # srv_op_state 2: running

    def wait_up(self, timeout: float = 15.0) -> None:
        """Wait until every server is up (HAProxy starts them down until a first check passes)."""
        if not wait_for(lambda: all(self.servers_up().values()), timeout):
            raise RuntimeError(f"haproxy servers not up: {self.servers_up()}\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


BALANCER = """
global
    stats socket {{admin}} level admin
    log stdout format raw local0 info
defaults
    mode http
    log global
    log-format "%HM %HP %ST server=%s"
    option dontlognull
    timeout connect 2s
    timeout client 60s
    timeout server 60s
frontend mcp
    bind 127.0.0.1:{{port}}
    default_backend instances
backend instances
    balance roundrobin
{backend}"""


def balancer_config(servers: dict[str, int], cookie: str | None = None) -> str:
    """A test's HAProxy config for `haproxy()`: one frontend, round-robin over `servers` (name: loopback port), each
    request logged with the server that took it ("server=NAME"); `cookie`: affinity by that inserted cookie."""
    lines = [f"    cookie {cookie} insert indirect nocache httponly"] if cookie else []
    lines += [
        f"    server {name} 127.0.0.1:{port}" + (f" cookie {name}" if cookie else "") for name, port in servers.items()
    ]
    return BALANCER.format(backend="\n".join(lines) + "\n")


@contextlib.contextmanager
def haproxy(config_text: str, env: dict[str, str] | None = None, port: int | None = None) -> Iterator[Balancer]:
    """HAProxy in the foreground for a `with` block, run on `config_text` in which "{port}" is replaced by a free
    loopback port (bind the frontend there) and "{admin}" by a unix socket path (`stats socket {admin} level
    admin` for Balancer.admin); `env` is added to its environment (for a config's "${NAME}"s, e.g. the
    deploy/haproxy.cfg recipe's; "{port}" and "{admin}" are replaced in its values too). The config is checked
    first (a bad one raises with haproxy's words); yielded once HAProxy itself listens on the port; stopped by
    PID at the end. `port`: the frontend's port when it must be known before (a gateway's MCPGATE_PUBLIC_URL
    naming it): pick it with `held_port()`, held until HAProxy has stopped; default a port held here."""
    with contextlib.ExitStack() as stack:
        port = port or stack.enter_context(held_port())
        yield stack.enter_context(haproxy_on(port, config_text, env or {}))


@contextlib.contextmanager
def haproxy_on(port: int, config_text: str, env: dict[str, str]) -> Iterator[Balancer]:
    binary = installed("haproxy", HAPROXY)
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    admin_path = tmp / f"mcpgate-test-haproxy-{port}.sock"
    cfg = tmp / f"mcpgate-test-haproxy-{port}.cfg"
    log = tmp / f"mcpgate-test-haproxy-{port}.log"

    def fill(text: str) -> str:
        return text.replace("{port}", str(port)).replace("{admin}", str(admin_path))

    cfg.write_text(fill(config_text))
    admin_path.unlink(missing_ok=True)  # a socket left by an earlier run on this port is not this one's
    full_env = {**os.environ, **{name: fill(value) for name, value in env.items()}}
    check = subprocess.run([binary, "-c", "-f", str(cfg)], env=full_env, capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"haproxy refused its config {cfg}:\n{check.stdout}{check.stderr}")
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary, "-db", "-f", str(cfg)], env=full_env, stdout=out, stderr=subprocess.STDOUT)
    try:
        if not wait_own_listener(port, proc, log):  # a port not held: another process bound it first
            raise RuntimeError(f"haproxy exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        # HAProxy binds its runtime API's socket under a temporary name and renames it into place, which may come
        # after its frontend listens (seen under load): a test's first admin command waits for the socket
        admin = "{admin}" in config_text or any("{admin}" in value for value in env.values())
        if admin and not wait_for(admin_path.exists, 30):
            raise RuntimeError(
                f"haproxy made no runtime API socket at {admin_path}:\n{log.read_text(errors='replace')}"
            )
        yield Balancer(port, proc, admin_path, log)
    finally:
        stop_process(proc)
        admin_path.unlink(missing_ok=True)


RECIPE = (ROOT / "deploy" / "haproxy.cfg").read_text()  # the deploy recipe's balancer


@contextlib.contextmanager
def recipe_front(
    instances: dict[str, Gateway], routing: str, wait_up: bool = True, port: int | None = None
) -> Iterator[Balancer]:
    """The recipe's HAProxy (deploy/haproxy.cfg, MCPGATE_ROUTING=`routing`) over the instances named i1..i4 (a
    name without an instance: a port nobody serves); `wait_up`: until every named instance is up behind it and
    every other name is down (HAProxy starts each server up until its checks fail: a test that began before would
    have its requests balanced onto a port nobody serves, where each costs one of the recipe's retries). The port
    nobody serves is held (`held_port`) so that nobody starts serving it meanwhile. `port`: as haproxy()'s."""
    env = {"HAPROXY_BIND": "127.0.0.1:{port}", "HAPROXY_ADMIN": "{admin}", "MCPGATE_ROUTING": routing}
    with held_port() as dead, haproxy(RECIPE, _servers(env, instances, dead), port) as lb:
        up = {f"sticky/{name}" for name in instances}
        if wait_up and not wait_for(
            lambda: up == {srv for srv, ok in lb.servers_up().items() if ok and "sticky/" in srv}
        ):
            raise RuntimeError(f"not exactly the instances up behind haproxy: {lb.servers_up()}\n{lb.log()}")
        yield lb


def _servers(env: dict[str, str], instances: dict[str, Gateway], dead: int) -> dict[str, str]:
    """`env` with the recipe's MCPGATE_I1..I4: each named instance's port, `dead` for a name without one."""
    for index in range(1, 5):
        gw = instances.get(f"i{index}")
        env[f"MCPGATE_I{index}"] = f"127.0.0.1:{gw.port if gw else dead}"
    return env
