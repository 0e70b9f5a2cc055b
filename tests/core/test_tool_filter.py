"""core/tool_filter: which tools a server shows, the answer to a hidden tool's call, and tools/list results
rewritten (only when their bytes may name a hidden tool)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Request, Response
from mcpgate.core.tool_filter import ToolFilter

TOOLS = ["read_file", "write_file", "edit_file", "list_directory"]


def listing(names: list[Any], **extra: Any) -> dict[str, Any]:
    return {"tools": [{"name": name, "inputSchema": {"type": "object"}} for name in names], **extra}


def response(result: Any, msg_id: Any = 7) -> Response:
    raw = jsonrpc.encode({"jsonrpc": "2.0", "id": msg_id, "result": result})
    message = jsonrpc.parse_line(raw)
    assert isinstance(message, Response)
    return message


def names(message: Response) -> list[str]:
    return [tool["name"] for tool in message.full()["result"]["tools"]]


def only(allow: tuple[str, ...] = (), deny: tuple[str, ...] = ()) -> ToolFilter:
    tools = ToolFilter.of(allow, deny)
    assert tools is not None
    return tools


def test_no_lists_no_filter() -> None:
    assert ToolFilter.of((), ()) is None
    assert ToolFilter.of(("",), ("",)) is None  # empty names from a trailing comma name nothing


def test_one_filter_per_pair_of_lists() -> None:
    assert ToolFilter.of(("a",), ("b",)) is ToolFilter.of(("a",), ("b",))


@pytest.mark.parametrize(
    ("allow", "deny", "shown"),
    [
        ((), ("write_file", "edit_file"), ["read_file", "list_directory"]),
        (("read_file", "list_directory"), (), ["read_file", "list_directory"]),
        (("read_file", "write_file"), ("write_file",), ["read_file"]),  # deny wins over allow
        (("nothing_of_these",), (), []),
    ],
)
def test_visible(allow: tuple[str, ...], deny: tuple[str, ...], shown: list[str]) -> None:
    tools = only(allow, deny)
    assert [name for name in TOOLS if tools.visible(name)] == shown


def call(name: Any, method: str = "tools/call", msg_id: Any = 3) -> Request:
    message = jsonrpc.parse(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {"name": name}}))
    assert isinstance(message, Request)
    return message


def test_a_call_of_a_hidden_tool_and_what_answers_it() -> None:
    tools = only(deny=("write_file",))
    assert tools.hidden_call(call("write_file")) == "write_file"
    assert tools.hidden_call(call("read_file")) is None
    assert tools.hidden_call(call("write_file", method="prompts/get")) is None
    assert tools.hidden_call(call(["write_file"])) is None  # no name: the server answers it
    assert tools.refusal("x", "write_file") == {
        "jsonrpc": "2.0",
        "id": "x",
        "error": {"code": -32602, "message": "Unknown tool: write_file"},
    }


def test_an_allow_list_hides_a_call_of_an_empty_name() -> None:
    assert only(allow=("read_file",)).hidden_call(call("")) == ""


def test_hidden_tools_leave_the_listing_and_the_rest_stays() -> None:
    tools = only(deny=("write_file", "edit_file"))
    message = response(listing(TOOLS, nextCursor="page-2", _meta={"k": 1}))
    shown = tools.response(message)
    assert shown is not None and shown is not message
    assert names(shown) == ["read_file", "list_directory"]
    result = shown.full()["result"]
    assert result["nextCursor"] == "page-2" and result["_meta"] == {"k": 1}
    assert shown.full()["id"] == 7 and shown.id == 7
    assert json.loads(jsonrpc.raw_bytes(shown)) == shown.full()


def test_a_listing_that_hides_nothing_passes_as_it_came() -> None:
    tools = only(deny=("write_file",))
    message = response(listing(["read_file"]))
    assert not tools.may_hide(message.raw)  # decided on the bytes
    assert tools.response(message) is message
    assert only(allow=("read_file",)).response(message) is message  # decoded, nothing hidden


def test_a_deny_list_decides_on_the_bytes_only_when_that_is_sure() -> None:
    tools = only(deny=("write_file",))
    assert tools.may_hide(b'{"tools":[{"name":"write_file"}]}')
    assert tools.may_hide(b'{"tools":[{"name":"write\\u005ffile"}]}')  # an escape may spell it
    assert tools.may_hide(None)
    assert not tools.may_hide(b'{"tools":[{"name":"write_files"}]}')
    assert only(allow=("read_file",)).may_hide(b'{"tools":[]}')  # an allow list is read on the objects
    assert only(deny=("a b",)).may_hide(b'{"tools":[]}')  # a name of other characters too


def test_an_escaped_name_is_still_hidden() -> None:
    tools = only(deny=("write_file",))
    raw = b'{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"write\\u005ffile"},{"name":"read_file"}]}}'
    message = jsonrpc.parse_line(raw)
    assert isinstance(message, Response)
    shown = tools.response(message)
    assert shown is not None and names(shown) == ["read_file"]


def test_a_large_listing_classified_from_its_head_is_filtered() -> None:
    many = [f"tool_{i}" for i in range(6000)] + ["write_file"]
    message = response(listing(many, nextCursor="c"))
    assert message.partial  # parse_line did not decode it
    shown = only(deny=("write_file",)).response(message)
    assert shown is not None and names(shown) == many[:-1]
    assert shown.full()["result"]["nextCursor"] == "c"


def test_entries_without_a_name() -> None:
    result = {"tools": [{"name": "read_file"}, {"title": "no name"}, "junk", {"name": 5}]}
    assert only(deny=("write_file",)).result(result) is result
    assert only(allow=("read_file",)).result(result) == {"tools": [{"name": "read_file"}]}


@pytest.mark.parametrize("result", [None, [], "tools", {"tools": None}, {"tools": {"name": "write_file"}}, {}])
def test_a_result_that_is_no_listing_cannot_be_read(result: Any) -> None:
    tools = only(deny=("write_file",))
    assert tools.result(result) is None
    raw = jsonrpc.encode({"jsonrpc": "2.0", "id": 1, "result": result, "note": "write_file"})
    message = Response(1, json.loads(raw), raw)
    assert tools.response(message) is None


def test_an_error_passes() -> None:
    error = jsonrpc.encode(jsonrpc.error_response(1, -32603, "write_file broke"))
    message = jsonrpc.parse_line(error)
    assert isinstance(message, Response)
    assert only(deny=("write_file",)).response(message) is message
