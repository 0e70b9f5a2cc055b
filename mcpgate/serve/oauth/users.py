"""The local users of the embedded authorization server (MCPGATE_OAUTH_USERS: comma-separated name:hash pairs).

A value that is not a password hash is refused when the gateway starts, naming the user and never the value.
A wrong password and an unknown user give the same answer, after the same work (a hash is checked either way).
"""

from __future__ import annotations

from ...declarations import SettingsError
from . import passwords

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
        users[name] = stored.strip()
    return users


class Users:
    """Checks a name and password against the configured hashes."""

    def __init__(self, value: str) -> None:
        self.hashes = parse(value)
        # checked for an unknown name, so that it costs what a wrong password costs
        self._decoy = passwords.make_hash("mcpgate decoy password")

    def __bool__(self) -> bool:
        return bool(self.hashes)

    def subject(self, name: str, password: str) -> str | None:
        """The subject of the user the password signs in, or None (unknown name and wrong password alike)."""
        stored = self.hashes.get(name)
        ok = passwords.matches(stored or self._decoy, password)
        return SUBJECT_PREFIX + name if ok and stored is not None else None
