"""Issue 20, finding 11: what a caller without credentials learns of the published servers.

GET /servers names them only to who holds the gateway's credentials; /healthz told anyone every name (and each
one's sessions, children and whether its command is broken), and /metrics labels every series with a name.
Now /healthz answers a caller without credentials with its status alone (200, or 503: what a balancer needs),
and a gateway serving /metrics beyond loopback without MCPGATE_METRICS_TOKEN does not start.

(The per-server OAuth metadata still answers a known name without credentials: that is how a client
discovers sign-in, as from the endpoint's own challenge. See ResourceGuard._serve_server_metadata.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import DEMO_ENTRY, Gateway, free_port, gunicorn_refusal, preflight_decision, serving, write_config

TOKEN = "disclosure-t0ken"
NAMES = ("payroll-db", "hr-files", "broken-secret")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    entries = {
        "payroll-db": DEMO_ENTRY,
        "hr-files": DEMO_ENTRY,
        "broken-secret": {"command": "/nonexistent/mcp-server-for-the-test"},  # its name was in /healthz's error
    }
    config = write_config(tmp_path_factory.mktemp("disclosure") / "mcp.json", entries)
    with serving({"MCPGATE_CONFIG": config, "MCPGATE_AUTH_TOKEN": TOKEN}, behind=True) as gw:
        yield gw


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer"}],
)
def test_healthz_without_credentials_tells_the_status_alone(fleet: Gateway, headers: dict[str, str]) -> None:
    reply = fleet.request("GET", "/healthz", headers=headers)
    assert reply.status == 200 and reply.json() == {"status": "degraded"}, reply
    assert not any(name.encode() in reply.body for name in NAMES), reply
    assert fleet.request("GET", "/servers", headers=headers).status == 401  # as the listing


def test_healthz_with_the_gateways_credentials_tells_the_details(fleet: Gateway) -> None:
    reply = fleet.request("GET", "/healthz", headers={"Authorization": f"Bearer {TOKEN}"})
    assert reply.status == 200, reply
    health = reply.json()
    assert health["status"] == "degraded" and set(health["servers"]) == set(NAMES), health
    assert health["servers"]["broken-secret"]["status"] == "unavailable" and "broken-secret" in health["error"]
    assert {"sessions", "children"} <= set(health)


def test_an_unknown_and_a_known_name_look_alike_without_credentials(fleet: Gateway) -> None:
    known = fleet.request("POST", "/servers/payroll-db/mcp", body=b"{}")
    unknown = fleet.request("POST", "/servers/nope/mcp", body=b"{}")
    assert (known.status, known.body) == (unknown.status, unknown.body) and known.status == 401, (known, unknown)


# -- /metrics ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "binds", "refused"),
    [
        ({"MCPGATE_AUTH_TOKEN": TOKEN, "MCPGATE_METRICS": "true"}, ["0.0.0.0:8000"], True),
        ({"MCPGATE_AUTH_TOKEN": TOKEN, "MCPGATE_METRICS": "true"}, ["127.0.0.1:8000", "10.1.2.3:80"], True),
        ({"MCPGATE_ALLOW_UNAUTHENTICATED": "true", "MCPGATE_METRICS": "true"}, ["0.0.0.0:8000"], True),
        (
            {"MCPGATE_AUTH_TOKEN": TOKEN, "MCPGATE_METRICS": "true", "MCPGATE_METRICS_TOKEN": "m3trics"},
            ["0.0.0.0:8000"],
            False,
        ),
        ({"MCPGATE_AUTH_TOKEN": TOKEN, "MCPGATE_METRICS": "true"}, ["127.0.0.1:8000", "unix:/tmp/g.sock"], False),
        ({"MCPGATE_METRICS": "true"}, ["127.0.0.1:8000", "[::1]:8000"], False),
        ({"MCPGATE_AUTH_TOKEN": TOKEN}, ["0.0.0.0:8000"], False),  # metrics off
    ],
)
def test_metrics_beyond_loopback_need_their_token(environ: dict[str, str], binds: list[str], refused: bool) -> None:
    refusal, _ = preflight_decision(environ, binds)
    assert (refusal is not None) == refused, refusal
    if refused:
        assert refusal is not None and "MCPGATE_METRICS_TOKEN" in refusal and "/metrics" in refusal


def test_gunicorn_refuses_to_serve_metrics_beyond_loopback_without_their_token(tmp_path: Path) -> None:
    port = free_port()
    out = gunicorn_refusal({"MCPGATE_AUTH_TOKEN": TOKEN, "MCPGATE_METRICS": "true"}, "-b", f"0.0.0.0:{port}")
    assert f"refusing to serve /metrics beyond loopback (0.0.0.0:{port}) without MCPGATE_METRICS_TOKEN" in out, out
    assert "Booting worker" not in out and "Traceback" not in out
