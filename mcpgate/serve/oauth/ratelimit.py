"""Failed sign-ins per client address: past the limit in a sliding minute, the address must wait.

The table is bounded (TRACKED_ADDRESSES, least recently failed evicted first) and per worker process. An IPv6
client is counted by its /64 (one host usually holds the whole prefix). Behind a trusted reverse proxy (a peer in
MCPGATE_TRUSTED_PEERS) the address is the last one the proxy appended to X-Forwarded-For.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from .. import auth

WINDOW = 60.0  # seconds: the limit is per minute
TRACKED_ADDRESSES = 10_000  # most client addresses remembered (each holds at most `limit` timestamps)


def client_key(environ: dict[str, Any], trusted: auth.Networks) -> str:
    """The address a sign-in attempt is counted against."""
    peer = str(environ.get("REMOTE_ADDR") or "")
    if auth.peer_trusted(peer, trusted):
        forwarded = str(environ.get("HTTP_X_FORWARDED_FOR") or "").split(",")[-1].strip()
        peer = forwarded or peer
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return peer or "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class FailureLimit:
    """At most `limit` failures per address in any WINDOW seconds; then `retry_after` says how long to wait."""

    def __init__(
        self,
        limit: int,
        window: float = WINDOW,
        tracked: int = TRACKED_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window, self.tracked, self.clock = limit, window, tracked, clock
        self.failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, key: str) -> int:
        """Whole seconds until this address may try again; 0 when it may now."""
        stamps = self.failures.get(key)
        if stamps is None or len(stamps) < self.limit:
            return 0
        wait = self.window - (self.clock() - stamps[0])
        if wait <= 0:
            return 0
        return max(1, int(wait + 0.999))

    def failed(self, key: str) -> None:
        """Count one failure (the oldest beyond the limit falls off)."""
        stamps = self.failures.pop(key, None)
        if stamps is None:
            stamps = deque(maxlen=self.limit)
        stamps.append(self.clock())
        self.failures[key] = stamps  # most recent last
        while len(self.failures) > self.tracked:
            self.failures.popitem(last=False)
