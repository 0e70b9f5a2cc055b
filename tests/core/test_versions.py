"""Protocol revision rules: negotiation, the MCP-Protocol-Version header, batching."""

from __future__ import annotations

import pytest

from mcpgate.core import versions as v


@pytest.mark.parametrize(
    ("requested", "supported", "answer"),
    [
        (v.V2024_11_05, v.HANDSHAKE, v.V2024_11_05),
        (v.V2025_03_26, v.HANDSHAKE, v.V2025_03_26),
        (v.V2025_06_18, v.HANDSHAKE, v.V2025_06_18),
        (v.V2025_11_25, v.HANDSHAKE, v.V2025_11_25),
        (v.V2026_07_28, v.HANDSHAKE, v.LATEST_HANDSHAKE),  # the modern era has no handshake
        ("2099-01-01", v.HANDSHAKE, v.LATEST_HANDSHAKE),
        ("1999-01-01", v.HANDSHAKE, v.LATEST_HANDSHAKE),
        ("", v.HANDSHAKE, v.LATEST_HANDSHAKE),
        ("garbage", v.HANDSHAKE, v.LATEST_HANDSHAKE),
        (None, v.HANDSHAKE, v.LATEST_HANDSHAKE),
        (20250618, v.HANDSHAKE, v.LATEST_HANDSHAKE),
        ([v.V2025_06_18], v.HANDSHAKE, v.LATEST_HANDSHAKE),
        (v.V2024_11_05, v.STREAMABLE_SESSION, v.V2025_11_25),
        (v.V2025_06_18, (v.V2025_03_26,), v.V2025_03_26),
        (v.V2025_06_18, (v.V2025_11_25, v.V2025_03_26), v.V2025_11_25),  # order of the tuple does not matter
    ],
)
def test_negotiate(requested: object, supported: tuple[str, ...], answer: str) -> None:
    assert v.negotiate(requested, supported) == answer


def test_negotiate_default_supported_is_handshake() -> None:
    assert v.negotiate("nope") == v.LATEST_HANDSHAKE == max(v.HANDSHAKE)


@pytest.mark.parametrize(
    ("value", "negotiated", "version"),
    [
        pytest.param(None, None, v.V2025_03_26, id="absent-no-session-version"),
        pytest.param(None, v.V2025_06_18, v.V2025_06_18, id="absent-uses-negotiated"),
        pytest.param(None, v.V2024_11_05, v.V2024_11_05, id="absent-negotiated-2024"),
        pytest.param(v.V2024_11_05, None, v.V2024_11_05, id="2024-11-05"),
        pytest.param(v.V2025_03_26, None, v.V2025_03_26, id="2025-03-26"),
        pytest.param(v.V2025_06_18, None, v.V2025_06_18, id="2025-06-18"),
        pytest.param(v.V2025_11_25, None, v.V2025_11_25, id="2025-11-25"),
        pytest.param(" 2025-06-18 ", None, v.V2025_06_18, id="surrounding-space-stripped"),
        pytest.param(v.V2025_06_18, v.V2025_11_25, v.V2025_06_18, id="present-wins-over-negotiated"),
    ],
)
def test_check_header_accepts(value: str | None, negotiated: str | None, version: str) -> None:
    check = v.check_header(value, negotiated)
    assert check == v.HeaderCheck(version)
    assert check.error is None


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("garbage", id="garbage"),
        pytest.param("", id="empty"),
        pytest.param("2025-06-19", id="near-miss"),
        pytest.param("2025-06-18, 2025-03-26", id="two-values"),
        pytest.param(v.V2026_07_28, id="modern-revision-inside-a-session"),
        pytest.param("2025-06-18\x00", id="nul"),
    ],
)
def test_check_header_rejects_naming_supported(value: str) -> None:
    check = v.check_header(value, v.V2025_06_18)
    assert check.version is None
    assert check.error is not None
    assert repr(value.strip()) in check.error
    for known in v.HANDSHAKE:  # the error names exactly what would have been accepted
        assert known in check.error
        assert v.check_header(known).error is None


@pytest.mark.parametrize(
    ("version", "batch"),
    [
        (v.V2024_11_05, False),
        (v.V2025_03_26, True),
        (v.V2025_06_18, False),
        (v.V2025_11_25, False),
        (v.V2026_07_28, False),
        (None, False),
        ("garbage", False),
    ],
)
def test_allows_batch(version: str | None, batch: bool) -> None:
    assert v.allows_batch(version) is batch


@pytest.mark.parametrize(
    ("version", "sends", "modern", "priming"),
    [
        (v.V2024_11_05, False, False, False),
        (v.V2025_03_26, False, False, False),
        (v.V2025_06_18, True, False, False),
        (v.V2025_11_25, True, False, True),
        (v.V2026_07_28, False, True, False),
        (None, False, False, False),
        ("garbage", False, False, False),
        ("2099-01-01", False, False, False),
    ],
)
def test_era_predicates(version: str | None, sends: bool, modern: bool, priming: bool) -> None:
    assert v.sends_version_header(version) is sends
    assert v.is_modern(version) is modern
    assert v.priming_event_supported(version) is priming


@pytest.mark.parametrize(
    ("result", "version"),
    [
        ({"protocolVersion": "2025-06-18", "capabilities": {}}, "2025-06-18"),
        ({"protocolVersion": 2025}, None),
        ({}, None),
        (None, None),
        ("2025-06-18", None),
    ],
)
def test_initialize_version(result: object, version: str | None) -> None:
    assert v.initialize_version(result) == version


def test_version_tables_are_consistent() -> None:
    assert set(v.HANDSHAKE) | set(v.MODERN) == set(v.KNOWN)
    assert set(v.STREAMABLE_SESSION) <= set(v.HANDSHAKE)
    assert not set(v.MODERN) & set(v.HANDSHAKE)
    assert v.DEFAULT_HEADER_VERSION in v.STREAMABLE_SESSION
    assert list(v.KNOWN) == sorted(v.KNOWN)


@pytest.mark.parametrize(
    ("version", "resumable"),
    [
        (None, True),  # the initialize stream, before the child has named the revision
        ("2024-11-05", False),  # HTTP+SSE: no event ids
        ("2025-03-26", True),
        ("2025-06-18", True),
        ("2025-11-25", True),
        ("2026-07-28", False),  # resumability removed
        ("2099-01-01", False),
    ],
)
def test_resumable_streams(version: str | None, resumable: bool) -> None:
    assert v.resumable_streams(version) is resumable
