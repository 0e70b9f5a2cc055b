"""StdoutReader._feed's one-line shortcut against the loop it skips: for every chunk, the lines handed over and
their bare word are what LineDecoder.feed gives, in order, however many lines a chunk holds."""

from __future__ import annotations

import pytest

from mcpgate.child.stdout import StdoutReader
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
