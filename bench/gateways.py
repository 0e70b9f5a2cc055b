"""What the bench runs: the serve gateways (mcpgate and the peers), the floor, the relays; start, stop, memory.

Every serve gateway fronts the same child (bench/child_server.py run with `python -S`) on a loopback port
and is spoken to at its Streamable HTTP endpoint by the same http.client loop.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import peers
import procs
from mcpclient import stop_group

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CHILD_SCRIPT = BENCH / "child_server.py"
CHILD = [sys.executable, "-S", str(CHILD_SCRIPT)]
MODERN_CHILD = [*CHILD, "--modern"]  # the same child, also answering server/discover (2026-07-28)
MiB = 1024 * 1024
SRC: Path | None = None  # run mcpgate from this source tree (set by run.py --src) instead of the installed one


def mcpgate_source() -> Path:
    """The directory whose `mcpgate` package the gateway and relay import."""
    if SRC is not None:
        return SRC
    import importlib.util

    spec = importlib.util.find_spec("mcpgate")
    return Path(spec.origin).resolve().parent.parent if spec and spec.origin else ROOT


def _src_env() -> dict[str, str]:
    return {"PYTHONPATH": str(SRC)} if SRC is not None else {}


@dataclass
class Spec:
    """One thing that listens on a port and serves MCP (or the floor's canned reply)."""

    name: str  # short key used in results.json
    label: str  # row label in the table
    argv: Callable[[int], list[str]]
    env: dict[str, str] = field(default_factory=dict)
    path: str = "/mcp"
    missing: str | None = None  # why it cannot run here
    cwd: Path | None = None  # default: the repository root
    blobs: bool = True  # serves the blob tool (the floor does not)
    note: str = ""
    client: str = "legacy"  # how the bench speaks to it: "legacy" (initialize, one session) or "modern" (2026-07-28)


@dataclass
class RelaySpec:
    name: str
    label: str
    argv: Callable[[str], list[str]]
    missing: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    note: str = ""
    client: str = "legacy"  # how the bench's stdio host speaks: "legacy" (initialize) or "modern" (2026-07-28)


def mcpgate_env(**extra: str) -> dict[str, str]:
    env = {
        "MCPGATE_COMMAND": shlex.join(CHILD),
        "MCPGATE_MAX_SESSIONS": "2100",
        "MCPGATE_MAX_MESSAGE_BYTES": str(16 * MiB),
        "MCPGATE_LOG_LEVEL": "WARNING",
        "MCPGATE_WORKER_CONNECTIONS": "5000",
    }
    env.update(extra)
    return env


def _python_tool(name: str) -> Path:
    return Path(sys.executable).parent / name


def _mcpgate_argv(port: int) -> list[str]:
    return [
        str(_python_tool("gunicorn")),
        "-c",
        "python:mcpgate.gunicorn_config",
        "-b",
        f"127.0.0.1:{port}",
        "mcpgate.wsgi",
    ]


MODERN_NAMES = ("mcpgate-modern", "mcpgate-modern-child")  # mcpgate spoken to in 2026-07-28 requests


def serve_specs() -> list[Spec]:
    specs = [
        Spec(
            "mcpgate", "mcpgate serve (gunicorn, gevent)", _mcpgate_argv, env={**mcpgate_env(), **_src_env()}, cwd=SRC
        ),
        Spec(
            "mcpgate-modern",
            "mcpgate serve, 2026-07-28 (pooled child)",
            _mcpgate_argv,
            env={**mcpgate_env(), **_src_env()},
            cwd=SRC,
            client="modern",
            note="2026-07-28 requests (no session) served by the principal's pool of children (at most "
            "MCPGATE_POOL_CHILDREN, default 4); the child is the same legacy-only one, which the gateway "
            "initializes itself after it does not answer server/discover",
        ),
        Spec(
            "mcpgate-modern-child",
            "mcpgate serve, 2026-07-28 (pooled child answering server/discover)",
            _mcpgate_argv,
            env={**mcpgate_env(MCPGATE_COMMAND=shlex.join(MODERN_CHILD)), **_src_env()},
            cwd=SRC,
            client="modern",
            note="as the row above, with the child run with --modern: it answers server/discover, so requests "
            "reach it with their _meta as they came",
        ),
        Spec(
            "floor",
            "floor (canned reply, stdlib socket server)",
            lambda port: [sys.executable, str(BENCH / "floor_server.py"), str(port)],
            blobs=False,
        ),
    ]
    sg = peers.npm_bin("supergateway")
    sg_version = peers.installed_version("npm", "supergateway")
    specs.append(
        Spec(
            "supergateway",
            f"supergateway {sg_version or '4.0.0'} --stateful (npm)",
            lambda port: [
                str(sg),
                "--stdio",
                shlex.join(CHILD),
                "--outputTransport",
                "streamableHttp",
                "--stateful",
                "--port",
                str(port),
                "--logLevel",
                "none",
            ],
            missing=None if sg.exists() else "not installed (python bench/run.py --install-peers)",
        )
    )
    mp = peers.npm_bin("mcp-proxy")
    mp_version = peers.installed_version("npm", "mcp-proxy")
    specs.append(
        Spec(
            "mcp-proxy-npm",
            f"mcp-proxy {mp_version or '6.7.19'} (npm)",
            lambda port: [str(mp), "--port", str(port), "--host", "127.0.0.1", "--server", "stream", "--", *CHILD],
            missing=None if mp.exists() else "not installed (python bench/run.py --install-peers)",
            note="starts one child at launch and shares it between all sessions",
        )
    )
    pp = peers.venv_bin("mcp-proxy")
    specs.append(
        Spec(
            "mcp-proxy-py",
            "mcp-proxy 0.13.0 (PyPI)",
            lambda port: [str(pp), "--port", str(port), "--host", "127.0.0.1", "--", *CHILD],
            missing=None if pp.exists() else "not installed (python bench/run.py --install-peers)",
            note="starts one child at launch and shares it between all sessions",
        )
    )
    ms = peers.venv_bin("mcp-stdio")
    specs.append(
        Spec(
            "mcp-stdio",
            "mcp-stdio 0.45.2 serve (PyPI)",
            lambda port: [
                str(ms),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--max-sessions",
                "2100",
                "--",
                *CHILD,
            ],
            missing=None if ms.exists() else "not installed (python bench/run.py --install-peers)",
        )
    )
    return specs


RELAY = [sys.executable, "-m", "mcpgate.relay"]  # the same main() as the mcpgate-relay console script


RELAY_BASELINE: Path | None = None  # a tree whose relay is measured beside today's (run.py --relay-baseline)


def relay_available(src: Path | None = None) -> str | None:
    """None when `mcpgate-relay --help` works (from `src` when given), else why not."""
    src = src or SRC
    try:
        done = subprocess.run(
            [*RELAY, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=src or ROOT,
            env={**os.environ, **({"PYTHONPATH": str(src)} if src else {})},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"mcpgate-relay --help failed: {exc}"
    return (
        None if done.returncode == 0 else f"mcpgate-relay --help exited {done.returncode}: {done.stderr.strip()[-200:]}"
    )


def relay_specs() -> list[RelaySpec]:
    missing = "not installed (python bench/run.py --install-peers)"
    sg, pp, ms = peers.npm_bin("supergateway"), peers.venv_bin("mcp-proxy"), peers.venv_bin("mcp-stdio")
    ours = relay_available()
    return [
        RelaySpec(
            "mcpgate-relay",
            "mcpgate-relay",
            lambda url: [*RELAY, url],
            missing=ours,
            env={**os.environ, **_src_env()},
            cwd=SRC or ROOT,
        ),
        RelaySpec(
            "mcpgate-relay-modern",
            "mcpgate-relay --protocol-era modern (2026-07-28 host)",
            lambda url: [*RELAY, url, "--protocol-era", "modern"],
            missing=ours,
            env={**os.environ, **_src_env()},
            cwd=SRC or ROOT,
            client="modern",
            note="the host sends 2026-07-28 requests (per-request _meta, no initialize); the relay POSTs each "
            "one statelessly to the same mcpgate upstream, which serves it from its pool of children",
        ),
        *baseline_relay_specs(),
        RelaySpec(
            "mcp-proxy-py",
            "mcp-proxy 0.13.0 (PyPI) client mode",
            lambda url: [str(pp), "--transport", "streamablehttp", url],
            missing=None if pp.exists() else missing,
        ),
        RelaySpec(
            "mcp-stdio", "mcp-stdio 0.45.2 (PyPI)", lambda url: [str(ms), url], missing=None if ms.exists() else missing
        ),
        RelaySpec(
            "supergateway",
            "supergateway 4.0.0 --streamableHttp (npm)",
            lambda url: [str(sg), "--streamableHttp", url, "--logLevel", "none"],
            missing=None if sg.exists() else missing,
        ),
    ]


def baseline_relay_specs() -> list[RelaySpec]:
    """mcpgate-relay run from the RELAY_BASELINE tree (an older commit), against the same upstream, same rounds."""
    if RELAY_BASELINE is None:
        return []
    src = RELAY_BASELINE
    return [
        RelaySpec(
            "mcpgate-relay-baseline",
            f"mcpgate-relay from {src}",
            lambda url: [*RELAY, url],
            missing=relay_available(src),
            env={**os.environ, "PYTHONPATH": str(src)},
            cwd=src,
            note="the baseline tree's relay (run.py --relay-baseline), the same host, upstream and rounds",
        )
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Running:
    spec: Spec
    proc: subprocess.Popen
    port: int
    startup_s: float


def start(spec: Spec, log_dir: Path, timeout: float = 60.0) -> Running:
    """Start a gateway on a free loopback port (stderr to log_dir/NAME.log); returns once the port accepts."""
    port = free_port()
    env = {**os.environ, **spec.env}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{spec.name}.log"
    began = time.monotonic()
    with open(log_path, "ab") as log:
        proc = procs.register(
            subprocess.Popen(
                spec.argv(port),
                cwd=spec.cwd or ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        )
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{spec.name} exited {proc.returncode} at start: {log_path.read_text(errors='replace')[-600:]}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                break
        except OSError:
            if time.monotonic() - began > timeout:
                stop_group(proc)
                procs.forget(proc)
                raise RuntimeError(f"{spec.name} did not listen on {port} within {timeout} s") from None
            time.sleep(0.05)
    return Running(spec, proc, port, time.monotonic() - began)


def stop(running: Running) -> None:
    stop_group(running.proc, timeout=20.0)
    procs.forget(running.proc)


# -- memory ------------------------------------------------------------------------------------------


def _ppid_map() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
    return parents


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kb(path: str, key: bytes) -> int:
    """The number after `key` in a /proc file of `key: value kB` lines (0 when absent)."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_memory(root: int) -> dict[str, int]:
    """RSS and PSS (KiB) of `root` and its descendants, minus the bench child servers and theirs."""
    parents = _ppid_map()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    rss = pss = procs = excluded = 0
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid != root and str(CHILD_SCRIPT) in _cmdline(pid):  # a child server, or a shell wrapping one
            excluded += 1
            continue
        procs += 1
        rss += kb(f"/proc/{pid}/status", b"VmRSS:")
        pss += kb(f"/proc/{pid}/smaps_rollup", b"Pss:")
        todo.extend(children.get(pid, []))
    return {"rss_kb": rss, "pss_kb": pss, "processes": procs, "children_excluded": excluded}


def _gateway_pids(root: int) -> list[int]:
    """`root` and its descendants, minus the bench child servers (and shells wrapping them) and theirs."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _ppid_map().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid != root and str(CHILD_SCRIPT) in _cmdline(pid):
            continue
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_cpu_ns(root: int) -> int:
    """CPU time (user + system, every thread) the gateway's own processes have used, in ns (/proc schedstat)."""
    return _cpu_ns(_gateway_pids(root))


def servers_cpu_ns(root: int) -> dict[int, int]:
    """CPU time each child server under the gateway `root` has used, in ns, by pid: the descendants running the
    bench's child that have no such descendant themselves (a gateway or shell that names the child's script in
    its own command line is not the child)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _ppid_map().items():
        children.setdefault(ppid, []).append(pid)
    script = str(CHILD_SCRIPT)
    below: dict[int, bool] = {}  # pid -> a child server runs at or under it

    def walk(pid: int) -> bool:
        under = [walk(child) for child in children.get(pid, [])]
        named = script in _cmdline(pid)
        below[pid] = named or any(under)
        if named and not any(under):
            found.append(pid)
        return below[pid]

    found: list[int] = []
    walk(root)
    return {pid: _cpu_ns([pid]) for pid in found}


def _cpu_ns(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total


def child_server_pids() -> set[int]:
    """Every live process running the bench's child server (to find leftovers at the end)."""
    return {pid for pid in _ppid_map() if str(CHILD_SCRIPT) in _cmdline(pid)}


def source_state() -> dict[str, str]:
    """Which mcpgate was measured: its directory, the repository's commit and whether mcpgate/ had edits."""
    src = mcpgate_source()
    state = {"mcpgate_source": str(src)}
    repo = src if (src / ".git").exists() else ROOT
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    state["git_head"] = head.stdout.strip() or "unknown"
    if src in (ROOT, repo):
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--short", "--", "mcpgate"], capture_output=True, text=True
        ).stdout.split("\n")
        state["uncommitted_in_mcpgate"] = ", ".join(line[3:] for line in dirty if line.strip()) or "none"
    else:
        state["uncommitted_in_mcpgate"] = f"(a copy at {src}; see its origin)"
    return state


def tool_versions() -> dict[str, str]:
    node = shutil.which("node")
    versions = {"python": sys.version.split()[0]}
    if node:
        versions["node"] = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    for kind, name in (("npm", "supergateway"), ("npm", "mcp-proxy"), ("pypi", "mcp-proxy"), ("pypi", "mcp-stdio")):
        version = peers.installed_version(kind, name)
        if version:
            versions[f"{name} ({kind})"] = version
    return versions
