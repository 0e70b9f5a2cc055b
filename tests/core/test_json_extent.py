"""core/json_extent.value_end: where a JSON object or array ends, against json's own reading of the same bytes."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from mcpgate.core.json_extent import value_end

LONG = "0123456789abcdef" * 8  # 128 bytes: past the pattern's short strings, found by bytes.find
MANY_ESCAPED = 'say "hi" ' * 40  # 80 escaped quotes: the rest of the string matched by one pattern


@pytest.mark.parametrize(
    ("data", "start", "expected"),
    [
        pytest.param(b"{}", 0, 2, id="empty-object"),
        pytest.param(b"[]", 0, 2, id="empty-array"),
        pytest.param(b'{"a":1}', 0, 7, id="one-member"),
        pytest.param(b'{"a":1},"b":{}}', 0, 7, id="member-after"),
        pytest.param(b'{"a":{"b":[1,{"c":[]}]}},"x":[]}', 0, 24, id="nested"),
        pytest.param(b'{"t":"}}"},"x":1}', 0, 10, id="closing-braces-in-a-string"),
        pytest.param(b'{"t":"{{[["},"x":1}', 0, 12, id="opening-brackets-in-a-string"),
        pytest.param(b'{"t":"a\\"}"},"x":1}', 0, 12, id="escaped-quote-then-brace"),
        pytest.param(b'{"t":"a\\\\"},"x":1}', 0, 11, id="escaped-backslash-then-quote"),
        pytest.param(b'{"t":"a\\\\\\"}"},"x":1}', 0, 14, id="three-backslashes-then-quote"),
        pytest.param(b'{"t":"\\\\\\\\"},"x":1}', 0, 12, id="two-escaped-backslashes"),
        pytest.param(b'{"t":"\\u007d"},"x":1}', 0, 14, id="unicode-escape"),
        pytest.param(b'{ "a" : [ 1 , 2 ] }\t,"x":1}', 0, 19, id="whitespace"),
        pytest.param(b'{\r\n"a"\r\n:\r\n{}\r\n}\r\n', 0, 16, id="cr-lf-whitespace"),
        pytest.param(b'xx{"a":1}yy', 2, 9, id="from-an-index"),
        pytest.param(b'{"' + LONG.encode() + b'":"' + LONG.encode() + b'"},1', 0, 263, id="long-strings"),
        pytest.param(b'{"t":"' + LONG.encode() + b'\\"}"},1', 0, 139, id="long-string-escaped-quote"),
        pytest.param(b'{"t":"' + LONG.encode() + b'\\\\"},1', 0, 138, id="long-string-escaped-backslash"),
        pytest.param('{"t":"é}ü"},1'.encode(), 0, 13, id="utf-8"),
        pytest.param(b'{"a":1', 0, None, id="never-closes"),
        pytest.param(b'{"a":"1}', 0, None, id="string-never-ends"),
        pytest.param(b'{"a":"' + LONG.encode() + b"}", 0, None, id="long-string-never-ends"),
        pytest.param(b'{"a":"\\"}', 0, None, id="escaped-quote-never-ends"),
        pytest.param(b'"a"', 0, None, id="not-an-object"),
        pytest.param(b" {}", 0, None, id="whitespace-first"),
        pytest.param(b"{}", 2, None, id="start-past-the-end"),
        pytest.param(b"{}", -1, None, id="negative-start"),
        pytest.param(b"", 0, None, id="empty"),
    ],
)
def test_value_end(data: bytes, start: int, expected: int | None) -> None:
    assert value_end(data, start, 1000) == expected
    if expected is not None:
        json.loads(data[start:expected])  # the bytes it names are one JSON value


@pytest.mark.parametrize(
    ("value", "steps", "found"),
    [
        pytest.param({"content": [{"type": "text", "text": LONG * 1000}]}, 12, True, id="one-long-text-few-steps"),
        pytest.param({"t": LONG * 1000 + '"'}, 4, True, id="long-text-one-escaped-quote"),
        pytest.param({"t": MANY_ESCAPED * 100}, 40, True, id="many-escaped-quotes-one-match"),
        pytest.param([[1]] * 100, 100, False, id="many-tokens-past-the-bound"),
        pytest.param([[1]] * 100, 300, True, id="many-tokens-within-the-bound"),
        pytest.param({"t": "\\" * 10 + '"'}, 4, False, id="a-run-of-backslashes-counts"),
        pytest.param({"t": "\\" * 10 + '"'}, 40, True, id="a-run-of-backslashes-within-the-bound"),
    ],
)
def test_steps_bound_the_walk(value: Any, steps: int, found: bool) -> None:
    data = json.dumps(value).encode() + b',"x":{}}'
    expected = len(json.dumps(value).encode())
    assert value_end(data, 0, steps) == (expected if found else None)
    assert value_end(data, 0, 100_000) == expected  # unbounded enough: always found


def _random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(8 if depth < 5 else 4)
    if kind == 0:
        return rng.choice([0, -1.5, 1e300, True, False, None])
    if kind in (1, 2, 3):
        alphabet = ['"', "\\", "{", "}", "[", "]", "a", " ", "\n", "é", "\u2028", ":", ","]
        return "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 3, 20, 70, 300])))
    if kind in (4, 5):
        return {_random_value(rng, 99) if rng.random() < 0.5 else "k": _random_value(rng, depth + 1) for _ in "abc"}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]


@pytest.mark.parametrize("seed", range(40))
def test_value_end_is_where_json_ends_the_value(seed: int) -> None:
    """Objects and arrays of every kind of string (quotes, backslashes, brackets, long and short), in either
    encoder's layout: the walk ends where json's decoder ends the value."""
    rng = random.Random(seed)
    for _ in range(20):
        value: Any = {"r": _random_value(rng, 0)} if rng.random() < 0.5 else [_random_value(rng, 0)]
        for text in (
            json.dumps(value),
            json.dumps(value, ensure_ascii=False, separators=(",", ":")),
            json.dumps(value, indent=1),
        ):
            encoded = text.encode()
            data = b'{"result":' + encoded + b',"_x":{"a":"}"}}'
            assert value_end(data, 10, 1_000_000) == 10 + len(encoded)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_a_string_read_by_pieces_ends_where_json_ends_it(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every escaped string read by pieces (from its first escaped quote), pieces so small that one ends inside
    every kind of escape (a pair of backslashes, an escaped quote, a backslash run of any length)."""
    from mcpgate.core import json_extent

    monkeypatch.setattr(json_extent, "_FOUND_ESCAPED", 0)
    monkeypatch.setattr(json_extent, "_CHUNK_FIRST", chunk)
    monkeypatch.setattr(json_extent, "_CHUNK_MOST", chunk * 2)
    rng = random.Random(chunk)
    for _ in range(200):
        text = "".join(rng.choice(['"', "\\", "a", "}", "\\\\", '\\"']) for _ in range(rng.randrange(1, 40)))
        value = {"t": '"' + text, "u": [text]}  # an escaped quote first: the rest read by pieces
        encoded = json.dumps(value).encode()
        assert value_end(encoded + b',"x":"}"}', 0, 100_000) == len(encoded), encoded
