"""The WSGI environ of a request the gateway's worker read (mcpgate.serve.front.worker): the keys and values
gevent.pywsgi's WSGIHandler.get_environ and gunicorn's handler give, made straight from the header fields
RequestHeaders read (pywsgi formats each field back into a line and splits it again).

Header fields become HTTP_* keys as pywsgi makes them: "-" becomes "_", upper case, Content-Type and
Content-Length only as CONTENT_TYPE and CONTENT_LENGTH, a repeated field joined with "," (Cookie with "; "),
each value stripped. A field whose name holds "_" never gets here (RequestHeaders drops it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gevent.pywsgi import unquote_latin1

from mcpgate.serve.front.request_headers import RequestHeaders

_NOT_HTTP = frozenset(("CONTENT_TYPE", "CONTENT_LENGTH"))
_KEYS: dict[str, str | None] = {}  # a field name -> its environ key (None: not an HTTP_* key), for names seen
_MAX_KEYS = 1024  # names remembered (past it, a key is made each time)


def key_of(name: str) -> str | None:
    """The environ key of a header field's name (None: Content-Type and Content-Length, set apart)."""
    key = _KEYS.get(name, "")
    if key == "":
        cgi = name.replace("-", "_").upper()
        key = None if cgi in _NOT_HTTP else "HTTP_" + cgi
        if len(_KEYS) < _MAX_KEYS:
            _KEYS[name] = key
    return key


def http_items(fields: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The HTTP_* keys of the header fields and their values (the server's base environ holds none of them)."""
    items: dict[str, str] = {}
    keys = _KEYS
    for name, value in fields:
        key = keys.get(name, "")
        if key == "":
            key = key_of(name)
        if key is None:
            continue
        value = value.strip()
        if key in items:
            items[key] += ("; " if "COOKIE" in key else ",") + value
        else:
            items[key] = value
    return items


def request_items(method: str, target: str, version: str, headers: RequestHeaders) -> dict[str, Any]:
    """The environ's keys of a request's head: method, path, query, protocol, the header fields, RAW_URI."""
    items: dict[str, Any] = {"REQUEST_METHOD": method, "SCRIPT_NAME": ""}
    path, _, query = target.partition("?")
    items["PATH_INFO"] = unquote_latin1(path) if "%" in path else path
    items["QUERY_STRING"] = query
    content_type = headers.get("content-type")
    if content_type is not None:
        items["CONTENT_TYPE"] = content_type
    length = headers.get("content-length")
    if length:
        items["CONTENT_LENGTH"] = length
    items["SERVER_PROTOCOL"] = version
    items.update(http_items(headers.fields))
    items["RAW_URI"] = target  # gunicorn's handler adds it (and the socket, which the worker adds)
    return items


def connection_items(environ: dict[str, Any], address: Any) -> dict[str, Any]:
    """`environ` (the server's base, a copy of its own) with the keys of the client's address."""
    if isinstance(address, tuple):
        environ["REMOTE_ADDR"] = str(address[0])
        environ["REMOTE_PORT"] = str(address[1])
    return environ
