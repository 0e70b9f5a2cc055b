"""Tracing on at 100 % sampling, a tools/call round trip still leaves no reference cycle in the worker, on either
hot path (a 2025 session's and a 2026-07-28 stateless call through the pool): each ended request's Trace, queued
until its batch is written to the export process, goes with the batch (bench/tracing.py --gc: the worker's
collector runs as seldom with tracing on as off, under one collection per 1,000 calls, none of generation 2).

The worker runs with gc.DEBUG_SAVEALL and answers SIGUSR2 with what a collection found that is mcpgate's
(tests/serve/test_cyclic_garbage.py's hooks file)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.serve.test_cyclic_garbage import Collections, saving_worker, session_calls, stateless_calls
from tests.support import Gateway, wait_for
from tests.support.otlp import Receiver, receiver


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Collections, Receiver]]:
    with receiver() as sink:
        env = {
            "MCPGATE_METRICS": "false",
            "MCPGATE_TRACING": "true",
            "OTEL_TRACES_SAMPLER": "always_on",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        with saving_worker(tmp_path_factory.mktemp("traced-garbage"), env) as (gw, collections):
            yield gw, collections, sink


def exported(sink: Receiver, calls: int) -> bool:
    """The spans of at least `calls` tools/call requests have reached the receiver (their batch was written)."""
    return len(sink.named("tools/call echo")) >= calls


@pytest.mark.parametrize("calls", [session_calls, stateless_calls], ids=["2025-session", "2026-07-28-pooled"])
def test_a_traced_round_trip_leaves_no_cyclic_garbage(
    traced: tuple[Gateway, Collections, Receiver], calls: Callable[[Gateway, int], None]
) -> None:
    gw, collections, sink = traced
    before = len(sink.named("tools/call echo"))
    calls(gw, 3)  # first use: what is made once is not garbage of a call
    assert wait_for(lambda: exported(sink, before + 3), timeout=30), gw.log_tail()
    collections.found()
    calls(gw, 10)
    assert wait_for(lambda: exported(sink, before + 13), timeout=30), gw.log_tail()
    assert collections.found() == []
