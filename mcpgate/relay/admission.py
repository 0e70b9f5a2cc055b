"""Back-pressure for the relay's host requests: a fixed number of places and a bounded wait queue.

At most `limit` requests are relayed at once; later ones wait, in arrival order, in a queue of at most
`queue_max`. While that queue is full the stdin reader waits for room (`wait_for_room`): a busy host is
slowed down, never refused. Every request the host has sent and not seen end is kept by id, whether it is
queued, running, or cancelled and still draining its reply stream.

A worker greenlet that has relayed a request waits up to IDLE_WORKER_SECONDS for the next one before it ends (a
new greenlet, its first frame's stack and their teardown cost more than the rest of the relay's own work on a
call). One whose request was cancelled is never reused: it is the one killed when that request's reply stream is
closed, so it ends with it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import gevent
from gevent import GreenletExit
from gevent.event import AsyncResult, Event
from gevent.greenlet import Greenlet

from mcpgate.core import jsonrpc

log = logging.getLogger("mcpgate.relay")

IDLE_WORKER_SECONDS = 1.0  # how long a worker with nothing to do waits for the next request


@dataclass(eq=False)
class Job:
    """One host request: waiting for a place, then relayed by its worker."""

    req: jsonrpc.Request
    after: AsyncResult | None  # the barrier in force when it arrived
    done: AsyncResult  # set when it is over (a barrier for what follows an initialize)
    worker: Greenlet | None = None  # None while it waits in the queue
    cancelled: bool = False

    @property
    def key(self) -> jsonrpc.IdKey:
        return jsonrpc.id_key(self.req.id)


class Admission:
    def __init__(self, limit: int, queue_max: int, run: Callable[[Job], None]) -> None:
        self.limit, self.queue_max = limit, queue_max
        self._run = run  # relays a job; called in the job's own greenlet, which must call release() at its end
        self.jobs: dict[jsonrpc.IdKey, Job] = {}
        self.running: set[Greenlet] = set()  # the workers holding a place (a draining cancelled one too)
        self._queue: deque[Job] = deque()
        self._room = Event()  # set while the queue has room
        self._room.set()
        self.idle = Event()  # set while nothing runs or waits
        self.idle.set()
        self._closing = False
        self._idle_workers: list[tuple[Greenlet, AsyncResult]] = []  # each waiting for a job on its own slot

    def admit(self, job: Job) -> None:
        """Run the job when a place is free, else queue it."""
        self.jobs[job.key] = job
        self.idle.clear()
        if len(self.running) < self.limit:
            self._start(job)
            return
        self._queue.append(job)
        if len(self._queue) >= self.queue_max:
            self._room.clear()

    def _start(self, job: Job) -> None:
        """The job to a waiting worker, else to a new one."""
        while self._idle_workers:
            worker, slot = self._idle_workers.pop()
            if not worker.dead:
                job.worker = worker
                self.running.add(worker)
                slot.set(job)
                return
        job.worker = Greenlet(self._work, job)
        self.running.add(job.worker)
        job.worker.start()

    def _work(self, job: Job) -> None:
        """A worker's life: its job, then each one handed to it, until none comes for IDLE_WORKER_SECONDS, its
        job was cancelled, or the relay is closing."""
        next_job: Job | None = job
        try:
            while next_job is not None:
                self._run(next_job)
                if next_job.cancelled or self._closing:
                    return
                next_job = None  # nothing of the last request is held while waiting
                next_job = self._wait_for_job()
        except GreenletExit:  # killed: it ends here, its exception (whose frames hold its job) not kept as its value
            return

    def _wait_for_job(self) -> Job | None:
        slot: AsyncResult = AsyncResult()
        entry = (gevent.getcurrent(), slot)
        self._idle_workers.append(entry)
        try:
            slot.wait(timeout=IDLE_WORKER_SECONDS)
        except BaseException:  # killed: a job handed over meanwhile is released unrun (as an unstarted worker's)
            if slot.ready():
                self._abandon(slot.value)
            raise
        finally:
            if not slot.ready() and entry in self._idle_workers:
                self._idle_workers.remove(entry)
        return slot.value if slot.ready() else None

    def _abandon(self, job: Job) -> None:
        job.done.set(None)
        self.release(job)

    def release(self, job: Job) -> None:
        """The job's worker is ending: its place goes to the request that has waited longest."""
        if self.jobs.get(job.key) is job:
            del self.jobs[job.key]
        if job.worker is not None:
            self.running.discard(job.worker)
        while self._queue and len(self.running) < self.limit and not self._closing:
            self._start(self._queue.popleft())
        self._update()

    def unqueue(self, job: Job) -> None:
        """A queued job leaves without running (nobody upstream heard of it)."""
        self._queue.remove(job)
        del self.jobs[job.key]
        job.done.set(None)
        self._update()

    def take_queued(self) -> list[Job]:
        """At shutdown: start nothing more; the jobs still queued, removed."""
        self._closing = True
        for worker, _ in self._idle_workers:
            worker.kill(block=False)
        self._idle_workers.clear()
        jobs = list(self._queue)
        while self._queue:
            self.unqueue(self._queue[0])
        return jobs

    def detach(self) -> None:
        """The relay has ended: its way back (`run`) dropped, so that no reference cycle is left; nothing runs
        from now on (a job admitted still is only marked done)."""
        self._closing = True
        self._run = _not_run

    def _update(self) -> None:
        if len(self._queue) < self.queue_max:
            self._room.set()
        if not self.running and not self._queue:
            self.idle.set()

    @property
    def room(self) -> bool:
        """Whether a request arriving now is admitted without waiting (wait_for_room returns at once)."""
        return bool(self._room.is_set())

    def wait_for_room(self, warn_every: float) -> None:
        """Back-pressure: called by the stdin reader, which reads nothing more while the queue is full."""
        if self._room.is_set():
            return
        log.info("%d requests wait for one of %d places: stdin paused", len(self._queue), self.limit)
        while not self._room.wait(timeout=warn_every):
            log.warning("no request has ended for %gs; stdin is still paused", warn_every)
        log.info("stdin resumed")


def _not_run(job: Job) -> None:
    """An ended relay's `run`: the job is over without being relayed."""
    job.done.set(None)
