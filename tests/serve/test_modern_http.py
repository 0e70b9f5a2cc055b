"""MCP 2026-07-28 on the Streamable HTTP endpoint by raw HTTP, through `gunicorn mcpgate.wsgi`: every rung of the
validation ladder, the ids on errors, the ignored session headers, server/discover, the cache hints, the
modern-only mode. Two children: the bundled demo server (legacy only: the gateway bridges) and the SDK-written
tests/fixtures/modern_server.py (it speaks 2026-07-28 itself)."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mcpgate.core.wire import META_PROTOCOL_VERSION, META_SERVER_INFO, NAME, PROTOCOL_VERSION, SESSION_ID
from tests.support import (
    HEADERS,
    MODERN,
    MODERN_CHILD,
    Gateway,
    Reply,
    init_body,
    lazy_gateways,
    modern_body,
    modern_headers,
    post_modern,
    reply_message,
    sse_messages,
)

ENVS = {
    "demo": {},
    "modern": {"MCPGATE_COMMAND": MODERN_CHILD},
    "only": {"MCPGATE_MODERN_ONLY": "1", "MCPGATE_CACHE_TTL_MS": "2500"},  # the demo child
}
SERVER_NAMES = {"demo": "mcpgate-demo", "modern": "mcpgate-modern-fixture"}
README = {"demo": "demo://readme", "modern": "modern://readme"}
KINDS = pytest.mark.parametrize("kind", ["demo", "modern"])
DEFAULT_TTL_MS = 60000
FIXTURE_TOOLS_TTL_MS = 4321  # tests/fixtures/modern_server.py's own hint on tools/list


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    """One gateway per kind of child for the whole module, started on first use."""
    with lazy_gateways(ENVS) as get:
        yield get


def error_of(reply: Reply, status: int, code: int, msg_id: Any) -> dict[str, Any]:
    """The JSON-RPC error of a refused request, checked: HTTP status, code, and the request's own id."""
    assert reply.status == status, reply
    message = reply_message(reply)
    assert message.get("error", {}).get("code") == code, reply
    assert "id" in message and message["id"] == msg_id, reply
    return dict(message["error"])


def result_of(reply: Reply, msg_id: Any) -> dict[str, Any]:
    assert reply.status == 200, reply
    message = reply_message(reply)
    assert message.get("id") == msg_id and "result" in message, reply
    return dict(message["result"])


def echo(msg_id: Any, text: str = "hi", caps: dict[str, Any] | None = None) -> dict[str, Any]:
    return modern_body(msg_id, "tools/call", {"name": "echo", "arguments": {"message": text}}, caps=caps)


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


# -- rung 1: a required _meta field missing or malformed -> 400 / -32602 --


@KINDS
@pytest.mark.parametrize("bad", ["missing", "not an object"])
def test_a_missing_or_malformed_client_capabilities_is_invalid_params(
    gateways: Callable[[str], Gateway], kind: str, bad: str
) -> None:
    body = modern_body(11, "tools/list")
    meta = body["params"]["_meta"]
    if bad == "missing":
        del meta["io.modelcontextprotocol/clientCapabilities"]
    else:
        meta["io.modelcontextprotocol/clientCapabilities"] = ["elicitation"]
    error_of(post_modern(gateways(kind), body), 400, -32602, 11)


# -- rung 2: the request-metadata headers -> 400 / -32020 --

HEADER_CASES: dict[str, tuple[dict[str, Any], Callable[[dict[str, str]], dict[str, str]]]] = {
    "no MCP-Protocol-Version": (echo(21), lambda h: {k: v for k, v in h.items() if k != PROTOCOL_VERSION}),
    "MCP-Protocol-Version disagrees": (echo(22), lambda h: {**h, PROTOCOL_VERSION: "2025-11-25"}),
    "no Mcp-Method": (echo("m-23"), lambda h: {k: v for k, v in h.items() if k != "Mcp-Method"}),
    "Mcp-Method disagrees": (echo(24), lambda h: {**h, "Mcp-Method": "tools/list"}),
    "Mcp-Method differs in case": (echo(25), lambda h: {**h, "Mcp-Method": "Tools/Call"}),
    "no Mcp-Name on tools/call": (echo(26), lambda h: {k: v for k, v in h.items() if k != NAME}),
    "Mcp-Name disagrees": (echo(27), lambda h: {**h, NAME: "add"}),
    "encoded Mcp-Name disagrees": (echo(28), lambda h: {**h, NAME: b64("add")}),
    "Mcp-Name undecodable": (echo(29), lambda h: {**h, NAME: "=?base64?%%%?="}),
    "no Mcp-Name on prompts/get": (
        modern_body(30, "prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}),
        lambda h: {k: v for k, v in h.items() if k != NAME},
    ),
    "Mcp-Name disagrees with the uri": (
        modern_body("r-31", "resources/read", {"uri": "demo://readme"}),
        lambda h: {**h, NAME: "demo://time"},
    ),
}


@KINDS
@pytest.mark.parametrize("case", list(HEADER_CASES))
def test_a_missing_or_disagreeing_header_is_a_header_mismatch(
    gateways: Callable[[str], Gateway], kind: str, case: str
) -> None:
    body, change = HEADER_CASES[case]
    name = body["params"].get("uri", body["params"].get("name"))
    headers = change(modern_headers(body["method"], name))
    error_of(post_modern(gateways(kind), body, headers), 400, -32020, body["id"])


@KINDS
def test_an_encoded_mcp_name_that_matches_is_accepted(gateways: Callable[[str], Gateway], kind: str) -> None:
    body = echo(41, "encoded")
    result = result_of(post_modern(gateways(kind), body, modern_headers("tools/call", b64("echo"))), 41)
    assert result["content"][0]["text"] == "encoded" and result["resultType"] == "complete"


@KINDS
def test_header_names_are_case_insensitive(gateways: Callable[[str], Gateway], kind: str) -> None:
    headers = {k.lower(): v for k, v in modern_headers("tools/call", "echo").items()}
    assert result_of(post_modern(gateways(kind), echo(42, "lower"), headers), 42)["content"][0]["text"] == "lower"


# -- rung 3: an unsupported version -> 400 / -32022 naming the supported and the requested --


@KINDS
@pytest.mark.parametrize("version", ["2099-01-01", "2025-11-25"])
def test_an_unsupported_version_is_refused_naming_both(
    gateways: Callable[[str], Gateway], kind: str, version: str
) -> None:
    """The issue's old bug: this error carried "id": null although the request had an id."""
    body = modern_body(51, "tools/list", version=version)
    error = error_of(post_modern(gateways(kind), body), 400, -32022, 51)
    assert MODERN in error["data"]["supported"] and error["data"]["requested"] == version, error


# -- rung 4: a capability the request needs but the client did not declare --


def test_a_modern_child_asking_for_an_undeclared_capability_is_refused(gateways: Callable[[str], Gateway]) -> None:
    body = modern_body(61, "tools/call", {"name": "ask_name", "arguments": {}})
    error = error_of(post_modern(gateways("modern"), body), 400, -32021, 61)
    assert "elicitation" in error["data"]["requiredCapabilities"], error


def test_a_legacy_child_asking_for_an_undeclared_capability_never_reaches_the_client(
    gateways: Callable[[str], Gateway],
) -> None:
    body = modern_body(62, "tools/call", {"name": "ask_name", "arguments": {}})
    message = reply_message(post_modern(gateways("demo"), body))
    assert message["id"] == 62 and message.get("result", {}).get("resultType") != "input_required", message
    assert "error" in message or message["result"].get("isError") is True, message


# -- rung 5: a method 2026-07-28 does not have -> 404 / -32601 --


NOT_MODERN_METHODS: dict[str, dict[str, Any] | None] = {
    "frobnicate/now": None,
    "ping": None,  # the methods below are of the handshake era only
    "resources/subscribe": {"uri": "demo://readme"},
    "logging/setLevel": {"level": "info"},
}


@KINDS
@pytest.mark.parametrize("method", list(NOT_MODERN_METHODS))
def test_an_unknown_method_is_not_found(gateways: Callable[[str], Gateway], kind: str, method: str) -> None:
    body = modern_body(f"u-{method}", method, NOT_MODERN_METHODS[method])
    error_of(post_modern(gateways(kind), body), 404, -32601, f"u-{method}")


# -- no sessions on the modern path --


@KINDS
def test_session_and_last_event_headers_are_ignored(gateways: Callable[[str], Gateway], kind: str) -> None:
    gw = gateways(kind)
    sessions = gw.request("GET", "/healthz").json()["sessions"]
    headers = {**modern_headers("tools/call", "echo"), SESSION_ID: "no-such-session", "Last-Event-ID": "0-0-7"}
    reply = post_modern(gw, echo(71, "sessionless"), headers)
    assert result_of(reply, 71)["content"][0]["text"] == "sessionless"
    assert SESSION_ID.lower() not in reply.headers, reply.headers
    reply = post_modern(gw, modern_body(72, "tools/list"))
    assert result_of(reply, 72)["tools"] and SESSION_ID.lower() not in reply.headers, reply.headers
    assert gw.request("GET", "/healthz").json()["sessions"] == sessions


# -- server/discover, results and their cache hints --


@KINDS
def test_discover_is_answered(gateways: Callable[[str], Gateway], kind: str) -> None:
    result = result_of(post_modern(gateways(kind), modern_body("d-1", "server/discover")), "d-1")
    assert MODERN in result["supportedVersions"], result
    assert isinstance(result["capabilities"], dict) and "tools" in result["capabilities"], result
    assert result["_meta"][META_SERVER_INFO]["name"] == SERVER_NAMES[kind], result
    assert result["resultType"] == "complete" and result["cacheScope"] == "private", result
    assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0, result
    assert result.get("instructions"), result
    if kind == "demo":  # the gateway builds it from the legacy child's initialize result
        assert result["ttlMs"] == DEFAULT_TTL_MS, result


@KINDS
def test_results_are_stamped(gateways: Callable[[str], Gateway], kind: str) -> None:
    gw = gateways(kind)
    tools = result_of(post_modern(gw, modern_body(81, "tools/list")), 81)
    assert {"echo", "add", "slow", "ask_name", "sample"} <= {t["name"] for t in tools["tools"]}, tools
    assert tools["resultType"] == "complete" and tools["cacheScope"] == "private", tools
    assert tools["ttlMs"] == (DEFAULT_TTL_MS if kind == "demo" else FIXTURE_TOOLS_TTL_MS), tools
    assert tools["_meta"][META_SERVER_INFO]["name"] == SERVER_NAMES[kind], tools
    read = result_of(post_modern(gw, modern_body(82, "resources/read", {"uri": README[kind]})), 82)
    assert read["contents"][0]["uri"] == README[kind] and read["resultType"] == "complete", read
    assert read["cacheScope"] == "private" and isinstance(read["ttlMs"], int), read
    called = result_of(post_modern(gw, echo(83)), 83)
    assert called["resultType"] == "complete" and "ttlMs" not in called, called  # tools/call is not cacheable
    prompt = modern_body(84, "prompts/get", {"name": "greet", "arguments": {"name": "Ada"}})
    got = result_of(post_modern(gw, prompt), 84)
    assert got["messages"][0]["content"]["text"] == "Please greet Ada warmly." and got["resultType"] == "complete"


@pytest.mark.parametrize("size", [0, 300_000, 2_000_000])
def test_a_large_result_is_stamped_without_being_decoded(gateways: Callable[[str], Gateway], size: int) -> None:
    """Past 256 KiB the child's result is spliced, not decoded and encoded again: the same bytes, the client's
    id, and the members a 2026-07-28 result carries."""
    gw = gateways("demo")
    body = modern_body("big-1", "tools/call", {"name": "bytes", "arguments": {"size": size}})
    result = result_of(post_modern(gw, body), "big-1")
    assert result["content"] == [{"type": "text", "text": "x" * size}], str(result)[:300]
    assert result["resultType"] == "complete" and result["_meta"][META_SERVER_INFO]["name"] == "mcpgate-demo"
    assert "ttlMs" not in result and result["isError"] is False


def test_the_cache_ttl_setting_is_honoured(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("only")
    assert result_of(post_modern(gw, modern_body(91, "tools/list")), 91)["ttlMs"] == 2500
    read = result_of(post_modern(gw, modern_body(92, "resources/read", {"uri": "demo://readme"})), 92)
    assert read["ttlMs"] == 2500
    assert result_of(post_modern(gw, modern_body(93, "server/discover")), 93)["ttlMs"] == 2500


# -- notifications, and the modern-only mode --


@pytest.mark.parametrize("kind", ["demo", "modern", "only"])
def test_a_modern_notification_is_accepted(gateways: Callable[[str], Gateway], kind: str) -> None:
    body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}
    body["params"]["_meta"] = {META_PROTOCOL_VERSION: MODERN}
    reply = post_modern(gateways(kind), body, modern_headers("notifications/cancelled"))
    assert reply.status == 202 and reply.body == b"", reply


def test_modern_only_refuses_initialize_naming_the_supported_versions(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("only")
    reply = gw.request("POST", body=init_body(msg_id="init-1"), headers=modern_headers("initialize"))
    error = error_of(reply, 400, -32022, "init-1")
    assert error["data"]["supported"] == [MODERN], error
    assert SESSION_ID.lower() not in reply.headers, reply.headers
    assert result_of(post_modern(gw, echo(94, "still served")), 94)["content"][0]["text"] == "still served"


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_modern_only_answers_get_and_delete_with_405(gateways: Callable[[str], Gateway], method: str) -> None:
    reply = gateways("only").request(method, headers={"Accept": "text/event-stream", SESSION_ID: "x"})
    assert reply.status == 405, reply


def test_both_eras_on_one_endpoint_by_default(gateways: Callable[[str], Gateway]) -> None:
    """Off modern-only, a legacy initialize still opens a session beside the modern requests."""
    gw = gateways("demo")
    reply = gw.request("POST", body=init_body(), headers=HEADERS)
    assert reply.status == 200 and SESSION_ID.lower() in reply.headers, reply
    assert reply_message(reply)["result"]["protocolVersion"] == "2025-11-25"


# -- MRTR by raw HTTP: the bridge's (demo) or the child's own (modern) input_required and requestState --


def ask_name(msg_id: Any, responses: dict[str, Any] | None = None, state: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "ask_name", "arguments": {}}
    if responses is not None:
        params |= {"inputResponses": responses, "requestState": state}
    return modern_body(msg_id, "tools/call", params, caps={"elicitation": {}})


def flipped(state: str) -> str:
    middle = len(state) // 2
    return state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1 :]


@KINDS
def test_an_input_round_trip_and_a_tampered_or_replayed_state(gateways: Callable[[str], Gateway], kind: str) -> None:
    gw = gateways(kind)
    first = result_of(post_modern(gw, ask_name("e-1")), "e-1")
    assert first["resultType"] == "input_required" and "ttlMs" not in first, first
    ((key, request),) = first["inputRequests"].items()
    assert request["method"] == "elicitation/create" and request["params"]["message"] == "What is your name?"
    state = first["requestState"]
    assert isinstance(state, str) and state, first
    answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
    tampered = reply_message(post_modern(gw, ask_name("e-2", answer, flipped(state))))
    assert tampered["id"] == "e-2" and tampered.get("result", {}).get("resultType") != "complete", tampered
    done = result_of(post_modern(gw, ask_name("e-3", answer, state)), "e-3")
    assert done["content"][0]["text"] == "Hello, Ada" and done["resultType"] == "complete", done
    if kind == "demo":  # the bridge's continuation is spent: replaying its state must not complete again
        replayed = reply_message(post_modern(gw, ask_name("e-4", answer, state)))
        assert replayed["id"] == "e-4" and replayed.get("result", {}).get("resultType") != "complete", replayed


# -- Mcp-Param-* headers mirrored from x-mcp-header arguments (the modern child's tool `where`) --


def where(msg_id: Any, region: str | None) -> dict[str, Any]:
    arguments = {"query": "weather"} | ({} if region is None else {"region": region})
    return modern_body(msg_id, "tools/call", {"name": "where", "arguments": arguments})


def test_param_headers_are_checked_against_the_arguments(gateway_factory: Callable[..., Gateway]) -> None:
    """A fresh gateway, so no tools/list has passed through it before the first call."""
    gw = gateway_factory(ENVS["modern"])
    headers = modern_headers("tools/call", "where")
    error_of(post_modern(gw, where("p-1", "us-west1"), headers), 400, -32020, "p-1")  # the header is missing
    error_of(post_modern(gw, where("p-2", "us-west1"), {**headers, "Mcp-Param-Region": "eu"}), 400, -32020, "p-2")
    ok = post_modern(gw, where("p-3", "us-west1"), {**headers, "mcp-param-region": "us-west1"})
    assert result_of(ok, "p-3")["content"][0]["text"] == "weather in us-west1"
    encoded = post_modern(gw, where("p-4", "Zürich"), {**headers, "Mcp-Param-Region": b64("Zürich")})
    assert result_of(encoded, "p-4")["content"][0]["text"] == "weather in Zürich"
    absent = post_modern(gw, where("p-5", None), headers)  # no value, no header needed
    assert result_of(absent, "p-5")["content"][0]["text"] == "weather in nowhere"


# -- subscriptions/listen by raw HTTP: two listeners with the same id, each gets only what it asked for --


class Listener:
    """A subscriptions/listen POST whose SSE response is read event by event."""

    def __init__(self, gw: Gateway, msg_id: Any, notifications: dict[str, Any]) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=15)
        body = modern_body(msg_id, "subscriptions/listen", {"notifications": notifications})
        self.conn.request("POST", "/mcp", body=json.dumps(body).encode(), headers=modern_headers(body["method"]))
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200 and self.resp.getheader("content-type", "").startswith("text/event-stream")
        self.buffer = b""

    def next(self) -> dict[str, Any]:
        while True:
            messages, _, rest = self.buffer.partition(b"\n\n")
            if _:
                self.buffer = rest
                if found := sse_messages(messages + b"\n\n"):
                    return found[0]
                continue
            chunk = self.resp.read1(65536)
            assert chunk, "the listen stream ended"
            self.buffer += chunk.replace(b"\r\n", b"\n")

    def until(self, method: str) -> list[dict[str, Any]]:
        """The messages up to and including the first `method` notification."""
        seen = [self.next()]
        while seen[-1].get("method") != method:
            seen.append(self.next())
        return seen


def test_two_listeners_with_one_id_get_only_what_they_asked_for(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("modern")
    counter = "modern://counter"
    one = Listener(gw, 1, {"resourceSubscriptions": [counter]})
    two = Listener(gw, 1, {"toolsListChanged": True, "resourceSubscriptions": ["modern://readme"]})
    try:
        for listener, honoured in ((one, {"resourceSubscriptions": [counter]}), (two, {"toolsListChanged": True})):
            ack = listener.next()
            assert ack["method"] == "notifications/subscriptions/acknowledged", ack
            assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 1, ack
            assert all(ack["params"]["notifications"].get(k) == v for k, v in honoured.items()), ack
        result_of(post_modern(gw, modern_body(101, "tools/call", {"name": "bump", "arguments": {}})), 101)
        result_of(post_modern(gw, modern_body(102, "tools/call", {"name": "notify_change", "arguments": {}})), 102)
        result_of(post_modern(gw, modern_body(103, "tools/call", {"name": "bump", "arguments": {}})), 103)
        first = one.until("notifications/resources/updated")
        assert first[-1]["params"]["uri"] == counter, first
        assert first[-1]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 1, first
        assert [m.get("method") for m in one.until("notifications/resources/updated")] == [
            "notifications/resources/updated"
        ]  # no tools/list_changed between the two updates: it did not ask for it
        seen = two.until("notifications/tools/list_changed")
        assert [m.get("method") for m in seen] == ["notifications/tools/list_changed"], seen  # no counter update
        assert seen[-1]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 1, seen
    finally:
        one.conn.close()
        two.conn.close()
