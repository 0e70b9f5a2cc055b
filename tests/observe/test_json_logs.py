"""JSON logs (MCPGATE_LOG_FORMAT=json) of `gunicorn mcpgate.wsgi`: from its start to its stop, every line it writes
(gunicorn's error and access lines, mcpgate's, a child's stderr passed on) is one JSON object with time, level,
logger and message; lines about a session name it and its server; no bearer token nor argument value is in any.
Plain, the default, is unchanged: no line is JSON."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2 as httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcpgate.observe import logs
from tests.support import HEADERS, MODERN, ROOT, Gateway, init_body, serving
from tests.support.security import WAIT, answer_and_close

HANG_GUARD = 60
TOKEN = "json-logs-s3cret-token"
SECRET_ARGUMENT = "json-logs-confidential-argument"


def run(body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            await body()

    anyio.run(main)


def traffic(gw: Gateway) -> None:
    """A 2025 session's and a 2026-07-28 call, a refused token, a request the worker refuses, a 404."""

    async def body() -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=HANG_GUARD)) as http:
            for mode in ("legacy", MODERN):
                async with Client(streamable_http_client(gw.url, http_client=http), mode=mode) as c:
                    await c.call_tool("echo", {"message": SECRET_ARGUMENT})

    run(body)
    assert gw.request("POST", body=init_body(), headers={**HEADERS, "Authorization": "Bearer wrong"}).status == 401
    with socket.create_connection(gw.address(), timeout=WAIT) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
        assert answer_and_close(sock)[0].startswith(b"HTTP/1.1 400")
    assert gw.request("GET", "/nowhere").status == 404


def test_every_line_is_one_json_object() -> None:
    env = {"MCPGATE_LOG_FORMAT": "json", "MCPGATE_ACCESS_LOG": "-", "MCPGATE_AUTH_TOKEN": TOKEN}
    with serving(env) as gw:
        traffic(gw)
    text = gw.log()  # the gateway has stopped: its shutdown's lines too
    lines: list[dict[str, Any]] = []
    for raw in text.splitlines():
        line = json.loads(raw)  # every line, gunicorn's included
        assert isinstance(line, dict) and {"time", "level", "logger", "message"} <= set(line), raw
        lines.append(line)
    loggers = {line["logger"] for line in lines}
    assert {"gunicorn.error", "gunicorn.access", "mcpgate.server"} <= loggers, loggers
    access = [line for line in lines if line["logger"] == "gunicorn.access"]
    assert any(line.get("status") == "401" and line.get("method") == "POST" for line in access), access
    assert any("Invalid request" in line["message"] for line in lines if line["logger"] == "gunicorn.error")
    sessions = [line for line in lines if "session" in line]
    assert sessions and all(line["session"] for line in sessions)
    assert any(line.get("server") == "default" for line in lines)
    assert TOKEN not in text and SECRET_ARGUMENT not in text


def test_plain_stays_the_default() -> None:
    with serving({"MCPGATE_ACCESS_LOG": "-", "MCPGATE_AUTH_TOKEN": TOKEN}) as gw:
        traffic(gw)
    lines = gw.log().splitlines()
    assert lines and not any(line.startswith("{") for line in lines)
    assert any(" INFO mcpgate." in line for line in lines) and any("[INFO] Booting worker" in line for line in lines)


CRASH = """
import logging, warnings, gevent
from mcpgate.observe import logs
logs.configure("json")
logging.getLogger("some.library").warning("a library's line")
warnings.warn("a warning")
gevent.spawn(lambda: 1 / 0).join()
"""


def test_other_libraries_warnings_and_a_greenlets_crash_are_json_too() -> None:
    """What reaches stderr besides mcpgate's and gunicorn's own lines: another library's log line, a Python warning,
    gevent's report of a greenlet's uncaught error (a real process of its own)."""
    done = subprocess.run(
        [sys.executable, "-c", CRASH], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [line["logger"] for line in lines] == ["some.library", "py.warnings", "gevent.hub"], done.stderr
    assert "ZeroDivisionError" in lines[-1]["exception"] and lines[-1]["level"] == "ERROR"


def test_a_lines_session_is_its_label_never_a_word() -> None:
    """The `session` member comes from a session's label as lines name it (a named server's "<name>/" first, an
    instance's "<id>." in a fleet), never from a word after "session"."""
    formatter = logs.JsonFormatter()

    def members(message: str) -> dict[str, Any]:
        record = logging.LogRecord("mcpgate.session", logging.INFO, __file__, 1, message, None, None)
        return json.loads(formatter.format(record))

    assert members("session aB3dEf_9 opened")["session"] == "aB3dEf_9"
    named = members("session docs/i1.Q2w-e4R5: resumed stream 1")
    assert (named["session"], named["server"]) == ("i1.Q2w-e4R5", "docs")
    for wordy in ("session finished", "no session found", "session limit reached", "session abcdefgh ended"):
        assert "session" not in members(wordy)
