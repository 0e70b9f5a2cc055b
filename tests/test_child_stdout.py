"""child/stdout.py with long lines: a read that fills its chunk grows the stdout pipe, which is shrunk back once it
is drained with no line unfinished; every line keeps the splitter's word on CRs (LineDecoder.bare) to its message.
A real `cat` (or a Python one-liner) per test; pipes.grow_pipe and shrink_pipe on a plain pipe."""

from __future__ import annotations

import array
import fcntl
import json
import os
import sys
import termios
import time
from collections.abc import Iterator

import gevent
import gevent.event
import pytest

from mcpgate.child import pipes
from mcpgate.child.process import ChildProcess
from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Notification, Request, Response

GUARD = 20.0  # a hang guard for every wait, never a speed assertion
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", None)
pytestmark = pytest.mark.skipif(F_GETPIPE_SZ is None, reason="pipe sizes are Linux's")


def pipe_size(fd: int) -> int:
    return int(fcntl.fcntl(fd, F_GETPIPE_SZ))  # type: ignore[arg-type]


def held(fd: int) -> int:
    """The bytes waiting in a pipe (FIONREAD)."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


def response(number: int, text: str, space: str = "") -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"result":{"t":%s"%s"}}' % (number, space.encode(), text.encode())


class Child:
    """A child whose messages are kept with the pipe's capacity at the time each arrived."""

    def __init__(self, argv: list[str], max_line_bytes: int = 8 << 20) -> None:
        self.seen: list[tuple[Request | Notification | Response, int]] = []
        self.arrived = gevent.event.Event()
        self.reasons: list[str] = []
        self.child = ChildProcess(
            argv,
            on_message=self.on_message,
            on_exit=self.reasons.append,
            max_line_bytes=max_line_bytes,
            max_write_queue_bytes=16 << 20,
            close_timeout=0.5,
            term_timeout=0.5,
        )

    @property
    def fd(self) -> int:
        reader = self.child._stdout
        assert reader is not None
        return reader.fd

    def on_message(self, message: Request | Notification | Response) -> None:
        self.seen.append((message, pipe_size(self.fd)))
        self.arrived.set()

    def wait_for(self, count: int) -> None:
        while len(self.seen) < count:
            self.arrived.clear()
            assert self.arrived.wait(GUARD), f"{len(self.seen)} of {count} messages"


@pytest.fixture
def cat() -> Iterator[Child]:
    made = Child(["cat"])
    made.child.start()
    try:
        yield made
    finally:
        assert made.child.stop("test over", timeout=GUARD)


def fill_stdout(child: Child) -> None:
    """Hold the hub (no greenlet runs) until the child's stdout pipe is full, so the next read fills its chunk."""
    usual = pipe_size(child.fd)
    deadline = time.monotonic() + GUARD
    while held(child.fd) < usual:
        assert time.monotonic() < deadline, "the child did not fill its stdout"
        time.sleep(0.001)  # blocking on purpose: the reader must not read meanwhile


@pytest.mark.parametrize("pump", [False, True], ids=["reader", "pump"])
def test_a_long_line_grows_the_pipe_which_shrinks_back_after(cat: Child, pump: bool) -> None:
    usual = pipe_size(cat.fd)
    big = response(1, "x" * (3 << 20))
    cat.child.send(response(0, "small"))
    cat.wait_for(1)
    assert cat.seen[0][1] == usual
    cat.child.send(big)
    fill_stdout(cat)
    if pump:
        while len(cat.seen) < 2:
            cat.arrived.clear()
            assert cat.child.pump(cat.arrived, GUARD) is not None
    cat.wait_for(2)
    message, size_then = cat.seen[1]
    assert isinstance(message, Response) and message.raw == big
    assert size_then == pipes.GROWN
    assert message.bare is message.raw and jsonrpc.raw_bytes(message) is message.raw
    assert pipe_size(cat.fd) == usual  # drained, no line unfinished: back to its usual size
    cat.child.send(response(2, "after"))
    cat.wait_for(3)
    assert cat.seen[2][1] == usual


@pytest.mark.parametrize("length", [100, 300 << 10, 2 << 20], ids=["short", "partial", "grown"])
def test_a_cr_inside_a_line_is_never_handed_on(cat: Child, length: int) -> None:
    """A CR as JSON whitespace: the line is not bare, so raw_bytes searches it and encodes it again; the same
    line without the CR, sent once the first arrived (the lines of one read share one word), is handed on as it
    is."""
    with_cr, without = response(1, "y" * length, space="\r"), response(2, "y" * length)
    cat.child.send(with_cr)
    cat.wait_for(1)
    cat.child.send(without)
    cat.wait_for(2)
    first, second = (message for message, _ in cat.seen)
    assert isinstance(first, Response) and isinstance(second, Response)
    assert first.raw == with_cr and first.bare is None
    out = jsonrpc.raw_bytes(first)
    assert b"\r" not in out and json.loads(out) == json.loads(with_cr)
    assert second.bare is second.raw and jsonrpc.raw_bytes(second) is second.raw


def test_a_line_over_the_bound_in_a_grown_pipe_closes_the_child() -> None:
    made = Child(["cat"], max_line_bytes=1 << 20)
    made.child.start()
    try:
        made.child.send(response(1, "ok"))
        made.child.send(response(2, "z" * (3 << 20)))
        made.child.send(response(3, "never"))
        assert made.child.join(GUARD)
        assert made.reasons == ["message too large"]
        assert [message.id for message, _ in made.seen] == [1]  # type: ignore[union-attr]
    finally:
        made.child.stop("test over", timeout=GUARD)


def test_a_long_last_line_without_its_newline_is_delivered_whole() -> None:
    text = "w" * (2 << 20)
    script = f"import sys; sys.stdout.write({response(5, 'W').decode()!r}.replace('W', 'w' * {len(text)}))"
    made = Child([sys.executable, "-c", script])
    made.child.start()
    try:
        made.wait_for(1)
        message = made.seen[0][0]
        assert isinstance(message, Response) and message.id == 5
        assert message.bare is message.raw and json.loads(jsonrpc.raw_bytes(message))["result"]["t"] == text
    finally:
        made.child.stop("test over", timeout=GUARD)


def test_grow_pipe_and_shrink_pipe() -> None:
    read_end, write_end = os.pipe()
    try:
        usual = pipe_size(read_end)
        assert pipes.grow_pipe(read_end) == usual
        assert pipe_size(read_end) == pipes.GROWN
        assert pipes.grow_pipe(read_end) is None  # as large already
        os.write(write_end, b"x" * (usual + 1))
        assert not pipes.shrink_pipe(read_end, usual)  # it holds more than that
        os.read(read_end, pipes.GROWN)
        assert pipes.shrink_pipe(read_end, usual)
        assert pipe_size(read_end) == usual
    finally:
        os.close(read_end)
        os.close(write_end)
