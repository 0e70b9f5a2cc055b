"""The fleet's shortcuts on every forwarded call held to the ways they shortcut, over tables: an owner's check of a
connection's series in one call (Channels.follows_nonce) against series() then Channels.follows as they were; the
body read before any handler (forward.unread_body, read_body's way for a request no handler parsed) over a table;
the directory's lookup, which asks the gone marks only for a marked instance, against GoneMarks.holds asked every
time; a remembered reply head read in one frame (ReplyHeads.framed) against ReplyHeads.read."""

from __future__ import annotations

import gc
import io
import itertools
from typing import Any

import pytest

from mcpgate.serve.cluster.directory import Directory
from mcpgate.serve.cluster.forward import read_body, unread_body
from mcpgate.serve.cluster.gone import RECHECK
from mcpgate.serve.cluster.nonces import Channels, series
from mcpgate.serve.cluster.reply_heads import ReplyHeads
from mcpgate.serve.front.context import CONTEXT, RequestContext
from mcpgate.serve.front.http import Refusal
from tests.serve import test_cluster_reply_heads as reply_heads_table


class Connection:  # stands for the worker's object of one client connection (weakly referenced)
    pass


def follows_the_old_way(open_: dict[Any, list[Any]], connection: Any, nonce: str) -> bool | None:
    """What the owner did before follows_nonce: series(nonce), then for a count above 0 Channels.follows (its
    code, on a table of its own); None where it went to Redis."""
    found = series(nonce)
    if found is None or found[1] <= 0:
        return None
    channel, count = found
    known = open_.get(connection)
    if known is None or known[0] != channel or count <= known[1]:
        return False
    known[1] = count
    return True


SEQUENCES = [
    # (which connection, nonce) in turn; "open c" opens channel c on that connection (its count 0 accepted)
    [(0, "c~1"), (0, "open c"), (0, "c~1"), (0, "c~1"), (0, "c~0"), (0, "c~5"), (0, "d~6"), (1, "c~6")],
    [(0, "open a~b"), (0, "a~b~1"), (0, "a~b~1"), (0, "a~1"), (1, "a~b~2")],  # the count after the last mark
    [(0, "open c"), (0, "c"), (0, "~3"), (0, "c~"), (0, "c~1x"), (0, "c~-1"), (0, "c~\u0663"), (0, "c~" + "9" * 19)],
    [(0, "open c"), (0, "c~" + "9" * 18), (0, "c~" + "9" * 18), (0, "c~00"), (0, "c~01")],
    [(0, "open c"), (1, "open c"), (1, "c~1"), (0, "c~1"), (0, "open d"), (0, "c~2"), (0, "d~1")],  # opened again
]


@pytest.mark.parametrize("sequence", SEQUENCES)
def test_follows_nonce_answers_as_series_then_follows(sequence: list[tuple[int, str]]) -> None:
    channels, connections = Channels(), [Connection(), Connection()]
    reference: dict[Any, list[Any]] = {}
    for which, nonce in sequence:
        connection = connections[which]
        if nonce.startswith("open "):
            channels.open(connection, nonce[5:])
            reference[connection] = [nonce[5:], 0]
            continue
        expected = follows_the_old_way(reference, connection, nonce)
        assert channels.follows_nonce(connection, nonce) == expected, (which, nonce)
        if expected is not None:
            assert channels.follows(connection, *series(nonce) or ("", 0)) is False, "recorded: not again"


def test_a_connection_s_entry_still_goes_with_it() -> None:
    channels, connection = Channels(), Connection()
    channels.open(connection, "c")
    assert channels.follows_nonce(connection, "c~1") is True
    del connection
    gc.collect()
    assert len(channels._open) == 0 and len(channels._data) == 0


class Stream(io.BytesIO):
    """wsgi.input that counts what was asked of it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.asked: list[int] = []

    def read(self, size: int | None = -1) -> bytes:
        self.asked.append(-1 if size is None else size)
        return super().read(size)


TOO_LARGE = 413
BODIES = [
    # (CONTENT_LENGTH, the bytes on the wire, limit, the body read or 413)
    ("12", b'{"jsonrpc":1}', 100, b'{"jsonrpc":1'),  # the length read, not past it
    ("13", b'{"jsonrpc":1}', 13, b'{"jsonrpc":1}'),  # at the limit
    ("14", b'{"jsonrpc":1}xx', 13, TOO_LARGE),  # past it
    ("0", b"", 10, b""),
    ("", b"abc", 10, b"abc"),  # no length: read up to the limit and one more
    (None, b"abcdefghijk", 10, TOO_LARGE),  # no length, more than the limit
    (None, b"abcdefghij", 10, b"abcdefghij"),
    ("x1", b"abc", 10, TOO_LARGE),  # not a number
    ("-1", b"abc", 10, TOO_LARGE),  # negative
    (" 3", b"abc", 10, b"abc"),  # int() takes it
]


def environ_of(length: str | None, data: bytes) -> dict[str, Any]:
    environ: dict[str, Any] = {"REQUEST_METHOD": "POST", "wsgi.input": Stream(data), CONTEXT: RequestContext()}
    if length is not None:
        environ["CONTENT_LENGTH"] = length
    return environ


def outcome(read: Any, environ: dict[str, Any], limit: int) -> tuple[Any, ...]:
    try:
        got: Any = read(environ, limit)
    except Refusal as refusal:
        got = (refusal.status, refusal.code, refusal.message)
    return got, environ["wsgi.input"].asked


@pytest.mark.parametrize(("length", "data", "limit", "expected"), BODIES)
def test_a_body_nothing_read_yet(length: str | None, data: bytes, limit: int, expected: bytes | int) -> None:
    """forward.read_body of a request no handler parsed is unread_body's (the guard's check of a forwarded one reads
    it so): the body, or 413 past the limit."""
    got, _ = outcome(unread_body, environ_of(length, data), limit)
    assert (got if isinstance(got, bytes) else got[0]) == expected
    assert outcome(unread_body, environ_of(length, data), limit) == outcome(read_body, environ_of(length, data), limit)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Redis:
    """The directory's commands on a table (GET, PTTL), counted."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[bytes, float]] = {}  # key -> (value, ms left)
        self.commands: list[str] = []

    def get(self, key: str) -> bytes | None:
        self.commands.append(f"GET {key}")
        found = self.entries.get(key)
        return found[0] if found else None

    def pttl(self, key: str) -> int:
        self.commands.append(f"PTTL {key}")
        found = self.entries.get(key)
        return int(found[1]) if found else -2


@pytest.mark.parametrize(
    ("steps", "answers"),
    [
        # each step: ("forget", instance), ("time", seconds), ("lookup", instance), ("rewrite", instance)
        ([("lookup", "i2"), ("lookup", "i3")], ["http://i2", None]),
        ([("forget", "i2"), ("lookup", "i2"), ("time", RECHECK), ("lookup", "i2")], [None, None]),
        ([("forget", "i2"), ("time", 13.0), ("lookup", "i2")], ["http://i2"]),  # the entry would have expired
        ([("forget", "i2"), ("time", RECHECK), ("rewrite", "i2"), ("lookup", "i2")], ["http://i2"]),  # written again
        ([("forget", "i2"), ("lookup", "i1"), ("lookup", "i3")], ["http://i1", None]),  # others unmarked
        ([("lookup", "me")], ["http://me"]),
    ],
)
def test_lookup_asks_the_marks_only_of_a_marked_instance(steps: list[tuple[str, Any]], answers: list[Any]) -> None:
    runs = []
    for asking_always in (False, True):
        clock, redis = Clock(), Redis()
        redis.entries = {f"mcpgate:instance:{i}": (f"http://{i}".encode(), 12_000.0) for i in ("i1", "i2")}
        directory = Directory(redis, "me", "http://me", clock)  # type: ignore[arg-type]
        asked: list[str] = []
        holds = directory.gone.holds

        def counted(instance: str, read_ttl: Any, holds: Any = holds, asked: list[str] = asked) -> bool:
            asked.append(instance)
            return bool(holds(instance, read_ttl))

        directory.gone.holds = counted  # type: ignore[method-assign]
        if asking_always:  # the marks of every instance asked, as lookup did: the same answers, the same commands
            directory.gone.marks = AskedAlways(directory.gone.marks)
        got = []
        for step, value in steps:
            if step == "forget":
                directory.forget(value)
            elif step == "time":
                clock.now += value
                for key, (entry, left) in redis.entries.items():
                    redis.entries[key] = (entry, left - value * 1000)
            elif step == "rewrite":
                redis.entries[f"mcpgate:instance:{value}"] = (f"http://{value}".encode(), 15_000.0)
            else:
                got.append(directory.lookup(value))
        runs.append((got, redis.commands))
        assert got == answers
        marked = {value for step, value in steps if step == "forget"}
        assert asking_always or set(asked) <= marked, "the marks asked only of a marked instance"
    assert runs[0] == runs[1], "the same answers and the same Redis commands as when every lookup asked"


class AskedAlways(dict):  # type: ignore[type-arg]
    """A table of marks that says it holds every instance: lookup then asks GoneMarks.holds each time, as before."""

    def __contains__(self, key: object) -> bool:
        return True


def test_a_reply_head_framed_reads_as_read_gives_it() -> None:
    """ReplyHeads.framed (the exchange's, every forwarded reply) against ReplyHeads.read over the table of heads of
    tests/serve/test_cluster_reply_heads.py: each head remembered, then each of its lengths read both ways."""
    compared = 0
    for head, method in itertools.product(reply_heads_table.HEADS, reply_heads_table.METHODS):
        heads = ReplyHeads()
        for first in reply_heads_table.DIGITS:
            block = reply_heads_table.fill(head, first)
            answer = reply_heads_table.full(block, method)
            if isinstance(answer, tuple) and answer[1] >= 200:
                heads.remember(block, method, *answer)
            for later in reply_heads_table.DIGITS:
                for asked in reply_heads_table.METHODS:
                    other = reply_heads_table.fill(head, later)
                    read, framed = heads.read(other, asked), heads.framed(other, asked)
                    if read is None:
                        assert framed is None, (other, asked)
                        continue
                    _, status, headers, framing, shape = read
                    assert framed == (status, headers, framing.length, framing.chunked, framing.keep, shape)
                    compared += 1
    assert compared > 500
