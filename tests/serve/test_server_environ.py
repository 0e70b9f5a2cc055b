"""The worker's server fills SERVER_NAME without DNS (serve/front/connection.Server.update_environ): pywsgi's own
way asks socket.getfqdn, which starts gevent's resolver and waits on DNS as each worker starts."""

from __future__ import annotations

import socket
from typing import Any

import gevent.pywsgi
import pytest

from mcpgate.serve.front.connection import Limits, Server

pytestmark = pytest.mark.fast

ADDRESSES = {  # where the server listens -> its SERVER_NAME and SERVER_PORT
    "IPv4 loopback": (socket.AF_INET, "127.0.0.1"),
    "IPv6 loopback": (socket.AF_INET6, "::1"),
}


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("204 No Content", [])
    return []


@pytest.mark.parametrize("case", ADDRESSES)
def test_server_name_is_the_address_without_dns(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    family, host = ADDRESSES[case]

    def no_dns(*args: Any) -> str:
        raise AssertionError(f"DNS asked: getfqdn{args}")

    monkeypatch.setattr(gevent.pywsgi.socket, "getfqdn", no_dns)
    try:
        listener = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        pytest.skip(f"no {case} socket here")
    with listener:
        listener.bind((host, 0))
        listener.listen(1)
        server = Server(listener, _app, connections=set(), limits=Limits(5.0, 5.0, 5.0, 1.0, 4))
        server.update_environ()
        assert server.environ["SERVER_NAME"] == host
        assert server.environ["SERVER_PORT"] == str(listener.getsockname()[1])
