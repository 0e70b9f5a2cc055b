"""A session's buffer: the messages for its client that no stream takes yet, held for the next stream to open.

The contract: at most `count` messages and `limit` bytes are held, oldest first. A message larger than `limit`
is dropped as it comes; past either bound, the oldest held go to make room (both logged with the session's
label). A stream takes every held message at once (`flush_to`, which never waits: what it delivers is bounded
here). Most sessions never hold a message: until one first waits, `messages` is a shared empty deque (a deque
is ~0.7 KB), so `if held.messages:` is how the session asks whether any waits.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcpgate.serve.sessions.stream import Stream

log = logging.getLogger("mcpgate.session")

# every session's messages until one first waits for a stream: never appended to
_NONE: deque[bytes] = deque(maxlen=0)


class Held:
    """The bounded messages a session holds for its next stream (see the module's docstring)."""

    __slots__ = ("_count", "_label", "_limit", "bytes", "messages")

    def __init__(self, count: int, limit: int, label: str) -> None:
        self.messages = _NONE
        self.bytes = 0
        self._count = count
        self._limit = limit
        self._label = label

    def append(self, data: bytes) -> None:
        """Hold a message for the next stream; past the buffer's messages or bytes, its oldest go."""
        if len(data) > self._limit:
            log.warning("session %s: no stream open; dropped a message larger than the buffer", self._label)
            return
        if self.messages is _NONE:
            self.messages = deque(maxlen=self._count)
        messages = self.messages
        dropped = 0
        while messages and (len(messages) == messages.maxlen or self.bytes + len(data) > self._limit):
            self.bytes -= len(messages.popleft())
            dropped += 1
        if dropped:
            log.warning("session %s: no stream open and the buffer is full; dropped %d oldest", self._label, dropped)
        messages.append(data)
        self.bytes += len(data)

    def put_first(self, older: Iterable[bytes]) -> None:
        """Messages older than those held (a released GET stream's unread ones) go ahead of them, within the
        bounds: held again in order, oldest first, so the newest are what the bounds keep."""
        again = [*older, *self.messages]
        self.messages.clear()
        self.bytes = 0
        for data in again:
            self.append(data)

    def flush_to(self, stream: Stream) -> None:
        """Deliver every held message to `stream`, oldest first (bounded here: no wait)."""
        messages = self.messages
        while messages:
            stream.deliver(messages.popleft(), force=True)
        self.bytes = 0
