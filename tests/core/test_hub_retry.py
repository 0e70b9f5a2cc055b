"""A departed member tried again (core/hub_retry.py), driven directly with the clock passed in: the backoff's
table, one Retry per departure and one StartMember per Retry, the new child asked the client's own initialize,
the member back (told initialized, its resources primed, list_changed for the client), a failed attempt (a
refusal, silence, its child ending, a start that fails) waiting longer, calls meanwhile answered naming the
server as unreachable, and a member that had stayed up starting over from the first delay."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core.hub import COALESCE, INIT_TIMEOUT, RESOURCE_NOT_FOUND, Hub
from mcpgate.core.hub_messages import CloseMember, Member, Out, Retry, StartMember, Wake
from mcpgate.core.hub_retry import RETRY_FIRST, RETRY_MAX, backoff
from tests.core.test_hub import CAPS, note, req, res, sent, to_client

INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


@pytest.mark.parametrize(
    ("failures", "delay"),
    [
        pytest.param(0, RETRY_FIRST, id="first"),
        pytest.param(1, 2 * RETRY_FIRST, id="doubled"),
        pytest.param(5, 16.0, id="fifth"),
        pytest.param(6, RETRY_MAX, id="capped"),
        pytest.param(10_000, RETRY_MAX, id="for-good"),
    ],
)
def test_backoff(failures: int, delay: float) -> None:
    assert backoff(failures) == delay


def retries(outs: list[Out]) -> list[Retry]:
    return [o for o in outs if isinstance(o, Retry)]


def down_at_start() -> Hub:
    """a and b; b refuses the client's initialize (its upstream down): gone, its first Retry asked."""
    hub = Hub([Member("a", "a"), Member("b", "b")], in_flight=64, uris=100)
    asked = sent(hub.from_client(req(0, "initialize", INIT), 0.0))
    hub.from_member("a", res(asked["a"][0]["id"], {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}}), 0)
    outs = hub.from_member("b", res(asked["b"][0]["id"], error={"code": -32000, "message": "cannot reach it"}), 0.0)
    [answer] = to_client(outs)
    assert answer["result"]["capabilities"]["prompts"] == {"listChanged": True}  # b may bring prompts back
    assert CloseMember("b", "refused initialize (cannot reach it)") in outs
    assert retries(outs) == [Retry("b", RETRY_FIRST)]
    hub.from_client(note("notifications/initialized"), 0.1)
    return hub


def attempt(hub: Hub, now: float) -> int:
    """b's Retry came and its new child started: the id of the hub's initialize to it."""
    assert hub.retry("b", now) == [StartMember("b")]
    assert hub.retry("b", now) == []  # one attempt per Retry
    outs = hub.started("b", now)
    [init] = sent(outs)["b"]
    assert init["method"] == "initialize" and init["params"] == INIT  # the client's own
    assert Wake(INIT_TIMEOUT) in outs
    return int(init["id"])


def test_a_member_down_at_start_is_named_unreachable_then_comes_back_with_list_changed() -> None:
    hub = down_at_start()
    [failed] = to_client(hub.from_client(req("c", "tools/call", {"name": "b__x"}), 0.2))
    text = failed["error"]["message"]
    assert failed["error"]["data"] == {"server": "b"} and "Unknown tool" not in text
    assert "Server 'b' of this endpoint is not available: it refused initialize (cannot reach it)" in text
    assert "unreachable for now (tried again in 0.3 s)" in text
    init = attempt(hub, RETRY_FIRST)
    [busy] = to_client(hub.from_client(req("d", "tools/call", {"name": "b__x"}), 0.6))
    assert "being reconnected now" in busy["error"]["message"]
    assert hub.from_member("b", note("notifications/message", {"data": "early"}), 0.6) == []  # not back yet
    outs = hub.from_member("b", res(init, {"protocolVersion": "2025-06-18", "capabilities": CAPS}), 0.7)
    told = sent(outs)["b"]
    assert told[0] == {"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}}
    assert [m["method"] for m in told[1:]] == ["resources/list", "resources/templates/list"]
    assert Wake(COALESCE) in outs and hub.live() == ["a", "b"]
    changed = [m["method"] for m in to_client(hub.tick(0.7 + COALESCE))]
    assert changed == [
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/tools/list_changed",
    ]
    [routed] = sent(hub.from_client(req("e", "tools/call", {"name": "b__x"}), 1.0))["b"]
    assert routed["params"]["name"] == "x"


@pytest.mark.parametrize(
    "fail",
    [
        pytest.param("refused", id="refuses-initialize"),
        pytest.param("silent", id="silent-past-init-timeout"),
        pytest.param("ended", id="its-child-ends"),
        pytest.param("start", id="cannot-start"),
    ],
)
def test_each_failed_attempt_waits_twice_as_long(fail: str) -> None:
    hub = down_at_start()
    now = RETRY_FIRST
    for n in range(1, 9):
        if fail == "start":
            assert hub.retry("b", now) == [StartMember("b")]
            outs = hub.unavailable("b", "it cannot start (no such file)", now)
        else:
            init = attempt(hub, now)
            if fail == "refused":
                outs = hub.from_member("b", res(init, error={"code": -32000, "message": "still down"}), now)
                assert CloseMember("b", "refused initialize (still down)") in outs
            elif fail == "silent":
                now += INIT_TIMEOUT
                outs = hub.tick(now)
                assert any(isinstance(o, CloseMember) for o in outs)
            else:
                outs = hub.member_gone("b", "it ended (exit 1)", now)
        assert retries(outs) == [Retry("b", backoff(n))], (n, outs)
        assert to_client(outs) == []  # it had no lists to vanish
        assert hub.member_gone("b", "the closed child's end", now) == []  # its end is no second failure
        now += backoff(n)
    assert hub.live() == ["a"]


def test_a_member_that_stayed_up_starts_again_from_the_first_delay() -> None:
    hub = down_at_start()
    now = RETRY_FIRST
    for _ in range(3):  # three failures: the next wait would be 4 s
        init = attempt(hub, now)
        hub.from_member("b", res(init, error={"code": -32000, "message": "down"}), now)
        now += 10
    init = attempt(hub, now)
    hub.from_member("b", res(init, {"protocolVersion": "2025-06-18", "capabilities": CAPS}), now)
    assert retries(hub.member_gone("b", "it ended", now + 1)) == [Retry("b", backoff(4))]  # up a moment only
    init = attempt(hub, now + 100)
    hub.from_member("b", res(init, {"protocolVersion": "2025-06-18", "capabilities": CAPS}), now + 100)
    late = now + 100 + RETRY_MAX
    assert retries(hub.member_gone("b", "it ended", late)) == [Retry("b", RETRY_FIRST)]


def test_a_member_gone_before_the_clients_initialize_is_simply_asked_with_the_others() -> None:
    hub = Hub([Member("a", "a"), Member("b", "b")], in_flight=8, uris=8)
    assert retries(hub.unavailable("b", "it cannot start (no such file)", 0.0)) == [Retry("b", RETRY_FIRST)]
    assert hub.retry("b", RETRY_FIRST) == [StartMember("b")]
    assert sent(hub.started("b", RETRY_FIRST)) == {}
    assert hub.live() == ["a", "b"]
    asked: dict[str, Any] = sent(hub.from_client(req(0, "initialize", INIT), 1.0))
    assert sorted(asked) == ["a", "b"]


def test_a_member_ending_while_it_is_up_is_tried_again_and_its_calls_fail_meanwhile() -> None:
    hub = down_at_start()
    init = attempt(hub, RETRY_FIRST)
    hub.from_member("b", res(init, {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}}), 1.0)
    sent(hub.from_client(req("slow", "tools/call", {"name": "b__slow"}), 2.0))
    outs = hub.member_gone("b", "it ended (exit 1)", 3.0)
    [failed] = to_client(outs)
    assert failed["id"] == "slow" and "ended: it ended (exit 1)" in failed["error"]["message"]
    assert retries(outs) == [Retry("b", backoff(1))]  # up 2 s: the outage goes on from where it was


def test_a_member_coming_back_holds_no_read_of_an_unknown_uri() -> None:
    """Only the hub's own resources lists hold a read (core/hub.py's PRIME_WAIT), not a member's initialize."""
    hub = down_at_start()
    attempt(hub, RETRY_FIRST)
    [answer] = to_client(hub.from_client(req("r", "resources/read", {"uri": "x://nobody"}), 0.6))
    assert answer["error"]["code"] == RESOURCE_NOT_FOUND
