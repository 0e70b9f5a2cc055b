"""The head of a forwarded request (serve/cluster/forward.py sends it): the request line and the client's
end-to-end headers, without hop-by-hop ones (and those its Connection header names), its token and any
Mcpgate-Forwarded; made once per client's head and remembered (a client sends the same head call after call),
every table bounded. The forwarder appends the signed value, the length and the body."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from mcpgate.core import wire
from mcpgate.serve.cluster.exchange import message

# RFC 9110 7.6.1: meaningful for one connection only, never forwarded
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer"}
    | {"transfer-encoding", "upgrade"}
)
# the token stays here; the body is whole (read here), so nothing to expect
NOT_SENT = HOP_BY_HOP | {"authorization", wire.FORWARDED.lower(), "content-length", "expect"}
NAMES_KEPT = 512  # environ keys whose header name is remembered (the client chooses them: bounded)


def end_to_end(environ: dict[str, Any]) -> list[tuple[str, str]]:
    """The request's headers a forward carries: all but hop-by-hop ones (and those Connection names), the
    token and any Mcpgate-Forwarded; in the environ's order. Which of the environ's keys those can be depends on
    its keys alone: remembered by the keys as a tuple (a client's requests have the same keys, in the same order:
    one look at a tuple instead of a pass over each key and its name; bounded)."""
    plan = plan_of(environ).sent
    connection = environ.get("HTTP_CONNECTION")
    if connection:
        named = {token.strip().lower() for token in str(connection).split(",")}
        return [(name, str(value)) for key, name, lowered in plan if (value := environ[key]) and lowered not in named]
    return [(name, str(value)) for key, name, _ in plan if (value := environ[key])]


class Plan:
    """What an environ's keys give a forward: `sent`, the keys whose headers it may carry (sent_keys); `keys`,
    those keys alone; `named`, whether a Connection header may name more to leave out. Compared by identity."""

    __slots__ = ("keys", "named", "sent")

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.sent = sent_keys(keys)
        self.keys = tuple(key for key, _, _ in self.sent)
        self.named = "HTTP_CONNECTION" in keys


def plan_of(environ: dict[str, Any]) -> Plan:
    """The environ's Plan, remembered by its keys as a tuple (bounded)."""
    keys = tuple(environ)
    plan = _PLANS.get(keys)
    if plan is None:
        plan = Plan(keys)
        if len(_PLANS) >= PLANS_KEPT:
            _PLANS.clear()
        _PLANS[keys] = plan
    return plan


def plain_head(method: str, path: str, query: str, environ: dict[str, Any]) -> bytes:
    """head_of(method, path, query, end_to_end(environ)), remembered by the environ's Plan and the values of its
    keys (a client sends the same head call after call: no list of headers made, no key of them built; bounded)."""
    plan = plan_of(environ)
    if plan.named:  # a Connection header: its tokens decide too
        return head_of(method, path, query, end_to_end(environ))
    values = tuple(map(environ.__getitem__, plan.keys))
    key = (method, path, query, plan, values)
    try:
        known = _PLAIN.get(key)
    except TypeError:  # a value that is not hashable (no server puts one there): the long way
        return head_of(method, path, query, end_to_end(environ))
    if known is None:
        known = head_of(method, path, query, end_to_end(environ))
        if len(_PLAIN) >= HEADS_KEPT:
            _PLAIN.clear()
        _PLAIN[key] = known
    return known


def sent_keys(keys: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
    """The environ keys whose headers a forward may carry (all but NOT_SENT's), in order: (key, its header's name
    as sent, the name in lowercase)."""
    plan = []
    for key in keys:
        found = _NAMES.get(key)
        if found is None:
            found = header_name(key)
        name, lowered = found
        if name and lowered not in NOT_SENT:
            plan.append((key, name, lowered))
    return tuple(plan)


PLANS_KEPT = 256  # environ key tuples whose forwarded headers are remembered (past it, the table starts again)
_PLANS: dict[tuple[str, ...], Plan] = {}
_PLAIN: dict[tuple[str, str, str, Plan, tuple[Any, ...]], bytes] = {}  # plain_head's heads
_NAMES: dict[str, tuple[str, str]] = {}  # environ key -> (its header's name as sent, lowercase); ("", ""): none
FORWARDED_FIELD = wire.FORWARDED.encode("ascii") + b": "  # the value is base64url, names and digits: ASCII
HEADS_KEPT = 256  # request heads remembered (past it, the table starts again)
_HEADS: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], bytes] = {}


def head_of(method: str, path: str, query: str, headers: list[tuple[str, str]]) -> bytes:
    """A forward's request line and end-to-end header lines (exchange.message: the target quoted, a header that
    would break the framing refused), without its Mcpgate-Forwarded value, its length and the empty line; a client
    sends the same head call after call, so it is remembered by what it is made of (bounded)."""
    key = (method, path, query, tuple(headers))
    known = _HEADS.get(key)
    if known is None:
        target = quote(path, safe="/%:@!$&'()*+,;=-._~") + ("?" + query if query else "")
        known = message(method, target, headers, b"")[:-2]  # its lines, each with its CRLF; not the empty line
        if len(_HEADS) >= HEADS_KEPT:
            _HEADS.clear()
        _HEADS[key] = known
    return known


def header_name(key: str) -> tuple[str, str]:
    """The header an environ key holds, as a forward sends its name and in lowercase (("", ""): not a header);
    remembered, so that each request does not spell its names again."""
    if key.startswith("HTTP_"):
        name = key[5:].replace("_", "-")
    elif key == "CONTENT_TYPE":
        name = "Content-Type"
    else:
        name = ""
    found = (name.title(), name.lower())
    if len(_NAMES) >= NAMES_KEPT:
        _NAMES.clear()
    _NAMES[key] = found
    return found
