"""The audit log (MCPGATE_AUDIT_LOG) of `gunicorn mcpgate.wsgi`: the official SDK client's tool calls, resource reads
and prompt gets in both eras (a 2025 Streamable HTTP session, HTTP+SSE, 2026-07-28 per request), each met by one
line: its method, tool or resource, principal's server, outcome and error code, the digest of its arguments; never
the bearer token nor an argument's value. With MCPGATE_AUDIT_ARGUMENTS the arguments are there too. Off, nothing."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Request
from mcpgate.observe import audit
from tests.support import HEADERS, MODERN, Gateway, call, init_body, open_session, reply_message, serving, wait_for
from tests.support.fleet import instances
from tests.support.oauth import embedded_env, sign_in
from tests.support.security import PASSWORD, USER, USERS
from tests.support.signin import LoginPage, authorization_path

HANG_GUARD = 60
TOKEN = "audit-s3cret-token-value"
SECRET_ARGUMENT = "confidential-argument-value-4711"


def run(body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            await body()

    anyio.run(main)


def digest(arguments: Any) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    path = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    env = {"MCPGATE_AUDIT_LOG": str(path), "MCPGATE_AUTH_TOKEN": TOKEN, "MCPGATE_INSTANCE_ID": "audit-i1"}
    with serving(env) as gw:
        yield gw, path


def http() -> httpx.AsyncClient:
    return httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx.Timeout(30, read=HANG_GUARD))


async def calls(c: Client) -> list[tuple[str, str, Any, int | None]]:
    """The audited calls: (method, tool/resource/prompt, arguments, error code); one tool call fails."""
    echoed = await c.call_tool("echo", {"message": SECRET_ARGUMENT})
    assert echoed.content[0].text == SECRET_ARGUMENT  # type: ignore[union-attr]
    with pytest.raises(MCPError) as failed:
        await c.call_tool("no_such_tool", {"x": 1})
    await c.read_resource("demo://readme")
    await c.get_prompt("greet", {"name": "Ada"})
    return [
        ("tools/call", "echo", {"message": SECRET_ARGUMENT}, None),
        ("tools/call", "no_such_tool", {"x": 1}, failed.value.error.code),
        ("resources/read", "demo://readme", None, None),
        ("prompts/get", "greet", {"name": "Ada"}, None),
    ]


def check(path: Path, before: int, sent: list[tuple[str, str, Any, int | None]], era: str) -> list[dict[str, Any]]:
    """The lines written since `before`: one per call sent, in order, each saying what the call was and became."""
    wait_for(lambda: len(lines(path)) >= before + len(sent), timeout=30, what="the calls' audit lines")
    written = lines(path)[before:]
    assert len(written) == len(sent)
    for line, (method, name, arguments, code) in zip(written, sent, strict=True):
        key = {"tools/call": "tool", "resources/read": "resource", "prompts/get": "prompt"}[method]
        assert (line["method"], line[key], line["era"]) == (method, name, era)
        assert line["arguments_sha256"] == (digest(arguments) if arguments is not None else None)
        assert (line["outcome"], line["error_code"]) == (("error", code) if code is not None else ("ok", None))
        assert line["instance"] == "audit-i1" and line["server"] == "default" and line["event"] == "call"
        assert line["latency_ms"] >= 0 and line["bytes_in"] > 0 and line["time"].endswith("Z")
        assert "arguments" not in line
    assert all(line["bytes_out"] > 0 for line in written)
    return written


def test_streamable_http_session_calls_one_line_each(audited: tuple[Gateway, Path]) -> None:
    gw, path = audited
    before = len(lines(path))
    sent: list[Any] = []

    async def body() -> None:
        async with http() as client, Client(streamable_http_client(gw.url, http_client=client), mode="legacy") as c:
            sent.extend(await calls(c))

    run(body)
    written = check(path, before, sent, "2025-session")
    assert len({line["session"] for line in written}) == 1 and written[0]["session"]


def test_http_sse_calls_one_line_each(audited: tuple[Gateway, Path]) -> None:
    gw, path = audited
    before = len(lines(path))
    sent: list[Any] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def body() -> None:
        async with Client(sse_client(f"{gw.base}/sse", headers=headers), mode="legacy") as c:
            sent.extend(await calls(c))

    run(body)
    check(path, before, sent, "http+sse")


def test_modern_calls_one_line_each(audited: tuple[Gateway, Path]) -> None:
    gw, path = audited
    before = len(lines(path))
    sent: list[Any] = []

    async def body() -> None:
        async with http() as client, Client(streamable_http_client(gw.url, http_client=client), mode=MODERN) as c:
            assert c.protocol_version == MODERN
            sent.extend(await calls(c))

    run(body)
    written = check(path, before, sent, "2026-07-28")
    assert all(line["session"] is None for line in written)


def test_no_secret_in_the_audit_log(audited: tuple[Gateway, Path]) -> None:
    """After the calls above (module order) and any other: neither the token nor an argument's value."""
    gw, path = audited
    text = path.read_text()
    assert text and TOKEN not in text and SECRET_ARGUMENT not in text
    assert TOKEN not in gw.log()


def test_arguments_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    env = {"MCPGATE_AUDIT_LOG": str(path), "MCPGATE_AUDIT_ARGUMENTS": "true"}
    with serving(env) as gw:

        async def body() -> None:
            async with Client(gw.url, mode=MODERN) as c:
                await c.call_tool("echo", {"message": "shown"})

        run(body)
        wait_for(lambda: len(lines(path)) == 1, timeout=30, what="the call's audit line")
    (line,) = lines(path)
    assert line["arguments"] == {"message": "shown"} and line["arguments_sha256"] == digest({"message": "shown"})


def test_off_by_default_writes_nothing(tmp_path: Path) -> None:
    with serving({}) as gw:

        async def body() -> None:
            async with Client(gw.url, mode=MODERN) as c:
                await c.call_tool("echo", {"message": "unaudited"})

        run(body)
        assert '"event":"call"' not in gw.log()


def test_sign_ins_and_the_signed_in_callers_call(tmp_path: Path) -> None:
    """The embedded authorization server's sign-ins (a wrong password, then the right one) and the call made with
    the token issued: the call's principal is who signed in; no password, token or argument value anywhere."""
    path = tmp_path / "audit.jsonl"
    with serving(embedded_env(tmp_path / "state", USERS, MCPGATE_AUDIT_LOG=str(path))) as gw:
        page = LoginPage(gw.base, authorization_path(gw.base))
        try:
            assert page.submit(USER, "not-the-password").status_code == 200  # the form again, with its error
        finally:
            page.close()
        issued = sign_in(gw.base, USER, PASSWORD)
        token = issued["access_token"]

        async def body() -> None:
            headers = {"Authorization": f"Bearer {token}"}
            async with (
                httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=HANG_GUARD)) as client,
                Client(streamable_http_client(gw.url, http_client=client), mode=MODERN) as c,
            ):
                await c.call_tool("echo", {"message": SECRET_ARGUMENT})

        run(body)
        wait_for(lambda: len(lines(path)) == 3, timeout=30, what="two sign-ins' and a call's audit lines")
    failed, signed_in, called = lines(path)
    assert (failed["event"], failed["outcome"], failed["principal"]) == ("sign-in", "failed", None)
    assert (signed_in["event"], signed_in["outcome"], signed_in["method"]) == ("sign-in", "ok", "password")
    assert signed_in["principal"] and called["principal"] == f"{gw.base}#{signed_in['principal']}"  # issuer#subject
    assert (called["event"], called["tool"], called["outcome"]) == ("call", "echo", "ok")
    text = path.read_text()
    for secret in (token, issued.get("refresh_token") or token, PASSWORD, "not-the-password", SECRET_ARGUMENT):
        assert secret not in text


def test_a_fleet_each_instance_writes_its_own(tmp_path: Path) -> None:
    """Two instances on one Redis, each its own file naming itself: a session opened on i1 and called through i2
    (forwarded to its owner) is audited once, by i1, where the call met its answer."""
    audit_path = str(tmp_path / "audit-{port}.jsonl")  # "{port}": each instance's own port
    with instances("fleet-audit-secret", MCPGATE_AUDIT_LOG=audit_path) as (_url, start):
        one, two = start("i1"), start("i2")
        session = open_session(one)
        answered = reply_message(two.request("POST", body=call("echo", {"message": "via i2"}), headers=session))
        assert answered["result"]["content"][0]["text"] == "via i2", answered
        files = {name: tmp_path / f"audit-{gw.port}.jsonl" for name, gw in (("i1", one), ("i2", two))}
        wait_for(lambda: len(lines(files["i1"])) == 1, timeout=30, what="i1's audit line")
        (line,) = lines(files["i1"])
        assert (line["instance"], line["tool"], line["outcome"]) == ("i1", "echo", "ok")
        assert line["arguments_sha256"] == digest({"message": "via i2"})
        assert lines(files["i2"]) == []


def test_a_stalled_writer_never_holds_a_call_up() -> None:
    """The audit log's writer on a pipe nobody reads (a stalled stderr, a full disk): lines past the queue are
    dropped and counted, and putting one never waits."""
    read_end, write_end = os.pipe()
    writer = audit.Writer("-", 100)
    writer.fd = write_end
    try:
        log = audit.AuditLog("stalled", writer, False)
        request = jsonrpc.parse(b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}')
        assert isinstance(request, Request)
        for _ in range(20_000):  # far more than the pipe's buffer and the queue hold
            log.finish(log.start(request, None, "default", audit.MODERN, None), None, 1)
        assert writer.dropped > 0 and writer.queue.qsize() <= 100
        os.close(read_end)  # now every write fails (EPIPE, as on a full disk): the lines are counted as failed
        log.finish(log.start(request, None, "default", audit.MODERN, None), None, 1)
        wait_for(lambda: writer.failed > 0, timeout=30, what="the failed writes counted")
    finally:
        writer.close(5.0)
        os.close(write_end)


def test_a_hidden_tools_call_is_audited_in_both_eras(tmp_path: Path) -> None:
    """A call of a tool MCPGATE_TOOLS_DENY hides is answered by the gateway, never forwarded: audited all the same."""
    path = tmp_path / "audit.jsonl"
    with serving({"MCPGATE_AUDIT_LOG": str(path), "MCPGATE_TOOLS_DENY": "add"}) as gw:
        codes: list[int] = []

        async def body() -> None:
            for mode in ("legacy", MODERN):
                async with Client(gw.url, mode=mode) as c:
                    with pytest.raises(MCPError) as refused:
                        await c.call_tool("add", {"a": 1, "b": 2})
                    codes.append(refused.value.error.code)

        run(body)
        wait_for(lambda: len(lines(path)) == 2, timeout=30, what="the hidden calls' audit lines")
    legacy, modern = lines(path)
    assert [line["era"] for line in (legacy, modern)] == ["2025-session", "2026-07-28"]
    for line, code in zip((legacy, modern), codes, strict=True):
        assert (line["tool"], line["outcome"], line["error_code"]) == ("add", "error", code)
        assert line["arguments_sha256"] == digest({"a": 1, "b": 2})


def test_a_tool_error_result_is_audited_as_an_error(audited: tuple[Gateway, Path]) -> None:
    """A tools/call whose result has isError true (the demo child's `add` of a non-number) is an error, a tool
    error (no JSON-RPC code); a result with isError false stays ok. Both eras."""
    gw, path = audited
    before = len(lines(path))

    async def body() -> None:
        for mode in ("legacy", MODERN):
            async with http() as client, Client(streamable_http_client(gw.url, http_client=client), mode=mode) as c:
                failed = await c.call_tool("add", {"a": "not a number", "b": 1})
                assert failed.is_error
                assert not (await c.call_tool("add", {"a": 1, "b": 2})).is_error

    run(body)
    wait_for(lambda: len(lines(path)) >= before + 4, timeout=30, what="the calls' audit lines")
    written = [line for line in lines(path)[before:] if line.get("tool") == "add"]
    outcomes = [(line["era"], line["outcome"], line["error_code"], line.get("error_type")) for line in written]
    assert outcomes == [
        ("2025-session", "error", None, "tool_error"),
        ("2025-session", "ok", None, None),
        ("2026-07-28", "error", None, "tool_error"),
        ("2026-07-28", "ok", None, None),
    ]


def test_a_jsonrpc_error_is_told_apart_from_a_tool_error(audited: tuple[Gateway, Path]) -> None:
    gw, path = audited
    before = len(lines(path))

    async def body() -> None:
        async with http() as client, Client(streamable_http_client(gw.url, http_client=client), mode="legacy") as c:
            with pytest.raises(MCPError):
                await c.call_tool("no_such_tool", {})

    run(body)
    wait_for(lambda: len(lines(path)) > before, timeout=30, what="the call's audit line")
    (line,) = [line for line in lines(path)[before:] if line.get("tool") == "no_such_tool"]
    assert line["outcome"] == "error" and line["error_type"] == "jsonrpc_error" and line["error_code"] is not None


def test_refusals_before_a_session_have_a_line_each_without_secrets(audited: tuple[Gateway, Path]) -> None:
    """A wrong token (401), an unknown session (404), a Host not allowed: one line each, its kind, a principal
    only once the guard named one, neither the token sent nor the session id asked for."""
    gw, path = audited
    wrong = "wrong-token-never-logged-" + "w" * 16
    unknown = "unknown-session-never-logged-" + "u" * 16
    before = len(lines(path))
    reply = gw.request(
        "POST", body=call("echo", {"message": SECRET_ARGUMENT}), headers={**HEADERS, "Authorization": f"Bearer {wrong}"}
    )
    assert reply.status == 401
    headers = {
        **HEADERS,
        "Authorization": f"Bearer {TOKEN}",
        "Mcp-Session-Id": unknown,
        "MCP-Protocol-Version": "2025-11-25",
    }
    assert gw.request("POST", body=call("echo", {"message": SECRET_ARGUMENT}), headers=headers).status == 404
    assert (
        gw.request("POST", body=call("echo", {"message": "x"}), headers={**headers, "Host": "rebound.example"}).status
        == 421
    )
    wait_for(lambda: len(lines(path)) >= before + 3, timeout=30, what="the refusals' audit lines")
    written = [line for line in lines(path)[before:] if line["event"] == "refused"]
    assert [(line["kind"], line["status"], line["outcome"]) for line in written] == [
        ("unauthorized", 401, "refused"),
        ("session_not_found", 404, "refused"),
        ("host", 421, "refused"),
    ]
    assert [line["principal"] for line in written] == [None, "static", None]  # the token's principal once known
    assert all(line["instance"] == "audit-i1" for line in written)
    assert written[1]["method"] == "tools/call" and written[1]["tool"] == "echo" and written[1]["server"] == "default"
    text = path.read_text()
    assert wrong not in text and unknown not in text and TOKEN not in text and SECRET_ARGUMENT not in text


def test_a_task_method_is_audited(audited: tuple[Gateway, Path]) -> None:
    """tasks/get in a 2025 session (the demo child has no tasks: its -32601): a line naming the task by digest."""
    gw, path = audited
    auth = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}
    reply = gw.request("POST", body=init_body(), headers=auth)
    assert reply.status == 200, reply
    session = {**auth, "Mcp-Session-Id": reply.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert gw.request("POST", body=initialized, headers=session).status == 202
    before = len(lines(path))
    task = "task-id-of-the-client-7"
    body = {"jsonrpc": "2.0", "id": 9, "method": "tasks/get", "params": {"taskId": task}}
    answer = reply_message(gw.request("POST", body=body, headers=session))
    wait_for(lambda: len(lines(path)) > before, timeout=30, what="the task method's audit line")
    (line,) = lines(path)[before:]
    assert (line["method"], line["task"], line["era"]) == (
        "tasks/get",
        hashlib.sha256(task.encode()).hexdigest()[:16],
        "2025-session",
    )
    assert line["error_code"] == answer.get("error", {}).get("code") and task not in path.read_text()
