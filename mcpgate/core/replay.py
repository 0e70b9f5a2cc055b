"""Resumable SSE streams (sans-IO): event ids that name their stream, and a bounded log of what a stream sent.

An event id reads `<tag>-<stream>-<seq>`: `tag` is minted per session (an id of another session, or of an
earlier run, never matches), `stream` numbers the session's resumable streams and `seq` counts one stream's
events from 1; seq 0 is the priming event, which carries no message. So an id is unique within its session
and a Last-Event-ID names the stream to resume and the point to resume after (2025-03-26 onwards,
"Resumability and Redelivery"; the spec leaves the answer to an id it cannot resume to the server).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

MAX_ID_CHARS = 64  # a Last-Event-ID longer than any id this module makes is not one of ours


@dataclass(frozen=True, slots=True)
class EventId:
    tag: str
    stream: int
    seq: int

    def __str__(self) -> str:
        return f"{self.tag}-{self.stream}-{self.seq}"


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def parse_event_id(text: str) -> EventId | None:
    """The event id `text` spells, or None when it is not of this module's form."""
    if len(text) > MAX_ID_CHARS:
        return None
    parts = text.strip().split("-")
    if len(parts) != 3 or not parts[0].isascii() or not parts[0].isalnum():
        return None
    stream, seq = _number(parts[1]), _number(parts[2])
    if stream is None or seq is None:
        return None
    return EventId(parts[0], stream, seq)


class ReplayLog:
    """The events one stream sent, newest last: past `max_events` or `max_bytes` the oldest are forgotten,
    but never the newest (so a response larger than the byte bound can still be resumed)."""

    __slots__ = ("_bytes", "_events", "last_seq", "max_bytes", "max_events")

    def __init__(self, max_events: int, max_bytes: int) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._events: deque[tuple[int, bytes]] = deque()
        self._bytes = 0
        self.last_seq = 0  # the priming event's seq until a message is recorded

    def record(self, data: bytes) -> int:
        """Keep one sent message; its seq."""
        self.last_seq += 1
        self._events.append((self.last_seq, data))
        self._bytes += len(data)
        while len(self._events) > 1 and (len(self._events) > self.max_events or self._bytes > self.max_bytes):
            self._bytes -= len(self._events.popleft()[1])
        return self.last_seq

    @property
    def first_seq(self) -> int:
        """The oldest seq still kept (last_seq + 1 when nothing is)."""
        return self._events[0][0] if self._events else self.last_seq + 1

    @property
    def size(self) -> tuple[int, int]:
        """(events, bytes) kept."""
        return len(self._events), self._bytes

    def covers(self, seq: int) -> bool:
        """Whether everything sent after `seq` is still kept."""
        return self.first_seq - 1 <= seq <= self.last_seq

    def after(self, seq: int) -> list[tuple[int, bytes]]:
        """The kept events sent after `seq`, oldest first (check covers(seq) first)."""
        return [event for event in self._events if event[0] > seq]


@dataclass(frozen=True, slots=True)
class Resume:
    """A Last-Event-ID this session can resume: the stream, and the seq to replay after."""

    stream: int
    seq: int


@dataclass(frozen=True, slots=True)
class CannotResume:
    """Why a Last-Event-ID cannot be resumed; `expired` when it fell out of the replay log, `conflict` when
    resuming would open a second GET stream."""

    reason: str
    expired: bool = False
    conflict: bool = False


def resolve(last_event_id: str, tag: str, logs: Mapping[int, ReplayLog]) -> Resume | CannotResume:
    """What a Last-Event-ID sent to the session tagged `tag` (whose resumable streams are `logs`) resumes."""
    event = parse_event_id(last_event_id)
    if event is None:
        return CannotResume("Last-Event-ID is not an event id this gateway sent")
    if event.tag != tag:
        return CannotResume("Last-Event-ID names an event of another session")
    log = logs.get(event.stream)
    if log is None:
        return CannotResume("Last-Event-ID names a stream this session no longer keeps")
    if event.seq > log.last_seq:
        return CannotResume("Last-Event-ID names an event its stream has not sent")
    if not log.covers(event.seq):
        return CannotResume("Last-Event-ID names an event that fell out of its stream's replay buffer", expired=True)
    return Resume(event.stream, event.seq)
