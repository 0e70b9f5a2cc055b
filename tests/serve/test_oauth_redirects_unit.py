"""Tables for the pure rules of issue 12's client handling: which redirect URIs a client may register and
how a presented one is matched (serve/oauth/redirects.py), which addresses the document fetcher may connect to
(safe_fetch.public_only), which client id URLs are acceptable, how long a document is cached, and what a
client id metadata document must hold (serve/oauth/cimd.py)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from mcpgate.serve.oauth import cimd, redirects, safe_fetch

ALLOW = ("cursor:", "com.example.app:/oauth", "http://intranet.example/cb")

# (uri, allowlist, the refusal's tell-tale words or None when allowed)
REDIRECTS: list[tuple[str, tuple[str, ...], str | None]] = [
    ("http://127.0.0.1/callback", (), None),
    ("http://127.0.0.1:8765/callback", (), None),
    ("http://[::1]:8765/callback", (), None),
    ("http://localhost:3000/cb?x=1", (), None),
    ("https://app.example.com/oauth/callback", (), None),
    ("https://app.example.com:8443/cb", (), None),
    ("cursor://anysphere.cursor-retrieval/oauth/callback", ALLOW, None),
    ("com.example.app:/oauth", ALLOW, None),
    ("http://intranet.example/cb", ALLOW, None),
    ("http://intranet.example/other", ALLOW, "loopback host"),
    ("http://app.example.com/cb", ("http:",), "loopback host"),  # a scheme entry never opens http wholesale
    ("cursor://anything", (), "MCPGATE_OAUTH_REDIRECT_ALLOWLIST"),
    ("com.example.app:/other", ALLOW, "not allowed"),
    ("http://app.example.com/cb", (), "loopback host"),
    ("http://localhost.evil.example/cb", (), "loopback host"),
    ("http://127.0.0.1.nip.io/cb", (), "loopback host"),
    ("http://10.0.0.5/cb", (), "loopback host"),
    ("https://app.example.com/cb#frag", (), "fragment"),
    ("http://127.0.0.1/cb#", (), "fragment"),
    ("https://user:pw@app.example.com/cb", (), "userinfo"),
    ("http://user@127.0.0.1/cb", (), "userinfo"),
    ("https://*.example.com/cb", (), "wildcard"),
    ("https://app.example.com/*", (), "wildcard"),
    ("javascript:alert(1)", ("javascript:",), "never"),
    ("JavaScript:alert(1)", (), "never"),
    ("data:text/html,hi", ("data:",), "never"),
    ("file:///etc/passwd", ("file:",), "never"),
    ("vbscript:msgbox", (), "never"),
    ("/relative/callback", (), "absolute"),
    ("", (), "non-empty"),
    ("https:///nohost", (), "no host"),
    ("http://127.0.0.1:99999/cb", (), "port"),
    ("https://app.example.com/c b", (), "whitespace"),
    ("https://app.example.com/cb\r\nX: y", (), "whitespace"),
    ("https://app.example.com/" + "a" * 2100, (), "longer"),
]


@pytest.mark.parametrize(("uri", "allowlist", "expected"), REDIRECTS)
def test_redirect_problem(uri: str, allowlist: tuple[str, ...], expected: str | None) -> None:
    problem = redirects.problem(uri, allowlist)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem


# (registered, presented, matches)
MATCHES = [
    ("https://app.example.com/cb", "https://app.example.com/cb", True),
    ("https://app.example.com/cb", "https://app.example.com:443/cb", False),
    ("https://app.example.com/cb", "https://app.example.com/cb/", False),
    ("https://app.example.com/cb", "https://APP.example.com/cb", False),
    ("https://app.example.com/cb", "https://app.example.com/cb?x=1", False),
    ("https://app.example.com:8443/cb", "https://app.example.com:9443/cb", False),
    ("http://127.0.0.1/callback", "http://127.0.0.1:51234/callback", True),
    ("http://127.0.0.1:8000/callback", "http://127.0.0.1:51234/callback", True),
    ("http://[::1]:8000/callback", "http://[::1]:1/callback", True),
    ("http://localhost/callback", "http://localhost:4000/callback", True),
    ("http://127.0.0.1/callback", "http://localhost:4000/callback", False),
    ("http://127.0.0.1/callback", "http://[::1]:4000/callback", False),
    ("http://127.0.0.1/callback", "http://127.0.0.1:4000/other", False),
    ("http://127.0.0.1/callback", "http://127.0.0.1:4000/callback?x=1", False),
    ("http://127.0.0.1/callback", "http://127.0.0.1:4000/callback#x", False),
    ("http://127.0.0.1/callback", "http://evil@127.0.0.1:4000/callback", False),
    ("http://127.0.0.1/callback", "https://127.0.0.1:4000/callback", False),
    ("http://127.0.0.1/callback", "http://127.0.0.1.evil.example:4000/callback", False),
    ("cursor://x/cb", "cursor://x/cb", True),
    ("cursor://x/cb", "cursor://x:1/cb", False),
]


@pytest.mark.parametrize(("registered", "presented", "expected"), MATCHES)
def test_redirect_matches(registered: str, presented: str, expected: bool) -> None:
    assert redirects.matches(registered, presented) is expected


# (address, public?)
ADDRESSES = [
    ("8.8.8.8", True),
    ("1.1.1.1", True),
    ("2606:4700:4700::1111", True),
    ("::ffff:8.8.8.8", True),  # IPv4-mapped public
    ("64:ff9b::808:808", True),  # NAT64 of a public address
    ("2002:808:808::1", True),  # 6to4 of a public address
    ("10.1.2.3", False),
    ("172.16.0.1", False),
    ("172.31.255.255", False),
    ("192.168.1.1", False),
    ("127.0.0.1", False),
    ("127.255.255.254", False),
    ("169.254.169.254", False),  # cloud metadata
    ("100.64.0.1", False),  # CGNAT
    ("100.127.255.254", False),
    ("0.0.0.0", False),
    ("0.1.2.3", False),
    ("192.0.0.8", False),
    ("192.0.2.1", False),
    ("198.18.0.1", False),
    ("198.51.100.1", False),
    ("203.0.113.1", False),
    ("224.0.0.251", False),  # multicast
    ("239.255.255.250", False),
    ("240.0.0.1", False),  # reserved
    ("255.255.255.255", False),
    ("::", False),
    ("::1", False),
    ("::127.0.0.1", False),  # IPv4-compatible (deprecated)
    ("::ffff:127.0.0.1", False),  # IPv4-mapped loopback
    ("::ffff:10.0.0.1", False),
    ("::ffff:169.254.169.254", False),
    ("::ffff:100.64.0.1", False),
    ("64:ff9b::7f00:1", False),  # NAT64 of loopback
    ("64:ff9b::a00:1", False),  # NAT64 of private
    ("64:ff9b::a9fe:a9fe", False),  # NAT64 of the metadata address
    ("64:ff9b:1::1", False),  # local-use NAT64
    ("2002:7f00:1::1", False),  # 6to4 of loopback
    ("2002:c0a8:101::1", False),  # 6to4 of private
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),  # Teredo
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", False),  # Teredo whose client is 127.0.0.1
    ("2001:db8::1", False),  # documentation
    ("fc00::1", False),
    ("fd12:3456::1", False),  # unique local
    ("fe80::1", False),  # link-local
    ("fec0::1", False),  # site-local
    ("ff02::1", False),  # multicast
    ("100::1", False),  # discard
]


@pytest.mark.parametrize(("address", "expected"), ADDRESSES)
def test_public_only(address: str, expected: bool) -> None:
    assert safe_fetch.public_only(ipaddress.ip_address(address)) is expected


CIMD_ALLOW = ("https://app.example.com/oauth/client.json", "https://clients.example.org/")

# (client id URL, allowlist, the refusal's tell-tale words or None when accepted)
CLIENT_IDS: list[tuple[str, tuple[str, ...], str | None]] = [
    ("https://app.example.com/oauth/client.json", CIMD_ALLOW, None),
    ("https://clients.example.org/a/b.json", CIMD_ALLOW, None),
    ("https://clients.example.org/a?v=1", CIMD_ALLOW, None),
    ("https://app.example.com/oauth/client.json", (), "ALLOWLIST is empty"),
    ("https://app.example.com/oauth/client.jsonx", CIMD_ALLOW, "not on"),
    ("https://app.example.com/oauth/other.json", CIMD_ALLOW, "not on"),
    ("https://clients.example.org.evil.example/a.json", CIMD_ALLOW, "not on"),
    ("https://clients.example.orgx/a.json", CIMD_ALLOW, "not on"),
    ("https://evil.example/https://clients.example.org/a", CIMD_ALLOW, "not on"),
    ("http://clients.example.org/a.json", (*CIMD_ALLOW, "http://clients.example.org/"), "https"),
    ("https://clients.example.org/a.json#x", CIMD_ALLOW, "fragment"),
    ("https://u:p@clients.example.org/a.json", (*CIMD_ALLOW, "https://u:p@clients.example.org/"), "userinfo"),
    ("https://clients.example.org/", CIMD_ALLOW, "path"),
    ("https://app.example.com", ("https://app.example.com",), "path"),
    ("https://clients.example.org/a/../../b.json", CIMD_ALLOW, "segments"),
    ("https://clients.example.org/a/./b.json", CIMD_ALLOW, "segments"),
    ("https://clients.example.org/a/%2e%2e/b.json", CIMD_ALLOW, "segments"),
    ("https://clients.example.org/a/%2E/b.json", CIMD_ALLOW, "segments"),
    ("https://clients.example.org/a b.json", CIMD_ALLOW, "whitespace"),
    ("https://clients.example.org:99999/a.json", CIMD_ALLOW, "malformed"),
]


@pytest.mark.parametrize(("url", "allowlist", "expected"), CLIENT_IDS)
def test_client_id_url(url: str, allowlist: tuple[str, ...], expected: str | None) -> None:
    problem = cimd.url_problem(url, allowlist)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem


TTLS = [
    (None, cimd.DEFAULT_TTL),
    ("", cimd.DEFAULT_TTL),
    ("public", cimd.DEFAULT_TTL),
    ("max-age=7200", 7200.0),
    ("public, max-age=600", 600.0),
    ("max-age=10", cimd.MIN_TTL),
    ("max-age=0", cimd.MIN_TTL),
    ("no-store", cimd.MIN_TTL),
    ("no-cache, max-age=7200", cimd.MIN_TTL),
    ("max-age=99999999", cimd.MAX_TTL),
    ("max-age=soon", cimd.DEFAULT_TTL),
    ('max-age="900"', 900.0),
]


@pytest.mark.parametrize(("header", "expected"), TTLS)
def test_cache_ttl(header: str | None, expected: float) -> None:
    assert cimd.cache_ttl(header) == expected


URL = "https://clients.example.org/app.json"
GOOD: dict[str, Any] = {
    "client_id": URL,
    "client_name": "Example App",
    "redirect_uris": ["http://127.0.0.1/callback", "https://app.example.com/cb"],
}


def test_good_document() -> None:
    doc = cimd.parse_document(URL, {**GOOD, "grant_types": ["authorization_code", "refresh_token"], "scope": "mcp"})
    assert doc == cimd.ClientDocument(
        client_id=URL,
        client_name="Example App",
        redirect_uris=("http://127.0.0.1/callback", "https://app.example.com/cb"),
        token_endpoint_auth_method="none",
        grant_types=("authorization_code", "refresh_token"),
        scope="mcp",
    )
    assert doc.metadata()["redirect_uris"] == list(doc.redirect_uris)
    assert cimd.parse_document(URL, {**GOOD, "token_endpoint_auth_method": "none"}).client_name == "Example App"


# (changes to the good document, None to drop a field; the refusal's tell-tale words)
BAD_DOCUMENTS: list[tuple[Any, str]] = [
    ([1, 2], "not a JSON object"),
    ({"client_id": URL + "?x"}, "client_id"),
    ({"client_id": "https://clients.example.org/APP.json"}, "client_id"),
    ({"client_id": None}, "client_id"),
    ({"client_name": None}, "client_name"),
    ({"client_name": "  "}, "client_name"),
    ({"client_name": 5}, "client_name"),
    ({"redirect_uris": None}, "redirect_uris"),
    ({"redirect_uris": []}, "redirect_uris"),
    ({"redirect_uris": "https://app.example.com/cb"}, "redirect_uris"),
    ({"redirect_uris": ["https://app.example.com/cb", 7]}, "redirect_uris"),
    ({"redirect_uris": ["http://app.example.com/cb"]}, "loopback host"),
    ({"redirect_uris": ["cursor://x/cb"]}, "not allowed"),
    ({"redirect_uris": ["javascript:alert(1)"]}, "never"),
    ({"redirect_uris": ["https://app.example.com/cb#x"]}, "fragment"),
    ({"token_endpoint_auth_method": "private_key_jwt"}, "not supported"),
    ({"token_endpoint_auth_method": "client_secret_basic"}, "not supported"),
    ({"client_secret": "s3cret"}, "client secret"),
    ({"grant_types": ["client_credentials"]}, "grant_types"),
    ({"grant_types": ["refresh_token"]}, "grant_types"),
    ({"grant_types": "authorization_code"}, "grant_types"),
    ({"response_types": ["token"]}, "response_types"),
    ({"scope": ["mcp"]}, "scope"),
]


@pytest.mark.parametrize(("change", "expected"), BAD_DOCUMENTS)
def test_bad_document(change: Any, expected: str) -> None:
    if isinstance(change, dict):
        document: Any = {**GOOD, **change}
        document = {key: value for key, value in document.items() if value is not None}
    else:
        document = change
    with pytest.raises(cimd.CimdError) as caught:
        cimd.parse_document(URL, document)
    assert expected in str(caught.value)
    assert caught.value.error == "invalid_client"


def test_error_description_alphabet() -> None:
    """A description carries only RFC 6749's error_description characters, whatever the document held."""
    text = str(cimd.CimdError('bad "name"\\ \u00e9\n'))
    assert all(" " <= ch <= "~" and ch not in '"\\' for ch in text)
