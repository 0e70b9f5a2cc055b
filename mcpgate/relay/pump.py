"""The relay's stdio side: host lines in, upstream messages out through one writer.

One greenlet reads stdin with the shared NDJSON framing. Each host request runs
in its own greenlet, so a slow tools/call never holds up a later tools/list.
At most `max_inflight` requests are relayed at once; later ones wait in a
bounded queue, and while that queue is full stdin is not read (back-pressure:
every request is answered, none refused for being one too many). Notifications
and the host's answers to server requests are sent in arrival order. A cancelled
request's reply stream is read on for the transport's cancel_grace (other
messages may ride it), its response and progress dropped. Everything bound for
stdout goes through the cancel filter, then to relay/host_writer.py's HostWriter
(whole lines, in order, under one lock). A host in the same process (serve/remote's
RemoteChild) runs relay/in_process.py's InProcessRelay, which skips the framing both ways.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import gevent
from gevent.event import AsyncResult, Event
from gevent.greenlet import Greenlet
from gevent.queue import Full, Queue

from mcpgate.config.relay_settings import RelaySettings
from mcpgate.core import jsonrpc
from mcpgate.core.cancel import CancelTracker
from mcpgate.core.framing import LineDecoder, LineTooLong
from mcpgate.relay import errors
from mcpgate.relay.admission import Admission, Job
from mcpgate.relay.host_writer import HostWriter, Out
from mcpgate.relay.stdio import IDLE_WAIT_SECONDS, StdPipes, StopSignals, open_pipes
from mcpgate.relay.transport import EndedTransport, OneWay, Sink, Transport, Upstream

log = logging.getLogger("mcpgate.relay")


@dataclass(frozen=True)
class PumpOptions:
    """Every limit of the stdio side. Those the user sets have no default here: their defaults are
    RelaySettings' (see from_settings); the rest are declared here only."""

    max_message_bytes: int
    max_inflight: int
    max_queued: int
    cancel_filter: bool
    shutdown_grace: float
    cancel_ttl: float = 60.0
    cancel_max_entries: int = 10_000
    out_queue: int = 1024
    out_put_timeout: float = 30.0
    oneway_queue: int = 256
    barrier_wait: float = 330.0

    @classmethod
    def from_settings(cls, settings: RelaySettings) -> PumpOptions:
        return cls(
            max_message_bytes=settings.max_message_bytes,
            max_inflight=settings.max_inflight,
            max_queued=settings.max_queued,
            cancel_filter=not settings.no_cancel_filter,
            shutdown_grace=settings.shutdown_grace,
        )


def host_lines(decoder: LineDecoder, data: bytes) -> list[bytes | LineTooLong]:
    """The complete lines in data; an over-long line becomes a LineTooLong after the good ones."""
    try:
        return list(decoder.feed(data))
    except LineTooLong as exc:
        return [*exc.lines, exc]


class Relay:
    def __init__(
        self, transport_factory: Callable[[Sink], Transport], options: PumpOptions, in_fd: int = 0, out_fd: int = 1
    ) -> None:
        self.options = options
        self.in_fd, self.out_fd = in_fd, out_fd
        self.transport = transport_factory(self.deliver)
        self._admission = Admission(options.max_inflight, options.max_queued, self._run_request)
        self._cancelled = CancelTracker(options.cancel_ttl, options.cancel_max_entries)
        self._cancelled_progress = CancelTracker(options.cancel_ttl, options.cancel_max_entries)
        self._stop = Event()
        self._writer = self._host_writer()
        self._write = self._writer.write  # bound once: every message for the host goes through it
        # Ordering without blocking stdin: one-way messages are POSTed in arrival order by one
        # sender greenlet, and every message waits for the `barrier` in force when it arrived:
        # the last one-way message before it, or an initialize still in flight (the lifecycle
        # wants its reply before anything else, even from a host that pipes everything at once).
        self._oneway: Queue = Queue(maxsize=options.oneway_queue)
        self._barrier: AsyncResult | None = None

    def _host_writer(self) -> HostWriter:
        """stdout's writer; a message ready with nothing else in flight is written by its own greenlet."""
        options = self.options
        return HostWriter(
            options.out_queue, options.out_put_timeout, lambda: len(self._admission.running) <= 1, self._stop.set
        )

    # -- stdout -----------------------------------------------------------------------------

    def deliver(self, message: Upstream) -> None:
        """The transports' sink: upstream messages for the host, through the cancel filter."""
        if isinstance(message, jsonrpc.Response) and message.id is not None and self._drop_late(message.id):
            return
        if self._cancelled_progress_note(message):
            return
        self._write(message)

    def _cancelled_progress_note(self, message: Upstream) -> bool:
        """Whether message is progress for a request the host cancelled (not for the host any more)."""
        if not isinstance(message, jsonrpc.Notification) or message.method != "notifications/progress":
            return False
        token = message.params.get("progressToken") if isinstance(message.params, dict) else None
        if not jsonrpc.is_valid_id(token) or not len(self._cancelled_progress):
            return False
        self._cancelled_progress.expire(time.monotonic())
        return jsonrpc.id_key(token) in self._cancelled_progress

    def _drop_late(self, msg_id: jsonrpc.Id) -> bool:
        if not self.options.cancel_filter:
            return False
        dropped = self._cancelled.drop_late(jsonrpc.id_key(msg_id), time.monotonic())
        if dropped:
            log.info("dropped the late reply to cancelled request %r", msg_id)
        return dropped

    # -- stdin ------------------------------------------------------------------------------

    def _read_loop(self, pipes: StdPipes) -> None:
        decoder = LineDecoder(self.options.max_message_bytes)
        while True:
            try:
                chunk = pipes.read()
            except OSError as exc:
                log.warning("stdin failed: %s", exc.strerror or exc)
                break
            if not chunk:
                break
            lines = host_lines(decoder, chunk)
            bare = decoder.bare  # no line of this chunk holds a CR: each is passed on unsearched (jsonrpc.raw_bytes)
            for line in lines:
                self._handle_line(line, bare)
        tail = decoder.finish()
        if tail is not None:
            self._handle_line(tail, decoder.bare)
        log.info("stdin closed")
        self._stop.set()

    def _handle_line(self, line: bytes | LineTooLong, bare: bool = False) -> None:
        """One line of the host's (`bare`: it holds no CR, LineDecoder.bare): its message(s) handled."""
        if isinstance(line, LineTooLong):
            self._write(jsonrpc.encode(jsonrpc.error_response(None, jsonrpc.INVALID_REQUEST, str(line))))
            return
        message = jsonrpc.parse_line(line, partial_from=None, bare=bare)  # each message whole, as parse() reads it
        for item in message.items if isinstance(message, jsonrpc.Batch) else [message]:
            self._handle(item)

    def _handle(self, message: jsonrpc.Message) -> None:
        if isinstance(message, jsonrpc.Invalid):
            self._write(jsonrpc.encode(jsonrpc.error_response(message.id, message.code, message.reason)))
        elif isinstance(message, jsonrpc.Request):
            self._start_request(message)
        elif isinstance(message, jsonrpc.Notification) and message.method == "notifications/cancelled":
            self._cancel(message)
        elif isinstance(message, (jsonrpc.Notification, jsonrpc.Response)):
            self._queue_oneway(message)

    def _queue_oneway(self, message: OneWay) -> None:
        done = AsyncResult()
        try:
            self._oneway.put((message, self._barrier, done), timeout=self.options.out_put_timeout)
        except Full:
            log.error(
                "upstream has not accepted messages for %gs; dropped %s",
                self.options.out_put_timeout,
                getattr(message, "method", "a response"),
            )
            return
        self._barrier = done

    def _send_loop(self) -> None:
        """POST one-way messages in arrival order (each after its barrier)."""
        while True:
            item = self._oneway.get()
            if item is None:
                return
            message, after, done = item
            try:
                self._wait_barrier(after)
                self.transport.send_oneway(message)
            except Exception:  # a bug must not stop later messages
                log.exception("relay error sending %s", getattr(message, "method", "a response"))
            finally:
                done.set(None)

    def _wait_barrier(self, after: AsyncResult | None) -> None:
        if after is not None and not after.ready():
            after.wait(timeout=self.options.barrier_wait)

    def _start_request(self, req: jsonrpc.Request) -> None:
        self._admission.wait_for_room(self.options.barrier_wait)
        key = jsonrpc.id_key(req.id)
        old = self._admission.jobs.get(key)
        if old is not None and not old.cancelled:
            refusal = f"request id {req.id!r} is already in use by a request in flight"
            self._write(jsonrpc.encode(jsonrpc.error_response(req.id, jsonrpc.INVALID_REQUEST, refusal)))
            return
        if old is not None and old.worker is not None:
            old.worker.kill(block=False)  # the id is reused: stop draining the cancelled request's stream
        self._cancelled.forget(key)
        token = jsonrpc.progress_token(req)
        if token is not None:
            self._cancelled_progress.forget(jsonrpc.id_key(token))
        job = Job(req, self._barrier, AsyncResult())
        if req.method == "initialize":
            self._barrier = job.done
        self._admission.admit(job)

    def _run_request(self, job: Job) -> None:
        try:
            answer = self._answer(job)
            if job.cancelled:
                log.info("dropped the reply to cancelled request %r", job.req.id)
            elif not self._drop_late(job.req.id):
                self._write(answer)
        finally:
            self._admission.release(job)

    def _answer(self, job: Job) -> Out:
        req = job.req
        try:
            self._wait_barrier(job.after)
            return self.transport.request(req)
        except errors.RelayError as exc:
            level = logging.INFO if exc.routine else logging.WARNING
            log.log(level, "%s (id %r) failed: %s", req.method, req.id, exc.message)
            return jsonrpc.encode(exc.response(req.id))
        except Exception as exc:  # a bug must still answer the host
            log.exception("relay error on %s (id %r)", req.method, req.id)
            return jsonrpc.encode(
                jsonrpc.error_response(req.id, jsonrpc.INTERNAL_ERROR, f"relay internal error: {exc!r}"[:300])
            )
        finally:
            job.done.set(None)

    def _cancel(self, note: jsonrpc.Notification) -> None:
        """A request still queued is dropped (nobody upstream knows it); otherwise forward the cancel, then
        stop waiting for the reply (at once, or after the transport's grace) and drop it if it still comes."""
        params = note.params if isinstance(note.params, dict) else {}
        request_id = params.get("requestId")
        key = jsonrpc.id_key(request_id) if jsonrpc.is_valid_id(request_id) else None
        job = self._admission.jobs.get(key) if key is not None else None
        if not self.options.cancel_filter or key is None:
            self._queue_oneway(note)
            return
        if job is not None and job.worker is None:
            self._admission.unqueue(job)
            log.info("cancelled request %r before it was sent: dropped from the queue", job.req.id)
            return
        now = time.monotonic()
        self._cancelled.cancel(key, now)
        token = jsonrpc.progress_token(job.req) if job is not None else None
        if token is not None:
            self._cancelled_progress.cancel(jsonrpc.id_key(token), now)
        self._queue_oneway(note)
        if job is not None and job.worker is not None and not job.cancelled:
            job.cancelled = True
            self._close_later(job, self.transport.cancel_grace(job.req))

    def _close_later(self, job: Job, grace: float) -> None:
        worker = job.worker
        assert worker is not None
        if grace <= 0:
            log.info("cancelled request %r: its reply stream is closed", job.req.id)
            worker.kill(block=False)
            return
        log.info("cancelled request %r: its reply stream is read for up to %gs more", job.req.id, grace)
        closer = gevent.spawn_later(grace, worker.kill, block=False)
        worker.link(lambda _: closer.kill(block=False))

    # -- lifecycle --------------------------------------------------------------------------

    def run(self) -> int:
        """Relay until stdin ends or SIGINT/SIGTERM; then end the session and exit 0."""
        pipes = open_pipes(self.in_fd, self.out_fd)
        signals = StopSignals(self._on_signal)
        try:
            return self.serve(pipes, signals.wait_seconds)
        finally:
            signals.cancel()
            pipes.restore()

    def serve(self, pipes: StdPipes, wake: float = IDLE_WAIT_SECONDS) -> int:
        """Relay over `pipes` until their input ends or stop(); then end the session. No signal, no fd: a host in
        the same process (serve/remote's RemoteChild) runs an InProcessRelay over pipes of its own this way."""
        writer = self._writer.start(pipes)
        sender = gevent.spawn(self._send_loop)
        reader = gevent.spawn(self._read_loop, pipes)
        reader.link(lambda _: self._stop.set())
        writer.link(lambda _: self._stop.set())
        try:
            while not self._stop.wait(timeout=wake):
                pass
            reader.kill(block=True, timeout=1.0)
            self._drain(sender)
            self.transport.close()
        finally:
            self._writer.finish(writer)
            self._detach()
        return 0

    def _detach(self) -> None:
        """The relay has ended: what points back at it (its admission's run, its transport's sink; its writer's
        callbacks went in HostWriter.finish) is dropped, so that it goes with its last reference (no cycle is left)."""
        self._admission.detach()
        self.transport = EndedTransport()

    def stop(self) -> None:
        """End the relay as stdin's end does (serve() drains, closes the upstream session and returns)."""
        self._stop.set()

    def _on_signal(self, signum: int) -> None:
        log.info("received %s; shutting down", signal.Signals(signum).name)
        self._stop.set()

    def _drain(self, sender: Greenlet) -> None:
        """Give requests (running and queued) and queued one-way messages a short grace; answer the rest with
        an error. Cancelled requests still being drained are owed nothing: closed at once."""
        deadline = time.monotonic() + self.options.shutdown_grace
        try:
            self._oneway.put(None, timeout=self.options.shutdown_grace)
        except Full:
            pass
        jobs = self._admission.jobs
        for job in list(jobs.values()):
            if job.cancelled and job.worker is not None:
                job.worker.kill(block=False)
        if not self._admission.idle.is_set():
            log.info("waiting up to %gs for %d in-flight replies", self.options.shutdown_grace, len(jobs))
        self._admission.idle.wait(timeout=self.options.shutdown_grace)
        sender.join(timeout=max(0.0, deadline - time.monotonic()))
        sender.kill(block=True, timeout=1.0)
        for job in self._admission.take_queued():
            exc = errors.ShuttingDown("relay shut down before the request could be sent")
            self._write(jsonrpc.encode(exc.response(job.req.id)))
        late = list(self._admission.running)
        for worker in late:
            worker.kill(errors.ShuttingDown("relay shut down before the upstream replied"), block=False)
        gevent.joinall(late, timeout=1.0)
        for worker in late:
            worker.kill(block=True, timeout=0.5)
