"""The hub (core/hub.py) holds a request for a URI no member is known to list while its own resources lists are
out (a read right after notifications/initialized: a member spoken to through the 2026-07-28 bridge answers them
a round trip later), and routes it once they are answered, or answers it not found after PRIME_WAIT; a cancel
drops it; past in_flight it is not held."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core.hub import PRIME_WAIT, RESOURCE_NOT_FOUND, Hub
from mcpgate.core.hub_messages import Member, Wake
from tests.core.test_hub import CAPS, note, req, res, sent, to_client


def priming_hub(in_flight: int = 64) -> tuple[Hub, dict[str, dict[str, int]]]:
    """Members a and b initialized; the hub's own resources lists asked of both and not answered yet."""
    hub = Hub([Member("a", "a"), Member("b", "b")], in_flight=in_flight, uris=100)
    asked = sent(hub.from_client(req(0, "initialize", {}), 0.0))
    for member, [init] in asked.items():
        hub.from_member(member, res(init["id"], {"protocolVersion": "2025-06-18", "capabilities": CAPS}), 0.0)
    primes = sent(hub.from_client(note("notifications/initialized"), 0.0))
    ids = {member: {m["method"]: m["id"] for m in messages if "id" in m} for member, messages in primes.items()}
    return hub, ids


def answer_lists(hub: Hub, ids: dict[str, dict[str, int]], member: str, uris: list[str], now: float) -> list[Any]:
    out = hub.from_member(member, res(ids[member]["resources/templates/list"], {"resourceTemplates": []}), now)
    resources = [{"uri": uri} for uri in uris]
    return out + hub.from_member(member, res(ids[member]["resources/list"], {"resources": resources}), now)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        pytest.param("resources/read", {"uri": "b://late"}, id="read"),
        pytest.param("resources/subscribe", {"uri": "b://late"}, id="subscribe"),
        pytest.param(
            "completion/complete",
            {"ref": {"type": "ref/resource", "uri": "b://late"}, "argument": {"name": "x", "value": ""}},
            id="completion",
        ),
    ],
)
def test_a_request_for_a_uri_not_listed_yet_waits_for_the_lists(method: str, params: dict[str, Any]) -> None:
    hub, ids = priming_hub()
    held = hub.from_client(req("r", method, params), 1.0)
    assert held == [Wake(PRIME_WAIT)]
    assert sent(answer_lists(hub, ids, "a", ["a://1"], 1.1)) == {}  # b's lists still out
    routed = sent(answer_lists(hub, ids, "b", ["b://late"], 1.2))
    [request] = routed["b"]
    assert request["method"] == method and request["params"] == params
    [answer] = to_client(hub.from_member("b", res(request["id"], {"contents": []}), 1.3))
    assert answer == {"jsonrpc": "2.0", "id": "r", "result": {"contents": []}}


def test_a_uri_nobody_lists_is_not_found_once_the_lists_are_answered() -> None:
    hub, ids = priming_hub()
    assert hub.from_client(req("r", "resources/read", {"uri": "c://none"}), 0.0) == [Wake(PRIME_WAIT)]
    answer_lists(hub, ids, "a", [], 0.1)
    [missing] = to_client(answer_lists(hub, ids, "b", [], 0.2))
    assert missing["id"] == "r" and missing["error"]["code"] == RESOURCE_NOT_FOUND


def test_a_held_request_is_answered_after_prime_wait_and_its_id_is_taken_meanwhile() -> None:
    hub, _ = priming_hub()
    hub.from_client(req("r", "resources/read", {"uri": "b://late"}), 0.0)
    [busy] = to_client(hub.from_client(req("r", "resources/read", {"uri": "b://late"}), 0.1))
    assert busy["error"]["message"] == "request id already in flight"
    assert to_client(hub.tick(PRIME_WAIT / 2)) == []
    [missing] = to_client(hub.tick(PRIME_WAIT))
    assert missing["id"] == "r" and missing["error"]["code"] == RESOURCE_NOT_FOUND


def test_a_cancelled_held_request_is_dropped_and_its_id_free() -> None:
    hub, ids = priming_hub()
    hub.from_client(req("r", "resources/read", {"uri": "b://late"}), 0.0)
    assert hub.from_client(note("notifications/cancelled", {"requestId": "r"}), 0.1) == []
    answer_lists(hub, ids, "a", [], 0.2)
    assert sent(answer_lists(hub, ids, "b", ["b://late"], 0.3)) == {}  # nothing sent for it
    [read] = sent(hub.from_client(req("r", "resources/read", {"uri": "b://late"}), 0.4))["b"]
    assert read["params"] == {"uri": "b://late"}


def test_a_uri_listed_meanwhile_is_routed_before_the_other_lists_are_in() -> None:
    hub, ids = priming_hub()
    hub.from_client(req("r", "resources/read", {"uri": "a://1"}), 0.0)
    hub.from_client(req("s", "resources/read", {"uri": "z://9"}), 0.0)
    [read] = sent(answer_lists(hub, ids, "a", ["a://1"], 0.1))["a"]  # b's lists still out: s waits on
    assert read["params"] == {"uri": "a://1"}
    [missing] = to_client(answer_lists(hub, ids, "b", ["b://1"], 0.2))
    assert missing["id"] == "s" and missing["error"]["code"] == RESOURCE_NOT_FOUND


def test_a_member_gone_ends_the_wait() -> None:
    hub, ids = priming_hub()
    hub.from_client(req("r", "resources/read", {"uri": "z://9"}), 0.0)
    answer_lists(hub, ids, "a", ["a://1"], 0.1)
    [read] = sent(hub.member_gone("b", "it ended", 0.2))["a"]  # a serves every resource now: it is asked
    assert read["params"] == {"uri": "z://9"}


def test_past_in_flight_nothing_is_held() -> None:
    hub, _ = priming_hub(in_flight=4)  # the four priming requests fill it
    [missing] = to_client(hub.from_client(req("r", "resources/read", {"uri": "b://late"}), 0.0))
    assert missing["error"]["code"] == RESOURCE_NOT_FOUND
