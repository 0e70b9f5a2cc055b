"""Which redirect URIs a client may register, and whether a presented one is a registered one (pure).

Allowed: http on a loopback host (127.0.0.1, [::1], localhost) on any port, RFC 8252's native-app redirect;
https to any host; anything else only when MCPGATE_OAUTH_REDIRECT_ALLOWLIST names it, as an exact URI or
as a scheme ("cursor:") for all of that scheme's URIs (a scheme entry never opens http: a non-loopback http
URI must be listed exactly). Never javascript:, data:, file:, vbscript: or blob:, whatever the allowlist
says. No fragments, no userinfo, no wildcards, no whitespace or control characters.

Matching is exact (a simple string comparison), except that a loopback redirect may come back on another port
than the one registered (RFC 8252 section 7.3: the port is picked when the app starts listening).
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
NEVER_SCHEMES = frozenset({"javascript", "data", "file", "vbscript", "blob"})
MAX_LENGTH = 2000


def problem(uri: str, allowlist: tuple[str, ...] = ()) -> str | None:
    """Why `uri` may not be registered as a redirect URI, or None when it may."""
    if not isinstance(uri, str) or not uri:
        return "a redirect URI must be a non-empty string"
    if len(uri) > MAX_LENGTH:
        return f"redirect URI longer than {MAX_LENGTH} characters"
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in uri):
        return "redirect URI contains whitespace or control characters"
    if "#" in uri:
        return "redirect URI must not carry a fragment (#)"
    if "*" in uri:
        return "redirect URI must not carry wildcards (*)"
    parts = _split(uri)
    if parts is None or not parts.scheme:
        return "redirect URI is not an absolute URI"
    scheme = parts.scheme
    if scheme in NEVER_SCHEMES:
        return f"{scheme}: redirect URIs are never allowed"
    if "@" in parts.netloc:
        return "redirect URI must not carry userinfo (user@)"
    if scheme in ("http", "https"):
        return _web_problem(uri, parts, allowlist)
    if uri in allowlist or f"{scheme}:" in allowlist:
        return None
    return (
        f"redirect URI scheme {scheme}: is not allowed: use https or a loopback http URI, or add it to "
        "MCPGATE_OAUTH_REDIRECT_ALLOWLIST"
    )


def matches(registered: str, presented: str) -> bool:
    """Whether `presented` names the `registered` redirect URI: the same string, or the same loopback http URI
    on another port."""
    if presented == registered:
        return True
    ours, theirs = _loopback_parts(registered), _loopback_parts(presented)
    return ours is not None and ours == theirs


def is_loopback(uri: str) -> bool:
    """Whether `uri` is an http URI on a loopback host (any port)."""
    return _loopback_parts(uri) is not None


def _web_problem(uri: str, parts: SplitResult, allowlist: tuple[str, ...]) -> str | None:
    try:
        host, _port = parts.hostname, parts.port
    except ValueError:
        return "redirect URI has an invalid port"
    if not host:
        return "redirect URI has no host"
    if parts.scheme == "https" or host in LOOPBACK_HOSTS or uri in allowlist:
        return None
    return (
        "http redirect URIs are allowed only on a loopback host (127.0.0.1, [::1], localhost); use https, or "
        "add the exact URI to MCPGATE_OAUTH_REDIRECT_ALLOWLIST"
    )


def _loopback_parts(uri: str) -> tuple[str, str, str] | None:
    """(host, path, query) of an http URI on a loopback host with no userinfo and no fragment, else None."""
    if not isinstance(uri, str) or "#" in uri or problem(uri) is not None:
        return None
    parts = _split(uri)
    if parts is None or parts.scheme != "http" or "@" in parts.netloc:
        return None
    host = parts.netloc
    colon = host.rfind(":")
    if colon > host.rfind("]"):
        host = host[:colon]
    if host.strip("[]") not in LOOPBACK_HOSTS:
        return None
    return host, parts.path, parts.query


def _split(uri: str) -> SplitResult | None:
    try:
        return urlsplit(uri)
    except ValueError:
        return None
