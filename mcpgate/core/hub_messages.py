"""The hub's messages: what its state machine (core/hub.py) tells its driver to do, and the JSON-RPC it builds.

`ToClient` (a message for the client), `ToMember` (bytes for a member), `CloseMember`, `Wake` (call `tick` after
that many seconds), `Retry` (call `retry` for that member after that many seconds, replacing any timer of its
own), `StartMember` (start a new child for that member, then call `started` or `unavailable`), `Back` (that
member is part of the endpoint again: other hubs waiting for the same server may try it at once) and `Note` (a
line for the log) are the outputs; the functions build answers and requests,
and give a member's answer the client's id (splicing the bytes of a large one instead of encoding it again).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from mcpgate.core import json_extent, jsonrpc
from mcpgate.core.jsonrpc import Id, IdKey, Notification, Request, Response
from mcpgate.core.tool_filter import ToolFilter


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    prefix: str
    tools: ToolFilter | None = None  # the server's own tool lists (its allow/deny): what it hides stays hidden


@dataclass(frozen=True, slots=True)
class ToClient:
    message: Request | Notification | Response


@dataclass(frozen=True, slots=True)
class ToMember:
    member: str
    data: bytes


@dataclass(frozen=True, slots=True)
class CloseMember:
    member: str
    reason: str


@dataclass(frozen=True, slots=True)
class Wake:
    delay: float


@dataclass(frozen=True, slots=True)
class Retry:
    member: str
    delay: float


@dataclass(frozen=True, slots=True)
class StartMember:
    member: str


@dataclass(frozen=True, slots=True)
class Back:
    member: str


@dataclass(frozen=True, slots=True)
class Note:
    text: str


Out = ToClient | ToMember | CloseMember | Wake | Retry | StartMember | Back | Note


@dataclass(slots=True)
class Fan:
    """A client request asked of several members (or the hub's own list): their answers so far."""

    method: str
    client_id: Id | None  # None: the hub's own request (priming the URI map)
    params: dict[str, Any]
    waiting: set[str]
    answers: dict[str, object] = field(default_factory=dict)
    pages: int = 1


@dataclass(slots=True)
class Pending:
    member: str
    sent: float
    client_id: Id | None = None  # a routed request's
    token: IdKey | None = None  # its progress token
    fan: Fan | None = None


class ServerRequests:
    """The members' requests to the client in flight, under the hub ids the client sees, both ways; a request's
    progress token is the hub id too (two members may use one token), mapped back for the client's progress."""

    def __init__(self) -> None:
        self._by_hub: dict[int, tuple[str, Id]] = {}  # hub id -> (member, its request id)
        self._by_member: dict[tuple[str, IdKey], int] = {}
        self._tokens: dict[int, Id] = {}  # hub id -> the member's own progress token

    def progress(self, token: object) -> tuple[str, Id] | None:
        """(member, its own token) for the client's progress on a member's request; None for another token."""
        if not isinstance(token, int) or isinstance(token, bool):
            return None
        held, own = self._by_hub.get(token), self._tokens.get(token)
        return (held[0], own) if held is not None and own is not None else None

    def __len__(self) -> int:
        return len(self._by_hub)

    def add(self, hub_id: int, member: str, request: Request) -> Request:
        """The member's request as the client sees it: the hub id, and the hub id as its progress token."""
        self._by_hub[hub_id] = (member, request.id)
        self._by_member[(member, jsonrpc.id_key(request.id))] = hub_id
        obj = {**request.obj, "id": hub_id}
        token = jsonrpc.progress_token(request)
        if token is not None:
            self._tokens[hub_id] = token
            params = request.params
            obj["params"] = {**params, "_meta": {**params["_meta"], "progressToken": hub_id}}
        return Request(hub_id, request.method, obj.get("params"), obj)

    def answered(self, hub_id: int) -> tuple[str, Id] | None:
        """(member, its id) of the request the client answered; None when it is none in flight."""
        held = self._by_hub.pop(hub_id, None)
        self._tokens.pop(hub_id, None)
        if held is not None:
            self._by_member.pop((held[0], jsonrpc.id_key(held[1])), None)
        return held

    def withdrawn(self, member: str, member_id: object) -> int | None:
        """The hub id of the request the member cancelled; None when it is none in flight."""
        if not jsonrpc.is_valid_id(member_id):
            return None
        hub_id = self._by_member.pop((member, jsonrpc.id_key(member_id)), None)
        if hub_id is not None:
            self._by_hub.pop(hub_id, None)
            self._tokens.pop(hub_id, None)
        return hub_id

    def of(self, member: str) -> list[int]:
        """The hub ids of a departed member's requests, forgotten."""
        ids = [hub_id for hub_id, (m, _) in self._by_hub.items() if m == member]
        for hub_id in ids:
            self.answered(hub_id)
        return ids


@dataclass(slots=True)
class MemberState:
    prefix: str
    gone: str | None = None  # why it is not available
    capabilities: dict[str, Any] | None = None  # set once it answered initialize
    tools: ToolFilter | None = None
    # while gone (core/hub_retry.py): "waiting" for its Retry, "starting" (StartMember out), "joining" (a new
    # child started, the hub's initialize out); "" while it is part of the endpoint
    phase: str = ""
    retry_at: float | None = None  # when it is tried again (while waiting)
    failures: int = 0  # attempts failed in a row: the next backoff
    joined: float | None = None  # when it last (re)joined


def get(obj: object, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def why(error: object) -> str:
    return str(get(error, "message") or "an error")


def jsonrpc_result(request_id: Id, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def response(request_id: Id, result: dict[str, Any]) -> Response:
    return Response(request_id, jsonrpc_result(request_id, result))


def answer(request_id: Id, result: dict[str, Any]) -> ToClient:
    return ToClient(response(request_id, result))


def error_response(request_id: Id, code: int, text: str, data: Any = None) -> dict[str, Any]:
    return jsonrpc.error_response(request_id, code, text, data)


def error(request_id: Id, code: int, text: str, data: Any = None) -> ToClient:
    return ToClient(Response(request_id, error_response(request_id, code, text, data)))


def note_obj(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def notification(method: str, params: dict[str, Any]) -> Notification:
    return Notification(method, params, note_obj(method, params))


def encode_note(method: str, params: dict[str, Any]) -> bytes:
    return jsonrpc.encode(note_obj(method, params))


def encode_request(hub_id: int, method: str, params: dict[str, Any]) -> bytes:
    return jsonrpc.encode({"jsonrpc": "2.0", "id": hub_id, "method": method, "params": params})


def with_id(message: Response, new_id: Id) -> bytes:
    return jsonrpc.encode({**message.full(), "id": new_id})


def renamed_response(message: Response, client_id: Id) -> Response:
    """A member's answer under the client's id: its bytes spliced when they are laid out as the usual answer (a
    large result is not encoded again: splice_id), else encoded."""
    raw = message.raw
    if raw is not None:
        spliced = splice_id(raw, client_id, message.partial)
        if spliced is not None:
            head = {"jsonrpc": "2.0", "id": client_id, ("error" if message.is_error else "result"): None}
            obj = head if message.partial else {**message.obj, "id": client_id}
            return Response(client_id, obj, spliced, partial=message.partial)
    obj = {**message.full(), "id": client_id}
    return Response(client_id, obj)


# The head of a response as the common SDKs write it, up to the end of its id; then its one member's name.
_HEAD = re.compile(
    rb'\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?(?:0|[1-9][0-9]*)|"(?:[^"\\\x00-\x1f]|\\.)*")\s*,'
)
_MEMBER = re.compile(rb'[ \t\n\r]*"(?:result|error)"[ \t\n\r]*:[ \t\n\r]*')
_TAIL = re.compile(rb"[ \t\n\r]*\}[ \t\n\r]*")  # what follows the member's value: the message's end
_SPACE = b" \t\n\r"
# A large answer's walk (json_extent) takes at most one step for this many bytes, and never fewer than the minimum.
_BYTES_A_STEP, _STEPS_AT_LEAST = 256, 1024


def splice_id(raw: bytes, new_id: Id, partial: bool) -> bytes | None:
    """These response bytes with another id, when they are laid out as {"jsonrpc":"2.0","id":ID,"result" (or
    "error"): VALUE} (whitespace aside); else None, and the caller encodes the decoded answer. VALUE must be the one
    value up to the message's last brace: a decoding keeps a repeated member's last value and shows nothing of the
    first, so an answer repeating its id after its result (which the client would read last) is not spliced.
    Checked by json_extent.sole_value for a decoded answer, and for one read by its head alone (`partial`: a large
    result never decoded) by walking its value (json_extent, bounded; an unknown end: not spliced)."""
    head = _HEAD.match(raw)
    if head is None:
        return None
    member = _MEMBER.match(raw, head.end())
    if member is None:
        return None
    start = member.end()
    if partial:
        end = json_extent.value_end(raw, start, max(_STEPS_AT_LEAST, len(raw) // _BYTES_A_STEP))
        if end is None or _TAIL.fullmatch(raw, end) is None:
            return None
    else:
        last = len(raw.rstrip(_SPACE)) - 1  # the message's closing brace
        if last <= start or raw[last] != ord("}") or not json_extent.sole_value(raw, start, last):
            return None
    return raw[: head.start(1)] + json.dumps(new_id).encode() + raw[head.end(1) :]
