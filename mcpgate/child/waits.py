"""Waiting for a gevent Event that may be set already: `wait_set`.

gevent's Event.wait on an event that is set while its linked waiters are still to be told (the notifier is
queued on the hub) does not return at once: it joins that notifier's list and switches to the hub, and its
timeout does not apply. When the last linked waiter stops waiting before the notifier runs (its own timeout
fired, or its greenlet was killed), gevent's unlink cancels the queued notifier, and the greenlet that joined
its list is never resumed. Sessions ended at once met this (each end polled the children still stopping with
join(0), a wait of zero seconds that links and yields): a DELETE was never answered, and the worker's
graceful stop waited for its request until gunicorn killed the worker. `wait_set` answers a set event without
waiting, and a wait of no time without linking or yielding, so it never takes that path.
"""

from __future__ import annotations

import gevent.event


def wait_set(event: gevent.event.Event, timeout: float | None) -> bool:
    """True once `event` is set, waiting at most `timeout` seconds (None: until it is; 0 or less: not at all,
    a look that never switches to the hub)."""
    if event.is_set():
        return True
    if timeout is not None and timeout <= 0:
        return False
    return bool(event.wait(timeout))
