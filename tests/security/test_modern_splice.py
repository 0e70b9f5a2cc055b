"""A pooled child's result spliced into the client's answer (serve/modern/answers.py) never carries a CR.

A 2026-07-28 answer goes out as one SSE `data:` line once the reply has turned into a stream (progress came first),
and a CR ends an SSE line: a child whose result held one (JSON allows it as whitespace between members) could then
write event fields of its own (an `id:` the client resumes from, an `event:`). A 2025 session's message with a CR
is encoded again (jsonrpc.raw_bytes); the spliced result must be too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.core import jsonrpc
from mcpgate.core.sse import encode_event
from mcpgate.serve.modern import answers
from mcpgate.serve.modern.calls import Call, new_call
from mcpgate.serve.modern.pooled_child import Era, PooledChild
from mcpgate.serve.sessions.stream import Delivery, Stream, StreamLimits
from tests.support.pooled import never_started

LIMITS = StreamLimits(messages=8, bytes=1 << 16, stall_timeout=5.0, replay_events=0, replay_bytes=0)


def pooled(era: Era = Era.LEGACY) -> PooledChild:
    """A pooled child of this era whose process is never started: what it "sends" is handed to it below."""
    return never_started(era)


def awaiting() -> tuple[PooledChild, Call]:
    """A pooled child with one tools/call (client id 7) waiting for its answer."""
    child = pooled()
    request = jsonrpc.parse(b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}')
    assert isinstance(request, jsonrpc.Request)
    call = new_call(request, "static", {}, Stream(LIMITS, expected=1))
    child.calls[call.minted] = call
    return child, call


def answered(raw: bytes, bare: bool = False) -> bytes:
    child, call = awaiting()
    child._on_message(jsonrpc.parse_line(raw.replace(b"MINTED", call.minted.encode()), bare=bare))
    delivered = call.stream.next(0)
    assert isinstance(delivered, Delivery)
    return delivered.data


def test_a_result_holding_a_cr_reaches_the_client_as_one_sse_line() -> None:
    data = answered(b'{"jsonrpc":"2.0","id":"MINTED","result":{"content":[],\r"isError":false\r}}')
    assert b"\r" not in data and b"\n" not in data
    event = encode_event(data)
    assert b"\r" not in event and event.count(b"\n") == 3 and event.endswith(b"}\n\n")  # event:, data:, blank
    answer = json.loads(data)
    assert answer["id"] == 7 and answer["result"]["isError"] is False and answer["result"]["content"] == []


def test_a_plain_result_is_still_spliced_with_the_stamp() -> None:
    data = answered(b'{"jsonrpc":"2.0","id":"MINTED","result":{"content":[{"type":"text","text":"hi"}]}}')
    assert data.startswith(b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}],')
    assert json.loads(data)["result"]["resultType"] == "complete"
    assert json.loads(answered(b'{"jsonrpc":"2.0","id":"MINTED","result":{ }}'))["result"] == {"resultType": "complete"}


def test_a_line_the_splitter_vouched_for_is_spliced_as_any_other() -> None:
    """A line LineDecoder.bare vouched for (no CR) is not searched for one again; its answer is the same."""
    raw = b'{"jsonrpc":"2.0","id":"MINTED","result":{"content":[{"type":"text","text":"hi"}]}}'
    assert answered(raw, bare=True) == answered(raw)
    assert answered(b'{"jsonrpc":"2.0","id":"MINTED","result":{ }}', bare=True) == answered(
        b'{"jsonrpc":"2.0","id":"MINTED","result":{ }}'
    )


def test_a_raw_with_a_cr_that_replaced_the_vouched_one_is_still_searched() -> None:
    """The word holds for the bytes it was said of: a raw put in their place (not the message's bare) is searched."""
    child, call = awaiting()
    message = jsonrpc.parse_line(b'{"jsonrpc":"2.0","id":"' + call.minted.encode() + b'","result":{}}', bare=True)
    assert isinstance(message, jsonrpc.Response)
    message.raw = b'{"jsonrpc":"2.0","id":"' + call.minted.encode() + b'","result":{"content":[],\r"isError":false}}'
    child._on_message(message)
    delivered = call.stream.next(0)
    assert isinstance(delivered, Delivery) and b"\r" not in delivered.data  # not spliced: made from the message
    assert json.loads(delivered.data)["result"] == {"resultType": "complete"}


BIG_TEXT = "0123456789abcdef" * 8192  # 128 KiB: a result walked from quote to quote
MANY = {f"k{i}": "v" for i in range(80)}  # more quotes than the walk takes


@pytest.mark.parametrize(
    "result",
    [
        pytest.param({"content": [{"type": "text", "text": BIG_TEXT}]}, id="big-text-no-name"),
        pytest.param({"resultType": "complete", "t": BIG_TEXT}, id="big-name-first"),
        pytest.param({"t": BIG_TEXT, "_meta": {}}, id="big-name-last"),
        pytest.param({"t": BIG_TEXT + '"ttlMs"'}, id="big-name-inside-a-string"),
        pytest.param({"t": BIG_TEXT + '"ttlM'}, id="big-name-cut"),
        pytest.param({**MANY, "t": BIG_TEXT, "cacheScope": 1}, id="big-name-past-the-walk"),
        pytest.param({**MANY, "t": BIG_TEXT}, id="big-many-quotes-no-name"),
        pytest.param({"t": "hi", "_meta": {}}, id="small-name"),
        pytest.param({"t": "hi"}, id="small-no-name"),
    ],
)
def test_names_stamped_finds_what_the_pattern_finds(result: dict[str, Any]) -> None:
    raw = json.dumps({"jsonrpc": "2.0", "id": "m", "result": result}).encode()
    bounds = jsonrpc.result_bounds(raw)
    assert bounds is not None
    expected = answers._STAMPED.search(raw, *bounds) is not None
    assert answers.names_stamped(raw, *bounds) is expected
    assert expected is bool({"resultType", "_meta", "ttlMs", "cacheScope"} & set(result)) or "ttlMs" in str(result)


def test_names_stamped_looks_within_its_bounds_only() -> None:
    raw = b'{"t":"' + BIG_TEXT.encode() + b'","_meta":{}}'
    at = raw.index(b'"_meta"')
    assert answers.names_stamped(raw, 0, at + len(b'"_meta"')) is True
    assert answers.names_stamped(raw, 0, at + 3) is False  # the name runs past the end
    assert answers.names_stamped(raw, at + 1, len(raw)) is False  # its opening quote is before the start


# -- an answer laid out as the SDKs write it is found without the pattern (answers.minted_bounds) -----------------

_LAYOUTS = [
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"content":[{"type":"text","text":"hi"}],"isError":false}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":{}}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"t":"}}"}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"_meta":{"x":1}}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1}} ',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1} }',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{ "a":1}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result": {"a":1}}',
    b'{"jsonrpc": "2.0", "id": "MINTED", "result": {"a": 1}}',
    b' {"jsonrpc":"2.0","id":"MINTED","result":{"a":1}}',
    b'{"id":"MINTED","jsonrpc":"2.0","result":{"a":1}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1},"extra":{}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":[{}]}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1}}}',
    b'{"jsonrpc":"2.0","id":"MINTED","error":{"code":1,"message":"x"}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{}',
    b'{"jsonrpc":"2.0","id":"MINTEDx","result":{"a":1}}',
    b'{"jsonrpc":"2.0","id":"xMINTED","result":{"a":1}}',
    b'{"jsonrpc":"2.0","id":"mcpgate\\u002d1","result":{"a":1}}',
    b'{"jsonrpc":"2.0","id":"mcpgate-1\\"","result":{"a":1}}',
]
_FOUND = {0, 1, 2, 3, 4, 7, 12, 14}  # compact heads ending in "}}": found without the pattern


@pytest.mark.parametrize("minted", ["mcpgate-1", "mcpgate-12345", "mcpgate-p7"])
@pytest.mark.parametrize("layout", range(len(_LAYOUTS)))
def test_minted_bounds_are_result_bounds_or_none(minted: str, layout: int) -> None:
    raw = _LAYOUTS[layout].replace(b"MINTED", minted.encode())
    found = answers.minted_bounds(raw, minted)
    assert found is None or found == jsonrpc.result_bounds(raw)
    assert (found is not None) is (layout in _FOUND)


def test_minted_ids_are_plain_in_a_json_string() -> None:
    """minted_bounds reads the id as its bytes: a minted id has no quote, backslash, control or non-ASCII character."""
    from mcpgate.serve.modern.calls import mint

    for kind in ("", "p"):
        minted = mint(kind)
        assert minted.isascii() and minted.isprintable() and '"' not in minted and "\\" not in minted


@pytest.mark.parametrize("layout", range(len(_LAYOUTS)))
def test_an_answer_is_the_same_with_or_without_the_minted_head(layout: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the client gets through minted_bounds is what result_bounds alone gave (or the decoded answer's)."""
    raw = _LAYOUTS[layout]
    message = jsonrpc.parse(raw)
    if not isinstance(message, jsonrpc.Response) or message.id != "MINTED":
        return  # not an answer to the call (the child's reader drops it, or it is another call's)
    fast = answered(raw, bare=True)
    monkeypatch.setattr(answers, "minted_bounds", lambda _raw, _minted: None)
    assert answered(raw, bare=True) == fast


def test_an_answer_whose_id_is_escaped_is_read_by_the_pattern() -> None:
    child, call = awaiting()
    escaped = call.minted.replace("-", "\\u002d").encode()
    raw = b'{"jsonrpc":"2.0","id":"' + escaped + b'","result":{"a":1}}'
    assert answers.minted_bounds(raw, call.minted) is None and jsonrpc.result_bounds(raw) is not None
    child._on_message(jsonrpc.parse_line(raw, bare=True))
    delivered = call.stream.next(0)
    assert isinstance(delivered, Delivery)
    assert delivered.data == b'{"jsonrpc":"2.0","id":7,"result":{"a":1,"resultType":"complete"}}'


@pytest.mark.parametrize("layout", range(len(_LAYOUTS)))
def test_the_client_gets_valid_json_holding_the_child_s_result(layout: int) -> None:
    """Spliced or made again, the client's answer is JSON whose result is the child's: a member after the result
    (`"result":{...},"extra":{}`) is not taken for part of it."""
    raw = _LAYOUTS[layout]
    message = jsonrpc.parse(raw)
    if not isinstance(message, jsonrpc.Response) or message.id != "MINTED" or message.is_error:
        return
    for bare in (False, True):
        answer = json.loads(answered(raw, bare=bare))
        assert answer["id"] == 7
        child_result = dict(message.obj["result"]) if isinstance(message.obj["result"], dict) else None
        if child_result is not None:
            assert {key: answer["result"][key] for key in child_result} == child_result


_OF_CASES = [  # (the child's answer, spliced as read, spliced as a line the splitter vouched for): as _spliced did
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"content":[{"type":"text","text":"hi"}],"isError":false}}', True, True),
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{}}', True, True),
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":"\\"ttlMs\\""}}', True, True),  # no quote after its name
    (b'{"id":"MINTED","jsonrpc":"2.0","result":{"a":[1,{"b":null}]}}', False, False),  # another layout: made again
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1,"_meta":{"x":1}}}', False, False),
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"resultType":"complete","a":1}}', False, False),
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":"ttlMs"}}', True, True),  # a value names no member
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":{"_meta":{},"ttlMs":1}}}', True, True),  # nor a nested one
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1,"result\\u0054ype":"x"}}', False, False),  # escaped: a member
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1,"\\u005fmeta":{"x":1}}}', False, False),
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1},"extra":{}}', False, False),
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1,\r"b":2}}', False, True),  # a vouched line is not searched
    (b'{"jsonrpc":"2.0","id":"MINTED","error":{"code":-32000,"message":"no"}}', False, False),
    (b'{"jsonrpc":"2.0","id":"MINTED","result":{"resultType":"input_required","requestState":"s"}}', False, False),
    (b'{"jsonrpc":"2.0","id":"MINTED","result":[1,2]}', False, False),
]
# a member repeated after the result (the decoding keeps the last): made again, never spliced
_REPEATED = [
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1},"id":"MINTED","result":{"b":2}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1},"result":{"b":2}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1},"r\\u0065sult":{"b":2}}',
    b'{"jsonrpc":"2.0","id":"MINTED","result":{"a":1},"jsonrpc":"2.0","result":{"b":2}}',
    b'{"jsonrpc": "2.0", "id": "MINTED", "result": {"a": 1}, "id": "MINTED", "result": {"b": 2}}',
]
_OF_CASES += [(raw, False, False) for raw in _REPEATED]


@pytest.mark.parametrize("raw", _REPEATED)
@pytest.mark.parametrize("bare", [False, True])
def test_an_answer_repeating_members_after_its_result_reaches_the_client_as_one_answer(raw: bytes, bare: bool) -> None:
    """A child repeating "id" or "result" after its result: the client gets one JSON answer under its own id with
    the result the decoding kept (the last), each member once, and the minted id nowhere."""
    child, call = awaiting()
    child._on_message(jsonrpc.parse_line(raw.replace(b"MINTED", call.minted.encode()), bare=bare))
    delivered = call.stream.next(0)
    assert isinstance(delivered, Delivery)
    pairs = json.loads(delivered.data, object_pairs_hook=lambda items: items)
    assert [key for key, _ in pairs] == ["jsonrpc", "id", "result"]
    assert dict(pairs)["id"] == 7 and dict(dict(pairs)["result"]) == {"b": 2, "resultType": "complete"}
    assert call.minted.encode() not in delivered.data


def test_a_large_answer_repeating_its_result_reaches_the_client_as_one_answer() -> None:
    """The same for an answer read by its head alone (past jsonrpc.PARTIAL_FROM_BYTES: its result walked)."""
    child, call = awaiting()
    big = b'{"t":"' + b"x" * jsonrpc.PARTIAL_FROM_BYTES + b'"}'
    raw = b'{"jsonrpc":"2.0","id":"MINTED","result":' + big + b',"id":"MINTED","result":{"b":2}}'
    message = jsonrpc.parse_line(raw.replace(b"MINTED", call.minted.encode()))
    assert isinstance(message, jsonrpc.Response) and message.partial
    child._on_message(message)
    delivered = call.stream.next(0)
    assert isinstance(delivered, Delivery)
    assert json.loads(delivered.data) == {"jsonrpc": "2.0", "id": 7, "result": {"b": 2, "resultType": "complete"}}


@pytest.mark.parametrize(("raw", "as_read", "vouched"), _OF_CASES)
def test_of_answers_as_made_again_and_splices_only_a_plain_result(
    raw: bytes, as_read: bool, vouched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers.of's answer (its splice in its own frame, or _made's) decodes to what _made, the full path, gives; a
    plain result's is spliced (_made not called), any other's is _made's."""
    child, call = awaiting()
    raw = raw.replace(b"MINTED", call.minted.encode())
    info = {"name": "kid", "version": "1"}
    made = json.loads(child.answers._made(call, jsonrpc.parse_line(raw), info))
    taken: list[bytes] = []
    real = answers.Answers._made

    def noted(self: answers.Answers, *args: Any) -> bytes:
        data = real(self, *args)
        taken.append(data)
        return data

    monkeypatch.setattr(answers.Answers, "_made", noted)
    for bare, spliced in ((False, as_read), (True, vouched)):
        taken.clear()
        data = child.answers.of(call, jsonrpc.parse_line(raw, bare=bare), info)
        assert json.loads(data) == made
        assert taken == ([] if spliced else [data])
