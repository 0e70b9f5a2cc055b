"""Pure request checks for the HTTP endpoint: each returns, or raises the Refusal that answers the request."""

from __future__ import annotations

from collections.abc import Collection
from typing import cast

from mcpgate.core.jsonrpc import INVALID_REQUEST
from mcpgate.serve.front import memo
from mcpgate.serve.front.http import HttpRequest, Refusal

JSON = "application/json"
SSE = "text/event-stream"


def media_types(header: str | None) -> frozenset[str]:
    """The media ranges an Accept or Content-Type header names, without parameters."""
    if not header:
        return frozenset()
    return _media_types(header)


@memo.remembered
def _media_types(header: str) -> frozenset[str]:
    return frozenset(part.split(";", 1)[0].strip().lower() for part in header.split(",") if part.strip())


def accepts(header: str | None, wanted: str) -> bool:
    return _accepts(media_types(header), wanted)


def _accepts(types: frozenset[str], wanted: str) -> bool:
    major = wanted.split("/", 1)[0]
    return wanted in types or f"{major}/*" in types or "*/*" in types


def require_post_accept(header: str | None) -> None:
    if header:  # none or empty: no media types, refused
        passed = ACCEPT_PASSED.get(header)  # the memo's table first: a client sends the same Accept each time
        if passed is None:
            passed = _post_accepted(header)
        if passed:
            return
    raise Refusal(406, INVALID_REQUEST, f"Not Acceptable: the Accept header must list both {JSON} and {SSE}")


@memo.remembered
def _post_accepted(header: str) -> bool:
    """Whether a POST's Accept lists both JSON and SSE (remembered: a client sends the same Accept each time)."""
    types = _media_types(header)
    return _accepts(types, JSON) and _accepts(types, SSE)


# The memo's table: a header found there as True passes require_post_accept (a caller may ask it first and call the
# check only on a miss: streamable.post). Asked for a header that is not there (None, too), it answers None.
ACCEPT_PASSED = cast("dict[str | None, bool]", memo.seen_by(_post_accepted))


def require_get_accept(header: str | None) -> None:
    if not accepts(header, SSE):
        raise Refusal(406, INVALID_REQUEST, f"Not Acceptable: the Accept header must list {SSE}")


def require_event_stream_accept(header: str | None) -> None:
    """The HTTP+SSE stream's GET must name text/event-stream itself (every SSE client does): a browser's <img>,
    <script> or link sends */* and must not open a session."""
    if SSE not in media_types(header):
        raise Refusal(406, INVALID_REQUEST, f"Not Acceptable: the Accept header must list {SSE}")


def normalized_origin(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


def require_not_cross_site(fetch_site: str | None, origin: str | None, listed: Collection[str]) -> None:
    """Sec-Fetch-Site: cross-site is a page of another site making the browser send this request. An <img>, a
    link or a form needs no CORS to do that, and would start a child with the user's own reach (a gateway on
    loopback without authentication); refused unless the page's Origin is `listed` (normalized_origin: the
    CORS origins, MCPGATE_ALLOWED_ORIGINS, the public URL's; "*" lists every page that sends an Origin)."""
    if (fetch_site or "").strip().lower() != "cross-site":
        return
    if origin is not None and ("*" in listed or normalized_origin(origin) in listed):
        return
    raise Refusal(
        403,
        INVALID_REQUEST,
        "Forbidden: a cross-site browser request (Sec-Fetch-Site: cross-site) from a page whose Origin is not "
        "listed (MCPGATE_CORS_ORIGINS)",
    )


def require_json_content(header: str | None) -> None:
    if header:
        passed = JSON_CONTENT_PASSED.get(header)  # as require_post_accept
        if passed is None:
            passed = _json_content(header)
        if passed:
            return
    raise Refusal(415, INVALID_REQUEST, f"Unsupported Media Type: the Content-Type must be {JSON}")


@memo.remembered
def _json_content(header: str) -> bool:
    """Whether a Content-Type names JSON (remembered, as _post_accepted)."""
    return JSON in _media_types(header)


JSON_CONTENT_PASSED = cast("dict[str | None, bool]", memo.seen_by(_json_content))  # as ACCEPT_PASSED, its check's


def read_body(request: HttpRequest, limit: int) -> bytes:
    """The request's body, refused (413) when it is larger than `limit` bytes."""
    body = request.read_body(limit)
    if body is None:
        raise too_large(limit)
    return body


def too_large(limit: int) -> Refusal:
    """read_body's refusal of a body larger than `limit` bytes (for a caller that read it itself)."""
    return Refusal(413, INVALID_REQUEST, f"Payload Too Large: the body exceeds {limit} bytes", kind="body_too_large")
