"""Newline-delimited JSON framing for the stdio side.

Messages are split on b"\\n" only: a U+2028 or U+2029 inside a JSON string is
payload, not a line end. A trailing b"\\r" is tolerated and removed. Blank lines
are skipped. A line longer than the limit raises LineTooLong as soon as the
decoder knows, without waiting for the newline, so memory stays bounded.
"""

from __future__ import annotations


class LineTooLong(ValueError):
    """A line exceeded the configured byte limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"message too large: a line exceeded {limit} bytes")
        self.limit = limit


class LineDecoder:
    """Incremental splitter: feed(bytes) -> complete lines, finish() -> partial tail."""

    __slots__ = ("_buffer", "_limit")

    def __init__(self, max_line_bytes: int) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self._limit = max_line_bytes
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet form a complete line."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return every complete non-blank line (without its line end)."""
        if not self._buffer and data.endswith(b"\n") and data.count(b"\n") == 1:
            # Fast path: exactly one whole line arrived in one read.
            return self._emit([data[:-1]])
        self._buffer += data
        if b"\n" not in data:
            self._check(len(self._buffer))
            return []
        *complete, tail = bytes(self._buffer).split(b"\n")
        self._buffer = bytearray(tail)
        self._check(len(self._buffer))
        return self._emit(complete)

    def finish(self) -> bytes | None:
        """At end of input: return the unterminated last line, if any (never lost silently)."""
        tail = bytes(self._buffer).rstrip(b"\r")
        self._buffer = bytearray()
        return tail if tail.strip() else None

    def _emit(self, lines: list[bytes]) -> list[bytes]:
        out = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            self._check(len(line))
            if line.strip():
                out.append(line)
        return out

    def _check(self, size: int) -> None:
        if size > self._limit:
            self._buffer = bytearray()
            raise LineTooLong(self._limit)


def frame(message: bytes) -> bytes:
    """One encoded JSON message as a line for a stdio peer."""
    if b"\n" in message:
        raise ValueError("a framed message must not contain a newline")
    return message + b"\n"
