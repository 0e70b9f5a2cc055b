"""The JSON codec under jsonrpc.parse, parse_line and Response.full: msgspec's decoder first (as a process installs
it with jsonrpc.use_fast_decoder), json's for the rest.

Every decode must give what json's gave before msgspec came in: the same value of the same type, or the same
error with the same message. The reference below is the decode as it was (the bytes read as strict UTF-8, then
json's scanner with NaN and Infinity refused); each case, hand-picked or generated, is run through both. The cases
msgspec refuses and json reads (an escaped lone surrogate, 1e400, NaN for Response.full) and those where json's
message is the answer fail as soon as the fallback to json is gone. encode() stays json's (msgspec writes 1e16
for json's 1e+16, null for NaN, and takes sets, bytes and enums json refuses): its table holds it to json.dumps.
"""

from __future__ import annotations

import enum
import json
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import PARSE_ERROR, Batch, Invalid, Message, Response


@pytest.fixture(autouse=True)
def fast_decoder() -> Iterator[None]:
    jsonrpc.use_fast_decoder(msgspec.json.Decoder().decode)
    try:
        yield
    finally:
        jsonrpc.use_fast_decoder(None)


def reference_parse(data: bytes | str) -> Message:
    """jsonrpc.parse as it was before msgspec: strict UTF-8, then json's scanner (_decode)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        obj = jsonrpc._decode(text)
    except (ValueError, RecursionError) as exc:
        return Invalid(PARSE_ERROR, f"Parse error: {exc}")
    raw = data if isinstance(data, bytes) else None
    if isinstance(obj, list):
        if not obj:
            return Invalid(jsonrpc.INVALID_REQUEST, "Invalid Request: empty batch")
        return Batch([jsonrpc.classify(item) for item in obj])
    return jsonrpc.classify(obj, raw)


def reference_full(message: Response) -> Any:
    """Response.full as it was before msgspec: json.loads of the raw bytes."""
    if message.partial and message.raw is not None:
        decoded = json.loads(message.raw)
        if isinstance(decoded, dict):
            return decoded
    return message.obj


def canon(value: Any) -> Any:
    """A value with its types spelled out: 1 and 1.0 and True differ, -0.0 and 0.0 differ, NaN equals itself,
    a dict's members keep their order."""
    kind = type(value)
    if kind is dict:
        return ("dict", [(canon(k), canon(v)) for k, v in value.items()])
    if kind is list:
        return ("list", [canon(v) for v in value])
    if kind is float:
        return ("float", repr(value))
    return (kind.__name__, value)


def shape(message: Message) -> Any:
    """Everything a message says, for comparing two parses."""
    if isinstance(message, Invalid):
        return ("Invalid", message.code, message.reason, canon(message.id))
    if isinstance(message, Batch):
        return ("Batch", [shape(item) for item in message.items])
    return (type(message).__name__, canon(message.obj), message.raw, message.bare)


def outcome(call: Callable[[], Any]) -> Any:
    """A call's value (spelled out) or its error's type and message."""
    try:
        return ("value", canon(call()))
    except (ValueError, RecursionError) as exc:
        return ("error", type(exc).__name__, str(exc))


def same_as_before(data: bytes | str) -> None:
    assert shape(jsonrpc.parse(data)) == shape(reference_parse(data)), data
    if isinstance(data, bytes):
        assert shape(jsonrpc.parse_line(data, bare=True)) == shape(_reference_line(data)), data
        # Response.full decoded with json.loads (NaN and Infinity read, bytes' encoding detected)
        partial = Response(1, {"jsonrpc": "2.0", "id": 1, "result": None}, data, partial=True)
        assert outcome(lambda: partial.full()) == outcome(lambda: reference_full(partial)), data


def _reference_line(data: bytes) -> Message:
    message = reference_parse(data)
    if isinstance(message, (jsonrpc.Request, jsonrpc.Notification, Response)):
        message.bare = data
    return message


# Each case: what it is about. The table holds the texts where msgspec and json could part ways.
EDGES: list[tuple[str, bytes | str]] = [
    ("plain request", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}'),
    ("plain answer", b'{"jsonrpc":"2.0","id":"a","result":{"content":[{"type":"text","text":"hi"}]}}'),
    ("as str", '{"jsonrpc":"2.0","id":1,"method":"ping"}'),
    ("NaN refused", b'{"jsonrpc":"2.0","id":1,"result":NaN}'),
    ("Infinity refused", b'{"jsonrpc":"2.0","id":1,"result":Infinity}'),
    ("-Infinity refused", b'{"jsonrpc":"2.0","id":1,"result":-Infinity}'),
    ("1e400 is inf to json", b'{"jsonrpc":"2.0","id":1,"result":1e400}'),
    ("-1e400", b"[-1e400]"),
    ("just past the largest float", b"[1.7976931348623159e308]"),
    ("the largest float", b"[1.7976931348623157e308]"),
    ("underflow to 0.0", b"[1e-400, -1e-400]"),
    ("subnormals", b"[4.9e-324, 2e-324, 2.2250738585072011e-308, 2.2250738585072014e-308]"),
    (
        "halfway floats",
        b"[9007199254740993, 9007199254740993.0, 0.30000000000000004, 1.00000000000000011102230246251565]",
    ),
    ("many digits", b"[0.1000000000000000055511151231257827021181583404541015625, 123456789012345678901234567890.5]"),
    ("negative zero", b"[-0.0, -0, 0.0, 0, -0e0, -0.0e1, 0E-0]"),
    ("exponent forms", b"[1e5, 1E5, 1e+5, 1e-5, 1.5E+300, 1.0e-2]"),
    ("ints at 64 bits", b"[9223372036854775807, 9223372036854775808, -9223372036854775808, -9223372036854775809]"),
    ("ints past 64 bits (orjson makes a float)", b'{"a":18446744073709551616,"b":18446744073709551615}'),
    ("int of 4,300 digits", b"[" + b"7" * 4300 + b"]"),
    ("int of 4,301 digits", b"[" + b"7" * 4301 + b"]"),
    ("negative int of 4,300 digits", b"[-" + b"7" * 4300 + b"]"),
    ("float of 5,000 digits", b"[0." + b"3" * 5000 + b"]"),
    ("duplicate keys: last value, first place", b'{"a":1,"b":2,"a":3}'),
    ("duplicate key in a request", b'{"jsonrpc":"2.0","id":1,"id":"x","method":"m"}'),
    ("escaped NUL", b'["\\u0000", "a\\u0000b"]'),
    ("raw NUL in a string", b'["\x00"]'),
    ("raw control character", b'["\x1f"]'),
    ("raw tab in a string", b'["\t"]'),
    ("DEL is no control character", b'["\x7f"]'),
    ("escapes", b'["\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20AC"]'),
    ("surrogate pair", b'["\\ud83d\\ude00"]'),
    ("lone high surrogate", b'["\\ud800"]'),
    ("lone low surrogate", b'["\\udc00"]'),
    ("high surrogate, then a letter", b'["\\ud800\\u0041"]'),
    ("two high surrogates", b'["\\ud800\\ud800"]'),
    ("reversed pair", b'["\\ude00\\ud83d"]'),
    ("lone surrogate as a key", b'{"\\ud800":1}'),
    ("a raw surrogate in a str", '["\ud800"]'),
    ("UTF-8 of a surrogate", b'["\xed\xa0\x80"]'),
    ("invalid UTF-8", b'["\xff"]'),
    ("overlong UTF-8", b'["\xc0\x80"]'),
    ("past U+10FFFF", b'["\xf4\x90\x80\x80"]'),
    ("truncated UTF-8", b'["\xe2\x82"]'),
    ("non-ASCII text", '["été", "€", "😀", "\u2028"]'.encode()),
    ("BOM bytes", b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"m"}'),
    ("BOM in a str", '\ufeff{"jsonrpc":"2.0","id":1,"method":"m"}'),
    ("JSON whitespace around", b' \t\r\n{"jsonrpc" : "2.0" ,\n"id":1,"method":"m"}\r\n\t '),
    ("form feed before", b'\x0c{"jsonrpc":"2.0","id":1,"method":"m"}'),
    ("form feed after", b'{"jsonrpc":"2.0","id":1,"method":"m"}\x0c'),
    ("vertical tab inside", b'{"jsonrpc":"2.0",\x0b"id":1,"method":"m"}'),
    ("no-break space after", '{"jsonrpc":"2.0","id":1,"method":"m"}\u00a0'.encode()),
    ("line separator before", "\u2028[1]"),
    ("extra data", b'{"jsonrpc":"2.0","id":1,"method":"m"} {}'),
    ("extra value", b"1 2"),
    ("trailing garbage", b"[1]x"),
    ("trailing comma in array", b"[1,]"),
    ("trailing comma in object", b'{"a":1,}'),
    ("leading zero", b"[01]"),
    ("bare point", b"[1.]"),
    ("point first", b"[.5]"),
    ("plus sign", b"[+1]"),
    ("lone minus", b"[-]"),
    ("single quotes", b"['a']"),
    ("bad escape", b'["\\x41"]'),
    ("short unicode escape", b'["\\u12"]'),
    ("unterminated string", b'["abc'),
    ("empty", b""),
    ("only spaces", b"   "),
    ("truncated literal", b"[tru"),
    ("literals", b"[true, false, null]"),
    ("bare scalar", b"42"),
    ("empty batch", b"[]"),
    ("batch", b'[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"},3]'),
    ("key not a string", b"{1:2}"),
    ("bool id", b'{"jsonrpc":"2.0","id":true,"method":"m"}'),
    ("float id", b'{"jsonrpc":"2.0","id":1.0,"method":"m"}'),
    ("deep, shallow enough", b"[" * 500 + b"]" * 500),
    ("deep past the limit", b"[" * 5000 + b"]" * 5000),
    ("CR and LF inside", b'{"jsonrpc":"2.0",\r\n"id":1,"method":"m"}'),
]


@pytest.mark.parametrize("data", [pytest.param(data, id=name) for name, data in EDGES])
def test_each_edge_decodes_as_json_decoded_it(data: bytes | str) -> None:
    same_as_before(data)
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return
        same_as_before(text)


def test_the_fast_decoder_is_the_one_used() -> None:
    """A plain message never reaches json's scanner (else every table above passes with json alone)."""
    calls: list[str] = []
    original = jsonrpc._decode

    def counting(text: str) -> Any:
        calls.append(text)
        return original(text)

    jsonrpc._decode = counting
    try:
        assert isinstance(jsonrpc.parse(EDGES[0][1]), jsonrpc.Request)
        assert not calls
        assert isinstance(jsonrpc.parse(b'["\\ud800"]'), Batch) and calls  # msgspec refuses: json decides
    finally:
        jsonrpc._decode = original


def test_a_lowered_int_digit_limit_is_json_s_to_apply() -> None:
    """msgspec reads ints of up to 4,300 digits whatever the limit; json keeps sys.set_int_max_str_digits."""
    if not hasattr(sys, "set_int_max_str_digits"):
        pytest.skip("no int digit limit in this Python")
    before = sys.get_int_max_str_digits()
    try:
        for limit in (640, 1000, 0, 5000):
            sys.set_int_max_str_digits(limit)
            for digits in (639, 640, 641, 1001, 4300, 4301, 5001):
                same_as_before(b"[" + b"9" * digits + b"]")
    finally:
        sys.set_int_max_str_digits(before)


def _nested(depth: int, kind: int) -> bytes:
    if kind == 0:
        return b"[" * depth + b"]" * depth
    if kind == 1:
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b'[{"a":' * (depth // 2) + b"[" * (depth % 2) + b"]" * (depth % 2) + b"}]" * (depth // 2)


def _at_stack_depth(frames: int, call: Callable[[], None]) -> None:
    if frames:
        return _at_stack_depth(frames - 1, call)
    call()


@pytest.mark.parametrize("frames", [0, 37, 200])
def test_nesting_refused_where_json_refused_it(frames: int) -> None:
    """Both decoders spend the interpreter's recursion budget a level a container: around the deepest nesting json
    reads from here (it depends on the stack), each depth is read or refused as json did, by parse and by
    Response.full alike."""

    def sweep() -> None:
        limit = sys.getrecursionlimit()
        last = max(d for d in range(1, limit) if not _refused(reference_parse(b"[" * d + b"]" * d)))
        for depth in range(last - 8, last + 4):  # parse's edge, and Response.full's (a few frames deeper)
            for kind in (0, 1, 2):
                same_as_before(_nested(depth, kind))

    _at_stack_depth(frames, sweep)


def _refused(message: Message) -> bool:
    return isinstance(message, Invalid) and message.code == PARSE_ERROR


# The generated texts: values of every shape written with random whitespace, escapes and number forms, some
# broken afterwards (a byte dropped, added or changed, cut short, extra data, a BOM, a raw surrogate).
_WHITESPACE = [" ", "\t", "\n", "\r", "  ", "\r\n"]
_ODD_SPACE = ["\x0c", "\x0b", "\u00a0", "\u2028", "\u3000", "\x85"]
_ESCAPES = ['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"]
_SURROGATES = ["\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\ud83d\\ude00", "\\uD834\\uDD1E", "\\ud800\\u0041"]


class _Writer:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def space(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.75:
            return ""
        if roll < 0.995:
            return rng.choice(_WHITESPACE)
        return rng.choice(_ODD_SPACE)

    def char(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.55:
            return chr(rng.randrange(0x20, 0x7F)).replace("\\", "\\\\").replace('"', '\\"')
        if roll < 0.65:
            return rng.choice(_ESCAPES)
        if roll < 0.72:
            return f"\\u{rng.randrange(0, 0x10000):04x}" if rng.random() < 0.5 else f"\\u{rng.randrange(0x80):04X}"
        if roll < 0.77:
            return rng.choice(_SURROGATES)
        if roll < 0.87:
            return chr(rng.randrange(0x80, 0x800))
        if roll < 0.95:
            code = rng.randrange(0x800, 0x10000)
            return chr(code) if not 0xD800 <= code < 0xE000 else "\u20ac"
        if roll < 0.99:
            return chr(rng.randrange(0x10000, 0x110000))
        return chr(rng.randrange(0, 0x20))  # raw control character: refused

    def string(self) -> str:
        return '"' + "".join(self.char() for _ in range(self.rng.choice([0, 1, 2, 5, 12, 40]))) + '"'

    def digits(self, low: int, high: int) -> str:
        count = self.rng.randint(low, high)
        return "".join(self.rng.choice("0123456789") for _ in range(count))

    def number(self) -> str:
        rng = self.rng
        sign = "-" if rng.random() < 0.3 else ""
        roll = rng.random()
        if roll < 0.2:
            return sign + str(rng.randrange(0, 1000))
        if roll < 0.3:
            return sign + str(rng.choice([2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1, 10**19, 10**20]))
        if roll < 0.35:
            return sign + "1" + self.digits(18, 60 if rng.random() < 0.9 else 4400)
        whole = "0" if rng.random() < 0.3 else rng.choice("123456789") + self.digits(0, 20)
        fraction = "." + self.digits(1, 30) if rng.random() < 0.7 else ""
        exponent = ""
        if rng.random() < 0.5 or not fraction:
            scale = rng.choice([rng.randint(-30, 30), rng.randint(-340, -290), rng.randint(290, 330), 400, -400])
            mark = rng.choice(["e", "E"]) + rng.choice(["", "+" if scale >= 0 else ""])
            exponent = mark + str(scale)
        if rng.random() < 0.01:
            return rng.choice(["NaN", "Infinity", "-Infinity", "01", "1.", ".5", "+1", "1e", "-", "0x10"])
        return sign + whole + fraction + exponent

    def value(self, depth: int) -> str:
        rng = self.rng
        roll = rng.random() if depth < 6 else rng.random() * 0.6
        if roll < 0.25:
            return self.string()
        if roll < 0.5:
            return self.number()
        if roll < 0.6:
            return rng.choice(["true", "false", "null"])
        sp = self.space
        if roll < 0.8:
            items = [sp() + self.value(depth + 1) + sp() for _ in range(rng.randint(0, 5))]
            return "[" + ",".join(items) + sp() + "]"
        keys = [self.string() for _ in range(rng.randint(0, 5))]
        if keys and rng.random() < 0.2:
            keys.append(rng.choice(keys))  # a duplicate key
        members = [sp() + key + sp() + ":" + sp() + self.value(depth + 1) + sp() for key in keys]
        return "{" + ",".join(members) + sp() + "}"

    def message(self) -> str:
        """A JSON-RPC message now and then, so classification gets its share."""
        params = self.value(1)
        msg_id = self.rng.choice(["1", '"a"', "-0", "1.0", "null", self.number()])
        return '{"jsonrpc":"2.0","id":' + msg_id + ',"method":"tools/call","params":' + params + "}"

    def text(self) -> bytes | str:
        rng = self.rng
        text = self.space() + (self.message() if rng.random() < 0.3 else self.value(0)) + self.space()
        data = text.encode("utf-8", "surrogatepass")
        roll = rng.random()
        if roll < 0.04 and data:
            spot = rng.randrange(len(data))
            data = data[:spot] + data[spot + 1 :]
        elif roll < 0.08:
            spot = rng.randrange(len(data) + 1)
            data = data[:spot] + bytes([rng.randrange(256)]) + data[spot:]
        elif roll < 0.1 and data:
            data = data[: rng.randrange(len(data))]
        elif roll < 0.12:
            data += rng.choice([b" {}", b"x", b"]", b"\x00", b" 1"])
        elif roll < 0.13:
            data = b"\xef\xbb\xbf" + data
        if rng.random() < 0.25:
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                return data.decode("utf-8", "surrogateescape")  # a str holding lone surrogates
        return data


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_generated_texts_decode_as_json_decoded_them(seed: int) -> None:
    writer = _Writer(random.Random(seed))
    decoded = refused = 0
    for _ in range(1500):
        data = writer.text()
        same_as_before(data)
        if _refused(reference_parse(data)):
            refused += 1
        else:
            decoded += 1
    assert decoded > 300 and refused > 100, (decoded, refused)  # both sides of the fence were tried


def _floats(rng: random.Random) -> list[str]:
    """Number texts where rounding is hard: many digits, near halfway points, at the ends of the range."""
    texts = []
    for _ in range(4000):
        exact = rng.getrandbits(53) * 2.0 ** rng.randint(-1100, 970)
        shortest = repr(exact)
        texts.append(shortest)
        texts.append(f"{exact:.25e}")  # past the 17 digits that tell doubles apart
        texts.append(f"{exact:.16e}")
        mantissa = "".join(rng.choice("0123456789") for _ in range(rng.randint(15, 40)))
        texts.append("0." + mantissa + "e" + str(rng.randint(-330, 310)))
    return [text for text in texts if "inf" not in text and "nan" not in text]


def test_floats_round_as_json_rounds_them() -> None:
    rng = random.Random(7)
    texts = _floats(rng)
    for start in range(0, len(texts), 200):
        chunk = ("[" + ",".join(texts[start : start + 200]) + "]").encode()
        same_as_before(chunk)


class _Colour(enum.Enum):
    RED = 1


class _Level(enum.IntEnum):
    HIGH = 3


ENCODED: list[tuple[str, Any]] = [
    ("answer", {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "été €😀"}]}}),
    ("exponent float (msgspec: 1e16)", {"v": [1e16, 1e-7, 2.5e-05, 1.5e300, 0.1, -0.0, 5e-324]}),
    ("NaN and infinities (msgspec: null)", [float("nan"), float("inf"), float("-inf")]),
    ("non-str keys", {1: "a", 2.5: "b", False: "c", None: "d"}),
    ("lone surrogate", {"a": "\ud800", "\udc00": 1}),
    ("control characters and separators", '\x00\x1f\x7f\u2028\u2029"\\/'),
    ("big ints", [2**64, -(2**70), 10**100]),
    ("int enum", [_Level.HIGH]),
    ("tuple", (1, "a")),
]


@pytest.mark.parametrize("obj", [pytest.param(obj, id=name) for name, obj in ENCODED])
def test_encode_writes_json_s_bytes(obj: Any) -> None:
    expected = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    try:
        wanted = expected.encode("utf-8")
    except UnicodeEncodeError:
        wanted = json.dumps(obj, separators=(",", ":")).encode("ascii")
    assert jsonrpc.encode(obj) == wanted


@pytest.mark.parametrize("obj", [{1, 2}, b"ab", _Colour.RED, {"a": {1}}])
def test_encode_refuses_what_json_refuses(obj: Any) -> None:
    """msgspec writes sets, bytes (base64) and enums; json refuses them, and so does encode."""
    with pytest.raises(TypeError):
        jsonrpc.encode(obj)


def test_generated_values_encode_as_json_writes_them() -> None:
    writer = _Writer(random.Random(11))
    written = 0
    for _ in range(1500):
        data = writer.text()
        try:
            value = json.loads(data)
        except (ValueError, RecursionError):
            continue
        test_encode_writes_json_s_bytes(value)
        written += 1
    assert written > 300
