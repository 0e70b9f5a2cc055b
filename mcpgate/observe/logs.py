"""JSON logs (MCPGATE_LOG_FORMAT=json): every log line one JSON object, gunicorn's own lines included.

Each object has `time` (UTC), `level`, `logger` and `message`, and when known: `session` (a session's short id,
as the line names it), `server` and `principal` (those of the request being served on the line's greenlet: the
worker binds each request's context, serve/front/context.py, to it), `exception` (a traceback, as one string).
gunicorn's error lines and access lines go through `GunicornLogger` (mcpgate/gunicorn_config.py names it as its
logger_class when the format is json): the same objects, an access line's fields (remote, method, path,
status, bytes, referer, agent, duration_us) added; the query string is never logged (it may carry a session id).

Plain (the default) stays as it was: gunicorn's own logger class and mcpgate's one-line text format; then
`REQUEST` is None and the worker's hook stops at that check.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any

from gunicorn import glogging

JSON = "json"
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# a session's label as log lines name it: "<server>/" for a named server, then its short id ("<instance>." in a
# fleet, then 8 URL-safe characters: core/session_ids.short), not a word ("session finished": lowercase letters only)
SESSION = re.compile(
    r"\bsession (?:(?P<server>[A-Za-z0-9_-]+)/)?(?P<short>(?:[A-Za-z0-9_-]+\.)?"
    r"(?=[A-Za-z0-9_-]{0,7}[A-Z0-9_-])[A-Za-z0-9_-]{8})(?![A-Za-z0-9_.-])"
)
# gunicorn's access atoms kept in a JSON access line (its format's names): never the query string
ACCESS_FIELDS = {"h": "remote", "m": "method", "U": "path", "s": "status", "B": "bytes", "f": "referer"}
ACCESS_FIELDS.update({"a": "agent", "D": "duration_us"})

# The request served on the current greenlet (its RequestContext), while JSON logs are on; None: plain logs.
REQUEST: ContextVar[Any] | None = None


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object on one line."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z",
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        found = SESSION.search(message) if "session " in message else None
        if found is not None:
            out["session"] = found["short"]
            if found["server"]:
                out["server"] = found["server"]
        request = REQUEST.get(None) if REQUEST is not None else None
        if request is not None:
            if getattr(request, "server", None) is not None:
                out["server"] = request.server
            if getattr(request, "principal", None) is not None:
                out["principal"] = request.principal
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str)


class JsonAccessFormatter(JsonFormatter):
    """gunicorn's access line: its message, and the atoms the line is made of as members."""

    def format(self, record: logging.LogRecord) -> str:
        atoms = record.args if isinstance(record.args, dict) else {}
        line = json.loads(super().format(record))
        for atom, name in ACCESS_FIELDS.items():
            value = atoms.get(atom)
            if value is not None and value != "-":
                line[name] = value
        return json.dumps(line, default=str)


def formatter(form: str) -> logging.Formatter:
    """mcpgate's log lines' formatter for MCPGATE_LOG_FORMAT."""
    return JsonFormatter() if form == JSON else logging.Formatter(PLAIN_FORMAT)


def configure(form: str) -> None:
    """JSON logs: the request context is bound per greenlet, and what other libraries log (and Python's
    warnings, gevent's reports of a greenlet's uncaught error) reaches stderr as JSON too. Plain: nothing changes."""
    global REQUEST
    if form != JSON:
        REQUEST = None
        return
    if REQUEST is None:
        REQUEST = ContextVar("mcpgate_log_request", default=None)
    root = logging.getLogger()
    if not any(isinstance(handler.formatter, JsonFormatter) for handler in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        root.addHandler(handler)
    logging.captureWarnings(True)
    import gevent  # its hub prints a greenlet's uncaught error to stderr itself: logged instead, as one object

    gevent.get_hub().print_exception = hub_error


def hub_error(context: Any, kind: Any, value: Any, tb: Any) -> None:
    """gevent's hub's report of an error no greenlet caught, as a log record (its traceback in `exception`)."""
    name = getattr(kind, "__name__", str(kind))
    logging.getLogger("gevent.hub").error("%s failed with %s", context, name, exc_info=(kind, value, tb))


def bind(request: Any) -> None:
    """The request now served on this greenlet (the worker calls it once REQUEST is set)."""
    if REQUEST is not None:
        REQUEST.set(request)


class GunicornLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's logger whose error and access lines are JSON objects (MCPGATE_LOG_FORMAT=json)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(JsonFormatter())
        for handler in self.access_log.handlers:
            handler.setFormatter(JsonAccessFormatter())
