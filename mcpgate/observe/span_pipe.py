"""The worker's side of the span export: ended requests' Traces queued (bounded, counted in spans, as the SDK's
BatchSpanProcessor by the same OTEL_BSP_* variables) and written, a batch at a time, as one compact frame to a
pipe read by the span export process (observe/span_export.py), which encodes OTLP and posts. The worker neither
encodes nor posts: a batch costs it a struct pack per usual request (observe/span_records.py: its shape numbered,
the numbers' shapes sent once), one marshal and one write.

The pipe is non-blocking and bounded (its size raised to PIPE_BYTES where the kernel allows): a frame it cannot
take whole is kept (one at most) and finished at the next flush; a frame that finds the pipe still full, or no
export process, is dropped and its spans counted (a warning, and `lost`). No request ever waits on the export.
Dropped spans are counted by reason (DROPPED: past the queue's bound, the pipe full or no export process, a batch
the export process could not post, which it reports back on a second pipe, its stdout, read without blocking at
each flush and when /metrics asks): `dropped`, /metrics' mcpgate_spans_dropped_total.

The export process is started with subprocess (fork and exec at once: no Python runs in the fork of the gevent
worker, whose copied hub would run the worker's greenlets), argv holding no secret (the OTEL_* settings, the
exporter's headers among them, go in its environment, which holds nothing else of the worker's but PATH, the
locale, proxies and certificates). It ends when its stdin, the pipe, ends: `shutdown` closes it, waits, and kills
by PID what is left; a worker that dies closes it too (and the export process has PR_SET_PDEATHSIG). One that
dies is started again, FIRST_RETRY s after, doubling to LAST_RETRY s while it keeps dying.

The flusher is a `threading.Thread`: under gevent's monkey patching (the gateway's worker, the relay) a greenlet.
"""

from __future__ import annotations

import collections
import fcntl
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mcpgate.observe.span_batches import setting
from mcpgate.observe.span_export import LENGTH
from mcpgate.observe.span_records import Shapes, payload

log = logging.getLogger("mcpgate.tracing")

STOP_TIMEOUT = 5.0  # seconds the export process gets to post what is left at shutdown
PIPE_BYTES = 1 << 20  # the pipe's size asked for (Linux's default limit for a user: /proc/sys/fs/pipe-max-size)
FIRST_RETRY, LAST_RETRY, SETTLED = 0.5, 30.0, 60.0  # seconds: restart backoff; a process up this long resets it
QUEUE, PIPE, EXPORT = "queue", "pipe", "export"  # why spans were dropped: mcpgate_spans_dropped_total's reasons
DROPPED = (QUEUE, PIPE, EXPORT)
PASSED = frozenset(
    {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONHOME", "SSL_CERT_FILE", "SSL_CERT_DIR"}
    | {"REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"}
    | {"http_proxy", "https_proxy", "no_proxy", "all_proxy"}
)  # the worker's environment the export process gets, beside OTEL_*


def export_environment(environ: dict[str, str]) -> dict[str, str]:
    """The export process's environment: the OTEL_* settings and PASSED, and this mcpgate's tree first on the path
    (the same code as the worker's)."""
    env = {name: value for name, value in environ.items() if name.startswith("OTEL_") or name in PASSED}
    tree = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([tree, *filter(None, [environ.get("PYTHONPATH")])])
    return env


class ExportProcess:
    """The export process and the write end of its pipe: started, written to without blocking, started again when
    it died (bounded by a backoff), closed."""

    def __init__(self, service: str, environ: dict[str, str]) -> None:
        self.argv = [sys.executable, "-m", "mcpgate.observe.span_export", service, str(os.getpid())]
        self.env = export_environment(environ)
        self.proc: subprocess.Popen[bytes] | None = None
        self.fd = -1
        self.pending: memoryview | None = None  # the rest of a frame the pipe took in part
        self.reports = -1  # the read end of the export process's stdout: its failed batches' spans
        self.unread = b""  # a report's bytes read in part
        self.failed = 0  # spans the export process could not post, in all (its every run)
        self.started_at = 0.0
        self.retry_at, self.backoff = 0.0, FIRST_RETRY
        self.starts = 0

    def start(self) -> None:
        read, write = os.pipe()  # neither end inherited by the worker's other children (close-on-exec)
        reports, reported = os.pipe()
        try:
            try:
                fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            except OSError:
                pass  # the default size (64 KiB)
            os.set_blocking(write, False)
            os.set_blocking(reports, False)
            self.proc = subprocess.Popen(
                self.argv,
                stdin=read,
                stdout=reported,
                env=self.env,
                close_fds=True,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(write)
            os.close(reports)
            log.warning("the span export process could not start: %s", exc)
            self.retry_later()
            return
        finally:
            os.close(read)
            os.close(reported)
        self.fd, self.pending, self.started_at = write, None, time.monotonic()
        if self.reports >= 0:  # a previous process's, not read to its end
            os.close(self.reports)
        self.reports, self.unread = reports, b""
        self.starts += 1

    def read_reports(self) -> int:
        """The export process's reports read (never waiting): the spans it could not post, in all."""
        while self.reports >= 0:
            try:
                got = os.read(self.reports, 4096)
            except BlockingIOError:
                break
            except OSError:
                got = b""
            if not got:  # the export process ended: its last reports read
                os.close(self.reports)
                self.reports = -1
                break
            got, size = self.unread + got, LENGTH.size
            whole = len(got) - len(got) % size
            self.failed += sum(count for (count,) in LENGTH.iter_unpack(got[:whole]))
            self.unread = got[whole:]
        return self.failed

    def retry_later(self) -> None:
        self.retry_at = time.monotonic() + self.backoff
        self.backoff = min(self.backoff * 2, LAST_RETRY)

    def check(self) -> None:
        """An export process that ended: its pipe closed, started again when its backoff allows."""
        proc = self.proc
        if proc is not None and ended(proc):
            if time.monotonic() - self.started_at > SETTLED:
                self.backoff = FIRST_RETRY
            log.warning(
                "the span export process (pid %s) ended with status %s: started again in %.1f s",
                proc.pid,
                proc.returncode,
                self.backoff,
            )
            self.drop_pipe()
            self.read_reports()  # what it reported before it ended (then the pipe's end, closed)
            self.proc = None
            self.retry_later()
        if self.proc is None and time.monotonic() >= self.retry_at:
            self.start()

    def drop_pipe(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.pending = -1, None

    def write(self, frame: bytes) -> bool:
        """The frame into the pipe, or False (dropped): no process, the pipe full (a frame taken in part is
        finished first), or the reader gone. Never blocks."""
        if self.fd < 0:
            return False
        try:
            if self.pending is not None:
                written = os.write(self.fd, self.pending)
                self.pending = self.pending[written:] if written < len(self.pending) else None
                if self.pending is not None:
                    return False
            written = os.write(self.fd, frame)
        except BlockingIOError:
            return False
        except OSError:  # the reader is gone (EPIPE): `check` starts another
            self.drop_pipe()
            return False
        if written < len(frame):
            self.pending = memoryview(frame)[written:]
        return True

    def finish_frame(self, deadline: float) -> None:
        """The rest of a frame the pipe took in part, which the export process is reading, written until `deadline`:
        a reader that reads no more (stopped, stuck) is not waited for past it."""
        while self.pending is not None and self.fd >= 0:
            try:
                written = os.write(self.fd, self.pending)
            except BlockingIOError:
                written = 0
            except OSError:  # the reader is gone
                return
            self.pending = self.pending[written:] if written < len(self.pending) else None
            left = deadline - time.monotonic()
            if self.pending is None or left <= 0:
                return
            select.select([], [self.fd], [], left)  # until it can take more

    def close(self, timeout: float = STOP_TIMEOUT) -> None:
        """The pipe closed (the export process posts what it holds and ends); killed by PID if it has not within
        `timeout` seconds."""
        proc, self.proc = self.proc, None
        try:
            self.finish_frame(time.monotonic() + timeout)
            self.drop_pipe()
            if proc is not None and not waited(proc, timeout):
                log.warning("the span export process (pid %s) did not end in %.0f s: killed", proc.pid, timeout)
        finally:
            if proc is not None and not ended(proc):
                proc.kill()
                waited(proc, timeout)
            self.read_reports()
            if self.reports >= 0:
                os.close(self.reports)
                self.reports = -1


def ended(proc: subprocess.Popen[bytes]) -> bool:
    """The process has ended (and was waited for). Asked of the kernel: gevent's child watcher, which
    Popen.poll reads under monkey patching, is not served once the worker is exiting."""
    if proc.returncode is not None:
        return True
    try:
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
    except ChildProcessError:  # waited for already (by gevent's watcher)
        return True
    if pid == 0:
        return False
    proc.returncode = os.waitstatus_to_exitcode(status)
    return True


def waited(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """The process ended within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ended(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


class SpanPipe:
    """Ended, sampled requests' spans into a bounded queue (the oldest dropped past it, counted); one flusher
    writes a batch when one is full or the schedule delay passed, and what is left at shutdown."""

    def __init__(self, service: str, environ: dict[str, str] | None = None) -> None:
        environ = dict(os.environ if environ is None else environ)
        self.delay = setting("OTEL_BSP_SCHEDULE_DELAY", environ) / 1000
        self.batch = setting("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", environ)
        self.bound = setting("OTEL_BSP_MAX_QUEUE_SIZE", environ)
        self.full_at = min(self.batch, self.bound + 1)  # spans queued that call for `full`
        self.queue: collections.deque[tuple[Any, int]] = collections.deque()
        self.queued = 0  # spans in the queue
        self.dropped = 0  # spans dropped since the last warning
        self.lost = 0  # spans the worker dropped in all
        self.lost_by = dict.fromkeys((QUEUE, PIPE), 0)
        self.shapes = Shapes()  # the shapes numbered for the export process's packed records (span_records.py)
        self.stopped = False
        self.wake = threading.Event()
        self.export = ExportProcess(service, environ)
        self.export.start()
        self.worker = threading.Thread(target=self.run, name="mcpgate-span-pipe", daemon=True)
        self.worker.start()

    def on_end(self, ended: Any, spans: int) -> None:
        """A request's `spans` ended (on the request's greenlet: one append). tracing.finish does the same itself
        (no call for it): the queue, the count, `full` once a batch is queued or the bound passed."""
        if self.stopped:
            return
        self.queue.append((ended, spans))
        self.queued += spans
        if self.queued >= self.full_at:
            self.full()

    def full(self) -> None:
        """A batch queued, or the queue past its bound: the oldest make room, the flusher is woken for a batch."""
        while self.queued > self.bound and len(self.queue) > 1:  # the oldest make room
            lost = self.queue.popleft()[1]
            self.drop(lost, QUEUE)
            self.queued -= lost
        if self.queued >= self.batch:
            self.wake.set()

    def drop(self, spans: int, reason: str) -> None:
        self.dropped += spans
        self.lost += spans
        self.lost_by[reason] += spans

    def dropped_by(self) -> dict[str, int]:
        """The spans dropped so far, by reason (DROPPED): the worker's, and those the export process reported."""
        return {**self.lost_by, EXPORT: self.export.read_reports()}

    def run(self) -> None:
        """Woken by a full batch: the full batches go (what is left joins the next one); at the schedule delay,
        everything. The export process checked (started again) each time."""
        while not self.stopped:
            woken = self.wake.wait(self.delay)
            self.wake.clear()
            if self.stopped:
                return
            self.export.check()
            self.flush(whole=not woken)
            self.export.read_reports()

    def flush(self, whole: bool = True) -> None:
        shapes = self.shapes
        while self.queue and self.queued >= (1 if whole else self.batch):
            if self.queued <= self.batch:  # the whole queue, one batch (as a batch that just filled wakes it)
                taken: Iterable[tuple[Any, int]] = self.queue
                spans = self.queued
            else:
                taken, spans = [], 0
                while self.queue and spans < self.batch:
                    ended = self.queue.popleft()
                    taken.append(ended)
                    spans += ended[1]
            if shapes.process != self.export.starts:  # a new export process: it has no shape yet
                shapes.process, shapes.sent = self.export.starts, 0
            data, numbered = payload(taken, shapes)
            if taken is self.queue:
                self.queue.clear()
            self.queued -= spans
            if self.export.write(LENGTH.pack(len(data)) + data):
                shapes.sent = numbered
            else:
                self.drop(spans, PIPE)
        if self.dropped:
            log.warning(
                "%d spans dropped: the export was behind (OTEL_BSP_MAX_QUEUE_SIZE, the pipe full)", self.dropped
            )
            self.dropped = 0

    def shutdown(self, timeout: float = STOP_TIMEOUT) -> None:
        """What is queued written, the pipe closed, the export process waited for `timeout` s (then killed): once."""
        if self.stopped:
            return
        self.stopped = True
        self.wake.set()
        try:
            self.worker.join(timeout)
            self.flush()
        finally:
            self.export.close(timeout)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flush()
        return True


class Kept:
    """A stand-in for SpanPipe that keeps the ended Traces, unbounded (tests, bench/tracing.py --in-process): what
    tracing.Trace.end reads of a SpanPipe."""

    stopped = False
    full_at = 1 << 62

    def __init__(self) -> None:
        self.queue: list[tuple[Any, int]] = []
        self.queued = 0

    @property
    def ended(self) -> list[Any]:
        return [trace for trace, _ in self.queue]

    def full(self) -> None:
        return None

    def on_end(self, ended: Any, spans: int) -> None:
        self.queue.append((ended, spans))
        self.queued += spans

    def dropped_by(self) -> dict[str, int]:
        return dict.fromkeys(DROPPED, 0)

    def shutdown(self, timeout: float = STOP_TIMEOUT) -> None:
        return None
