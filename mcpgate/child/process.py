"""Supervisor for one stdio MCP child process, on gevent greenlets.

One greenlet per pipe (stdout reader, stdin writer, stderr reader) plus one that
waits for the exit. The child runs in its own process group; shutdown is a
ladder (close stdin, SIGTERM, SIGKILL) aimed at the whole group (child/ladder.py). Writes never
block the caller: they go to a bounded queue that the writer drains (child/stdin.py). Its stdout is read by
child/stdout.py and its lines become the owner's messages here; its stderr goes where child/stderr.py sends it.
The owner's callbacks, and the pipe reader and writer's ways back, are dropped once the child is gone: an
ended child and its owner (a session) leave no reference cycle for the cyclic collector.
"""

from __future__ import annotations

import functools
import logging
import os
import shlex
import signal
from collections.abc import Callable
from io import FileIO
from typing import IO, Any

import gevent
import gevent.event
import gevent.subprocess

from mcpgate.child import stderr as child_stderr
from mcpgate.child.ladder import KILL_GRACE, signal_group, stop_ladder
from mcpgate.child.limits import (
    ChildLimits,
    Usage,
    limit_reason,
    memory_limit,
    mentions_memory_failure,
    preexec,
    settle,
)
from mcpgate.child.pipes import close_quietly, describe_exit
from mcpgate.child.spawn import INHERITED_ENV, ChildSpawnError, ChildUser, resolve_executable, run_as
from mcpgate.child.stdin import StdinWriter
from mcpgate.child.stdout import StdoutReader
from mcpgate.child.waits import wait_set
from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Invalid, Message, Notification, Request, Response

__all__ = ["ChildProcess"]

OnMessage = Callable[[Request | Notification | Response], None]

_LOG_BODY = 200  # body bytes in DEBUG / WARNING lines
WRITE_QUEUE_FULL = "write queue full"  # the close reason of a child whose stdin queue overflowed
_PIPE_GONE = ("stdin closed by child", "stdout closed by child", "stdin write failed")  # close() reasons of a pipe
# Added to the reason of a child that ended, not asked to, before its first message: most often a variable it
# needs is missing (the log has its stderr).
FIRST_START_HINT = (
    f" before its first message; it inherits only {', '.join(INHERITED_ENV)} from the gateway's environment: "
    "name the variables it needs in MCPGATE_PASS_ENV (a named server: its pass_env) or set them in MCPGATE_CHILD_ENV"
)


DEBUG = logging.DEBUG
PARTIAL_FROM = jsonrpc.PARTIAL_FROM_BYTES  # parse_line's threshold (_deliver's lines take its default)
_NONE_KNOWN: dict[int, bool] = {}  # never written: a logger whose answers are not known asks isEnabledFor


def levels_known(log: logging.Logger) -> dict[int, bool]:
    """The logger's own memo of isEnabledFor's answers by level (logging.Logger._cache: filled by isEnabledFor,
    cleared in place whenever a level changes or logging.disable is called), so a False found there is
    isEnabledFor's answer without its call; a logger that answers otherwise (a subclass's own isEnabledFor, no
    such memo) gets an empty table, which sends every question to isEnabledFor."""
    cache = getattr(log, "_cache", None)
    own = getattr(type(log), "isEnabledFor", None) is logging.Logger.isEnabledFor
    return cache if own and type(cache) is dict else _NONE_KNOWN


class ChildProcess:
    """One supervised stdio child; see the module docstring."""

    def __init__(
        self,
        argv: list[str],
        *,
        on_message: OnMessage,
        on_exit: Callable[[str], None],
        max_line_bytes: int,
        max_write_queue_bytes: int,
        close_timeout: float,
        term_timeout: float,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stderr: str = "inherit",
        label: str = "",
        max_junk_lines: int = 10,
        logger: logging.Logger | None = None,
        limits: ChildLimits | None = None,
        user: ChildUser | None = None,
    ) -> None:
        # The limits and timeouts are required: their defaults are declared once, in mcpgate.config.settings.
        if not argv:
            raise ValueError("argv is empty")
        self.argv = list(argv)
        self.shown_argv: list[str] | None = None  # what the log shows instead (a user's secret kept out: serve/vault)
        self.env, self.cwd, self.stderr_mode, self.label = env, cwd, stderr, label
        self.max_line_bytes, self.max_write_queue_bytes = max_line_bytes, max_write_queue_bytes
        self.close_timeout, self.term_timeout, self.max_junk_lines = close_timeout, term_timeout, max_junk_lines
        self._on_message, self._on_exit = on_message, on_exit
        self._log = logger or logging.getLogger(__name__)
        self._levels = levels_known(self._log)  # every message asks whether DEBUG is on: a False here says no
        self.pid: int | None = None
        self.returncode: int | None = None
        self.exit_reason: str | None = None
        # Set before on_exit runs: "clean" (exit 0 not asked for), "crash" (another exit not asked for, or ended
        # for misbehaving), "stopped" (ended on purpose), "limit" (ended for passing one of `limits`).
        self.end_cause = ""
        self.limits = limits
        self.user = user  # who it runs as (MCPGATE_CHILD_USER); None: the gateway's user
        self.usage = Usage()  # what the watchdog and the stderr reader saw (for putting an exit down to a limit)
        self._cause: str | None = None  # the cause given to close(); first one wins
        self._proc: Any = None
        self._pipes: tuple[FileIO | None, ...] = ()  # the gateway's ends: stdin, stdout, stderr (None: not a pipe)
        self._reason: str | None = None  # the close reason; first one wins
        self._closing = False
        # Started, not exited, and not shutting down (send() would accept): a plain attribute, kept with _proc and
        # _closing (a pool asks it on every call; a property's call costs ~900 instructions in Python 3.11)
        self.alive = False
        self._discard = False  # stop delivering stdout (after junk / oversized line)
        self._junk = 0
        self._spoke = False  # it sent a message (its start went through)
        self._stdin = StdinWriter()
        self._exited = gevent.event.Event()
        self._done = gevent.event.Event()
        self._greenlets: dict[str, gevent.Greenlet] = {}
        self._stdout: StdoutReader | None = None
        self._stderr_file: IO[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the child and its pipe greenlets; ChildSpawnError if it cannot be executed."""
        if self._proc is not None or self._closing:
            raise RuntimeError("ChildProcess can be started once, and not after close()")
        env_path = (self.env if self.env is not None else os.environ).get("PATH", os.defpath)
        argv0 = self.argv[0]
        if self.cwd and os.sep in argv0 and not os.path.isabs(argv0):
            argv0 = os.path.join(self.cwd, argv0)
        executable = resolve_executable(argv0, env_path)
        stderr_target, self._stderr_file = child_stderr.open_target(self.stderr_mode)
        # the pipes made here, not by Popen: its ends are plain FileIO, not gevent file objects (each of those holds
        # io watchers and delegated bound methods: ~5 KB per idle child)
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe() if stderr_target is gevent.subprocess.PIPE else (-1, -1)
        try:
            self._proc = gevent.subprocess.Popen(
                self.argv,
                executable=executable,
                stdin=stdin_r,
                stdout=stdout_w,
                stderr=stderr_w if stderr_w >= 0 else stderr_target,
                env=self.env,
                cwd=self.cwd,
                close_fds=True,
                start_new_session=True,
                bufsize=0,
                preexec_fn=run_as(self.user, preexec(self.limits, os.getpid()), os.getpid()),
            )  # unbuffered: we use the fds
        except (OSError, ValueError, gevent.subprocess.SubprocessError) as exc:
            _close_fds(stdin_w, stdout_r, stderr_r)
            close_quietly(self._stderr_file)
            why = getattr(exc, "strerror", None) or exc
            raise ChildSpawnError(f"cannot execute {self.argv[0]!r} ({executable}): {why}") from exc
        finally:
            _close_fds(stdin_r, stdout_w, stderr_w)  # the child's ends: it has its own copies
        self._pipes = (FileIO(stdin_w, "wb"), FileIO(stdout_r, "rb"), FileIO(stderr_r, "rb") if stderr_r >= 0 else None)
        self.alive = not self._closing
        proc = self._proc
        self.pid = proc.pid
        for stream in self._pipes:
            if stream is not None:
                os.set_blocking(stream.fileno(), False)
        self._log.info("child[%s] started pid=%s: %s", self.label, self.pid, executable)
        self._log.debug("child[%s] argv: %s", self.label, shlex.join(self.shown_argv or self.argv))
        stdin, stdout, stderr = self._pipes
        reader = self._stdout = StdoutReader(stdout.fileno(), self.max_line_bytes, self._deliver, self._too_long)
        self._greenlets["stdout"] = gevent.spawn(self._read_stdout, reader)
        self._stdin.open(stdin.fileno(), functools.partial(self.close, cause="crash"))
        if stderr is not None:
            self._greenlets["stderr"] = gevent.spawn(self._read_stderr, stderr.fileno())
        # no greenlet waits while the child runs; gevent drops the link once it has run (no cycle is left)
        proc.rawlink(lambda _proc: gevent.spawn(self._supervise))

    def send(self, data: bytes) -> bool:
        """Queue one encoded message (no trailing newline); never blocks. False if refused."""
        if self._closing or self._proc is None:
            return False
        unwritten = self._stdin.queued
        if unwritten + len(data) + 1 > self.max_write_queue_bytes:
            self._log.warning("child[%s] write queue full (%d bytes unwritten); closing", self.label, unwritten)
            self.close(WRITE_QUEUE_FULL, cause="crash")
            return False
        if self._levels.get(DEBUG) is not False and self._log.isEnabledFor(DEBUG):
            self._log_message("->child", jsonrpc.parse(data), data)
        return self._stdin.put(data)

    def close(self, reason: str, cause: str = "stopped") -> None:
        """Begin the shutdown ladder in a greenlet; idempotent, never blocks. `cause` becomes end_cause
        ("stopped" on purpose, "limit" for a limit passed, "crash" for misbehaviour)."""
        if self._closing:
            return
        self._closing = self._stdin.stopping = True
        self.alive = False
        self._reason, self._cause = reason, cause
        if self._proc is None:
            self.exit_reason, self.end_cause = reason, cause
            self._release()
            self._done.set()
            return
        self._log.info("child[%s] closing pid=%s: %s", self.label, self.pid, reason)
        gevent.spawn(self._shutdown)

    def stop(self, reason: str, timeout: float | None = None, cause: str = "stopped") -> bool:
        """close() and wait until finished; True if the child exited and on_exit ran."""
        self.close(reason, cause)
        if timeout is None:  # the ladder, the SIGKILL grace, then draining the readers
            timeout = 2 * self.close_timeout + self.term_timeout + KILL_GRACE
        return self.join(timeout)

    def join(self, timeout: float) -> bool:
        """Wait until the child is gone and on_exit has been called."""
        return wait_set(self._done, timeout)  # never gevent's wait on a set event (child/waits.py)

    def _shutdown(self) -> None:
        """The stop ladder (child/ladder.py), in its own greenlet."""
        stdin = self._pipes[0]
        timeouts = (self.close_timeout, self.term_timeout)
        stop_ladder(
            self.pid, self._exited, self._stdin.greenlet, lambda: close_quietly(stdin), timeouts, self._log, self.label
        )

    def _supervise(self) -> None:
        """Wait for the exit, reap leftovers, drain the readers, then call on_exit once."""
        proc = self._proc
        try:
            returncode = proc.wait()
        except BaseException:  # killed (hub shutdown): take the group down with us
            signal_group(self.pid, signal.SIGKILL)
            raise
        self._closing = self._stdin.stopping = True
        self.alive = False
        self.returncode = returncode
        self._exited.set()
        try:
            signal_group(self.pid, signal.SIGKILL)  # grandchildren left in the group
            self._finish_pipes()
        finally:
            # settled once its stderr is read: a failed allocation it reported on the way out is seen
            reason = self._reason = self._settle_cause(returncode)
            self.exit_reason = reason
            self._log.info("child[%s] pid=%s %s (reason: %s)", self.label, self.pid, describe_exit(returncode), reason)
            try:
                self._on_exit(reason)
            except Exception:  # noqa: BLE001 - a callback's failure must not stop the exit watcher
                self._log.exception("child[%s] on_exit callback failed", self.label)
            finally:
                self._release()
                self._done.set()

    def _release(self) -> None:
        """The child is gone (or never started) and on_exit has run: drop what points back at the owner or at this
        supervisor (the callbacks, the reader, the writer's callback), so no reference cycle is left."""
        self._on_message = self._on_exit = _ignored
        self._stdin.release()
        self._stdout = None
        self._greenlets.clear()

    def _settle_cause(self, returncode: int) -> str:
        """Set end_cause and return the reason: a limit explains an exit not asked for (or a crash) when it can."""
        self.end_cause, passed = settle(self.limits, self._cause, returncode, self.usage)
        if passed is not None:
            return limit_reason(passed)
        pipe_or_none = self._reason is None or self._reason.startswith(_PIPE_GONE)
        if self.end_cause in ("clean", "crash") and not self._spoke and pipe_or_none:
            return describe_exit(returncode) + FIRST_START_HINT  # its exit, not the pipes closed with it, tells why
        return self._reason if self._reason is not None else describe_exit(returncode)

    def _finish_pipes(self) -> None:
        """Let the readers deliver what was already written, then stop every pipe greenlet."""
        greenlets = self._greenlets
        readers = [greenlets[name] for name in ("stdout", "stderr") if name in greenlets]
        if len(gevent.joinall(readers, timeout=self.close_timeout)) < len(readers):
            self._log.warning("child[%s] output pipe still open after exit (held by another process)", self.label)
        writer = [self._stdin.greenlet] if self._stdin.greenlet is not None else []
        gevent.killall(readers + writer, block=True, timeout=1.0)
        for stream in (*self._pipes, self._stderr_file):
            close_quietly(stream)

    # -- stdout -----------------------------------------------------------------------------------------------

    def _read_stdout(self, reader: StdoutReader) -> None:
        reader.run()
        if not wait_set(self._exited, self.close_timeout):
            self.close("stdout closed by child", cause="crash")

    def _too_long(self) -> None:
        self._log.warning("child[%s] line over %d bytes; closing", self.label, self.max_line_bytes)
        self._discard = True
        self.close("message too large", cause="crash")

    def pump(self, ready: gevent.event.Event, timeout: float | None) -> bool | None:
        """Read the child's stdout in the calling greenlet while it waits for `ready` (child/stdout.py's pump);
        None when it cannot (not started, or another greenlet reads it now)."""
        reader = self._stdout
        return None if reader is None else reader.pump(ready, timeout)

    def _deliver(self, line: bytes, bare: bool = False) -> None:
        """One line of the child's stdout (`bare`: it holds no CR, LineDecoder.bare) to on_message."""
        if self._discard:
            return
        # parse_line's message: a line shorter than its threshold is parsed whole by parse() and named `bare` (as
        # parse_line does, without its call)
        short = len(line) < PARTIAL_FROM
        msg = jsonrpc.parse(line) if short else jsonrpc.parse_line(line, bare=bare)
        if isinstance(msg, (Response, Request, Notification)):  # most lines: one message (_hand_over, inlined)
            if bare and short:
                msg.bare = line
            self._junk = 0
            self._spoke = True
            if self._levels.get(DEBUG) is not False and self._log.isEnabledFor(DEBUG):
                self._log_message("<-child", msg, line)
            try:
                self._on_message(msg)
            except Exception:  # noqa: BLE001 - a callback's failure must not stop the pipe reader
                self._log.exception("child[%s] on_message callback failed", self.label)
            return
        if isinstance(msg, Invalid):
            return self._reject(line, msg.reason)
        members = [m for m in msg.items if isinstance(m, (Request, Notification, Response))]
        if not members:
            return self._reject(line, "no valid batch member")
        if len(members) < len(msg.items):
            self._log.warning("child[%s] dropped invalid batch members: %r", self.label, line[:_LOG_BODY])
        self._junk = 0
        self._spoke = True
        for member in members:
            self._hand_over(member, line)

    def _hand_over(self, member: Request | Notification | Response, line: bytes) -> None:
        if self._log.isEnabledFor(logging.DEBUG):
            self._log_message("<-child", member, line)
        try:
            self._on_message(member)
        except Exception:  # noqa: BLE001 - a callback's failure must not stop the pipe reader
            self._log.exception("child[%s] on_message callback failed", self.label)

    def _reject(self, line: bytes, why: str) -> None:
        self._junk += 1
        self._log.warning("child[%s] non-JSON-RPC stdout line dropped (%s): %r", self.label, why, line[:_LOG_BODY])
        if self._junk > self.max_junk_lines:
            self._discard = True
            if self._stdout is not None:
                self._stdout.discard = True  # what follows is read and dropped
            self.close("junk output", cause="crash")

    def _log_message(self, direction: str, msg: Message, data: bytes) -> None:
        method = getattr(msg, "method", None)
        msg_id = getattr(msg, "id", None)
        self._log.debug("child[%s] %s method=%s id=%r %r", self.label, direction, method, msg_id, data[:_LOG_BODY])

    # -- stderr -----------------------------------------------------------------------------------------------

    def _read_stderr(self, fd: int) -> None:
        for lines in child_stderr.lines(fd):
            limits, usage = self.limits, self.usage  # past RLIMIT_AS (an allocation failed): ended, as documented
            if limits and limits.memory_bytes and not usage.memory_failure and any(map(mentions_memory_failure, lines)):
                usage.memory_failure = True
                self.close(limit_reason(memory_limit(limits)), cause="limit")
            child_stderr.emit(lines, self._stderr_file, self._log, self.label)


def _ignored(_what: object) -> None:
    """An ended child's on_message and on_exit: it has no owner any more."""


def _close_fds(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            os.close(fd)
