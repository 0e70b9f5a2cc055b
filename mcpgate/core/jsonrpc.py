"""JSON-RPC 2.0 classification and error builders.

parse() turns one encoded message into a Request, Notification, Response, Batch
or Invalid. Ids are kept exactly as sent (the string "1" and the integer 1 are
different ids); id_key() gives a hashable key that keeps them apart. The raw
bytes travel with each message so a gateway can forward what it does not change
without encoding it again. A message parsed from a line the stdio splitter
vouched for (parse_line's `bare`, from LineDecoder.bare) also names those bytes
as `bare`: they hold no CR or LF, so raw_bytes hands them on without a search.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Implementation-defined codes (the -32000 range is the legacy server-error range).
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
# MCP's code for a protocol revision the server does not serve (error.data lists the supported ones).
UNSUPPORTED_PROTOCOL_VERSION = -32022
# Outside the reserved range, as the SDKs use it for a request the client cancelled.
REQUEST_CANCELLED = -32800

Id = str | int
IdKey = tuple[str, str | int]


@dataclass(slots=True)
class Request:
    id: Id
    method: str
    params: Any
    obj: dict[str, Any]
    raw: bytes | None = None
    bare: bytes | None = None  # raw as parsed, when known to hold no CR or LF (a newer raw is searched again)


@dataclass(slots=True)
class Notification:
    method: str
    params: Any
    obj: dict[str, Any]
    raw: bytes | None = None
    bare: bytes | None = None


@dataclass(slots=True)
class Response:
    id: Id | None
    obj: dict[str, Any]
    raw: bytes | None = None
    # Classified from its head alone (see parse_line): obj holds no result or error value; raw has it all.
    partial: bool = False
    bare: bytes | None = None

    @property
    def is_error(self) -> bool:
        return "error" in self.obj

    def full(self) -> dict[str, Any]:
        """The whole message, decoding the raw bytes when only the head was read."""
        if self.partial and self.raw is not None:
            decoded: Any = _REFUSED
            if _FAST_LOADS is not None:  # msgspec first, as in parse
                try:
                    decoded = _FAST_LOADS(self.raw)
                except (ValueError, RecursionError):
                    pass
            if decoded is _REFUSED:
                decoded = json.loads(self.raw)
            if isinstance(decoded, dict):
                return decoded
        return self.obj


@dataclass(slots=True)
class Invalid:
    code: int
    reason: str
    id: Id | None = None


@dataclass(slots=True)
class Batch:
    items: list[Message] = field(default_factory=list)


Message = Request | Notification | Response | Invalid | Batch


def is_valid_id(value: object) -> TypeGuard[Id]:
    """A request id: a string or an integer (never a bool, a float or null)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def id_key(value: Id) -> IdKey:
    """A hashable key that keeps "1" and 1 apart."""
    return ("s", value) if isinstance(value, str) else ("n", value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder for every message (json.loads with options would build a new one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_SCAN: Any = _DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__ (the C scanner)
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as json.decoder's WHITESPACE
_LEADING = frozenset(" \t\n\r")  # a text starting with one of these has whitespace to skip (with "": nothing)


# A faster decoder tried first, when one is installed (use_fast_decoder): msgspec's, about three times as fast as
# json's scanner. Where it decodes a text it gives json's value (ints of any size kept exact, under the same digit
# limit; floats correctly rounded; a duplicate key's last value in its first place). Whatever it refuses goes to
# json, whose verdict and message stand: NaN and Infinity, a number past a float's range (json: inf), an escaped
# lone surrogate (json keeps it), a BOM, invalid UTF-8, extra data. tests/core/test_json_codec.py holds it to
# json's answer, text by text. The core imports only the standard library: the process installs it.
_FAST: Callable[[bytes | str], Any] | None = None
_FAST_LOADS: Callable[[bytes], Any] | None = None
_REFUSED: Any = object()  # what the fast decoder did not decode


def use_fast_decoder(decode: Callable[[bytes | str], Any] | None) -> None:
    """Try msgspec's decoder (`msgspec.json.Decoder().decode`) first in parse, parse_line and Response.full; None:
    json's alone. Nesting: both take a level of the recursion budget a container; called through a staticmethod
    object (whose call takes one more), msgspec from parse reaches exactly as deep as json's scanner from _decode
    (CPython 3.11), deeper is json's to refuse; Response.full's call goes through three, for json.loads' extra
    frames."""
    global _FAST, _FAST_LOADS
    if decode is None:
        _FAST = _FAST_LOADS = None
        return
    _FAST = staticmethod(decode)
    _FAST_LOADS = staticmethod(staticmethod(_FAST))


def _decode(text: str) -> Any:
    """_DECODER.decode(text), its two Python frames (decode, raw_decode) folded into this one: the same value,
    the same errors."""
    start = _SPACE.match(text, 0).end() if text[:1] in _LEADING else 0  # type: ignore[union-attr]
    try:
        obj, end = _SCAN(text, start)
    except StopIteration as err:
        raise json.JSONDecodeError("Expecting value", text, err.value) from None
    if end != len(text):
        end = _SPACE.match(text, end).end()  # type: ignore[union-attr]
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
    return obj


def parse(data: bytes | str) -> Message:
    """Decode one JSON text and classify it.

    NaN and Infinity are not JSON, nesting too deep to decode is a parse
    error, and bytes must be UTF-8 without a BOM (MCP messages are UTF-8), so
    the raw bytes kept for forwarding are always plain UTF-8 JSON.
    """
    obj: Any = _REFUSED
    if _FAST is not None:
        try:
            obj = _FAST(data)
        except (ValueError, RecursionError):  # msgspec's errors are ValueErrors: json's decode tells which error
            pass
    if obj is _REFUSED:  # json's decode then, outside the except clause (where raising costs a recursion level)
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else data
            obj = _decode(text)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            return Invalid(PARSE_ERROR, f"Parse error: {exc}")
    raw = data if isinstance(data, bytes) else None
    if type(obj) is dict and obj.get("jsonrpc") == "2.0":  # classify's two usual messages, without its call
        if len(obj) == 3 and "result" in obj:
            msg_id = obj.get("id")
            if type(msg_id) is int or type(msg_id) is str:
                return Response(msg_id, obj, raw)
        elif type(params := obj.get("params")) is dict:
            method, msg_id = obj.get("method"), obj.get("id")
            if type(method) is str and method and (type(msg_id) is int or type(msg_id) is str):
                return Request(msg_id, method, params, obj, raw)
    if isinstance(obj, list):
        if not obj:
            return Invalid(INVALID_REQUEST, "Invalid Request: empty batch")
        return Batch([classify(item) for item in obj])
    return classify(obj, raw)


# The head of a response as the common SDKs write it: {"jsonrpc":"2.0","id":ID,"result": or "error":, with JSON's
# whitespace only (bytes' \s would take a form feed or a vertical tab too, which the full parse refuses)
_RESPONSE_HEAD = re.compile(
    rb'[ \t\n\r]*\{[ \t\n\r]*"jsonrpc"[ \t\n\r]*:[ \t\n\r]*"2\.0"[ \t\n\r]*,[ \t\n\r]*"id"[ \t\n\r]*:[ \t\n\r]*'
    rb'(-?(?:0|[1-9][0-9]*)|"(?:[^"\\\x00-\x1f]|\\.)*")[ \t\n\r]*,[ \t\n\r]*"(result|error)"[ \t\n\r]*:'
)
PARTIAL_FROM_BYTES = 256 * 1024
NOT_UTF8 = "Internal error: the server's answer was not UTF-8"  # (a large answer read by its head: parse_line)
_PLAIN_INT = 18  # digits of an integer id read with int() (far below the int-from-text digit limit json.loads keeps)


def parse_line(data: bytes, partial_from: int | None = PARTIAL_FROM_BYTES, bare: bool = False) -> Message:
    """parse() for a line from a stdio peer, cheaper for large responses.

    A gateway routes a response by its id alone and forwards its bytes unchanged, so a
    response of `partial_from` bytes or more (None: never) whose head names the id before
    the result is classified from that head, without decoding a result of many megabytes.
    Its bytes must still be UTF-8, as a line parsed whole must be (ASCII looked for first:
    far cheaper than the check of the rest): for one that is not, the id its head names is
    answered with an Internal error in the peer's stead (its bytes are no JSON to forward,
    and the caller waiting on that id learns it at once). Every other line is parsed whole.
    `bare`: the caller knows the line holds no CR or LF (LineDecoder.bare); the message then
    names its raw bytes as `bare`.
    """
    if partial_from is not None and len(data) >= partial_from:
        head = _RESPONSE_HEAD.match(data)
        if head is not None and data[_skip_space(data, len(data) - 1, -1)] == _CLOSE:  # no copy, as rstrip makes
            msg_id = _head_id(head.group(1))
            if msg_id is None:  # an invalid escape or UTF-8 in a string id: let the full parse report it
                return parse(data)
            if not (data.isascii() or _utf8(data)):
                return Response(msg_id, error_response(msg_id, INTERNAL_ERROR, NOT_UTF8))
            obj = {"jsonrpc": "2.0", "id": msg_id, head.group(2).decode(): None}
            return Response(msg_id, obj, data, partial=True, bare=data if bare else None)
    msg = parse(data)
    if bare and isinstance(msg, (Response, Request, Notification)):
        msg.bare = data
    return msg


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _head_id(token: bytes) -> Id | None:
    """The id _RESPONSE_HEAD matched, as the full parse reads it (None: that parse would fail). An integer of a few
    digits and a string without escapes are read as they are; json.loads reads any other."""
    try:
        if token[0] != _QUOTE:
            return int(token) if len(token) <= _PLAIN_INT else json.loads(token)
        if _BACKSLASH not in token:
            return token[1:-1].decode("utf-8")
        return json.loads(token)  # type: ignore[no-any-return]
    except ValueError:  # UnicodeDecodeError is a ValueError
        return None


def result_object(raw: bytes) -> bytes | None:
    """The bytes of a response's result object, for one whose head names the id before a "result" member
    (as parse_line's partial responses do); None for any other shape. The result is not decoded."""
    bounds = result_bounds(raw)
    return None if bounds is None else raw[bounds[0] : bounds[1]]


def result_bounds(raw: bytes) -> tuple[int, int] | None:
    """result_object's place in `raw` (start, end: raw[start:end] is it), found by index, nothing copied: a result
    of many megabytes is searched in place (bytes.find and a pattern's search take the bounds). The result is taken
    to end at the message's last brace but one: an answer repeating a member after its result
    (`"result":{...},"id":7,"result":{...}}`) has bounds that hold more than one value (json_extent.sole_value
    tells)."""
    head = _RESPONSE_HEAD.match(raw)
    if head is None or head.group(2) != b"result":
        return None
    start, end = _skip_space(raw, head.end(), 1), _skip_space(raw, len(raw) - 1, -1)
    if end <= start or raw[end] != _CLOSE:
        return None
    end = _skip_space(raw, end - 1, -1)
    if end <= start or raw[start] != _OPEN or raw[end] != _CLOSE:
        return None
    return start, end + 1


_OPEN, _CLOSE, _QUOTE = ord("{"), ord("}"), ord('"')
# single bytes searched as ints: `b"\n" in raw` first tries b"\n" as an int (a TypeError raised and cleared inside
# C each time); `10 in raw` is one memchr
_LF, _CR, _BACKSLASH = ord("\n"), ord("\r"), ord("\\")
_BYTE_SPACE = frozenset(b" \t\n\r")  # JSON's whitespace


def _skip_space(data: bytes, index: int, step: int) -> int:
    """The first index from `index` on (going by `step`) whose byte is not whitespace (past the end: out of range)."""
    while 0 <= index < len(data) and data[index] in _BYTE_SPACE:
        index += step
    return index


def classify(obj: Any, raw: bytes | None = None) -> Message:
    """Classify an already decoded JSON value (a batch member or a whole message)."""
    if type(obj) is dict and len(obj) == 3 and "result" in obj and obj.get("jsonrpc") == "2.0":
        msg_id = obj.get("id")  # the usual answer (its three members jsonrpc, id, result): no other check is due
        if type(msg_id) is int or type(msg_id) is str:  # a JSON id is int or str exactly (a bool is neither here)
            return Response(msg_id, obj, raw)
    if type(obj) is dict and type(params := obj.get("params")) is dict and obj.get("jsonrpc") == "2.0":
        method, msg_id = obj.get("method"), obj.get("id")  # the usual request: jsonrpc, id, method, object params
        if type(method) is str and method and (type(msg_id) is int or type(msg_id) is str):
            return Request(msg_id, method, params, obj, raw)  # what _classify_call gives it after every check
    if not isinstance(obj, dict):
        return Invalid(INVALID_REQUEST, "Invalid Request: a message must be a JSON object")
    msg_id = obj.get("id")
    usable_id = msg_id if is_valid_id(msg_id) else None
    if obj.get("jsonrpc") != "2.0":
        return Invalid(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', usable_id)
    if "method" in obj:
        return _classify_call(obj, raw, usable_id)
    has_result, has_error = "result" in obj, "error" in obj
    if has_result == has_error:
        return Invalid(INVALID_REQUEST, "Invalid Request: a response needs exactly one of result or error", usable_id)
    if has_error and not _valid_error(obj["error"]):
        return Invalid(INVALID_REQUEST, "Invalid Request: error must be an object with an integer code", usable_id)
    if usable_id is None and not (has_error and msg_id is None):
        return Invalid(INVALID_REQUEST, "Invalid Request: a response id must be a string or an integer")
    return Response(usable_id, obj, raw)


def _classify_call(obj: dict[str, Any], raw: bytes | None, usable_id: Id | None) -> Message:
    method = obj["method"]
    if not isinstance(method, str) or not method:
        return Invalid(INVALID_REQUEST, "Invalid Request: method must be a non-empty string", usable_id)
    params = obj.get("params")
    if "params" in obj and not isinstance(params, (dict, list)):
        return Invalid(INVALID_REQUEST, "Invalid Request: params must be an object or an array", usable_id)
    if "id" not in obj:
        return Notification(method, params, obj, raw)
    if usable_id is None:
        return Invalid(INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    return Request(usable_id, method, params, obj, raw)


def _valid_error(error: object) -> bool:
    if not isinstance(error, dict):
        return False
    code = error.get("code")
    return isinstance(code, int) and not isinstance(code, bool)


def error_response(msg_id: Id | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response object (id null when the id could not be read)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": msg_id, "error": error}


def encode(obj: Any) -> bytes:
    """Compact UTF-8 JSON with no embedded newline.

    A string holding a lone surrogate (legal as a JSON escape, not encodable as
    UTF-8) falls back to ASCII escapes instead of raising.
    """
    try:
        return "".join(_COMPACT(obj, 0)).encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_COMPACT_ASCII(obj, 0)).encode("ascii")


def _compact(ensure_ascii: bool) -> Callable[[Any, int], Any]:
    """json.JSONEncoder(ensure_ascii=..., separators=(",", ":")) as one C encoder made once: JSONEncoder.encode
    (and json.dumps) makes a new one on every call. It keeps no state between calls: it checks no circular
    reference (a message is decoded JSON or built of it; a circular value fails with RecursionError instead)."""
    plain = json.JSONEncoder(ensure_ascii=ensure_ascii, separators=(",", ":"))
    make = getattr(json.encoder, "c_make_encoder", None)  # the C accelerator's (typeshed does not name it)
    if make is None:  # none: the encoder's own, as a one-element tuple
        return lambda obj, _level: (plain.encode(obj),)
    strings = getattr(json.encoder, "c_encode_basestring_ascii" if ensure_ascii else "c_encode_basestring")
    encoder: Callable[[Any, int], Any] = make(None, plain.default, strings, None, ":", ",", False, False, True)
    return encoder


_COMPACT = _compact(ensure_ascii=False)
_COMPACT_ASCII = _compact(ensure_ascii=True)


def raw_bytes(message: Request | Notification | Response) -> bytes:
    """The message's bytes as received when usable as one line (no CR, no LF), else a fresh encoding. Bytes
    the splitter vouched for (`bare`, still the message's raw) are not searched again."""
    raw = message.raw
    if raw is not None and (raw is message.bare or (_LF not in raw and _CR not in raw)):
        return raw
    # A response classified from its head (parse_line) holds its result in raw only: decoded here, not lost.
    return encode(message.full() if isinstance(message, Response) else message.obj)


def progress_token(message: Request) -> Id | None:
    """The request's params._meta.progressToken, when it is a legal token."""
    params = message.params
    if not isinstance(params, dict):
        return None
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if is_valid_id(token) else None
