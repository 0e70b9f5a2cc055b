"""Header values of the 2026-07-28 transport: the Base64 sentinel, body comparison, x-mcp-header annotations.

Cases marked "conformance" are the ones the 0.2.0-alpha.12 suite sends (http-custom-header-server-validation,
http-header-validation, http-custom-headers, http-invalid-tool-headers); "spec" rows are the transport page's
encoding table.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core import header_values as hv


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        ("us-west1", "us-west1"),
        ("us west 1", "us west 1"),
        ("a\tb", "a\tb"),
        ("", ""),
        ("  echo  ", "echo"),  # conformance ServerAcceptsWhitespaceHeaderValue: OWS is not part of the value
        ("\techo\t", "echo"),
        ("=?base64?SGVsbG8=?=", "Hello"),  # conformance ServerAcceptsValidBase64
        ("=?base64?SGVsbG8sIOS4lueVjA==?=", "Hello, 世界"),  # spec
        ("=?base64?IHBhZGRlZCA=?=", " padded "),  # spec
        ("=?base64?bGluZTEKbGluZTI=?=", "line1\nline2"),  # spec
        ("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=", "=?base64?literal?="),  # spec
        ("  =?base64?SGVsbG8=?=  ", "Hello"),
        ("=?base64??=", ""),
        ("SGVsbG8=", "SGVsbG8="),  # conformance ServerLiteralMissingBase64Prefix
        ("=?base64?SGVsbG8=", "=?base64?SGVsbG8="),  # conformance ServerLiteralMissingBase64Suffix
        ("SGVsbG8=?=", "SGVsbG8=?="),
        ("=?BASE64?SGVsbG8=?=", "=?BASE64?SGVsbG8=?="),  # the markers are case-sensitive: a plain value
        ("=?base64?=", "=?base64?="),  # prefix and suffix overlap: too short to be the sentinel
        ("=?base64?SGVsbG8?=", None),  # conformance ServerRejectsInvalidBase64Padding
        ("=?base64?SGVs!!!bG8=?=", None),  # conformance ServerRejectsInvalidBase64Chars
        ("=?base64?SGVs bG8=?=", None),
        ("=?base64?SGVsbG8-?=", None),  # the URL-safe alphabet is not the sentinel's
        ("=?base64?literal?=", None),  # a plain value that looks like the sentinel is never plain
        ("=?base64?/w==?=", None),  # 0xff: not UTF-8
        ("=?base64?wCA=?=", None),  # an overlong UTF-8 sequence
        ("a\x00b", None),
        ("line1\nline2", None),
        ("line1\r\nline2", None),
        ("a\x7fb", None),
        ("caf\xe9", None),  # a raw byte >= 0x80 (WSGI hands headers over as latin-1)
        ("Hello, 世界", None),
    ],
)
def test_decode_header_value(raw: str, decoded: str | None) -> None:
    assert hv.decode_header_value(raw) == decoded


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("us-west1", "us-west1"),
        ("us west 1", "us west 1"),
        ("", ""),
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        (" padded ", "=?base64?IHBhZGRlZCA=?="),
        ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
        ("\tindented", "=?base64?CWluZGVudGVk?="),
        (" us-west1", "=?base64?IHVzLXdlc3Qx?="),
    ],
)
def test_encode_header_value_round_trips(value: str, encoded: str) -> None:
    assert hv.encode_header_value(value) == encoded
    assert hv.decode_header_value(encoded) == value


@pytest.mark.parametrize(
    ("decoded", "body", "equal"),
    [
        ("Hello", "Hello", True),
        ("hello", "Hello", False),  # values are case-sensitive
        ("", "", True),
        ("42", 42, True),
        ("42.0", 42, True),  # numerically, as the spec's note asks
        ("4.2e1", 42, True),
        ("042", 42, True),
        ("-7", -7, True),
        ("0", 0, True),
        ("43", 42, False),
        ("42.5", 42, False),
        ("abc", 42, False),
        ("", 42, False),
        ("NaN", 42, False),
        ("Infinity", 42, False),
        ("1_000", 1000, False),
        ("9007199254740993", 9007199254740993, True),  # exact beyond float precision
        ("9007199254740992", 9007199254740993, False),
        ("3.5", 3.5, True),
        ("42", "42", True),
        ("42.0", "42", False),  # a string is compared as a string
        ("true", True, True),
        ("false", False, True),
        ("True", True, False),
        ("1", True, False),
        ("0", False, False),
        ("false", True, False),
        ('{"a":1}', {"a": 1}, True),
    ],
)
def test_matches_body(decoded: str, body: Any, equal: bool) -> None:
    assert hv.matches_body(decoded, body) is equal


@pytest.mark.parametrize("path", [("region",), ("a", "b"), ("a.b",), ("a\\b", "c"), ("",), ("x.", ".y")])
def test_path_keys_round_trip(path: tuple[str, ...]) -> None:
    assert hv.key_path(hv.path_key(path)) == path


def test_path_key_of_a_top_level_name_is_the_name() -> None:
    assert hv.path_key(("region",)) == "region"
    assert hv.path_key(("opts", "level")) == "opts.level"


@pytest.mark.parametrize(
    ("arguments", "key", "value"),
    [
        ({"region": "x"}, "region", "x"),
        ({"region": None}, "region", None),
        ({}, "region", None),
        (None, "region", None),
        ({"opts": {"level": 3}}, "opts.level", 3),
        ({"opts": "flat"}, "opts.level", None),
        ({"a.b": 1}, "a\\.b", 1),
        ({"flag": False}, "flag", False),
    ],
)
def test_argument_value(arguments: object, key: str, value: Any) -> None:
    assert hv.argument_value(arguments, key) == value


def _tool(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **extra}


VALID_SCHEMAS: list[tuple[str, Any, dict[str, str]]] = [
    ("none", _tool({"q": {"type": "string"}}), {}),
    ("not a dict", None, {}),
    ("no properties", {"type": "object"}, {}),
    (
        "conformance valid_tool",
        _tool({"region": {"type": "string", "x-mcp-header": "Region"}}),
        {"region": "Mcp-Param-Region"},
    ),
    (
        "conformance http-custom-headers",
        _tool(
            {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "priority": {"type": "integer", "x-mcp-header": "Priority"},
                "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
                "method_val": {"type": "string", "x-mcp-header": "Method"},
                "float_val": {"type": "number"},
            }
        ),
        {
            "region": "Mcp-Param-Region",
            "priority": "Mcp-Param-Priority",
            "verbose": "Mcp-Param-Verbose",
            "method_val": "Mcp-Param-Method",
        },
    ),
    (
        "nested properties chain",
        _tool({"opts": {"type": "object", "properties": {"level": {"type": "integer", "x-mcp-header": "Level"}}}}),
        {"opts.level": "Mcp-Param-Level"},
    ),
    ("nullable type list", _tool({"r": {"type": ["string", "null"], "x-mcp-header": "R"}}), {"r": "Mcp-Param-R"}),
    (
        "token punctuation",
        _tool({"r": {"type": "string", "x-mcp-header": "A.b_c-d~1!"}}),
        {"r": "Mcp-Param-A.b_c-d~1!"},
    ),
    (
        "a property named x-mcp-header",
        _tool({"x-mcp-header": {"type": "string"}}),
        {},
    ),
    (
        "x-mcp-header inside data keywords",
        _tool({"r": {"type": "string", "default": {"x-mcp-header": "D"}, "enum": [{"x-mcp-header": "E"}]}}),
        {},
    ),
]


@pytest.mark.parametrize(
    ("schema", "expected"), [(s, e) for _, s, e in VALID_SCHEMAS], ids=[n for n, _, _ in VALID_SCHEMAS]
)
def test_tool_header_params_valid(schema: Any, expected: dict[str, str]) -> None:
    assert hv.tool_header_params(schema) == expected


INVALID_SCHEMAS: list[tuple[str, Any]] = [
    ("conformance invalid_empty_header", _tool({"value": {"type": "string", "x-mcp-header": ""}})),
    ("conformance invalid_object_header", _tool({"data": {"type": "object", "x-mcp-header": "Data"}})),
    (
        "conformance invalid_array_header",
        _tool({"items": {"type": "array", "items": {"type": "string"}, "x-mcp-header": "Items"}}),
    ),
    ("conformance invalid_null_header", _tool({"nil": {"type": "null", "x-mcp-header": "Nil"}})),
    ("conformance invalid_number_header", _tool({"score": {"type": "number", "x-mcp-header": "Score"}})),
    (
        "conformance invalid_duplicate_same_case",
        _tool({"f1": {"type": "string", "x-mcp-header": "Region"}, "f2": {"type": "string", "x-mcp-header": "Region"}}),
    ),
    (
        "conformance invalid_duplicate_diff_case",
        _tool(
            {"f1": {"type": "string", "x-mcp-header": "MyField"}, "f2": {"type": "string", "x-mcp-header": "myfield"}}
        ),
    ),
    ("conformance invalid_space_in_name", _tool({"value": {"type": "string", "x-mcp-header": "My Region"}})),
    ("conformance invalid_colon_in_name", _tool({"value": {"type": "string", "x-mcp-header": "Region:Primary"}})),
    ("conformance invalid_non_ascii_name", _tool({"value": {"type": "string", "x-mcp-header": "Région"}})),
    ("conformance invalid_control_char_name", _tool({"value": {"type": "string", "x-mcp-header": "Region\t1"}})),
    ("CR LF in name", _tool({"value": {"type": "string", "x-mcp-header": "Re\r\ngion"}})),
    ("non-string name", _tool({"value": {"type": "string", "x-mcp-header": 7}})),
    ("no type", _tool({"value": {"x-mcp-header": "V"}})),
    ("two primitive types", _tool({"value": {"type": ["string", "integer"], "x-mcp-header": "V"}})),
    ("on the root", {"type": "object", "x-mcp-header": "Root", "properties": {}}),
    ("under items", _tool({"l": {"type": "array", "items": {"type": "string", "x-mcp-header": "L"}}})),
    (
        "under items then properties",
        _tool({"l": {"type": "array", "items": {"properties": {"x": {"type": "string", "x-mcp-header": "X"}}}}}),
    ),
    ("under oneOf", _tool({"v": {"oneOf": [{"type": "string", "x-mcp-header": "V"}]}})),
    (
        "under anyOf at the root",
        {"type": "object", "anyOf": [{"properties": {"v": {"type": "string", "x-mcp-header": "V"}}}]},
    ),
    ("under $defs", _tool({"v": {"$ref": "#/$defs/v"}}, **{"$defs": {"v": {"type": "string", "x-mcp-header": "V"}}})),
    ("under if/then", _tool({}, **{"if": {"properties": {"v": {"type": "string", "x-mcp-header": "V"}}}})),
    (
        "a valid one beside an invalid one",
        _tool({"ok": {"type": "string", "x-mcp-header": "Ok"}, "bad": {"type": "number", "x-mcp-header": "Bad"}}),
    ),
]


@pytest.mark.parametrize("schema", [s for _, s in INVALID_SCHEMAS], ids=[n for n, _ in INVALID_SCHEMAS])
def test_tool_header_params_invalid(schema: Any) -> None:
    assert hv.tool_header_params(schema) is None
    with pytest.raises(hv.InvalidAnnotation):
        hv.header_annotations(schema)


@pytest.mark.parametrize(
    ("value", "shown"),
    [("abc", "'abc'"), ("a\nb", "'a\\nb'"), (42, "'42'"), (None, "'null'"), ("x" * 150, repr("x" * 100) + "...")],
)
def test_show(value: object, shown: str) -> None:
    assert hv.show(value) == shown


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("2026-07-28", "2026-07-28"),
        (" tools/list\t", "tools/list"),
        ("=?base64?dG9vbHMvbGlzdA==?=", "=?base64?dG9vbHMvbGlzdA==?="),  # taken as is
        ("", ""),
        ("tools/list\r\n", None),
        ("tools\x00list", None),
        ("tööls", None),
    ],
)
def test_plain_header_value(raw: str, value: str | None) -> None:
    assert hv.plain_header_value(raw) == value
