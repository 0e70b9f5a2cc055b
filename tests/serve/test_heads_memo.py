"""The worker's memo of request heads with many sessions (serve/front/heads.py): a head is remembered without its
Mcp-Session-Id value, and a head answered from the memo with another session's value is exactly the head the full
reading gives of the same bytes, or the memo gives none and the line-by-line reading (which refuses) reads it: a
table of heads (valid and invalid, varied session ids, repeated fields, odd casing, obs-fold, absolute-form
targets) read after the memo learnt the same head with each other session id of the table."""

from __future__ import annotations

import itertools

import pytest

from mcpgate.serve.front import heads
from mcpgate.serve.front.heads import Head, Heads
from tests.serve.test_heads import line_by_line, parts

SESSION_IDS = [  # as sent (the value's bytes between the colon and the CRLF)
    b" 0123456789abcdef0123456789abcdef",
    b" 3f2a9c1e-77b0-4d5e-a1c2-9e8f7a6b5c4d",
    b"tight",
    b"",
    b"   ",
    b" \tpadded \t ",
    b" a b\tc",
    b" caf\xe9\xff",
    b" \x85edge\xa0",  # obs-text that str.strip() strips (the environ's value) but the fields keep
    b" a\x00b",  # refused: a control character
    b" a\x7fb",
    b" a\rb",
    b" a\nb",
    b" " + b"x" * 5000,  # past the memo's bytes: read line by line
    b" " + b"y" * 9000,  # past a field line's limit: refused
]

FORMS = {  # the block around the session field ({} is the value)
    "the Python SDK's spelling": b"Mcp-Session-Id:{}\r\n",
    "lower case": b"mcp-session-id:{}\r\n",
    "upper case (remembered by all its bytes)": b"MCP-SESSION-ID:{}\r\n",
    "first of two": b"Mcp-Session-Id:{}\r\nAccept: a\r\n",
    "repeated": b"Mcp-Session-Id:{}\r\nMcp-Session-Id: other\r\n",
    "repeated in another case": b"Mcp-Session-Id:{}\r\nmcp-session-id: other\r\n",
    "repeated, the other first": b"mcp-session-id: other\r\nMcp-Session-Id:{}\r\n",
    "obs-fold after it": b"Mcp-Session-Id:{}\r\n  folded\r\n",
    "obs-fold before it": b"X-A: a\r\n folded\r\nMcp-Session-Id:{}\r\n",
    "underscores (dropped)": b"Mcp_Session_Id:{}\r\n",
    "space before the colon": b"Mcp-Session-Id :{}\r\n",
    "a name that holds it": b"X-Mcp-Session-Id:{}\r\n",
    "in another field's value": b"X-Note: a\r\nX-B: Mcp-Session-Id:{}\r\n",
    "with a repeated Host": b"Mcp-Session-Id:{}\r\nHost: b\r\n",
    "with a bad Content-Length": b"Mcp-Session-Id:{}\r\nContent-Length: 1x\r\n",
    "an MCP POST": (
        b"Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
        b"Content-Length: 96\r\nMcp-Session-Id:{}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
    ),
    "chunked, continue, close": (
        b"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\nmcp-session-id:{}\r\nConnection: close\r\n"
    ),
    "a bare LF after it": b"Mcp-Session-Id:{}\n",
}
LINES = [b"POST /mcp HTTP/1.1\r\n", b"GET /mcp?x=1 HTTP/1.0\r\n", b"POST http://127.0.0.1:8000/mcp HTTP/1.1\r\n"]
HOSTS = [b"Host: 127.0.0.1:8000\r\n", b"", b"Host: a b\r\n"]


def head_of(line: bytes, host: bytes, form: bytes, value: bytes) -> bytes:
    return line + host + form.replace(b"{}", value) + b"\r\n"


def same(memo: Head | None, raw: bytes) -> None:
    """`memo`, what the memo gave for `raw`, is what the full reading gives (or none: the line-by-line way)."""
    full = line_by_line(raw)
    if memo is None:
        assert full is None or len(raw) > heads.BYTES, raw
        return
    assert full is not None, raw
    assert parts(memo) == parts(full), raw
    for name, _ in full.headers.fields:
        assert memo.headers.get(name) == full.headers.get(name), raw


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_a_remembered_head_with_another_session_id_is_the_full_readings(form: bytes) -> None:
    for line, host, learnt in itertools.product(LINES, HOSTS, SESSION_IDS):
        memo = Heads()
        same(memo.get(head_of(line, host, form, learnt)), head_of(line, host, form, learnt))
        for value in SESSION_IDS:
            raw = head_of(line, host, form, value)
            same(memo.get(raw), raw)
            same(memo.get(raw), raw)  # and again, from the memo


def test_one_head_is_remembered_for_every_session() -> None:
    memo = Heads(most=4)
    for number in range(1000):
        raw = head_of(LINES[0], HOSTS[0], FORMS["an MCP POST"], b" session-%d" % number)
        head = memo.get(raw)
        assert head is not None and head.items["HTTP_MCP_SESSION_ID"] == f"session-{number}"
        assert head.headers.get("mcp-session-id") == f"session-{number}"
    assert len(memo.shapes) == 1 and len(memo.known) == 4
    (kept,) = memo.shapes.values()
    assert kept.items["HTTP_MCP_SESSION_ID"] == "session-0"  # the remembered head is never changed


def test_the_environ_keys_follow_the_session() -> None:
    memo = Heads()
    raw = head_of(LINES[0], HOSTS[0], FORMS["an MCP POST"], b" one")
    kept = memo.get(raw)
    assert kept is not None and kept.kept
    kept.environ = {"SERVER_NAME": "s", "wsgi.input_terminated": True, **kept.items}  # as the connection merges
    other = memo.get(head_of(LINES[0], HOSTS[0], FORMS["an MCP POST"], b" two"))
    assert other is not None and other is not kept and other.kept
    assert other.environ == {"SERVER_NAME": "s", "wsgi.input_terminated": True, **other.items}
    assert other.environ["HTTP_MCP_SESSION_ID"] == "two" and kept.environ["HTTP_MCP_SESSION_ID"] == "one"
    assert memo.get(raw) is kept


def test_heads_with_no_single_session_field_are_remembered_by_all_their_bytes_only() -> None:
    memo = Heads()
    repeated = head_of(LINES[0], HOSTS[0], FORMS["repeated"], b" a")
    upper = head_of(LINES[0], HOSTS[0], FORMS["upper case (remembered by all its bytes)"], b" a")
    plain = head_of(LINES[0], HOSTS[0], b"", b"")
    for raw in (repeated, upper, plain):
        assert memo.get(raw) is not None and memo.get(raw) is memo.known[raw]
    assert list(memo.known) == [repeated, upper, plain] and not memo.shapes
    refused = head_of(LINES[0], HOSTS[0], FORMS["obs-fold after it"], b" a")
    assert memo.get(refused) is None and refused not in memo.known and not memo.shapes
