"""Safe by default: what a gateway refuses before it serves anyone, and whom it refuses once it does.

A non-loopback bind without authentication does not start; a loopback Host name is believed only from a
trusted peer (tested with the trusted set narrowed, and from a real remote peer in a network namespace
reached over a veth pair); settings that cannot work stop gunicorn with one line naming the variable.
"""

from __future__ import annotations

import http.client
from typing import Any

import pytest

from tests.support import (
    HEADERS,
    Gateway,
    call,
    free_port,
    gunicorn_refusal,
    init_body,
    open_session,
    preflight_decision,
    send,
    wait_for,
)
from tests.support.recipe import PeerRequest, from_peer, remote_peer


@pytest.mark.parametrize(
    "env,args,shown",
    [
        ({"PORT": "0"}, (), None),  # filled in below: the Procfile path
        ({}, ("-b", "0.0.0.0:{port}"), "0.0.0.0:{port}"),
        ({"MCPGATE_BIND": "[::]:{port}"}, (), "[::]:{port}"),
    ],
)
def test_a_non_loopback_bind_without_authentication_refuses_to_start(
    env: dict[str, str], args: tuple[str, ...], shown: str | None
) -> None:
    port = str(free_port())
    env = {k: v.replace("{port}", port) for k, v in env.items()}
    if "PORT" in env:
        env["PORT"], shown = port, f"0.0.0.0:{port}"
    assert shown is not None
    out = gunicorn_refusal(
        {**env, "MCPGATE_AUTH_TOKEN": "", "MCPGATE_ALLOW_UNAUTHENTICATED": ""},
        *(a.replace("{port}", port) for a in args),
    )
    assert f"refusing to serve {shown.replace('{port}', port)} without authentication" in out
    assert "MCPGATE_AUTH_TOKEN" in out and "MCPGATE_ALLOW_UNAUTHENTICATED=true" in out
    assert "Traceback" not in out and "Booting worker" not in out


@pytest.mark.parametrize(
    "environ,binds,refused,warned",
    [
        ({}, ["127.0.0.1:8000", "[::1]:8000", "localhost:9", "unix:/tmp/g.sock"], False, False),
        ({}, ["127.0.0.1:8000", "0.0.0.0:8000"], True, False),
        ({}, ["10.1.2.3:80"], True, False),
        ({"MCPGATE_AUTH_TOKEN": "t0ken"}, ["0.0.0.0:8000"], False, False),
        ({"MCPGATE_ALLOW_UNAUTHENTICATED": "true"}, ["0.0.0.0:8000"], False, True),
        ({"MCPGATE_ALLOW_UNAUTHENTICATED": "true"}, ["127.0.0.1:8000"], False, False),
    ],
)
def test_the_exposure_decision(environ: dict[str, str], binds: list[str], refused: bool, warned: bool) -> None:
    refusal, lines = preflight_decision(environ, binds)
    assert (refusal is not None) == refused, refusal
    assert any("WITHOUT authentication" in line and line.startswith("WARNING") for line in lines) == warned


def request_from(
    source: str, port: int, host: str, path: str = "/mcp", headers: dict[str, str] | None = None, body: Any = None
) -> tuple[int, bytes]:
    method = "GET" if body is None else "POST"
    reply = send("127.0.0.1", port, method, path, body, {"Host": host, **(headers or {})}, source=source)
    return reply.status, reply.body


def test_a_loopback_host_name_counts_only_from_a_trusted_peer(gateway_factory: Any) -> None:
    # Only 127.0.0.2 is trusted: this test's client on 127.0.0.1 plays a peer on the network.
    gw: Gateway = gateway_factory(
        {"MCPGATE_TRUSTED_PEERS": "127.0.0.2/32", "MCPGATE_ALLOWED_HOSTS": "gw.test"}, ready_host="gw.test"
    )
    for forged in ("localhost", f"localhost:{gw.port}", f"127.0.0.1:{gw.port}", "[::1]", "app.localhost"):
        status, body = request_from("127.0.0.1", gw.port, forged, body=init_body(), headers=HEADERS)
        assert status == 421 and b"loopback Host name from a non-loopback peer" in body, (forged, body)
        assert request_from("127.0.0.1", gw.port, forged, "/healthz")[0] == 421  # every path, one guard
    assert request_from("127.0.0.1", gw.port, "gw.test", body=init_body(), headers=HEADERS)[0] == 200
    assert request_from("127.0.0.2", gw.port, "localhost", body=init_body(), headers=HEADERS)[0] == 200
    assert "refused loopback Host 'localhost' from peer 127.0.0.1" in gw.log()


def test_bad_settings_stop_gunicorn_with_one_line(tmp_path: Any) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    cases = {
        "MCPGATE_CWD": (str(tmp_path / "missing"), "MCPGATE_CWD must name an existing directory"),
        "MCPGATE_WORKER_CONNECTIONS": ("lots", "MCPGATE_WORKER_CONNECTIONS: expected int"),
        "MCPGATE_GRACEFUL_TIMEOUT": ("0", "MCPGATE_GRACEFUL_TIMEOUT must be greater than 0"),
        "MCPGATE_BIND": ("8000", "MCPGATE_BIND must be HOST:PORT"),
        "MCPGATE_ACCESS_LOG": ("access.log", "MCPGATE_ACCESS_LOG must be"),
    }
    for variable, (value, message) in cases.items():
        out = gunicorn_refusal({variable: value})
        assert f"mcpgate: invalid setting: {message}" in out, (variable, out)
        assert "Traceback" not in out, out
    out = gunicorn_refusal({"MCPGATE_CWD": str(not_a_dir)})
    assert "MCPGATE_CWD must name an existing directory" in out
    out = gunicorn_refusal({"PORT": str(free_port()), "MCPGATE_BIND": "127.0.0.1:9"})
    assert "PORT and MCPGATE_BIND are both set" in out


# -- a real remote peer: a network namespace joined to this one by a veth pair (tests/support/recipe.py) ----------


def test_a_remote_peer_cannot_forge_a_loopback_host() -> None:
    with remote_peer() as remote:
        env = {"MCPGATE_AUTH_TOKEN": "veth-t0ken", "MCPGATE_ALLOWED_HOSTS": f"{remote.local}:{{port}}"}
        gw = Gateway(env, host=remote.local)
        try:
            gw.wait_ready()

            def from_the_peer(host: str, token: str) -> int:
                headers = {**HEADERS, "Host": host, **({"Authorization": "Bearer " + token} if token else {})}
                (reply,) = from_peer(remote, remote.local, PeerRequest(gw.port, "POST", "/mcp", headers, init_body()))
                return reply.status

            port = gw.port
            assert from_the_peer(f"{remote.local}:{port}", "") == 401  # reachable, and authentication is required
            assert from_the_peer(f"localhost:{port}", "veth-t0ken") == 421  # the forged Host is refused
            assert from_the_peer("127.0.0.1", "veth-t0ken") == 421
            assert from_the_peer(f"{remote.local}:{port}", "veth-t0ken") == 200
            assert "veth-t0ken" not in gw.log()
        finally:
            gw.stop()


def test_logs_never_hold_a_whole_session_id(gateway_factory: Any) -> None:
    gw: Gateway = gateway_factory({"MCPGATE_LOG_LEVEL": "DEBUG"})
    headers = open_session(gw)
    sid = headers["Mcp-Session-Id"]
    assert gw.request("POST", body=call("echo", {"message": "hi"}), headers=headers).status == 200
    assert gw.request("DELETE", headers=headers).status == 204
    wait_for(lambda: "ended: the client ended the session" in gw.log())
    log = gw.log()
    assert f"session {sid[:8]} ended: the client ended the session" in log
    assert sid not in log  # the id is a capability: logs name a session by its first 8 characters


def test_the_access_log_never_holds_a_session_id(gateway_factory: Any) -> None:
    """The HTTP+SSE transport puts the session id in its POST URL: the access log leaves the query string out."""
    gw: Gateway = gateway_factory({"MCPGATE_ACCESS_LOG": "-"})
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request("GET", "/sse", headers={"Accept": "text/event-stream"})
        stream = conn.getresponse()
        assert stream.status == 200
        endpoint = ""
        while not endpoint:
            line = stream.fp.readline().decode()
            assert line, "the stream ended before its endpoint event"
            if line.startswith("data: "):
                endpoint = line[6:].strip()
        assert "session_id=" in endpoint
        sid = endpoint.split("session_id=", 1)[1]
        reply = gw.request("POST", endpoint, body=init_body(), headers=HEADERS)
        assert reply.status == 202, reply
    finally:
        conn.close()
    wait_for(lambda: f"POST {endpoint.split('?', 1)[0]} HTTP/1.1" in gw.log())
    assert f"POST {endpoint.split('?', 1)[0]} HTTP/1.1" in gw.log()
    assert sid not in gw.log()
