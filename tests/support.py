"""Helpers shared by every test module: a real gunicorn (gevent worker) on a free loopback port, raw MCP
requests, and process checks. Test modules import from here, never from each other (the OAuth helpers are in
tests/oauth_support.py, Redis and HAProxy for the fleet tests in tests/fleet_support.py)."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, cast

import pytest
from mcp import types

from mcpgate.core.wire import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    METHOD,
    NAME,
    PROTOCOL_VERSION,
    SESSION_ID,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_gone(pid: int) -> bool:
    """True when pid no longer exists or is a zombie (PID 1 in a container may not reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM by PID, then SIGKILL if it does not go."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


EXCERPT_CHARS = 600
LOG_TAIL_LINES = 200


class Reply(NamedTuple):
    """One HTTP answer; unpacks as (status, headers, body), and its repr explains a failed assertion."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def json(self) -> Any:
        """The body parsed as JSON; a body that is not JSON raises an error that shows the reply."""
        try:
            return json.loads(self.body)
        except ValueError:
            raise ValueError(f"not a JSON body: {self!r}") from None

    def __repr__(self) -> str:
        text = self.body.decode(errors="replace")
        excerpt = text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + f"... ({len(self.body)} bytes)"
        return f"<Reply {self.status} {self.content_type or '(no content-type)'} body={excerpt!r}>"


def send(
    host: str,
    port: int,
    method: str,
    path: str = "/mcp",
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
    source: str | None = None,
    chunked: bool = False,
) -> Reply:
    """One HTTP request on a new connection to host:port; `body` bytes as they are, anything else but None as
    JSON. `source`: the local address to send from (127.0.0.0/8 is all loopback: each address is another
    client); `chunked`: the body in 4 KiB chunks with no Content-Length (a streamed upload)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout, source_address=(source, 0) if source else None)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        if chunked and data is not None:
            pieces = (data[start : start + 4096] for start in range(0, len(data), 4096))
            conn.request(method, path, body=pieces, headers=headers or {}, encode_chunked=True)
        else:
            conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


GATEWAYS: list[Gateway] = []  # every gateway started and not yet reported on: see tests/conftest.py


class Gateway:
    """A running `gunicorn mcpgate.wsgi`; its log goes to a file whose tail a failing test's report shows. It binds
    on `host` (loopback unless a test's own address, e.g. a veth pair's), on a free port."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        config: str | None = None,
        python: str = sys.executable,
        ready_host: str | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.host, self.port = host, free_port()
        self.ready_headers = {"Host": ready_host} if ready_host else {}  # when 127.0.0.1 is not a trusted peer
        self.url = f"http://{host}:{self.port}/mcp"
        self.base = f"http://{host}:{self.port}"
        # "{port}" in a value is this gateway's port (MCPGATE_PUBLIC_URL names it before it is known)
        given = {name: value.replace("{port}", str(self.port)) for name, value in (env or {}).items()}
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **given}
        full_env.pop("PORT", None)
        args = [python, "-m", "gunicorn", "-b", f"{host}:{self.port}"]
        if config:
            args += ["-c", config]
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"mcpgate-test-{self.port}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - open while gunicorn runs
        self.proc = subprocess.Popen(
            [*args, "mcpgate.wsgi"], cwd=cwd, env=full_env, stdout=self._log, stderr=subprocess.STDOUT
        )
        GATEWAYS.append(self)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                status, _, _ = self.request("GET", "/healthz", headers=self.ready_headers)
                if status in (200, 503):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"gunicorn did not become ready:\n{self.log_tail()}")

    def log(self) -> str:
        """Everything gunicorn wrote so far (it writes to the file directly; nothing is buffered here)."""
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log().splitlines()[-lines:])
        except OSError as exc:
            return f"(log {self.log_path} unreadable: {exc})"

    @property
    def stopped(self) -> bool:
        return self._log.closed

    def request(
        self,
        method: str,
        path: str = "/mcp",
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Reply:
        return send(self.host, self.port, method, path, body, headers, timeout)

    def stop(self) -> None:
        try:
            stop_process(self.proc, timeout=30)
        finally:
            self._log.close()


ACCEPT = "application/json, text/event-stream"
HEADERS = {"Accept": ACCEPT, "Content-Type": "application/json"}


def init_body(version: str = "2025-11-25", msg_id: Any = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }


def open_session(gw: Gateway, version: str = "2025-11-25") -> dict[str, str]:
    reply = gw.request("POST", body=init_body(version), headers=HEADERS)
    assert reply.status == 200 and SESSION_ID.lower() in reply.headers, reply
    sid = reply.headers[SESSION_ID.lower()]
    session_headers = {**HEADERS, SESSION_ID: sid}
    if version >= "2025-06-18":
        session_headers[PROTOCOL_VERSION] = version
    reply = gw.request("POST", body={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session_headers)
    assert reply.status == 202, reply
    return session_headers


def call(name: str, args: dict[str, Any], msg_id: Any = 2) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": {"name": name, "arguments": args}}


def sse_messages(body: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body (a priming event, whose data is empty, carries none)."""
    out = []
    for block in body.decode().split("\n\n"):
        data = [line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")]
        if "".join(data):
            out.append(json.loads("\n".join(data)))
    return out


# -- 2026-07-28 requests by raw HTTP: per-request _meta, the request-metadata headers --

MODERN = "2026-07-28"


def modern_headers(method: str, name: str | None = None, version: str = MODERN) -> dict[str, str]:
    """The headers of a 2026-07-28 POST: MCP-Protocol-Version, Mcp-Method and (when given) Mcp-Name."""
    headers = {**HEADERS, PROTOCOL_VERSION: version, METHOD: method}
    return headers if name is None else {**headers, NAME: name}


def modern_body(
    msg_id: Any,
    method: str,
    params: dict[str, Any] | None = None,
    caps: dict[str, Any] | None = None,
    version: str = MODERN,
) -> dict[str, Any]:
    """A 2026-07-28 request: `params` plus the required _meta fields (clientCapabilities `caps`, default {})."""
    meta = {
        META_PROTOCOL_VERSION: version,
        META_CLIENT_CAPABILITIES: caps or {},
        META_CLIENT_INFO: {"name": "t", "version": "1"},
    }
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {**(params or {}), "_meta": meta}}


def post_modern(
    gw: Gateway, body: dict[str, Any], headers: dict[str, str] | None = None, timeout: float = 30.0
) -> Reply:
    """POST a 2026-07-28 message; headers default to those mirrored from the body (version, method, name/uri)."""
    if headers is None:
        params = body.get("params") or {}
        version = (params.get("_meta") or {}).get(META_PROTOCOL_VERSION, MODERN)
        name = params.get("uri" if body["method"] == "resources/read" else "name")
        headers = modern_headers(body["method"], name if isinstance(name, str) else None, version)
    return gw.request("POST", body=body, headers=headers, timeout=timeout)


def reply_messages(reply: Reply) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a reply, whether it is one JSON object or an SSE stream."""
    if reply.content_type.startswith("text/event-stream"):
        return sse_messages(reply.body)
    return [reply.json()]


def reply_message(reply: Reply) -> dict[str, Any]:
    """The last JSON-RPC message of a reply (the response, when the reply is an SSE stream)."""
    messages = reply_messages(reply)
    assert messages, reply
    return messages[-1]


MODERN_CHILD = f"{sys.executable} {FIXTURES / 'modern_server.py'}"  # MCPGATE_COMMAND of the SDK-written child


@contextlib.contextmanager
def serving(env: dict[str, str] | None = None, **kwargs: Any) -> Iterator[Gateway]:
    """A ready gateway for a `with` block (e.g. one per test module), stopped at its end; `kwargs`: Gateway's."""
    gw = Gateway(env, **kwargs)
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()


@contextlib.contextmanager
def lazy_gateways(envs: dict[str, dict[str, str]]) -> Iterator[Callable[[str], Gateway]]:
    """`get(kind)`: the gateway started with `envs[kind]`, started on first use and shared until the block ends
    (a module's gateways, one per kind of child or settings)."""
    started: dict[str, Gateway] = {}
    with contextlib.ExitStack() as stack:

        def get(kind: str) -> Gateway:
            if kind not in started:
                started[kind] = stack.enter_context(serving(envs[kind]))
            return started[kind]

        yield get


def wait_for(predicate: Callable[[], bool], timeout: float = 15.0) -> bool:
    """Poll `predicate` until it holds (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def assert_serves_the_demo(python: str, cwd: Path, config: str | None = None) -> None:
    """gunicorn run by this Python (another virtual environment's) starts and answers an initialize."""
    gw = Gateway(cwd=cwd, python=python, config=config)
    try:
        gw.wait_ready()
        reply = gw.request("POST", body=init_body(), headers=HEADERS)
        assert reply.status == 200 and b"mcpgate-demo" in reply.body, (reply, gw.log_tail())
    finally:
        gw.stop()


def children(gw: Gateway) -> int:
    reply = gw.request("GET", "/healthz")
    assert reply.content_type.startswith("application/json"), reply
    return int(reply.json()["children"])


def alive(pid: int) -> bool:
    return not pid_gone(pid)


def wait_dead(pids: list[int], timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [pid for pid in pids if alive(pid)]
        if not left:
            return []
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def direct_children(pid: int) -> list[int]:
    from mcpgate.child.orphans import children_of

    return children_of(pid)


def worker_children(gw: Gateway) -> list[int]:
    """The child processes of the gateway's one worker (the MCP servers it started)."""
    [worker] = direct_children(gw.proc.pid)
    return direct_children(worker)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def preflight_decision(environ: dict[str, str], binds: list[str]) -> tuple[str | None, list[str]]:
    """What the start check (serve/front/preflight.py) decides for these settings and binds: its refusal (None: the
    gateway starts), and what it logged, a "LEVEL message" line each."""
    from mcpgate.config.settings import Settings
    from mcpgate.serve.front import preflight

    log, capture = logging.getLogger("tests.preflight"), _Lines()
    log.addHandler(capture)
    try:
        return preflight.run(Settings.from_env(environ=environ), binds, log), capture.lines
    finally:
        log.removeHandler(capture)


def gunicorn_refusal(env: dict[str, str], *args: str) -> str:
    """What gunicorn started as a user would (from the project root; `args` before the app, e.g. "-b", "HOST:PORT";
    `env` over this environment less any MCPGATE_* or PORT of the developer's) printed: it must stop by itself
    with a non-zero status (a gateway that started is a failure, ended by its PID)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MCPGATE_") and k != "PORT"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", *args, "mcpgate.wsgi"],
        cwd=ROOT,
        env={**full_env, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        stop_process(proc)  # only if it did not exit
    assert proc.returncode not in (0, None), out
    return out


# -- a real browser: Debian's Chromium, and a page of another origin for it ---------------------------------------


def chromium() -> str:
    """Chromium's path; missing, the test is skipped naming the package (or fails under CI: .ci/run installs it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium package)")
        pytest.skip("needs Debian's chromium package (apt-get install chromium)")
    return found


@contextlib.contextmanager
def static_site(directory: Path) -> Iterator[int]:
    """A static file server of `directory` on a free loopback port (another origin, for a browser's page) for a
    `with` block: yields its port."""
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(*args, directory=str(directory))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


# -- the official SDK client's answers to a server's requests (elicitation: a name; sampling: the prompt, loud) --


async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Grace"})


async def on_sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    text = params.messages[0].content.text  # type: ignore[union-attr]
    return types.CreateMessageResult(
        role="assistant", model="stub", content=types.TextContent(type="text", text=text.upper())
    )


async def demo_round_trips(client: Any) -> None:
    """The demo server's progress, elicitation and sampling round trips through an SDK client (one that
    answers with on_elicit and on_sample)."""
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    slow = await client.call_tool("slow", {"seconds": 0.3, "steps": 3}, progress_callback=on_progress)
    assert slow.content[0].text.startswith("done") and updates == [1, 2, 3]
    asked = await client.call_tool("ask_name", {})
    assert asked.content[0].text == "Hello, Grace"
    sampled = await client.call_tool("sample", {"prompt": "shout this"})
    assert sampled.content[0].text == "SHOUT THIS"


# -- MCPGATE_CONFIG files (named servers) --

DEMO_ENTRY = {"command": sys.executable, "args": ["-m", "mcpgate.demo_server"]}  # the bundled demo server
NAMED_ENTRY = {"command": sys.executable, "args": [str(FIXTURES / "named_server.py")]}  # an SDK-written one


def write_config(path: Path, entries: dict[str, Any]) -> str:
    """An MCPGATE_CONFIG file of these mcpServers entries, renamed into place (a reload never reads half of
    it); its path."""
    staged = path.with_name(path.name + ".new")
    staged.write_text(json.dumps({"mcpServers": entries}))
    os.replace(staged, path)
    return str(path)


class NamedServer:
    """Requests to one named server's endpoint by default: `named(gw, name)` passes for a Gateway to the helpers
    above (open_session, ...), which post to `request`'s default path."""

    def __init__(self, gw: Gateway, name: str) -> None:
        self.gw, self.path = gw, f"/servers/{name}/mcp"

    def request(self, method: str, path: str | None = None, **kwargs: Any) -> Reply:
        return self.gw.request(method, path or self.path, **kwargs)


def named(gw: Gateway, name: str) -> Gateway:
    return cast(Gateway, NamedServer(gw, name))


async def cancel_a_slow_call(client: Any) -> None:
    """Start the fixture's `slow` tool, cancel the call once its first progress arrives (the child is working on
    it: the SDK then tells the server, as its era does), and check the session still answers the next call."""
    import anyio  # the SDK's event loop; only the async tests need it

    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await client.call_tool("slow", {"seconds": 30, "steps": 60}, progress_callback=on_progress)

        tg.start_soon(call)
        await started.wait()
        tg.cancel_scope.cancel()
    assert (await client.call_tool("echo", {"message": "next"})).content[0].text == "next"
