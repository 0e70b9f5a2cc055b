"""The instances this one found unreachable ("gone" marks), and when a mark no longer holds.

An instance that cannot be reached is taken for gone (its sessions answered 404 at once, not after a connect
timeout each) until its directory entry, as it stood when it was found unreachable, would expire. A live
directory entry wins over the mark: the entry's expiry is read again (at most once a RECHECK) and, once it lies
later than when the mark was made, the entry was written since, by the instance's heartbeat or by an instance
restarted under the same MCPGATE_INSTANCE_ID (as the fleet recipe restarts them), and the mark is dropped. A dead
instance writes nothing, so its mark holds until its entry expires.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("mcpgate.cluster")

RECHECK = 0.1  # seconds between reads of a marked instance's entry (a live one wins that soon)
REWRITTEN = 0.5  # seconds an entry's expiry must have moved for it to count as written again
MARKS = 1024  # instances remembered as gone at most (past it, all are forgotten: they are looked up again)


class GoneMarks:
    """instance -> (the expiry its directory entry had when it was marked, the next time to read it again)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # read by whoever asks for every request (directory.lookup): `holds` is called only for a marked instance
        self.marks: dict[str, tuple[float, float]] = {}

    def mark(self, instance: str, ttl: float | None, fallback: float) -> None:
        """`instance` found unreachable; `ttl`: seconds its entry has left (None: unknown, then `fallback`)."""
        now = self.clock()
        if len(self.marks) >= MARKS:
            self.marks.clear()
        left = ttl if ttl is not None and ttl > 0 else fallback
        self.marks[instance] = (now + left, now + RECHECK)

    def holds(self, instance: str, read_ttl: Callable[[], float | None]) -> bool:
        """Whether `instance` is still taken for gone. `read_ttl`: its entry's seconds left now (None: no entry,
        or Redis did not answer)."""
        marked = self.marks.get(instance)
        if marked is None:
            return False
        expiry, recheck = marked
        now = self.clock()
        if now >= expiry:
            del self.marks[instance]
            return False
        if now < recheck:
            return True
        ttl = read_ttl()  # a Redis round trip: another request may have dropped or renewed the mark meanwhile
        if self.marks.get(instance) is not marked:
            return instance in self.marks
        if ttl is not None and now + ttl > expiry + REWRITTEN:
            del self.marks[instance]
            log.info("instance %s is in the directory again: no longer taken for gone", instance)
            return False
        self.marks[instance] = (expiry, now + RECHECK)
        return True
