"""SSE encoder and incremental decoder (WHATWG event-stream parsing)."""

from __future__ import annotations

import pytest

from mcpgate.core.sse import Event, EventTooLarge, SseDecoder, encode_comment, encode_event, encode_priming


def decode(chunks: list[bytes], limit: int = 1 << 20) -> tuple[list[Event], SseDecoder]:
    decoder = SseDecoder(limit)
    events: list[Event] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events, decoder


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


@pytest.mark.parametrize(
    ("data", "event", "event_id", "retry_ms"),
    [
        pytest.param(b'{"jsonrpc":"2.0","id":1,"result":{}}', "message", None, None, id="json"),
        pytest.param(b'{"a":1}', "message", "42", None, id="with-id"),
        pytest.param(b'{"a":1}', "message", "s1/7", 1500, id="with-id-and-retry"),
        pytest.param(b"", "message", "prime", None, id="priming-empty-data"),
        pytest.param('{"s":"\u2028é"}'.encode(), "message", None, None, id="u2028-not-a-line-end"),
        pytest.param(b"x", "endpoint", None, None, id="custom-event"),
        pytest.param(b"x", None, None, None, id="no-event-line"),
        pytest.param(b"x", "", None, None, id="empty-event-name"),
        pytest.param(b": not a comment", "message", None, None, id="data-starting-with-colon"),
        pytest.param(b" leading space", "message", None, None, id="data-leading-space-kept"),
        pytest.param(b"line1\nline2", "message", None, None, id="multi-line-lf"),
        pytest.param(b"a\n\nb", "message", None, None, id="multi-line-with-empty"),
        pytest.param(b"a\n", "message", None, None, id="trailing-newline-kept"),
        pytest.param(b"\n", "message", None, None, id="only-newline"),
    ],
)
def test_round_trip(data: bytes, event: str | None, event_id: str | None, retry_ms: int | None) -> None:
    encoded = encode_event(data, event, event_id, retry_ms)
    assert encoded.endswith(b"\n\n")
    expected = Event(data.decode(), event or "message", event_id)
    for chunks, count in (([encoded], 1), (bytewise(encoded), 1), ([encoded * 2], 2)):
        events, decoder = decode(chunks)
        assert events == [expected] * count
        assert decoder.last_event_id == event_id
        assert decoder.retry_ms == retry_ms


@pytest.mark.parametrize(
    ("data", "decoded"),
    [(b"a\r\nb", "a\nb"), (b"a\rb", "a\nb"), (b"a\r\n\r\nb", "a\n\nb")],
)
def test_encode_normalises_cr(data: bytes, decoded: str) -> None:
    assert decode([encode_event(data)])[0] == [Event(decoded)]


@pytest.mark.parametrize(
    ("event", "event_id"),
    [("a\nb", None), ("a\rb", None), ("message", "1\ndata: evil"), ("message", "1\r"), ("message", "a\0b")],
)
def test_encode_refuses_field_injection(event: str, event_id: str | None) -> None:
    with pytest.raises(ValueError):
        encode_event(b"x", event, event_id)


STREAM = b"id: 1\nevent: message\ndata: hello\n\n"


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        pytest.param([b"data: a\n\n"], [Event("a")], id="lf"),
        pytest.param([b"data: a\r\n\r\n"], [Event("a")], id="crlf"),
        pytest.param([b"data: a\r\r"], [Event("a")], id="cr"),
        pytest.param([b"data: a\r\ndata: b\rdata: c\n\n"], [Event("a\nb\nc")], id="mixed-line-ends"),
        pytest.param([b"data: a\r", b"\ndata: b\r\n\r\n"], [Event("a\nb")], id="cr-at-chunk-end-lf-at-next-start"),
        pytest.param([b"data: a\r", b"", b"\ndata: b\n\n"], [Event("a\nb")], id="empty-chunk-between-cr-and-lf"),
        pytest.param([b"data: a\r", b"\r"], [Event("a")], id="cr-then-cr-is-blank-line"),
        pytest.param([b"data: a\r\n", b"\r\n"], [Event("a")], id="crlf-then-crlf"),
        pytest.param([b"data: a\r", b"\n", b"\r", b"\n"], [Event("a")], id="crlf-split-twice"),
        pytest.param([b"data: a\n", b"data: b\n\n"], [Event("a\nb")], id="multi-line-data"),
        pytest.param([b"data:a\n\n"], [Event("a")], id="no-space-after-colon"),
        pytest.param([b"data:  a\n\n"], [Event(" a")], id="only-one-space-removed"),
        pytest.param([b"data\n\n"], [Event("")], id="field-without-colon"),
        pytest.param([b"data:\n\n"], [Event("")], id="empty-data"),
        pytest.param([b": keepalive\n\n"], [], id="comment-only"),
        pytest.param([b":\n\ndata: a\n: inner\ndata: b\n\n"], [Event("a\nb")], id="comments-ignored"),
        pytest.param([b"event: ping\n\n"], [], id="no-data-no-event"),
        pytest.param([b"event: ping\n\ndata: a\n\n"], [Event("a")], id="type-reset-after-blank"),
        pytest.param([b"event: endpoint\ndata: /m?s=1\n\n"], [Event("/m?s=1", "endpoint")], id="event-type"),
        pytest.param([b"event:\ndata: a\n\n"], [Event("a")], id="empty-event-type-is-message"),
        pytest.param([b"unknown: x\ndata: a\n\n"], [Event("a")], id="unknown-field-ignored"),
        pytest.param([b"Data: a\n\n"], [], id="field-names-case-sensitive"),
        pytest.param([b"data: a\n"], [], id="no-dispatch-without-blank-line"),
        pytest.param([b"\xef\xbb\xbfdata: a\n\n"], [Event("a")], id="bom-stripped"),
        pytest.param([b"\xef\xbb", b"\xbfdata: a\n\n"], [Event("a")], id="bom-split"),
        pytest.param([b"data: a\n\n\xef\xbb\xbfdata: b\n\n"], [Event("a")], id="bom-only-at-stream-start"),
        pytest.param([b"data: \xe2\x80", b"\xa8\n\n"], [Event("\u2028")], id="utf8-split-across-chunks"),
        pytest.param([b"data: \xff\n\n"], [Event("\ufffd")], id="invalid-utf8-replaced"),
        pytest.param(bytewise(STREAM * 2), [Event("hello", "message", "1")] * 2, id="byte-by-byte"),
        pytest.param(
            bytewise(STREAM.replace(b"\n", b"\r\n")), [Event("hello", "message", "1")], id="byte-by-byte-crlf"
        ),
        pytest.param(bytewise(STREAM.replace(b"\n", b"\r")), [Event("hello", "message", "1")], id="byte-by-byte-cr"),
    ],
)
def test_decoder(chunks: list[bytes], expected: list[Event]) -> None:
    assert decode(chunks)[0] == expected


@pytest.mark.parametrize(
    ("stream", "last_id", "event_ids"),
    [
        pytest.param(b"id: 1\ndata: a\n\n", "1", ["1"], id="id"),
        pytest.param(b"id: 1\ndata: a\n\ndata: b\n\n", "1", ["1", "1"], id="id-persists"),
        pytest.param(b"id: 1\ndata: a\n\nid\ndata: b\n\n", "", ["1", ""], id="empty-id-resets"),
        pytest.param(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n", "1", ["1", "1"], id="id-with-nul-ignored"),
        pytest.param(b"id: 5\n\n", "5", [], id="id-without-data-still-recorded"),
        pytest.param(b"data: a\n\n", None, [None], id="no-id"),
    ],
)
def test_id_field(stream: bytes, last_id: str | None, event_ids: list[str | None]) -> None:
    events, decoder = decode([stream])
    assert [e.id for e in events] == event_ids
    assert decoder.last_event_id == last_id


@pytest.mark.parametrize(
    ("stream", "retry_ms"),
    [
        (b"retry: 3000\n", 3000),
        (b"retry:0\n", 0),
        (b"retry: 3000\nretry: x\n", 3000),
        (b"retry: -1\n", None),
        (b"retry: 1.5\n", None),
        (b"retry: \n", None),
        (b"retry: \xd9\xa3\n", None),  # ARABIC-INDIC DIGIT THREE: a digit, not an ASCII digit
        (b"retry: 10 \n", None),
    ],
)
def test_retry_field(stream: bytes, retry_ms: int | None) -> None:
    assert decode([stream])[1].retry_ms == retry_ms


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param([b"data: " + b"x" * 200 + b"\n"], id="one-long-data-line"),
        pytest.param([b"data: " + b"x" * 200], id="unterminated-line"),
        pytest.param([b"data: " + b"x" * 60 + b"\n"] * 4, id="many-data-lines-one-event"),
        pytest.param(bytewise(b"data: " + b"x" * 200), id="byte-by-byte"),
        pytest.param([b"data: " + "é".encode() * 60 + b"\n"], id="counts-bytes-not-characters"),
    ],
)
def test_event_too_large(chunks: list[bytes]) -> None:
    decoder = SseDecoder(max_event_bytes=100)
    with pytest.raises(EventTooLarge) as info:
        for chunk in chunks:
            decoder.feed(chunk)
    assert info.value.limit == 100
    # Documented behaviour: the decoder has released its buffers and stays failed.
    with pytest.raises(EventTooLarge):
        decoder.feed(b"\n\ndata: ok\n\n")


@pytest.mark.parametrize(
    "stream",
    [
        b"data: " + b"x" * 90 + b"\n\n",
        (b"data: " + b"x" * 40 + b"\n\n") * 50,
        b": " + b"c" * 50 + b"\n" + b"data: " + b"x" * 40 + b"\n\n",
    ],
)
def test_events_within_limit_pass(stream: bytes) -> None:
    events, _ = decode(bytewise(stream), limit=100)
    assert events and all(len(e.data) <= 100 for e in events)


@pytest.mark.parametrize(("text", "encoded"), [("", b":\n\n"), ("keepalive", b": keepalive\n\n")])
def test_comment(text: str, encoded: bytes) -> None:
    assert encode_comment(text) == encoded
    events, _decoder = decode([encoded + encode_event(b"x")])
    assert events == [Event("x")]


@pytest.mark.parametrize(
    ("retry_ms", "encoded"), [(None, b"id: s-1-0\ndata: \n\n"), (250, b"id: s-1-0\nretry: 250\ndata: \n\n")]
)
def test_priming_event(retry_ms: int | None, encoded: bytes) -> None:
    assert encode_priming("s-1-0", retry_ms) == encoded
    events, decoder = decode([encoded])
    assert events == [Event("", "message", "s-1-0")]  # empty data: a client takes no message from it
    assert decoder.last_event_id == "s-1-0" and decoder.retry_ms == retry_ms
