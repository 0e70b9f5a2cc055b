"""ModernHostBridge: a 2026-07-28 host in front of a legacy-only upstream.

The upstream is `gunicorn mcpgate.wsgi` on its 2025 session path (the bridge sends initialize, so it gets a
legacy session), over the demo child (its elicitation and sampling are real server-to-client requests) or the
SDK-written child (tools list_changed, a subscribable resource). The host is the SDK's stdio client in mode
"2026-07-28", or raw NDJSON, in front of the relay's pump driving the bridge over the real legacy
StreamableTransport (a small launcher: the bridge object itself, whatever --protocol-era picks).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.subscriptions import ToolsListChanged

from tests.support import MODERN, Gateway, demo_round_trips, lazy_gateways, on_elicit, on_sample
from tests.support import wait_for as wait_until
from tests.support.relay import BRIDGE_LAUNCH, RawRelay, run_bridged_host

ENVS = {"demo": {}}
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPS = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUB = "io.modelcontextprotocol/subscriptionId"


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    with lazy_gateways(ENVS) as get:
        yield get


@pytest.fixture
def raw(gateways: Callable[[str], Gateway], raw_relay: Callable[..., RawRelay]) -> Callable[..., RawRelay]:
    """A relay whose bridge is built by BRIDGE_LAUNCH, on a gateway of `kind` (raw_relay stops it)."""

    def start(kind: str = "demo", ttl: float = 60.0) -> RawRelay:
        return raw_relay(gateways(kind).url, str(ttl), launch=("-c", BRIDGE_LAUNCH))

    return start


def run_modern_host(gw: Gateway, scenario: Callable[[Client], Any], tmp_path: Path) -> None:
    run_bridged_host(gw.url, scenario, tmp_path, elicitation_callback=on_elicit, sampling_callback=on_sample)


def modern(msg_id: Any, method: str, params: dict[str, Any] | None = None, caps: Any = None) -> dict[str, Any]:
    meta = {META_VERSION: MODERN, META_CAPS: caps if caps is not None else {"elicitation": {}, "sampling": {}}}
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {**(params or {}), "_meta": meta}}


def ask_name(msg_id: Any, **extra: Any) -> dict[str, Any]:
    return modern(msg_id, "tools/call", {"name": "ask_name", "arguments": {}, **extra})


ACCEPT_GRACE = {"action": "accept", "content": {"name": "Grace"}}


# -- the SDK's modern client --------------------------------------------------------------------------------------


def test_sdk_modern_host_discovers_lists_and_round_trips_through_the_bridge(
    gateways: Callable[[str], Gateway], tmp_path: Path
) -> None:
    async def scenario(client: Client) -> None:
        assert client.protocol_version == MODERN
        tools = await client.list_tools()
        assert {"echo", "ask_name", "sample", "slow"} <= {tool.name for tool in tools.tools}
        assert (await client.call_tool("echo", {"message": "héllo"})).content[0].text == "héllo"  # type: ignore[union-attr]
        await demo_round_trips(client)  # progress, then elicitation and sampling as InputRequiredResults

    run_modern_host(gateways("demo"), scenario, tmp_path)


def test_sdk_modern_host_listens_to_list_changes(gateways: Callable[[str], Gateway], tmp_path: Path) -> None:
    async def scenario(client: Client) -> None:
        async with client.listen(tools_list_changed=True, resource_subscriptions=["demo://readme"]) as sub:
            assert sub.honored.tools_list_changed is True
            assert not sub.honored.resource_subscriptions  # the demo cannot subscribe to resources
            await client.call_tool("notify_change", {})
            with anyio.fail_after(20):
                async for event in sub:
                    if isinstance(event, ToolsListChanged):
                        break

    run_modern_host(gateways("demo"), scenario, tmp_path)


# -- raw NDJSON: what exactly the host sees -----------------------------------------------------------------------


def test_discover_is_answered_from_initialize_and_results_are_stamped(raw: Callable[..., RawRelay]) -> None:
    relay = raw()
    relay.send(modern(1, "server/discover"))
    discover = relay.read_reply(1)["result"]
    assert discover["supportedVersions"] == [MODERN] and discover["resultType"] == "complete"
    assert discover["_meta"][META_SERVER_INFO]["name"] == "mcpgate-demo"
    assert "tools" in discover["capabilities"] and isinstance(discover["ttlMs"], int)
    relay.send(modern(2, "tools/list"))
    listed = relay.read_reply(2)["result"]
    assert listed["resultType"] == "complete" and listed["cacheScope"] == "private"
    assert listed["_meta"][META_SERVER_INFO]["name"] == "mcpgate-demo"


def test_elicitation_becomes_input_required_and_the_retry_gets_the_result(raw: Callable[..., RawRelay]) -> None:
    relay = raw()
    relay.send(ask_name(1))
    first = relay.read_reply(1)["result"]
    assert first["resultType"] == "input_required"
    ((key, asked),) = first["inputRequests"].items()
    assert asked["method"] == "elicitation/create"
    state = first["requestState"]
    relay.send(ask_name(2, inputResponses={key: ACCEPT_GRACE}, requestState=state))
    done = relay.read_reply(2)["result"]
    assert done["content"][0]["text"] == "Hello, Grace" and done["resultType"] == "complete"
    relay.send(ask_name(3, inputResponses={key: ACCEPT_GRACE}, requestState=state))  # used already
    assert relay.read_reply(3)["error"]["code"] == -32602


def test_a_tampered_or_misapplied_request_state_is_refused(raw: Callable[..., RawRelay]) -> None:
    relay = raw()
    relay.send(ask_name(1))
    first = relay.read_reply(1)["result"]
    state = first["requestState"]
    key = next(iter(first["inputRequests"]))
    tampered = state[:-2] + ("A" if state[-2] != "A" else "B") + state[-1]
    relay.send(ask_name(2, inputResponses={key: ACCEPT_GRACE}, requestState=tampered))
    assert "requestState" in relay.read_reply(2)["error"]["message"]
    other = modern(3, "tools/call", {"name": "echo", "arguments": {"message": "x"}, "requestState": state})
    relay.send(other)  # another tool: the state is bound to ask_name
    assert "another request" in relay.read_reply(3)["error"]["message"]
    relay.send(ask_name(4, inputResponses={key: ACCEPT_GRACE}, requestState=state))  # the real one still works
    assert relay.read_reply(4)["result"]["content"][0]["text"] == "Hello, Grace"


def test_answers_carried_ahead_are_used_at_once(raw: Callable[..., RawRelay]) -> None:
    relay = raw()
    relay.send(ask_name(1, inputResponses={"elicitation-1": ACCEPT_GRACE}))
    assert relay.read_reply(1)["result"]["content"][0]["text"] == "Hello, Grace"


def test_one_candidate_at_a_time(raw: Callable[..., RawRelay]) -> None:
    """Two eliciting calls at once: only one is asked; the other is asked after the first one ends."""
    relay = raw()
    relay.send(ask_name(1), ask_name(2))
    first = relay.read()
    assert first["result"]["resultType"] == "input_required", first
    key = next(iter(first["result"]["inputRequests"]))
    retry = ask_name(3, inputResponses={key: ACCEPT_GRACE}, requestState=first["result"]["requestState"])
    relay.send(retry)
    replies = {}
    while len(replies) < 2:
        message = relay.read()
        replies[message["id"]] = message["result"]
    other = 2 if first["id"] == 1 else 1
    assert replies[3]["content"][0]["text"] == "Hello, Grace"
    assert replies[other]["resultType"] == "input_required"


def test_no_input_request_for_a_host_that_declared_none(raw: Callable[..., RawRelay]) -> None:
    relay = raw()
    relay.send(modern(1, "tools/call", {"name": "ask_name", "arguments": {}}, caps={}))
    reply = relay.read_reply(1)
    text = json.dumps(reply)
    assert "input_required" not in text and ("error" in reply or reply["result"].get("isError")), reply


def test_an_abandoned_call_is_cancelled_upstream(
    raw: Callable[..., RawRelay], gateways: Callable[[str], Gateway]
) -> None:
    gw = gateways("demo")
    before = gw.log().count("cancelled; no response sent")
    relay = raw(ttl=1.0)
    relay.send(ask_name(1))
    first = relay.read_reply(1)["result"]
    key = next(iter(first["inputRequests"]))
    assert wait_until(lambda: gw.log().count("cancelled; no response sent") > before), gw.log_tail()
    relay.send(ask_name(2, inputResponses={key: ACCEPT_GRACE}, requestState=first["requestState"]))
    assert relay.read_reply(2)["error"]["code"] == -32602


def test_a_host_cancel_reaches_the_upstream(raw: Callable[..., RawRelay], gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("demo")
    before = gw.log().count("cancelled; no response sent")
    relay = raw()
    slow = modern(1, "tools/call", {"name": "slow", "arguments": {"seconds": 30, "steps": 30}})
    slow["params"]["_meta"]["progressToken"] = "p"
    relay.send(slow)
    progress = relay.read()  # the upstream is working on it
    assert progress["method"] == "notifications/progress" and progress["params"]["progressToken"] == "p"
    relay.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    assert wait_until(lambda: gw.log().count("cancelled; no response sent") > before), gw.log_tail()
    relay.send(modern(2, "tools/call", {"name": "echo", "arguments": {"message": "after"}}))
    assert relay.read_reply(2)["result"]["content"][0]["text"] == "after"


def test_listen_acknowledges_first_and_tags_every_notification(raw: Callable[..., RawRelay]) -> None:
    relay = raw()
    relay.send(modern("L", "subscriptions/listen", {"notifications": {"toolsListChanged": True}}))
    ack = relay.read()
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["_meta"][META_SUB] == "L" and ack["params"]["notifications"] == {"toolsListChanged": True}
    relay.send(modern(1, "tools/call", {"name": "notify_change", "arguments": {}}))
    seen = [relay.read(), relay.read()]
    changed = [m for m in seen if m.get("method") == "notifications/tools/list_changed"]
    assert changed and changed[0]["params"]["_meta"][META_SUB] == "L"
    relay.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "L"}})
    relay.send(modern(2, "tools/call", {"name": "notify_change", "arguments": {}}))
    reply = relay.read()
    assert reply.get("id") == 2, reply  # nothing for the cancelled listen


# -- units: the listen over a scripted legacy wire ----------------------------------------------------------------


class FakeLegacy:
    """The legacy Transport interface, scripted: initialize declares tools and subscribable resources; a
    resources/subscribe for a URI starting with "bad:" is refused."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.sent: list[tuple[str, Any]] = []

    def request(self, req: Any) -> Any:
        from mcpgate.core.jsonrpc import Response, error_response

        self.sent.append((req.method, req.params))
        if req.method == "initialize":
            caps = {"tools": {}, "resources": {"subscribe": True}}
            return Response(req.id, {"jsonrpc": "2.0", "id": req.id, "result": {"capabilities": caps}})
        if req.method == "resources/subscribe" and req.params["uri"].startswith("bad:"):
            return Response(req.id, error_response(req.id, -32602, "no such resource"))
        return Response(req.id, {"jsonrpc": "2.0", "id": req.id, "result": {}})

    def send_oneway(self, message: Any) -> None:
        self.sent.append((getattr(message, "method", "response"), None))

    def cancel_grace(self, req: Any) -> float:
        return 0.0

    def close(self) -> None:
        pass


def test_listen_subscribes_each_uri_once_and_unsubscribes_after_the_last_listener() -> None:
    import gevent

    from mcpgate.core.jsonrpc import Notification, classify
    from mcpgate.relay.server_bridge import ModernHostBridge

    seen: list[Any] = []
    wires: list[FakeLegacy] = []

    def make(sink: Any) -> FakeLegacy:
        wires.append(FakeLegacy(sink))
        return wires[0]

    bridge = ModernHostBridge(make, seen.append)
    wanted = {"toolsListChanged": True, "promptsListChanged": True, "resourceSubscriptions": ["a://x", "bad:y"]}
    one = gevent.spawn(bridge.request, classify(modern("A", "subscriptions/listen", {"notifications": wanted})))
    two = gevent.spawn(bridge.request, classify(modern("B", "subscriptions/listen", {"notifications": wanted})))
    with gevent.Timeout(10):
        while len(seen) < 2:
            gevent.sleep(0.01)
    acks = {m.params["_meta"][META_SUB]: m.params["notifications"] for m in seen}
    assert acks["A"] == acks["B"] == {"toolsListChanged": True, "resourceSubscriptions": ["a://x"]}  # no prompts
    wire = wires[0]
    assert [p["uri"] for m, p in wire.sent if m == "resources/subscribe"] == ["a://x", "bad:y", "bad:y"]
    wire.sink(Notification("notifications/resources/updated", {"uri": "a://x"}, {}))
    updates = [m for m in seen if m.method == "notifications/resources/updated"]
    assert sorted(m.params["_meta"][META_SUB] for m in updates) == ["A", "B"]
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "A"}}
    bridge.send_oneway(classify(cancel))
    assert one.get(timeout=10).obj["result"]["_meta"][META_SUB] == "A"  # the graceful end
    gevent.sleep(0.05)
    assert not [m for m, _ in wire.sent if m == "resources/unsubscribe"]  # B still listens
    bridge.send_oneway(classify({**cancel, "params": {"requestId": "B"}}))
    two.get(timeout=10)
    with gevent.Timeout(10):
        while not [m for m, _ in wire.sent if m == "resources/unsubscribe"]:
            gevent.sleep(0.01)
    bridge.close()
