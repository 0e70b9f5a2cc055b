"""StdoutReader._feed's one-line shortcut against the loop it skips: for every chunk, the lines handed over and
their bare word are what LineDecoder.feed gives, in order, however many lines a chunk holds; ChildProcess._deliver's
parse of a short line against parse_line's."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.child.process import ChildProcess
from mcpgate.child.stdout import StdoutReader
from mcpgate.core import jsonrpc
from mcpgate.core.framing import LineDecoder

CHUNKS = [
    [b'{"id":1}\n'],
    [b'{"id":1}\r\n'],
    [b'{"id":1}\n{"id":2}\n'],
    [b'{"id":1', b"}\n"],
    [b'{"id":1}\n{"id"', b":2}\n"],
    [b"\n", b"  \n", b'{"id":3}\n'],
    [b'{"a":"\r"}\n'],
    [b'{"id":1}\n', b'{"id":2}\r\n{"id":3}\n'],
]


@pytest.mark.parametrize("chunks", CHUNKS, ids=repr)
def test_lines_handed_over_are_the_decoders(chunks: list[bytes]) -> None:
    handed: list[tuple[bytes, bool]] = []
    reader = StdoutReader(-1, 1 << 20, lambda line, bare: handed.append((line, bare)), lambda: None)
    decoder = LineDecoder(1 << 20)
    expected: list[tuple[bytes, bool]] = []
    for chunk in chunks:
        reader._feed(chunk)
        lines = decoder.feed(chunk)
        expected += [(line, decoder.bare) for line in lines]
    assert handed == expected


def test_a_line_past_the_limit_after_one_line_hands_that_line_then_says_so() -> None:
    handed: list[bytes] = []
    told: list[bool] = []
    reader = StdoutReader(-1, 8, lambda line, bare: handed.append(line), lambda: told.append(True))
    reader._feed(b'{"a":1}\n{"much too long"}\n')
    assert handed == [b'{"a":1}'] and told == [True] and reader.discard
    reader._feed(b'{"b":2}\n')
    assert handed == [b'{"a":1}']


def test_a_failing_handover_of_the_one_line_leaves_nothing_for_the_reader() -> None:
    def fail(line: bytes, bare: bool) -> None:
        raise KeyboardInterrupt

    reader = StdoutReader(-1, 1 << 20, fail, lambda: None)
    with pytest.raises(KeyboardInterrupt):
        reader._feed(b'{"id":1}\n')
    assert not reader._leftover


LIMITS: dict[str, Any] = {
    "max_line_bytes": 8 * 1024 * 1024,
    "max_write_queue_bytes": 16 * 1024 * 1024,
    "close_timeout": 0.5,
    "term_timeout": 0.5,
}


BIG = 1 << 18  # jsonrpc.PARTIAL_FROM_BYTES: a response this long is read by its head
LINES = [
    b'{"jsonrpc":"2.0","id":1,"result":{}}',
    b'{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"no"}}',
    b'{"jsonrpc":"2.0","id":2,"method":"roots/list"}',
    b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}',
    b'[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","method":"x"},7]',
    b'{"jsonrpc":"1.0","id":1,"result":{}}',
    b"not json",
    b'{"jsonrpc":"2.0","id":3,"result":{"text":"' + b"x" * BIG + b'"}}',
    b'{"jsonrpc":"2.0","id":4,"result":{"text":"' + b"\xff" * BIG + b'"}}',  # not UTF-8: answered as an error
    b'{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{"t":"' + b"y" * BIG + b'"}}',
    b'{"jsonrpc":"2.0","id":6,"result":{"t":"' + b"z" * (BIG - 43) + b'"}}',  # one byte short of the threshold
    b'{"jsonrpc":"2.0","id":6,"result":{"t":"' + b"z" * (BIG - 42) + b'"}}',  # the threshold's length itself
]


@pytest.mark.parametrize("line", LINES, ids=lambda line: repr(line[:48]) + f"..{len(line)}")
@pytest.mark.parametrize("bare", [False, True])
def test_a_line_delivered_is_parse_lines_message(line: bytes, bare: bool) -> None:
    """ChildProcess._deliver parses a short line with parse() itself (parse_line's call spared): what it hands on
    for any line, short or long, is what parse_line gives, its members for a batch."""
    handed: list[Any] = []
    child = ChildProcess(["true"], on_message=handed.append, on_exit=lambda _reason: None, **LIMITS)
    child._deliver(line, bare)
    parsed = jsonrpc.parse_line(line, bare=bare)
    if isinstance(parsed, jsonrpc.Batch):
        expected = [m for m in parsed.items if isinstance(m, (jsonrpc.Request, jsonrpc.Notification, jsonrpc.Response))]
    else:
        expected = [] if isinstance(parsed, jsonrpc.Invalid) else [parsed]
    assert handed == expected
    assert [type(m) for m in handed] == [type(m) for m in expected]
