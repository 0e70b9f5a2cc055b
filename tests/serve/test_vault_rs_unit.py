"""The resource-server page sign-in's pure parts (mcpgate/serve/vault/rs_signin.py): where a sign-in may come back
to, the cookie's key, the spent-state table (single use, bounded), a secret without its client id refused."""

from __future__ import annotations

import base64
import os
from types import SimpleNamespace
from typing import Any, cast

import pytest

from mcpgate.config.declarations import SettingsError
from mcpgate.config.settings import Settings
from mcpgate.serve.vault import rs_signin
from mcpgate.serve.vault.crypto import key_bytes


@pytest.mark.parametrize(
    ("asked", "back"),
    [
        ("/vault", "/vault"),
        ("/vault/oauth/tracker", "/vault/oauth/tracker"),
        ("/vault/oauth/a%2Fb", "/vault/oauth/a%2Fb"),
        ("https://evil.example/", "/vault"),
        ("//evil.example/vault", "/vault"),
        ("/vault/../admin", "/vault"),
        ("/vault/oauth/", "/vault"),
        ("/vault/oauth/x?y=1", "/vault"),
        ("/vault/oauth/x\n", "/vault"),
        ("", "/vault"),
    ],
)
def test_a_sign_in_comes_back_to_the_vaults_pages_only(asked: str, back: str) -> None:
    assert rs_signin.back_path(asked) == back


def test_the_cookie_key_is_derived_from_the_vault_key_and_is_not_it() -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    derived = rs_signin.cookie_key(key)
    assert derived == rs_signin.cookie_key(key) and len(derived) == 32
    assert derived != key_bytes(key)
    assert derived != rs_signin.cookie_key(base64.b64encode(os.urandom(32)).decode())


def page(**values: Any) -> rs_signin.PageSignIn:
    settings = Settings.from_env(
        {
            "MCPGATE_AUTH_MODE": "resource-server",
            "MCPGATE_PUBLIC_URL": "https://gw.example",
            "MCPGATE_OAUTH_ISSUER": "https://as.example",
            **values,
        }
    )
    return rs_signin.PageSignIn(settings, cast(Any, SimpleNamespace(resource="https://gw.example")))


def test_a_state_is_spent_once_and_the_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rs_signin, "SPENT_STATES", 3)
    signin = page()
    assert signin._spend("a") and not signin._spend("a")
    for state in ("b", "c", "d"):
        assert signin._spend(state)
    assert len(signin._spent) == 3 and signin._spend("a")  # the oldest forgotten first


def test_the_resource_asked_for_is_the_audience_the_endpoint_accepts() -> None:
    assert page().resource == "https://gw.example"
    assert page(MCPGATE_OAUTH_AUDIENCE="api://mcp").resource == "api://mcp"
    assert page().redirect_uri == "https://gw.example/vault/callback"


def test_a_client_secret_without_its_client_id_is_refused() -> None:
    with pytest.raises(SettingsError, match="MCPGATE_VAULT_CLIENT_ID"):
        page(MCPGATE_VAULT_CLIENT_SECRET="s3cret")
