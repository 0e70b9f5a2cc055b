"""Remember cancelled request ids for a while, so late responses can be dropped.

When a client cancels a request, the peer may still answer it (the two messages
can cross). The tracker keeps each cancelled id for `ttl` seconds and at most
`max_entries` ids (the oldest are forgotten first); the clock is passed in.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable


class CancelTracker:
    def __init__(self, ttl: float = 60.0, max_entries: int = 10_000) -> None:
        if ttl <= 0 or max_entries < 1:
            raise ValueError("ttl and max_entries must be positive")
        self.ttl = ttl
        self.max_entries = max_entries
        # each cancelled key's deadline, oldest first: read it (empty: nothing is cancelled), change it through the
        # methods
        self.deadlines: OrderedDict[Hashable, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self.deadlines)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.deadlines

    def cancel(self, key: Hashable, now: float) -> None:
        """Record that the request with this key was cancelled at `now`."""
        self.expire(now)
        self.deadlines.pop(key, None)
        self.deadlines[key] = now + self.ttl
        while len(self.deadlines) > self.max_entries:
            self.deadlines.popitem(last=False)

    def drop_late(self, key: Hashable, now: float) -> bool:
        """True when a response with this key answers a cancelled request and must be dropped.

        The entry is consumed: a request is answered at most once.
        """
        deadline = self.deadlines.pop(key, None)
        return deadline is not None and deadline > now

    def forget(self, key: Hashable) -> None:
        self.deadlines.pop(key, None)

    def expire(self, now: float) -> None:
        """Forget entries whose time is up (insertion order is deadline order)."""
        while self.deadlines:
            key, deadline = next(iter(self.deadlines.items()))
            if deadline > now:
                break
            del self.deadlines[key]
