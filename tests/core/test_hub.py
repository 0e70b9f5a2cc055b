"""The hub's multiplexer (core/hub.py) and its rules (core/hub_lists.py), driven directly from tables: names and
their prefixes, cursors, merged capabilities and revisions, the URI map, and the state machine's routing of ids,
progress, cancellation, server requests, lists, list_changed and departures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.core import hub_lists, jsonrpc
from mcpgate.core.hub import COALESCE, INIT_TIMEOUT, Hub
from mcpgate.core.hub_lists import Ambiguous, UriMap
from mcpgate.core.hub_messages import CloseMember, Member, Note, Out, ToClient, ToMember, Wake

# -- names ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "ok"),
    [
        pytest.param("github", True, id="a-name"),
        pytest.param("my-server.v2", True, id="dots-and-dashes"),
        pytest.param("a_b", True, id="one-underscore-inside"),
        pytest.param("a__b", False, id="separator-inside"),
        pytest.param("a_", False, id="ends-with-underscore"),
        pytest.param("_a", False, id="starts-with-underscore"),
        pytest.param("", False, id="empty"),
        pytest.param("x" * 65, False, id="too-long"),
        pytest.param("a b", False, id="space"),
    ],
)
def test_prefix_rule(prefix: str, ok: bool) -> None:
    assert (hub_lists.prefix_problem(prefix) is None) is ok


@pytest.mark.parametrize(
    ("qualified", "parts"),
    [
        pytest.param("gh__create_issue", ("gh", "create_issue"), id="plain"),
        pytest.param("gh__a__b", ("gh", "a__b"), id="member-name-keeps-its-separator"),
        pytest.param("gh___x", ("gh", "_x"), id="member-name-starting-with-underscore"),
        pytest.param("gh__", None, id="no-member-name"),
        pytest.param("__x", None, id="no-prefix"),
        pytest.param("plain", None, id="no-separator"),
    ],
)
def test_split_at_the_first_separator(qualified: str, parts: tuple[str, str] | None) -> None:
    assert hub_lists.split(qualified) == parts
    if parts is not None:
        assert hub_lists.qualify(*parts) == qualified


def test_a_name_depends_on_its_own_prefix_alone() -> None:
    """Adding or removing a server renames no other tool: the merged page of the others is unchanged."""
    a = ("a", "a", {"tools": [{"name": "x"}]})
    b = ("b", "bee", {"tools": [{"name": "x"}]})
    with_b = hub_lists.merge_page("tools/list", [a, b]).result["tools"]
    without_b = hub_lists.merge_page("tools/list", [a]).result["tools"]
    assert [t["name"] for t in with_b] == ["a__x", "bee__x"]
    assert [t["name"] for t in without_b] == ["a__x"]


# -- cursors ---------------------------------------------------------------------------------------------------


def test_cursor_round_trip_and_kind() -> None:
    cursor = hub_lists.encode_cursor("tools/list", {"a": "p2", "b": "opaque=="})
    assert hub_lists.decode_cursor("tools/list", cursor) == {"a": "p2", "b": "opaque=="}
    assert hub_lists.decode_cursor("prompts/list", cursor) is None  # a cursor of another list


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param(None, id="not-a-string"),
        pytest.param("p2", id="a-member-cursor"),
        pytest.param("h1.!!!", id="not-base64"),
        pytest.param("h1." + "A" * (hub_lists.MAX_CURSOR + 1), id="too-long"),
        pytest.param(hub_lists.CURSOR_TAG + "W10", id="json-not-an-object"),
        pytest.param(
            "h1." + __import__("base64").urlsafe_b64encode(b'{"k":"tools/list","m":{"a":5}}').decode(), id="not-text"
        ),
        pytest.param(hub_lists.encode_cursor("tools/list", {"a": "x" * 1025}), id="member-cursor-too-long"),
    ],
)
def test_invalid_cursors(cursor: Any) -> None:
    assert hub_lists.decode_cursor("tools/list", cursor) is None


def test_merge_page_carries_members_cursors_and_cuts_overlong_ones() -> None:
    page = hub_lists.merge_page(
        "tools/list",
        [
            ("a", "a", {"tools": [{"name": "x"}], "nextCursor": "c1"}),
            ("b", "b", {"tools": "not a list"}),
            ("c", "c", {"tools": [{"name": "y"}, {"no": "name"}], "nextCursor": "z" * 2000}),
        ],
    )
    assert [t["name"] for t in page.result["tools"]] == ["a__x", "c__y"]
    assert hub_lists.decode_cursor("tools/list", page.result["nextCursor"]) == {"a": "c1"}
    assert page.cut == ("c",)


def test_resources_keep_their_names_and_uris_templates_are_namespaced() -> None:
    resources = hub_lists.merge_page("resources/list", [("a", "a", {"resources": [{"uri": "u://1", "name": "r"}]})])
    assert resources.result["resources"] == [{"uri": "u://1", "name": "r"}]
    templates = hub_lists.merge_page(
        "resources/templates/list", [("a", "a", {"resourceTemplates": [{"uriTemplate": "u://{x}", "name": "t"}]})]
    )
    assert templates.result["resourceTemplates"] == [{"uriTemplate": "u://{x}", "name": "a__t"}]


# -- initialize ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "answered", "chosen"),
    [
        pytest.param("2025-06-18", ["2025-06-18", "2025-06-18"], "2025-06-18", id="all-accept"),
        pytest.param("2025-11-25", ["2025-11-25", "2025-06-18"], "2025-06-18", id="one-older-the-oldest"),
        pytest.param("2025-11-25", [None, "2025-03-26"], "2025-03-26", id="one-without"),
        pytest.param("2025-11-25", [None], None, id="none"),
    ],
)
def test_protocol_version(requested: str, answered: list[Any], chosen: str | None) -> None:
    assert hub_lists.choose_version(requested, answered) == chosen


def test_capabilities_are_the_union() -> None:
    merged = hub_lists.merge_capabilities(
        [
            {"tools": {"listChanged": False}, "logging": {}},
            {"tools": {}, "resources": {"subscribe": True}, "completions": {}},
            "not an object",
        ]
    )
    assert merged == {
        "tools": {"listChanged": True},
        "logging": {},
        "resources": {"subscribe": True, "listChanged": True},
        "completions": {},
    }


# -- the URI map -----------------------------------------------------------------------------------------------


def test_uri_map_listed_template_fallback_ambiguous_and_bounded() -> None:
    uris = UriMap(3)
    uris.add("a", ["u://1", "u://2"])
    uris.add("b", ["u://2", "v://1"])
    uris.add_templates("a", ["doc://{id}", "doc://long/{id}"])
    uris.add_templates("b", ["doc://long/{id}"])
    assert uris.resolve("u://1") == "a"
    assert isinstance(uris.resolve("u://2"), Ambiguous)
    assert uris.resolve("doc://7") == "a"  # only a's template starts it
    tie = uris.resolve("doc://long/7")
    assert isinstance(tie, Ambiguous) and tie.members == ("a", "b")
    assert uris.resolve("w://x") is None
    assert uris.resolve("w://x", ("b",)) == "b"  # the one member that serves resources at all
    uris.add("b", ["w://1"])
    assert len(uris) == 3 and uris.resolve("u://1") is None  # the least recently listed forgotten
    uris.forget("b")
    assert uris.resolve("v://1") is None and uris.resolve("doc://long/7") == "a"


# -- the state machine -----------------------------------------------------------------------------------------

CAPS = {"tools": {}, "prompts": {}, "resources": {}}


def req(msg_id: Any, method: str, params: dict[str, Any] | None = None) -> jsonrpc.Request:
    message = jsonrpc.parse(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params or {}}))
    assert isinstance(message, jsonrpc.Request)
    return message


def note(method: str, params: dict[str, Any] | None = None) -> jsonrpc.Notification:
    body = {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}
    message = jsonrpc.parse(json.dumps(body))
    assert isinstance(message, jsonrpc.Notification)
    return message


def res(msg_id: Any, result: Any = None, error: Any = None) -> jsonrpc.Response:
    body = {"jsonrpc": "2.0", "id": msg_id, **({"error": error} if error else {"result": result})}
    message = jsonrpc.parse(json.dumps(body).encode())
    assert isinstance(message, jsonrpc.Response)
    return message


def sent(outs: list[Out]) -> dict[str, list[dict[str, Any]]]:
    """What went to each member, decoded."""
    out: dict[str, list[dict[str, Any]]] = {}
    for o in outs:
        if isinstance(o, ToMember):
            out.setdefault(o.member, []).append(json.loads(o.data))
    return out


def to_client(outs: list[Out]) -> list[dict[str, Any]]:
    """What went to the client, decoded (from the bytes that will be sent when there are some)."""
    out = []
    for o in outs:
        if isinstance(o, ToClient):
            message = o.message
            full = message.full() if isinstance(message, jsonrpc.Response) else message.obj
            out.append(json.loads(message.raw) if message.raw else full)
    return out


def ready_hub(members: tuple[str, ...] = ("a", "b"), **limits: int) -> Hub:
    hub = Hub([Member(m, m) for m in members], in_flight=limits.get("in_flight", 64), uris=limits.get("uris", 100))
    outs = hub.from_client(req(0, "initialize", {"protocolVersion": "2025-06-18"}), 0.0)
    for member, [init] in sent(outs).items():
        hub.from_member(member, res(init["id"], {"protocolVersion": "2025-06-18", "capabilities": CAPS}), 0.0)
    hub.from_client(note("notifications/initialized"), 0.0)
    return hub


def test_initialize_goes_to_every_member_and_is_answered_once_merged() -> None:
    hub = Hub([Member("a", "a"), Member("b", "bee")], in_flight=8, uris=8)
    outs = hub.from_client(req("i", "initialize", {"protocolVersion": "2025-11-25"}), 0.0)
    asked = sent(outs)
    assert set(asked) == {"a", "b"} and Wake(INIT_TIMEOUT) in outs
    assert asked["a"][0]["params"]["protocolVersion"] == "2025-11-25"
    first = hub.from_member("a", res(asked["a"][0]["id"], {"protocolVersion": "2025-11-25", "capabilities": {}}), 0)
    assert to_client(first) == []
    last = hub.from_member("b", res(asked["b"][0]["id"], {"protocolVersion": "2025-06-18", "capabilities": CAPS}), 0)
    [answer] = to_client(last)
    assert answer["id"] == "i" and answer["result"]["protocolVersion"] == "2025-06-18"
    assert answer["result"]["capabilities"]["tools"] == {"listChanged": True}


def test_a_member_silent_on_initialize_is_closed_and_the_rest_answer() -> None:
    hub = Hub([Member("a", "a"), Member("b", "b")], in_flight=8, uris=8)
    asked = sent(hub.from_client(req(1, "initialize", {"protocolVersion": "2025-06-18"}), 0.0))
    hub.from_member("a", res(asked["a"][0]["id"], {"protocolVersion": "2025-06-18", "capabilities": CAPS}), 1.0)
    outs = hub.tick(INIT_TIMEOUT + 1)
    assert any(isinstance(o, CloseMember) and o.member == "b" for o in outs)
    [answer] = to_client(outs)
    assert answer["id"] == 1 and "result" in answer
    assert hub.live() == ["a"]


def test_a_member_that_cannot_start_is_named_in_the_answer_to_a_call() -> None:
    hub = Hub([Member("a", "a"), Member("b", "b")], in_flight=8, uris=8)
    hub.unavailable("b", "it cannot start (no such file)", 0.0)
    [error] = to_client(hub.from_client(req(5, "tools/call", {"name": "b__x"}), 0.0))
    assert error["error"]["code"] == -32000 and "'b'" in error["error"]["message"]
    assert "cannot start" in error["error"]["message"] and error["error"]["data"] == {"server": "b"}


@pytest.mark.parametrize(
    ("name", "code"),
    [
        pytest.param("zz__x", jsonrpc.INVALID_PARAMS, id="unknown-prefix"),
        pytest.param("x", jsonrpc.INVALID_PARAMS, id="no-prefix"),
    ],
)
def test_unknown_names_are_unknown_tools(name: str, code: int) -> None:
    [error] = to_client(ready_hub().from_client(req(5, "tools/call", {"name": name}), 0.0))
    assert error["error"] == {"code": code, "message": f"Unknown tool: {name}"}


def test_a_call_is_routed_with_a_hub_id_and_answered_with_the_clients() -> None:
    hub = ready_hub()
    outs = hub.from_client(req("c-1", "tools/call", {"name": "b__echo", "arguments": {"x": 1}}), 0.0)
    [call] = sent(outs)["b"]
    assert call["params"] == {"name": "echo", "arguments": {"x": 1}} and isinstance(call["id"], int)
    [answer] = to_client(hub.from_member("b", res(call["id"], {"content": []}), 0.0))
    assert answer == {"jsonrpc": "2.0", "id": "c-1", "result": {"content": []}}
    assert hub.from_member("b", res(call["id"], {"content": []}), 0.0) == []  # answered once
    assert hub.from_member("a", res(call["id"] + 100, {}), 0.0) == []  # nobody's


def test_an_answer_from_the_wrong_member_is_dropped() -> None:
    hub = ready_hub()
    [call] = sent(hub.from_client(req(1, "tools/call", {"name": "b__echo"}), 0.0))["b"]
    outs = hub.from_member("a", res(call["id"], {}), 0.0)
    assert to_client(outs) == [] and any(isinstance(o, Note) for o in outs)


def test_progress_goes_on_only_for_a_token_the_member_holds() -> None:
    hub = ready_hub()
    [call] = sent(hub.from_client(req(1, "tools/call", {"name": "a__slow", "_meta": {"progressToken": "t"}}), 0.0))["a"]
    assert call["params"]["_meta"] == {"progressToken": "t"}
    progress = {"progressToken": "t", "progress": 1}
    assert to_client(hub.from_member("a", note("notifications/progress", progress), 0.0))[0]["params"] == progress
    assert hub.from_member("b", note("notifications/progress", progress), 0.0) == []  # not b's request
    hub.from_member("a", res(call["id"], {}), 0.0)
    assert hub.from_member("a", note("notifications/progress", progress), 0.0) == []  # answered: no longer held


def test_the_clients_cancel_reaches_the_member_under_the_hub_id() -> None:
    hub = ready_hub()
    [call] = sent(hub.from_client(req(9, "tools/call", {"name": "b__slow"}), 0.0))["b"]
    outs = hub.from_client(note("notifications/cancelled", {"requestId": 9, "reason": "bored"}), 0.0)
    assert sent(outs) == {
        "b": [
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": call["id"], "reason": "bored"},
            }
        ]
    }
    assert hub.from_member("b", res(call["id"], {}), 0.0) == []  # its late answer dropped


def test_a_members_request_to_the_client_and_its_answer() -> None:
    hub = ready_hub()
    [ask] = to_client(hub.from_member("b", req("srv-1", "elicitation/create", {"message": "name?"}), 0.0))
    assert ask["method"] == "elicitation/create" and isinstance(ask["id"], int)
    [back] = sent(hub.from_client(res(ask["id"], {"action": "accept"}), 0.0))["b"]
    assert back == {"jsonrpc": "2.0", "id": "srv-1", "result": {"action": "accept"}}
    assert hub.from_client(res(ask["id"], {}), 0.0) == []  # answered once
    [ask2] = to_client(hub.from_member("a", req(7, "sampling/createMessage", {}), 0.0))
    [withdrawn] = to_client(hub.from_member("a", note("notifications/cancelled", {"requestId": 7}), 0.0))
    assert withdrawn["params"]["requestId"] == ask2["id"]


def test_a_members_ping_is_answered_by_the_hub() -> None:
    [pong] = sent(ready_hub().from_member("a", req(3, "ping"), 0.0))["a"]
    assert pong == {"jsonrpc": "2.0", "id": 3, "result": {}}


def test_lists_fan_out_merge_and_page_across_members() -> None:
    hub = ready_hub()
    asked = sent(hub.from_client(req("L", "tools/list", {"_meta": {"progressToken": 5}}), 0.0))
    assert set(asked) == {"a", "b"}
    assert asked["a"][0]["params"].get("_meta", {}) == {}  # one token, several members: not passed on
    hub.from_member("a", res(asked["a"][0]["id"], {"tools": [{"name": "x"}], "nextCursor": "a2"}), 0.0)
    [page] = to_client(hub.from_member("b", res(asked["b"][0]["id"], {"tools": [{"name": "y"}]}), 0.0))
    assert [t["name"] for t in page["result"]["tools"]] == ["a__x", "b__y"]
    cursor = page["result"]["nextCursor"]
    again = sent(hub.from_client(req("L2", "tools/list", {"cursor": cursor}), 0.0))
    assert list(again) == ["a"] and again["a"][0]["params"] == {"cursor": "a2"}
    [last] = to_client(hub.from_member("a", res(again["a"][0]["id"], {"tools": [{"name": "z"}]}), 0.0))
    assert last["result"] == {"tools": [{"name": "a__z"}]}
    [bad] = to_client(hub.from_client(req("L3", "tools/list", {"cursor": "nope"}), 0.0))
    assert bad["error"]["code"] == jsonrpc.INVALID_PARAMS


def test_a_member_gone_mid_list_leaves_its_part_out() -> None:
    hub = ready_hub()
    asked = sent(hub.from_client(req(1, "prompts/list"), 0.0))
    hub.from_member("a", res(asked["a"][0]["id"], {"prompts": [{"name": "p"}]}), 0.0)
    outs = hub.member_gone("b", "it ended", 0.0)
    [page] = to_client(outs)
    assert page["result"] == {"prompts": [{"name": "a__p"}]}
    assert Wake(COALESCE) in outs  # its lists vanished: list_changed follows


def test_list_changed_is_coalesced_into_one_per_kind() -> None:
    hub = ready_hub()
    assert hub.from_member("a", note("notifications/tools/list_changed"), 0.0) == [Wake(COALESCE)]
    assert hub.from_member("b", note("notifications/tools/list_changed"), 0.1) == []
    [sent_once] = to_client(hub.tick(COALESCE))
    assert sent_once == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert to_client(hub.tick(1.0)) == []


def test_a_member_gone_fails_its_calls_and_withdraws_its_requests() -> None:
    hub = ready_hub()
    sent(hub.from_client(req("c", "tools/call", {"name": "a__slow"}), 0.0))
    [ask] = to_client(hub.from_member("a", req(1, "roots/list"), 0.0))
    outs = hub.member_gone("a", "it ended (exit 1)", 0.0)
    failed, withdrawn = to_client(outs)
    assert failed["id"] == "c" and "'a'" in failed["error"]["message"] and "exit 1" in failed["error"]["message"]
    assert withdrawn["method"] == "notifications/cancelled" and withdrawn["params"]["requestId"] == ask["id"]
    [error] = to_client(hub.from_client(req("d", "tools/call", {"name": "a__slow"}), 0.0))
    assert "not available: it ended (exit 1)" in error["error"]["message"]


def test_resources_route_by_the_uri_map_the_hub_fills_itself() -> None:
    hub = Hub([Member("a", "a"), Member("b", "b")], in_flight=64, uris=100)
    asked = sent(hub.from_client(req(0, "initialize", {}), 0.0))
    for member, [init] in asked.items():
        hub.from_member(member, res(init["id"], {"protocolVersion": "2025-06-18", "capabilities": CAPS}), 0.0)
    primes = sent(hub.from_client(note("notifications/initialized"), 0.0))
    for member, messages in primes.items():
        for m in messages:
            if m["method"] == "resources/list":
                uris = [{"uri": f"{member}://only"}, {"uri": "shared://x"}]
                hub.from_member(member, res(m["id"], {"resources": uris}), 0.0)
            elif m["method"] == "resources/templates/list":
                hub.from_member(member, res(m["id"], {"resourceTemplates": []}), 0.0)
    [read] = sent(hub.from_client(req(1, "resources/read", {"uri": "b://only"}), 0.0))["b"]
    assert read["params"] == {"uri": "b://only"}
    [ambiguous] = to_client(hub.from_client(req(2, "resources/read", {"uri": "shared://x"}), 0.0))
    assert ambiguous["error"]["data"] == {"uri": "shared://x", "servers": ["a", "b"]}
    [missing] = to_client(hub.from_client(req(3, "resources/read", {"uri": "c://none"}), 0.0))
    assert missing["error"]["code"] == -32002


def test_in_flight_is_bounded() -> None:
    hub = ready_hub(in_flight=2)
    sent(hub.from_client(req(1, "tools/call", {"name": "a__x"}), 0.0))
    sent(hub.from_client(req(2, "tools/call", {"name": "a__x"}), 0.0))
    [refused] = to_client(hub.from_client(req(3, "tools/call", {"name": "a__x"}), 0.0))
    assert "MCPGATE_HUB_IN_FLIGHT" in refused["error"]["message"]
    [refused_list] = to_client(hub.from_client(req(4, "tools/list"), 0.0))
    assert "error" in refused_list


def test_a_large_answer_is_spliced_not_reencoded() -> None:
    hub = ready_hub()
    [call] = sent(hub.from_client(req("big", "tools/call", {"name": "a__x"}), 0.0))["a"]
    raw = (
        b'{"jsonrpc":"2.0","id":'
        + str(call["id"]).encode()
        + b',"result":{"content":[{"type":"text","text":"'
        + b"x" * 300_000
        + b'"}]}}'
    )
    message = jsonrpc.parse_line(raw)
    assert isinstance(message, jsonrpc.Response) and message.partial
    [out] = [o for o in hub.from_member("a", message, 0.0) if isinstance(o, ToClient)]
    assert out.message.id == "big" and out.message.raw is not None
    assert out.message.raw.startswith(b'{"jsonrpc":"2.0","id":"big","result"') and len(out.message.raw) > 300_000


def test_a_tool_its_server_hides_is_hidden_on_the_aggregate_too() -> None:
    from mcpgate.core.tool_filter import ToolFilter

    hub = Hub([Member("a", "a", ToolFilter.of((), ("secret",))), Member("b", "b")], in_flight=64, uris=10)
    asked = sent(hub.from_client(req(0, "initialize", {}), 0.0))
    for member, [init] in asked.items():
        hub.from_member(member, res(init["id"], {"protocolVersion": "2025-06-18", "capabilities": CAPS}), 0.0)
    [hidden] = to_client(hub.from_client(req(1, "tools/call", {"name": "a__secret"}), 0.0))
    assert hidden["error"] == {"code": jsonrpc.INVALID_PARAMS, "message": "Unknown tool: a__secret"}
    listed = sent(hub.from_client(req(2, "tools/list"), 0.0))
    hub.from_member("a", res(listed["a"][0]["id"], {"tools": [{"name": "secret"}, {"name": "open"}]}), 0.0)
    [page] = to_client(hub.from_member("b", res(listed["b"][0]["id"], {"tools": [{"name": "secret"}]}), 0.0))
    assert [t["name"] for t in page["result"]["tools"]] == ["a__open", "b__secret"]


def test_the_clients_progress_on_a_members_request_reaches_that_member_under_its_own_token() -> None:
    hub = ready_hub()
    asked_a = to_client(hub.from_member("a", req(1, "sampling/createMessage", {"_meta": {"progressToken": "p"}}), 0))
    asked_b = to_client(hub.from_member("b", req(1, "sampling/createMessage", {"_meta": {"progressToken": "p"}}), 0))
    token_a, token_b = asked_a[0]["params"]["_meta"]["progressToken"], asked_b[0]["params"]["_meta"]["progressToken"]
    assert token_a != token_b  # one token of two members: two tokens for the client
    outs = hub.from_client(note("notifications/progress", {"progressToken": token_b, "progress": 1}), 0.0)
    assert sent(outs) == {
        "b": [{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "p", "progress": 1}}]
    }
    assert hub.from_client(note("notifications/progress", {"progressToken": 999, "progress": 1}), 0.0) == []


def test_the_clients_own_resource_lists_fill_the_uri_map_too() -> None:
    hub = ready_hub()  # its own priming requests never answered
    asked = sent(hub.from_client(req("r", "resources/list"), 0.0))
    hub.from_member("a", res(asked["a"][0]["id"], {"resources": [{"uri": "x://1"}]}), 0.0)
    hub.from_member("b", res(asked["b"][0]["id"], {"resources": []}), 0.0)
    [read] = sent(hub.from_client(req(1, "resources/read", {"uri": "x://1"}), 0.0))["a"]
    assert read["params"] == {"uri": "x://1"}


def test_a_member_refusing_initialize_is_closed_and_a_second_initialize_refused() -> None:
    hub = Hub([Member("a", "a"), Member("b", "b")], in_flight=8, uris=8)
    asked = sent(hub.from_client(req(1, "initialize", {"protocolVersion": "2025-06-18"}), 0.0))
    hub.from_member("a", res(asked["a"][0]["id"], {"protocolVersion": "2025-06-18", "capabilities": CAPS}), 0.0)
    outs = hub.from_member("b", res(asked["b"][0]["id"], error={"code": -32602, "message": "no such version"}), 0.0)
    assert CloseMember("b", "refused initialize (no such version)") in outs
    [answer] = to_client(outs)
    assert answer["result"]["protocolVersion"] == "2025-06-18" and hub.live() == ["a"]
    [again] = to_client(hub.from_client(req(2, "initialize", {}), 0.0))
    assert again["error"]["code"] == jsonrpc.INVALID_REQUEST
