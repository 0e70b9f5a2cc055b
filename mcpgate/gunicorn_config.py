"""gunicorn settings for mcpgate: `gunicorn -c python:mcpgate.gunicorn_config mcpgate.wsgi`.

The repository's gunicorn.conf.py imports this module, so plain `gunicorn mcpgate.wsgi`
run from the project root (as a Procfile does) uses it too. The values come from
mcpgate.config.settings (MCPGATE_BIND, PORT, MCPGATE_WORKER_CONNECTIONS, ...), checked when this
module loads: an invalid one stops gunicorn with one line naming the variable.

One worker: sessions and their children live in the worker's memory, so a second
worker would not know the first one's sessions. The gevent worker carries every
SSE stream on a greenlet; it also owns the gateway's part of a shutdown
(mcpgate.serve.front.worker). The hooks here are the master's, but for the child boundary (mcpgate.child.boundary): the
master is made non-dumpable as this module loads (before it reads a secret), each worker again after its fork,
and a worker takes the secret settings out of its environment once its app has read them (the master keeps
them, non-dumpable, for the workers it starts later).
"""

from __future__ import annotations

import ctypes
import gc
import os
import resource
import sys
from typing import Any

from mcpgate.child import boundary, orphans
from mcpgate.config import settings
from mcpgate.config.settings import Settings, SettingsError
from mcpgate.serve.front import preflight, starting

boundary.undumpable()  # the master: no same-user process (a child) reads its environment or memory
try:
    _settings = Settings.from_env()  # MCPGATE_OAUTH_USERS' entries are checked by on_starting (preflight.py)
except SettingsError as _exc:
    for _line in settings.unknown():  # a mistyped name may be why
        print(f"mcpgate: warning: {_line}", file=sys.stderr)
    raise SystemExit(f"mcpgate: invalid setting: {_exc}") from None

# gevent_pywsgi with a lighter header parser (serve/front/worker.py), which the master does not load: it loads
# a stand-in that becomes it in the worker (serve/front/lazy_worker.py)
worker_class = "mcpgate.serve.front.lazy_worker.GatewayWorker"
workers = 1
bind = _settings.addresses
# Each open SSE stream (GET streams, long tool calls) holds one connection.
worker_connections = _settings.worker_connections
# Children get close_timeout + term_timeout (2 s + 2 s by default) to stop inside this.
graceful_timeout = _settings.graceful_timeout
timeout = 30
preload_app = False
errorlog = "-"
loglevel = _settings.log_level.lower()
accesslog = _settings.access_log or None
# gunicorn's default format without the query string: the legacy transport's POST URL carries the session id.
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s "%(f)s" "%(a)s"'
# MCPGATE_LOG_FORMAT=json: gunicorn's error and access lines as JSON objects too (mcpgate/observe/logs.py)
logger_class = "mcpgate.observe.logs.GunicornLogger" if _settings.log_format == "json" else "gunicorn.glogging.Logger"
# No control socket in $HOME: several gateways on one machine would fight over it.
control_socket_disable = True


def on_starting(server: Any) -> None:
    """Before any socket is bound or worker started: refuse an unsafe or broken configuration; adopt orphans
    so a dead worker's children can be found."""
    for line in settings.unknown():
        server.log.warning("mcpgate: %s; every setting: mcpgate settings", line)
    binds = list(server.cfg.bind)
    refusal = boundary.start_problem(_settings) or preflight.run(_settings, binds, server.log)
    refusal = refusal or starting.taken(binds, reuse_port=server.cfg.reuse_port)
    if refusal:
        raise SystemExit(f"mcpgate: {refusal}")
    server.log.info("mcpgate: %s", starting.describe(_settings, binds))
    exposure = boundary.state_exposure(_settings)
    if exposure:
        server.log.warning("mcpgate: %s", exposure)
    # Each session holds three pipes and each stream a socket: take every descriptor the system allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if not orphans.become_subreaper():
        server.log.warning("mcpgate: could not become a child subreaper; orphan cleanup is limited")


def child_exit(server: Any, worker: Any) -> None:
    """A worker exited (maybe by SIGKILL): end whatever it left running."""
    orphans.reap_orphans(set(server.WORKERS) - {worker.pid})


def pre_fork(server: Any, worker: Any) -> None:
    """In the master, about to fork a worker: what loading the configuration freed given back to the system (the
    worker would inherit it), then its objects frozen out of the collector, so that the worker's collections do
    not write to (and so copy) the pages it shares with the master (about 3 MB of PSS)."""
    gc.collect()
    _release_freed_memory()
    gc.freeze()


def post_fork(server: Any, worker: Any) -> None:
    """In the worker, just forked: non-dumpable (inherited from the master; asked again, to be sure)."""
    boundary.undumpable()


def post_worker_init(worker: Any) -> None:
    """In the worker, its app loaded (its settings read): the secret settings leave its environment, and what
    loading it freed goes back to the system."""
    boundary.scrub(os.environ, worker.cfg.env_orig)
    gc.collect()
    _release_freed_memory()


def _release_freed_memory() -> None:
    """Give the C allocator's free pages back to the system (glibc's malloc_trim; elsewhere nothing). Building the
    settings' classes and loading modules frees about a megabyte that the allocator would otherwise keep resident
    in the master, in the worker it forks, and in the worker once its app is loaded (bench/imports.py measures
    it)."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)
