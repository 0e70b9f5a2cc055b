"""An ended child lets go of its owner: once it is gone and on_exit has run, ChildProcess drops the owner's
callbacks, its stdout reader and its stdin writer's callback, so the child and its owner (a session holding it,
its bound methods the callbacks) go with their last reference. Reference counting alone frees them here: the
cyclic collector is off while each test runs (a cycle per child made every ended session garbage for it).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import weakref
from collections.abc import Iterator

import gevent
import gevent.event
import pytest

from mcpgate.child.process import ChildProcess
from mcpgate.core.jsonrpc import Notification, Request, Response
from tests.support.collector import collector_off

GUARD = 20.0  # a hang guard, never a speed assertion
LIMITS = {"max_line_bytes": 1 << 20, "max_write_queue_bytes": 1 << 20, "close_timeout": 5.0, "term_timeout": 5.0}
ECHO = [sys.executable, "-c", "import sys\nfor line in sys.stdin: sys.stdout.write(line); sys.stdout.flush()"]


class Owner:
    """A session's part: it holds its child, and the child's callbacks are its bound methods."""

    def __init__(self) -> None:
        self.heard = gevent.event.Event()
        self.reasons: list[str] = []
        self.child = ChildProcess(
            ECHO, on_message=self.on_message, on_exit=self.on_exit, logger=logging.getLogger("t"), **LIMITS
        )

    def on_message(self, message: Request | Notification | Response) -> None:
        self.heard.set()

    def on_exit(self, reason: str) -> None:
        self.reasons.append(reason)


@pytest.fixture(autouse=True)
def no_collector() -> Iterator[None]:
    yield from collector_off()


def spoken_to(owner: Owner) -> None:
    owner.child.start()
    assert owner.child.send(b'{"jsonrpc":"2.0","method":"notifications/message","params":{}}')
    assert owner.heard.wait(GUARD), "the child did not answer"


@pytest.mark.parametrize("crashed", [False, True], ids=["closed", "killed"])
def test_an_ended_child_and_its_owner_go_with_their_last_reference(crashed: bool) -> None:
    owner = Owner()
    spoken_to(owner)
    child = owner.child
    if crashed:
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        assert child.join(GUARD)
    else:
        assert child.stop("the client ended the session", timeout=GUARD)
    assert len(owner.reasons) == 1 and child.returncode is not None  # what its end tells stays
    gevent.idle()  # the greenlets that ran it finish
    owner_gone, child_gone = weakref.ref(owner), weakref.ref(child)
    del owner, child
    assert owner_gone() is None and child_gone() is None


def test_a_child_closed_before_it_started_lets_go_of_its_owner() -> None:
    owner = Owner()
    owner.child.close("never needed")
    assert owner.child.join(0) and owner.reasons == []
    owner_gone = weakref.ref(owner)
    del owner
    assert owner_gone() is None
