"""serve/front/starting.taken: an address another process listens on is named before gunicorn retries it, whether
the bind names the host by an IP literal, an ASCII name (asked of the resolver in bytes: no idna codec loaded in
the master, issue 24) or a name the resolver cannot find (left to gunicorn)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from mcpgate.serve.front import starting


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        pytest.param("127.0.0.1", True, id="ip-literal"),
        pytest.param("localhost", True, id="ascii-name"),
        pytest.param("xn--bcher-kva.invalid", False, id="unresolvable-ascii-name"),
        pytest.param("bücher.invalid", False, id="unresolvable-non-ascii-name"),
        pytest.param("unix:/tmp/x.sock", False, id="unix-socket"),
    ],
)
def test_an_address_in_use_is_named(listening: int, host: str, refused: bool) -> None:
    address = host if host.startswith("unix:") else f"{host}:{listening}"
    problem = starting.taken([address])
    assert (problem is not None) == refused, problem
    if refused:
        assert problem is not None and f"cannot listen on {address}" in problem


def test_an_ascii_name_loads_no_idna_codec() -> None:
    code = (
        "import sys; from mcpgate.serve.front import starting; starting.taken(['localhost:1', '127.0.0.1:1']); "
        "print(sorted(m for m in ('encodings.idna', 'stringprep', 'unicodedata') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
