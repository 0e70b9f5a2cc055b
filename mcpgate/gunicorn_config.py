"""gunicorn settings for mcpgate: `gunicorn -c python:mcpgate.gunicorn_config mcpgate.wsgi`.

The repository's gunicorn.conf.py imports this module, so plain `gunicorn mcpgate.wsgi`
run from the project root (as a Procfile does) uses it too.

One worker: sessions and their children live in the worker's memory, so a second
worker would not know the first one's sessions. The gevent worker carries every
SSE stream on a greenlet.
"""

from __future__ import annotations

import os
import resource

import gevent

from mcpgate import orphans
from mcpgate.settings import Settings, SettingsError

worker_class = "mcpgate.serve.worker.GatewayWorker"  # gevent_pywsgi with a lighter header parser
workers = 1
_port = os.environ.get("PORT")
bind = [f"0.0.0.0:{_port}"] if _port else [os.environ.get("MCPGATE_BIND", "127.0.0.1:8000")]
# Each open SSE stream (GET streams, long tool calls) holds one connection.
worker_connections = int(os.environ.get("MCPGATE_WORKER_CONNECTIONS", "2000"))
# Children get close_timeout + term_timeout (2 s + 2 s by default) to stop inside this.
graceful_timeout = int(os.environ.get("MCPGATE_GRACEFUL_TIMEOUT", "15"))
timeout = 30
# For gunicorn's own "gevent" worker: idle keep-alive seconds. With gevent_pywsgi a graceful shutdown
# releases idle keep-alive connections itself (Gateway.release_connections).
keepalive = 5
preload_app = False
errorlog = "-"
loglevel = os.environ.get("MCPGATE_LOG_LEVEL", "info").lower()
accesslog = os.environ.get("MCPGATE_ACCESS_LOG") or None
# No control socket in $HOME: several gateways on one machine would fight over it.
control_socket_disable = True


def on_starting(server):  # type: ignore[no-untyped-def]
    """Validate the settings before any worker starts; adopt orphans so a dead worker's children can be found."""
    try:
        Settings.from_env()
    except SettingsError as exc:
        raise SystemExit(f"mcpgate: invalid setting: {exc}") from None
    # Each session holds three pipes and each stream a socket: take every descriptor the system allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if not orphans.become_subreaper():
        server.log.warning("mcpgate: could not become a child subreaper; orphan cleanup is limited")


def child_exit(server, worker):  # type: ignore[no-untyped-def]
    """A worker exited (maybe by SIGKILL): end whatever it left running."""
    orphans.reap_orphans(set(server.WORKERS) - {worker.pid})


def post_worker_init(worker):  # type: ignore[no-untyped-def]
    """Start stopping children as soon as a graceful shutdown begins, not after the streams time out."""

    def watch() -> None:
        while worker.alive:
            gevent.sleep(0.2)
        gateway = worker.wsgi.extensions.get("mcpgate") if hasattr(worker.wsgi, "extensions") else None
        if gateway is not None:
            gateway.shutdown(timeout=max(1.0, graceful_timeout - 2.0))

    gevent.spawn(watch)


def worker_exit(server, worker):  # type: ignore[no-untyped-def]
    """Last chance: every child still alive goes through the ladder (bounded)."""
    gateway = worker.wsgi.extensions.get("mcpgate") if hasattr(getattr(worker, "wsgi", None), "extensions") else None
    if gateway is not None:
        gateway.shutdown(timeout=5.0)
