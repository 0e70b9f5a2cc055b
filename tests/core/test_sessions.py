"""Session registry: ids, cap, touch and idle expiry with an injected clock."""

from __future__ import annotations

import itertools

import pytest

from mcpgate.core.sessions import (
    VISIBLE_ASCII,
    SessionLimitReached,
    SessionRegistry,
    is_valid_session_id,
    new_session_id,
)


def test_new_ids_are_visible_ascii_valid_and_unique() -> None:
    ids = [new_session_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for sid in ids:
        assert all(ord(ch) in VISIBLE_ASCII for ch in sid)
        assert is_valid_session_id(sid)
        assert len(sid) >= 32


def test_registry_ids_are_unique_even_when_the_mint_repeats() -> None:
    minted = iter(["a", "a", "a", "b", "b", "c"])
    registry: SessionRegistry[int] = SessionRegistry(10, 60.0, mint=lambda: next(minted))
    assert [registry.add(i, 0.0) for i in range(3)] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        pytest.param("abc", True, id="plain"),
        pytest.param("!", True, id="lowest-visible"),
        pytest.param("~", True, id="highest-visible"),
        pytest.param("A-_.~:/+=", True, id="punctuation"),
        pytest.param("x" * 256, True, id="at-length-cap"),
        pytest.param("x" * 257, False, id="over-length-cap"),
        pytest.param("", False, id="empty"),
        pytest.param("a b", False, id="space"),
        pytest.param("a\tb", False, id="tab"),
        pytest.param("a\r\nb", False, id="crlf"),
        pytest.param("a\x00", False, id="nul"),
        pytest.param("a\x7f", False, id="del"),
        pytest.param("caf\u00e9", False, id="non-ascii"),
        pytest.param("\u2028", False, id="u2028"),
    ],
)
def test_is_valid_session_id(value: str, valid: bool) -> None:
    assert is_valid_session_id(value) is valid


@pytest.mark.parametrize("cap", [1, 2, 5])
def test_cap_raises_session_limit_reached(cap: int) -> None:
    registry: SessionRegistry[str] = SessionRegistry(cap, 60.0)
    ids = [registry.add(f"s{i}", 0.0) for i in range(cap)]
    with pytest.raises(SessionLimitReached) as info:
        registry.add("one too many", 0.0)
    assert info.value.limit == cap
    assert len(registry) == cap
    registry.remove(ids[0])
    new = registry.add("fits again", 0.0)
    assert registry.get(new) == "fits again"


def test_get_remove_iter() -> None:
    registry: SessionRegistry[str] = SessionRegistry(5, 60.0)
    a, b = registry.add("A", 0.0), registry.add("B", 0.0)
    assert registry.get(a) == "A" and registry.get("nope") is None
    assert sorted(registry) == sorted([a, b])
    for sid in registry:  # iterating a snapshot: removal while iterating is safe
        registry.remove(sid)
    assert len(registry) == 0
    assert registry.remove(a) is None


@pytest.mark.parametrize(
    ("created", "touched", "now", "expired"),
    [
        pytest.param(0.0, None, 29.9, False, id="fresh"),
        pytest.param(0.0, None, 30.0, True, id="exactly-ttl-idle"),
        pytest.param(0.0, None, 100.0, True, id="long-idle"),
        pytest.param(0.0, 20.0, 45.0, False, id="touch-extends"),
        pytest.param(0.0, 20.0, 50.0, True, id="touched-then-idle"),
    ],
)
def test_touch_and_expired(created: float, touched: float | None, now: float, expired: bool) -> None:
    registry: SessionRegistry[None] = SessionRegistry(5, 30.0)
    sid = registry.add(None, created)
    if touched is not None:
        registry.touch(sid, touched)
    assert (registry.expired(now) == [sid]) is expired
    assert sid in list(registry)  # expired() does not remove


def test_expired_lists_only_idle_sessions_and_touch_of_unknown_is_ignored() -> None:
    clock = itertools.count(0.0, 10.0)
    registry: SessionRegistry[int] = SessionRegistry(10, 25.0)
    ids = [registry.add(i, next(clock)) for i in range(4)]  # created at 0, 10, 20, 30
    registry.touch("unknown", 0.0)
    registry.touch(ids[0], 30.0)
    assert registry.expired(45.0) == [ids[1], ids[2]]
    registry.remove(ids[1])
    assert registry.expired(45.0) == [ids[2]]
    assert "unknown" not in list(registry)


@pytest.mark.parametrize(("cap", "ttl"), [(0, 1.0), (1, 0.0), (1, -1.0)])
def test_limits_must_be_positive(cap: int, ttl: float) -> None:
    with pytest.raises(ValueError):
        SessionRegistry(cap, ttl)


def test_create_builds_the_session_with_its_id_before_registering_it() -> None:
    registry: SessionRegistry[tuple[str, bool]] = SessionRegistry(5, 60.0, mint=iter(["a", "a", "b"]).__next__)
    first = registry.create(lambda sid: (sid, registry.get(sid) is not None), 0.0)
    second = registry.create(lambda sid: (sid, registry.get(sid) is not None), 0.0)
    assert first == ("a", False) and second == ("b", False)  # built knowing its id, registered after
    assert registry.get("a") == first and registry.get("b") == second


def test_create_registers_nothing_when_the_build_fails_or_the_cap_is_reached() -> None:
    registry: SessionRegistry[str] = SessionRegistry(1, 60.0)
    built: list[str] = []

    def failing(sid: str) -> str:
        built.append(sid)
        raise RuntimeError("cannot build")

    with pytest.raises(RuntimeError):
        registry.create(failing, 0.0)
    assert len(registry) == 0 and registry.get(built[0]) is None
    registry.create(lambda sid: sid, 0.0)
    with pytest.raises(SessionLimitReached):
        registry.create(failing, 0.0)
    assert len(built) == 1 and len(registry) == 1
