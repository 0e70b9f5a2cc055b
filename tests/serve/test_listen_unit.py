"""ListenHub against a recording ChildLink (the pool that drives it in production is not built here): the
acknowledgment, per-stream filtering and subscription ids, the child's subscriptions (ref-counted
resources/subscribe for a legacy child, one re-opened subscriptions/listen for a modern one), overflow and
the graceful end."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Id, Notification
from mcpgate.core.modern import Failure
from mcpgate.core.wire import META_SUBSCRIPTION_ID
from mcpgate.serve.modern.listen import ListenHub
from mcpgate.serve.sessions.stream import END, Delivery, Stream, StreamLimits

LIMITS = StreamLimits(messages=50, bytes=1 << 20, stall_timeout=5.0, replay_events=0, replay_bytes=0)
ALL_CAPS: dict[str, Any] = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
}
TOOLS = "notifications/tools/list_changed"
PROMPTS = "notifications/prompts/list_changed"
RESOURCES = "notifications/resources/list_changed"
UPDATED = "notifications/resources/updated"
ACK = "notifications/subscriptions/acknowledged"


@dataclass
class Sent:
    id: str
    method: str
    params: dict[str, Any]
    on_response: Callable[[dict[str, Any]], None]


class RecordingLink:
    """A ChildLink that records what the hub sends the child."""

    def __init__(self, modern: bool = False, capabilities: dict[str, Any] | None = None) -> None:
        self.modern = modern
        self.capabilities = ALL_CAPS if capabilities is None else capabilities
        self.requests: list[Sent] = []
        self.notifications: list[tuple[str, dict[str, Any]]] = []
        self.gone = False

    def request(self, method: str, params: dict[str, Any], on_response: Callable[[dict[str, Any]], None]) -> str | None:
        if self.gone:
            return None
        sent = Sent(f"mcpgate-{len(self.requests) + 1}", method, params, on_response)
        self.requests.append(sent)
        return sent.id

    def notify(self, method: str, params: dict[str, Any]) -> bool:
        self.notifications.append((method, params))
        return not self.gone

    def calls(self, method: str) -> list[Any]:
        """The uris of resources/subscribe|unsubscribe, or the filters of subscriptions/listen, in order."""
        if method == "subscriptions/listen":
            return [sent.params["notifications"] for sent in self.requests if sent.method == method]
        return [sent.params["uri"] for sent in self.requests if sent.method == method]

    def listens(self) -> list[Sent]:
        return [sent for sent in self.requests if sent.method == "subscriptions/listen"]

    def cancelled(self) -> list[str]:
        return [params["requestId"] for method, params in self.notifications if method == "notifications/cancelled"]


def note(method: str, params: dict[str, Any] | None = None, child_sub: Id | None = None) -> Notification:
    """A notification as the child sends it (child_sub: the child's own subscription id in _meta)."""
    obj: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None or child_sub is not None:
        obj["params"] = dict(params or {})
        if child_sub is not None:
            obj["params"]["_meta"] = {META_SUBSCRIPTION_ID: child_sub}
    message = jsonrpc.parse(jsonrpc.encode(obj))
    assert isinstance(message, Notification)
    return message


def drain(stream: Stream) -> list[Any]:
    """What the stream's reader would get now: messages (decoded), then END if the stream has ended."""
    out: list[Any] = []
    while True:
        item = stream.next(timeout=0)
        if item is None:
            return out
        if item is END:
            return [*out, END]
        assert isinstance(item, Delivery)
        out.append(json.loads(item.data))


def opened(hub: ListenHub, sub_id: Id, wanted: dict[str, Any]) -> Stream:
    stream = hub.open(sub_id, wanted)
    assert isinstance(stream, Stream), stream
    return stream


def opened_and_acked(hub: ListenHub, sub_id: Id, wanted: dict[str, Any]) -> Stream:
    stream = opened(hub, sub_id, wanted)
    assert [m["method"] for m in drain(stream)] == [ACK]
    return stream


def methods(messages: list[Any]) -> list[str]:
    return [m["method"] if isinstance(m, dict) and "method" in m else repr(m) for m in messages]


# -- the acknowledgment -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capabilities", "wanted", "honoured"),
    [
        pytest.param(
            ALL_CAPS,
            {
                "toolsListChanged": True,
                "promptsListChanged": True,
                "resourcesListChanged": True,
                "resourceSubscriptions": ["file:///a", "file:///b", "file:///a"],
            },
            {
                "toolsListChanged": True,
                "promptsListChanged": True,
                "resourcesListChanged": True,
                "resourceSubscriptions": ["file:///a", "file:///b"],
            },
            id="everything-deduplicated",
        ),
        pytest.param(
            {"tools": {"listChanged": True}},
            {"toolsListChanged": True, "promptsListChanged": True},
            {"toolsListChanged": True},
            id="no-prompts-capability",
        ),
        pytest.param(
            {"tools": {}, "prompts": {"listChanged": False}},
            {"toolsListChanged": True, "promptsListChanged": True},
            {},
            id="listChanged-not-announced",
        ),
        pytest.param(
            {"resources": {"listChanged": True}},
            {"resourcesListChanged": True, "resourceSubscriptions": ["file:///a"]},
            {"resourcesListChanged": True},
            id="no-subscribe-capability",
        ),
        pytest.param(
            ALL_CAPS,
            {"toolsListChanged": False, "resourceSubscriptions": []},
            {"resourceSubscriptions": []},
            id="false-and-empty",
        ),
        pytest.param(
            ALL_CAPS,
            {"somethingElse": True, "toolsListChanged": True},
            {"toolsListChanged": True},
            id="unknown-field-omitted",
        ),
        pytest.param({}, {}, {}, id="nothing"),
    ],
)
def test_the_first_message_acknowledges_the_honoured_subset(
    capabilities: dict[str, Any], wanted: dict[str, Any], honoured: dict[str, Any]
) -> None:
    hub = ListenHub(RecordingLink(capabilities=capabilities), LIMITS)
    stream = opened(hub, "listen-7", wanted)
    assert drain(stream) == [
        {
            "jsonrpc": "2.0",
            "method": ACK,
            "params": {"_meta": {META_SUBSCRIPTION_ID: "listen-7"}, "notifications": honoured},
        }
    ]


@pytest.mark.parametrize(
    "wanted",
    [
        None,
        [],
        "tools",
        {"toolsListChanged": "yes"},
        {"promptsListChanged": 1},
        {"resourceSubscriptions": "file:///a"},
        {"resourceSubscriptions": ["file:///a", 3]},
    ],
    ids=["null", "list", "string", "kind-string", "kind-int", "uris-string", "uris-non-string"],
)
def test_an_invalid_filter_is_refused(wanted: object) -> None:
    link = RecordingLink()
    hub = ListenHub(link, LIMITS)
    failure = hub.open(1, wanted)
    assert isinstance(failure, Failure)
    assert (failure.status, failure.code) == (400, jsonrpc.INVALID_PARAMS)
    assert len(hub) == 0 and link.requests == []


# -- delivery -----------------------------------------------------------------------------------------------


def test_only_the_asked_and_honoured_kinds_are_delivered() -> None:
    hub = ListenHub(RecordingLink(capabilities={"tools": {"listChanged": True}, "prompts": {}}), LIMITS)
    tools = opened_and_acked(hub, 1, {"toolsListChanged": True})
    prompts = opened_and_acked(hub, 2, {"promptsListChanged": True})  # not honoured: no prompts.listChanged
    both = opened_and_acked(hub, 3, {"toolsListChanged": True, "promptsListChanged": True})
    for method in (TOOLS, PROMPTS, RESOURCES):
        assert hub.on_child_message(note(method)) is True
    assert methods(drain(tools)) == [TOOLS]
    assert drain(prompts) == []
    assert methods(drain(both)) == [TOOLS]


def test_each_stream_gets_its_own_subscription_id() -> None:
    hub = ListenHub(RecordingLink(), LIMITS)
    ids: list[Id] = [1, "1", "listen-x"]
    streams = [opened_and_acked(hub, sub_id, {"toolsListChanged": True}) for sub_id in ids]
    child = note(TOOLS, {"_meta": {"vendor.example/trace": "t-1", META_SUBSCRIPTION_ID: "child-9"}})
    assert hub.on_child_message(child)
    for sub_id, stream in zip(ids, streams, strict=True):
        (message,) = drain(stream)
        assert message["params"]["_meta"] == {"vendor.example/trace": "t-1", META_SUBSCRIPTION_ID: sub_id}
        assert type(message["params"]["_meta"][META_SUBSCRIPTION_ID]) is type(sub_id)


@pytest.mark.parametrize("modern", [False, True], ids=["legacy", "modern"])
def test_resources_updated_goes_only_to_streams_that_asked_for_that_exact_uri(modern: bool) -> None:
    link = RecordingLink(modern=modern)
    hub = ListenHub(link, LIMITS)
    parent = opened_and_acked(hub, "p", {"resourceSubscriptions": ["file:///a"]})
    child = opened_and_acked(hub, "c", {"resourceSubscriptions": ["file:///a/b"]})
    lists = opened_and_acked(hub, "l", {"resourcesListChanged": True})
    child_sub = link.listens()[-1].id if modern else None
    for uri in ("file:///a/b", "file:///A/b", "file:///a/b/"):
        assert hub.on_child_message(note(UPDATED, {"uri": uri}, child_sub))
    assert drain(parent) == []
    assert [m["params"]["uri"] for m in drain(child)] == ["file:///a/b"]
    assert drain(lists) == []


def test_what_the_hub_does_not_own_is_left_to_the_pool() -> None:
    hub = ListenHub(RecordingLink(), LIMITS)
    opened_and_acked(hub, 1, {"toolsListChanged": True})
    response = jsonrpc.parse(b'{"jsonrpc":"2.0","id":"mcpgate-1","result":{}}')
    assert isinstance(response, jsonrpc.Response)
    assert hub.on_child_message(response) is False
    assert hub.on_child_message(note("notifications/message", {"level": "info", "data": "x"})) is False
    assert hub.on_child_message(note("notifications/progress", {"progressToken": 1, "progress": 1})) is False


# -- a legacy child: ref-counted resources/subscribe ----------------------------------------------------------


def test_a_legacy_child_is_subscribed_once_per_uri_and_unsubscribed_after_the_last_stream() -> None:
    link = RecordingLink()
    hub = ListenHub(link, LIMITS)
    first = opened_and_acked(hub, 1, {"resourceSubscriptions": ["file:///a", "file:///b"]})
    second = opened_and_acked(hub, 2, {"resourceSubscriptions": ["file:///b", "file:///c"], "toolsListChanged": True})
    assert link.calls("resources/subscribe") == ["file:///a", "file:///b", "file:///c"]
    hub.close(first)
    assert link.calls("resources/unsubscribe") == ["file:///a"]
    assert hub.on_child_message(note(UPDATED, {"uri": "file:///b"}))
    assert [m["params"]["uri"] for m in drain(second)] == ["file:///b"]
    hub.close(second)
    hub.close(second)  # the HTTP side's finally after the hub already let it go: nothing more
    assert link.calls("resources/unsubscribe") == ["file:///a", "file:///b", "file:///c"]
    assert link.calls("resources/subscribe") == ["file:///a", "file:///b", "file:///c"]
    assert link.calls("subscriptions/listen") == [] and link.notifications == []
    third = opened_and_acked(hub, 3, {"resourceSubscriptions": ["file:///a"]})
    assert link.calls("resources/subscribe")[-1] == "file:///a"
    assert third.closed is False and len(hub) == 1


def test_a_legacy_child_without_subscribe_is_never_asked() -> None:
    link = RecordingLink(capabilities={"resources": {"listChanged": True}})
    hub = ListenHub(link, LIMITS)
    stream = opened_and_acked(hub, 1, {"resourceSubscriptions": ["file:///a"], "resourcesListChanged": True})
    hub.close(stream)
    assert link.requests == []


# -- a modern child: one subscriptions/listen for the union --------------------------------------------------


def test_a_modern_child_gets_one_listen_for_the_union_reopened_when_it_changes() -> None:
    link = RecordingLink(modern=True)
    hub = ListenHub(link, LIMITS)
    tools = opened_and_acked(hub, "t", {"toolsListChanged": True})
    (first,) = link.listens()
    assert first.params["notifications"] == {"toolsListChanged": True}
    assert first.params["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert hub.on_child_message(note(ACK, {"notifications": {"toolsListChanged": True}}, first.id))
    assert drain(tools) == []  # the child's acknowledgment is the hub's, not a client's

    same = opened_and_acked(hub, "same", {"toolsListChanged": True})
    assert len(link.listens()) == 1  # nothing new to ask for

    uris = opened_and_acked(hub, "u", {"resourceSubscriptions": ["file:///b", "file:///a"]})
    first, second = link.listens()
    assert second.params["notifications"] == {
        "toolsListChanged": True,
        "resourceSubscriptions": ["file:///a", "file:///b"],
    }
    # until the new listen is acknowledged the old one still delivers, and is not cancelled
    assert link.cancelled() == []
    assert hub.on_child_message(note(TOOLS, child_sub=first.id))
    assert methods(drain(tools)) == [TOOLS] and methods(drain(same)) == [TOOLS]
    assert hub.on_child_message(note(ACK, {"notifications": {}}, second.id))
    assert link.cancelled() == [first.id]
    # a late notification of the cancelled listen is consumed and dropped
    assert hub.on_child_message(note(TOOLS, child_sub=first.id)) is True
    assert drain(tools) == []
    assert hub.on_child_message(note(UPDATED, {"uri": "file:///a"}, second.id))
    assert [m["params"]["_meta"][META_SUBSCRIPTION_ID] for m in drain(uris)] == ["u"]

    hub.close(uris)  # the URI set shrinks: a new listen without them, the old one cancelled once that is acked
    third = link.listens()[2]
    assert third.params["notifications"] == {"toolsListChanged": True}
    assert hub.on_child_message(note(ACK, {"notifications": {}}, third.id))
    assert link.cancelled() == [first.id, second.id]
    hub.close(tools)
    assert len(link.listens()) == 3  # "same" still wants the same
    hub.close(same)
    assert len(link.listens()) == 3 and link.cancelled() == [first.id, second.id, third.id]
    assert link.calls("resources/subscribe") == []


def test_a_modern_listen_superseded_before_its_acknowledgment_is_cancelled_at_once() -> None:
    link = RecordingLink(modern=True)
    hub = ListenHub(link, LIMITS)
    opened_and_acked(hub, 1, {"toolsListChanged": True})
    opened_and_acked(hub, 2, {"promptsListChanged": True})
    first, second = link.listens()
    assert link.cancelled() == [first.id]
    assert second.params["notifications"] == {"toolsListChanged": True, "promptsListChanged": True}


def test_notifications_of_a_listen_the_hub_does_not_know_are_left_to_the_pool() -> None:
    link = RecordingLink(modern=True)
    hub = ListenHub(link, LIMITS)
    stream = opened_and_acked(hub, 1, {"toolsListChanged": True})
    assert hub.on_child_message(note(TOOLS, child_sub="someone-else")) is False
    assert hub.on_child_message(note(TOOLS)) is False
    assert drain(stream) == []


@pytest.mark.parametrize(
    ("response", "final"),
    [({"result": {"resultType": "complete"}}, True), ({"error": {"code": -32603, "message": "x"}}, False)],
    ids=["complete", "error"],
)
def test_the_child_ending_its_listen_ends_the_streams(response: dict[str, Any], final: bool) -> None:
    link = RecordingLink(modern=True)
    hub = ListenHub(link, LIMITS)
    stream = opened_and_acked(hub, "s", {"toolsListChanged": True})
    (listen,) = link.listens()
    listen.on_response({"jsonrpc": "2.0", "id": listen.id, **response})
    assert drain(stream) == (
        [{"jsonrpc": "2.0", "id": "s", "result": {"resultType": "complete", "_meta": {META_SUBSCRIPTION_ID: "s"}}}]
        if final
        else []
    ) + [END]
    assert len(hub) == 0
    again = opened_and_acked(hub, "again", {"toolsListChanged": True})  # the hub goes on: a new child listen
    assert len(link.listens()) == 2 and again.closed is False


# -- bounds and the end ---------------------------------------------------------------------------------------


def test_an_overflowing_stream_alone_ends_and_leaves_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    def never_wait(stream: Stream, size: int) -> bool:
        raise AssertionError("the hub waited for a reader (it runs on the child's reader)")

    monkeypatch.setattr(Stream, "_wait_for_room", never_wait)
    link = RecordingLink()
    small = StreamLimits(messages=3, bytes=1 << 20, stall_timeout=30.0, replay_events=0, replay_bytes=0)
    hub = ListenHub(link, small)
    slow = opened(hub, "slow", {"toolsListChanged": True, "resourceSubscriptions": ["file:///only-slow"]})
    fast = opened_and_acked(hub, "fast", {"toolsListChanged": True})
    got: list[Any] = []
    for _ in range(6):
        assert hub.on_child_message(note(TOOLS))
        got += drain(fast)
    assert methods(got) == [TOOLS] * 6
    assert slow.closed and drain(slow) == [END]
    assert len(hub) == 1
    assert link.calls("resources/unsubscribe") == ["file:///only-slow"]
    hub.close(slow)  # the HTTP side's finally: nothing more
    assert link.calls("resources/unsubscribe") == ["file:///only-slow"]


def test_a_stream_closed_by_its_reader_is_dropped_at_the_next_delivery() -> None:
    hub = ListenHub(RecordingLink(), LIMITS)
    gone = opened_and_acked(hub, 1, {"toolsListChanged": True})
    kept = opened_and_acked(hub, 2, {"toolsListChanged": True})
    gone.close()
    assert hub.on_child_message(note(TOOLS))
    assert len(hub) == 1 and methods(drain(kept)) == [TOOLS]


@pytest.mark.parametrize("modern", [False, True], ids=["legacy", "modern"])
def test_end_all_graceful_sends_each_stream_its_final_result(modern: bool) -> None:
    link = RecordingLink(modern=modern)
    hub = ListenHub(link, LIMITS)
    one = opened_and_acked(hub, 1, {"toolsListChanged": True, "resourceSubscriptions": ["file:///a"]})
    two = opened_and_acked(hub, "two", {"toolsListChanged": True})
    child_sub = link.listens()[-1].id if modern else None
    assert hub.on_child_message(note(TOOLS, child_sub=child_sub))
    hub.end_all("shutting down", graceful=True)
    for sub_id, stream in ((1, one), ("two", two)):
        tools, final, end = drain(stream)
        assert tools["method"] == TOOLS
        assert final == {
            "jsonrpc": "2.0",
            "id": sub_id,
            "result": {"resultType": "complete", "_meta": {META_SUBSCRIPTION_ID: sub_id}},
        }
        assert end is END
    assert len(hub) == 0
    if modern:
        assert link.cancelled() == [child_sub]
    else:
        assert link.calls("resources/unsubscribe") == ["file:///a"]
    refused = hub.open(3, {"toolsListChanged": True})
    assert isinstance(refused, Failure) and refused.status == 503


def test_end_all_not_graceful_just_ends() -> None:
    hub = ListenHub(RecordingLink(), LIMITS)
    stream = opened_and_acked(hub, 1, {"toolsListChanged": True})
    assert hub.on_child_message(note(TOOLS))
    hub.end_all("the child exited", graceful=False)
    assert methods(drain(stream)) == [TOOLS, repr(END)]
