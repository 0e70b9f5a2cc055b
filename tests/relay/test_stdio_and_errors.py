"""The host side (stdout hygiene, framing, exit) and the errors a host sees."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

import mcpgate
from tests.support import free_port
from tests.support.relay import (
    FIXTURES,
    HANG_GUARD,
    INITIALIZED,
    Scripted,
    ScriptedServer,
    Seen,
    Upstream,
    explain_stderr,
    initialize,
    mcp_default,
    relay_params,
    sse_event,
    sse_reply,
    stop_process,
    wait_for,
    wait_listening,
)

TOKEN = "tok-never-logged-42"


@pytest.fixture
def unauthorized(tmp_path: Path) -> Any:
    """The tiny 401 fixture server in its own process; it records the Authorization headers it saw."""
    port = free_port()
    record = tmp_path / "auth.log"
    proc = subprocess.Popen(
        [sys.executable, str(FIXTURES / "unauthorized.py"), str(port), str(record)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", record
    finally:
        stop_process(proc)


def test_stdout_carries_only_whole_jsonrpc_lines(raw_relay: Any, streamable_upstream: Upstream) -> None:
    relay = raw_relay(streamable_upstream.url, "--max-message-bytes", "2000", "--log-level", "debug")
    relay.send(initialize(1))
    relay.send(INITIALIZED)
    relay.send(
        b"this is not json",
        b"[]",
        b'{"jsonrpc":"2.0","id":7}',
        b"x" * 5000,
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
            }
        ).encode(),
        b'{"jsonrpc":"2.0","id":3,"method":"tools/list"}\r',
        json.dumps({"jsonrpc": "2.0", "id": "s\u2028tr", "method": "ping"}, ensure_ascii=False).encode(),
    )
    code, lines, stderr = relay.finish()
    assert code == 0, explain_stderr(stderr)
    messages = [json.loads(line) for line in lines]
    assert all(m["jsonrpc"] == "2.0" for m in messages)
    by_id = {m.get("id"): m for m in messages if m.get("id") is not None}
    assert by_id[1]["result"]["serverInfo"]["name"] == "relay-fixture"
    assert by_id[2]["result"]["structuredContent"] == {"result": 3}
    assert "exceeded 2000 bytes" in by_id[3]["error"]["message"]  # the tools list is bigger than the limit
    assert by_id["s\u2028tr"]["result"] == {}
    null_id_errors = sorted(m["error"]["code"] for m in messages if m.get("id") is None)
    assert null_id_errors == [-32700, -32600, -32600]  # garbage, empty batch, oversized line
    assert by_id[7]["error"]["code"] == -32600
    assert "DEBUG" in stderr  # logs went to stderr, not stdout


def test_stdin_eof_exits_zero_without_any_traffic(raw_relay: Any) -> None:
    relay = raw_relay(f"http://127.0.0.1:{free_port()}/mcp")
    code, lines, _ = relay.finish()
    assert code == 0 and lines == []


def test_unreachable_upstream_is_named(raw_relay: Any) -> None:
    relay = raw_relay(f"http://127.0.0.1:{free_port()}/mcp", "--connect-timeout", "2")
    relay.send(initialize(1))
    error = relay.read_reply(1)["error"]
    relay.finish()
    assert "cannot reach upstream" in error["message"] and "refused" in error["message"]


def test_401_names_the_token_setting_sdk_host(unauthorized: tuple[str, Path]) -> None:
    url, _ = unauthorized

    async def main() -> str:
        with anyio.fail_after(HANG_GUARD):
            try:
                async with Client(relay_params(url), mode="legacy"):
                    return "connected?!"
            except Exception as exc:  # noqa: BLE001 - the SDK raises the relay's JSON-RPC error as one of several types
                return repr(exc)

    message = anyio.run(main)
    assert "MCPGATE_BEARER_TOKEN" in message and "401" in message


def test_401_with_a_token_says_it_was_rejected(raw_relay: Any, unauthorized: tuple[str, Path]) -> None:
    url, record = unauthorized
    relay = raw_relay(url, "--log-level", "debug", env={"MCPGATE_BEARER_TOKEN": TOKEN})
    relay.send(initialize(1))
    error = relay.read_reply(1)["error"]
    _, _, stderr = relay.finish()
    assert "MCPGATE_BEARER_TOKEN was rejected" in error["message"]
    assert error["data"]["httpStatus"] == 401 and "resource_metadata" in error["data"]["wwwAuthenticate"]
    assert f"Bearer {TOKEN}" in record.read_text()
    assert TOKEN not in stderr


def test_help_explains_every_option() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mcpgate.relay", "--help"], capture_output=True, text=True, timeout=HANG_GUARD
    )
    assert out.returncode == 0, out.stderr
    for option in (
        "--header",
        "--transport",
        "--connect-timeout",
        "--read-timeout",
        "--log-level",
        "--no-cancel-filter",
        "--max-message-bytes",
        "MCPGATE_BEARER_TOKEN",
    ):
        assert option in out.stdout


def test_version_names_the_package_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mcpgate.relay", "--version"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=HANG_GUARD,
    )
    assert (out.returncode, out.stdout) == (0, f"mcpgate-relay {mcpgate.__version__}\n"), out.stderr


@pytest.mark.parametrize(
    "args", [["ftp://x/mcp"], ["http://x/mcp", "-H", "no colon"], ["http://x/mcp", "--transport", "carrier-pigeon"]]
)
def test_bad_arguments_exit_2(args: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "mcpgate.relay", *args], capture_output=True, timeout=HANG_GUARD)
    assert out.returncode == 2 and out.stdout == b"", out.stderr.decode(errors="replace")


def test_legacy_endpoint_resolution_and_origin_check(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.method == "GET" and seen.path == "/base/sse":
            return sse_reply(
                b"event: endpoint\ndata: messages?sid=1\n\n",
                sse_event(
                    {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}}
                ),
                float(HANG_GUARD),
            )
        if seen.method == "GET" and seen.path == "/evil/sse":
            return sse_reply(b"event: endpoint\ndata: http://elsewhere.example/steal\n\n", float(HANG_GUARD))
        if seen.method == "POST" and seen.path == "/base/messages?sid=1":
            return Scripted(202)
        return Scripted(404)

    with ScriptedServer(route) as server:
        base = f"http://127.0.0.1:{server.port}"
        relay = raw_relay(f"{base}/base/sse", "--transport", "sse")
        relay.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
        assert relay.read()["method"] == "notifications/message"
        relay.finish()
        evil = raw_relay(f"{base}/evil/sse", "--transport", "sse")
        evil.send(initialize(1))
        error = evil.read_reply(1)["error"]
        evil.finish()
    posted = server.requests("POST")
    assert posted[0].path == "/base/messages?sid=1" and posted[0].rpc_method == "notifications/roots/list_changed"
    assert "another origin" in error["message"]


def test_auto_does_not_fall_back_on_a_jsonrpc_error_body(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.method == "POST":
            body = json.dumps(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32022, "message": "Unsupported protocol version"}}
            ).encode()
            return Scripted(400, {"Content-Type": "application/json", "Content-Length": str(len(body))}, [body])
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        relay.send(initialize(1))
        error = relay.read_reply(1)["error"]
        relay.finish()
    assert error["code"] == -32022 and "HTTP 400" in error["message"]
    assert server.requests("GET") == []


def test_auto_fallback_failure_names_both_attempts(raw_relay: Any) -> None:
    with ScriptedServer(lambda seen, server: Scripted(404, {"Content-Length": "9"}, [b"Not Found"])) as server:
        relay = raw_relay(server.url)
        relay.send(initialize(1))
        error = relay.read_reply(1)["error"]
        relay.finish()
    assert "HTTP 404" in error["message"] and "HTTP+SSE fallback failed" in error["message"]


@pytest.mark.parametrize("transport, stop", [("streamable-http", "eof"), ("sse", "sigterm")])
def test_shutdown_leaves_no_greenlet_or_socket(
    raw_relay: Any, upstream_factory: Any, transport: str, stop: str
) -> None:
    upstream: Upstream = upstream_factory(transport)
    relay = raw_relay(upstream.url, "--log-level", "debug", "--shutdown-grace", "0.3")
    relay.send(initialize(1))
    relay.read_reply(1)
    relay.send(INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    relay.read_reply(2)
    relay.send(
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "slow", "arguments": {"tag": "bye"}}}
    )
    wait_for(lambda: upstream.marked("started-bye"), HANG_GUARD, "the slow tool to start")
    if stop == "sigterm":
        relay.proc.send_signal(signal.SIGTERM)
    code, lines, stderr = relay.finish()
    assert code == 0, explain_stderr(stderr)
    assert [json.loads(line)["id"] for line in lines] == [3], explain_stderr(stderr)  # an error, not left hanging
    assert "shutdown complete: 0 greenlets and 0 sockets left" in stderr, explain_stderr(stderr)
    if transport == "streamable-http":
        assert "ended the upstream session (HTTP 200)" in stderr, explain_stderr(stderr)


def test_malformed_token_is_refused_without_echoing_it() -> None:
    env = {**os.environ, "MCPGATE_BEARER_TOKEN": "sekrit value\n"}
    out = subprocess.run(
        [sys.executable, "-m", "mcpgate.relay", "http://127.0.0.1:9/mcp"],
        capture_output=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=HANG_GUARD,
    )
    assert out.returncode == 2 and out.stdout == b""
    assert b"MCPGATE_BEARER_TOKEN" in out.stderr and b"sekrit" not in out.stderr
