"""Newline-delimited JSON framing for the stdio side.

Messages are split on b"\\n" only: a U+2028 or U+2029 inside a JSON string is
payload, not a line end. A trailing b"\\r" is tolerated and removed (it does not
count towards the limit). Blank lines are skipped. A line longer than the limit
raises LineTooLong as soon as the decoder knows, without waiting for the
newline, so memory stays bounded.

After LineTooLong the decoder stays usable: the rest of the over-long line is
skipped up to its newline, and the complete lines of the same feed() that were
within the limit are not lost: they travel on the exception as `lines`.

After each feed() or finish(), `bare` is True when no line it returned holds a
CR (a line never holds a LF): each is one line as it is, for an SSE data line
too, and need not be scanned again. The decoder learns it from one search of
each fed chunk; only when a chunk holds a CR are the lines it ends searched.
False means a line may hold one (bare is then said of none of them).
"""

from __future__ import annotations

from io import BytesIO

# A byte searched for as an int: `b"\r" in data` first tries its operand as an int (a TypeError raised and
# cleared inside C, each time), `13 in data` is one memchr.
_CR, _LF = ord("\r"), ord("\n")


class LineTooLong(ValueError):
    """A line exceeded the configured byte limit.

    `lines` holds the other, complete lines of the same feed() call (in order),
    which the caller should still process.
    """

    def __init__(self, limit: int, lines: list[bytes] | None = None) -> None:
        super().__init__(f"message too large: a line exceeded {limit} bytes")
        self.limit = limit
        self.lines: list[bytes] = lines if lines is not None else []


class LineDecoder:
    """Incremental splitter: feed(bytes) -> complete lines, finish() -> partial tail."""

    __slots__ = ("_discarding", "_limit", "_pending", "_pending_cr", "_size", "bare")

    def __init__(self, max_line_bytes: int) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self._limit = max_line_bytes
        # The start of an unfinished line: its one piece read so far, or its pieces written into one buffer that
        # becomes the line itself when it ends (BytesIO.getvalue hands its buffer over, nothing copied). Pieces kept
        # apart and joined at the end held a long line twice over, so its allocator mapped (and the kernel zeroed)
        # twice its size afresh: ~4,000 page faults and 8 ms of a worker's CPU for an 8 MiB line.
        self._pending: bytes | BytesIO | None = None
        self._size = 0
        self._discarding = False  # inside an over-long line: skip up to its newline
        self._pending_cr = False  # a piece in _pending may hold a CR
        self.bare = True  # no line the last feed() or finish() returned holds a CR (module docstring)

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet form a complete line."""
        return self._size

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return every complete non-blank line (without its line end).

        Raises LineTooLong (carrying this call's good lines) when a line is over the limit.
        """
        if data[-1:] == b"\n" and self._pending is None and not self._discarding and _CR not in data:
            line = data[:-1]  # the usual read: one whole line, nothing before it pending, no CR (_split's, sooner);
            if _LF not in line:  # its other LFs looked for as an int (one memchr, bytes.find's call spared)
                self.bare = True
                if len(line) > self._limit:
                    raise LineTooLong(self._limit, [])
                return [line] if line and not line.isspace() else []
        return self._split(data)

    def _split(self, data: bytes) -> list[bytes]:
        """feed() for any bytes."""
        lines: list[bytes] = []
        overflow = False
        has_cr = _CR in data
        maybe_cr = has_cr or self._pending_cr  # a line ended here may hold a CR
        start = 0
        end = data.find(b"\n")
        while end >= 0:
            piece = data[start:end]
            start = end + 1
            end = data.find(b"\n", start)
            if self._discarding:
                self._discarding = False  # the over-long line ends here
                continue
            pending = self._pending
            if pending is not None:
                if isinstance(pending, bytes):
                    line = pending + piece
                else:
                    pending.write(piece)
                    line = pending.getvalue()
                self._pending = None
                self._size = 0
                self._pending_cr = False
            else:
                line = piece
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > self._limit:
                overflow = True
            elif line and not line.isspace():
                lines.append(line)
        tail = data[start:]
        if tail and not self._discarding:
            # One trailing CR may still be the first half of a CRLF line end.
            allowed = self._limit + 1 if tail.endswith(b"\r") else self._limit
            if self._size + len(tail) > allowed:
                self._pending = None
                self._size = 0
                self._pending_cr = False
                self._discarding = True
                overflow = True
            else:
                pending = self._pending
                if pending is None:
                    self._pending = tail
                elif isinstance(pending, bytes):  # a second piece: the line's buffer, made with both
                    buffer = self._pending = BytesIO(pending)
                    buffer.seek(0, 2)
                    buffer.write(tail)
                else:
                    pending.write(tail)
                self._size += len(tail)
                self._pending_cr = self._pending_cr or has_cr
        self.bare = not maybe_cr or not any(_CR in line for line in lines)
        if overflow:
            raise LineTooLong(self._limit, lines)
        return lines

    def finish(self) -> bytes | None:
        """At end of input: return the unterminated last line, if any (never lost silently)."""
        pending = self._pending
        if pending is None:
            pending = b""
        elif not isinstance(pending, bytes):
            pending = pending.getvalue()
        tail = pending.rstrip(b"\r")
        self._pending = None
        self._size = 0
        self._discarding = False
        self._pending_cr = False
        if not tail or tail.isspace():
            self.bare = True
            return None
        self.bare = _CR not in tail
        return tail


def frame(message: bytes) -> bytes:
    """One encoded JSON message as a line for a stdio peer."""
    if _LF in message:
        raise ValueError("a framed message must not contain a newline")
    return message + b"\n"
