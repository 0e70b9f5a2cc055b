"""Pure request checks for the HTTP endpoint: each returns, or raises the Refusal that answers the request."""

from __future__ import annotations

from ..core.jsonrpc import INVALID_REQUEST
from .http import Refusal

JSON = "application/json"
SSE = "text/event-stream"


def media_types(header: str | None) -> set[str]:
    """The media ranges an Accept or Content-Type header names, without parameters."""
    if not header:
        return set()
    return {part.split(";", 1)[0].strip().lower() for part in header.split(",") if part.strip()}


def accepts(header: str | None, wanted: str) -> bool:
    types = media_types(header)
    major = wanted.split("/", 1)[0]
    return wanted in types or f"{major}/*" in types or "*/*" in types


def require_post_accept(header: str | None) -> None:
    if not (accepts(header, JSON) and accepts(header, SSE)):
        raise Refusal(406, INVALID_REQUEST, f"Not Acceptable: the Accept header must list both {JSON} and {SSE}")


def require_get_accept(header: str | None) -> None:
    if not accepts(header, SSE):
        raise Refusal(406, INVALID_REQUEST, f"Not Acceptable: the Accept header must list {SSE}")


def require_json_content(header: str | None) -> None:
    if JSON not in media_types(header):
        raise Refusal(415, INVALID_REQUEST, f"Unsupported Media Type: the Content-Type must be {JSON}")
