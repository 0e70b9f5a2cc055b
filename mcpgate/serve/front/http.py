"""A thin request/response pair over WSGI for the MCP endpoint.

The endpoint is the gateway's hot path; Flask's per-request machinery cost more
CPU than all of the gateway's own work per call (measured in bench/), so the
endpoint speaks WSGI through these two small types and Flask serves the rest.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from mcpgate.core import jsonrpc
from mcpgate.core.wire import environ_key

STATUS_TEXT = {
    200: "OK",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}

# the status lines of the statuses named above ("200 OK"); any other is its code alone
STATUS_LINES = {status: f"{status} {text}" for status, text in STATUS_TEXT.items()}

StartResponse = Callable[..., Any]
_KEYS: dict[str, str] = {}  # a header's name -> its environ key
_KEYS_MAX = 256


def header_text(value: Any) -> str | None:
    """An environ value as HttpRequest.header gives it: None, a str as it is, anything else as its str."""
    return value if value is None or isinstance(value, str) else str(value)


class HttpRequest:
    __slots__ = ("environ", "method")

    def __init__(self, environ: dict[str, Any]) -> None:
        self.environ = environ
        self.method: str = environ["REQUEST_METHOD"]

    def header(self, name: str) -> str | None:
        key = _KEYS.get(name)
        if key is None:
            key = environ_key(name)
            if len(_KEYS) < _KEYS_MAX:  # the names the code asks for: a few dozen
                _KEYS[name] = key
        value = self.environ.get(key)
        return value if value is None or isinstance(value, str) else str(value)

    def read_body(self, limit: int) -> bytes | None:
        """The body, or None when it is larger than `limit` bytes."""
        length = self.environ.get("CONTENT_LENGTH")
        stream = self.environ["wsgi.input"]
        if length:
            try:
                size = int(length)
            except ValueError:
                return None
            if size > limit or size < 0:
                return None
            return stream.read(size)  # type: ignore[no-any-return]
        body = stream.read(limit + 1)
        return None if len(body) > limit else body


class HttpResponse:
    __slots__ = ("body", "headers", "status")

    def __init__(
        self,
        status: int = 200,
        body: bytes | Iterator[bytes] = b"",
        content_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers: list[tuple[str, str]] = list(headers.items()) if headers else []
        if content_type:
            self.headers.append(("Content-Type", content_type))
        if isinstance(body, bytes):
            self.headers.append(("Content-Length", str(len(body))))

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        line = STATUS_LINES.get(self.status)
        start_response(line if line is not None else str(self.status), self.headers)
        body = self.body
        if environ.get("REQUEST_METHOD") == "HEAD":  # RFC 9110 9.3.2: the headers a GET would get, no content
            close = getattr(body, "close", None)
            if close is not None:
                close()
            return []
        if isinstance(body, bytes):
            return [body] if body else []
        return body


JSON_TYPE = ("Content-Type", "application/json")  # a JSON reply's (json_response; the worker knows it: writing.py)
_new = object.__new__


def json_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    """HttpResponse(status, body, "application/json", headers), made without its __init__ (every JSON reply)."""
    if type(body) is not bytes:
        return HttpResponse(status, body, "application/json", headers)
    made: HttpResponse = _new(HttpResponse)
    made.status, made.body = status, body
    length = ("Content-Length", str(len(body)))
    made.headers = [*headers.items(), JSON_TYPE, length] if headers else [JSON_TYPE, length]
    return made


def rpc_error(
    status: int, code: int, message: str, msg_id: Any = None, data: Any = None, headers: dict[str, str] | None = None
) -> HttpResponse:
    """An HTTP error whose body is a JSON-RPC error response."""
    return json_response(jsonrpc.encode(jsonrpc.error_response(msg_id, code, message, data)), status, headers)


class Refusal(Exception):
    """A request refused where the decision is made; the endpoint turns it into one HTTP error.

    It carries the HTTP status, the JSON-RPC error (code, message, the request's id when
    known, data) and any extra response headers (Allow, Retry-After, WWW-Authenticate).
    The root of serve's refusals: the named ones, and the table that turns the domain's
    exceptions into refusals at the endpoint, are serve/errors.py's.
    """

    def __init__(
        self,
        status: int,
        code: int,
        message: str,
        id: Any = None,
        data: Any = None,
        headers: dict[str, str] | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.code = code
        self.message = message
        self.id = id
        self.data = data
        self.headers = dict(headers) if headers else {}
        self.kind = kind  # a defence's refusal: its kind, counted where it is answered (mcpgate/observe/refusals.py)

    def response(self) -> HttpResponse:
        """The HTTP error: the status, the extra headers, a JSON-RPC error response as the body."""
        return rpc_error(self.status, self.code, self.message, self.id, self.data, self.headers)


class PageRefusal(Refusal):
    """A refusal on a path other than the MCP endpoints (the OAuth endpoints, the sign-in pages): its body is an
    OAuth error response (RFC 6749 5.2) rather than a JSON-RPC one."""

    def __init__(
        self, status: int, message: str, headers: dict[str, str] | None = None, kind: str | None = None
    ) -> None:
        super().__init__(status, jsonrpc.INVALID_REQUEST, message, headers=headers, kind=kind)

    def response(self) -> HttpResponse:
        body = {"error": "invalid_request", "error_description": self.message}
        return json_response(jsonrpc.encode(body), self.status, self.headers)


def buffer_body(environ: dict[str, Any], limit: int) -> None:
    """Read the body of a request for a page (any path but the MCP endpoints) before the page runs: at most
    `limit` bytes, chunked or not, else a 413 PageRefusal (the worker closes the connection on the unread rest).
    The page then reads it from memory, so no page can read more, whatever its parser does."""
    if not environ.get("CONTENT_LENGTH") and "HTTP_TRANSFER_ENCODING" not in environ:
        return  # no body
    body = HttpRequest(environ).read_body(limit)
    if body is None:
        raise PageRefusal(413, f"Payload Too Large: the body exceeds {limit} bytes", kind="body_too_large")
    environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
    environ.pop("HTTP_TRANSFER_ENCODING", None)
