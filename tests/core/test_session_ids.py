"""Self-routing session ids and the signed Mcpgate-Forwarded value (core/session_ids: pure, tables)."""

from __future__ import annotations

import dataclasses

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


REQUEST = session_ids.ForwardedRequest("POST", "/mcp", "", "a.sid.mac", b'{"jsonrpc":"2.0"}')
WINDOW = session_ids.FORWARDED_WINDOW


def test_a_forwarded_value_carries_its_principal_and_sender() -> None:
    for principal in ("static", "alice@example.com", "sub:ü/1.2"):
        value = session_ids.forwarded(principal, "i1", NOW, REQUEST, KEY)
        assert session_ids.forwarded_sender(value) == "i1"
        checked = session_ids.forwarded_check(value, NOW + 1, REQUEST, KEY)
        assert checked is not None and (checked.principal, checked.sender) == (principal, "i1")


def test_each_forwarded_value_has_a_fresh_nonce() -> None:
    values = [session_ids.forwarded("alice", "i1", NOW, REQUEST, KEY) for _ in range(50)]
    nonces = {session_ids.forwarded_check(value, NOW, REQUEST, KEY).nonce for value in values}  # type: ignore[union-attr]
    assert len(nonces) == 50


def _other(**change: object) -> session_ids.ForwardedRequest:
    return dataclasses.replace(REQUEST, **change)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("case", "now", "request_", "key"),
    [
        ("expired", NOW + WINDOW + 1, REQUEST, KEY),
        ("from the future", NOW - WINDOW - 1, REQUEST, KEY),
        ("another method", NOW, _other(method="DELETE"), KEY),
        ("another path", NOW, _other(path="/servers/x/mcp"), KEY),
        ("another query", NOW, _other(query="session_id=a.sid.mac"), KEY),
        ("another session", NOW, _other(session_id="a.other.mac"), KEY),
        ("another body", NOW, _other(body=b'{"jsonrpc":"2.0","id":1}'), KEY),
        ("no body", NOW, _other(body=b""), KEY),
        ("another key", NOW, REQUEST, OTHER_KEY),
    ],
)
def test_a_forwarded_value_checks_only_for_its_request_in_its_window(
    case: str, now: float, request_: session_ids.ForwardedRequest, key: bytes
) -> None:
    value = session_ids.forwarded("alice", "i1", NOW, REQUEST, KEY)
    assert session_ids.forwarded_check(value, now, request_, key) is None
    assert session_ids.forwarded_check(value, NOW + WINDOW, REQUEST, KEY) is not None


def test_the_window_is_a_few_seconds() -> None:
    assert WINDOW <= 5


@pytest.mark.parametrize(
    "value",
    [
        "",
        "a.b",
        "a.i1.1.n",
        "a.i1.1.n.mac",
        "a.i1.1.n.v.mac.x",
        "YWxpY2U.i1.x.nonce..mac",
        "YWxpY2U.i1.99999999999999.nonce..mac",
        "YWxpY2U.i1.1800000000.nonce..mac",
        "YWxpY2U.i/1.1800000000.nonce..mac",
        "YWxpY2U.i1.1800000000...mac",
        "YWxpY2U.i1.1800000000.nonce.0 1.mac",
    ],
)
def test_malformed_forwarded_values_are_refused(value: str) -> None:
    assert session_ids.forwarded_check(value, NOW, REQUEST, KEY) is None


def test_a_forwarded_principal_sender_nonce_or_view_cannot_be_swapped() -> None:
    value = session_ids.forwarded("alice", "i1", NOW, REQUEST, KEY, view="0~abc")
    principal, sender, stamp, nonce, view, mac = value.split(".")
    bob = session_ids.forwarded("bob", "i1", NOW, REQUEST, KEY).split(".")[0]
    other_nonce = session_ids.forwarded("alice", "i1", NOW, REQUEST, KEY).split(".")[3]
    for forged in (
        f"{bob}.{sender}.{stamp}.{nonce}.{view}.{mac}",
        f"{principal}.i2.{stamp}.{nonce}.{view}.{mac}",
        f"{principal}.{sender}.{stamp}.{other_nonce}.{view}.{mac}",
        f"{principal}.{sender}.{stamp}.{nonce}.1~abc.{mac}",  # a broader rule's view
        f"{principal}.{sender}.{stamp}.{nonce}..{mac}",  # as if the sender had no views
    ):
        assert session_ids.forwarded_check(forged, NOW, REQUEST, KEY) is None


def test_a_forwarded_value_carries_the_view_its_sender_chose() -> None:
    value = session_ids.forwarded("alice", "i1", NOW, REQUEST, KEY, view="-1~0123abcd")
    checked = session_ids.forwarded_check(value, NOW, REQUEST, KEY)
    assert checked is not None and checked.view == "-1~0123abcd"
    plain = session_ids.forwarded_check(session_ids.forwarded("alice", "i1", NOW, REQUEST, KEY), NOW, REQUEST, KEY)
    assert plain is not None and plain.view == ""
    with pytest.raises(ValueError):
        session_ids.forwarded("alice", "i1", NOW, REQUEST, KEY, view="0.x")


# NOW's digits in Arabic-Indic and in fullwidth forms (int() reads both as NOW), and a superscript two
@pytest.mark.parametrize("stamp", ["\u0661\u0668" + "\u0660" * 8, "\uff11\uff18" + "\uff10" * 8, "\u00b2"])
def test_a_stamp_in_other_digits_is_refused_not_an_error(stamp: str) -> None:
    """A stamp str.isdigit takes but that is no ASCII digits (a superscript, which int() refuses; Arabic-Indic or
    fullwidth digits, which it reads) is refused like any malformed value, even under a MAC that holds."""
    fields = (session_ids._b64(b"alice"), "i1", stamp, "n1", "")
    value = ".".join((*fields, session_ids._forwarded_mac(KEY, fields, REQUEST)))
    assert session_ids.forwarded_check(value, NOW, REQUEST, KEY) is None
