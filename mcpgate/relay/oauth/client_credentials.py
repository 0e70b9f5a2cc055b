"""Machine credentials for a remote upstream: an mcpServers entry's `"auth"` of type client_credentials.

    parse(raw, where, environ=None) -> ClientCredentials     raises ClientCredentialsError (a SettingsError)
    ClientCredentials.auth(upstream_url, timeout=...)        -> ClientCredentialsAuth, what HttpClient.auth takes
    ClientCredentials.close()                                closes the token endpoint connections

The entry's object:

    "auth": {"type": "client_credentials", "client_id": "...",
             "client_secret_env": "NAME"        a secret from the environment variable NAME, or
             "private_key_file": "path",        a PEM private key (RSA: RS256, EC P-256: ES256, P-384/P-521: ES384/512)
             "key_id": "...",                   optional with a key: the assertion's kid
             "token_url": "https://...",        optional: else discovered from the upstream's metadata
             "scope": "a b",                    optional
             "auth_method": "client_secret_basic" (the default with a secret) | "client_secret_post"
                          | "private_key_jwt" (with a key, the only one)}

The secret and the key are read at parse time (a variable that is not set is an error naming it); no message
and no repr holds either. Every message starts with `where` and names the field (`where: auth.<field>: ...`, or
`where: <field>: ...` when `where` already ends with "auth").

`ClientCredentialsError` derives from mcpgate.config.declarations.SettingsError and not from the config file's
own ConfigError: serve/servers/remote_entry.py imports this module (lazily, only for entries that have an auth),
so this module does not import it back. Its message is complete: remote_entry raises it again with `str(exc)`,
and config_file its ConfigError.

`auth(url)` returns the same ClientCredentialsAuth for the same upstream URL every time (one token shared by
every session to that upstream); its fetching, caching and errors are mcpgate.relay.oauth.client_token's.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from joserfc.errors import JoseError
from joserfc.jwk import ECKey, RSAKey

from mcpgate.config.declarations import SettingsError
from mcpgate.relay.oauth.client_token import TOKEN_TIMEOUT, Client, ClientCredentialsAuth, PrivateKey, usable_endpoint

KEYS = frozenset(
    {"type", "client_id", "client_secret_env", "private_key_file", "key_id", "token_url", "scope", "auth_method"}
)
SECRET_METHODS = ("client_secret_basic", "client_secret_post")
KEY_METHOD = "private_key_jwt"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_FIELD_CHARS = 1024  # client_id, key_id, scope, token_url
MAX_KEY_BYTES = 64 * 1024
MIN_RSA_BITS = 2048
EC_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
MAX_UPSTREAMS = 16  # upstream URLs one entry's credentials keep a shared token for


class ClientCredentialsError(SettingsError):
    """The auth object cannot be used: the message names where, the field and the problem (never a secret)."""


@dataclass(frozen=True)
class ClientCredentials:
    """An entry's parsed client credentials; equal when configured alike (reload compares them)."""

    client: Client
    _auths: dict[str, ClientCredentialsAuth] = field(default_factory=dict, repr=False, compare=False, hash=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False, hash=False)

    def auth(self, upstream_url: str, timeout: float = TOKEN_TIMEOUT) -> ClientCredentialsAuth:
        """The token source for requests to `upstream_url` (assign it to HttpClient.auth): shared per URL."""
        with self._lock:
            shared = self._auths.get(upstream_url)
            if shared is None:
                shared = ClientCredentialsAuth(self.client, upstream_url, timeout)
                if len(self._auths) < MAX_UPSTREAMS:
                    self._auths[upstream_url] = shared
            return shared

    def close(self) -> None:
        with self._lock:
            auths = list(self._auths.values())
            self._auths.clear()
        for auth in auths:
            auth.close()


def parse(raw: Any, where: str, environ: Mapping[str, str] | None = None) -> ClientCredentials:
    """The entry's `auth` object as ClientCredentials; raises ClientCredentialsError."""
    env = os.environ if environ is None else environ
    if not isinstance(raw, dict):
        raise _error(where, "", "must be a JSON object")
    unknown = sorted(str(name) for name in raw if name not in KEYS)
    if unknown:
        raise _error(where, unknown[0], f"not a client_credentials field (known: {', '.join(sorted(KEYS))})")
    if raw.get("type") != "client_credentials":
        raise _error(where, "type", 'must be "client_credentials"')
    client_id = _text(raw, "client_id", where, required=True)
    token_url = _text(raw, "token_url", where)
    if token_url is not None and (problem := usable_endpoint(token_url)) is not None:
        raise _error(where, "token_url", problem)
    scope = _text(raw, "scope", where)
    has_secret, has_key = "client_secret_env" in raw, "private_key_file" in raw
    if has_secret == has_key:
        raise _error(where, "client_secret_env", "give exactly one of client_secret_env and private_key_file")
    client_id = client_id or ""
    if has_secret:
        method = _method(raw, where, SECRET_METHODS)
        if "key_id" in raw:
            raise _error(where, "key_id", "goes with private_key_file only")
        secret = _secret(raw, where, env)
        return ClientCredentials(Client(client_id, method, secret=secret, token_url=token_url, scope=scope))
    _method(raw, where, (KEY_METHOD,))
    path = _text(raw, "private_key_file", where, required=True) or ""
    pem = _read_pem(path, where)
    key, alg = _key(pem, where)
    key_id = _text(raw, "key_id", where)
    return ClientCredentials(
        Client(client_id, KEY_METHOD, key=key, key_pem=pem, key_id=key_id, alg=alg, token_url=token_url, scope=scope)
    )


def _error(where: str, name: str, problem: str) -> ClientCredentialsError:
    """`where: auth.<name>: problem`, or `where: <name>: problem` when `where` already ends with the auth key."""
    if where.rstrip().endswith("auth"):
        return ClientCredentialsError(f"{where}{': ' + name if name else ''}: {problem}")
    return ClientCredentialsError(f"{where}: auth{'.' + name if name else ''}: {problem}")


def _text(raw: dict[str, Any], name: str, where: str, required: bool = False) -> str | None:
    value = raw.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _error(where, name, "must be a non-empty string")
    if len(value) > MAX_FIELD_CHARS or not value.isprintable():
        raise _error(where, name, f"must be printable and at most {MAX_FIELD_CHARS} characters")
    return value


def _method(raw: dict[str, Any], where: str, allowed: tuple[str, ...]) -> str:
    value = raw.get("auth_method", allowed[0])
    if value not in allowed:
        with_what = "a secret" if allowed == SECRET_METHODS else "a private key"
        raise _error(where, "auth_method", f"must be {' or '.join(allowed)} with {with_what}")
    return str(value)


def _secret(raw: dict[str, Any], where: str, env: Mapping[str, str]) -> str:
    name = raw.get("client_secret_env")
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        raise _error(where, "client_secret_env", "must name an environment variable (letters, digits, _)")
    value = env.get(name)
    if not value:
        raise _error(where, "client_secret_env", f"names {name}, which is not set (or empty) in the environment")
    return value


def _read_pem(path: str, where: str) -> str:
    try:
        with open(os.path.expanduser(path), "rb") as f:
            data = f.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise _error(where, "private_key_file", f"cannot be read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_KEY_BYTES:
        raise _error(where, "private_key_file", f"is larger than {MAX_KEY_BYTES} bytes: not a PEM key")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise _error(where, "private_key_file", "is not a PEM file") from None


def _key(pem: str, where: str) -> tuple[PrivateKey, str]:
    """The private key of a PEM and its algorithm: RS256 for RSA, ES256/384/512 for EC by curve."""
    for kind in (RSAKey, ECKey):
        try:
            key: PrivateKey = kind.import_key(pem)
        except (JoseError, ValueError, TypeError):
            continue
        if not key.is_private:
            raise _error(where, "private_key_file", "holds a public key: the private key is needed")
        if isinstance(key, RSAKey):
            if key.raw_value.key_size < MIN_RSA_BITS:
                raise _error(where, "private_key_file", f"holds an RSA key under {MIN_RSA_BITS} bits")
            return key, "RS256"
        alg = EC_ALGORITHMS.get(str(key.curve_name))
        if alg is None:
            raise _error(where, "private_key_file", f"holds an EC key on an unsupported curve ({key.curve_name})")
        return key, alg
    raise _error(where, "private_key_file", "holds no RSA or EC private key in PEM form")
