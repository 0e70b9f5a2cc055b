"""LegacyHostBridge: a legacy host (initialize, sessions) in front of a 2026-07-28-only upstream.

Units: the bridge over a scripted stand-in for ModernTransport (greenlets only, no sockets): what the host is
answered, what goes upstream, the MRTR rounds, the listen upstream. Integration: the SDK's stdio client in
legacy mode through `mcpgate-relay URL --protocol-era modern` (the real ModernTransport) to `gunicorn
mcpgate.wsgi` run modern-only (it refuses initialize) over the demo child (whose elicitation and sampling
serve's own bridge turns into InputRequiredResults) and the SDK-written child (its own input_required).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import gevent
import pytest
from gevent.event import Event
from mcp import Client, types

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Notification, Request, Response
from mcpgate.relay.host_bridge import LegacyHostBridge
from mcpgate.relay.transport import OneWay, Sink, Upstream
from tests.support import MODERN_CHILD, Gateway, demo_round_trips, lazy_gateways, on_elicit, on_sample
from tests.support.relay import run_host

V = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"
LEVEL = "io.modelcontextprotocol/logLevel"
SUB = "io.modelcontextprotocol/subscriptionId"
ACKED = "notifications/subscriptions/acknowledged"
DISCOVER = {
    "resultType": "complete",
    "supportedVersions": ["2026-07-28"],
    "capabilities": {"tools": {"listChanged": True}, "resources": {"subscribe": True}},
    "instructions": "be nice",
    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "up", "version": "9"}},
}
HOST_CAPS = {"elicitation": {}, "sampling": {}}
ELICIT = {"method": "elicitation/create", "params": {"message": "Name?", "requestedSchema": {"type": "object"}}}
SAMPLE = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}


def req(msg_id: Any, method: str, params: Any = None) -> Request:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        obj["params"] = params
    message = jsonrpc.classify(obj)
    assert isinstance(message, Request)
    return message


def note(method: str, params: Any = None) -> Notification:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        obj["params"] = params
    return Notification(method, params, obj)


def result(msg_id: Any, value: dict[str, Any]) -> Response:
    return Response(msg_id, {"jsonrpc": "2.0", "id": msg_id, "result": value})


class FakeModern:
    """ModernTransport's interface, scripted: `answer(request)` gives each reply; a listen stays open (its
    request blocks) until the bridge kills it."""

    version = "2026-07-28"

    def __init__(self, answer: Callable[[Request], dict[str, Any]] | None = None) -> None:
        self.sink: Sink = lambda message: None
        self.answer = answer or (lambda request: {"content": [], "echo": request.params})
        self.sent: list[Request] = []
        self.listens: list[Request] = []
        self.closed_listens: list[Any] = []
        self.oneway: list[OneWay] = []

    def discover(self) -> dict[str, Any]:
        return DISCOVER

    def request(self, request: Request) -> Response:
        if request.method == "subscriptions/listen":
            self.listens.append(request)
            try:
                Event().wait(timeout=60)
            finally:
                self.closed_listens.append(request.id)
            return result(request.id, {})
        self.sent.append(request)
        return result(request.id, self.answer(request))

    def send_oneway(self, message: OneWay) -> None:
        self.oneway.append(message)

    def cancel_grace(self, request: Request) -> float:
        return 0.0

    def close(self) -> None:
        pass


class Host:
    """The bridge with a fake upstream, and everything the host was sent."""

    def __init__(self, upstream: FakeModern, caps: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.upstream = upstream
        self.seen: list[Upstream] = []
        self.bridge = LegacyHostBridge(upstream, self.seen.append, **kwargs)  # type: ignore[arg-type]
        params = {"protocolVersion": "2025-06-18", "capabilities": HOST_CAPS if caps is None else caps}
        self.init = self.bridge.request(req(0, "initialize", {**params, "clientInfo": {"name": "h", "version": "1"}}))

    def asked(self, count: int) -> list[Request]:
        wait(lambda: len([m for m in self.seen if isinstance(m, Request)]) >= count, "the host to be asked")
        return [m for m in self.seen if isinstance(m, Request)]

    def answer(self, request: Request, value: dict[str, Any]) -> None:
        self.bridge.send_oneway(result(request.id, value))


def wait(predicate: Callable[[], object], what: str) -> None:
    with gevent.Timeout(10, AssertionError(f"gave up waiting for {what}")):
        while not predicate():
            gevent.sleep(0.005)


def test_initialize_is_answered_from_discover() -> None:
    host = Host(FakeModern())
    assert host.init.obj["result"] == {
        "protocolVersion": "2025-06-18",
        "capabilities": DISCOVER["capabilities"],
        "serverInfo": {"name": "up", "version": "9"},
        "instructions": "be nice",
    }
    later = host.bridge.request(req(1, "initialize", {"protocolVersion": "2026-07-28", "capabilities": {}}))
    assert later.obj["result"]["protocolVersion"] == "2025-11-25"  # not a handshake revision: the latest
    assert host.upstream.sent == []


def test_requests_go_in_modern_form_and_ping_and_set_level_are_answered_here() -> None:
    host = Host(FakeModern())
    assert host.bridge.request(req(1, "ping")).obj["result"] == {}
    assert host.bridge.request(req(2, "logging/setLevel", {"level": "warning"})).obj["result"] == {}
    reply = host.bridge.request(req(3, "tools/call", {"name": "t", "_meta": {"progressToken": "p"}}))
    assert reply.id == 3
    (sent,) = host.upstream.sent
    meta = sent.params["_meta"]
    assert meta[V] == "2026-07-28" and meta[CAPS] == HOST_CAPS and meta[INFO] == {"name": "h", "version": "1"}
    assert meta[LEVEL] == "warning" and meta["progressToken"] == "p"


def test_input_required_asks_the_host_and_retries_with_the_answers_and_the_state() -> None:
    def answer(request: Request) -> dict[str, Any]:
        if "inputResponses" not in request.params:
            return {"resultType": "input_required", "inputRequests": {"n": ELICIT, "s": SAMPLE}, "requestState": "S1"}
        return {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}

    host = Host(FakeModern(answer))
    call = gevent.spawn(host.bridge.request, req(7, "tools/call", {"name": "t", "arguments": {"a": 1}}))
    asked = host.asked(2)
    assert {m.method for m in asked} == {"elicitation/create", "sampling/createMessage"}
    assert all(isinstance(m.id, str) and m.id.startswith("mcpgate-relay-") for m in asked)
    for message in asked:
        host.answer(message, {"action": "accept"} if message.method == "elicitation/create" else {"role": "assistant"})
    reply = call.get(timeout=10)
    assert reply.id == 7 and reply.obj["result"]["content"][0]["text"] == "done"
    first, retry = host.upstream.sent
    assert retry.id != first.id
    assert retry.params["inputResponses"] == {"n": {"action": "accept"}, "s": {"role": "assistant"}}
    assert retry.params["requestState"] == "S1" and retry.params["arguments"] == {"a": 1}


def test_no_request_state_given_none_echoed() -> None:
    rounds = iter([{"resultType": "input_required", "inputRequests": {"r": {"method": "roots/list"}}}, {"ok": 1}])
    host = Host(FakeModern(lambda request: next(rounds)), caps={"roots": {}})
    call = gevent.spawn(host.bridge.request, req(1, "tools/call", {"name": "t"}))
    host.answer(host.asked(1)[0], {"roots": []})
    assert call.get(timeout=10).obj["result"] == {"ok": 1}
    assert "requestState" not in host.upstream.sent[1].params


def test_the_round_cap_ends_a_call_that_keeps_asking() -> None:
    asking = {"resultType": "input_required", "requestState": "again"}  # no inputRequests: retried at once
    host = Host(FakeModern(lambda request: asking), max_rounds=3)
    reply = host.bridge.request(req(1, "tools/call", {"name": "t"}))
    assert "more than 3 times" in reply.obj["error"]["message"]
    assert len(host.upstream.sent) == 4


def test_an_input_request_the_host_cannot_answer_is_an_error_and_never_asked() -> None:
    needs = {"resultType": "input_required", "inputRequests": {"s": SAMPLE}}
    host = Host(FakeModern(lambda request: needs), caps={"elicitation": {}})
    reply = host.bridge.request(req(1, "tools/call", {"name": "t"}))
    assert reply.obj["error"]["code"] == -32021 and reply.obj["error"]["data"] == {
        "requiredCapabilities": {"sampling": {}}
    }
    assert not [m for m in host.seen if isinstance(m, Request)]


def test_a_host_error_answer_fails_the_call() -> None:
    host = Host(FakeModern(lambda request: {"resultType": "input_required", "inputRequests": {"n": ELICIT}}))
    call = gevent.spawn(host.bridge.request, req(1, "tools/call", {"name": "t"}))
    (asked,) = host.asked(1)
    host.bridge.send_oneway(Response(asked.id, jsonrpc.error_response(asked.id, -1, "user said no")))
    assert "user said no" in call.get(timeout=10).obj["error"]["message"]


def test_a_cancelled_call_withdraws_its_input_requests() -> None:
    host = Host(FakeModern(lambda request: {"resultType": "input_required", "inputRequests": {"n": ELICIT}}))
    call = gevent.spawn(host.bridge.request, req(1, "tools/call", {"name": "t"}))
    (asked,) = host.asked(1)
    call.kill(block=True, timeout=5)  # what the pump does to a cancelled request
    cancels = [m for m in host.seen if isinstance(m, Notification) and m.method == "notifications/cancelled"]
    assert [c.params["requestId"] for c in cancels] == [asked.id]


def test_one_listen_for_list_changes_and_subscriptions_reopened_when_they_change() -> None:
    upstream = FakeModern()
    host = Host(upstream)
    host.bridge.send_oneway(note("notifications/initialized"))
    wait(lambda: upstream.listens, "a listen upstream")
    first = upstream.listens[0]
    assert first.params["notifications"] == {"toolsListChanged": True, "resourcesListChanged": True}  # its features
    assert first.params["_meta"][CAPS] == HOST_CAPS
    upstream.sink(note("notifications/subscriptions/acknowledged", {"_meta": {SUB: first.id}, "notifications": {}}))
    upstream.sink(note("notifications/tools/list_changed", {"_meta": {SUB: first.id}}))
    assert host.seen[-1].obj == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}  # no subscription id

    subscribe = gevent.spawn(host.bridge.request, req(1, "resources/subscribe", {"uri": "a://x"}))
    wait(lambda: len(upstream.listens) == 2, "a second listen")
    second = upstream.listens[1]
    assert second.params["notifications"] == {
        "toolsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": ["a://x"],
    }
    gevent.sleep(0.05)
    assert upstream.closed_listens == []  # the old one stays until the new one is acknowledged
    assert not subscribe.ready()  # answered once the listen carries the URI: no update is missed
    upstream.sink(note("notifications/subscriptions/acknowledged", {"_meta": {SUB: second.id}}))
    assert subscribe.get(timeout=10).obj["result"] == {}
    wait(lambda: upstream.closed_listens == [first.id], "the old listen to close")
    upstream.sink(note("notifications/resources/updated", {"_meta": {SUB: second.id}, "uri": "a://x"}))
    assert host.seen[-1].obj["params"] == {"uri": "a://x"}
    host.bridge.close()
    assert second.id in upstream.closed_listens


def test_a_listen_opened_again_tells_the_host_what_may_have_changed() -> None:
    """Changes while no listen is open go nowhere: once the listen the upstream ended is open again and
    acknowledged, the host hears of every kind and URI it listens for as possibly changed (not after the first)."""
    upstream = FakeModern()
    ended = Event()
    plain = upstream.request

    def request(request: Request) -> Response:
        if request.method == "subscriptions/listen" and not upstream.listens:
            upstream.listens.append(request)
            ended.wait(timeout=10)
            return result(request.id, {})  # the upstream ends the first listen
        return plain(request)

    upstream.request = request  # type: ignore[method-assign]
    host = Host(upstream)
    assert host.bridge.request(req(1, "resources/subscribe", {"uri": "a://x"})).obj["result"] == {}
    host.bridge.send_oneway(note("notifications/initialized"))
    wait(lambda: upstream.listens, "a listen upstream")
    honoured = {"toolsListChanged": True, "resourcesListChanged": True, "resourceSubscriptions": ["a://x"]}
    upstream.sink(note(ACKED, {"_meta": {SUB: upstream.listens[0].id}, "notifications": honoured}))
    assert host.seen == []
    ended.set()
    wait(lambda: len(upstream.listens) == 2, "the listen opened again")
    upstream.sink(note(ACKED, {"_meta": {SUB: upstream.listens[1].id}, "notifications": honoured}))
    assert [message.obj for message in host.seen] == [
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
        {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"},
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "a://x"}},
    ]
    host.bridge.close()


def test_progress_and_log_messages_pass_as_they_came() -> None:
    upstream = FakeModern()
    host = Host(upstream)
    progress = note("notifications/progress", {"progressToken": "p", "progress": 1})
    upstream.sink(progress)
    assert host.seen[-1] is progress


# -- integration: the real ModernTransport, the SDK's legacy client, serve modern-only ------------------------------

ENVS = {
    "demo": {"MCPGATE_MODERN_ONLY": "true"},
    "modern": {"MCPGATE_MODERN_ONLY": "true", "MCPGATE_COMMAND": MODERN_CHILD},
}


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    with lazy_gateways(ENVS) as get:
        yield get


@pytest.mark.parametrize("kind", ["demo", "modern"])
def test_sdk_legacy_host_reaches_a_modern_only_server(
    gateways: Callable[[str], Gateway], kind: str, tmp_path: Path
) -> None:
    gw = gateways(kind)
    assert gw.request("POST", body=_init(), headers=_HEADERS).status == 400  # it refuses initialize

    async def scenario(client: Client) -> None:
        assert client.protocol_version == "2025-11-25"
        tools = await client.list_tools()
        assert {"echo", "ask_name", "sample"} <= {tool.name for tool in tools.tools}
        assert (await client.call_tool("echo", {"message": "héllo"})).content[0].text == "héllo"  # type: ignore[union-attr]
        await demo_round_trips(client)  # progress; elicitation and sampling as real requests to this host

    run_host(
        gw.url,
        scenario,
        "--protocol-era",
        "modern",
        stderr=tmp_path / "relay.stderr",
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
    )


def test_sdk_legacy_host_hears_list_changes_through_the_listen(
    gateways: Callable[[str], Gateway], tmp_path: Path
) -> None:
    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.append(message)

    async def scenario(client: Client) -> None:
        await client.call_tool("notify_change", {})
        with anyio.fail_after(20):
            while not heard:
                await anyio.sleep(0.02)

    relay_args = ("--protocol-era", "modern")
    run_host(gateways("demo").url, scenario, *relay_args, stderr=tmp_path / "relay.stderr", message_handler=on_message)


_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _init() -> dict[str, Any]:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
