"""The suite's own gateway stops (tests/support/gateway.py): a teardown's stop behind returns once SIGTERM is sent
and `finish_stops` waits for the exit by PID; `stop_all` stops several together and returns when each has exited."""

from __future__ import annotations

from tests.support import gateway
from tests.support.gateway import Gateway, finish_stops, stop_all


def test_a_stop_behind_is_waited_for_by_finish_stops() -> None:
    gw = Gateway()
    gw.wait_ready()
    gw.stop(behind=True)
    assert gw.stopped  # its log closed here; the process may still be stopping
    assert gw.proc.returncode is not None or gw.proc in gateway._stopping
    finish_stops()
    assert gw.proc.returncode is not None and not gateway._stopping
    assert "Shutting down: Master" in gw.log()  # a graceful stop (SIGTERM), not a kill


def test_stop_all_returns_when_every_gateway_has_exited() -> None:
    gws = [Gateway() for _ in range(2)]
    for gw in gws:
        gw.wait_ready()
    stop_all(gws)
    assert [gw.proc.returncode for gw in gws] == [0, 0]
    assert all(gw.stopped for gw in gws)
