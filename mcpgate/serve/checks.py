"""Pure request checks for the HTTP endpoint: each returns None or the reason to refuse."""

from __future__ import annotations

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


def post_accept_problem(header: str | None) -> str | None:
    if accepts(header, JSON) and accepts(header, SSE):
        return None
    return f"Not Acceptable: the Accept header must list both {JSON} and {SSE}"


def get_accept_problem(header: str | None) -> str | None:
    return None if accepts(header, SSE) else f"Not Acceptable: the Accept header must list {SSE}"


def content_type_problem(header: str | None) -> str | None:
    if JSON in media_types(header):
        return None
    return f"Unsupported Media Type: the Content-Type must be {JSON}"
