"""The gunicorn worker: gunicorn's gevent_pywsgi worker with a lighter request-header parser, and the
gateway's part of a shutdown.

The worker owns what belongs to the worker: it tracks its client connections in its handler, and a
graceful shutdown (SIGTERM) starts from its signal handling, on a greenlet of its own, as gunicorn's
gevent worker does with SIGQUIT: every session is ended (children go down the shutdown ladder), and
reading stops on every client connection so idle keep-alive ones close while replies still finish.
"""

from __future__ import annotations

import functools
import socket
from typing import TYPE_CHECKING, Any, BinaryIO

import gevent
from gunicorn.workers.ggevent import GeventPyWSGIWorker, PyWSGIHandler, PyWSGIServer

from .request_headers import RequestHeaders

if TYPE_CHECKING:  # the master loads this class; the gateway's modules load in the worker, with the app
    from .gateway import Gateway

LAST_CHANCE_TIMEOUT = 5.0  # seconds for children still alive when the worker's loop has ended


class Handler(PyWSGIHandler):  # type: ignore[misc]
    """One client connection: read with RequestHeaders, and known to the server while it is open."""

    def MessageClass(self, fp: BinaryIO, *args: Any) -> RequestHeaders:  # pywsgi names it so
        return RequestHeaders.read(fp)

    def handle(self) -> None:
        connections: set[socket.socket] = self.server.connections
        sock = self.socket  # pywsgi clears self.socket when the connection ends
        connections.add(sock)
        try:
            super().handle()
        finally:
            connections.discard(sock)


class Server(PyWSGIServer):  # type: ignore[misc]
    """pywsgi's server, holding the set of open client connections its worker shares."""

    def __init__(self, *args: Any, connections: set[socket.socket], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connections = connections


class GatewayWorker(GeventPyWSGIWorker):  # type: ignore[misc]
    """gunicorn's gevent_pywsgi worker with the header parser above and the gateway's shutdown."""

    wsgi_handler = Handler

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connections: set[socket.socket] = set()
        self.server_class = functools.partial(Server, connections=self.connections)
        self._shutdown: gevent.Greenlet | None = None

    def gateway(self) -> Gateway | None:
        extensions = getattr(self.wsgi, "extensions", {})  # the Flask app create_app() built
        gateway: Gateway | None = extensions.get("mcpgate")
        return gateway

    def handle_exit(self, sig: int, frame: Any) -> None:
        """SIGTERM: gunicorn stops accepting; the gateway starts stopping children now, not after the streams
        time out. Out of the signal handler, so the shutdown may block."""
        super().handle_exit(sig, frame)
        if self._shutdown is None:
            self._shutdown = gevent.spawn(self.shut_down, max(1.0, self.cfg.graceful_timeout - 2.0))

    def shut_down(self, timeout: float) -> None:
        self.release_connections()
        gateway = self.gateway()
        if gateway is not None:
            gateway.shutdown(timeout=timeout)

    def release_connections(self) -> None:
        """Stop reading from every client connection: idle keep-alive ones close, replies still finish."""
        for sock in list(self.connections):
            try:
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass

    def run(self) -> None:
        try:
            super().run()
        finally:
            gateway = self.gateway()
            if gateway is not None:  # a last chance for children still alive (bounded)
                gateway.shutdown(timeout=LAST_CHANCE_TIMEOUT)
