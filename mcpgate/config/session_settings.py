"""The settings of the 2025 sessions (mcpgate.serve.sessions): how many, how long an idle one lives, and the bounds
of what each holds: the messages buffered for a client with no stream open, the queue of each open stream, the
events kept for resumption, and the SSE timings.

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpgate.config.declarations import MiB, declare, non_negative, positive


@dataclass(frozen=True, init=False, repr=False, eq=False)
class SessionSettings:
    """The 2025 sessions: their number, their lifetime, their buffers and streams."""

    max_sessions: int = declare(
        100, "Most concurrent sessions (each is one child process); past it, 503.", validate=positive
    )
    session_idle_ttl: float = declare(
        1800.0, "Seconds a session may stay idle before its child is stopped.", validate=positive
    )
    buffer_messages: int = declare(
        1000, "Messages held per session for a client with no stream open (oldest dropped past it).", validate=positive
    )
    buffer_bytes: int = declare(
        16 * MiB,
        "Bytes held per session for a client with no stream open (oldest dropped past it).",
        validate=positive,
    )
    stream_queue: int = declare(
        1000,
        "Messages queued for one open HTTP stream before the gateway waits for the client to read.",
        validate=positive,
    )
    stream_queue_bytes: int = declare(
        16 * MiB,
        "Bytes queued for one HTTP stream before the gateway waits for the client to read (one message always fits).",
        validate=positive,
    )
    stream_stall_timeout: float = declare(
        30.0,
        "Seconds the gateway waits for a client to read a full stream; then that stream ends (the session "
        "and the worker go on).",
        validate=positive,
    )
    replay_events: int = declare(
        100, "Events each SSE stream keeps for a client that resumes it with Last-Event-ID.", validate=positive
    )
    replay_bytes: int = declare(
        1 * MiB,
        "Bytes each SSE stream keeps for resumption (its newest event is always kept).",
        validate=positive,
    )
    replay_streams: int = declare(
        8,
        "SSE streams per session kept resumable after their connection ended (oldest forgotten).",
        validate=positive,
    )
    sse_retry: float = declare(
        1.0,
        "Seconds a 2025-11-25 client is told to wait before reconnecting a dropped SSE stream (the retry "
        "field of the priming event).",
        validate=non_negative,
    )
    sse_after: float = declare(
        10.0,
        "Seconds a request may go unanswered before its reply switches to SSE with keepalives.",
        validate=non_negative,
    )
    keepalive: float = declare(15.0, "Seconds between SSE keepalive comments.", validate=positive)
    session_resurrect: bool = declare(
        True,
        "Keep what a session's takeover replays (the principal, the initialize exchange, the log level, the "
        "resource subscriptions; in Redis, else MCPGATE_STATE_DIR/sessions) so that after its instance's death, "
        "a redeploy or a restart another process starts a new child under the same session id. Off for a server "
        'whose sessions hold state its clients rely on (per server: "resurrect": false).',
    )
    session_resurrect_timeout: float = declare(
        30.0,
        "Seconds a takeover waits for the new child's answers to the replayed initialize, log level and "
        "subscriptions; past it the session ends (404).",
        validate=positive,
    )
    session_kept_bytes: int = declare(
        64 * 1024,
        "Most bytes of one session's kept state (JSON); a larger one is not kept (the session is not taken over).",
        validate=positive,
    )
