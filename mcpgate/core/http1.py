"""An HTTP/1.1 reply's head and framing, read as bytes: the one reading of the two clients that speak HTTP/1.1
themselves (the relay's plain-HTTP route, relay/fast_http.py, and the fleet's forwarder, serve/cluster/forward.py).

Sans-IO: each function takes bytes or parsed values and returns parsed values, raising ReplyError (a
ValueError) with a message fit for a log; each caller maps ReplyError onto the exceptions its own callers
handle (urllib3's for the relay, http.client's for the forwarder).

- `status_line(line)`: "HTTP/1.x NNN reason" (a trailing CRLF or LF ignored) -> (minor version, status, reason).
  Anything else (another protocol, a status not three digits) is an error.
- `header_line(line, headers)`: one header line added to `headers` (name, value stripped); an obsolete folded
  continuation (a line starting with a space or tab) joins the previous value with one space; a line without a
  colon, with an empty name or whitespace around the name, is an error; more than MAX_HEADERS is an error.
- `framing(status, minor, headers, method)`: how the body is delimited (RFC 9112 6.3): none for HEAD, 1xx,
  204 and 304; chunked when the last transfer coding is chunked; else Content-Length (digits only: "+5",
  " 5 " inside, "5, 5" are errors: a length two readers could read differently is refused); else until the
  connection closes. `keep`: the connection may carry another request (HTTP/1.1, no `Connection: close`,
  and the body's end is known without closing).
- `chunk_size(line)`: a chunk's size line (extensions after ";" ignored) -> its size; not hex is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEADERS = 100  # header lines in one head (http.client's bound)
NO_BODY_STATUSES = frozenset({204, 304})


class ReplyError(ValueError):
    """A reply this client cannot read: the message names what was wrong (never more than 80 bytes of it)."""


@dataclass(frozen=True, slots=True)
class Framing:
    length: int | None  # bytes of body; 0 for none; None: chunked or until the connection closes
    chunked: bool
    keep: bool  # the connection can be used again once the body was read to its end


def status_line(line: bytes) -> tuple[int, int, str]:
    """(minor version, status, reason) of a status line."""
    text = line.rstrip(b"\r\n").decode("latin-1")
    version, _, rest = text.partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not (code.isascii() and code.isdigit()):
        raise ReplyError(f"bad status line {text[:80]!r}")
    return (1 if version == "HTTP/1.1" else 0), int(code), reason


def header_line(line: bytes, headers: list[tuple[str, str]]) -> None:
    """Add one header line (without its line end) to `headers`."""
    text = line.decode("latin-1")
    if text[:1] in (" ", "\t") and headers:  # an obsolete folded continuation
        name, value = headers[-1]
        headers[-1] = (name, f"{value} {text.strip()}")
        return
    if len(headers) >= MAX_HEADERS:
        raise ReplyError(f"more than {MAX_HEADERS} headers")
    name, colon, value = text.partition(":")
    if not colon or not name or name != name.strip():
        raise ReplyError(f"bad header line {text[:80]!r}")
    headers.append((name, value.strip(" \t")))


def head(block: bytes) -> tuple[int, int, str, list[tuple[str, str]]]:
    """(minor version, status, reason, headers) of a whole head: the status line and the header lines, CRLF
    between them, without the empty line that ends it."""
    lines = block.split(b"\r\n")
    minor, status, reason = status_line(lines[0])
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        header_line(line, headers)
    return minor, status, reason, headers


def framing(status: int, minor: int, headers: list[tuple[str, str]], method: str) -> Framing:
    """How the reply's body is delimited, and whether its connection can be kept (see the module docstring)."""
    length: int | None = None
    chunked = close = False
    for name, value in headers:
        lowered = name.lower()
        if lowered == "transfer-encoding":
            chunked = value.rstrip(" \t").lower().endswith("chunked")
        elif lowered == "content-length":
            if not (value.isascii() and value.isdigit()) or (length is not None and int(value) != length):
                raise ReplyError(f"bad Content-Length {value[:40]!r}")
            length = int(value)
        elif lowered == "connection":
            close = close or "close" in value.lower()
    persistent = minor == 1 and not close
    if method == "HEAD" or status < 200 or status in NO_BODY_STATUSES:
        return Framing(0, False, persistent)
    if chunked:
        return Framing(None, True, persistent)
    return Framing(length, False, persistent and length is not None)


def chunk_size(line: bytes) -> int:
    """The size of the chunk a size line announces."""
    digits = line.split(b";", 1)[0].strip()
    if not digits or any(c not in b"0123456789abcdefABCDEF" for c in digits):
        raise ReplyError(f"bad chunk size {digits[:40]!r}")
    return int(digits, 16)
