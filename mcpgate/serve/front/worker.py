"""The gunicorn worker: gunicorn's gevent_pywsgi worker with a stricter, lighter request reader, the
connection timeouts and budget pywsgi lacks (serve/front/connection.py: its handler and server), and the gateway's
part of a shutdown.

The worker tracks its client connections, and a graceful shutdown (SIGTERM) starts from its signal handling,
on a greenlet of its own, as gunicorn's gevent worker does with SIGQUIT. Of the gateway it knows only the
Runtime the app factory attached to the app (`GatewayWorker.runtime`; serve/runtime.py): it loads the app within
the runtime's `listening_on` its addresses, and calls the runtime's drain and close, nothing else.
It drains first: the listener stays
open, /healthz answers 503 "draining" (balancers stop sending new sessions), every server refuses new sessions
and new 2026-07-28 calls with 503 + Retry-After; in a fleet this instance stays in the directory until the
drain ends (its sessions' requests are still forwarded here). Requests already being answered (sessions'
requests, pooled calls, a call parked for its client's input whose retry still comes here) go on, and open
sessions' next requests are served, until
none is in flight or the drain's time is up: MCPGATE_GRACEFUL_TIMEOUT less the children's stop ladder. Then
gunicorn stops accepting, every session of every server is ended (children go down the shutdown ladder), and
reading stops on every client connection so idle keep-alive ones close while replies still finish; from then on
every reply says Connection: close and ends its connection, one accepted before the listener closes too.

In a fleet with MCPGATE_HANDOFF_DIR the worker also takes the connections other instances on this machine hand it
(serve/front/handoff.py: a greenlet on its unix socket, served by the first listener's server), refused from the
moment its drain begins (they are forwarded here over HTTP instead); the socket is removed as the worker exits.
"""

from __future__ import annotations

import functools
import socket
import time
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
from gevent.pool import Pool
from gunicorn.http.wsgi import base_environ
from gunicorn.sock import ssl_context
from gunicorn.workers.ggevent import VERSION, GeventPyWSGIWorker

from mcpgate.config.settings import Settings
from mcpgate.serve.front.connection import Handler, Limits, Server
from mcpgate.serve.front.handoff import Handoff, Listener, adopt, room

if TYPE_CHECKING:  # the master loads this class; the gateway's modules load in the worker, with the app
    from mcpgate.serve.runtime import Runtime

LAST_CHANCE_TIMEOUT = 5.0  # seconds for children still alive when the worker's loop has ended
LADDER_GRACE = 2.0  # seconds kept beyond the children's stop ladder (close + term timeouts) after a drain
EXIT_MARGIN = 2.0  # seconds of gunicorn's graceful timeout kept for the worker's own exit
HEARTBEAT = 1.0  # seconds between the worker's notes to the master that it lives (gunicorn's own loop's period)


def drain_budget(graceful: float, ladder: float) -> float:
    """Seconds a graceful stop may drain: what gunicorn's graceful timeout leaves once the children's stop
    ladder (and a margin, in `ladder`) is kept for after it; never negative."""
    return max(0.0, graceful - ladder)


class GatewayWorker(GeventPyWSGIWorker):  # type: ignore[misc]
    """gunicorn's gevent_pywsgi worker with connection.py's handler and server, and the gateway's shutdown."""

    wsgi_handler = Handler

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connections: set[socket.socket] = set()
        self.front_servers: list[Server] = []  # the servers gunicorn made of this worker's listeners (run)
        self._shutdown: gevent.Greenlet | None = None
        self._stopped = gevent.event.Event()  # set when a graceful stop's shutdown is done: serve() leaves at once
        # where other instances of a fleet reach this one (-b included), noted while self.sockets are gunicorn's
        # listeners (gevent's init_process makes them plain sockets)
        self.listening = [listening_address(listener) for listener in self.sockets]
        # MCPGATE_HANDOFF_DIR in a fleet: connections handed to other instances, and taken from them (handoff.py)
        self.handoff: Handoff | None = None
        self.handed: Listener | None = None

    def load_wsgi(self) -> None:
        """gunicorn's, within the addresses this worker listens on (the app factory's cluster names them)."""
        from mcpgate.serve.runtime import listening_on

        # Each request, stream and child's reader runs in a greenlet: recording the spawning stack and tree of each
        # (gevent's default, for debugging) cost memory per idle session and CPU per spawn (the relay's choice too).
        gevent.config.track_greenlet_tree = False
        with listening_on(self.listening):
            super().load_wsgi()
        runtime = self.runtime()  # a handoff directory that cannot serve: the worker fails to boot, saying why
        if runtime is not None and runtime.settings.handoff_dir and runtime.cluster is not None:
            cluster, directory = runtime.cluster, runtime.settings.handoff_dir
            self.handed = Listener(directory, cluster.instance)  # (the directory made and checked: handoff.prepared)
            self.handoff = Handoff(directory, cluster.instance, cluster.owner)

    def runtime(self) -> Runtime | None:
        """The gateway's Runtime, which the app factory attached to the app (None: another app)."""
        from mcpgate.serve.runtime import of

        return of(self.wsgi)

    def handle_exit(self, sig: int, frame: Any) -> None:
        """SIGTERM: drain, then gunicorn stops accepting and the gateway stops the children (the module's
        docstring). Out of the signal handler, so the shutdown may block."""
        if self._shutdown is None:
            self._shutdown = gevent.spawn(self.drain_then_stop, sig, frame)

    def drain_then_stop(self, sig: int, frame: Any) -> None:
        graceful = float(self.cfg.graceful_timeout)
        started = time.monotonic()
        runtime = self.runtime()
        if self.handed is not None:  # handed connections go on being forwarded here instead
            self.handed.refusing = True
        try:
            if runtime is not None:
                s = runtime.settings
                self.drain(runtime, drain_budget(graceful, s.close_timeout + s.term_timeout + LADDER_GRACE))
        finally:
            super().handle_exit(sig, frame)  # not alive: serve() closes the listeners (at once, or at its heartbeat)
            try:
                self.shut_down(max(1.0, graceful - EXIT_MARGIN - (time.monotonic() - started)))
                self.end_requests(started + graceful - EXIT_MARGIN)
            finally:
                self._stopped.set()

    def drain(self, runtime: Runtime, budget: float) -> None:
        """Refuse new work and wait (at most `budget` seconds) until no request is in flight. In a fleet the
        instance stays in the directory while it drains: its sessions' requests and its parked calls' retries are
        still forwarded here (new sessions are refused); it leaves when the drain ends."""

        def begun(busy: int) -> None:
            self.log.info("mcpgate: draining (%d requests in flight, at most %.1f s)", busy, budget)

        busy = runtime.drain(budget, begun)
        if busy:
            self.log.warning("mcpgate: drain time is up with %d requests in flight; stopping", busy)

    def shut_down(self, timeout: float) -> None:
        self.release_connections()
        runtime = self.runtime()
        if runtime is not None:
            runtime.close(timeout)

    def end_requests(self, deadline: float) -> None:
        """Wait (until `deadline`) for the connections still being served, then end those left (a reply written to
        a client that reads no more, for one). gunicorn's own wait for them lasts a whole graceful timeout from the
        drain's end, past the master's, which kills the worker (its exit hooks unrun: the spans' flush, the
        fleet's leave) a graceful timeout after its SIGTERM."""
        for server in self.front_servers:
            pool = server.pool
            if pool is None or pool.join(timeout=max(0.0, deadline - time.monotonic())):
                continue
            self.log.warning("mcpgate: %d connections still busy as the graceful stop's time is up; ended", len(pool))
            pool.kill(block=True, timeout=1.0)

    def release_connections(self) -> None:
        """Stop reading from every client connection: idle keep-alive ones close, replies still finish. Every
        connection ends after its reply, which says Connection: close (Server.closing), also one accepted until
        serve() closes the listener (once end_requests is done): a connection kept alive past this point (a
        balancer's, or a forwarding instance's, which sends this instance's released sessions' requests here
        while it stays in the directory) would keep the worker busy until end_requests ends it mid-request."""
        for server in self.front_servers:
            server.closing = True
        for sock in list(self.connections):
            try:
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass

    def make_server(self, limits: Limits, *args: Any, **kwargs: Any) -> Server:
        """gunicorn's server of one listener: connection.py's, known to end_requests."""
        server = Server(*args, connections=self.connections, limits=limits, **kwargs)
        server.handoff = self.handoff
        self.front_servers.append(server)
        return server

    def run(self) -> None:
        runtime = self.runtime()
        settings = runtime.settings if runtime is not None else Settings.from_env()
        limits = Limits.of(settings, self.worker_connections)
        self.server_class = functools.partial(self.make_server, limits)
        try:
            self.serve()
        finally:
            if self.handed is not None:
                self.handed.close()
            if runtime is not None:  # a last chance for children still alive (bounded)
                runtime.close(LAST_CHANCE_TIMEOUT)

    def serve(self) -> None:
        """gunicorn's gevent worker's loop (GeventWorker.run: a server a listener, a heartbeat each second while
        alive, then the listeners closed and the connections left waited for, at most the graceful timeout), but
        its pause between heartbeats ends as soon as a graceful stop's shutdown is done: gunicorn's plain sleep made
        every stop wait for its next tick (1.2 s for an idle gateway's stop, each worker of a redeploy)."""
        ssl_args = {"ssl_context": ssl_context(self.cfg)} if self.cfg.is_ssl else {}
        servers = []
        for listener in self.sockets:
            listener.setblocking(1)
            environ = base_environ(self.cfg)
            environ.update({"wsgi.multithread": True, "SERVER_SOFTWARE": VERSION})
            server = self.server_class(
                listener,
                application=self.wsgi,
                spawn=Pool(self.worker_connections),
                log=self.log,
                handler_class=self.wsgi_handler,
                environ=environ,
                **ssl_args,
            )
            server.start()
            servers.append(server)
        if self.handed is not None and servers:
            self.handed.start(functools.partial(room, servers[0]), functools.partial(adopt, servers[0]))
        while self.alive:
            self.notify()
            self._stopped.wait(HEARTBEAT)
        if self.handed is not None:
            self.handed.refusing = True
        for server in servers:
            server.close()  # no new connection
        deadline = time.monotonic() + float(self.cfg.graceful_timeout)
        for server in servers:  # those still served (a stop by max_requests; a graceful one has ended its own)
            while not server.pool.join(timeout=max(0.0, min(HEARTBEAT, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    self.log.warning("Worker graceful timeout (pid:%s)", self.pid)
                    server.stop(timeout=1)
                    break
                self.notify()


def listening_address(listener: Any) -> str:
    """A gunicorn listener as "host:port" ("unix:/path" for a Unix socket)."""
    name = listener.sock.getsockname()
    if isinstance(name, str):
        return f"unix:{name}"
    host, port = name[0], name[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
