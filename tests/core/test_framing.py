"""NDJSON framing: LineDecoder and frame()."""

from __future__ import annotations

import pytest

from mcpgate.core.framing import LineDecoder, LineTooLong, frame

LS = "\u2028".encode()  # b"\xe2\x80\xa8"
PS = "\u2029".encode()  # b"\xe2\x80\xa9"


def feed_all(decoder: LineDecoder, chunks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out


@pytest.mark.parametrize(
    ("chunks", "lines", "pending"),
    [
        pytest.param([b'{"a":1}\n'], [b'{"a":1}'], 0, id="one-line-one-feed"),
        pytest.param([b'{"a":', b"1}\n"], [b'{"a":1}'], 0, id="partial-across-two-feeds"),
        pytest.param([b"{", b'"a"', b":", b"1", b"}", b"\n"], [b'{"a":1}'], 0, id="partial-across-six-feeds"),
        pytest.param([b"1\n2\n3\n"], [b"1", b"2", b"3"], 0, id="several-lines-one-feed"),
        pytest.param([b"1\n2", b"\n3\n4"], [b"1", b"2", b"3"], 1, id="lines-and-tail-mixed"),
        pytest.param([b"1\r\n2\r\n"], [b"1", b"2"], 0, id="crlf"),
        pytest.param([b"1\r", b"\n2\r\n"], [b"1", b"2"], 0, id="crlf-split-between-cr-and-lf"),
        pytest.param([b"\n\n1\n\n\n2\n"], [b"1", b"2"], 0, id="blank-lines-skipped"),
        pytest.param([b"\r\n \t\n1\n"], [b"1"], 0, id="whitespace-only-lines-skipped"),
        pytest.param([b"\n"], [], 0, id="lone-newline"),
        pytest.param([b""], [], 0, id="empty-feed"),
        pytest.param([b'{"s":"a' + LS + b'b"}\n'], [b'{"s":"a' + LS + b'b"}'], 0, id="u2028-is-payload"),
        pytest.param([b'{"s":"a' + PS + b'b"}\n'], [b'{"s":"a' + PS + b'b"}'], 0, id="u2029-is-payload"),
        pytest.param([b'{"s":"' + LS[:1], LS[1:] + b'"}\n'], [b'{"s":"' + LS + b'"}'], 0, id="u2028-split-mid-char"),
        pytest.param([b"a\rb\n"], [b"a\rb"], 0, id="inner-cr-is-not-a-line-end"),
        pytest.param([b"a\r\r\n"], [b"a\r"], 0, id="only-one-trailing-cr-removed"),
        pytest.param([b"\x0b\x0c\x85\n"], [b"\x0b\x0c\x85"], 0, id="vt-ff-nel-not-line-ends"),
    ],
)
def test_feed_splits_lines(chunks: list[bytes], lines: list[bytes], pending: int) -> None:
    decoder = LineDecoder(1024)
    assert feed_all(decoder, chunks) == lines
    assert decoder.pending == pending


@pytest.mark.parametrize(
    ("chunks", "limit", "expected"),
    [
        pytest.param([b"x" * 8 + b"\n"], 8, [b"x" * 8], id="exactly-at-limit"),
        pytest.param([b"x" * 8 + b"\r\n"], 8, [b"x" * 8], id="at-limit-crlf-cr-not-counted"),
        pytest.param([b"x" * 8 + b"\r", b"\n"], 8, [b"x" * 8], id="at-limit-crlf-split"),
        pytest.param([b"x" * 8, b"\n"], 8, [b"x" * 8], id="at-limit-newline-later"),
        pytest.param([b"x" * 4, b"x" * 4, b"\n"], 8, [b"x" * 8], id="at-limit-in-pieces"),
        pytest.param([b"x" * 9 + b"\n"], 8, LineTooLong, id="one-over-complete"),
        pytest.param([b"x" * 9], 8, LineTooLong, id="one-over-no-newline-yet"),
        pytest.param([b"x" * 8, b"x"], 8, LineTooLong, id="one-over-across-feeds-no-newline"),
        pytest.param([b"x" * 8 + b"\r", b"x"], 8, LineTooLong, id="cr-then-more-bytes"),
        pytest.param([b"x" * 8 + b"\r\r"], 8, LineTooLong, id="two-crs-over"),
        pytest.param([b"x" * 8 + b"\r", b"x\n"], 8, LineTooLong, id="inner-cr-counts"),
        pytest.param([b"ok\n" + b"x" * 9 + b"\n"], 8, LineTooLong, id="over-after-good-line"),
        pytest.param([b"x", b"\n"], 1, [b"x"], id="limit-one"),
        pytest.param([b"xy"], 1, LineTooLong, id="limit-one-over"),
    ],
)
def test_line_limit(chunks: list[bytes], limit: int, expected: list[bytes] | type[LineTooLong]) -> None:
    decoder = LineDecoder(limit)
    if isinstance(expected, list):
        assert feed_all(decoder, chunks) == expected
        return
    with pytest.raises(LineTooLong) as info:
        feed_all(decoder, chunks)
    assert info.value.limit == limit
    assert str(limit) in str(info.value)


def test_over_long_line_raises_before_newline_and_buffer_stays_bounded() -> None:
    decoder = LineDecoder(100)
    decoder.feed(b"x" * 60)
    with pytest.raises(LineTooLong):
        decoder.feed(b"x" * 60)  # 120 bytes, no newline yet
    assert decoder.pending == 0
    # The rest of the same over-long line is skipped, never buffered, never raised twice.
    for _ in range(100):
        assert decoder.feed(b"x" * 1000) == []
        assert decoder.pending == 0


@pytest.mark.parametrize(
    ("chunks", "before_error", "error_lines", "after"),
    [
        pytest.param([b"a\n" + b"x" * 20 + b"\nb\n"], [], [b"a", b"b"], [], id="good-lines-around-long-one-kept"),
        pytest.param([b"a\n" + b"x" * 20], [], [b"a"], [], id="good-line-before-long-tail-kept"),
        pytest.param([b"x" * 20, b"still the long line\nc\n"], [], [], [b"c"], id="rest-of-long-line-skipped"),
        pytest.param([b"x" * 20, b"more", b"\r\nc\n"], [], [], [b"c"], id="skipped-across-several-feeds"),
        pytest.param([b"x" * 20 + b"\n", b"d\n"], [], [], [b"d"], id="complete-long-line-then-next"),
        pytest.param([b"a\n", b"x" * 20, b"\n", b"e"], [b"a"], [], [], id="tail-after-skip-stays-pending"),
    ],
)
def test_decoder_is_usable_after_line_too_long(
    chunks: list[bytes], before_error: list[bytes], error_lines: list[bytes], after: list[bytes]
) -> None:
    """Documented behaviour: the over-long line is dropped as a whole (up to its newline),
    the good lines of the same feed travel on the exception, later lines decode normally."""
    decoder = LineDecoder(10)
    seen: list[bytes] = []
    errors: list[LineTooLong] = []
    for chunk in chunks:
        try:
            seen.extend(decoder.feed(chunk))
        except LineTooLong as exc:
            errors.append(exc)
            assert seen == before_error
            assert exc.lines == error_lines
            seen = []
    assert len(errors) == 1
    assert seen == after


def test_tail_pending_after_skip_is_returned_by_finish() -> None:
    decoder = LineDecoder(10)
    with pytest.raises(LineTooLong):
        decoder.feed(b"x" * 20 + b"\n" + b"tail")
    assert decoder.finish() == b"tail"


def test_two_long_lines_in_one_feed_raise_once() -> None:
    decoder = LineDecoder(4)
    with pytest.raises(LineTooLong) as info:
        decoder.feed(b"xxxxx\nok\nyyyyyy\nfine\n")
    assert info.value.lines == [b"ok", b"fine"]


@pytest.mark.parametrize(
    ("chunks", "tail"),
    [
        pytest.param([], None, id="nothing-fed"),
        pytest.param([b"1\n"], None, id="nothing-pending"),
        pytest.param([b'1\n{"a":2}'], b'{"a":2}', id="partial-last-line"),
        pytest.param([b'{"a":', b"2}"], b'{"a":2}', id="partial-across-feeds"),
        pytest.param([b"{", b'"a":', b"2}\r"], b'{"a":2}', id="partial-across-three-feeds"),
        pytest.param([b"{}\r"], b"{}", id="trailing-cr-removed"),
        pytest.param([b"  "], None, id="whitespace-only-tail"),
        pytest.param([b"\r"], None, id="lone-cr"),
        pytest.param([b"x" * 30], None, id="after-overflow-nothing"),
    ],
)
def test_finish(chunks: list[bytes], tail: bytes | None) -> None:
    decoder = LineDecoder(16)
    for chunk in chunks:
        try:
            decoder.feed(chunk)
        except LineTooLong:
            pass
    assert decoder.finish() == tail
    assert decoder.pending == 0
    assert decoder.finish() is None
    assert decoder.feed(b"next\n") == [b"next"]


@pytest.mark.parametrize("pieces", [1, 2, 3, 64])
def test_a_long_line_read_in_pieces_comes_back_whole_as_bytes(pieces: int) -> None:
    """As a child's stdout reader feeds a result of many reads: each piece goes into the line's one buffer, the
    line is plain bytes (what the reply's fast paths ask for), and what follows its newline starts afresh."""
    line = bytes(range(14, 256)) * 300  # no LF or CR in it
    size = -(-len(line) // pieces)
    chunks = [line[i : i + size] for i in range(0, len(line), size)]
    chunks[-1] += b"\n" + b'{"next":'
    decoder = LineDecoder(len(line))
    lines = feed_all(decoder, chunks)
    assert lines == [line] and type(lines[0]) is bytes and decoder.bare
    assert decoder.pending == len(b'{"next":')
    assert decoder.feed(b"1}\n") == [b'{"next":1}']
    assert decoder.pending == 0


@pytest.mark.parametrize("limit", [0, -1])
def test_limit_must_be_positive(limit: int) -> None:
    with pytest.raises(ValueError):
        LineDecoder(limit)


@pytest.mark.parametrize(
    ("message", "framed"),
    [
        (b"{}", b"{}\n"),
        (b'{"s":"' + LS + b'"}', b'{"s":"' + LS + b'"}\n'),
        (b"a\rb", b"a\rb\n"),
    ],
)
def test_frame(message: bytes, framed: bytes) -> None:
    assert frame(message) == framed
    assert LineDecoder(64).feed(framed) == [message]


def test_frame_refuses_newline() -> None:
    with pytest.raises(ValueError):
        frame(b"{}\n{}")


def test_line_too_long_is_a_value_error_with_empty_lines_by_default() -> None:
    exc = LineTooLong(5)
    assert isinstance(exc, ValueError)
    assert exc.lines == []


@pytest.mark.parametrize(
    ("chunks", "bare"),
    [
        pytest.param([b'{"a":1}\n'], True, id="plain-line"),
        pytest.param([b"1\n2\n3\n"], True, id="several-plain-lines"),
        pytest.param([b"1\r\n2\r\n"], True, id="crlf-line-ends-are-not-kept"),
        pytest.param([b"1\r", b"\n"], True, id="crlf-split-between-cr-and-lf"),
        pytest.param([b"a\rb\n"], False, id="inner-cr"),
        pytest.param([b"a\r\r\n"], False, id="cr-left-after-the-trailing-one"),
        pytest.param([b"1\na\rb\n2\n"], False, id="one-line-of-three-holds-a-cr"),
        pytest.param([b"a\r", b"b\n"], False, id="inner-cr-at-the-end-of-a-piece"),
        pytest.param([b"a\rb", b"c", b"d\n"], False, id="inner-cr-in-an-earlier-piece"),
        pytest.param([b"a\rb", b"c\n", b"d\n"], True, id="the-next-line-is-bare-again"),
        pytest.param([b"a\rb\nc"], False, id="the-cr-line-ends-the-tail-waits"),
        pytest.param([b"a\rb\nc", b"d\n"], True, id="a-tail-after-a-cr-line"),
        pytest.param([b"\r\n \t\n"], True, id="blank-lines-nothing-returned"),
        pytest.param([b"x" * 20 + b"\r\n"], True, id="over-long-line-with-crlf"),
        pytest.param([b"ok\r\n" + b"x\ry" * 20 + b"\n"], True, id="over-long-line-with-a-cr-is-not-returned"),
    ],
)
def test_bare_says_no_returned_line_holds_a_cr(chunks: list[bytes], bare: bool) -> None:
    decoder = LineDecoder(16)
    lines: list[bytes] = []
    for chunk in chunks:
        try:
            lines = decoder.feed(chunk)
        except LineTooLong as exc:
            lines = exc.lines
    assert decoder.bare is bare
    assert bare is not any(b"\r" in line for line in lines)


@pytest.mark.parametrize(
    ("chunks", "tail", "bare"),
    [
        pytest.param([b"{}"], b"{}", True, id="plain-tail"),
        pytest.param([b"{}\r"], b"{}", True, id="trailing-cr-removed"),
        pytest.param([b"a\rb"], b"a\rb", False, id="inner-cr"),
        pytest.param([b"a\rb\n", b"c"], b"c", True, id="after-a-cr-line"),
        pytest.param([b"a\rb\n"], None, True, id="nothing-pending"),
    ],
)
def test_bare_after_finish(chunks: list[bytes], tail: bytes | None, bare: bool) -> None:
    decoder = LineDecoder(16)
    for chunk in chunks:
        decoder.feed(chunk)
    assert decoder.finish() == tail
    assert decoder.bare is bare


def _outcome(decoder: LineDecoder, chunk: bytes, split: bool) -> tuple[object, ...]:
    """What one feed gives (lines, or the LineTooLong's limit and lines) and the decoder's state after it."""
    try:
        result: object = decoder._split(chunk) if split else decoder.feed(chunk)
    except LineTooLong as exc:
        result = ("too long", exc.limit, exc.lines)
    pending = decoder._pending
    held = pending if pending is None or isinstance(pending, bytes) else pending.getvalue()
    return result, decoder.bare, decoder.pending, decoder._discarding, held, decoder._pending_cr


_ONE_LINES = [
    b'{"jsonrpc":"2.0","id":1,"result":{}}\n',
    b"x\n",
    b"\n",
    b" \t\n",
    b"\x0b\n",
    b"12345678\n",  # at the limit
    b"123456789\n",  # past it
    b"1234567\r\n",
    b"a\rb\n",
    b"1\n2\n",
    b"1\n\n",
    b"1\n2",
    b"\n1\n",
    b"abc",
    b"",
    b"\r",
    b"\r\n",
    LS + b"\n",
]
_BEFORE = [[], [b"ab"], [b"ab\r"], [b"123456789012"], [b"1\r\n2", b"3\r"]]  # what was fed first (a state)


@pytest.mark.parametrize("before", _BEFORE)
@pytest.mark.parametrize("chunk", _ONE_LINES)
def test_one_line_fast_path_is_the_full_split(before: list[bytes], chunk: bytes) -> None:
    """feed()'s shortcut for one whole line gives what the full split gives, from every state, error included."""
    fast, full = LineDecoder(8), LineDecoder(8)
    for piece in before:
        for decoder in (fast, full):
            try:
                decoder.feed(piece)
            except LineTooLong:
                pass
    assert _outcome(fast, chunk, split=False) == _outcome(full, chunk, split=True)
