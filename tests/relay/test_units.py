"""Pure pieces of the relay: error mapping, retry rules, the fallback rule, host line splitting."""

from __future__ import annotations

import email.utils
import json
import time

import pytest
import requests
import urllib3.exceptions

from mcpgate.core.framing import LineDecoder, LineTooLong
from mcpgate.core.sessions import is_valid_session_id
from mcpgate.relay import errors
from mcpgate.relay.http_client import HttpClient
from mcpgate.relay.pump import host_lines
from mcpgate.relay.transport import should_fall_back
from tests.support.relay import http_options

URL = "http://upstream.test/mcp"


def _raise_in_mapped(exc: BaseException) -> errors.RelayError:
    with pytest.raises(errors.RelayError) as caught, errors.mapped(URL):
        raise exc
    return caught.value


def _connection_error(reason: Exception) -> requests.exceptions.ConnectionError:
    return requests.exceptions.ConnectionError(urllib3.exceptions.MaxRetryError(None, URL, reason))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "exc, kind, maybe_sent",
    [
        (requests.exceptions.ConnectTimeout(), errors.NotSent, False),
        (
            _connection_error(urllib3.exceptions.NewConnectionError(None, "Connection refused")),  # type: ignore[arg-type]
            errors.NotSent,
            False,
        ),
        (
            _connection_error(urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError())),
            errors.MaybeSent,
            True,
        ),
        (requests.exceptions.ReadTimeout(), errors.MaybeSent, True),
        (urllib3.exceptions.ReadTimeoutError(None, URL, "read timed out"), errors.MaybeSent, True),  # type: ignore[arg-type]
        (urllib3.exceptions.ProtocolError("Connection broken"), errors.MaybeSent, True),
        (requests.exceptions.SSLError("certificate verify failed"), errors.ConfigError, False),
        (ConnectionResetError(104, "Connection reset by peer"), errors.MaybeSent, True),
        # What urllib3 raises itself when the relay sends on its pool with retries off.
        (
            urllib3.exceptions.NewConnectionError(None, "Connection refused"),  # type: ignore[arg-type]
            errors.NotSent,
            False,
        ),
        (
            urllib3.exceptions.NameResolutionError("nowhere.test", None, OSError("not known")),  # type: ignore[arg-type]
            errors.NotSent,
            False,
        ),
        (urllib3.exceptions.ConnectTimeoutError(None, "timed out"), errors.NotSent, False),
        (
            urllib3.exceptions.ProtocolError(
                "Connection aborted.", ConnectionResetError(104, "Connection reset by peer")
            ),
            errors.MaybeSent,
            True,
        ),
        (urllib3.exceptions.SSLError("certificate verify failed"), errors.ConfigError, False),
        (urllib3.exceptions.LocationParseError("http://[bad"), errors.ConfigError, False),
    ],
)
def test_exceptions_map_to_relay_errors(exc: BaseException, kind: type, maybe_sent: bool) -> None:
    mapped = _raise_in_mapped(exc)
    assert type(mapped) is kind and mapped.maybe_sent is maybe_sent
    assert URL in mapped.message


def test_refused_connection_is_named() -> None:
    mapped = _raise_in_mapped(
        _connection_error(
            urllib3.exceptions.NewConnectionError(
                None,
                "Failed to establish a new connection: [Errno 111] "  # type: ignore[arg-type]
                "Connection refused",
            )
        )
    )
    assert mapped.message.endswith("connection refused")


@pytest.mark.parametrize(
    "exc, says",
    [
        (
            urllib3.exceptions.NameResolutionError("nowhere.test", None, OSError("not known")),  # type: ignore[arg-type]
            "cannot reach upstream http://upstream.test/mcp: host name not found",
        ),
        (
            urllib3.exceptions.ConnectTimeoutError(None, "timed out"),
            "cannot reach upstream http://upstream.test/mcp: connection timed out",
        ),
        (
            urllib3.exceptions.ProtocolError(
                "Connection aborted.", ConnectionResetError(104, "Connection reset by peer")
            ),
            "connection to upstream http://upstream.test/mcp failed: connection reset",
        ),
        (
            urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead(3 bytes read, 7 more expected)"),
            "connection to upstream http://upstream.test/mcp broke mid-reply",
        ),
    ],
)
def test_urllib3_errors_say_what_happened(exc: BaseException, says: str) -> None:
    assert says in _raise_in_mapped(exc).message


def test_mapping_leaves_other_exceptions_alone() -> None:
    with pytest.raises(KeyError), errors.mapped(URL):
        raise KeyError("a bug, not a network error")


def test_status_errors_name_status_body_and_token_setting() -> None:
    e401 = errors.status_error(401, "Unauthorized", b"nope", token_set=False, www_authenticate='Bearer realm="x"')
    assert "MCPGATE_BEARER_TOKEN" in e401.message and "401" in e401.message
    assert e401.data["wwwAuthenticate"] == 'Bearer realm="x"'
    assert "was rejected" in errors.status_error(401, "", b"", token_set=True).message
    e500 = errors.status_error(500, "Internal Server Error", b"line one\n\n  line two " + b"x" * 500, False)
    assert "HTTP 500 Internal Server Error: line one line two" in e500.message
    assert len(e500.data["body"]) <= errors.EXCERPT_CHARS + 3 and e500.maybe_sent
    passthrough = errors.status_error(
        400, "Bad Request", b'{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"bad version"}}', False
    )
    assert passthrough.code == -32602 and "bad version" in passthrough.message and not passthrough.maybe_sent


def test_retry_after_forms() -> None:
    assert errors.retry_after_seconds("7") == 7.0
    assert errors.retry_after_seconds(None) is None and errors.retry_after_seconds("soon") is None
    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    assert 100 < (errors.retry_after_seconds(later) or 0) <= 121


def test_replay_safe_methods() -> None:
    for method in (
        "initialize",
        "ping",
        "tools/list",
        "resources/templates/list",
        "resources/read",
        "prompts/get",
        "completion/complete",
    ):
        assert errors.is_replay_safe(method), method
    for method in ("tools/call", "resources/subscribe", "logging/setLevel", "sampling/createMessage"):
        assert not errors.is_replay_safe(method), method


def test_backoff_grows_with_jitter_and_a_cap() -> None:
    http = HttpClient(http_options(backoff_base=1.0, backoff_cap=4.0))
    try:
        for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (9, 4.0)):
            delays = {http.backoff(attempt) for _ in range(20)}
            assert all(ceiling / 2 <= d <= ceiling for d in delays) and len(delays) > 1
    finally:
        http.close()


@pytest.mark.parametrize(
    "status, body, expected",
    [
        (405, b"Method Not Allowed", True),
        (405, b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Method Not Allowed"}}', True),
        (404, b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no such session"}}', False),
        (404, b"<html>not found</html>", True),
        (400, b"", True),
        (400, b'{"jsonrpc":"2.0","id":null,"error":{"code":-32022,"message":"unsupported"}}', False),
        (401, b"", False),
        (500, b"", False),
    ],
)
def test_fallback_rule(status: int, body: bytes, expected: bool) -> None:
    assert should_fall_back(status, body) is expected


def test_upstream_session_id_characters_and_no_length_cap() -> None:
    def upstream_id(value: str) -> bool:
        return is_valid_session_id(value, max_length=None)  # as relay/streamable.py checks an upstream's id

    assert upstream_id("a1-B2_c3.~!") and upstream_id("t" * 2000)  # a signed token can be long
    assert not upstream_id("") and not upstream_id("has space") and not upstream_id("tab\t")


def test_host_lines_oversized_line_costs_only_itself() -> None:
    decoder = LineDecoder(10)
    out = host_lines(decoder, b'{"a":1}\n' + b"x" * 30 + b'\n{"b":2}\n' + b"y" * 15)
    assert out[:2] == [b'{"a":1}', b'{"b":2}'] and isinstance(out[2], LineTooLong) and len(out) == 3
    assert host_lines(decoder, b"yyyy\n" + b'{"c":3}\n') == [b'{"c":3}']  # the rest of the long line is skipped
    assert host_lines(decoder, b'{"d":') == [] and decoder.finish() == b'{"d":'


def test_redact_hides_user_info_and_query() -> None:
    assert errors.redact("https://u:pw@host.example:8443/mcp?token=abc") == "https://host.example:8443/mcp?..."
    assert errors.redact("http://127.0.0.1:9000/sse") == "http://127.0.0.1:9000/sse"


def test_invalid_header_error_does_not_quote_the_value() -> None:
    mapped = _raise_in_mapped(
        requests.exceptions.InvalidHeader("Invalid return character in header value: 'Bearer sekrit\\n'")
    )
    assert "sekrit" not in mapped.message and not mapped.retryable


def test_only_a_host_request_refused_before_any_session_is_routine() -> None:
    def refused(status: int) -> errors.HttpStatusError:
        return errors.status_error(status, "", b"", token_set=False).refused_before_session()

    assert refused(400).routine and refused(404).routine and refused(405).routine
    for status in (401, 403, 407, 429, 500, 503):  # the relay's setup or the upstream's health: warnings
        assert not refused(status).routine, status
    assert not errors.status_error(400, "", b"", token_set=False).routine  # unmarked: a session existed
    assert not errors.NotSent("cannot reach upstream").routine


class _ChunkPipes:
    """A host's stdin as fixed chunks (then its end); nothing is written to its stdout here."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    def read(self) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    def write_all(self, data: bytes) -> None:
        raise AssertionError(f"nothing is written: {data!r}")

    def restore(self) -> None:
        pass


@pytest.mark.parametrize(
    ("chunks", "bare"),
    [
        pytest.param((b'{"jsonrpc":"2.0","method":"a"}\n{"jsonrpc":"2.0","id":1,"result":{}}\n',), [True, True]),
        pytest.param((b'{"jsonrpc":"2.0","method":"a"}\r\n{"jsonrpc":"2.0","method":"b"}\r\n',), [True, True]),
        pytest.param((b'{"jsonrpc":"2.0",\r"method":"a"}\n{"jsonrpc":"2.0","method":"b"}\n',), [False, False]),
        pytest.param((b'{"jsonrpc":"2.0","method":"a"}\n', b'{"jsonrpc":"2.0",\r"method":"b"}\n'), [True, False]),
        pytest.param((b'{"jsonrpc":"2.0","method":"a"}\n{"jsonrpc":"2.0","method":"last"}',), [True, True]),
    ],
)
def test_the_relay_hands_on_the_host_s_lines_with_the_splitter_s_word(
    chunks: tuple[bytes, ...], bare: list[bool]
) -> None:
    """A line of the host's the splitter vouched for (no CR: LineDecoder.bare) is its message's bare bytes, so it
    is sent upstream unsearched (jsonrpc.raw_bytes); parsed whole, as parse() reads it, whatever its size."""
    from mcpgate.core import jsonrpc
    from mcpgate.relay.pump import PumpOptions, Relay

    options = PumpOptions(1 << 20, 4, 4, cancel_filter=True, shutdown_grace=1.0)
    relay = Relay(lambda _sink: None, options)  # type: ignore[arg-type,return-value]  # no request is sent
    relay._read_loop(_ChunkPipes(*chunks))
    messages = []
    while not relay._oneway.empty():
        messages.append(relay._oneway.get_nowait()[0])
    assert [message.bare is message.raw for message in messages] == bare
    assert all(not getattr(message, "partial", False) for message in messages)
    assert all(json.loads(jsonrpc.raw_bytes(message)) == message.obj for message in messages)
