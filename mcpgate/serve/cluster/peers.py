"""Which connections may carry a request forwarded by another instance of the fleet (its Mcpgate-Forwarded
header names the sending instance).

MCPGATE_CLUSTER_PEERS, when set, lists them. Otherwise a forwarded request must come from the address the
instance directory gives for its sender: the host of the sender's internal URL (resolved when it is a name).
An instance whose URL names an address of this machine (loopback, or one this machine holds) is let in from
any address of this machine: the kernel picks the source address of a local connection, so an instance on
127.0.0.1 reaching one bound to 10.0.0.5 on the same machine connects from 10.0.0.5.

The peer address is not the defence against a client that sends the header itself: a balancer on this machine
connects from loopback too. That defence is the header's MAC over the whole request and its single-use nonce
(core/session_ids, serve/cluster/instances.py), and the recipes' balancers drop a client's Mcpgate-Forwarded
header; this check keeps other machines out even if the cluster key leaked.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from mcpgate.serve.front import auth

log = logging.getLogger("mcpgate.cluster")

CACHE_SIZE = 256  # hosts and addresses whose answers are remembered
RESOLVED_FOR = 5.0  # seconds a host's resolved addresses are reused


class ForwardingPeers:
    """`allowed(peer, sender)`. `lookup`: an instance's internal URL from the directory (None: unknown); `read`,
    when given, asked when `lookup` has none (the directory read again: serve/cluster/instances.py)."""

    def __init__(
        self,
        lookup: Callable[[str], str | None],
        networks: auth.Networks = (),
        read: Callable[[str], str | None] | None = None,
    ) -> None:
        self.lookup, self.networks, self.read = lookup, networks, read
        self._resolved: dict[str, tuple[frozenset[str], float]] = {}  # host -> (its addresses, until)
        self._local: dict[str, bool] = {}  # address -> whether this machine holds it
        self._answers: dict[tuple[str, str], tuple[bool, float]] = {}  # (peer, sender's URL) -> answer, until

    def allowed(self, peer: str | None, sender: str) -> bool:
        """Whether a connection from `peer` may carry a request forwarded by instance `sender` (an answer is reused
        for RESOLVED_FOR seconds, as long as the URL's resolved addresses are: every forwarded request asks)."""
        if self.networks:
            return auth.peer_trusted(peer, self.networks)
        url = self.lookup(sender)
        if url is None and self.read is not None:
            url = self.read(sender)
        if url is None or not peer:
            return False
        now = time.monotonic()
        known = self._answers.get((peer, url))
        if known is not None and known[1] > now:
            return known[0]
        answer = self._allowed(peer, url)
        if len(self._answers) >= CACHE_SIZE:
            self._answers.clear()
        self._answers[(peer, url)] = (answer, now + RESOLVED_FOR)
        return answer

    def _allowed(self, peer: str, url: str) -> bool:
        address = plain_address(peer)
        if address is None:
            return False
        addresses = self.host_addresses(urlsplit(url).hostname or "")
        if address in addresses:
            return True
        return self.is_local(address) and any(self.is_local(each) for each in addresses)

    def host_addresses(self, host: str) -> frozenset[str]:
        """The addresses a URL's host names (an IP literal: itself; a name: resolved, cached briefly)."""
        literal = plain_address(host)
        if literal is not None:
            return frozenset({literal})
        now = time.monotonic()
        cached = self._resolved.get(host)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            found = frozenset(address for info in infos if (address := plain_address(str(info[4][0]))))
        except OSError as exc:
            log.warning("could not resolve instance host %s: %s", host, exc)
            found = frozenset()
        if len(self._resolved) >= CACHE_SIZE:
            self._resolved.clear()
        self._resolved[host] = (found, now + RESOLVED_FOR)
        return found

    def is_local(self, address: str) -> bool:
        """Whether this machine holds `address` (loopback, or a socket can be bound to it)."""
        known = self._local.get(address)
        if known is not None:
            return known
        parsed = ipaddress.ip_address(address)
        local = parsed.is_loopback
        if not local:
            family = socket.AF_INET6 if parsed.version == 6 else socket.AF_INET
            try:
                with socket.socket(family, socket.SOCK_STREAM) as probe:
                    probe.bind((address, 0))
                local = True
            except OSError:
                local = False
        if len(self._local) >= CACHE_SIZE:
            self._local.clear()
        self._local[address] = local
        return local


def plain_address(value: str | None) -> str | None:
    """An IP address in one spelling (IPv4-mapped IPv6 as IPv4; no zone, no brackets); None for anything else."""
    if not value:
        return None
    try:
        address = ipaddress.ip_address(value.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)
