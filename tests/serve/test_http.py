"""Raw HTTP against a real gunicorn serving the demo server: every status code of the endpoint."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from mcpgate.serve.front.http import Refusal
from tests.support import (
    ACCEPT,
    HEADERS,
    Gateway,
    call,
    call_in_flight,
    children,
    init_body,
    open_session,
    serving,
    sse_messages,
)

MISSING_COMMAND = {"MCPGATE_COMMAND": "no-such-program-mcpgate --flag"}


@pytest.fixture(scope="module")
def refusing() -> Iterator[Gateway]:
    """A gateway whose requests in this module are all refused before a child starts (a 1000-byte body limit)."""
    with serving({"MCPGATE_MAX_BODY_BYTES": "1000"}, behind=True) as gw:
        yield gw


@pytest.fixture(scope="module")
def missing_command() -> Iterator[Gateway]:
    with serving(MISSING_COMMAND, behind=True) as gw:
        yield gw


def test_initialize_mints_a_visible_ascii_session_id_and_answers_json(demo_gateway: Any) -> None:
    status, headers, body = demo_gateway.request("POST", body=init_body(), headers=HEADERS)
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    sid = headers["mcp-session-id"]
    assert len(sid) >= 32 and all(0x21 <= ord(c) <= 0x7E for c in sid)
    result = json.loads(body)
    assert result["id"] == 1 and result["result"]["protocolVersion"] == "2025-11-25"
    assert demo_gateway.request("DELETE", headers={"Mcp-Session-Id": sid})[0] == 204


@pytest.mark.parametrize("accept", [None, "application/json", "text/event-stream", "text/html"])
def test_post_needs_both_media_types_in_accept(demo_gateway: Any, accept: str | None) -> None:
    headers = {"Content-Type": "application/json"}
    if accept:
        headers["Accept"] = accept
    status, _, body = demo_gateway.request("POST", body=init_body(), headers=headers)
    assert status == 406
    assert json.loads(body)["error"]["code"] == -32600


def test_content_type_must_be_json(demo_gateway: Any) -> None:
    status, _, _ = demo_gateway.request("POST", body=b"{}", headers={"Accept": ACCEPT, "Content-Type": "text/plain"})
    assert status == 415


def test_body_over_the_limit_is_413_with_a_jsonrpc_error(refusing: Gateway) -> None:
    gw = refusing
    big = init_body()
    big["params"]["pad"] = "x" * 2000
    status, _, body = gw.request("POST", body=big, headers=HEADERS)
    assert status == 413
    assert "1000" in json.loads(body)["error"]["message"]
    assert children(gw) == 0


def test_invalid_json_is_a_parse_error(demo_gateway: Any) -> None:
    status, _, body = demo_gateway.request("POST", body=b"{not json", headers=HEADERS)
    assert status == 400
    assert json.loads(body)["error"]["code"] == -32700


def test_requests_without_or_with_unknown_session(demo_gateway: Any) -> None:
    status, _, _ = demo_gateway.request("POST", body=call("echo", {"message": "x"}), headers=HEADERS)
    assert status == 400
    status, _, _body = demo_gateway.request(
        "POST", body=call("echo", {"message": "x"}), headers={**HEADERS, "Mcp-Session-Id": "no-such-session"}
    )
    assert status == 404


def test_rejected_requests_never_spawn_a_child(refusing: Gateway) -> None:
    gw = refusing
    gw.request("POST", body=init_body(), headers={"Content-Type": "application/json"})
    gw.request("POST", body=b"[", headers=HEADERS)
    gw.request("POST", body=init_body(), headers={**HEADERS, "Origin": "https://evil.example"})
    assert children(gw) == 0


def test_notifications_and_responses_are_202_with_no_body(demo_gateway: Any) -> None:
    headers = open_session(demo_gateway)
    status, _, body = demo_gateway.request(
        "POST", body={"jsonrpc": "2.0", "id": "srv-x", "result": {}}, headers=headers
    )
    assert (status, body) == (202, b"")
    status, _, body = demo_gateway.request(
        "POST", body={"jsonrpc": "2.0", "method": "notifications/x"}, headers=headers
    )
    assert (status, body) == (202, b"")


def test_fast_call_is_json_and_ids_are_kept_exactly(demo_gateway: Any) -> None:
    headers = open_session(demo_gateway)
    for msg_id in ("7", 7, "ü-id", 2**53 + 1):
        status, resp_headers, body = demo_gateway.request(
            "POST", body=call("echo", {"message": "hi"}, msg_id), headers=headers
        )
        assert status == 200 and resp_headers["content-type"].startswith("application/json")
        assert json.loads(body)["id"] == msg_id
        assert type(json.loads(body)["id"]) is type(msg_id)


def test_each_request_on_a_connection_reads_as_its_own_head(demo_gateway: Any) -> None:
    """The worker merges a connection's environ keys with a head's once per head (connection.Handler.get_environ):
    on one kept-alive connection, heads that differ and heads sent again each read as their own."""
    headers = open_session(demo_gateway)
    lost = {**headers, "Mcp-Session-Id": "0" * len(headers["Mcp-Session-Id"])}  # the same length: only a value
    conn = http.client.HTTPConnection(*demo_gateway.address(), timeout=30)
    try:
        for msg_id, sent, status in ((11, headers, 200), (12, lost, 404), (13, headers, 200), (14, headers, 200)):
            conn.request("POST", "/mcp", body=json.dumps(call("echo", {"message": "hi"}, msg_id)), headers=sent)
            reply = conn.getresponse()
            body = json.loads(reply.read())
            assert reply.status == status and reply.getheader("Connection") is None, body
            assert body["id"] == msg_id if status == 200 else "error" in body, body
        conn.request("GET", "/healthz")
        reply = conn.getresponse()
        assert reply.status == 200 and json.loads(reply.read())["status"]
    finally:
        conn.close()


def test_protocol_version_header_rules(demo_gateway: Any) -> None:
    headers = open_session(demo_gateway)
    bad = {**headers, "MCP-Protocol-Version": "1999-01-01"}
    status, _, body = demo_gateway.request("POST", body=call("echo", {"message": "x"}), headers=bad)
    assert status == 400 and "1999-01-01" in json.loads(body)["error"]["message"]
    absent = {k: v for k, v in headers.items() if k != "MCP-Protocol-Version"}
    assert demo_gateway.request("POST", body=call("echo", {"message": "x"}), headers=absent)[0] == 200


def test_batches_only_in_2025_03_26(demo_gateway: Any) -> None:
    batch = [
        call("echo", {"message": "a"}, 1),
        {"jsonrpc": "2.0", "method": "notifications/x"},
        call("add", {"a": 1, "b": 2}, 2),
    ]
    headers = open_session(demo_gateway, "2025-06-18")
    assert demo_gateway.request("POST", body=batch, headers=headers)[0] == 400
    headers = open_session(demo_gateway, "2025-03-26")
    status, _, body = demo_gateway.request("POST", body=batch, headers=headers)
    assert status == 200
    assert sorted(item["id"] for item in json.loads(body)) == [1, 2]


def test_duplicate_in_flight_id_is_refused(demo_gateway: Any) -> None:
    headers = open_session(demo_gateway)
    slow = call("slow", {"seconds": 1.5, "steps": 15}, 9)
    with call_in_flight(demo_gateway.host, demo_gateway.port, slow, headers) as answer:
        status, _, body = demo_gateway.request("POST", body=call("echo", {"message": "x"}, 9), headers=headers)
        assert status == 400 and "already in flight" in json.loads(body)["error"]["message"]
        assert answer.status == 200 and sse_messages(answer.read())[-1]["id"] == 9


def test_slow_call_switches_to_sse_with_keepalives(demo_gateway: Any) -> None:
    headers = open_session(demo_gateway)
    status, resp_headers, body = demo_gateway.request(
        "POST", body=call("slow", {"seconds": 2.5, "steps": 1}), headers=headers
    )
    assert status == 200 and resp_headers["content-type"].startswith("text/event-stream")
    assert resp_headers["x-accel-buffering"] == "no"
    assert b": keepalive" in body  # 1.5 s of quiet after the switch, a keepalive every 0.5 s (not just ": waiting")
    assert sse_messages(body)[-1]["result"]["content"][0]["text"].startswith("done")


def test_progress_makes_the_reply_sse_and_goes_to_its_request(demo_gateway: Any) -> None:
    headers = open_session(demo_gateway)
    request = call("slow", {"seconds": 0.3, "steps": 3})
    request["params"]["_meta"] = {"progressToken": "tok"}
    _status, resp_headers, body = demo_gateway.request("POST", body=request, headers=headers)
    assert resp_headers["content-type"].startswith("text/event-stream")
    messages = sse_messages(body)
    progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
    assert progress == [1, 2, 3]
    assert messages[-1]["id"] == 2


def test_cancel_answers_the_waiting_post_at_once(demo_gateway: Any) -> None:
    headers = open_session(demo_gateway)
    slow = call("slow", {"seconds": 20, "steps": 200}, "c1")
    with call_in_flight(demo_gateway.host, demo_gateway.port, slow, headers, timeout=10) as answer:
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c1"}}
        assert demo_gateway.request("POST", body=cancel, headers=headers)[0] == 202
        messages = sse_messages(answer.read())  # within the 10 s timeout: the call took 20 s
    assert messages[-1]["id"] == "c1" and messages[-1]["error"]["code"] == -32800
    # the session still works, and the late response never shows up anywhere
    assert demo_gateway.request("POST", body=call("echo", {"message": "x"}, "c2"), headers=headers)[0] == 200


def test_get_stream_carries_server_messages_and_a_second_is_409(demo_gateway: Any) -> None:
    import http.client

    headers = open_session(demo_gateway)
    conn = http.client.HTTPConnection("127.0.0.1", demo_gateway.port, timeout=10)
    try:
        conn.request("GET", "/mcp", headers={**headers, "Accept": "text/event-stream"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("X-Accel-Buffering") == "no"
        status, _, _ = demo_gateway.request("GET", headers={**headers, "Accept": "text/event-stream"})
        assert status == 409
        assert demo_gateway.request("POST", body=call("notify_change", {}), headers=headers)[0] == 200
        seen = b""
        while b"tools/list_changed" not in seen or b"resources/list_changed" not in seen:
            seen += resp.read1(65536)
        assert b'"id"' not in seen.split(b"list_changed")[0].split(b"data: ")[-1]
    finally:
        conn.close()


def test_delete_ends_the_session_then_404(demo_gateway: Any) -> None:
    headers = open_session(demo_gateway)
    assert demo_gateway.request("DELETE", headers=headers)[0] == 204
    assert demo_gateway.request("POST", body=call("echo", {"message": "x"}), headers=headers)[0] == 404
    assert demo_gateway.request("DELETE", headers=headers)[0] == 404


def test_get_needs_event_stream_in_accept(demo_gateway: Any) -> None:
    headers = open_session(demo_gateway)
    assert demo_gateway.request("GET", headers={**headers, "Accept": "application/json"})[0] == 406


def test_origin_and_host_are_validated(gateway_factory: Any) -> None:
    """One gateway per policy (the rules themselves: test_guard.py, in process)."""
    gw = gateway_factory(
        {"MCPGATE_ALLOWED_ORIGINS": "https://allowed.example", "MCPGATE_ALLOWED_HOSTS": "mcp.example.com"}
    )
    refused = gw.request("POST", body=init_body(), headers={**HEADERS, "Origin": "https://evil.example"})
    assert refused.status == 403 and refused.json()["error"]["code"] == -32600, refused
    assert gw.request("POST", body=init_body(), headers={**HEADERS, "Origin": "https://allowed.example"})[0] == 200
    assert gw.request("POST", body=init_body(), headers={**HEADERS, "Origin": "http://localhost:3000"})[0] == 200
    assert gw.request("POST", body=init_body(), headers={**HEADERS, "Host": "evil.example"})[0] == 421
    assert gw.request("POST", body=init_body(), headers={**HEADERS, "Host": "mcp.example.com"})[0] == 200
    assert gw.request("POST", body=init_body(), headers={**HEADERS, "Host": "localhost:9"})[0] == 200


def test_session_cap_is_503_with_retry_after(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_MAX_SESSIONS": "1"})
    assert gw.request("POST", body=init_body(), headers=HEADERS)[0] == 200
    status, headers, _ = gw.request("POST", body=init_body(), headers=HEADERS)
    assert status == 503 and int(headers["retry-after"]) > 0


def test_a_modern_request_without_its_meta_is_refused_with_its_id(demo_gateway: Any) -> None:
    """A 2026-07-28 header and no session: the modern ladder answers (no session needed), and the error
    carries the request's id (it was once null)."""
    headers = {**HEADERS, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
    status, _, raw = demo_gateway.request("POST", body=body, headers=headers)
    answer = json.loads(raw)
    assert status == 400 and answer["error"]["code"] == -32602 and answer["id"] == 1


def test_healthz_reports_a_missing_command(missing_command: Gateway) -> None:
    gw = missing_command
    status, _, body = gw.request("GET", "/healthz")
    assert status == 503 and json.loads(body)["status"] == "unavailable"
    assert "no-such-program-mcpgate" not in body.decode() and "PATH" not in body.decode()  # internals: log only
    assert "MCPGATE_COMMAND cannot be started: command not found: 'no-such-program-mcpgate'" in gw.log()


def test_a_command_that_cannot_start_is_a_generic_502_and_the_details_are_logged(missing_command: Gateway) -> None:
    gw = missing_command
    status, _, body = gw.request("POST", body=init_body(), headers=HEADERS)
    error = json.loads(body)["error"]
    assert status == 502 and error["code"] == -32603 and error["message"].startswith("Cannot start the MCP server")
    assert "no-such-program-mcpgate" not in body.decode() and "PATH" not in body.decode()
    logged = [line for line in gw.log().splitlines() if "cannot start the MCP server" in line]
    assert logged and " ERROR " in logged[0] and "no-such-program-mcpgate" in logged[0] and "PATH=" in logged[0]


def test_bearer_token_is_required_when_configured(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_AUTH_TOKEN": "s3cret-token"})
    status, headers, _body = gw.request("POST", body=init_body(), headers=HEADERS)
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    assert gw.request("POST", body=init_body(), headers={**HEADERS, "Authorization": "Bearer wrong"})[0] == 401
    assert gw.request("POST", body=init_body(), headers={**HEADERS, "Authorization": "Basic czNjcmV0"})[0] == 401
    authorized = {**HEADERS, "Authorization": "Bearer s3cret-token"}
    assert gw.request("POST", body=init_body(), headers=authorized)[0] == 200
    health = gw.request("GET", "/healthz")
    assert health.status == 200 and health.json() == {"status": "ok"}, health  # no token: the status alone
    detailed = gw.request("GET", "/healthz", headers={"Authorization": "Bearer s3cret-token"}).json()
    assert detailed["children"] == 1 and "s3cret-token" not in gw.log()


def test_other_methods_are_405_naming_the_allowed_ones(demo_gateway: Any) -> None:
    status, headers, body = demo_gateway.request("PUT", body=init_body(), headers=HEADERS)
    assert status == 405 and headers["allow"] == "GET, POST, DELETE"
    assert json.loads(body) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Method Not Allowed"},
    }


def test_a_refusal_is_the_jsonrpc_error_response_with_its_status_and_headers() -> None:
    response = Refusal(
        400, -32022, "Unsupported", id="r1", data={"supported": ["x"]}, headers={"Retry-After": "5"}
    ).response()
    assert response.status == 400 and isinstance(response.body, bytes)
    error = {"code": -32022, "message": "Unsupported", "data": {"supported": ["x"]}}
    assert json.loads(response.body) == {"jsonrpc": "2.0", "id": "r1", "error": error}
    assert response.headers == [
        ("Retry-After", "5"),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(response.body))),
    ]
    bare = Refusal(404, -32600, "Session not found").response()
    assert bare.status == 404 and isinstance(bare.body, bytes)
    assert json.loads(bare.body) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Session not found"},
    }
