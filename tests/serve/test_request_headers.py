"""The worker's request-header parser: the same answers and limits as the standard library's."""

from __future__ import annotations

import io

import pytest

from mcpgate.serve.request_headers import MAX_HEADERS, MAX_LINE, RequestHeaders


def read(raw: bytes) -> RequestHeaders:
    return RequestHeaders.read(io.BytesIO(raw))


def test_fields_in_order_and_case_insensitive_lookup() -> None:
    headers = read(b"Host: a\r\nContent-Type: application/json\r\nX-Twice: 1\r\nx-twice: 2\r\n\r\nbody")
    assert headers.status == ""
    assert headers.get("host") == "a" and headers.getheader("CONTENT-TYPE") == "application/json"
    assert headers.typeheader == "application/json"
    assert headers.get("x-twice") == "1" and headers.get("missing", "d") == "d"
    assert list(headers.headers) == ["Host: a\r\n", "Content-Type: application/json\r\n", "X-Twice: 1\r\n",
                                     "x-twice: 2\r\n"]
    assert headers.items()[0] == ("Host", "a")


def test_values_are_stripped_and_latin1_decoded() -> None:
    headers = read(b"X-Name:   caf\xe9 \t\r\n\r\n")
    assert headers.get("x-name") == "caf\u00e9"


def test_folded_lines_join_the_previous_value() -> None:
    assert read(b"X-Long: a\r\n  b\r\n\tc\r\n\r\n").get("x-long") == "a b c"


def test_bare_lf_line_ends_are_accepted() -> None:
    assert read(b"Host: a\nAccept: b\n\n").get("accept") == "b"


def test_delitem() -> None:
    headers = read(b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
    del headers["content-length"]
    assert headers.get("content-length") is None
    with pytest.raises(KeyError):
        del headers["content-length"]


@pytest.mark.parametrize("raw,status", [
    (b"X: " + b"a" * MAX_LINE + b"\r\n\r\n", "Line too long"),
    (b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS + 1)) + b"\r\n", "Too many headers"),
    (b"no colon here\r\n\r\n", "Invalid header line"),
    (b": empty name\r\n\r\n", "Invalid header line"),
    (b"Bad Name : v\r\n\r\n", "Invalid header line"),
])
def test_invalid_headers_are_refused(raw: bytes, status: str) -> None:
    assert read(raw).status == status
