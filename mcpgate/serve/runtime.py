"""The gateway's runtime in one worker: the one object the app factory builds and the worker drives.

It holds the settings, the published servers, the cluster (None without REDIS_URL), the session-id minter
(the cluster's ids, which name this instance, else plain random ones), whether a graceful stop has begun
(`draining`: /healthz answers 503 "draining"), and the embedded authorization server when there is one. The
factory attaches it to its Flask app under one key; `of(app)` reads it back. Nothing else of the gateway's is
kept on the app, in the environ (but the request's own context: serve/front/context.py) or in module globals.

The worker's side of the contract (serve/front/worker.py), modelled on gunicorn's worker and app: the worker
loads the app within `listening_on(addresses)` (where other instances of a fleet reach this one), then calls
only `drain(budget)` (which tells it how many requests are in flight as it begins) and `close(timeout)`;
`in_flight()` is that count at any time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gevent

from mcpgate.config.settings import Settings
from mcpgate.core.sessions import new_session_id
from mcpgate.serve.servers.published import PublishedServers

if TYPE_CHECKING:  # Authlib is imported only in the embedded mode, the fleet's modules only with REDIS_URL
    from flask import Flask

    from mcpgate.serve.cluster.instances import Cluster
    from mcpgate.serve.front.bare import BareApp
    from mcpgate.serve.oauth.server import EmbeddedServer

KEY = "mcpgate.runtime"  # the Flask app's extensions key of its Runtime
DRAIN_POLL = 0.1  # seconds between checks that nothing is in flight any more while draining
STRAGGLERS = 5.0  # seconds a close waits for requests read after the drain (a call is answered in milliseconds)

# The worker's listening addresses while it loads the app ("host:port", "unix:/path"); empty: not loaded by it.
_listening: ContextVar[tuple[str, ...]] = ContextVar("mcpgate_listening", default=())


@contextmanager
def listening_on(addresses: Sequence[str]) -> Iterator[None]:
    """Within it, a runtime built without `listening` takes these addresses: the worker loads the app so."""
    token = _listening.set(tuple(addresses))
    try:
        yield
    finally:
        _listening.reset(token)


@dataclass(eq=False)
class Runtime:
    settings: Settings
    servers: PublishedServers
    cluster: Cluster | None = None
    minter: Callable[[], str] = new_session_id  # every server's session ids
    draining: bool = False
    drained: bool = False  # the drain ended with nothing in flight (close then answers what came after it first)
    oauth: EmbeddedServer | None = None  # MCPGATE_AUTH_MODE=embedded's server (the factory's authenticator sets it)

    @classmethod
    def build(cls, settings: Settings, listening: Sequence[str] | None = None) -> Runtime:
        """The cluster first (when settings.redis_url is set: its directory entry names this worker's first
        listening address unless MCPGATE_INTERNAL_URL is set), then the servers, given the cluster and its minter."""
        cluster: Cluster | None = None
        if settings.redis_url:  # the fleet's modules (its directory, forwarder, Redis) only in a fleet's worker
            from mcpgate.serve.cluster.instances import create as create_cluster

            cluster = create_cluster(settings, _listening.get() if listening is None else listening)
        minter = cluster.mint if cluster is not None else new_session_id
        servers = PublishedServers(settings, cluster=cluster, minter=minter)
        return cls(settings, servers, cluster, minter)

    def attach(self, app: Flask | BareApp) -> None:
        app.extensions[KEY] = self

    def in_flight(self) -> int:
        """Requests being answered by every server (sessions' requests, pooled calls, parked calls included)."""
        return sum(server.in_flight() for _name, server in self.servers.items())

    def drain(self, budget: float, begun: Callable[[int], None] | None = None) -> int:
        """A graceful stop's first part: refuse new work (/healthz says "draining"; every server refuses new
        sessions and new 2026-07-28 calls), tell `begun` how many requests are in flight, wait at most `budget`
        seconds until none is. The instance stays in the cluster's directory until its process exits (its
        sessions' requests and its parked calls' retries are still forwarded here, and what it forwards is let in).
        The number of requests still in flight."""
        self.draining = True
        if self.cluster is not None:  # relayed streams end; the directory says it stops (Cluster.draining)
            self.cluster.draining(budget)
        servers = [server for _name, server in self.servers.items()]
        for server in servers:
            server.closing = True
        busy = sum(server.in_flight() for server in servers)
        if begun is not None:
            begun(busy)
        deadline = time.monotonic() + budget
        while busy and time.monotonic() < deadline:
            gevent.sleep(DRAIN_POLL)
            busy = sum(server.in_flight() for server in servers)
        self.drained = not busy
        return busy

    def close(self, timeout: float) -> None:
        """Shut every server down (their sessions end, their children go down the stop ladder), waiting at most
        about `timeout` seconds. After a clean drain, requests read since (kept-alive connections are read a moment
        longer) are answered first, for at most STRAGGLERS seconds: each session ends once nothing of it is in
        flight, released whole for a takeover (serve/sessions/kept.py), never under a call."""
        started = time.monotonic()
        servers = [server for _name, server in self.servers.items()]
        if self.drained:  # not when the drain's time ran out: what is in flight then is cut as before
            while time.monotonic() < started + min(STRAGGLERS, timeout / 2):
                if not sum(server.end_quiet_sessions() for server in servers) and not self.in_flight():
                    break
                gevent.sleep(DRAIN_POLL)
        self.servers.close(timeout=max(0.0, timeout - (time.monotonic() - started)))
        # It leaves the directory as the process exits (Cluster.stop, atexit): requests read until then (a
        # kept-alive connection) and forwarded from here are let in by the others.


def of(app: object) -> Runtime | None:
    """The Runtime the app factory attached to `app` (None: another app)."""
    extensions = getattr(app, "extensions", None)
    runtime = extensions.get(KEY) if isinstance(extensions, dict) else None
    return runtime if isinstance(runtime, Runtime) else None
