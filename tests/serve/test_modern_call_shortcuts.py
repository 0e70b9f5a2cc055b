"""A pooled call's record and the request its child gets, made by the shortcuts of serve/modern (calls.new_call's
reading of the params, start_call's request put together by core/modern_rewrites.child_request), are what the full path
gives: a table of client requests, each on a legacy and a modern child, with and without a progress token. A
child's answer taken by _on_message's shortcut (a call's minted id looked up first) reaches what _on_response's
full path reaches."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from mcpgate.core import jsonrpc, modern_rewrites, mrtr, wire
from mcpgate.core.jsonrpc import Request
from mcpgate.serve.front import auth
from mcpgate.serve.front.context import CONTEXT, RequestContext
from mcpgate.serve.front.reply import SOCKET, Client
from mcpgate.serve.modern.calls import Call, new_call
from mcpgate.serve.modern.pooled_child import Era, PooledChild
from mcpgate.serve.modern.stateless import caller
from mcpgate.serve.sessions.spec import ChildSpec
from mcpgate.serve.sessions.stream import Stream, StreamLimits
from tests.support.pooled import never_started

LIMITS = StreamLimits(messages=8, bytes=1 << 16, stall_timeout=5.0, replay_events=0, replay_bytes=0)
REQUEST_META = {wire.META_PROTOCOL_VERSION: "2026-07-28", wire.META_CLIENT_CAPABILITIES: {}}

PARAMS: list[Any] = [
    {"name": "echo", "arguments": {"message": "hello"}, "_meta": REQUEST_META},
    {"name": "echo", "arguments": {"message": "hello"}},
    {"name": "caf\u00e9", "arguments": {"t": "a\nb\ud800"}, "_meta": {**REQUEST_META, "progressToken": 3}},
    {"name": "p", "_meta": {**REQUEST_META, "progressToken": "tok", wire.META_LOG_LEVEL: "info"}},
    {"name": "p", "_meta": {"progressToken": True}},  # not a legal token
    {"name": "p", "_meta": {"progressToken": 1.5, wire.META_LOG_LEVEL: 7}},
    {"name": "p", "_meta": {"progressToken": None, "other": 1}},
    {"name": 5, "_meta": []},
    {"uri": "file:///x", "_meta": {**REQUEST_META, "progressToken": -2}},
    {"taskId": "t-1", "_meta": REQUEST_META},
    {},
    [1, 2],
    None,
]
METHODS = ["tools/call", "prompts/get", "resources/read", "tools/list", "tasks/get", "completion/complete", "x/y"]


def request(method: str, params: Any) -> Request:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        obj["params"] = params
    parsed = jsonrpc.parse(json.dumps(obj).encode())
    assert isinstance(parsed, Request)
    return parsed


class Pipe:
    """The child's process as start_call uses it: what it was sent."""

    alive = True
    pid = None

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> bool:
        self.sent.append(data)
        return True


def pooled(era: Era) -> tuple[PooledChild, Pipe]:
    child = never_started(era)
    pipe = Pipe()
    child.child = pipe  # type: ignore[assignment]
    return child, pipe


def expected_record(message: Request) -> tuple[Any, ...]:
    """What the call records of its request, read the full way (mrtr.call_name, jsonrpc.progress_token)."""
    params = message.params if isinstance(message.params, dict) else None
    name = mrtr.call_name(message.method, params) if params is not None else None
    meta = params.get("_meta") if params is not None else None
    level = meta.get(wire.META_LOG_LEVEL) if isinstance(meta, dict) else None
    return (
        message.id,
        message.method,
        name if isinstance(name, str) else None,
        level if isinstance(level, str) else None,
        jsonrpc.progress_token(message),
    )


def expected_bytes(child: PooledChild, message: Request, call: Call) -> bytes:
    """The request the child gets, built the full way: the params rewritten, the message encoded whole."""
    params = message.params if isinstance(message.params, dict) else None
    if params is not None and not child.modern:
        params = modern_rewrites.legacy_params(params)
    if params is not None and call.client_token is not None:
        params = {**params, "_meta": {**(params.get("_meta") or {}), "progressToken": call.minted_token}}
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": call.minted, "method": message.method}
    if params is not None:
        out["params"] = params
    return jsonrpc.encode(out)


@pytest.mark.parametrize(("method", "params", "era"), list(itertools.product(METHODS, PARAMS, list(Era))))
def test_call_and_child_request_as_the_full_path(method: str, params: Any, era: Era) -> None:
    message = request(method, params)
    call = new_call(message, "static", {"c": 1}, Stream(LIMITS, expected=1), bridged=True, tools=None)
    record = (call.client_id, call.method, call.name, call.log_level, call.client_token)
    assert record == expected_record(message)
    assert call.minted.startswith("mcpgate-") and call.minted[8:].isdigit()
    assert (call.principal, call.capabilities, call.bridged, call.finished, call.parked) == (
        "static",
        {"c": 1},
        True,
        False,
        False,
    )
    assert call.waiting is None and call.waiting_bytes == 0 and call.child is None and call.audit is None
    child, pipe = pooled(era)
    assert child.start_call(message, call)
    assert pipe.sent == [expected_bytes(child, message, call)]
    assert json.loads(pipe.sent[0])["id"] == call.minted
    assert child.calls == {call.minted: call} and call.child is child and child.bridged_calls == 1
    child.release(call)
    assert child.calls == {} and child.bridged_calls == 0 and call.finished


ANSWERS = [  # (what the child answers, with {call} and {own} standing for the minted ids)
    b'{"jsonrpc":"2.0","id":"{call}","result":{"content":[{"type":"text","text":"hi"}],"isError":false}}',
    b'{"jsonrpc":"2.0","id":"{call}","result":{}}',
    b'{"jsonrpc":"2.0","id":"{call}","error":{"code":-32602,"message":"no"}}',
    b'{"jsonrpc":"2.0","id":"{own}","result":{"tools":[]}}',
    b'{"jsonrpc":"2.0","id":"{own}","error":{"code":-1,"message":"no"}}',
    b'{"jsonrpc":"2.0","id":"mcpgate-0","result":{}}',  # late or unknown
    b'{"jsonrpc":"2.0","id":7,"result":{}}',  # not a minted id
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}',
]


def routed(raw: bytes, shortcut: bool) -> tuple[Any, ...]:
    """What a child's answer reaches: the call's stream, the gateway's own request, neither."""
    child, _pipe = pooled(Era.LEGACY)
    call = new_call(request("tools/call", PARAMS[0]), "static", {}, Stream(LIMITS, expected=1))
    assert child.start_call(request("tools/call", PARAMS[0]), call)
    own: list[Any] = []
    minted = child.request("tools/list", {}, own.append)
    assert minted is not None
    message = jsonrpc.parse_line(raw.replace(b"{call}", call.minted.encode()).replace(b"{own}", minted.encode()))
    assert isinstance(message, jsonrpc.Response)
    if shortcut:
        child._on_message(message)
    else:
        child._on_response(message)  # the full path: the gateway's own requests first, then the calls
    data = getattr(call.stream.next(0), "data", None)
    names = {call.minted: "call", minted: "own"}  # (minted ids differ from one run to the next)
    own = [{**answer, "id": names.get(answer.get("id"), answer.get("id"))} for answer in own]
    return (
        data,
        own,
        call.finished,
        call.error_code,
        [names[key] for key in child.calls],
        [names[key] for key in child._own],
    )


@pytest.mark.parametrize("raw", ANSWERS)
def test_answer_routed_as_the_full_path(raw: bytes) -> None:
    assert routed(raw, shortcut=True) == routed(raw, shortcut=False)


DEFAULTS = {  # the members new_call starts at one value, whatever the request
    "minted_token": None,
    "continuation": None,
    "finished": False,
    "waiting": None,
    "waiting_bytes": 0,
    "child": None,
    "error_code": None,
    "task_id": None,
    "audit": None,
}


@pytest.mark.parametrize(("method", "params"), list(itertools.product(METHODS[:3], PARAMS)))
def test_new_call_sets_every_member_as_the_core_reads_the_request(method: str, params: Any) -> None:
    """new_call, the one maker of a Call, sets each of its members: what it reads of the request as the core's
    readers read it (mrtr.call_name, jsonrpc.progress_token, the _meta log level), the rest as given or at rest."""
    stream, responses = Stream(LIMITS, expected=1), {"k": {"v": 1}}
    tools: Any = object()  # (a filter stands in)
    message = request(method, params)
    made = new_call(message, "p", {"c": 1}, stream, bridged=True, input_responses=responses, tools=tools)
    other = new_call(message, "p", {"c": 1}, stream)
    name = mrtr.call_name(method, params)
    meta = params.get("_meta") if isinstance(params, dict) else None
    level = meta.get(wire.META_LOG_LEVEL) if isinstance(meta, dict) else None
    expected = {
        "client_id": message.id,
        "method": method,
        "name": name if isinstance(name, str) else None,
        "stream": stream,
        "principal": "p",
        "capabilities": {"c": 1},
        "log_level": level if isinstance(level, str) else None,
        "client_token": jsonrpc.progress_token(message),
        "bridged": True,
        "input_responses": responses,
        "tools": tools,
        **DEFAULTS,
    }
    assert set(expected) | {"minted", "sent"} == set(Call.__slots__)
    assert {member: getattr(made, member) for member in expected} == expected
    assert made.minted.startswith("mcpgate-") and made.minted != other.minted
    assert 0 <= other.sent - made.sent < 60.0
    assert (other.bridged, other.input_responses, other.tools) == (False, None, None)


def _probe() -> bool:
    return False


@pytest.mark.parametrize(
    "environ",
    [
        {},  # no context yet: one is made
        {CONTEXT: RequestContext()},
        {CONTEXT: RequestContext(principal="alice", peer_gone=_probe)},
        {CONTEXT: RequestContext(principal=""), SOCKET: object()},
        {CONTEXT: "not a context", SOCKET: None},
    ],
)
def test_caller_reads_what_principal_and_client_of_read(environ: dict[str, Any]) -> None:
    """stateless.caller: auth.principal's principal and Client.of's connection, the context read once."""
    expected_principal = auth.principal(dict(environ))
    expected = Client.of(dict(environ))
    principal, client = caller(environ)
    assert principal == expected_principal
    assert (client._sock, client._probe, client.departed) == (expected._sock, expected._probe, expected.departed)
    assert isinstance(environ[CONTEXT], RequestContext)  # made when missing, as context() makes it


TEXT_IDS = ["a", "req-1", "", "caf\u00e9 \U0001f600", 'q"uote\\back/slash', "\x00\x1f\n\t\x7f\u2028", "lone\ud800", "7"]


@pytest.mark.parametrize("client_id", TEXT_IDS)
def test_a_spliced_answer_names_a_text_id_as_json_writes_it(client_id: str) -> None:
    """A result spliced for a client whose id is a text: the id's bytes are json's (msgspec's, or json's own for a
    lone surrogate, which msgspec refuses)."""
    child, _pipe = pooled(Era.LEGACY)
    message = jsonrpc.parse(json.dumps({"jsonrpc": "2.0", "id": client_id, "method": "tools/call"}).encode())
    assert isinstance(message, Request)
    call = new_call(message, "static", {}, Stream(LIMITS, expected=1))
    assert child.start_call(message, call)
    answer = b'{"jsonrpc":"2.0","id":"%s","result":{"content":[]}}' % call.minted.encode()
    child._on_message(jsonrpc.parse_line(answer))
    data = call.stream.next(0).data  # type: ignore[union-attr]
    head = b'{"jsonrpc":"2.0","id":' + jsonrpc.encode(client_id) + b',"result":{"content":[]'
    assert data.startswith(head), data
    assert json.loads(data)["id"] == client_id


class _Readerless:
    """A child process with no reader of its own to pump (as a remote server's child is)."""

    alive = True
    pid = None


class _ReaderlessSpec(ChildSpec):
    def process(self, **_kwargs: Any) -> Any:
        return _Readerless()


@pytest.mark.parametrize("spec", [ChildSpec(("true",), None, None, "inherit", 1 << 20, 1 << 20, 1.0, 1.0), None])
def test_a_childs_pump_is_bound_once_as_start_read_it(spec: ChildSpec | None) -> None:
    """PooledChild.pump, what stateless.start gives each call's stream, is getattr(child.child, "pump", None), the
    reading it spares: a stdio process's own pump, and None for a process that has none."""
    made = spec or _ReaderlessSpec(("true",), None, None, "inherit", 1 << 20, 1 << 20, 1.0, 1.0)
    child = never_started(spec=made)
    spared = getattr(child.child, "pump", None)
    assert child.pump == spared
    assert (spared is None) is (spec is None)
