"""What the instances of a fleet tell each other about a 2025 session that moved (serve/cluster/takeover.py), and
the answer to a request its owner died with.

- HELD_BY: the header of a 503 an instance answers to a request forwarded to it for a session it does not hold:
  the instance that holds it, or "" for nobody (the forwarding instance then takes it over).
- `restarted`: a POST whose owner closed the connection after the whole request was sent and before any reply
  (serve/cluster/forward.LostInFlight) may have run there, in part: it is not sent again but answered with a
  JSON-RPC error per request it carried, saying the server restarted, so that the client decides to send it
  again; its session goes on (taken over).
"""

from __future__ import annotations

import json

from mcpgate.core import jsonrpc
from mcpgate.serve.front.http import HttpResponse, json_response

HELD_BY = "Mcpgate-Held-By"
RESTARTED = (
    "The MCP server restarted (the gateway instance serving this session stopped) while this request was in "
    "flight; the session goes on: send the request again"
)


def held_by(response: HttpResponse) -> str | None:
    """The holder a forwarded request's 503 names ("": nobody), None when the reply is no such answer."""
    if response.status != 503:
        return None
    return next((value for name, value in response.headers if name.lower() == HELD_BY.lower()), None)


def restarted(body: bytes) -> HttpResponse:
    """The answer to a POST whose owner died while it was in flight: a JSON-RPC error for each request in it
    (202 when it carried none)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    items = parsed if isinstance(parsed, list) else [parsed]
    ids = [
        item["id"]
        for item in items
        if isinstance(item, dict) and isinstance(item.get("method"), str) and jsonrpc.is_valid_id(item.get("id"))
    ]
    if not ids:
        return HttpResponse(202)
    errors = [jsonrpc.error_response(msg_id, jsonrpc.INTERNAL_ERROR, RESTARTED) for msg_id in ids]
    return json_response(jsonrpc.encode(errors if isinstance(parsed, list) else errors[0]))
