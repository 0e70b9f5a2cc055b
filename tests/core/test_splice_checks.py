"""Splices of a decoded answer's bytes must not trust the decoding about repeated members: json_extent.sole_value (one
JSON value in a span, with msgspec's skip installed and with json's decoding alone) and the hub's splice_id (a
member's answer under the client's id), from tables. A decoding keeps a repeated member's last value, so a splice
that took an answer's bytes from its result to its end would pass on an id written after it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import msgspec
import pytest

from mcpgate.core import json_extent, jsonrpc
from mcpgate.core.hub_messages import renamed_response, splice_id


@pytest.fixture(params=["msgspec", "json"])
def decoders(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both ways a process reads: msgspec's decoder and skip installed (the gateway), or json's alone (the relay)."""
    if request.param == "msgspec":
        jsonrpc.use_fast_decoder(msgspec.json.Decoder().decode)
        json_extent.use_skip(msgspec.json.Decoder(msgspec.Raw).decode)
    try:
        yield request.param
    finally:
        jsonrpc.use_fast_decoder(None)
        json_extent.use_skip(None)


@pytest.mark.parametrize(
    ("text", "one"),
    [
        (b'{"a":1}', True),
        (b' {"a":1} ', True),
        (b'{"a":"},{"}', True),  # braces inside a string
        (b"[1,2]", True),
        (b'"x"', True),
        (b'{"a":1},"id":"m","result":{"b":2}', False),  # a member repeated after the value
        (b'{"a":1},"r\\u0065sult":{}', False),
        (b'{"a":1} {"b":2}', False),
        (b"{}", True),
        (b"", False),
    ],
)
def test_sole_value(text: bytes, one: bool, decoders: str) -> None:
    raw = b"<<" + text + b">>"  # the span is taken in place, between bytes that are no JSON
    assert json_extent.sole_value(raw, 2, len(raw) - 2) is one


BIG = "x" * jsonrpc.PARTIAL_FROM_BYTES  # an answer this long is read by its head alone (parse_line)


@pytest.mark.parametrize(
    ("raw", "spliced"),
    [
        (b'{"jsonrpc":"2.0","id":5,"result":{"a":1}}', True),
        (b'{"jsonrpc": "2.0", "id": 5, "result": {"a": 1}}\n', True),
        (b'{"jsonrpc":"2.0","id":5,"error":{"code":-32000,"message":"no"}}', True),
        (b'{"jsonrpc":"2.0","id":5,"result":{"a":1},"id":5}', False),  # the id repeated after the result
        (b'{"jsonrpc":"2.0","id":5,"result":{"a":1},"\\u0069d":5}', False),
        (b'{"jsonrpc":"2.0","id":5,"result":{"a":1},"result":{"b":2}}', False),
        (b'{"jsonrpc":"2.0","id":5,"id":5,"result":{"a":1}}', False),  # before it
        (b'{"jsonrpc":"2.0","id":5,"result":{"a":1},"_meta":{}}', False),  # another member: encoded
        (b'{"id":5,"jsonrpc":"2.0","result":{"a":1}}', False),  # another layout
        (b'{"jsonrpc":"2.0","id":5,"result":{"t":"' + BIG.encode() + b'"}}', True),  # large: walked
        (b'{"jsonrpc":"2.0","id":5,"result":{"t":"' + BIG.encode() + b'"},"id":5}', False),
        (b'{"jsonrpc":"2.0","id":5,"result":{"t":"' + BIG.encode() + b'"},"result":{}}', False),
    ],
)
def test_a_member_s_answer_is_spliced_only_when_its_result_runs_to_its_end(
    raw: bytes, spliced: bool, decoders: str
) -> None:
    message = jsonrpc.parse_line(raw)
    assert isinstance(message, jsonrpc.Response) and message.id == 5
    assert (splice_id(raw, 42, message.partial) is not None) is spliced
    renamed = renamed_response(message, "client-7")
    out = renamed.raw if renamed.raw is not None else jsonrpc.encode(renamed.obj)
    pairs = json.loads(out, object_pairs_hook=lambda items: items)
    names = [name for name, _ in pairs]
    assert names.count("id") == 1 and dict(pairs)["id"] == "client-7"  # whatever the member wrote, one id: ours
    assert renamed.id == "client-7"
