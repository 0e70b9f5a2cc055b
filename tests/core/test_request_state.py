"""StateSealer: the gateway's MRTR requestState round-trips, and every altered, foreign, expired or
oversized token is refused with its reason; a modern child's own state carried inside one comes back whole."""

from __future__ import annotations

import base64
import re

import pytest

from mcpgate.core.request_state import MAX_TOKEN_CHARS, Opened, StateError, StateSealer, carried, carry

KEY = bytes(range(32))
PRINCIPAL = "alice@example.test"


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sealer(clock: FakeClock | None = None, key: bytes = KEY, ttl: float = 120.0) -> StateSealer:
    return StateSealer(key, ttl=ttl, clock=clock or FakeClock())


def reason(result: Opened | StateError) -> str:
    assert isinstance(result, StateError), result
    assert result.message
    return result.reason


@pytest.mark.parametrize(
    ("continuation", "round_"),
    [
        pytest.param("c-1", 0, id="simple"),
        pytest.param("", 1, id="empty-continuation"),
        pytest.param("ünïcødé ☃ " * 20, 7, id="unicode"),
        pytest.param("x" * 5000, 2**32 - 1, id="long-and-last-round"),
    ],
)
def test_round_trip(continuation: str, round_: int) -> None:
    s = sealer()
    token = s.seal(PRINCIPAL, continuation, round_)
    assert token.startswith("mg1.")
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", token)
    assert s.open(token, PRINCIPAL) == Opened(continuation, round_)


def test_the_principal_is_not_readable_from_the_token() -> None:
    token = sealer().seal(PRINCIPAL, "c", 0)
    raw = base64.urlsafe_b64decode(token[4:] + "=" * (-len(token[4:]) % 4))
    assert PRINCIPAL.encode() not in raw
    assert b"alice" not in raw


def test_a_fresh_sealer_makes_its_own_key() -> None:
    token = StateSealer().seal(PRINCIPAL, "c", 0)
    assert reason(StateSealer().open(token, PRINCIPAL)) == "tampered"


def test_every_character_changed_is_refused() -> None:
    s = sealer()
    token = s.seal(PRINCIPAL, "continuation-42", 3)
    alphabet = "AQgw_-9"  # values that differ in high and low bits
    for index, char in enumerate(token):
        for replacement in alphabet:
            if replacement == char:
                continue
            altered = token[:index] + replacement + token[index + 1 :]
            assert reason(s.open(altered, PRINCIPAL)) in {"malformed", "tampered"}, (index, replacement)


def test_every_payload_byte_flipped_is_tampered() -> None:
    s = sealer()
    token = s.seal(PRINCIPAL, "continuation-42", 3)
    raw = bytearray(base64.urlsafe_b64decode(token[4:] + "=" * (-len(token[4:]) % 4)))
    for index in range(len(raw)):
        for bit in (0x01, 0x80):
            flipped = bytearray(raw)
            flipped[index] ^= bit
            altered = "mg1." + base64.urlsafe_b64encode(bytes(flipped)).rstrip(b"=").decode()
            assert reason(s.open(altered, PRINCIPAL)) == "tampered", (index, bit)


def test_non_canonical_base64_is_refused() -> None:
    """The last character's unused low bits changed: the same bytes, another string."""
    s = sealer()
    for continuation in ("a", "ab", "abc"):  # payload lengths with each remainder mod 3
        token = s.seal(PRINCIPAL, continuation, 0)
        raw = base64.urlsafe_b64decode(token[4:] + "=" * (-len(token[4:]) % 4))
        if len(raw) % 3 == 0:
            continue
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        last = alphabet.index(token[-1])
        twin = token[:-1] + alphabet[last | 1]
        assert twin != token
        assert base64.urlsafe_b64decode(twin[4:] + "=" * (-len(twin[4:]) % 4)) == raw
        assert reason(s.open(twin, PRINCIPAL)) == "malformed"


@pytest.mark.parametrize("keep", [0, 3, 4, 5, 10, 40, -1, -2, -43])
def test_truncated(keep: int) -> None:
    s = sealer()
    token = s.seal(PRINCIPAL, "continuation", 1)
    assert reason(s.open(token[:keep], PRINCIPAL)) in {"malformed", "tampered"}


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("", id="empty"),
        pytest.param("mg1.", id="prefix-only"),
        pytest.param("mg2.AAAA", id="other-version"),
        pytest.param("mg1.AAAA AAAA", id="space"),
        pytest.param("mg1.AAAA=", id="padding"),
        pytest.param("mg1.AAAA+/AA", id="standard-alphabet"),
        pytest.param("mg1.AAAA\n", id="newline"),
        pytest.param("mg1." + "A" * 101, id="impossible-length"),
        pytest.param("mg1." + "é" * 100, id="non-ascii"),
    ],
)
def test_malformed_strings(token: str) -> None:
    assert reason(sealer().open(token, PRINCIPAL)) == "malformed"


@pytest.mark.parametrize(
    "token",
    [None, 42, 4.2, True, b"mg1.AAAA", ["mg1."], {"state": "mg1."}],
    ids=["none", "int", "float", "bool", "bytes", "list", "dict"],
)
def test_non_string(token: object) -> None:
    assert reason(sealer().open(token, PRINCIPAL)) == "malformed"


def test_wrong_principal_is_foreign() -> None:
    s = sealer()
    token = s.seal(PRINCIPAL, "c", 0)
    assert reason(s.open(token, "mallory@example.test")) == "foreign"
    assert reason(s.open(token, "")) == "foreign"
    assert isinstance(s.open(token, PRINCIPAL), Opened)


def test_wrong_binding_is_foreign() -> None:
    s = sealer()
    token = s.seal(PRINCIPAL, "c", 0, binding="tools/call:abc")
    assert reason(s.open(token, PRINCIPAL, binding="tools/call:xyz")) == "foreign"
    assert reason(s.open(token, PRINCIPAL)) == "foreign"
    assert s.open(token, PRINCIPAL, binding="tools/call:abc") == Opened("c", 0)


def test_expired_with_a_fake_clock() -> None:
    clock = FakeClock()
    s = sealer(clock, ttl=30.0)
    token = s.seal(PRINCIPAL, "c", 2)
    clock.now += 29.999
    assert s.open(token, PRINCIPAL) == Opened("c", 2)
    clock.now += 0.001
    assert reason(s.open(token, PRINCIPAL)) == "expired"
    clock.now += 10_000
    assert reason(s.open(token, PRINCIPAL)) == "expired"


def test_another_key_is_tampered() -> None:
    token = sealer(key=KEY).seal(PRINCIPAL, "c", 0)
    assert reason(sealer(key=bytes(32)).open(token, PRINCIPAL)) == "tampered"


def test_oversized_is_malformed_without_decoding() -> None:
    s = sealer()
    assert reason(s.open("mg1." + "A" * (MAX_TOKEN_CHARS - 3), PRINCIPAL)) == "malformed"
    assert reason(s.open("mg1." + "A" * 50_000_000, PRINCIPAL)) == "malformed"


def test_seal_refuses_what_open_could_not_take() -> None:
    s = sealer()
    with pytest.raises(ValueError, match="too long"):
        s.seal(PRINCIPAL, "x" * MAX_TOKEN_CHARS, 0)
    with pytest.raises(ValueError, match="round"):
        s.seal(PRINCIPAL, "c", -1)
    with pytest.raises(ValueError, match="round"):
        s.seal(PRINCIPAL, "c", 2**32)


@pytest.mark.parametrize(("key", "ttl"), [(b"short", 120.0), (KEY, 0.0), (KEY, -1.0)])
def test_bad_construction(key: bytes, ttl: float) -> None:
    with pytest.raises(ValueError):
        StateSealer(key, ttl=ttl)


# -- a fleet: the token names the instance holding the continuation ---------------------------------------


def test_the_instance_travels_and_any_sealer_with_the_key_reads_it() -> None:
    clock = FakeClock()
    here, there = sealer(clock), sealer(clock)  # two instances, one cluster key
    token = here.seal(PRINCIPAL, "c-9", 2, instance="inst-a")
    assert there.open(token, PRINCIPAL) == Opened("c-9", 2, "inst-a")
    assert here.open(here.seal(PRINCIPAL, "c-9", 2), PRINCIPAL) == Opened("c-9", 2, "")  # none named


def test_the_instance_is_under_the_mac() -> None:
    s = sealer()
    token = s.seal(PRINCIPAL, "c", 0, instance="inst-a")
    raw = base64.urlsafe_b64decode(token[4:] + "=" * (-len(token[4:]) % 4))
    start = raw.index(b"inst-a")
    retargeted = raw[:start] + b"inst-b" + raw[start + 6 :]  # another instance of the same length
    altered = "mg1." + base64.urlsafe_b64encode(retargeted).rstrip(b"=").decode()
    assert reason(s.open(altered, PRINCIPAL)) == "tampered"


@pytest.mark.parametrize("instance", ["a.b", "a b", "é", "x" * 65, "a/b"])
def test_seal_refuses_an_instance_that_is_not_an_id(instance: str) -> None:
    with pytest.raises(ValueError, match="instance"):
        sealer().seal(PRINCIPAL, "c", 0, instance=instance)


def test_the_longest_instance_round_trips() -> None:
    s = sealer()
    token = s.seal(PRINCIPAL, "c", 1, instance="i" * 64)
    assert s.open(token, PRINCIPAL) == Opened("c", 1, "i" * 64)


# -- a modern child's own requestState, carried in the envelope ----------------------------------------------


@pytest.mark.parametrize(
    ("holder", "state"),
    [
        pytest.param("pool-1", "opaque-state", id="plain"),
        pytest.param("github/pool-12", "", id="named-server-empty-state"),
        pytest.param("pool-2", "a\x00b\x00", id="nul-in-the-state"),
        pytest.param("pool-3", 'ünïcødé ☃ {"json": [1, 2]}', id="unicode-json"),
        pytest.param("", "s", id="no-holder"),
    ],
)
def test_a_carried_state_comes_back_byte_for_byte(holder: str, state: str) -> None:
    s = sealer()
    token = s.seal(PRINCIPAL, carry(holder, state), 0, binding="b", instance="inst-a")
    opened = s.open(token, PRINCIPAL, binding="b")
    assert isinstance(opened, Opened) and opened.instance == "inst-a"
    assert carried(opened.continuation) == (holder, state)


@pytest.mark.parametrize("continuation", ["", "no-separator", "bridge-continuation-id"])
def test_a_continuation_carry_did_not_make_is_not_carried(continuation: str) -> None:
    assert carried(continuation) is None


def test_a_holder_with_nul_is_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        carry("pool\x00-1", "s")


def test_a_larger_max_chars_carries_a_long_state_and_still_bounds_open() -> None:
    long_state = "s" * 100_000
    big = StateSealer(KEY, clock=FakeClock(), max_chars=200_000)
    token = big.seal(PRINCIPAL, carry("pool-1", long_state), 0)
    opened = big.open(token, PRINCIPAL)
    assert isinstance(opened, Opened) and carried(opened.continuation) == ("pool-1", long_state)
    assert reason(sealer().open(token, PRINCIPAL)) == "malformed"  # past the default bound: never decoded
    assert reason(big.open("mg1." + "A" * 200_001, PRINCIPAL)) == "malformed"
    with pytest.raises(ValueError, match="too long"):
        big.seal(PRINCIPAL, "x" * 200_000, 0)


def test_a_sealer_runs_no_hmac_until_it_seals_or_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its keys are derived when first needed: a worker that never seals a requestState runs no OpenSSL digest
    (~1 MB of libcrypto's pages in its RSS otherwise; issue 24)."""
    import hmac

    def no_hmac(*args: object, **kwargs: object) -> object:
        raise AssertionError("an HMAC")

    with monkeypatch.context() as patched:
        patched.setattr(hmac, "new", no_hmac)
        made = sealer()
        StateSealer()
    assert made.open(made.seal(PRINCIPAL, "c", 1), PRINCIPAL) == Opened("c", 1)


# sealed by the sealer that derived its keys as it was made (40d39b6): an instance that derives them later
# opens it, and seals the same (a fleet's instances of two versions side by side, in a rolling redeploy)
EARLIER = (
    "mg1.AAAAAwAAAAA7nJ7AfQ0T4W5LdK5k59L2CpsGeqqHiPMIN3jXBbPr_4-xbPMDaS0xYy0xWub6UwZGcbhgjxitbCnAoT3TNe1U02Sj"
    "leD6lMOvkuE"
)


def test_a_token_is_the_one_the_keys_derived_up_front_made() -> None:
    clock = FakeClock()
    assert sealer(clock).seal(PRINCIPAL, "c-1", 3, binding="tools/call", instance="i-1") == EARLIER
    assert sealer(clock).open(EARLIER, PRINCIPAL, binding="tools/call") == Opened("c-1", 3, "i-1")
