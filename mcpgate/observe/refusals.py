"""What the hostile-network defences refused, by kind: the counts /metrics shows (mcpgate_refusals_total).

Counted where each refusal is answered, once: the worker's reader (serve/front/worker.py: a request's framing,
its header limits, a client too slow), the waiting-connections budget closing the longest-waiting connection
(serve/front/reading.py), the Endpoint's answer to a Refusal carrying a `kind` (serve/front/app.py:
Host, Origin, a body too large, a rate limit), the embedded authorization server's own limits. A plain count per
kind in the worker's process (one thread: no lock), read when /metrics is scraped; a refusal is never the hot
path, so it is counted whether or not metrics are on.

The reader's and the budget's refusals (`refused`) also have a line in the audit log when it is on
(observe/audit.py: event "refused", the kind, the status answered, the remote address; never what the client
sent); the Endpoint writes its own refusals' lines.
"""

from __future__ import annotations

FRAMING = "framing"  # a request line or header block framed wrong, or two ways (Content-Length and chunked, ...)
HEADER_LIMITS = "header_limits"  # a header line or request line too long, too many header fields
SLOW_CLIENT = "slow_client"  # a head or body not sent within its deadline
HOST = "host"  # a Host not allowed (DNS rebinding)
ORIGIN = "origin"  # an Origin not allowed, a cross-site browser request
BODY_TOO_LARGE = "body_too_large"  # a body past its limit (413)
RATE_LIMIT = "rate_limit"  # past a per-address or per-name limit (429)
CONNECTION_BUDGET = "connection_budget"  # closed while waiting on its client: newer connections needed its place
KINDS = (FRAMING, HEADER_LIMITS, SLOW_CLIENT, HOST, ORIGIN, BODY_TOO_LARGE, RATE_LIMIT, CONNECTION_BUDGET)
EVICTED = "closed for the waiting-connections budget"  # an evicted connection's failed read (counted when evicted)

COUNTS: dict[str, int] = dict.fromkeys(KINDS, 0)

_LIMITS = ("Too many headers", "Line too long", "Request line too long", "too long")
_SLOW = ("timed out", "Request header timeout")


def count(kind: str) -> None:
    COUNTS[kind] = COUNTS.get(kind, 0) + 1


def refused(kind: str | None, remote: object, status: int | None) -> None:
    """A refusal of the worker's reader or of the waiting-connections budget (no request reached the Endpoint):
    counted, and its audit line when the log is on. `kind` None (the client went away): nothing; `status`: what
    the client was answered (None: its connection closed unanswered)."""
    if kind is None:
        return
    count(kind)
    from mcpgate.observe import audit  # (not in gunicorn's master, which imports the worker's reader)

    if audit.LOG is not None:
        address = remote[0] if isinstance(remote, tuple) and remote else remote
        audit.LOG.rejected(kind, status, address if isinstance(address, str) and address else None)


def client_error(reason: str) -> str | None:
    """The kind of a request the worker refused, from its reason (worker.log_refusal's); None: no defence's (the
    client closed its connection before its body was whole)."""
    if "end of file" in reason or EVICTED in reason:
        return None
    if any(word in reason for word in _SLOW):
        return SLOW_CLIENT
    if any(word in reason for word in _LIMITS):
        return HEADER_LIMITS
    return FRAMING
