"""The local users of the embedded authorization server (MCPGATE_OAUTH_USERS: comma-separated name:hash pairs).

A value that is not a password hash is refused when the gateway starts, naming the user and never the value.
A wrong password and an unknown user give the same answer, after the same work: hashes of different methods or
parameters take different times to check, so every sign-in checks one hash of each cost among the configured
users (the user's own for its cost, a decoy with the same parameters for each other cost; an unknown name: only
decoys). Checking only a decoy of the commonest cost for an unknown name would leave every user of a rarer cost
told apart by time; with one cost (the usual case) a sign-in is one check either way.
"""

from __future__ import annotations

import logging
import secrets

from mcpgate.config.declarations import SettingsError
from mcpgate.serve.oauth import passwords

log = logging.getLogger("mcpgate.oauth.signin")

SETTING = "MCPGATE_OAUTH_USERS"
SUBJECT_PREFIX = "user:"  # the subject a local user's tokens carry: user:<name>


def parse(value: str) -> dict[str, str]:
    """name -> hash from the setting's value; SettingsError for a malformed entry, a duplicate or a plain
    password (the message names the user, never what follows the colon)."""
    users: dict[str, str] = {}
    for position, entry in enumerate((part.strip() for part in value.split(",")), 1):
        if not entry:
            continue
        name, colon, stored = entry.partition(":")
        name = name.strip()
        if not colon or passwords.NAME.fullmatch(name) is None:
            raise SettingsError(f"{SETTING}: entry {position} is not name:hash (name: letters, digits, ._@+-)")
        if name in users:
            raise SettingsError(f"{SETTING}: user {name!r} is listed twice")
        if passwords.shell_expanded(stored.strip()):
            raise SettingsError(
                f"{SETTING}: user {name!r} has what looks like a password hash whose $-parts the shell expanded "
                f"(it holds no $): quote the value in single quotes, {SETTING}='{name}:scrypt:...$...$...'"
            )
        if not passwords.is_hash(stored.strip()):
            raise SettingsError(
                f"{SETTING}: user {name!r} has no password hash (a plain-text password is refused); make one "
                f"with: python -m mcpgate.serve.oauth.passwords {name}"
            )
        try:
            passwords.cost(stored.strip())
        except ValueError:
            raise SettingsError(
                f"{SETTING}: user {name!r} has a hash of a method or parameters not checkable"
            ) from None
        users[name] = stored.strip()
    return users


class Users:
    """Checks a name and password against the configured hashes."""

    def __init__(self, value: str) -> None:
        self.hashes = parse(value)
        self.costs = {name: passwords.cost(stored) for name, stored in self.hashes.items()}
        # cost -> a hash of a random password with those parameters, checked in place of the users of other costs
        kinds = sorted(set(self.costs.values())) or [passwords.cost("scrypt")]  # no users: werkzeug's default
        self.decoys = {kind: passwords.make_hash(secrets.token_urlsafe(16), kind) for kind in kinds}
        if len(self.decoys) > 1:
            log.warning(
                "%s: the password hashes are of %d kinds (%s); every sign-in checks one of each so that user names "
                "cannot be told apart by time: re-hash the passwords to one kind to make sign-ins cheaper",
                SETTING,
                len(self.decoys),
                ", ".join(self.decoys),
            )

    def __bool__(self) -> bool:
        return bool(self.hashes)

    def checked(self, name: str) -> list[str]:
        """The hashes a sign-in as `name` checks, one per cost (the same costs whatever the name)."""
        own = self.costs.get(name)
        return [self.hashes[name] if kind == own else decoy for kind, decoy in self.decoys.items()]

    def subject(self, name: str, password: str) -> str | None:
        """The subject of the user the password signs in, or None (unknown name and wrong password alike)."""
        own = self.hashes.get(name)
        ok = False
        for candidate in self.checked(name):  # every one checked, whatever the earlier ones said
            matched = passwords.matches(candidate, password)
            ok = ok or (matched and candidate == own)
        return SUBJECT_PREFIX + name if ok else None
