"""The request-header parser of the gateway's worker (see mcpgate.serve.worker).

gevent.pywsgi reads request headers with the standard library's http.client.parse_headers,
which runs the email package's parser; on the gateway's hot path that was about a third of
the worker's CPU per call (py-spy, bench/). RequestHeaders reads the same lines with the same
limits and offers the small interface pywsgi and gunicorn use.
"""

from __future__ import annotations

from typing import Any, BinaryIO, Iterator

MAX_LINE = 65536  # as http.client
MAX_HEADERS = 100


class RequestHeaders:
    """Request header fields in arrival order; lookups are case-insensitive and return the first."""

    __slots__ = ("fields", "status")

    def __init__(self, fields: list[tuple[str, str]], status: str = "") -> None:
        self.fields = fields
        self.status = status  # non-empty: pywsgi answers 400

    @classmethod
    def read(cls, fp: BinaryIO) -> RequestHeaders:
        fields: list[tuple[str, str]] = []
        while True:
            line = fp.readline(MAX_LINE + 1)
            if len(line) > MAX_LINE:
                return cls([], "Line too long")
            if line in (b"\r\n", b"\n", b""):
                return cls(fields)
            text = line.decode("iso-8859-1").rstrip("\r\n")
            if text[:1] in (" ", "\t") and fields:  # an obsolete folded continuation line
                name, value = fields[-1]
                fields[-1] = (name, value + " " + text.strip())
                continue
            name, sep, value = text.partition(":")
            if not sep or not name or name != name.strip():
                return cls([], "Invalid header line")
            fields.append((name, value.strip()))
            if len(fields) > MAX_HEADERS:
                return cls([], "Too many headers")

    def get(self, name: str, default: Any = None) -> Any:
        wanted = name.lower()
        for key, value in self.fields:
            if key.lower() == wanted:
                return value
        return default

    getheader = get

    def __delitem__(self, name: str) -> None:
        wanted = name.lower()
        kept = [(key, value) for key, value in self.fields if key.lower() != wanted]
        if len(kept) == len(self.fields):
            raise KeyError(name)
        self.fields = kept

    def items(self) -> list[tuple[str, str]]:
        return list(self.fields)

    @property
    def headers(self) -> Iterator[str]:
        for key, value in self.fields:
            yield f"{key}: {value}\r\n"

    @property
    def typeheader(self) -> str | None:
        return self.get("content-type")  # type: ignore[no-any-return]
