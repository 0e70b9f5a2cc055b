"""Forward: what a handler raises when its request belongs to another instance of the fleet.

Its own module (standard library only) so that the handlers that raise it (serve/modern's bridge, child states
and tasks, serve/cluster/takeover.py) do not import the fleet (serve/cluster/instances.py: the directory, the
forwarder, the nonces) into a worker that is no fleet's: only the fleet's Cluster.serve catches it, and a worker
without REDIS_URL never raises it (tests/test_lazy_imports.py).
"""

from __future__ import annotations


class Forward(Exception):
    """Raised by a handler that finds its request belongs to another instance (`owner`): the Endpoint
    forwards it there. `body`: the request body the handler already read (None: the raw bytes of the message
    it parsed, the request context's `message`, are sent)."""

    def __init__(self, owner: str, body: bytes | None = None) -> None:
        super().__init__(f"forward to instance {owner}")
        self.owner = owner
        self.body = body
