"""The request-header parser of the gateway's worker (see mcpgate.serve.front.worker).

gevent.pywsgi reads request headers with the standard library's http.client.parse_headers,
which runs the email package's parser; on the gateway's hot path that was about a third of
the worker's CPU per call (py-spy, bench/). RequestHeaders reads the same lines and offers the
small interface pywsgi and gunicorn use. A block already whole in the connection's buffer and made only of
well-formed fields is read in one pass; any other is read a line at a time, so that a refusal names its line.
(A whole request head that passed is remembered by the worker, heads.py: a block is read only for a head not
remembered.)

It refuses what gunicorn's own parser refuses by default (gunicorn/http/message.py), so the
gateway never reads a request differently from a gunicorn-style proxy or server beside it:
lines that do not end in CRLF, obsolete line folding, field names that are not RFC 9110
tokens (whitespace before the colon included), control characters other than HTAB in a value,
a field line over 8190 bytes, more than 100 fields, a repeated Host, Content-Type,
Content-Length or Transfer-Encoding, a Content-Length that is not digits, Content-Length with
Transfer-Encoding, and an Expect other than 100-continue. Like gunicorn (header_map "drop"),
it drops fields whose name holds "_" (pywsgi's environ would drop them too). Stricter than
gunicorn: a Transfer-Encoding other than exactly "chunked" (gunicorn also takes e.g.
"gzip, chunked"), since pywsgi frames nothing else.

The request line (RFC 9112 3) is read strictly too: METHOD SP TARGET SP HTTP/1.0 or HTTP/1.1 and CRLF, a
token for the method, visible ASCII for the target. The target is origin-form, absolute-form (http or https,
an authority without userinfo; its authority is the effective Host, RFC 9112 3.2.2), or "*" for OPTIONS.
An HTTP/1.1 request without a Host, or a Host that is not one host[:port], is refused (RFC 9112 3.2).
Each refusal is a BadRequest, which pywsgi answers with 400 and a closed connection.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, BinaryIO, NamedTuple

from mcpgate.serve.front import memo
from mcpgate.serve.front.auth import valid_host

MAX_FIELD = 8190  # bytes of one field line with its CRLF, as gunicorn's limit_request_field_size
MAX_HEADERS = 100  # as gunicorn's limit_request_fields
MAX_DROPPED = MAX_HEADERS * (MAX_FIELD + 2)  # bytes of dropped fields (gunicorn bounds the block's bytes)

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # RFC 9110 5.6.2
_VALUE = r"[\t\x20-\x7e\x80-\xff]*"  # RFC 9110 5.5: VCHAR, obs-text, SP, HTAB
_FIELD = re.compile(f"({_TOKEN}):({_VALUE})\r\n")
_PLAIN = r"[!#$%&'*+\-.^`|~0-9A-Za-z]+"  # a token without "_" (a field named with one is dropped: _read_lines)
_BLOCK = re.compile(f"(?:{_PLAIN}:{_VALUE}\r\n)*\r\n")  # a whole block of well-formed field lines, none dropped
_FIELDS = re.compile(f"({_TOKEN}):({_VALUE})\r\n")
_NAME = re.compile(_TOKEN)
_SINGLE = frozenset(("host", "content-type", "content-length", "transfer-encoding"))
_WATCHED = _SINGLE | {"expect"}
_VERSION = re.compile(r"HTTP/1\.[01]")
_ORIGIN_FORM = re.compile(r"/[\x21-\x22\x24-\x7e]*")  # visible ASCII but "#" (no fragment in a target)
_ABSOLUTE_FORM = re.compile(r"(?i:https?)://(?P<authority>[^/?#]*)(?P<rest>[\x21-\x22\x24-\x7e]*)")


class BadRequest(ValueError):
    """A request line or Host that pywsgi answers with 400 and a closed connection (it takes ValueError so)."""


class RequestLine(NamedTuple):
    method: str
    target: str
    version: str


def _parse_request_line(text: str) -> RequestLine:
    """The request line's three parts (RFC 9112 3), or a BadRequest."""
    if not text.endswith("\r\n"):
        raise BadRequest("Request line not ended by CRLF")
    parts = text[:-2].split(" ")
    if len(parts) != 3:
        raise BadRequest("Invalid request line")
    method, target, version = parts
    if _NAME.fullmatch(method) is None:
        raise BadRequest("Invalid method")
    if _VERSION.fullmatch(version) is None:
        raise BadRequest("Unsupported HTTP version")
    if not (_ORIGIN_FORM.fullmatch(target) or _ABSOLUTE_FORM.fullmatch(target) or (target, method) == ("*", "OPTIONS")):
        raise BadRequest("Invalid request target")
    return RequestLine(method, target, version)


parse_request_line = memo.remembered(_parse_request_line)  # a client repeats its request lines
_valid_host = memo.remembered(valid_host)  # and its Host


def resolve_target(line: RequestLine, host: str | None) -> tuple[str, str | None]:
    """The target in origin-form and the effective Host: an absolute-form target's authority, else the Host."""
    absolute = None if line.target.startswith("/") else _ABSOLUTE_FORM.fullmatch(line.target)  # origin-form: "/..."
    if host is None and line.version == "HTTP/1.1":
        raise BadRequest("Missing Host")
    if absolute is None:
        if host is not None and not _valid_host(host):
            raise BadRequest("Invalid Host")
        return line.target, host
    authority, rest = absolute["authority"], absolute["rest"]
    if "@" in authority or not authority or not _valid_host(authority):
        raise BadRequest("Invalid authority in the request target")
    return (rest if rest.startswith("/") else "/" + rest), authority


class RequestHeaders:
    """Request header fields in arrival order; lookups are case-insensitive and return the first."""

    __slots__ = ("_first", "fields", "status")

    def __init__(self, fields: list[tuple[str, str]], status: str = "", first: dict[str, str] | None = None) -> None:
        self.fields = fields
        self.status = status  # non-empty: pywsgi answers 400
        self._first = first  # lower-cased name -> its first value (made on first lookup when not given)

    def given(self, place: int, value: str) -> RequestHeaders:
        """These fields with the one at `place` (the only one of its name) given `value` (heads.Head.given)."""
        fields = list(self.fields)
        name = fields[place][0]
        fields[place] = (name, value)
        first = self._first
        return RequestHeaders(fields, "", None if first is None else {**first, name.lower(): value})

    @classmethod
    def read(cls, fp: BinaryIO) -> RequestHeaders:
        """Read the header block up to and including its empty line; a refusal has `status` set."""
        whole = cls._read_buffered(fp)
        return whole if whole is not None else cls._read_lines(fp)

    @classmethod
    def _read_buffered(cls, fp: BinaryIO) -> RequestHeaders | None:
        """The common case in one pass: the whole block already in `fp`'s buffer, every line a well-formed field
        (no "_" in a name, within MAX_FIELD bytes all told): the same fields `_read_lines` reads, and the block
        consumed. None, with nothing consumed, for anything else (`_read_lines` then reads it, refusals too)."""
        peek = getattr(fp, "peek", None)
        if peek is None:
            return None
        buffered: bytes = peek(MAX_FIELD)
        end = 2 if buffered.startswith(b"\r\n") else buffered.find(b"\r\n\r\n") + 4  # 3: no end in the buffer
        if end == 3 or end > MAX_FIELD:
            return None
        text = buffered[:end].decode("iso-8859-1")
        if _BLOCK.fullmatch(text) is None:
            return None
        found = _FIELDS.findall(text)
        if len(found) > MAX_HEADERS:
            return None
        fp.read(end)
        fields: list[tuple[str, str]] = []
        first: dict[str, str] = {}
        for name, value in found:
            value = value.strip(" \t")
            fields.append((name, value))
            key = name.lower()
            if key not in first:
                first[key] = value
        # no name repeated: the framing checks read the first values (with repeats, _framing says which)
        status = _framing(fields) if len(first) < len(fields) else _framing_of(first)
        return cls([], status) if status else cls(fields, "", first)

    @classmethod
    def _read_lines(cls, fp: BinaryIO) -> RequestHeaders:
        """The block a line at a time, each checked as it comes (a refusal says which line and why)."""
        fields: list[tuple[str, str]] = []
        dropped = 0
        while True:
            text = fp.readline(MAX_FIELD + 1).decode("iso-8859-1")
            match = _FIELD.fullmatch(text)
            if match is None or len(text) > MAX_FIELD:
                if text == "\r\n":
                    break
                return cls([], _why(text, bool(fields)))
            name, value = match.groups()
            if "_" in name:
                dropped += len(text)
                if dropped > MAX_DROPPED:
                    return cls([], "Too many headers")
                continue
            fields.append((name, value.strip(" \t")))
            if len(fields) > MAX_HEADERS:
                return cls([], "Too many headers")
        status = _framing(fields)
        return cls([] if status else fields, status)

    def get(self, name: str, default: Any = None) -> Any:
        first = self._first
        if first is None:
            first = self._first = {}
            for key, value in self.fields:
                first.setdefault(key.lower(), value)
        return first.get(name.lower(), default)

    getheader = get

    def replace(self, name: str, value: str) -> None:
        """Set the one field of this name (an absolute-form target's authority becomes the Host)."""
        wanted = name.lower()
        self.fields = [(key, v) for key, v in self.fields if key.lower() != wanted] + [(name, value)]
        self._first = None

    def __delitem__(self, name: str) -> None:
        wanted = name.lower()
        kept = [(key, value) for key, value in self.fields if key.lower() != wanted]
        if len(kept) == len(self.fields):
            raise KeyError(name)
        self.fields = kept
        self._first = None

    def items(self) -> list[tuple[str, str]]:
        return list(self.fields)

    @property
    def headers(self) -> Iterator[str]:
        for key, value in self.fields:
            yield f"{key}: {value}\r\n"

    @property
    def typeheader(self) -> str | None:
        return self.get("content-type")  # type: ignore[no-any-return]


def _why(text: str, after_field: bool) -> str:
    """Why a line that is neither a well-formed field nor the empty line is refused."""
    if len(text) > MAX_FIELD:
        return "Line too long"
    if not text.endswith("\n"):
        return "Incomplete headers"
    if not text.endswith("\r\n"):
        return "Line not ended by CRLF"
    if text[:1] in (" ", "\t"):
        return "Obsolete line folding" if after_field else "Invalid header name"
    name, colon, _ = text.partition(":")
    if not colon or not name:
        return "Invalid header line"
    if _NAME.fullmatch(name) is None:
        return "Invalid header name"
    return "Invalid header value"


def _framing_of(first: dict[str, str]) -> str:
    """_framing's answer for fields with no name repeated, from their lower-cased names' values."""
    expect = first.get("expect")
    if expect is not None and expect.lower() != "100-continue":
        return "Unsupported Expect"
    return _length_and_coding(first.get("content-length"), first.get("transfer-encoding"))


def _framing(fields: list[tuple[str, str]]) -> str:
    """Why the fields as a whole are refused (repeats, message framing, Expect), or ""."""
    found: dict[str, str] = {}
    for name, value in fields:
        key = name.lower()
        if key not in _WATCHED:
            continue
        if key in found and key in _SINGLE:
            return f"Repeated {name}"
        if key == "expect" and value.lower() != "100-continue":
            return "Unsupported Expect"
        found[key] = value
    return _length_and_coding(found.get("content-length"), found.get("transfer-encoding"))


def _length_and_coding(length: str | None, coding: str | None) -> str:
    """Why a Content-Length and Transfer-Encoding (the first of each) are refused, or ""."""
    if length is not None and not (length.isascii() and length.isdigit()):
        return "Invalid Content-Length"
    if coding is not None:
        if coding.lower() != "chunked":
            return "Unsupported Transfer-Encoding"
        if length is not None:
            return "Content-Length with Transfer-Encoding"
    return ""
