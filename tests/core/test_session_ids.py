"""Self-routing session ids and the signed Mcpgate-Forwarded value (core/session_ids: pure, tables)."""

from __future__ import annotations

import pytest

from mcpgate.core import session_ids
from mcpgate.core.sessions import is_valid_session_id, new_session_id

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
NOW = 1_800_000_000.0


def test_a_minted_id_names_its_instance_and_is_a_valid_session_id() -> None:
    value = session_ids.mint("inst-1", KEY)
    instance, random, mac = value.split(".")
    assert (instance, len(random), len(mac)) == ("inst-1", 43, 22)
    assert session_ids.owner(value, KEY) == "inst-1"
    assert is_valid_session_id(value)
    assert len(session_ids.mint("x" * 32, KEY)) <= 99


def test_ids_are_fresh() -> None:
    assert len({session_ids.mint("a", KEY) for _ in range(100)}) == 100


def _flip(ch: str) -> str:
    return "A" if ch != "A" else "B"


def _forgeries() -> list[tuple[str, str]]:
    value = session_ids.mint("a", KEY)
    instance, random, mac = value.split(".")
    return [
        ("another instance named", f"b.{random}.{mac}"),
        ("random part changed", f"{instance}.{_flip(random[0])}{random[1:]}.{mac}"),
        ("mac changed", f"{instance}.{random}.{mac[:-1]}{_flip(mac[-1])}"),
        ("mac cut", f"{instance}.{random}.{mac[:-2]}"),
        ("no mac", f"{instance}.{random}"),
        ("extra part", f"{value}.x"),
        ("invalid instance", f"a/b.{random}.{mac}"),
        ("empty instance", f".{random}.{mac}"),
        ("short random", f"{instance}.{random[:-1]}.{mac}"),
        ("a plain random id", new_session_id()),
        ("empty", ""),
    ]


@pytest.mark.parametrize(("case", "value"), _forgeries(), ids=[case for case, _ in _forgeries()])
def test_a_forged_or_plain_id_names_no_owner(case: str, value: str) -> None:
    assert session_ids.owner(value, KEY) is None


def test_another_key_recognizes_no_id() -> None:
    assert session_ids.owner(session_ids.mint("a", KEY), OTHER_KEY) is None


def test_short_names_a_session_without_its_secret_part() -> None:
    value = session_ids.mint("inst", KEY)
    label = session_ids.short(value)
    assert label.startswith("inst.") and len(label) == len("inst.") + 8 and value.split(".")[2] not in label
    plain = new_session_id()
    assert session_ids.short(plain) == plain[:8]


REQUEST = ("POST", "/mcp", "a.sid.mac")


def test_a_forwarded_value_carries_its_principal() -> None:
    for principal in ("static", "alice@example.com", "sub:ü/1.2"):
        value = session_ids.forwarded(principal, NOW, *REQUEST, KEY)
        assert session_ids.forwarded_principal(value, NOW + 1, *REQUEST, KEY) == principal


@pytest.mark.parametrize(
    ("case", "now", "request_", "key"),
    [
        ("expired", NOW + 31, REQUEST, KEY),
        ("from the future", NOW - 31, REQUEST, KEY),
        ("another method", NOW, ("DELETE", "/mcp", "a.sid.mac"), KEY),
        ("another path", NOW, ("POST", "/servers/x/mcp", "a.sid.mac"), KEY),
        ("another session", NOW, ("POST", "/mcp", "a.other.mac"), KEY),
        ("another key", NOW, REQUEST, OTHER_KEY),
    ],
)
def test_a_forwarded_value_checks_only_for_its_request_in_its_window(
    case: str, now: float, request_: tuple[str, str, str], key: bytes
) -> None:
    value = session_ids.forwarded("alice", NOW, *REQUEST, KEY)
    assert session_ids.forwarded_principal(value, now, *request_, key) is None
    assert session_ids.forwarded_principal(value, NOW + 30, *REQUEST, KEY) == "alice"


@pytest.mark.parametrize(
    "value", ["", "a.b", "a.b.c.d", "YWxpY2U.x.mac", "YWxpY2U.99999999999999.mac", "YWxpY2U.1.mac"]
)
def test_malformed_forwarded_values_are_refused(value: str) -> None:
    assert session_ids.forwarded_principal(value, NOW, *REQUEST, KEY) is None


def test_a_forwarded_principal_cannot_be_swapped() -> None:
    value = session_ids.forwarded("alice", NOW, *REQUEST, KEY)
    _, stamp, mac = value.split(".")
    bob = session_ids.forwarded("bob", NOW, *REQUEST, KEY).split(".")[0]
    assert session_ids.forwarded_principal(f"{bob}.{stamp}.{mac}", NOW, *REQUEST, KEY) is None
