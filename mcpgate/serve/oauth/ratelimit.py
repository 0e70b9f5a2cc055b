"""Failed sign-ins per client address and per user name: past the limit in a sliding minute, they must wait.

The tables are bounded (TRACKED_ADDRESSES, least recently failed evicted first) and per worker process. An IPv6
client is counted by its /64 (one host usually holds the whole prefix). X-Forwarded-For counts only from a peer in
MCPGATE_FORWARDED_FOR_PROXIES (empty by default: any client can write the header, so it is ignored); then the
client is the rightmost entry outside those networks (entries to its left are whatever the client sent).
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from mcpgate.serve.front import auth

WINDOW = 60.0  # seconds: the limit is per minute
TRACKED_ADDRESSES = 10_000  # most keys remembered (each holds at most `limit` timestamps)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> Address | None:
    """An address as a peer or an X-Forwarded-For entry spells it (a zone, brackets or a port dropped)."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _within(address: Address, networks: auth.Networks) -> bool:
    return any(address in network for network in networks)


def client_key(environ: dict[str, Any], proxies: auth.Networks) -> str:
    """The address a sign-in attempt is counted against: the peer's; when the peer is one of the `proxies`
    (MCPGATE_FORWARDED_FOR_PROXIES), the rightmost X-Forwarded-For entry outside them (an entry that is no
    address stops the walk at the proxy that forwarded it)."""
    peer = str(environ.get("REMOTE_ADDR") or "")
    address = _address(peer)
    if address is None:
        return peer or "unknown"
    if proxies and _within(address, proxies):
        for hop in reversed(str(environ.get("HTTP_X_FORWARDED_FOR") or "").split(",")):
            forwarded = _address(hop)
            if forwarded is None:
                break
            address = forwarded
            if not _within(address, proxies):
                break
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class FailureLimit:
    """At most `limit` failures per key (an address, a user name) in any WINDOW seconds; then `retry_after`
    says how long to wait. A sign-in is counted as failed before its password is checked (so that attempts
    running at the same time count) and forgiven when it succeeds or was never checked."""

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
        """Whole seconds until this key may try again; 0 when it may now."""
        stamps = self.failures.get(key)
        if stamps is None or len(stamps) < self.limit:
            return 0
        wait = self.window - (self.clock() - stamps[0])
        if wait <= 0:
            return 0
        return max(1, int(wait + 0.999))

    def failed(self, key: str) -> float:
        """Count one failure (the oldest beyond the limit falls off); returns its time, for `forgive`."""
        stamps = self.failures.pop(key, None)
        if stamps is None:
            stamps = deque(maxlen=self.limit)
        stamp = self.clock()
        stamps.append(stamp)
        self.failures[key] = stamps  # most recent last
        while len(self.failures) > self.tracked:
            self.failures.popitem(last=False)
        return stamp

    def forgive(self, key: str, stamp: float) -> None:
        """Take back the failure `failed` counted at `stamp` (when it is still held)."""
        stamps = self.failures.get(key)
        if stamps is not None and stamp in stamps:
            stamps.remove(stamp)
            if not stamps:
                del self.failures[key]
