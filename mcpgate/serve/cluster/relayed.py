"""The standing streams this instance relays for other instances' sessions: a session's GET stream that the
balancer sent here, which the forwarder (serve/cluster/forward.py) passes on from its owner as it comes.

They are not this instance's work: a drain does not wait for them. When this instance starts draining, `end_all`
ends each one cleanly (the client's reply ends as a finished stream; its client opens the stream again, through
the balancer, on an instance that is not stopping) and every stream relayed after that is ended as soon as it
has begun. An owner that stops mid-stream is another matter (the forwarder logs it, naming the owner).

One per Forwarder; the set is bounded by the worker's connections (each stream holds one client connection).
"""

from __future__ import annotations

import http.client
import logging
import socket

log = logging.getLogger("mcpgate.forward")


class Relayed:
    """The connections to owners over which a standing stream is being relayed; `ending` once a drain began."""

    def __init__(self) -> None:
        self._open: set[http.client.HTTPConnection] = set()
        self.ending = False

    def __len__(self) -> int:
        return len(self._open)

    def begin(self, conn: http.client.HTTPConnection) -> bool:
        """Count a stream in; False when this instance is draining (the stream is to end at once)."""
        if self.ending:
            return False
        self._open.add(conn)
        return True

    def finish(self, conn: http.client.HTTPConnection) -> None:
        self._open.discard(conn)

    def end_all(self) -> int:
        """End every relayed stream, and every one begun from now on; how many were open."""
        self.ending = True
        ending = list(self._open)
        for conn in ending:
            cut(conn)
        if ending:
            log.info(
                "draining: streams relayed for other instances' sessions ended: %d (their clients reopen them)",
                len(ending),
            )
        return len(ending)


def cut(conn: http.client.HTTPConnection) -> None:
    """Stop reading from the owner: the relaying loop's read returns (or fails) at once, and the loop ends."""
    sock = conn.sock
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed
        pass
