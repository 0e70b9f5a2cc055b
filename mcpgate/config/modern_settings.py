"""The settings of MCP 2026-07-28 (mcpgate.serve.modern): serving it alone or beside the 2025 sessions, the
ttlMs of cacheable results, the pool of children that serves its requests (how many, per principal and in all,
how they are started, probed and restarted, how long a request waits for one), and how long a bridged input
request and a task of the tasks extension are kept.

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpgate.config.declarations import declare, non_negative, positive


@dataclass(frozen=True, init=False, repr=False, eq=False)
class ModernSettings:
    """MCP 2026-07-28: the pool of children that serves it, and what it keeps."""

    modern_only: bool = declare(
        False,
        "Serve only MCP 2026-07-28 (stateless): initialize is refused naming the supported revisions, GET and "
        "DELETE get 405. Off: one endpoint serves both eras.",
    )
    cache_ttl_ms: int = declare(
        60000,
        "ttlMs put on the cacheable 2026-07-28 results (discover, the lists, resources/read) that carry none.",
        validate=non_negative,
    )
    probe_timeout: float = declare(
        3.0,
        "Seconds a pooled child has to answer server/discover before it is also sent a ping; one that answers the "
        "ping but not server/discover within as long again is restarted and sent initialize alone (silence is "
        "never taken for an era: MCPGATE_START_TIMEOUT).",
        validate=positive,
    )
    start_timeout: float = declare(
        60.0,
        "Seconds a pooled child has, from its start, to give its first answer (to server/discover, or to "
        "initialize for a server known to speak only that); none within it is a failed start.",
        validate=positive,
    )
    pool_children: int = declare(
        4, "Most pooled children per principal serving 2026-07-28 requests; past it, requests wait.", validate=positive
    )
    pool_children_total: int = declare(
        32,
        "Most pooled children of all principals together (those still stopping included); past it, the least "
        "recently used idle child of another principal is stopped to make room, or requests wait.",
        validate=positive,
    )
    pool_child_requests: int = declare(
        16, "Requests in flight per pooled child before the pool starts another.", validate=positive
    )
    pool_spares: int = declare(
        1,
        "Free legacy pooled children kept started beside the one the next request takes: a call that may ask "
        "its client for input needs a child to itself, and a spare spares it a cold start. 0: only on demand.",
        validate=non_negative,
    )
    pool_idle_ttl: float = declare(
        300.0, "Seconds a pooled child may stay idle before it is stopped.", validate=positive
    )
    pool_wait: float = declare(
        30.0,
        "Seconds a 2026-07-28 request waits for a pooled child to take it; then 503.",
        validate=positive,
    )
    pool_restarts: int = declare(
        5,
        "Crashes of a principal's pooled children within a minute before the pool stops restarting them (503 "
        "naming the reason until the minute has passed).",
        validate=positive,
    )
    input_ttl: float = declare(
        120.0,
        "Seconds a bridged input request (elicitation, sampling, roots for a legacy child) waits for the "
        "client's retry; then the child's call is cancelled and its requestState expires. A modern child's "
        "requestState is accepted back for as long.",
        validate=positive,
    )
    task_hold: float = declare(
        3600.0,
        "Seconds at most a task of the tasks extension stays reachable from its creation (its ttlMs, lowered to "
        "this when longer or unlimited): the pooled child holding it is not stopped as idle meanwhile, and the "
        "task id the client got expires then.",
        validate=positive,
    )
    pool_child_tasks: int = declare(
        256,
        "Most tasks a pooled child is kept for at once; past it the one due first is let go (its child may then "
        "be stopped as idle, and that task is lost).",
        validate=positive,
    )
