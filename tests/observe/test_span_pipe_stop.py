"""The worker's exit never waits past its timeout for a span export process that reads no more: the rest of a
frame the pipe took in part is written until then, not with a blocking write (observe/span_pipe.py close)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from mcpgate.observe.span_pipe import SpanPipe
from tests.observe.test_span_pipe import ended
from tests.support import HANG_GUARD
from tests.support.gateway import pid_gone
from tests.support.otlp import Receiver, receiver


@pytest.fixture
def sink() -> Iterator[Receiver]:
    with receiver() as got:
        yield got


def test_a_stopped_export_process_holding_part_of_a_frame_does_not_hold_the_shutdown(sink: Receiver) -> None:
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url,
        "OTEL_BSP_SCHEDULE_DELAY": "3600000",  # the flusher left asleep: this test flushes
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1000000",
        "OTEL_BSP_MAX_QUEUE_SIZE": "1000000",
    }
    pipe = SpanPipe("stopped-reader", environ)
    proc = pipe.export.proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        frames = 0
        while pipe.export.pending is None:  # frames of ~100 KB until one is taken in part (a pipe holds 1 MiB at most)
            assert frames < 40, "the pipe never took a frame in part"
            for k in range(800):  # (past a pipe of 64 KiB, where the kernel kept the default size)
                pipe.on_end(ended(frames * 800 + k + 1), 2)
            pipe.flush()
            frames += 1
        stopper = threading.Thread(target=pipe.shutdown, args=(1.0,), daemon=True)
        stopper.start()
        stopper.join(HANG_GUARD)
        assert not stopper.is_alive(), "the shutdown waited on a reader that reads no more"
        assert proc.poll() is not None or pid_gone(proc.pid)  # killed by PID
    finally:
        if not pid_gone(proc.pid):
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, signal.SIGKILL)
