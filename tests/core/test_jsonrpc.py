"""JSON-RPC classification, ids, raw bytes and error builders."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    Batch,
    Invalid,
    Notification,
    Request,
    Response,
    encode,
    error_response,
    id_key,
    is_valid_id,
    parse,
    progress_token,
    raw_bytes,
)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


REQ = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


@pytest.mark.parametrize(
    ("obj", "kind", "msg_id"),
    [
        pytest.param(REQ, Request, 1, id="request-int-id"),
        pytest.param({**REQ, "id": "1"}, Request, "1", id="request-str-id"),
        pytest.param({**REQ, "id": ""}, Request, "", id="request-empty-str-id"),
        pytest.param({**REQ, "id": 0}, Request, 0, id="request-zero-id"),
        pytest.param({**REQ, "id": -7}, Request, -7, id="request-negative-id"),
        pytest.param({**REQ, "id": 2**70}, Request, 2**70, id="request-huge-int-id"),
        pytest.param({**REQ, "params": {}}, Request, 1, id="request-object-params"),
        pytest.param({**REQ, "params": []}, Request, 1, id="request-array-params"),
        pytest.param({"jsonrpc": "2.0", "method": "notifications/initialized"}, Notification, None, id="notification"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "result": {}}, Response, 1, id="response"),
        pytest.param({"jsonrpc": "2.0", "id": "a", "result": None}, Response, "a", id="response-null-result"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "x"}}, Response, 1, id="error"),
        pytest.param(
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "x"}},
            Response,
            None,
            id="error-null-id-allowed",
        ),
        pytest.param(
            {"jsonrpc": "2.0", "error": {"code": -32700, "message": "x"}},
            Response,
            None,
            id="error-missing-id-tolerated",
        ),
    ],
)
def test_classify_valid(obj: dict[str, Any], kind: type, msg_id: object) -> None:
    message = parse(dumps(obj))
    assert type(message) is kind
    if not isinstance(message, Notification):
        assert message.id == msg_id  # type: ignore[union-attr]
        assert type(message.id) is type(msg_id)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("data", "code", "msg_id"),
    [
        pytest.param(b"", PARSE_ERROR, None, id="empty"),
        pytest.param(b"{", PARSE_ERROR, None, id="truncated"),
        pytest.param(b"{'a':1}", PARSE_ERROR, None, id="single-quotes"),
        pytest.param(b"\xff\xfe\xfd", PARSE_ERROR, None, id="not-utf8"),
        pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":NaN}}', PARSE_ERROR, None, id="nan"),
        pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"m","params":[Infinity]}', PARSE_ERROR, None, id="inf"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, PARSE_ERROR, None, id="nesting-too-deep"),
        pytest.param(b"[]", INVALID_REQUEST, None, id="empty-batch"),
        pytest.param(b"1", INVALID_REQUEST, None, id="number"),
        pytest.param(b'"x"', INVALID_REQUEST, None, id="string"),
        pytest.param(b"null", INVALID_REQUEST, None, id="null"),
        pytest.param(dumps({"id": 1, "method": "m"}), INVALID_REQUEST, 1, id="no-jsonrpc"),
        pytest.param(dumps({**REQ, "jsonrpc": "1.0"}), INVALID_REQUEST, 1, id="jsonrpc-1.0"),
        pytest.param(dumps({**REQ, "jsonrpc": 2.0}), INVALID_REQUEST, 1, id="jsonrpc-number"),
        pytest.param(dumps({**REQ, "id": True}), INVALID_REQUEST, None, id="bool-id"),
        pytest.param(dumps({**REQ, "id": False}), INVALID_REQUEST, None, id="false-id"),
        pytest.param(dumps({**REQ, "id": 1.5}), INVALID_REQUEST, None, id="float-id"),
        pytest.param(dumps({**REQ, "id": 1.0}), INVALID_REQUEST, None, id="integral-float-id"),
        pytest.param(dumps({**REQ, "id": None}), INVALID_REQUEST, None, id="null-id-on-request"),
        pytest.param(dumps({**REQ, "id": [1]}), INVALID_REQUEST, None, id="array-id"),
        pytest.param(dumps({**REQ, "id": {"a": 1}}), INVALID_REQUEST, None, id="object-id"),
        pytest.param(dumps({**REQ, "method": 5}), INVALID_REQUEST, 1, id="method-not-string"),
        pytest.param(dumps({**REQ, "method": ""}), INVALID_REQUEST, 1, id="method-empty"),
        pytest.param(dumps({**REQ, "params": 3}), INVALID_REQUEST, 1, id="params-number"),
        pytest.param(dumps({**REQ, "params": "x"}), INVALID_REQUEST, 1, id="params-string"),
        pytest.param(dumps({**REQ, "params": True}), INVALID_REQUEST, 1, id="params-bool"),
        pytest.param(dumps({**REQ, "params": None}), INVALID_REQUEST, 1, id="params-null"),
        pytest.param(
            dumps({"jsonrpc": "2.0", "method": "n", "params": 1}),
            INVALID_REQUEST,
            None,
            id="notification-params-scalar",
        ),
        pytest.param(
            dumps({"jsonrpc": "2.0", "id": 1, "result": 1, "error": {"code": 1, "message": ""}}),
            INVALID_REQUEST,
            1,
            id="result-and-error",
        ),
        pytest.param(dumps({"jsonrpc": "2.0", "id": 1}), INVALID_REQUEST, 1, id="neither-result-nor-error"),
        pytest.param(
            dumps({"jsonrpc": "2.0", "id": None, "result": {}}), INVALID_REQUEST, None, id="null-id-on-result"
        ),
        pytest.param(
            dumps({"jsonrpc": "2.0", "id": True, "result": {}}), INVALID_REQUEST, None, id="bool-id-on-result"
        ),
        pytest.param(
            dumps({"jsonrpc": "2.0", "id": 1.5, "error": {"code": 1, "message": ""}}),
            INVALID_REQUEST,
            None,
            id="float-id-on-error",
        ),
        pytest.param(dumps({"jsonrpc": "2.0", "id": 1, "error": "boom"}), INVALID_REQUEST, 1, id="error-not-object"),
        pytest.param(
            dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": "1"}}), INVALID_REQUEST, 1, id="error-code-string"
        ),
        pytest.param(
            dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": True}}), INVALID_REQUEST, 1, id="error-code-bool"
        ),
        pytest.param(
            dumps({"jsonrpc": "2.0", "id": 1, "error": {"message": "x"}}), INVALID_REQUEST, 1, id="error-code-missing"
        ),
    ],
)
def test_classify_invalid(data: bytes, code: int, msg_id: object) -> None:
    message = parse(data)
    assert isinstance(message, Invalid)
    assert message.code == code
    assert message.id == msg_id
    assert message.reason


def test_parse_accepts_str() -> None:
    message = parse(json.dumps(REQ))
    assert isinstance(message, Request)
    assert message.raw is None
    assert raw_bytes(message) == encode(REQ)


@pytest.mark.parametrize(
    ("items", "kinds"),
    [
        pytest.param([REQ], [Request], id="one"),
        pytest.param(
            [REQ, {"jsonrpc": "2.0", "method": "n"}, {"jsonrpc": "2.0", "id": 2, "result": 0}],
            [Request, Notification, Response],
            id="mixed",
        ),
        pytest.param([1, REQ], [Invalid, Request], id="invalid-member-kept-in-place"),
        pytest.param([[REQ]], [Invalid], id="nested-batch-is-invalid-member"),
        pytest.param([{**REQ, "id": True}], [Invalid], id="bad-id-member"),
    ],
)
def test_batch(items: list[Any], kinds: list[type]) -> None:
    message = parse(dumps(items))
    assert isinstance(message, Batch)
    assert [type(item) for item in message.items] == kinds


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("1", 1, False),
        (1, 1, True),
        ("1", "1", True),
        (0, "", False),
        ("n", 0, False),
        (2**70, 2**70, True),
    ],
)
def test_id_key(a: jsonrpc.Id, b: jsonrpc.Id, same: bool) -> None:
    assert (id_key(a) == id_key(b)) is same
    assert (len({id_key(a), id_key(b)}) == 1) is same


def test_string_and_integer_ids_are_distinct_messages() -> None:
    as_str, as_int = parse(dumps({**REQ, "id": "1"})), parse(dumps(REQ))
    assert isinstance(as_str, Request) and isinstance(as_int, Request)
    assert as_str.id == "1" and as_int.id == 1
    assert id_key(as_str.id) != id_key(as_int.id)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (1, True),
        (0, True),
        (-1, True),
        ("x", True),
        ("", True),
        (True, False),
        (False, False),
        (1.0, False),
        (None, False),
        ([], False),
        ({}, False),
    ],
)
def test_is_valid_id(value: object, valid: bool) -> None:
    assert is_valid_id(value) is valid


# --- raw bytes -------------------------------------------------------------------------------

RAW_WITH_SPACES = b'{ "jsonrpc" : "2.0", "id" : 1, "method" : "m", "params" : {"k" : "\xe2\x80\xa8"} }'


@pytest.mark.parametrize(
    ("data", "keeps_raw"),
    [
        pytest.param(RAW_WITH_SPACES, True, id="odd-spacing-and-u2028-kept-verbatim"),
        pytest.param(b'{"jsonrpc":"2.0","method":"n"}', True, id="notification"),
        pytest.param(b'{"jsonrpc":"2.0","id":"x","result":{"a":1.50}}', True, id="response-float-format-kept"),
    ],
)
def test_raw_preserved(data: bytes, keeps_raw: bool) -> None:
    message = parse(data)
    assert isinstance(message, (Request, Notification, Response))
    if keeps_raw:
        assert message.raw is data
        assert raw_bytes(message) is data
    else:
        assert message.raw is None
        out = raw_bytes(message)
        out.decode("utf-8")
        assert json.loads(out) == message.obj


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b'{"jsonrpc":"2.0",\n"id":1,"method":"m"}', id="lf"),
        pytest.param(b'{"jsonrpc":"2.0",\r\n"id":1,"method":"m"}', id="crlf"),
        pytest.param(b'{"jsonrpc":"2.0",\r"id":1,"method":"m"}', id="cr"),
        pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"m"}\n', id="trailing-lf"),
        pytest.param(
            b'{\n  "jsonrpc": "2.0",\n  "id": 1,\n  "method": "m",\n  "params": {"s": "a\\nb"}\n}', id="pretty-printed"
        ),
    ],
)
def test_raw_bytes_reencodes_when_raw_has_a_line_end(data: bytes) -> None:
    message = parse(data)
    assert isinstance(message, Request)
    assert message.raw is data
    out = raw_bytes(message)
    assert b"\n" not in out and b"\r" not in out
    assert json.loads(out) == json.loads(data)


def test_raw_bytes_with_lone_surrogate_does_not_crash() -> None:
    message = parse(b'{"jsonrpc":"2.0",\n"id":1,"method":"m","params":{"s":"\\ud800x"}}')
    assert isinstance(message, Request)
    out = raw_bytes(message)
    out.decode("utf-8")
    assert json.loads(out) == message.obj


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"a": 1, "b": [1, 2]}, b'{"a":1,"b":[1,2]}'),
        ({"s": "\u2028é"}, '{"s":"\u2028é"}'.encode()),
        ({"s": "a\nb"}, b'{"s":"a\\nb"}'),
        ({"s": "\ud800"}, b'{"s":"\\ud800"}'),
    ],
)
def test_encode(obj: Any, expected: bytes) -> None:
    assert encode(obj) == expected


# --- builders ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            (1, -32601, "Method not found"),
            {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "Method not found"}},
        ),
        (("1", -32600, "bad"), {"jsonrpc": "2.0", "id": "1", "error": {"code": -32600, "message": "bad"}}),
        (
            (None, -32700, "Parse error"),
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}},
        ),
        (
            (7, -32001, "t", {"k": 1}),
            {"jsonrpc": "2.0", "id": 7, "error": {"code": -32001, "message": "t", "data": {"k": 1}}},
        ),
        ((7, -32001, "t", 0), {"jsonrpc": "2.0", "id": 7, "error": {"code": -32001, "message": "t", "data": 0}}),
    ],
)
def test_error_response_shape(args: tuple[Any, ...], expected: dict[str, Any]) -> None:
    built = error_response(*args)
    assert built == expected
    again = parse(encode(built))
    assert isinstance(again, Response) and again.is_error and again.id == args[0]


def test_is_error() -> None:
    ok = parse(b'{"jsonrpc":"2.0","id":1,"result":{}}')
    assert isinstance(ok, Response) and not ok.is_error


@pytest.mark.parametrize(
    ("params", "token"),
    [
        pytest.param({"_meta": {"progressToken": "abc"}}, "abc", id="string"),
        pytest.param({"_meta": {"progressToken": 5}}, 5, id="int"),
        pytest.param({"_meta": {"progressToken": 0}}, 0, id="zero"),
        pytest.param({"_meta": {"progressToken": True}}, None, id="bool"),
        pytest.param({"_meta": {"progressToken": 1.5}}, None, id="float"),
        pytest.param({"_meta": {"progressToken": None}}, None, id="null"),
        pytest.param({"_meta": {}}, None, id="no-token"),
        pytest.param({"_meta": "x"}, None, id="meta-not-object"),
        pytest.param({"progressToken": "top"}, None, id="token-outside-meta"),
        pytest.param({}, None, id="empty-params"),
        pytest.param(["_meta"], None, id="array-params"),
        pytest.param(None, None, id="no-params"),
    ],
)
def test_progress_token(params: Any, token: object) -> None:
    obj: dict[str, Any] = dict(REQ)
    if params is not None:
        obj["params"] = params
    message = parse(dumps(obj))
    assert isinstance(message, Request)
    found = progress_token(message)
    assert found == token
    assert type(found) is type(token)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xef\xbb\xbf" + b'{"jsonrpc":"2.0","method":"n"}', id="utf8-bom"),
        pytest.param('{"jsonrpc":"2.0","method":"n"}'.encode("utf-16-le"), id="utf16"),
        pytest.param('{"jsonrpc":"2.0","method":"n"}'.encode("utf-32"), id="utf32"),
        pytest.param(b'{"jsonrpc":"2.0","method":"\xff"}', id="invalid-utf8"),
    ],
)
def test_only_utf8_is_accepted(data: bytes) -> None:
    message = parse(data)
    assert isinstance(message, Invalid) and message.code == PARSE_ERROR


BIG = "x" * 300_000


@pytest.mark.parametrize(
    "line,expected_id,is_error",
    [
        pytest.param(json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"t": BIG}}).encode(), 7, False, id="int-id"),
        pytest.param(
            json.dumps({"jsonrpc": "2.0", "id": "7", "result": {"t": BIG}}).encode(),
            "7",
            False,
            id="string-id-stays-a-string",
        ),
        pytest.param(
            json.dumps({"jsonrpc": "2.0", "id": 'a"\\b', "error": {"code": 1, "message": BIG}}).encode(),
            'a"\\b',
            True,
            id="escaped-string-id-error",
        ),
        pytest.param(
            b'  { "jsonrpc" : "2.0" , "id" : -3 , "result" : "' + BIG.encode() + b'" }', -3, False, id="spaces"
        ),
        pytest.param(b'{"jsonrpc":"2.0","id":8,"result":"' + BIG.encode() + b'"} \t ', 8, False, id="trailing-spaces"),
    ],
)
def test_parse_line_classifies_a_large_response_from_its_head(line: bytes, expected_id: Any, is_error: bool) -> None:
    message = jsonrpc.parse_line(line)
    assert isinstance(message, Response) and message.partial
    assert message.id == expected_id and type(message.id) is type(expected_id)
    assert message.is_error is is_error
    assert raw_bytes(message) is line
    assert message.full() == json.loads(line)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(json.dumps({"id": 1, "jsonrpc": "2.0", "result": BIG}).encode(), id="other-key-order"),
        pytest.param(json.dumps({"jsonrpc": "2.0", "method": "n", "params": {"t": BIG}}).encode(), id="notification"),
        pytest.param(json.dumps({"jsonrpc": "2.0", "id": 1.5, "result": BIG}).encode(), id="float-id"),
        pytest.param(json.dumps({"jsonrpc": "2.0", "id": 1, "result": BIG}).encode()[:-1], id="truncated"),
        pytest.param(b'{"jsonrpc":"2.0","id":"\\q","result":"' + BIG.encode() + b'"}', id="bad-escape-in-id"),
    ],
)
def test_parse_line_parses_everything_else_whole(line: bytes) -> None:
    assert jsonrpc.parse_line(line) == parse(line)


def test_raw_bytes_of_a_large_response_with_a_cr_keeps_its_result() -> None:
    line = b'{"jsonrpc":"2.0","id":4,"result":{"t":\r"' + BIG.encode() + b'"}}'
    message = jsonrpc.parse_line(line)
    assert isinstance(message, Response) and message.partial
    assert json.loads(raw_bytes(message)) == {"jsonrpc": "2.0", "id": 4, "result": {"t": BIG}}


def test_parse_line_parses_small_lines_whole() -> None:
    line = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    message = jsonrpc.parse_line(line)
    assert isinstance(message, Response) and not message.partial and message.obj["result"] == {}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":"a","result":{"x":1}}', b'{"x":1}'),
        (b'{"jsonrpc":"2.0","id":7,"result":{}}\n', b"{}"),
        (b'{ "jsonrpc" : "2.0" , "id" : 7 , "result" : { "x" : [1] } }', b'{ "x" : [1] }'),
        (b'{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"m"}}', None),  # an error: not a result
        (b'{"jsonrpc":"2.0","id":7,"result":[1]}', None),  # not an object
        (b'{"id":7,"jsonrpc":"2.0","result":{}}', None),  # another member order: not this head
        (b'{"jsonrpc":"2.0","id":7,"result":{"x":1}', None),  # cut short
        (b'{"jsonrpc":"2.0","id":7,"result":\t{"x":{}} \r\n} \n', b'{"x":{}}'),  # whitespace on both sides
        (b'{"jsonrpc":"2.0","id":7,"result":{}}}', b"{}}"),  # as bytes.strip() finds it (not a JSON check)
        (b'{"jsonrpc":"2.0","id":7,"result":{}', None),  # the outer brace missing
        (b'{"jsonrpc":"2.0","id":7,"result":}', None),  # no value
        (b'{"jsonrpc":"2.0","id":7,"result": }', None),
        (b'{"jsonrpc":"2.0","id":7,"result":', None),
        (b'{"jsonrpc":"2.0","id":7,"result":  ', None),
        (b'{"jsonrpc":"2.0","id":7,"result":{ }', None),  # "{" and the outer brace
        (b'{"jsonrpc":"2.0","id":7,"result":x}', None),
    ],
)
def test_result_object(raw: bytes, expected: bytes | None) -> None:
    assert jsonrpc.result_object(raw) == expected


def test_encode_is_unchanged_by_a_value_it_could_not_encode() -> None:
    """The encoder is made once and kept: a failure leaves nothing behind for the next call."""
    with pytest.raises(TypeError):
        encode({"a": [1, {"b": object()}]})
    assert encode({"a": [1, {"b": 2}]}) == b'{"a":[1,{"b":2}]}'


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        pytest.param(b'{"jsonrpc":"2.0","id":1,"result":{}}', Response, id="response"),
        pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"m"}', Request, id="request"),
        pytest.param(b'{"jsonrpc":"2.0","method":"m"}', Notification, id="notification"),
        pytest.param(json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"t": BIG}}).encode(), Response, id="large"),
    ],
)
def test_parse_line_names_a_bare_line_s_bytes(line: bytes, kind: type) -> None:
    """A line the splitter vouched for is handed on as it is (raw_bytes searches it no more), while it stays the
    message's raw; parsed without the word, the message names none."""
    message = jsonrpc.parse_line(line, bare=True)
    assert isinstance(message, kind) and message.raw is line  # type: ignore[union-attr]
    assert message.bare is line  # type: ignore[union-attr]
    assert raw_bytes(message) is line  # type: ignore[arg-type]
    assert jsonrpc.parse_line(line).bare is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b"not json", id="invalid"),
        pytest.param(b'[{"jsonrpc":"2.0","method":"m"}]', id="batch"),
    ],
)
def test_parse_line_bare_leaves_invalid_lines_and_batches_alone(line: bytes) -> None:
    message = jsonrpc.parse_line(line, bare=True)
    assert isinstance(message, (jsonrpc.Invalid, jsonrpc.Batch))
    if isinstance(message, jsonrpc.Batch):
        assert all(getattr(item, "bare", None) is None for item in message.items)


def test_raw_bytes_searches_a_raw_that_replaced_the_bare_one() -> None:
    message = jsonrpc.parse_line(b'{"jsonrpc":"2.0","id":1,"method":"m"}', bare=True)
    assert isinstance(message, Request)
    message.raw = b'{"jsonrpc":"2.0",\r"id":1,"method":"m"}'  # rewritten after the parse (a spliced field)
    out = raw_bytes(message)
    assert b"\r" not in out and json.loads(out) == message.obj


@pytest.mark.parametrize(
    ("data", "value"),
    [
        pytest.param(b"{}", {}, id="no-whitespace"),
        pytest.param(b" \t\r\n{}", {}, id="leading"),
        pytest.param(b"{} \t\r\n", {}, id="trailing"),
        pytest.param(b"\n[1]\n", [1], id="both"),
        pytest.param(b"", None, id="empty"),
        pytest.param(b" ", None, id="only-whitespace"),
        pytest.param(b"{} x", None, id="extra-data"),
        pytest.param(b"{}{}", None, id="two-values"),
        pytest.param(b"\x0c{}", None, id="form-feed-is-not-json-whitespace"),
        pytest.param(b"{}\x0b", None, id="vertical-tab-after"),
    ],
)
def test_parse_whitespace_around_the_value(data: bytes, value: Any) -> None:
    message = parse(data)
    if value is None:
        assert isinstance(message, jsonrpc.Invalid) and message.code == jsonrpc.PARSE_ERROR
    else:
        assert not isinstance(message, jsonrpc.Invalid) or message.code != jsonrpc.PARSE_ERROR


# -- the usual answer's shortcuts: the same message as the whole reading ------------------------------------------


@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        pytest.param({"jsonrpc": "2.0", "id": 1, "result": {}}, Response, id="usual"),
        pytest.param({"result": [1], "id": "x", "jsonrpc": "2.0"}, Response, id="usual-other-order"),
        pytest.param({"jsonrpc": "2.0", "id": True, "result": {}}, Invalid, id="bool-id"),
        pytest.param({"jsonrpc": "2.0", "id": 1.0, "result": {}}, Invalid, id="float-id"),
        pytest.param({"jsonrpc": "2.0", "id": None, "result": {}}, Invalid, id="null-id"),
        pytest.param({"jsonrpc": "2.0", "iD": 1, "result": {}}, Invalid, id="no-id-member"),
        pytest.param({"jsonrpc": "2.0", "method": "m", "result": {}}, Notification, id="method-not-id"),
        pytest.param({"jsonrpc": "2.0", "error": {"code": 1}, "result": {}}, Invalid, id="error-and-result"),
        pytest.param({"jsonrpc": "1.0", "id": 1, "result": {}}, Invalid, id="other-version"),
        pytest.param({"jsonrpc": 2.0, "id": 1, "result": {}}, Invalid, id="version-a-number"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1}}, Invalid, id="four-members"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "method": "m"}, Request, id="request"),
    ],
)
def test_classify_of_three_members_is_the_whole_reading(obj: dict[str, Any], kind: type) -> None:
    """parse's and classify's shortcut for {"jsonrpc":"2.0","id":...,"result":...} gives what its every check gives: the
    same message for the usual answer, and any other dict still goes through every check."""
    data = json.dumps(obj).encode()
    message = parse(data)
    assert type(message) is kind
    assert message == jsonrpc.classify(json.loads(data), data)  # parse's own shortcut: classify's reading
    if kind is Response:
        assert message == Response(obj["id"], obj, data)


@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        pytest.param({"jsonrpc": "2.0", "id": 1, "method": "m", "params": {}}, Request, id="usual"),
        pytest.param({"params": {"a": 1}, "method": "m", "id": "x", "jsonrpc": "2.0"}, Request, id="other-order"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "method": "m", "params": {}, "extra": 1}, Request, id="extra"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "method": "m", "params": [1]}, Request, id="array-params"),
        pytest.param({"jsonrpc": "2.0", "method": "m", "params": {}}, Notification, id="no-id"),
        pytest.param({"jsonrpc": "2.0", "id": None, "method": "m", "params": {}}, Invalid, id="null-id"),
        pytest.param({"jsonrpc": "2.0", "id": True, "method": "m", "params": {}}, Invalid, id="bool-id"),
        pytest.param({"jsonrpc": "2.0", "id": 1.5, "method": "m", "params": {}}, Invalid, id="float-id"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "method": "", "params": {}}, Invalid, id="empty-method"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "method": 7, "params": {}}, Invalid, id="method-a-number"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "params": {}}, Invalid, id="no-method"),
        pytest.param({"jsonrpc": "1.0", "id": 1, "method": "m", "params": {}}, Invalid, id="other-version"),
        pytest.param({"id": 1, "method": "m", "params": {}}, Invalid, id="no-version"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "method": "m", "params": "p"}, Invalid, id="string-params"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "method": "m", "params": None}, Invalid, id="null-params"),
    ],
)
def test_classify_of_the_usual_request_is_the_whole_reading(obj: dict[str, Any], kind: type) -> None:
    """parse's and classify's shortcut for a request with object params gives what its every check gives
    (_classify_call)."""
    data = json.dumps(obj).encode()
    message = parse(data)
    assert type(message) is kind
    assert message == jsonrpc.classify(json.loads(data), data)  # parse's own shortcut: classify's reading
    usable = obj["id"] if jsonrpc.is_valid_id(obj.get("id")) else None
    if "method" in obj and obj.get("jsonrpc") == "2.0":
        assert message == jsonrpc._classify_call(obj, data, usable)
    if kind is Request:
        assert message == Request(obj["id"], obj["method"], obj["params"], obj, data)


def line_with_id(token: bytes, kind: bytes = b"result") -> bytes:
    return b'{"jsonrpc":"2.0","id":' + token + b',"' + kind + b'":{"t":"x"}}'


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(b"0", id="zero"),
        pytest.param(b"-0", id="minus-zero"),
        pytest.param(b"-17", id="negative"),
        pytest.param(b"123456789012345678", id="eighteen-digits"),
        pytest.param(b"1234567890123456789012345", id="more-digits"),
        pytest.param(b'""', id="empty-string"),
        pytest.param(b'"abc"', id="plain-string"),
        pytest.param('"é✓"'.encode(), id="utf8-string"),
        pytest.param(b'"a\\"b"', id="escaped-quote"),
        pytest.param(b'"\\u00e9"', id="unicode-escape"),
        pytest.param(b'"\\ud800"', id="lone-surrogate-escape"),
    ],
)
def test_an_id_read_from_the_head_is_the_whole_reading_s(token: bytes) -> None:
    for kind in (b"result", b"error"):
        line = line_with_id(token, kind)
        whole, head = parse(line), jsonrpc.parse_line(line, partial_from=0)
        assert isinstance(head, Response) and head.partial
        assert isinstance(whole, (Response, Invalid))  # an error's {"t"} is no error object: the id still counts
        assert head.id == whole.id and type(head.id) is type(whole.id)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(line_with_id(b'"\\q"'), id="bad-escape"),
        pytest.param(line_with_id(b'"\xff"'), id="not-utf8"),
        pytest.param(line_with_id(b'"\xed\xa0\x80"'), id="utf8-surrogate"),
        pytest.param(b'\x0b{"jsonrpc":"2.0","id":1,"result":{}}', id="vertical-tab-first"),
        pytest.param(b'{\x0c"jsonrpc":"2.0","id":1,"result":{}}', id="form-feed-in-head"),
        pytest.param(b'{"jsonrpc":"2.0","id":1,"result":{}}\x0c', id="form-feed-last"),
    ],
)
def test_what_the_head_cannot_vouch_for_is_parsed_whole(line: bytes) -> None:
    """JSON's whitespace is space, tab, CR and LF only: a form feed or a vertical tab (bytes' \\s) is no JSON, and
    an id the full parse would refuse, is left to it."""
    assert jsonrpc.parse_line(line, partial_from=0) == parse(line)
    assert isinstance(parse(line), Invalid)


@pytest.mark.parametrize(
    ("result", "vouched"),
    [
        pytest.param(b'"' + BIG.encode() + b'"', True, id="ascii"),
        pytest.param(b'"' + ("\u00e9\u2713" * 60000).encode() + b'"', True, id="utf8"),
        pytest.param(b'"' + BIG.encode() + b'\xff"', False, id="invalid-byte-last"),
        pytest.param(b'"\xc3' + BIG.encode() + b'"', False, id="cut-sequence-first"),
        pytest.param(b'"' + BIG.encode() + b'\xed\xa0\x80"', False, id="encoded-surrogate"),
        pytest.param(b'{"t":"' + BIG.encode() + b'","u":"\xc0\xaf"}', False, id="overlong"),
    ],
)
@pytest.mark.parametrize("msg_id", [5, "s-5"])
def test_a_large_response_is_vouched_for_by_its_head_only_when_its_bytes_are_utf8(
    result: bytes, vouched: bool, msg_id: int | str
) -> None:
    """A line parsed whole must be UTF-8; a large one classified by its head, whose result is forwarded as it is,
    must too: for one that is not, its id is answered with an Internal error (no invalid bytes go on, and the
    call waiting on that id is answered), where parsing it whole would only have refused the line."""
    line = b'{"jsonrpc":"2.0","id":' + json.dumps(msg_id).encode() + b',"result":' + result + b"}"
    message = jsonrpc.parse_line(line, bare=True)
    assert isinstance(message, Response) and message.id == msg_id
    if vouched:
        assert message.partial and message.full() == json.loads(line) and message.bare is line
    else:
        whole = parse(line)
        assert isinstance(whole, Invalid) and "utf-8" in whole.reason
        assert not message.partial and message.raw is None and message.bare is None and message.is_error
        assert json.loads(raw_bytes(message)) == {
            "jsonrpc": "2.0",
            "id": msg_id,
            "error": {"code": jsonrpc.INTERNAL_ERROR, "message": jsonrpc.NOT_UTF8},
        }


def test_partial_from_none_parses_a_large_response_whole() -> None:
    line = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"t": BIG}}).encode()
    message = jsonrpc.parse_line(line, partial_from=None, bare=True)
    assert isinstance(message, Response) and not message.partial and message.obj["result"] == {"t": BIG}
    assert message.bare is line


@pytest.mark.parametrize(
    "raw",
    [
        b'{"jsonrpc":"2.0","id":"a","result":{"x":1}}',
        b'{ "jsonrpc" : "2.0" , "id" : 7 , "result" : { "x" : [1] } }',
        b'{"jsonrpc":"2.0","id":7,"result":\t{"x":{}} \r\n} \n',
        b'{"jsonrpc":"2.0","id":7,"result":[1]}',
        b'{"jsonrpc":"2.0","id":7,"result":{ }',
    ],
)
def test_result_bounds_place_result_object(raw: bytes) -> None:
    bounds = jsonrpc.result_bounds(raw)
    expected = jsonrpc.result_object(raw)
    assert (bounds is None) is (expected is None)
    if bounds is not None:
        assert raw[bounds[0] : bounds[1]] == expected
