"""An owner's reply heads remembered by their shape, so that the forwarder reads a head it has seen before without
parsing it again (core/http1.py's head and framing: about a tenth of a forwarding instance's own Python per call).

An owner answers a session's calls with heads that differ, call after call, in their Content-Length value alone
(and in their Date once a second). A head's shape is its bytes without the digits of its `Content-Length: ` line.
A head whose shape is known gives the known status and headers, that one value put in, and the known framing, its
length that value. Only a head whose reading cannot depend on those digits otherwise is remembered: exactly one
Content-Length header (in any case), spelled `Content-Length: ` with ASCII digits after it and nothing else on its
line, no folded line; a head is read from its shape only when its own digits are ASCII digits (at most 18), so it
reads as http1 reads it (tests/serve/test_cluster_reply_heads.py compares them over a table).

Bounded: at most KEPT shapes (past it, the table starts again).
"""

from __future__ import annotations

from typing import NamedTuple

from mcpgate.core import http1

LENGTH_FIELD = b"\r\nContent-Length: "
KEPT = 256  # shapes remembered
MAX_DIGITS = 18


class Known(NamedTuple):
    minor: int
    status: int
    headers: list[tuple[str, str]]  # as read, the remembered head's Content-Length value at `at` (-1: none)
    at: int
    framing: http1.Framing
    length_framed: bool  # the framing's length is the Content-Length value (else it does not depend on it)


def shape_of(block: bytes) -> tuple[bytes, bytes | None]:
    """A head's shape and its Content-Length digits (None: no `Content-Length: ` line)."""
    at = block.find(LENGTH_FIELD)
    if at < 0:
        return block, None
    start = at + len(LENGTH_FIELD)
    end = block.find(b"\r", start)
    if end < 0:
        end = len(block)
    return block[:start] + block[end:], block[start:end]


class ReplyHeads:
    """`read(block, method)`: (minor, status, headers, framing) of a remembered shape, else None;
    `remember(block, method, minor, status, headers, framing)` after a full reading of the same head."""

    def __init__(self) -> None:
        self._known: dict[tuple[bytes, str], Known] = {}

    def read(self, block: bytes, method: str) -> tuple[int, int, list[tuple[str, str]], http1.Framing, bytes] | None:
        """The head as http1 reads it, and its shape; None when its shape is not known (or its digits are odd):
        `framed`'s answer with its HTTP minor version and a Framing made of it."""
        found = self.framed(block, method)
        if found is None:
            return None
        status, headers, length, chunked, keep, shape = found
        return self._known[(shape, method)].minor, status, headers, http1.Framing(length, chunked, keep), shape

    def framed(
        self, block: bytes, method: str
    ) -> tuple[int, list[tuple[str, str]], int | None, bool, bool, bytes] | None:
        """A remembered head's reading as the exchange takes it, (every forwarded reply): (status,
        headers, the framing's length, chunked, keep, shape); None when its shape is not known (or its digits are
        odd). No Framing is made for it (`read` makes one)."""
        shape, digits = shape_of(block)  # as `remember` takes it: one shape for both
        known = self._known.get((shape, method))
        if known is None:
            return None
        framing = known.framing
        headers = known.headers.copy()
        length = framing.length
        if known.at >= 0:
            if digits is None or not (digits.isdigit() and len(digits) <= MAX_DIGITS):
                return None
            value = digits.decode("ascii")
            headers[known.at] = (headers[known.at][0], value)
            if known.length_framed:
                length = int(value)
        return known.status, headers, length, framing.chunked, framing.keep, shape

    def remember(
        self,
        block: bytes,
        method: str,
        minor: int,
        status: int,
        headers: list[tuple[str, str]],
        framing: http1.Framing,
    ) -> bytes | None:
        """Remember a head just read in full (as http1 read it); its shape, None when it is not one to remember."""
        if b"\r\n " in block or b"\r\n\t" in block:  # a folded line: its digits may join the next line's
            return None
        shape, digits = shape_of(block)
        lengths = [i for i, (name, _) in enumerate(headers) if name.lower() == "content-length"]
        if digits is None:
            if lengths:  # spelled otherwise: not remembered
                return None
            index = -1
        else:
            spelled = ("Content-Length", digits.decode("latin-1"))  # the one Content-Length, the line found
            if (
                len(lengths) != 1
                or headers[lengths[0]] != spelled
                or not (digits.isdigit() and len(digits) <= MAX_DIGITS)
            ):
                return None
            index = lengths[0]
        # http1.framing's last case alone takes its length from Content-Length (the others: 0, or chunked)
        bodiless = method == "HEAD" or status < 200 or status in http1.NO_BODY_STATUSES
        length_framed = index >= 0 and not (bodiless or framing.chunked)
        if len(self._known) >= KEPT:
            self._known.clear()
        self._known[(shape, method)] = Known(minor, status, list(headers), index, framing, length_framed)
        return shape
