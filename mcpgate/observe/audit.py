"""The audit log (MCPGATE_AUDIT_LOG): one JSON line per tool call, resource read, prompt get, task method
(tasks/get, tasks/result, tasks/cancel, tasks/update), sign-in, and request refused at the endpoint.

A line is written when the call's outcome is known, where its request and its answer meet: a 2025 session's
(serve/sessions/session.py: its requests registered, the child's response routed, a cancellation, the session's
end), a pooled 2026-07-28 call's (serve/modern/pooled_child.py: answered, cancelled, its child gone), a sign-in
of the embedded authorization server (serve/oauth/signin.py). Its members:

    time (UTC, when the outcome was known), instance, event ("call" or "sign-in"), era, principal, server,
    session (its short id), method, tool / resource / prompt, arguments_sha256 (of the canonical JSON of the
    arguments: keys sorted, no spaces, UTF-8; `arguments` too only with MCPGATE_AUDIT_ARGUMENTS), outcome
    (ok, error, cancelled, ended; a sign-in's ok, failed, refused), error_code (the JSON-RPC code of an error
    answer), error_type (an error's: jsonrpc_error, or tool_error for a tools/call result with isError true, found
    in the answer's bytes as they pass: decoded only when they may say so), latency_ms, bytes_in (the request
    message), bytes_out (the answer message). A task method names its task by `task`, the first 16 hex digits of
    the sha256 of its taskId (a 2026-07-28 task id is a sealed token).

A request the Endpoint refuses (serve/front/app.py: a token missing or wrong, an unknown session, a Host or Origin,
a body too large, a rate limit, a pool that cannot take it ...) is a line of its own: event "refused", `kind` (the
defence's, as in /metrics' mcpgate_refusals_total, else the status's: unauthorized, session_not_found ...),
status, error_code, the principal only when the guard had named one, the server, method and tool when known, the
remote address; never a header's value (a token, the session id asked for). So is one the worker's reader
refuses before the Endpoint sees a request (observe/refusals.py: framing, header_limits, slow_client, or a
connection closed for the waiting-connections budget, connection_budget, whose status is null): the kind, the
status answered and the remote address only, nothing of what the client sent.

Writing never blocks a call: a line is formatted on the worker and put on a bounded queue that one OS thread
of its own writes out (os.write, to stderr or a file opened for appending); past MCPGATE_AUDIT_QUEUE lines
waiting, a line is dropped and counted (a warning names the count), so a full disk or a stalled stderr pipe
costs the worker nothing but the lines. Off (the default), `LOG` is None and the hooks stop at that check.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import re
import socket
import time
from _queue import Empty, SimpleQueue  # the C queue: never patched by gevent, safe between the worker and the writer
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from mcpgate.core import jsonrpc, session_ids
from mcpgate.core.jsonrpc import Id, IdKey, Request, Response

log = logging.getLogger("mcpgate.audit")

NAMED = {"tools/call": "tool", "resources/read": "resource", "prompts/get": "prompt"}  # the methods audited
NAMED.update(dict.fromkeys(("tasks/get", "tasks/result", "tasks/cancel", "tasks/update"), "task"))  # both eras'
OK, ERROR, CANCELLED, ENDED, REFUSED = "ok", "error", "cancelled", "ended", "refused"
TOOL_ERROR, JSONRPC_ERROR = "tool_error", "jsonrpc_error"  # an error's error_type: a result's isError, an error
# a refusal's kind when no defence named one (refusals.py names Host, Origin, body too large, rate limit), by status
REFUSAL_KINDS = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method"}
REFUSAL_KINDS.update({406: "not_acceptable", 409: "conflict", 413: "body_too_large", 415: "media_type"})
REFUSAL_KINDS.update({429: "rate_limit", 502: "bad_gateway", 503: "unavailable", 504: "timeout"})
_IS_ERROR = re.compile(rb'"isError"[ \t\r\n]*:[ \t\r\n]*true')  # may be a result's isError (then decoded)
SESSION, LEGACY_SSE, MODERN = "2025-session", "http+sse", "2026-07-28"
WRITE_BATCH = 256  # lines joined into one write
EXIT_WAIT = 2.0  # seconds the process's exit waits for the lines still queued


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
_LINE = json.JSONEncoder(separators=(",", ":"), default=str).encode  # made once: json.dumps would per call


def canonical(arguments: Any) -> bytes:
    """The canonical JSON of a call's arguments: keys sorted, no whitespace, UTF-8 (what the digest is of)."""
    return _CANONICAL(arguments).encode()


def digest(arguments: Any) -> str:
    return hashlib.sha256(canonical(arguments)).hexdigest()


def now() -> str:
    """UTC, to the millisecond."""
    at = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}Z"


@dataclass(slots=True)
class Started:
    """An audited request on its way: what its line says once its outcome is known."""

    fields: dict[str, Any]
    at: float  # time.monotonic() when it came


class AuditedSession(Protocol):
    """What the audit reads of a 2025 session (serve/sessions/session.py)."""

    id: str
    owner: str
    server: str
    event_stream: Any  # the 2024-11-05 transport's stream (None: a Streamable HTTP session)


class Writer:
    """Lines to stderr ("-") or appended to a file, by one OS thread of the process; at most `bound` waiting."""

    def __init__(self, target: str, bound: int) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        self.fd = 2 if target == "-" else os.open(target, flags, 0o600)
        self.bound = bound
        self.queue: SimpleQueue[bytes | None] = SimpleQueue()
        self.dropped = 0
        self.failed = 0  # lines whose write failed (counted by the writer thread)
        self._told = 0  # the lines lost when last logged
        self._started = False
        self._done = SimpleQueue[bool]()

    def put(self, line: bytes) -> None:
        if self.queue.qsize() >= self.bound:
            self.dropped += 1
        else:
            self.queue.put(line)
            if not self._started:
                self._started = True
                start_thread(self._run)
                atexit.register(self.close, EXIT_WAIT)
        lost = self.dropped + self.failed  # told here, on the worker (the writer thread never logs)
        if lost > self._told and lost >= 2 * self._told:  # the first loss, then each time the count doubles
            self._told = lost
            log.warning(
                "audit log: %d lines lost (%d dropped past MCPGATE_AUDIT_QUEUE, %d in failed writes)",
                lost,
                self.dropped,
                self.failed,
            )

    def _run(self) -> None:
        while (line := self.queue.get()) is not None:
            batch = [line]
            while len(batch) < WRITE_BATCH and not self.queue.empty():
                more = self.queue.get()
                if more is None:
                    self._write(batch)
                    self._done.put(True)
                    return
                batch.append(more)
            self._write(batch)
        self._done.put(True)

    def _write(self, batch: list[bytes]) -> None:
        data = memoryview(b"".join(batch))
        try:
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError:  # a full disk, a closed stderr: the lines are lost, counted
            self.failed += len(batch)

    def close(self, wait: float) -> None:
        """Write what is queued (waiting at most `wait` seconds), then stop the thread."""
        if self._started:
            self._started = False
            self.queue.put(None)
            try:
                self._done.get(timeout=wait)
            except Empty:  # the writer is stuck (a stalled pipe): its lines are given up
                pass


def start_thread(run: Callable[[], None]) -> None:
    """`run` on an OS thread (gevent's patched _thread would make it a greenlet of the worker's loop)."""
    try:
        from gevent import monkey

        start = monkey.get_original("_thread", "start_new_thread")
    except ImportError:  # pragma: no cover - gevent is a dependency
        import _thread

        start = _thread.start_new_thread
    start(run, ())


class AuditLog:
    """The lines of one process (`instance` names it in each), and the 2025 sessions' audited requests in flight."""

    def __init__(self, instance: str, writer: Writer, arguments: bool) -> None:
        self.instance, self.writer, self.arguments = instance, writer, arguments
        self.pending: dict[str, dict[IdKey, Started]] = {}  # by session id, by request id
        self.in_flight = 0

    def start(self, request: Request, principal: str | None, server: str, era: str, session: str | None) -> Started:
        """An audited request's line so far (`request.method` is one of NAMED)."""
        params = request.params if isinstance(request.params, dict) else {}
        key = NAMED[request.method]
        name = params.get({"resource": "uri", "task": "taskId"}.get(key, "name"))
        if key == "task" and isinstance(name, str):  # a task id may be a sealed token: its digest names it
            name = hashlib.sha256(name.encode()).hexdigest()[:16]
        arguments = params.get("arguments")
        fields: dict[str, Any] = {
            "time": None,
            "instance": self.instance,
            "event": "call",
            "era": era,
            "principal": principal,
            "server": server,
            "session": session,
            "method": request.method,
            key: name if isinstance(name, str) else None,
            "arguments_sha256": digest(arguments) if arguments is not None else None,
        }
        if self.arguments:
            fields["arguments"] = arguments
        fields["bytes_in"] = len(request.raw) if request.raw is not None else len(jsonrpc.encode(request.obj))
        return Started(fields, time.monotonic())

    def finish(
        self, started: Started, code: int | None, bytes_out: int, outcome: str | None = None, tool_error: bool = False
    ) -> None:
        fields = started.fields
        fields["time"] = now()
        fields["outcome"] = outcome or (ERROR if code is not None or tool_error else OK)
        fields["error_code"] = code
        if fields["outcome"] == ERROR:
            fields["error_type"] = TOOL_ERROR if tool_error and code is None else JSONRPC_ERROR
        fields["latency_ms"] = round((time.monotonic() - started.at) * 1000, 3)
        fields["bytes_out"] = bytes_out
        self.write(fields)

    def write(self, fields: dict[str, Any]) -> None:
        self.writer.put(_LINE(fields).encode() + b"\n")

    def here(self, request: Request, principal: str | None, server: str, era: str, answer: dict[str, Any]) -> None:
        """A request the gateway answered itself, never forwarded (a hidden tool's call)."""
        started = self.start(request, principal, server, era, None)
        self.finish(started, error_code(Response(request.id, answer)), len(jsonrpc.encode(answer)))

    # -- a 2025 session's requests: registered, answered, cancelled, abandoned -----------------------------
    def opened(self, session: AuditedSession, requests: Iterable[Request]) -> None:
        for request in requests:
            if request.method not in NAMED:
                continue
            if self.in_flight >= self.writer.bound:
                self.writer.dropped += 1
                continue
            era = LEGACY_SSE if session.event_stream is not None else SESSION
            started = self.start(request, session.owner, session.server, era, session_ids.short(session.id))
            table = self.pending.setdefault(session.id, {})
            if table.setdefault(jsonrpc.id_key(request.id), started) is started:
                self.in_flight += 1

    def answered(self, session: AuditedSession, message: Response) -> None:
        if message.id is None or (table := self.pending.get(session.id)) is None:
            return
        started = table.pop(jsonrpc.id_key(message.id), None)
        if started is None:
            return
        self.in_flight -= 1
        size = len(message.raw) if message.raw is not None else len(jsonrpc.encode(message.obj))
        code = error_code(message)
        failed = code is None and started.fields["method"] == "tools/call" and is_tool_error(message.raw, message.full)
        self.finish(started, code, size, tool_error=failed)

    def closed(self, session: AuditedSession, request_id: Id, code: int, outcome: str) -> None:
        table = self.pending.get(session.id)
        started = table.pop(jsonrpc.id_key(request_id), None) if table is not None else None
        if started is not None:
            self.in_flight -= 1
            self.finish(started, code, 0, outcome)

    def ended(self, session: AuditedSession) -> None:
        """The session ended: what is still in flight ends with it (CONNECTION_CLOSED)."""
        for started in (self.pending.pop(session.id, None) or {}).values():
            self.in_flight -= 1
            self.finish(started, jsonrpc.CONNECTION_CLOSED, 0, ENDED)

    # -- requests refused at the endpoint, before any session or pool saw them ----------------------------------
    def refused(self, environ: dict[str, Any], status: int, code: int, kind: str | None, request: Any) -> None:
        """A refused request's line: its kind (a defence's, else its status's), the principal only when the guard
        named one, the server and method when known; never a header's value (a token, a session id)."""
        message = getattr(request, "message", None)
        method = getattr(message, "method", None)
        fields: dict[str, Any] = {
            "time": now(),
            "instance": self.instance,
            "event": "refused",
            "kind": kind or refusal_kind(status, environ),
            "principal": getattr(request, "principal", None),
            "server": getattr(request, "server", None),
            "http_method": environ.get("REQUEST_METHOD"),
            "method": method if isinstance(method, str) and len(method) <= 128 else None,
            "outcome": REFUSED,
            "status": status,
            "error_code": code,
            "remote": environ.get("REMOTE_ADDR"),
        }
        key = NAMED.get(fields["method"] or "")
        if key is not None and key != "task" and isinstance(message, Request) and isinstance(message.params, dict):
            name = message.params.get("uri" if key == "resource" else "name")
            fields[key] = name if isinstance(name, str) and len(name) <= 1024 else None
        self.write(fields)

    def rejected(self, kind: str, status: int | None, remote: str | None) -> None:
        """A request the worker's reader refused, or a connection closed for the waiting-connections budget: the
        same members as `refused`'s, those no request named null."""
        fields: dict[str, Any] = {
            "time": now(),
            "instance": self.instance,
            "event": "refused",
            "kind": kind,
            "principal": None,
            "server": None,
            "http_method": None,
            "method": None,
            "outcome": REFUSED,
            "status": status,
            "error_code": None,
            "remote": remote,
        }
        self.write(fields)

    # -- sign-ins of the embedded authorization server ------------------------------------------------------
    def sign_in(self, subject: str | None, outcome: str, how: str, started: float, account: str | None = None) -> None:
        fields: dict[str, Any] = {
            "time": now(),
            "instance": self.instance,
            "event": "sign-in",
            "principal": subject,
            "method": how,
            "outcome": outcome,
            "latency_ms": round((time.monotonic() - started) * 1000, 3),
        }
        if account is not None:
            fields["account"] = account
        self.write(fields)


def refusal_kind(status: int, environ: dict[str, Any]) -> str:
    """The kind of a refusal no defence named, from its status (a 404 naming a session: session_not_found)."""
    if status == 404 and environ.get("HTTP_MCP_SESSION_ID"):
        return "session_not_found"
    return REFUSAL_KINDS.get(status, f"status_{status}")


def is_tool_error(raw: bytes | None, full: Callable[[], dict[str, Any]]) -> bool:
    """Whether a tools/call answer is a result with isError true: its bytes searched (no decoding), decoded only
    when they may say so (a result's isError, or an "isError" deeper in it). A lone "isError":false (a key: inside
    a JSON string its quotes are escaped) says no without the pattern."""
    if raw is not None:
        at = raw.find(b'"isError"')  # (find: a bytes `in` costs more, trying an integer first)
        lone_false = raw.startswith(b":false", at + 9) and raw.find(b'"isError"', at + 9) < 0
        if at < 0 or lone_false or _IS_ERROR.search(raw) is None:
            return False
    result = full().get("result")
    return isinstance(result, dict) and result.get("isError") is True


def error_code(message: Response) -> int | None:
    if not message.is_error:
        return None
    error = message.full().get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else jsonrpc.INTERNAL_ERROR


LOG: AuditLog | None = None  # the process's audit log; None: off (every hook stops at this check)


def configure(target: str, bound: int, arguments: bool, instance: str | None) -> AuditLog | None:
    """The process's audit log per the settings (None when MCPGATE_AUDIT_LOG is empty); `instance`: the fleet's
    name of this instance (None: this host's name and the process id)."""
    global LOG
    if LOG is not None:
        LOG.writer.close(EXIT_WAIT)
    LOG = None
    if target:
        name = instance or f"{socket.gethostname()}-{os.getpid()}"
        LOG = AuditLog(name, Writer(target, bound), arguments)
    return LOG


def done(
    started: Started, code: int | None, bytes_out: int, outcome: str | None = None, answer: bytes | None = None
) -> None:
    """A pooled call's outcome (its Started was made while the log was on); `answer`: the bytes the client gets
    (a tools/call result with isError true is an error: a tool error)."""
    if LOG is None:
        return
    failed = (
        answer is not None
        and code is None
        and started.fields["method"] == "tools/call"
        and is_tool_error(answer, lambda: decoded(answer))
    )
    LOG.finish(started, code, bytes_out, outcome, tool_error=failed)


def decoded(data: bytes) -> dict[str, Any]:
    try:
        found = json.loads(data)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
