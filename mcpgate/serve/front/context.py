"""What the gateway notes about one request as it goes through: a RequestContext, the only thing it keeps in the
WSGI environ (under CONTEXT), read and made with `context(environ)`.

Filled in this order: the worker's probe of the client's connection (`peer_gone`); the guard's principal, or the
principal a forwarding instance signed (then `forwarded`: it is never forwarded again); the published server the
Endpoint routed it to (`server`: metrics count only such requests); the JSON-RPC message its handler parsed from
the body (`message`: the metrics' method label, and the bytes a forward sends).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcpgate.core.jsonrpc import Message

if TYPE_CHECKING:  # only the OAuth modes make one (a plain worker imports no OAuth module)
    from mcpgate.serve.oauth.identity import Identity

CONTEXT = "mcpgate.request"  # the environ key of the request's RequestContext

PeerGone = Callable[[], bool]  # "has the client closed its connection?" (never blocks)


@dataclass(slots=True)
class RequestContext:
    peer_gone: PeerGone | None = None  # the worker's probe (None: served by another WSGI server)
    principal: str | None = None  # None: no authenticator named one (the no-auth and static-token case)
    identity: Identity | None = None  # the OAuth token's, as verified (views read its subject, groups, scopes)
    forwarded: bool = False  # another instance of the fleet forwarded it here
    # the caller's view "<rule>~<fingerprint>" (views_file.ViewTable.key): chosen here once, or signed by a forwarder
    view: str | None = None
    server: str | None = None  # the published server's name (None: not a request for an MCP endpoint)
    message: Message | None = None  # what the handler parsed from the body (None: not parsed, or put back)


def context(environ: dict[str, Any]) -> RequestContext:
    """The request's context, made empty on first use (a request the worker did not read, a test client's)."""
    found = environ.get(CONTEXT)
    if isinstance(found, RequestContext):
        return found
    made = environ[CONTEXT] = RequestContext()
    return made
