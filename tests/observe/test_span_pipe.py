"""The span export process (mcpgate/observe/span_export.py) and the worker's pipe to it (span_pipe.py): the export
process ends with the worker that started it (a graceful stop, a SIGKILL), one that is killed is started again and
spans flow again, its argv holds no secret and its environment none of the gateway's settings, and a pipe that is
full drops whole batches, counted, without the worker ever waiting on it."""

from __future__ import annotations

import marshal
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpgate.observe.span_export import NICE, RECORD, Record
from mcpgate.observe.span_pipe import SpanPipe
from mcpgate.observe.span_records import Table, record, unpacked
from mcpgate.observe.tracing import CLIENT, Trace
from mcpgate.observe.w3c import Parent
from tests.observe.test_tracing import open_session_with, traced_env
from tests.support import HANG_GUARD, call, reply_message, serving, wait_for
from tests.support.gateway import crash, direct_children, wait_dead
from tests.support.otlp import Receiver, receiver

MODULE = b"mcpgate.observe.span_export"
TOKEN = "token-never-in-the-export-process-" + "t" * 16


@pytest.fixture
def sink() -> Iterator[Receiver]:
    with receiver() as got:
        yield got


def export_processes(master: int) -> list[int]:
    """The span export processes among the children of the gateway's worker."""
    [worker] = direct_children(master)
    found = []
    for pid in direct_children(worker):
        try:
            if MODULE in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def the_export_process(master: int) -> int:
    wait_for(lambda: len(export_processes(master)) == 1, timeout=30, what="the worker's span export process")
    return export_processes(master)[0]


def a_traced_call(gw: object, session: dict[str, str], trace_id: str, n: int) -> None:
    headers = {**session, "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    reply = gw.request("POST", body=call("echo", {"message": "x"}, n), headers=headers)  # type: ignore[attr-defined]
    assert reply_message(reply)["result"]["content"][0]["text"] == "x"


def test_the_export_process_holds_no_secret_and_ends_with_a_stopped_gateway(sink: Receiver) -> None:
    env = traced_env(sink, MCPGATE_AUTH_TOKEN=TOKEN, OTEL_EXPORTER_OTLP_HEADERS="x-tenant=t1")
    del env["MCPGATE_COMMAND"]
    with serving(env) as gw:
        pid = the_export_process(gw.proc.pid)
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert TOKEN.encode() not in argv and b"x-tenant" not in argv
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except PermissionError:  # undumpable: not even its user reads it
            environ = []
        assert not [entry for entry in environ if entry.startswith(b"MCPGATE_")]
    assert wait_dead([pid]) == []


def niceness(pid: int) -> int:
    """A process's nice value (/proc/PID/stat's 19th field)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[16])


def test_the_export_process_runs_niced_below_the_worker(sink: Receiver) -> None:
    """On a busy machine the export process yields to the worker (and the children): its niceness is the
    worker's plus span_export.NICE, once it is exporting (a trace's spans came through it)."""
    env = {**traced_env(sink), "OTEL_BSP_SCHEDULE_DELAY": "50"}
    del env["MCPGATE_COMMAND"]
    with serving(env) as gw:
        pid = the_export_process(gw.proc.pid)
        [worker] = direct_children(gw.proc.pid)
        a_traced_call(gw, open_session_with(gw, {}), "4" * 32, 10)
        wait_for(lambda: sink.of_trace("4" * 32), timeout=30, what="the trace's spans")
        assert niceness(pid) == min(niceness(worker) + NICE, 19)


def test_a_graceful_stop_exports_what_the_worker_still_held(sink: Receiver) -> None:
    """A schedule delay longer than the test: the last request's spans go out as the gateway stops (the pipe
    flushed and closed, the export process posting before it ends)."""
    env = {**traced_env(sink), "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    del env["MCPGATE_COMMAND"]
    with serving(env) as gw:
        pid = the_export_process(gw.proc.pid)
        a_traced_call(gw, open_session_with(gw, {}), "3" * 32, 10)
        assert sink.of_trace("3" * 32) == []
    assert wait_dead([pid]) == []
    assert "did not end" not in gw.log()  # it ended by itself, its stdin closed: not killed
    assert {span.name for span in sink.of_trace("3" * 32)} >= {"tools/call echo", "mcpgate.guard"}


def test_the_export_process_ends_with_a_killed_worker(sink: Receiver) -> None:
    env = {k: v for k, v in traced_env(sink).items() if k != "MCPGATE_COMMAND"}
    with serving(env) as gw:
        pid = the_export_process(gw.proc.pid)
        crash(gw)  # master and worker SIGKILLed: the pipe's only writer gone
        assert wait_dead([pid]) == [], "the export process outlived its worker"


def test_a_killed_export_process_is_started_again_and_spans_flow(sink: Receiver) -> None:
    env = {k: v for k, v in traced_env(sink).items() if k != "MCPGATE_COMMAND"}
    with serving(env) as gw:
        session = open_session_with(gw, {})
        first = the_export_process(gw.proc.pid)
        a_traced_call(gw, session, "1" * 32, 10)
        wait_for(lambda: sink.of_trace("1" * 32), timeout=30, what="the first trace's spans")
        os.kill(first, signal.SIGKILL)
        assert wait_dead([first]) == []
        wait_for(
            lambda: [pid for pid in export_processes(gw.proc.pid) if pid != first],
            timeout=30,
            what="a new export process",
        )
        a_traced_call(gw, session, "2" * 32, 11)
        wait_for(lambda: len(sink.of_trace("2" * 32)) >= 2, timeout=30, what="spans through the new export process")
        assert "started again" in gw.log()


def ended(n: int) -> Trace:
    """A sampled request's Trace as the hooks leave it: the request's span and the wait for the child."""
    trace = Trace("default")
    trace.sampled, trace.trace_id = True, n.to_bytes(16, "big")
    trace.what, trace.status = ("tools/call", "echo", "2025-11-25", n), 200
    trace.wait, trace.end_at = (os.urandom(8), trace.start + 1000), trace.start + 2000
    return trace


def test_a_full_pipe_drops_whole_batches_counted_and_never_blocks(sink: Receiver) -> None:
    """The export process stopped (SIGSTOP: it reads nothing): flushes go on returning, every batch past what the
    pipe holds dropped and counted; once it runs again, exactly the spans not counted lost arrive."""
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url,
        "OTEL_BSP_SCHEDULE_DELAY": "3600000",  # the flusher left asleep: this test flushes
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1000000",
        "OTEL_BSP_MAX_QUEUE_SIZE": "1000000",
    }
    pipe = SpanPipe("full-pipe", environ)
    proc = pipe.export.proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    flushes, batch = 40, 500  # 40 frames of ~100 KB against a pipe of 1 MiB at most
    try:

        def flush_all() -> None:
            for n in range(flushes):
                for k in range(batch):
                    pipe.on_end(ended(n * batch + k + 1), 2)
                pipe.flush()

        flusher = threading.Thread(target=flush_all)
        flusher.start()
        flusher.join(HANG_GUARD)
        assert not flusher.is_alive(), "a flush waited on the full pipe"
        assert 0 < pipe.lost < flushes * batch * 2 and pipe.lost % (batch * 2) == 0, pipe.lost
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    pipe.shutdown(HANG_GUARD)  # the pipe closed: the export process posts what it holds and ends
    assert proc.poll() is not None
    assert len(sink.spans) == flushes * batch * 2 - pipe.lost
    assert {span.kind for span in sink.spans} == {"SERVER", "CLIENT"} and CLIENT == 3


def test_no_export_process_no_spans_and_no_wait(sink: Receiver) -> None:
    """An export process that cannot start (no Python at its path): spans are dropped and counted, nothing waits."""
    environ = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url}
    pipe = SpanPipe("no-process", environ)
    try:
        pipe.export.close()
        pipe.export.argv = [str(Path(sys.executable).parent / "no-such-python")]
        pipe.export.retry_at = 0.0
        pipe.export.check()
        assert pipe.export.proc is None
        pipe.on_end(ended(1), 2)
        pipe.flush()
        assert pipe.lost == 2
    finally:
        pipe.shutdown()


def test_a_record_carries_every_field_the_export_reads() -> None:
    """span_records.record writes a Trace's fields in span_export.RECORD's order, and marshal carries them whole."""
    trace = ended(7)
    trace.parent = Parent(b"\x01" * 16, b"\x02" * 8, True, "k=v")
    trace.steps = [("mcpgate.guard", 1, 2)]
    trace.forward = (b"\x03" * 8, 3, "a")
    got = Record(marshal.loads(marshal.dumps([record(trace)]))[0])
    assert {name: getattr(got, name) for name in RECORD} == {name: getattr(trace, name) for name in RECORD}


FLUSHES = [  # OTEL_BSP_MAX_EXPORT_BATCH_SIZE, each queued request's spans, a whole flush (the schedule delay's)
    (4, [2, 2], False),  # the whole queue one batch, as a batch that just filled wakes the flusher
    (4, [2, 2, 2], False),  # a batch and a rest left for the next
    (4, [2, 2, 2], True),
    (4, [1, 3, 2], True),
    (4, [3, 3, 3], False),  # a batch passes its size by its last request's spans
    (5, [2, 2], False),  # not a batch yet: nothing goes
    (5, [2, 2], True),
    (4, [5, 1], True),
    (4, [], True),
]


@pytest.mark.parametrize(("batch", "counts", "whole"), FLUSHES)
def test_a_flush_writes_the_batches_of_its_queue(batch: int, counts: list[int], whole: bool, sink: Receiver) -> None:
    """The batches a flush writes, each a frame of records in the queue's order: as taken one request at a time
    while a batch holds fewer spans than its size (the whole queue at once when it is no more than one batch)."""
    expected, left = [], list(counts)
    while left and sum(left) >= (1 if whole else batch):
        taken: list[int] = []
        while left and sum(taken) < batch:
            taken.append(left.pop(0))
        expected.append(taken)
    pipe = SpanPipe("flushes", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url, "OTEL_BSP_SCHEDULE_DELAY": "3600000"})
    frames: list[bytes] = []
    try:
        pipe.batch = batch
        pipe.export.write = lambda frame: frames.append(frame) is None  # type: ignore[method-assign]
        for n, spans in enumerate(counts):
            pipe.queue.append((ended(n), spans))  # (no wake: the flusher left asleep)
            pipe.queued += spans
        pipe.flush(whole)
        table = Table()
        got = [[counts[int.from_bytes(r[5], "big")] for r in unpacked(frame[4:], table)] for frame in frames]
        assert got == expected and pipe.queued == sum(left) and [s for _, s in pipe.queue] == left
    finally:
        pipe.shutdown()
