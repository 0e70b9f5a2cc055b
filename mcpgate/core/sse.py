"""Server-Sent Events: an encoder and an incremental decoder (sans-IO).

The decoder follows the WHATWG event-stream parsing rules: lines end in CRLF,
LF or CR; a line starting with ":" is a comment; "data" lines are joined with
LF; an event is dispatched at a blank line; "id" sets the last event id unless
it contains NUL; "retry" takes only ASCII digits. Buffered bytes are bounded:
after EventTooLarge the decoder has released its buffers and every later feed()
raises EventTooLarge again (the stream cannot be trusted to resynchronise).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Event:
    data: str
    event: str = "message"
    id: str | None = None


class EventTooLarge(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"SSE event exceeded {limit} bytes")
        self.limit = limit


def encode_event(
    data: bytes, event: str | None = "message", event_id: str | None = None, retry_ms: int | None = None
) -> bytes:
    """One SSE event carrying `data` (one line of JSON: it holds no CR or LF).

    ValueError when the event name or id holds a CR or LF (or the id a NUL):
    either would inject fields into the stream.
    """
    if event and ("\r" in event or "\n" in event):
        raise ValueError("an SSE event name must not contain CR or LF")
    if event_id is not None and ("\r" in event_id or "\n" in event_id or "\0" in event_id):
        raise ValueError("an SSE event id must not contain CR, LF or NUL")
    parts = []
    if event_id is not None:
        parts.append(b"id: " + event_id.encode() + b"\n")
    if retry_ms is not None:
        parts.append(b"retry: %d\n" % retry_ms)
    if event:
        parts.append(b"event: " + event.encode() + b"\n")
    if 10 in data or 13 in data:  # LF, CR as ints: `b"\n" in data` first tries b"\n" as an int (a TypeError in C)
        for line in data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
            parts.append(b"data: " + line + b"\n")
        parts.append(b"\n")
    else:  # the data's bytes copied once, by the join (a concatenation first would copy a large result twice more)
        parts += (b"data: ", data, b"\n\n")
    return b"".join(parts)


def encode_priming(event_id: str, retry_ms: int | None = None) -> bytes:
    """The event that primes a stream for resumption (2025-11-25): an id, the retry hint, empty data."""
    return encode_event(b"", None, event_id, retry_ms)


def encode_comment(text: str = "") -> bytes:
    """A comment line (keepalive); clients ignore it."""
    return b":" + (b" " + text.encode() if text else b"") + b"\n\n"


class SseDecoder:
    """feed(bytes) -> complete events. Tracks last_event_id and retry_ms."""

    def __init__(self, max_event_bytes: int) -> None:
        self.max_event_bytes = max_event_bytes
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None
        self._buffer = bytearray()
        self._data: list[str] = []
        self._data_size = 0
        self._event_type = ""
        self._pending_cr = False
        self._first = True
        self._failed = False

    def feed(self, chunk: bytes) -> list[Event]:
        if self._failed:
            raise EventTooLarge(self.max_event_bytes)
        if not chunk:
            return []  # an empty read must not forget a CR that ended the last chunk
        try:
            return self._feed(chunk)
        except EventTooLarge:
            self._failed = True
            self._buffer = bytearray()
            self._data, self._data_size = [], 0
            raise

    def _feed(self, chunk: bytes) -> list[Event]:
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._pending_cr = False
        self._buffer += chunk
        events: list[Event] = []
        start = 0
        buf = self._buffer
        while True:
            end = _line_end(buf, start)
            if end < 0:
                break
            line = bytes(buf[start:end])
            if buf[end] == 13:  # CR: swallow a following LF
                if end + 1 < len(buf):
                    start = end + 2 if buf[end + 1] == 10 else end + 1
                else:
                    self._pending_cr = True
                    start = end + 1
            else:
                start = end + 1
            event = self._line(line)
            if event is not None:
                events.append(event)
        del self._buffer[:start]
        if len(self._buffer) + self._data_size > self.max_event_bytes:
            raise EventTooLarge(self.max_event_bytes)
        return events

    def _line(self, raw: bytes) -> Event | None:
        if self._first:
            self._first = False
            if raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
        line = raw.decode("utf-8", errors="replace")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            # Bytes, not characters: the field name and separator are ASCII.
            self._data_size += len(raw) - (len(line) - len(value)) + 1
            if self._data_size > self.max_event_bytes:
                raise EventTooLarge(self.max_event_bytes)
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Event | None:
        data, event_type = self._data, self._event_type
        self._data, self._data_size, self._event_type = [], 0, ""
        if not data:
            return None
        return Event("\n".join(data), event_type or "message", self.last_event_id)


def _line_end(buf: bytearray, start: int) -> int:
    lf = buf.find(b"\n", start)
    cr = buf.find(b"\r", start, lf if lf >= 0 else len(buf))
    return cr if cr >= 0 else lf
