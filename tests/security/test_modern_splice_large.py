"""A pooled child's large answer (past jsonrpc.PARTIAL_FROM_BYTES, read by its head alone) reaches its 2026-07-28
client as JSON holding exactly the child's result, whatever follows the result in the child's line.

serve/modern/answers.py splices a plain result's bytes into the client's answer without decoding it. A large
answer was taken to end with its result, as the SDKs write it: the result's bounds ran from the "{" after
"result": to the "}" before the message's last. A child whose line had a member after the result
(`"result":{...},"_x":{"a":1}}`) then had `{...},"_x":{"a":1` spliced as the result: the client's result lacked the
stamp's members, which went into "_x" instead (or the answer was no JSON at all). Its end is now found by walking
the result (core/json_extent); an answer with anything after the result is decoded whole and made again.

Each layout is played by tests/fixtures/splice_server.py through a real gateway and its pooled (legacy) child.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from mcpgate.core import json_extent, jsonrpc
from mcpgate.core.jsonrpc import PARTIAL_FROM_BYTES
from mcpgate.serve.modern import answers
from tests.security.test_modern_splice import awaiting
from tests.support import FIXTURES, HANG_GUARD, Gateway, lazy_gateways, modern_body, post_modern, reply_message

SPLICE = f"{sys.executable} {FIXTURES / 'splice_server.py'}"
ENVS = {"splice": {"MCPGATE_COMMAND": SPLICE, "MCPGATE_POOL_CHILDREN": "1", "MCPGATE_POOL_SPARES": "0"}}
SIZE = PARTIAL_FROM_BYTES + 40_000  # every answer below is read by its head alone
STAMPED = {"resultType", "_meta", "ttlMs", "cacheScope"}  # what the gateway may add to a result
HEAD = '{"jsonrpc":"2.0","id":{ID},"result":'
TEXT = '{"content":[{"type":"text","text":"{PAD}"}]}'

LAYOUTS = {
    # a member after the result
    "after-object": HEAD + TEXT + ',"_x":{"a":1}}',
    "after-nested-object": HEAD + TEXT + ',"_x":{"a":{"b":{}}}}',
    "after-array": HEAD + TEXT + ',"_x":[{"a":1}]}',
    "after-string-with-braces": HEAD + TEXT + r',"_x":"}\"{\"}"}',
    "after-object-with-braces-in-a-string": HEAD + TEXT + r',"_x":{"s":"}}\"}"}}',
    "after-empty-object": HEAD + TEXT + ',"_x":{}}',
    "after-number": HEAD + TEXT + ',"_x":1}',
    "after-escaped-text": HEAD + '{"content":[{"type":"text","text":"{ESC}"}]},"_x":{"a":"}"}}',
    "after-many-tokens": HEAD + '{"m":{MANY}},"_x":{"a":1}}',
    "result-again": HEAD + TEXT + ',"result":{"content":[],"isError":true}}',
    "id-again": HEAD + TEXT + ',"id":{ID}}',
    # nothing after the result (spliced, unless the walk gives up)
    "plain": HEAD + TEXT + "}",
    "braces-in-strings": HEAD
    + r'{"content":[{"type":"text","text":"{PAD}}}{\"}"}],"n":{"a":{"b":"}","c":"\\"}},"d":[]}}',
    "escaped-text": HEAD + '{"content":[{"type":"text","text":"{ESC}"}],"isError":false}}',
    "many-tokens": HEAD + '{"m":{MANY}}}',
    "result-last-member-is-an-object": HEAD + '{"t":"{PAD}","o":{"a":{}}}}',
    # whitespace
    "spaces": '{ "jsonrpc" : "2.0" , "id" : {ID} , "result" : { "content" : [ { "type" : "text" , "text" : "{PAD}" }'
    ' ] } , "_x" : { "a" : 1 } }',
    "tabs-and-crs": '{"jsonrpc":"2.0","id":{ID},"result":\t{"t":"{PAD}","o":{}}\r\t,\r"_x":{"a":{}}\t}\t',
    "spaces-nothing-after": '{ "jsonrpc":"2.0", "id":{ID}, "result": { "t" : "{PAD}", "o" : { } } \t } ',
    "cr-before-the-end": '{"jsonrpc":"2.0","id":{ID},"result":{"t":"{PAD}","o":{}}\r}\r\t',
}


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    with lazy_gateways(ENVS) as get:
        yield get


def child_line(template: str, request_id: Any) -> bytes:
    """What the fixture writes for this template (its filling, for the test's own reading)."""
    sys.path.insert(0, str(FIXTURES))
    try:
        import splice_server  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(FIXTURES))
    return str(splice_server.filled(template, request_id, SIZE)).encode()


def asked(gw: Gateway, template: str, client_id: Any) -> dict[str, Any]:
    body = modern_body(client_id, "tools/call", {"name": "line", "arguments": {"template": template, "size": SIZE}})
    reply = post_modern(gw, body, timeout=60.0)
    assert reply.status == 200, reply
    return reply_message(reply)  # json.loads of the answer: it is JSON


@pytest.mark.parametrize("client_id", [7, "c-1"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_client_gets_the_child_s_result_whatever_follows_it(
    gateways: Callable[[str], Gateway], layout: str, client_id: Any
) -> None:
    template = LAYOUTS[layout]
    line = child_line(template, "mcpgate-1")
    assert len(line) >= PARTIAL_FROM_BYTES  # read by its head alone
    child_result = json.loads(line)["result"]  # the child's result as any JSON reader takes it (the last, if two)
    answer = asked(gateways("splice"), template, client_id)
    assert answer["jsonrpc"] == "2.0" and answer["id"] == client_id and "error" not in answer
    assert set(answer) == {"jsonrpc", "id", "result"}  # no member of the child's besides its result
    result = answer["result"]
    assert "_x" not in result and set(result) - set(child_result) <= STAMPED
    assert {key: result[key] for key in child_result} == child_result
    assert result["resultType"] == "complete"  # the stamp is inside the result


@pytest.mark.parametrize(
    ("template", "why"),
    [
        pytest.param(HEAD + TEXT + ',"_x":}', answers.NOT_JSON, id="no-json-after-the-result"),
        pytest.param(HEAD + '{"a":{DEEP}}}', answers.NOT_JSON, id="nested-too-deep"),
        pytest.param(HEAD + '{"t":"{PAD}{BAD}"}}', jsonrpc.NOT_UTF8, id="not-utf8"),
    ],
)
def test_a_large_answer_that_cannot_be_read_is_answered_with_an_error(
    gateways: Callable[[str], Gateway], template: str, why: str
) -> None:
    """An answer read by its head alone that the walk cannot vouch for and json cannot read (no JSON after the
    result; nested past the decoder's depth, which a small answer's full parse refuses too), or whose bytes are
    not UTF-8: the client gets an error, not the child's bytes nor a call left waiting."""
    pool = ThreadPoolExecutor(1)  # a call left waiting fails the test instead of hanging it
    try:
        answer = pool.submit(asked, gateways("splice"), template, 9).result(timeout=HANG_GUARD)
    finally:
        pool.shutdown(wait=False)  # a hung request ends with its gateway, stopped after the module
    assert answer["id"] == 9 and answer["error"]["code"] == -32603 and answer["error"]["message"] == why
    # the child is still there for the next call
    assert asked(gateways("splice"), LAYOUTS["plain"], 10)["result"]["content"][0]["text"].startswith("0123")


# -- the shortcuts, against the full reading of the same bytes ----------------------------------------------------

LONG = "0123456789abcdef" * 512  # 8 KiB: a string json_extent reports as holding no quote
ANSWERS = [
    {"t": LONG},
    {"t": LONG, "resultType": "x"},
    {"resultType": LONG},
    {"_meta": {"a": LONG}, "b": LONG},
    {LONG: 1, "ttlMs": 2},
    {"a": [LONG, LONG], "cacheScope": "x"},
    {"a": [LONG] * 20, "z": {"_meta": 1}},  # more long strings than the walk reports
    {"t": LONG + '"ttlMs', "u": LONG},  # an escaped quote: searched
    {"t": 'x"resultType', "u": LONG},  # a name ending at a string's closing quote
    {"t": LONG + "\\", "u": "resultType"},
    {"t": LONG, "u": LONG + '"', "v": ["_meta"]},
]


@pytest.mark.parametrize("extra", ["", ',"_x":{"a":1}'])
@pytest.mark.parametrize("index", range(len(ANSWERS)))
def test_partial_bounds_and_names_are_the_full_reading_s(index: int, extra: str) -> None:
    """partial_bounds is the result's place as json reads it (None when a member follows), and names_stamped_around
    over the walk's quoteless strings answers as the pattern does over the whole result."""
    result = ANSWERS[index]
    for text in (json.dumps(result), json.dumps(result, indent=1)):
        raw = ('{"jsonrpc":"2.0","id":"mcpgate-1","result":' + text + extra + "}").encode()
        quoteless: list[tuple[int, int]] = []
        bounds = answers.partial_bounds(raw, "mcpgate-1", quoteless)
        if extra:
            assert bounds is None
            continue
        assert bounds is not None and json.loads(raw[bounds[0] : bounds[1]]) == result
        assert len(quoteless) <= json_extent.QUOTELESS_MOST
        assert all(b'"' not in raw[a:b] and raw[a - 1] == raw[b] == ord('"') for a, b in quoteless)
        expected = answers._STAMPED.search(raw, *bounds) is not None
        assert answers.names_stamped_around(raw, *bounds, quoteless) is expected
        assert answers.names_stamped(raw, *bounds) is expected


def test_partial_bounds_of_a_head_the_pattern_reads() -> None:
    """A head not laid out as the SDKs write it (spaces, an escaped id) is read by the pattern, then walked."""
    raw = b'{ "jsonrpc": "2.0", "id": "mcpgate\\u002d1", "result": {"t": "}"} }'
    assert answers.partial_bounds(raw, "mcpgate-1") == (jsonrpc.result_bounds(raw) or (0, 0))
    assert answers.partial_bounds(raw[:-2] + b', "_x": {} }', "mcpgate-1") is None


# far more tokens than the walk's bound; spaced, so the child's bytes differ from the compact encoding
MANY = ", ".join(f'"k{i}": [{i}, true, null, "v{i}"]' for i in range(20_000))


@pytest.mark.parametrize(
    ("after", "spliced"),
    [
        pytest.param("", True, id="nothing-after: decoded, then spliced"),
        pytest.param(',"_x":{"a":{}}', False, id="a-member-after: made again"),
        pytest.param(',"id":"other"', False, id="the-id-again: made again"),
    ],
)
def test_a_walk_given_up_leaves_the_decoding_to_say_whether_the_result_is_last(after: str, spliced: bool) -> None:
    """A large result of many small tokens stops the walk at its bound (UNKNOWN): the answer is decoded once, and
    with the three members only its result's bytes are spliced as they came (not encoded again); with anything
    else it is made again from the decoded answer. Either way the client's result is the child's, stamped."""
    raw = ('{"jsonrpc":"2.0","id":"MINTED","result":{' + MANY + "}" + after + "}").encode()
    assert len(raw) >= PARTIAL_FROM_BYTES
    _child, call = awaiting()
    raw = raw.replace(b"MINTED", call.minted.encode())
    assert answers.partial_bounds(raw, call.minted) is answers.UNKNOWN
    message = jsonrpc.parse_line(raw)
    assert isinstance(message, jsonrpc.Response) and message.partial
    data = answers.Answers("t", 0, lambda _call, result: result).of(call, message, None)
    answer = json.loads(data)
    assert answer["id"] == 7 and set(answer) == {"jsonrpc", "id", "result"}
    child_result = json.loads(raw)["result"]
    assert {key: answer["result"][key] for key in child_result} == child_result
    assert answer["result"]["resultType"] == "complete"
    assert (("{" + MANY).encode() in data) is spliced  # the child's bytes as they came, or encoded again
