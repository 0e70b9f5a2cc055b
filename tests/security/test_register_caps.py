"""Issue 20, finding 1 (the stored metadata): open registration kept whatever a client sent, so one POST /register
stored a 20 MiB client_name. Every field has its cap and the record as stored has one
(MCPGATE_OAUTH_CLIENT_METADATA_BYTES); past either the registration is refused, 400 invalid_client_metadata naming
the field, and nothing is stored. Against a real gunicorn, bodies sent whole and chunked, the SQLite state read
afterwards."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Gateway, serving
from tests.support.oauth import embedded_env
from tests.support.security import USERS, public_client, register

CALLBACK = "http://127.0.0.1:47311/callback"
LONG = "https://app.example/" + "p" * 1900  # a valid URI under the per-field cap (2000)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("register-caps")


@pytest.fixture(scope="module")
def gw(state_dir: Path) -> Iterator[Gateway]:
    env = embedded_env(
        state_dir, USERS, MCPGATE_OAUTH_REGISTER_LIMIT="1000", MCPGATE_OAUTH_CLIENT_METADATA_BYTES="8192"
    )
    with serving(env, behind=True) as gateway:
        yield gateway


def stored_rows(state_dir: Path) -> list[tuple[str, int]]:
    """(client_id, bytes of its stored metadata) of every registration kept."""
    db = sqlite3.connect(state_dir / "oauth.sqlite3")
    try:
        return [(row[0], row[1]) for row in db.execute("SELECT client_id, length(metadata) FROM clients")]
    finally:
        db.close()


OVERSIZED: dict[str, dict[str, Any]] = {
    "client_name": {"client_name": "n" * 20_000},
    "scope": {"scope": "mcp " * 2000},
    "client_uri": {"client_uri": "https://app.example/" + "u" * 5000},
    "logo_uri": {"logo_uri": "https://app.example/" + "l" * 5000},
    "software_id": {"software_id": "s" * 5000},
    "contacts": {"contacts": [f"ops{i}@app.example" for i in range(500)]},
    "redirect_uris": {"redirect_uris": [f"http://127.0.0.1:47311/cb{i}" for i in range(500)]},
}


@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "chunked"])
@pytest.mark.parametrize("field", sorted(OVERSIZED))
def test_an_oversized_field_is_refused_naming_it_and_nothing_is_stored(
    gw: Gateway, state_dir: Path, field: str, chunked: bool
) -> None:
    before = stored_rows(state_dir)
    reply = register(gw.port, public_client(CALLBACK, **OVERSIZED[field]), chunked=chunked)
    assert reply.status == 400, reply
    answer = reply.json()
    assert answer["error"] == "invalid_client_metadata" and field in answer["error_description"], answer
    assert stored_rows(state_dir) == before


@pytest.mark.parametrize(
    "metadata",
    [{"client_name": {"nested": "x" * 5000}}, {"contacts": "ops@app.example"}, {"contacts": [{"a": "b"}]}],
    ids=["object name", "string contacts", "object contact"],
)
def test_a_field_of_the_wrong_type_is_refused(gw: Gateway, state_dir: Path, metadata: dict[str, Any]) -> None:
    before = stored_rows(state_dir)
    reply = register(gw.port, public_client(CALLBACK, **metadata))
    assert reply.status == 400 and reply.json()["error"] == "invalid_client_metadata", reply
    assert next(iter(metadata)) in reply.json()["error_description"]
    assert stored_rows(state_dir) == before


def test_fields_each_within_their_caps_are_still_capped_as_a_whole(gw: Gateway, state_dir: Path) -> None:
    metadata = public_client(
        CALLBACK,
        client_uri=LONG + "c",
        logo_uri=LONG + "l",
        tos_uri=LONG + "t",
        policy_uri=LONG + "p",
        redirect_uris=[CALLBACK, *(f"{LONG}{i}" for i in range(4))],
    )
    before = stored_rows(state_dir)
    reply = register(gw.port, metadata, chunked=True)
    assert reply.status == 400, reply
    answer = reply.json()
    assert answer["error"] == "invalid_client_metadata", answer
    assert "MCPGATE_OAUTH_CLIENT_METADATA_BYTES" in answer["error_description"], answer
    assert stored_rows(state_dir) == before


def test_an_ordinary_registration_is_stored_within_the_cap(gw: Gateway, state_dir: Path) -> None:
    metadata = public_client(
        CALLBACK, client_uri="https://app.example/", contacts=["ops@app.example"], scope="mcp", client_name="App"
    )
    for chunked in (False, True):
        reply = register(gw.port, metadata, chunked=chunked)
        assert reply.status == 201, reply
        assert reply.json()["client_name"] == "App"
    rows = stored_rows(state_dir)
    assert len(rows) >= 2 and max(size for _, size in rows) <= 8192, rows
