"""Sign-in decisions as tables: challenge parsing, discovery URLs, resource and issuer matching, scope
selection, the client's token endpoint method, the iss check, and where the token may go."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.config.settings import RelaySettings, load
from mcpgate.relay.oauth import discovery as d
from mcpgate.relay.oauth import flow, registration
from mcpgate.relay.oauth.session import OAuthSession


def test_challenge_parameters() -> None:
    c = d.parse_challenge('Bearer error="insufficient_scope", scope="a b", resource_metadata="https://x/.wk"')
    assert c == d.Challenge("https://x/.wk", ("a", "b"), "insufficient_scope") and c.insufficient_scope
    assert d.parse_challenge('Basic realm="r", Bearer scope=read').scope == ("read",)
    assert d.parse_challenge(None) == d.Challenge() == d.parse_challenge("Bearer")


@pytest.mark.parametrize(
    ("server", "header", "expected"),
    [
        (
            "https://h/mcp",
            None,
            ["https://h/.well-known/oauth-protected-resource/mcp", "https://h/.well-known/oauth-protected-resource"],
        ),
        ("https://H:8443/", None, ["https://h:8443/.well-known/oauth-protected-resource"]),
        (
            "https://h/a/b/",
            "https://h/custom.json",
            [
                "https://h/custom.json",
                "https://h/.well-known/oauth-protected-resource/a/b",
                "https://h/.well-known/oauth-protected-resource",
            ],
        ),
    ],
)
def test_prm_urls(server: str, header: str | None, expected: list[str]) -> None:
    assert d.prm_urls(server, header) == expected


def test_authorization_server_metadata_urls() -> None:
    assert d.as_metadata_urls("https://a.example") == [
        "https://a.example/.well-known/oauth-authorization-server",
        "https://a.example/.well-known/openid-configuration",
    ]
    assert d.as_metadata_urls("https://a.example/tenant1/") == [
        "https://a.example/.well-known/oauth-authorization-server/tenant1",
        "https://a.example/.well-known/openid-configuration/tenant1",
        "https://a.example/tenant1/.well-known/openid-configuration",
    ]


@pytest.mark.parametrize(
    ("resource", "server", "ok"),
    [
        ("https://h/mcp", "https://h/mcp", True),
        ("https://h", "https://h/mcp", True),
        ("https://h/mcp", "https://h/mcp/", True),
        ("https://h/mc", "https://h/mcp", False),
        ("https://evil.example.com/mcp", "http://localhost:1/mcp", False),
        ("http://h/mcp", "https://h/mcp", False),
    ],
)
def test_resource_matches(resource: str, server: str, ok: bool) -> None:
    assert d.resource_matches(resource, server) is ok


def test_issuer_comparison() -> None:
    assert d.same_issuer("https://a", "https://a") and d.same_issuer("https://a/", "https://a")
    assert not d.same_issuer("https://a/t/", "https://a/t") and not d.same_issuer("https://attacker", "https://a")


def discovery(**metadata: Any) -> d.Discovery:
    return d.Discovery("https://h/mcp", "https://a", {"issuer": "https://a", **metadata}, ("s1", "s2"))


def test_scope_selection() -> None:
    plain = discovery()
    assert d.choose_scope("", d.Challenge(scope=("c",)), plain) == ("c",)
    assert d.choose_scope("", d.Challenge(), plain) == ("s1", "s2")
    assert d.choose_scope("", d.Challenge(), d.Discovery("r", "i", {})) == ()
    assert d.choose_scope("u v", d.Challenge(scope=("c",)), plain) == ("u", "v")
    assert d.choose_scope("", d.Challenge(scope=("w",)), plain, held=("b",)) == ("b", "w")  # step-up: the union
    offline = discovery(scopes_supported=["s1", "offline_access"])
    assert d.choose_scope("", d.Challenge(), offline) == ("s1", "s2", "offline_access")
    assert d.choose_scope("", d.Challenge(), d.Discovery("r", "i", {"scopes_supported": ["offline_access"]})) == ()


def test_token_endpoint_method() -> None:
    assert registration.auth_method(["client_secret_post"], True) == "client_secret_post"
    assert registration.auth_method(None, True) == "client_secret_basic"
    assert registration.auth_method(["client_secret_basic"], False) == "none"
    assert registration.registration_request({}, "http://127.0.0.1:5/callback")["application_type"] == "native"


def test_saved_registration_is_bound_to_its_issuer() -> None:
    saved = {"client_id": "c", "issuer": "https://a", "source": "dcr", "redirect_uris": ["http://127.0.0.1:5/cb"]}
    assert registration.usable(saved, "https://a", "http://127.0.0.1:5/cb")
    assert not registration.usable(saved, "https://b", "http://127.0.0.1:5/cb")
    assert not registration.usable(saved, "https://a", "http://127.0.0.1:6/cb")


@pytest.mark.parametrize(
    ("advertised", "params", "refused"),
    [
        (True, {"code": "x", "iss": "https://a"}, False),
        (True, {"code": "x"}, True),
        (True, {"code": "x", "iss": "https://a/"}, True),
        (None, {"code": "x"}, False),
        (None, {"code": "x", "iss": "https://evil"}, True),
        (True, {"error": "access_denied"}, True),
    ],
)
def test_iss_check(advertised: bool | None, params: dict[str, str], refused: bool) -> None:
    found = discovery(authorization_response_iss_parameter_supported=advertised)
    if refused:
        with pytest.raises(d.SignInError):
            flow.check_response(params, found)
    else:
        assert flow.check_response(params, found) == "x"


def test_pkce_is_required_where_metadata_is_published() -> None:
    with pytest.raises(d.SignInError, match="PKCE"):
        flow.require_pkce(discovery(code_challenge_methods_supported=["plain"]))
    flow.require_pkce(discovery(code_challenge_methods_supported=["S256"]))


def test_the_token_goes_only_to_its_server() -> None:
    settings = load(RelaySettings, {}, url="https://h.example:8443/mcp")
    session = OAuthSession(settings, store=None)  # type: ignore[arg-type]
    assert session.covers("https://h.example:8443/messages?session=1")
    assert not session.covers("https://h.example/mcp") and not session.covers("https://other.example:8443/mcp")
    assert not session.covers("http://h.example:8443/mcp")
