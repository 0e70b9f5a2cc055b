"""The test suite's one support package; test modules import from here, never from each other.

- gateway: a real gunicorn (the gevent worker) on a free loopback port, processes stopped by PID
- http: raw HTTP requests (`send`, answered as a `Reply`) and MCP messages of both eras
- waiting: the one `wait_for`, a port listening, processes ending
- sdk: the official SDK client's answers and round trips; pages: Chromium and a page of another origin
- fleet (Redis, HAProxy, a fleet's instances), recipe (the deploy recipe under honcho, a remote peer),
  oauth and signin (the authorization servers, a signed-in client), security (raw sockets, refused starts),
  relay (upstream servers, relay runners, a scripted upstream), raw_server (exact reply bytes, for HTTP clients):
  import those by their module

The names below are the common ones, importable as `from tests.support import X`.
"""

from tests.support.gateway import (
    FIXTURES,
    GATEWAYS,
    LOG_TAIL_LINES,
    ROOT,
    Gateway,
    alive,
    assert_serves_the_demo,
    children,
    crash,
    direct_children,
    free_port,
    gunicorn_refusal,
    lazy_gateways,
    pid_gone,
    preflight_decision,
    serving,
    stop_process,
    wait_dead,
    worker_children,
)
from tests.support.http import (
    ACCEPT,
    DEMO_ENTRY,
    HEADERS,
    MODERN,
    MODERN_CHILD,
    NAMED_ENTRY,
    NamedServer,
    Reply,
    call,
    call_in_flight,
    init_body,
    modern_body,
    modern_headers,
    named,
    open_session,
    post_modern,
    reply_message,
    reply_messages,
    send,
    sse_messages,
    write_config,
)
from tests.support.pages import chromium, static_site
from tests.support.sdk import cancel_a_slow_call, demo_round_trips, on_elicit, on_sample
from tests.support.waiting import HANG_GUARD, await_for, wait_for, wait_listening

__all__ = [
    "ACCEPT",
    "DEMO_ENTRY",
    "FIXTURES",
    "GATEWAYS",
    "HANG_GUARD",
    "HEADERS",
    "LOG_TAIL_LINES",
    "MODERN",
    "MODERN_CHILD",
    "NAMED_ENTRY",
    "ROOT",
    "Gateway",
    "NamedServer",
    "Reply",
    "alive",
    "assert_serves_the_demo",
    "await_for",
    "call",
    "call_in_flight",
    "cancel_a_slow_call",
    "children",
    "chromium",
    "crash",
    "demo_round_trips",
    "direct_children",
    "free_port",
    "gunicorn_refusal",
    "init_body",
    "lazy_gateways",
    "modern_body",
    "modern_headers",
    "named",
    "on_elicit",
    "on_sample",
    "open_session",
    "pid_gone",
    "post_modern",
    "preflight_decision",
    "reply_message",
    "reply_messages",
    "send",
    "serving",
    "sse_messages",
    "static_site",
    "stop_process",
    "wait_dead",
    "wait_for",
    "wait_listening",
    "worker_children",
    "write_config",
]
