"""Raw HTTP for the tests: one request on its own connection (`send`, answered as a `Reply`), MCP messages in
both eras (initialize and a session, tools/call, 2026-07-28 requests with their _meta and headers), SSE bodies
read back, a call held in flight until its first progress, and named servers' config files and paths."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from mcpgate.core.wire import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    METHOD,
    NAME,
    PROTOCOL_VERSION,
    SESSION_ID,
)

if TYPE_CHECKING:
    from tests.support.gateway import Gateway

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MODERN_CHILD = f"{sys.executable} {FIXTURES / 'modern_server.py'}"  # MCPGATE_COMMAND of the SDK-written child


EXCERPT_CHARS = 600


class Reply(NamedTuple):
    """One HTTP answer; unpacks as (status, headers, body), and its repr explains a failed assertion."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def json(self) -> Any:
        """The body parsed as JSON; a body that is not JSON raises an error that shows the reply."""
        try:
            return json.loads(self.body)
        except ValueError:
            raise ValueError(f"not a JSON body: {self!r}") from None

    def __repr__(self) -> str:
        text = self.body.decode(errors="replace")
        excerpt = text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + f"... ({len(self.body)} bytes)"
        return f"<Reply {self.status} {self.content_type or '(no content-type)'} body={excerpt!r}>"


def send(
    host: str,
    port: int,
    method: str,
    path: str = "/mcp",
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
    source: str | None = None,
    chunked: bool = False,
) -> Reply:
    """One HTTP request on a new connection to host:port; `body` bytes as they are, anything else but None as
    JSON. `source`: the local address to send from (127.0.0.0/8 is all loopback: each address is another
    client); `chunked`: the body in 4 KiB chunks with no Content-Length (a streamed upload)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout, source_address=(source, 0) if source else None)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        if chunked and data is not None:
            pieces = (data[start : start + 4096] for start in range(0, len(data), 4096))
            conn.request(method, path, body=pieces, headers=headers or {}, encode_chunked=True)
        else:
            conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


class Served:
    """What answers HTTP at `address` (a gateway, HAProxy in front of a fleet): `request` sends it one request on a
    new connection, so open_session and the other helpers take any of them."""

    def address(self) -> tuple[str, int]:
        raise NotImplementedError

    def request(
        self,
        method: str,
        path: str = "/mcp",
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Reply:
        host, port = self.address()
        return send(host, port, method, path, body, headers, timeout)


ACCEPT = "application/json, text/event-stream"
HEADERS = {"Accept": ACCEPT, "Content-Type": "application/json"}


def init_body(version: str = "2025-11-25", msg_id: Any = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }


def open_session(
    gw: Gateway, version: str = "2025-11-25", headers: dict[str, str] | None = None, path: str | None = None
) -> dict[str, str]:
    """A session opened on `gw` (initialize, then initialized; at `path`, else the gateway's own) with `headers`
    besides the usual ones: the headers naming it, for its later requests."""
    sent = {**HEADERS, **(headers or {})}
    where = {} if path is None else {"path": path}
    reply = gw.request("POST", body=init_body(version), headers=sent, **where)
    assert reply.status == 200 and SESSION_ID.lower() in reply.headers, reply
    session_headers = {**sent, SESSION_ID: reply.headers[SESSION_ID.lower()]}
    if version >= "2025-06-18":
        session_headers[PROTOCOL_VERSION] = version
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    reply = gw.request("POST", body=initialized, headers=session_headers, **where)
    assert reply.status == 202, reply
    return session_headers


def call(name: str, args: dict[str, Any], msg_id: Any = 2) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": {"name": name, "arguments": args}}


def sse_messages(body: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body (a priming event, whose data is empty, carries none)."""
    out = []
    for block in body.decode().split("\n\n"):
        data = [line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")]
        if "".join(data):
            out.append(json.loads("\n".join(data)))
    return out


# -- 2026-07-28 requests by raw HTTP: per-request _meta, the request-metadata headers --

MODERN = "2026-07-28"


def modern_headers(method: str, name: str | None = None, version: str = MODERN) -> dict[str, str]:
    """The headers of a 2026-07-28 POST: MCP-Protocol-Version, Mcp-Method and (when given) Mcp-Name."""
    headers = {**HEADERS, PROTOCOL_VERSION: version, METHOD: method}
    return headers if name is None else {**headers, NAME: name}


def modern_body(
    msg_id: Any,
    method: str,
    params: dict[str, Any] | None = None,
    caps: dict[str, Any] | None = None,
    version: str = MODERN,
) -> dict[str, Any]:
    """A 2026-07-28 request: `params` plus the required _meta fields (clientCapabilities `caps`, default {})."""
    meta = {
        META_PROTOCOL_VERSION: version,
        META_CLIENT_CAPABILITIES: caps or {},
        META_CLIENT_INFO: {"name": "t", "version": "1"},
    }
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {**(params or {}), "_meta": meta}}


def post_modern(
    gw: Gateway, body: dict[str, Any], headers: dict[str, str] | None = None, timeout: float = 30.0
) -> Reply:
    """POST a 2026-07-28 message; headers default to those mirrored from the body (version, method, name/uri)."""
    if headers is None:
        params = body.get("params") or {}
        version = (params.get("_meta") or {}).get(META_PROTOCOL_VERSION, MODERN)
        name = params.get("uri" if body["method"] == "resources/read" else "name")
        headers = modern_headers(body["method"], name if isinstance(name, str) else None, version)
    return gw.request("POST", body=body, headers=headers, timeout=timeout)


def reply_messages(reply: Reply) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a reply, whether it is one JSON object or an SSE stream."""
    if reply.content_type.startswith("text/event-stream"):
        return sse_messages(reply.body)
    return [reply.json()]


def reply_message(reply: Reply) -> dict[str, Any]:
    """The last JSON-RPC message of a reply (the response, when the reply is an SSE stream)."""
    messages = reply_messages(reply)
    assert messages, reply
    return messages[-1]


# -- MCPGATE_CONFIG files (named servers) --

DEMO_ENTRY = {"command": sys.executable, "args": ["-m", "mcpgate.demo_server"]}  # the bundled demo server
NAMED_ENTRY = {"command": sys.executable, "args": [str(FIXTURES / "named_server.py")]}  # an SDK-written one


def write_config(path: Path, entries: dict[str, Any]) -> str:
    """An MCPGATE_CONFIG file of these mcpServers entries, renamed into place (a reload never reads half of
    it); its path."""
    staged = path.with_name(path.name + ".new")
    staged.write_text(json.dumps({"mcpServers": entries}))
    os.replace(staged, path)
    return str(path)


class NamedServer:
    """Requests to one named server's endpoint by default: `named(gw, name)` passes for a Gateway to the helpers
    above (open_session, ...), which post to `request`'s default path."""

    def __init__(self, gw: Gateway, name: str) -> None:
        self.gw, self.path = gw, f"/servers/{name}/mcp"

    def request(self, method: str, path: str | None = None, **kwargs: Any) -> Reply:
        return self.gw.request(method, path or self.path, **kwargs)


def named(gw: Gateway, name: str) -> Gateway:
    return cast("Gateway", NamedServer(gw, name))


@contextlib.contextmanager
def call_in_flight(
    host: str, port: int, body: dict[str, Any], headers: dict[str, str], path: str = "/mcp", timeout: float = 30.0
) -> Iterator[http.client.HTTPResponse]:
    """POST a slow call (`body`, its progressToken set here) on a connection of its own, and yield the response
    once its head arrived: the call's first progress has (the child is working on it). Read the rest in the block."""
    body = {**body, "params": {**body["params"], "_meta": {"progressToken": f"in-flight-{body['id']}"}}}
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        yield conn.getresponse()
    finally:
        conn.close()
