"""Helpers for the tests that run deploy/'s recipes as written and reach them from a real remote peer:

- `fleet_recipe`: `honcho -f deploy/Procfile.fleet start` from the project root, its settings in a .env file (as
  the recipe says), on free ports given through the variables the recipe reads; stopped by PID (honcho, then any
  process group it left).
- `remote_peer`: a network namespace joined to this one by a veth pair (needs root: skipped otherwise), and
  `from_peer` to send HTTP requests from inside it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import HAPROXY, REDIS_SERVER, Balancer, installed
from tests.support.gateway import ROOT, free_port, pid_gone, stop_process
from tests.support.http import Reply, Served
from tests.support.waiting import wait_for

PROCFILE = "deploy/Procfile.fleet"
INSTANCES = ("i1", "i2", "i3", "i4")
START_GUARD = 90  # seconds the whole recipe may take to come up on a loaded machine


def honcho() -> str:
    found = shutil.which("honcho", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.skip("honcho is not installed (pip install -e '.[test]' installs it)")
    return found


@dataclass
class Recipe(Served):
    """A running `honcho -f deploy/Procfile.fleet start`: its process, ports, log and the processes it started."""

    proc: subprocess.Popen[bytes]
    ports: dict[str, int]
    front: str  # the address HAProxy listens on
    log_path: Path
    admin: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def started(self) -> dict[str, int]:
        """Each process honcho started (name -> pid, also its process group)."""
        return {name: int(pid) for name, pid in re.findall(r"(\w+)\.1 started \(pid=(\d+)\)", self.log())}

    def balancer(self) -> Balancer:
        return Balancer(self.ports["front"], self.proc, self.admin, self.log_path)

    def wait_up(self) -> None:
        """Until every instance listens and HAProxy's checks pass for all four (or honcho stops: raises)."""

        def up() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"honcho stopped with {self.proc.returncode}:\n{self.log()}")
            if not all(listening("127.0.0.1", self.ports[name]) for name in INSTANCES):
                return False
            if not listening(self.front, self.ports["front"]) or not self.admin.exists():
                return False
            states = self.balancer().servers_up()
            return all(ok for server, ok in states.items() if server.startswith("sticky/"))

        if not wait_for(up, START_GUARD):
            raise RuntimeError(f"the recipe did not come up within {START_GUARD} s:\n{self.log()}")

    def wait_stopped(self, timeout: float = START_GUARD) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"honcho did not stop within {timeout} s:\n{self.log()}") from None

    def address(self) -> tuple[str, int]:
        """HAProxy's, from this machine."""
        return self.front, self.ports["front"]


def recipe_environment(tmp_path: Path, front_host: str) -> tuple[dict[str, str], dict[str, int]]:
    """The runner's environment: this one without any MCPGATE_*, REDIS_URL or PORT of the developer's, this
    Python's scripts first on PATH, then the folders of the redis-server and haproxy the recipe runs (missing: the
    test is skipped naming them, support/fleet.py installed()), and free ports for every address the recipe reads."""
    servers = {
        str(Path(installed("redis-server", REDIS_SERVER)).parent),
        str(Path(installed("haproxy", HAPROXY)).parent),
    }
    ports = {name: free_port() for name in ("redis", *INSTANCES, "front")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPGATE_") and k not in ("REDIS_URL", "PORT")}
    env.update(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), *sorted(servers), os.environ.get("PATH", "")]),
        PYTHONUNBUFFERED="1",
        MCPGATE_REDIS_PORT=str(ports["redis"]),
        MCPGATE_REDIS_DIR=str(tmp_path),
        HAPROXY_BIND=f"{front_host}:{ports['front']}",
        HAPROXY_ADMIN=str(tmp_path / "admin.sock"),
        **{f"MCPGATE_I{n}": f"127.0.0.1:{ports[f'i{n}']}" for n in range(1, 5)},
    )
    return env, ports


@contextlib.contextmanager
def fleet_recipe(tmp_path: Path, dotenv: dict[str, str], front_host: str = "127.0.0.1") -> Iterator[Recipe]:
    """The fleet recipe run by honcho as deploy/Procfile.fleet says, with `dotenv` in its .env file; HAProxy
    bound on `front_host`. Not waited for: call `wait_up` (or `wait_stopped` when it must refuse)."""
    env, ports = recipe_environment(tmp_path, front_host)
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{name}={value}\n" for name, value in dotenv.items()))
    log_path = tmp_path / "honcho.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [honcho(), "-f", PROCFILE, "-e", str(env_file), "--no-colour", "start"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    recipe = Recipe(proc, ports, front_host, log_path, tmp_path / "admin.sock")
    try:
        yield recipe
    finally:
        started = recipe.started()
        stop_process(proc, timeout=60)  # honcho sends each process group SIGTERM and waits for them
        for pid in started.values():  # whatever a killed honcho left: each group by its leader's PID
            if not pid_gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)


def listening(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
        return True
    return False


# -- a remote peer: a network namespace whose only route is a veth pair to this one ---------------------------


@dataclass(frozen=True)
class RemotePeer:
    namespace: str
    local: str  # this side's address on the veth pair (bind here to be reachable from the peer)
    peer: str  # the peer's address


def netns_problem() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create a network namespace and a veth pair (a real remote peer)"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip) to create a network namespace"
    if subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10).returncode != 0:
        return "network namespaces are not available here (ip netns list failed)"
    return None


@contextlib.contextmanager
def remote_peer() -> Iterator[RemotePeer]:
    """A namespace joined to this one by a veth pair on its own /30 (skipped without root); removed at the end."""
    problem = netns_problem()
    if problem:
        pytest.skip(problem)
    tag = f"{os.getpid() % 10000}{free_port() % 100}"
    namespace, here, there = f"mcpgate-r{tag}", f"mgrh{tag}", f"mgrp{tag}"
    octet = 1 + int(tag) % 250
    fourth = 4 * (int(tag) % 60)
    local, peer = f"10.232.{octet}.{fourth + 1}", f"10.232.{octet}.{fourth + 2}"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)

    try:
        ip("netns", "add", namespace)
        ip("link", "add", here, "type", "veth", "peer", "name", there)
        ip("link", "set", there, "netns", namespace)
        ip("addr", "add", f"{local}/30", "dev", here)
        ip("link", "set", here, "up")
        ip("-n", namespace, "addr", "add", f"{peer}/30", "dev", there)
        ip("-n", namespace, "link", "set", there, "up")
        ip("-n", namespace, "link", "set", "lo", "up")
        if not wait_for(lambda: reachable(namespace, local), 15):
            raise RuntimeError(f"the veth pair {here}/{there} did not come up")
        yield RemotePeer(namespace, local, peer)
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)


def reachable(namespace: str, address: str) -> bool:
    """Whether the namespace has a route to `address` and the link is up (a connect gets an answer)."""
    code = "import socket,sys\ns=socket.socket();s.settimeout(2)\ntry: s.connect((sys.argv[1], 9))\n"
    code += "except ConnectionRefusedError: print('up')\nexcept OSError: print('down')\nelse: print('up')"
    out = subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", code, address],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out.stdout.strip() == "up"


PEER_CLIENT = textwrap.dedent("""
    import base64, http.client, json, sys
    replies = []
    for address, port, method, path, headers, body in json.load(sys.stdin):
        conn = http.client.HTTPConnection(address, port, timeout=30)
        data = base64.b64decode(body) if body is not None else None
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        content = response.read()
        replies.append([response.status, dict((k.lower(), v) for k, v in response.getheaders()),
                        base64.b64encode(content).decode()])
        conn.close()
    json.dump(replies, sys.stdout)
""")


@dataclass(frozen=True)
class PeerRequest:
    port: int
    method: str
    path: str = "/mcp"
    headers: dict[str, str] | None = None
    body: Any = None


def from_peer(remote: RemotePeer, address: str, *requests: PeerRequest) -> list[Reply]:
    """Send `requests` in order from inside the namespace to `address`, each on its own connection."""
    batch = []
    for request in requests:
        body = request.body
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        encoded = base64.b64encode(data).decode() if data is not None else None
        batch.append([address, request.port, request.method, request.path, request.headers or {}, encoded])
    out = subprocess.run(
        ["ip", "netns", "exec", remote.namespace, sys.executable, "-c", PEER_CLIENT],
        input=json.dumps(batch),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the peer's client failed:\n{out.stderr}")
    return [Reply(status, headers, base64.b64decode(body)) for status, headers, body in json.loads(out.stdout)]


def wait_gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    """The pids still alive after waiting up to `timeout` seconds for them to end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(pid_gone(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if not pid_gone(pid)]
