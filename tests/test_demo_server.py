"""Tests for mcpgate.demo_server, run as a real child process.

Part (a) drives it with raw newline-delimited JSON-RPC over pipes; part (b) with the official SDK's
stdio client (mcp 2.3, mode="legacy"). Timeouts below are hang guards only, never assertions on speed.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

REPO = Path(__file__).resolve().parents[1]
SERVER_ARGS = ["-m", "mcpgate.demo_server"]
HANG_GUARD = 30.0  # seconds; only to fail instead of hanging
LATEST = "2025-11-25"
VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
MAX_BYTES = 16 * 1024 * 1024

Msg = dict[str, Any]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


class RawServer:
    """The demo server as a child process, spoken to with raw NDJSON lines."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *SERVER_ARGS],
            cwd=REPO,
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr: list[bytes] = []
        self.seen: list[Msg] = []  # every message read so far, in order
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()  # type: ignore

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg: Msg) -> None:
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def recv(self) -> Msg:
        try:
            line = self.lines.get(timeout=HANG_GUARD)
        except queue.Empty:
            raise AssertionError("no message from the demo server (hang guard)") from None
        assert line is not None, "demo server closed stdout"
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        msg = json.loads(line)
        assert isinstance(msg, dict) and msg["jsonrpc"] == "2.0"
        self.seen.append(msg)
        return msg

    def recv_until(self, match: Callable[[Msg], bool]) -> list[Msg]:
        """Messages up to and including the first one that matches."""
        got = [self.recv()]
        while not match(got[-1]):
            got.append(self.recv())
        return got

    def response(self, msg_id: Any) -> Msg:
        return self.recv_until(lambda m: _is_response(m, msg_id))[-1]

    def request(self, msg_id: Any, method: str, params: Msg | None = None) -> Msg:
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, **({} if params is None else {"params": params})})
        return self.response(msg_id)

    def call(self, msg_id: Any, name: str, arguments: Msg | None = None, **extra: Any) -> Msg:
        return self.request(msg_id, "tools/call", {"name": name, "arguments": arguments or {}, **extra})

    def initialize(self, version: str = LATEST, capabilities: Msg | None = None) -> Msg:
        params = {
            "protocolVersion": version,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "pytest", "version": "0"},
        }
        response = self.request(0, "initialize", params)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return response

    def close_stdin_and_wait(self, timeout: float = 5.0) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        """Stop the child by PID, whatever state it is in."""
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=HANG_GUARD)


def _is_response(msg: Msg, msg_id: Any) -> bool:
    return "method" not in msg and type(msg.get("id")) is type(msg_id) and msg.get("id") == msg_id


def _text(response: Msg) -> str:
    (block,) = response["result"]["content"]
    assert block["type"] == "text"
    return str(block["text"])


@pytest.fixture
def server() -> Any:
    srv = RawServer()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def ready(server: RawServer) -> RawServer:
    """An initialized server whose client declared elicitation and sampling."""
    server.initialize(capabilities={"elicitation": {}, "sampling": {}})
    return server


# -- (a) raw NDJSON ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_initialize_echoes_supported_version(server: RawServer, version: str) -> None:
    result = server.initialize(version)["result"]
    assert result["protocolVersion"] == version
    assert result["capabilities"] == {
        "tools": {"listChanged": True},
        "resources": {"subscribe": False, "listChanged": True},
        "prompts": {"listChanged": True},
        "logging": {},
    }
    assert result["serverInfo"]["name"] == "mcpgate-demo" and isinstance(result["serverInfo"]["version"], str)


@pytest.mark.parametrize("version", ["1999-01-01", "2026-07-28", None])
def test_initialize_falls_back_to_latest(server: RawServer, version: str | None) -> None:
    params: Msg = {"capabilities": {}, "clientInfo": {"name": "pytest", "version": "0"}}
    if version is not None:
        params["protocolVersion"] = version
    assert server.request(1, "initialize", params)["result"]["protocolVersion"] == LATEST


def test_ping_and_ids_kept_exactly(ready: RawServer) -> None:
    assert ready.request("1", "ping") == {"jsonrpc": "2.0", "id": "1", "result": {}}
    assert ready.request(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}
    # The same id as string and as integer, both in flight at once, are distinct requests.
    ready.send(
        {
            "jsonrpc": "2.0",
            "id": "7",
            "method": "tools/call",
            "params": {"name": "slow", "arguments": {"seconds": 0.2, "steps": 1}},
        }
    )
    ready.send(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "int"}}}
    )
    ready.recv_until(lambda _: all(any(_is_response(m, i) for m in ready.seen) for i in (7, "7")))
    by_id = {json.dumps(m["id"]): m for m in ready.seen if "id" in m and "method" not in m}
    assert _text(by_id["7"]) == "int"
    assert _text(by_id['"7"']) == "done after 0.2 s"


def test_tools_list(ready: RawServer) -> None:
    tools = ready.request(2, "tools/list")["result"]["tools"]
    names = {t["name"] for t in tools}
    assert names == {"echo", "add", "slow", "bytes", "ask_name", "sample", "notify_change", "log"}
    for tool in tools:
        assert tool["inputSchema"]["type"] == "object" and isinstance(tool["description"], str)


def test_echo_add_bytes(ready: RawServer) -> None:
    echoed = ready.call(1, "echo", {"message": 'héllo \u2603\n"q"'})
    assert _text(echoed) == 'héllo \u2603\n"q"' and echoed["result"]["isError"] is False
    added = ready.call(2, "add", {"a": 1, "b": 2.5})
    assert _text(added) == "3.5" and added["result"]["structuredContent"] == {"result": 3.5}
    assert _text(ready.call(3, "add", {"a": 2, "b": 3})) == "5"
    assert _text(ready.call(4, "bytes", {"size": 1000})) == "x" * 1000
    assert len(_text(ready.call(5, "bytes", {"size": MAX_BYTES}))) == MAX_BYTES
    assert _text(ready.call(6, "bytes", {"size": 0})) == ""
    assert ready.call(7, "bytes", {"size": MAX_BYTES + 1})["result"]["isError"] is True


@pytest.mark.parametrize(
    "name,arguments",
    [
        ("add", {"a": "1", "b": 2}),
        ("add", {"a": 1}),
        ("add", {"a": True, "b": 1}),
        ("echo", {}),
        ("echo", {"message": 5}),
        ("slow", {"seconds": 61}),
        ("bytes", {"size": 1.5}),
        ("log", {"level": "loud", "message": "m"}),
    ],
)
def test_invalid_arguments_give_tool_error(ready: RawServer, name: str, arguments: Msg) -> None:
    result = ready.call(1, name, arguments)["result"]
    assert result["isError"] is True and _text({"result": result})


def test_non_object_arguments_give_tool_error(ready: RawServer) -> None:
    ready.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": [1]}})
    assert ready.response(1)["result"]["isError"] is True


def test_unknown_tool_is_invalid_params(ready: RawServer) -> None:
    response = ready.call(9, "nope")
    assert response["id"] == 9 and response["error"]["code"] == -32602


@pytest.mark.parametrize("token", ["tok-1", 42])
def test_slow_progress_carries_token_and_increases(ready: RawServer, token: Any) -> None:
    ready.send(
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "slow", "arguments": {"seconds": 0.2, "steps": 4}, "_meta": {"progressToken": token}},
        }
    )
    messages = ready.recv_until(lambda m: _is_response(m, 3))
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert [p["progress"] for p in progress] == [1, 2, 3, 4]
    assert all(p["progressToken"] == token and type(p["progressToken"]) is type(token) for p in progress)
    assert all(p["total"] == 4 and isinstance(p["message"], str) for p in progress)
    assert _text(messages[-1]) == "done after 0.2 s"


def test_slow_without_token_sends_no_progress(ready: RawServer) -> None:
    ready.send(
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "slow", "arguments": {"seconds": 0.1, "steps": 3}},
        }
    )
    messages = ready.recv_until(lambda m: _is_response(m, 4))
    assert len(messages) == 1 and _text(messages[0]) == "done after 0.1 s"


def test_cancel_slow_sends_no_response(ready: RawServer) -> None:
    ready.send(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "slow", "arguments": {"seconds": 60, "steps": 600}, "_meta": {"progressToken": "c"}},
        }
    )
    ready.recv_until(lambda m: m.get("method") == "notifications/progress")  # it is running
    ready.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5, "reason": "test"}})
    echo_reply = ready.call(6, "echo", {"message": "still here"})
    assert _text(echo_reply) == "still here"
    # The server handled the cancel before the echo, so from then on nothing may mention request 5.
    after = [*ready.seen[ready.seen.index(echo_reply) + 1 :], ready.request(7, "ping")]
    assert after == [{"jsonrpc": "2.0", "id": 7, "result": {}}]
    assert not any(_is_response(m, 5) for m in ready.seen)
    # A cancel for an unknown or finished request is ignored.
    ready.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}})
    assert ready.request(8, "ping")["result"] == {}


def _answer_elicitation(server: RawServer, call_id: int, answer: Msg, version: str) -> Msg:
    server.send({"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": {"name": "ask_name"}})
    request = server.recv()
    assert request["method"] == "elicitation/create" and isinstance(request["id"], str)
    params = request["params"]
    assert params["requestedSchema"]["properties"]["name"]["type"] == "string"
    assert params["requestedSchema"]["required"] == ["name"] and isinstance(params["message"], str)
    assert params.get("mode") == ("form" if version == "2025-11-25" else None)
    server.send({"jsonrpc": "2.0", "id": request["id"], **answer})
    return server.response(call_id)


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_ask_name_round_trip(server: RawServer, version: str) -> None:
    server.initialize(version, {"elicitation": {}})
    accept = {"result": {"action": "accept", "content": {"name": "Ada"}}}
    assert _text(_answer_elicitation(server, 1, accept, version)) == "Hello, Ada"
    assert _text(_answer_elicitation(server, 2, {"result": {"action": "decline"}}, version)) == "declined"
    assert _text(_answer_elicitation(server, 3, {"result": {"action": "cancel"}}, version)) == "cancelled"
    error = {"error": {"code": -1, "message": "no UI"}}
    assert _answer_elicitation(server, 4, error, version)["result"]["isError"] is True
    server_ids = [m["id"] for m in server.seen if m.get("method") == "elicitation/create"]
    assert len(set(server_ids)) == 4


def test_ask_name_without_capability_is_tool_error(server: RawServer) -> None:
    server.initialize(capabilities={"sampling": {}})
    result = server.call(1, "ask_name")["result"]
    assert result["isError"] is True and "elicitation" in _text({"result": result})


def test_cancel_while_waiting_for_elicitation(ready: RawServer) -> None:
    ready.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask_name"}})
    request = ready.recv()
    ready.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    cancel = ready.recv()
    assert cancel["method"] == "notifications/cancelled" and cancel["params"]["requestId"] == request["id"]
    ready.send({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"name": "Late"}}})
    assert ready.request(2, "ping")["result"] == {}
    assert not any(_is_response(m, 1) for m in ready.seen)


def test_sample_round_trip(ready: RawServer) -> None:
    ready.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "sample", "arguments": {"prompt": "Say hi"}},
        }
    )
    request = ready.recv()
    assert request["method"] == "sampling/createMessage"
    assert request["params"] == {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}],
        "maxTokens": 100,
    }
    ready.send(
        {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {"role": "assistant", "content": {"type": "text", "text": "hi!"}, "model": "m"},
        }
    )
    assert _text(ready.response(1)) == "hi!"


def test_sample_without_capability_is_tool_error(server: RawServer) -> None:
    server.initialize(capabilities={})
    assert server.call(1, "sample", {"prompt": "x"})["result"]["isError"] is True


def test_unknown_response_id_is_ignored(ready: RawServer) -> None:
    ready.send({"jsonrpc": "2.0", "id": "srv-999", "result": {}})
    ready.send({"jsonrpc": "2.0", "id": 12345, "error": {"code": -1, "message": "x"}})
    ready.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert ready.recv() == {"jsonrpc": "2.0", "id": 1, "result": {}}  # nothing was sent for the stray responses


def test_notify_change_and_log(ready: RawServer) -> None:
    ready.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "notify_change"}})
    messages = ready.recv_until(lambda m: _is_response(m, 1))
    assert [m.get("method") for m in messages[:-1]] == [
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
    ]
    assert _text(messages[-1]) == "sent"
    ready.send(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "log", "arguments": {"level": "warning", "message": "careful"}},
        }
    )
    messages = ready.recv_until(lambda m: _is_response(m, 2))
    assert messages[0] == {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "warning", "logger": "demo", "data": "careful"},
    }
    assert _text(messages[-1]) == "logged"
    # logging/setLevel filters less severe messages.
    assert ready.request(3, "logging/setLevel", {"level": "error"})["result"] == {}
    ready.send(
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "log", "arguments": {"level": "info", "message": "quiet"}},
        }
    )
    assert [_text(m) for m in ready.recv_until(lambda m: _is_response(m, 4))] == ["logged"]
    assert ready.request(5, "logging/setLevel", {"level": "loud"})["error"]["code"] == -32602


def test_resources(ready: RawServer) -> None:
    resources = ready.request(1, "resources/list")["result"]["resources"]
    assert {(r["uri"], r["mimeType"]) for r in resources} == {
        ("demo://readme", "text/markdown"),
        ("demo://time", "text/plain"),
    }
    (readme,) = ready.request(2, "resources/read", {"uri": "demo://readme"})["result"]["contents"]
    assert readme["uri"] == "demo://readme" and readme["mimeType"] == "text/markdown" and "demo" in readme["text"]
    (now,) = ready.request(3, "resources/read", {"uri": "demo://time"})["result"]["contents"]
    assert now["mimeType"] == "text/plain" and now["text"].endswith("Z")
    (template,) = ready.request(4, "resources/templates/list")["result"]["resourceTemplates"]
    assert template["uriTemplate"] == "demo://echo/{text}"
    (echoed,) = ready.request(5, "resources/read", {"uri": "demo://echo/hello"})["result"]["contents"]
    assert echoed == {"uri": "demo://echo/hello", "mimeType": "text/plain", "text": "hello"}
    missing = ready.request(6, "resources/read", {"uri": "demo://nope"})
    assert missing["error"] == {"code": -32002, "message": "Resource not found", "data": {"uri": "demo://nope"}}
    assert ready.request(7, "resources/read", {})["error"]["code"] == -32602


def test_prompts(ready: RawServer) -> None:
    (prompt,) = ready.request(1, "prompts/list")["result"]["prompts"]
    assert prompt["name"] == "greet" and prompt["arguments"][0] == {
        **prompt["arguments"][0],
        "name": "name",
        "required": True,
    }
    got = ready.request(2, "prompts/get", {"name": "greet", "arguments": {"name": "Ada"}})["result"]
    assert got["messages"] == [{"role": "user", "content": {"type": "text", "text": "Please greet Ada warmly."}}]
    assert ready.request(3, "prompts/get", {"name": "greet"})["error"]["code"] == -32602
    assert ready.request(4, "prompts/get", {"name": "greet", "arguments": {}})["error"]["code"] == -32602
    assert ready.request(5, "prompts/get", {"name": "nope", "arguments": {"name": "x"}})["error"]["code"] == -32602


@pytest.mark.parametrize(
    "line",
    [
        b"not json\n",
        b'{"jsonrpc": "2.0", "id": 1,\n',
        b"\xff\xfe{}\n",
        b'{"jsonrpc":"2.0","id":1,"method":"ping","x":NaN}\n',
        b"[" * 100000 + b"\n",
    ],
)
def test_malformed_line_is_parse_error(ready: RawServer, line: bytes) -> None:
    ready.send_raw(line)
    reply = ready.recv()
    assert reply["id"] is None and reply["error"]["code"] == -32700
    assert ready.request(1, "ping")["result"] == {}  # still serving


@pytest.mark.parametrize(
    "message,reply_id",
    [
        ({"jsonrpc": "1.0", "id": 5, "method": "ping"}, 5),
        ({"id": 6, "method": "ping"}, 6),
        ({"jsonrpc": "2.0", "id": 7, "method": 3}, 7),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None),
        ([{"jsonrpc": "2.0", "id": 8, "method": "ping"}], None),
        ("ping", None),
        ({"jsonrpc": "2.0", "id": 9}, 9),
    ],
)
def test_invalid_request(ready: RawServer, message: Any, reply_id: Any) -> None:
    ready.send_raw(json.dumps(message).encode() + b"\n")
    reply = ready.recv()
    assert reply["error"]["code"] == -32600 and reply["id"] == reply_id and type(reply["id"]) is type(reply_id)


def test_unknown_method_and_bad_params(ready: RawServer) -> None:
    for msg_id in ("abc", 77):
        reply = ready.request(msg_id, "does/not/exist")
        assert reply["error"]["code"] == -32601 and type(reply["id"]) is type(msg_id) and reply["id"] == msg_id
    ready.send({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": ["demo://readme"]})
    assert ready.recv()["error"]["code"] == -32602
    # Unknown notifications and blank lines get no reply at all.
    ready.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {}})
    ready.send_raw(b"\n  \r\n")
    ready.send({"jsonrpc": "2.0", "id": 4, "method": "ping"})
    assert ready.recv() == {"jsonrpc": "2.0", "id": 4, "result": {}}


def test_eof_exits_zero(ready: RawServer) -> None:
    assert ready.close_stdin_and_wait(timeout=5) == 0


def test_eof_with_slow_call_in_flight_exits_zero(ready: RawServer) -> None:
    ready.send(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 60}}}
    )
    ready.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ask_name"}})
    assert ready.recv()["method"] == "elicitation/create"
    assert ready.close_stdin_and_wait(timeout=5) == 0
    assert ready.lines.get(timeout=HANG_GUARD) is None  # stdout closed with no response to 1 or 2


def test_pipeline_answers_before_exit(server: RawServer) -> None:
    """Requests written just before EOF (a shell pipeline) are still answered."""
    init = {"protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "sh", "version": "0"}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "m"}}},
    ]
    server.send_raw(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    assert server.close_stdin_and_wait(timeout=5) == 0
    assert _text(server.response(2)) == "m"


def test_console_entry_point_main_is_importable() -> None:
    from mcpgate import demo_server

    assert callable(demo_server.main)


# -- (b) the official SDK stdio client ---------------------------------------------------------------------------


def _demo_children() -> set[int]:
    """PIDs of our child processes running the demo server (Linux /proc; empty elsewhere)."""
    found: set[int] = set()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"mcpgate.demo_server" in cmdline:
            found.add(int(entry.name))
    return found


def _kill_leftovers(pids: set[int]) -> None:
    for pid in pids & _demo_children():  # re-checked so a reused PID is never hit
        os.kill(pid, signal.SIGKILL)


def _run_with_sdk(body: Callable[[Any], Any]) -> None:
    from mcp import Client, StdioServerParameters, types

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        assert params.requested_schema["required"] == ["name"]
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    async def on_sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        (message,) = params.messages
        assert params.max_tokens == 100 and isinstance(message.content, types.TextContent)
        return types.CreateMessageResult(
            role="assistant", model="stub", content=types.TextContent(type="text", text=message.content.text.upper())
        )

    pids: set[int] = set()

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=SERVER_ARGS, cwd=str(REPO), env=_env())
        with anyio.fail_after(HANG_GUARD * 2):
            async with Client(
                params, mode="legacy", elicitation_callback=on_elicit, sampling_callback=on_sample
            ) as client:
                pids.update(_demo_children())
                assert pids or not Path("/proc").is_dir()
                await body(client)

    try:
        anyio.run(main)
    finally:
        _kill_leftovers(pids)


def test_sdk_tools_resources_prompts() -> None:
    from mcp.shared.exceptions import MCPDeprecationWarning

    async def body(client: Any) -> None:
        assert client.protocol_version == LATEST
        assert client.server_info.name == "mcpgate-demo"
        with pytest.warns(MCPDeprecationWarning):  # ping is legacy-only; this connection is legacy
            await client.send_ping()
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} >= {"echo", "add", "slow", "ask_name", "sample"}
        added = await client.call_tool("add", {"a": 2, "b": 40})
        assert not added.is_error and added.structured_content == {"result": 42}
        assert added.content[0].text == "42"
        readme = await client.read_resource("demo://readme")
        assert readme.contents[0].mime_type == "text/markdown" and "demo" in readme.contents[0].text
        echoed = await client.read_resource("demo://echo/hello")
        assert echoed.contents[0].text == "hello"
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        assert prompt.messages[0].role == "user" and prompt.messages[0].content.text == "Please greet Ada warmly."

    _run_with_sdk(body)


def test_sdk_progress_elicitation_sampling() -> None:
    async def body(client: Any) -> None:
        updates: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            updates.append((progress, total, message))

        slow = await client.call_tool("slow", {"seconds": 0.3, "steps": 3}, progress_callback=on_progress)
        assert slow.content[0].text == "done after 0.3 s"
        assert [(p, t) for p, t, _ in updates] == [(1, 3), (2, 3), (3, 3)]
        asked = await client.call_tool("ask_name", {})
        assert not asked.is_error and asked.content[0].text == "Hello, Grace"
        sampled = await client.call_tool("sample", {"prompt": "shout this"})
        assert not sampled.is_error and sampled.content[0].text == "SHOUT THIS"

    _run_with_sdk(body)
