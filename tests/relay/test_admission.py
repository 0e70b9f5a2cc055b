"""The relay's admission (relay/admission.py) hands the next request to the worker greenlet that finished the last
one (a new greenlet per request cost more than the rest of the relay's own work on a call), never reuses a
cancelled request's worker (the one killed when its reply stream is closed), and ends its idle workers when it
closes or after IDLE_WORKER_SECONDS. Serve/remote's RemoteChild takes a session's parsed messages through it:
tests/serve/test_remote_upstream.py."""

from __future__ import annotations

import gevent
import gevent.event
from gevent.event import AsyncResult

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Request
from mcpgate.relay import admission
from mcpgate.relay.admission import Admission, Job

WAIT = 30.0


def request(msg_id: int) -> Job:
    req = jsonrpc.parse(jsonrpc.encode({"jsonrpc": "2.0", "id": msg_id, "method": "ping"}))
    assert isinstance(req, Request)
    return Job(req, None, AsyncResult())


class Runs:
    """An Admission's run: each job's worker noted, the job held until `go` (its place released after)."""

    def __init__(self) -> None:
        self.workers: dict[int, gevent.Greenlet] = {}
        self.go: dict[int, gevent.event.Event] = {}
        self.admission = Admission(2, 4, self.run)

    def run(self, job: Job) -> None:
        assert isinstance(job.req.id, int)
        self.workers[job.req.id] = gevent.getcurrent()
        try:
            self.go.setdefault(job.req.id, gevent.event.Event()).wait(WAIT)
        finally:
            job.done.set(None)
            self.admission.release(job)

    def finish(self, job: Job) -> None:
        assert isinstance(job.req.id, int)
        self.go.setdefault(job.req.id, gevent.event.Event()).set()
        assert job.done.wait(WAIT) is None and job.done.ready()
        gevent.sleep(0)  # its worker is waiting for the next job


def test_the_next_request_goes_to_the_worker_that_finished_the_last() -> None:
    runs = Runs()
    first, second = request(1), request(2)
    runs.admission.admit(first)
    runs.finish(first)
    runs.admission.admit(second)
    runs.finish(second)
    assert runs.workers[1] is runs.workers[2]
    assert runs.admission.idle.is_set() and not runs.admission.jobs and not runs.admission.running
    runs.admission.take_queued()  # closing: the idle worker ends
    gevent.sleep(0)
    assert runs.workers[1].dead


def test_a_cancelled_requests_worker_is_not_reused_and_idle_workers_end() -> None:
    runs = Runs()
    cancelled = request(1)
    runs.admission.admit(cancelled)
    cancelled.cancelled = True
    runs.finish(cancelled)
    assert runs.workers[1].join(WAIT) is None and runs.workers[1].dead  # it ended with its request
    together = [request(2), request(3)]
    for job in together:
        runs.admission.admit(job)
    gevent.sleep(0)
    assert runs.workers[2] is not runs.workers[3]  # two in flight: two workers
    for job in together:
        runs.finish(job)
    workers = [runs.workers[2], runs.workers[3]]
    assert not any(worker.dead for worker in workers)
    assert gevent.joinall(workers, timeout=admission.IDLE_WORKER_SECONDS + WAIT) and all(w.dead for w in workers)


def test_a_queued_request_goes_to_a_worker_when_a_place_is_free() -> None:
    runs = Runs()
    jobs = [request(msg_id) for msg_id in range(1, 5)]
    for job in jobs:
        runs.admission.admit(job)
    gevent.sleep(0)
    assert set(runs.workers) == {1, 2}  # two places; 3 and 4 wait
    for job in jobs:
        runs.finish(job)
    assert set(runs.workers) == {1, 2, 3, 4} and runs.admission.idle.is_set()
    runs.admission.take_queued()
    gevent.sleep(0)
    assert all(worker.dead for worker in runs.workers.values())
