"""Password hashes for MCPGATE_OAUTH_USERS: `python -m mcpgate.serve.oauth.passwords NAME` reads a password
(twice, without echo, on a terminal; one line from stdin otherwise) and prints NAME:HASH.

The hashes are werkzeug's (scrypt by default; pbkdf2 accepted): the setting holds only these, never a password.
"""

from __future__ import annotations

import getpass
import hashlib
import re
import sys
from collections.abc import Sequence

from werkzeug.security import DEFAULT_PBKDF2_ITERATIONS, check_password_hash, generate_password_hash

# A user name: what may stand before the ":" of a name:hash pair (no ":" or "," of the list's syntax).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
_HASH = re.compile(r"(?:scrypt|pbkdf2):[A-Za-z0-9:]+\$[^$,\s]+\$[0-9a-f]+")


def make_hash(password: str, method: str = "scrypt") -> str:
    """A salted, slow hash of the password (werkzeug's default method unless `method` names another, as the
    part of a hash before its first "$" does)."""
    return generate_password_hash(password, method=method)


def cost(stored_hash: str) -> str:
    """What checking a password against the hash costs, as the method with every parameter spelled out
    (scrypt:N:r:p or pbkdf2:HASH:ITERATIONS, werkzeug's defaults filled in): two hashes with the same cost take
    the same time to check. ValueError for a method werkzeug cannot check."""
    method, *args = stored_hash.split("$", 1)[0].split(":")
    if method == "scrypt" and len(args) in (0, 3):
        n, r, p = (int(arg) for arg in args) if args else (2**15, 8, 1)
        if n < 2 or n & (n - 1) or r < 1 or p < 1:
            raise ValueError("scrypt's N must be a power of 2 above 1, r and p positive")
        return f"scrypt:{n}:{r}:{p}"
    if method == "pbkdf2" and len(args) <= 2:
        name = args[0] if args else "sha256"
        iterations = int(args[1]) if len(args) == 2 else DEFAULT_PBKDF2_ITERATIONS
        if name not in hashlib.algorithms_available or iterations < 1:
            raise ValueError(f"pbkdf2 needs a known hash and a positive iteration count, not {name}:{iterations}")
        return f"pbkdf2:{name}:{iterations}"
    raise ValueError("not scrypt[:N:r:p] or pbkdf2[:HASH[:ITERATIONS]]")


def is_hash(value: str) -> bool:
    """Whether the value has the form of a werkzeug password hash (method$salt$digest), not a password."""
    return _HASH.fullmatch(value) is not None


def shell_expanded(value: str) -> bool:
    """Whether the value is what a shell leaves of a hash given unquoted or in double quotes: its method and
    parameters without the $salt$digest, which the shell took for variables."""
    return value.startswith(("scrypt:", "pbkdf2:")) and "$" not in value


def matches(stored_hash: str, password: str) -> bool:
    """Whether the password is the one the hash was made from (werkzeug compares in constant time)."""
    return check_password_hash(stored_hash, password)


def _read_password() -> str:
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass("Password: ")
    if getpass.getpass("Again: ") != first:
        raise SystemExit("the two passwords differ; nothing printed")
    return first


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or NAME.fullmatch(args[0]) is None:
        print(
            "usage: python -m mcpgate.serve.oauth.passwords NAME   (NAME: letters, digits and ._@+-, "
            "first a letter or digit)\nreads the password and prints NAME:HASH for MCPGATE_OAUTH_USERS",
            file=sys.stderr,
        )
        return 2
    password = _read_password()
    if not password:
        print("an empty password is refused", file=sys.stderr)
        return 1
    print(f"{args[0]}:{make_hash(password)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
