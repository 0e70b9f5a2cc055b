"""What an ended relay leaves is freed by reference counting alone (relay/admission.py, get_stream.py, pump.py):
a killed worker greenlet keeps no GreenletExit whose frames hold its job (and so the greenlet), an admission
detached at the relay's end no longer holds the relay's run, and a stopped GET stream forgets its greenlet and its
owner. serve/remote runs the relay in the worker for every remote session: tests/serve/test_hub_remote_release.py
checks a whole ended session there."""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import gevent
import pytest
from gevent.event import AsyncResult

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Request
from mcpgate.relay.admission import Admission, Job
from mcpgate.relay.get_stream import GetStream
from tests.support.collector import collector_off

WAIT = 30.0


@pytest.fixture(autouse=True)
def no_collector() -> Iterator[None]:
    yield from collector_off()


def request(msg_id: int) -> Job:
    req = jsonrpc.parse(jsonrpc.encode({"jsonrpc": "2.0", "id": msg_id, "method": "ping"}))
    assert isinstance(req, Request)
    return Job(req, None, AsyncResult())


def test_a_killed_worker_and_a_detached_admission_leave_no_cycle() -> None:
    holder: dict[str, Admission] = {}
    workers: list[gevent.Greenlet] = []

    def run(job: Job) -> None:  # holds the admission, as the relay's bound method does
        workers.append(gevent.getcurrent())
        job.done.set(None)
        holder["admission"].release(job)

    admission = holder["admission"] = Admission(2, 4, run)
    job = request(1)
    admission.admit(job)
    job.done.wait(WAIT)
    [worker] = workers
    admission.take_queued()  # the idle worker is killed
    worker.join(timeout=WAIT)
    assert worker.dead and worker.value is None  # no GreenletExit (with its frames) kept as its value
    admission.detach()
    gevent.sleep(0)  # a hub turn: the dead worker's links are notified (that callback holds it till then)
    gone_worker, gone_admission = weakref.ref(worker), weakref.ref(admission)
    workers.clear()
    holder.clear()
    del worker, admission, job
    assert gone_worker() is None and gone_admission() is None


class Http:
    """A client whose GET waits for its answer until the stream is stopped."""

    def new_decoder(self) -> None:
        return None

    def send(self, *args: object, **kwargs: object) -> None:
        gevent.sleep(WAIT)


class Owner:
    """A GET stream's owner (holding it, as StreamableTransport does) whose stream waits until it is stopped."""

    url = "http://127.0.0.1:9/mcp"
    session_id = None
    closing = False

    def __init__(self) -> None:
        self.stream = GetStream(self)  # type: ignore[arg-type]  # only the stream's start and stop are used
        self.http = Http()

    def headers(self, accept: str | None, body: bool) -> dict[str, str]:
        return {}


def test_a_stopped_get_stream_forgets_its_greenlet_and_its_owner() -> None:
    owner = Owner()
    owner.stream.start()
    greenlet = owner.stream._greenlet
    gevent.sleep(0)  # the stream's greenlet waits in its GET
    owner.stream.stop()
    assert greenlet is not None and greenlet.dead and greenlet.value is None
    del greenlet
    assert owner.stream.owner is None
    owner.stream.start()  # stopped: no new stream
    gone = weakref.ref(owner)
    del owner
    assert gone() is None
