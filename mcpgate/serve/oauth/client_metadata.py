"""What a dynamic registration (RFC 7591) may store: a cap per field and a cap on the whole (pure).

Anyone may register, and what is stored is kept until the registration is forgotten, so every field has a bound
and so does the whole record as stored (JSON, MCPGATE_OAUTH_CLIENT_METADATA_BYTES). A value over its bound, or of
the wrong type, refuses the registration with invalid_client_metadata naming the field (RFC 7591 3.2.2); nothing
is truncated. Fields Authlib does not register are dropped before this check (extract_client_metadata).
"""

from __future__ import annotations

import json
from typing import Any

from mcpgate.serve.oauth import redirects

MAX_TEXT = 200  # client_name, software_id, software_version
MAX_URI = redirects.MAX_LENGTH  # client_uri, logo_uri, tos_uri, policy_uri, jwks_uri, each redirect URI
MAX_SCOPE = 1000
MAX_CONTACT = 320  # an e-mail address's longest form
MAX_REDIRECT_URIS = 10
MAX_CONTACTS = 5
MAX_TYPES = 5  # grant_types, response_types
MAX_TYPE = 100

# field -> (most characters of a string, or of each item of a list; most items: 0 for a string field)
STRINGS: dict[str, int] = {
    "client_name": MAX_TEXT,
    "software_id": MAX_TEXT,
    "software_version": MAX_TEXT,
    "client_uri": MAX_URI,
    "logo_uri": MAX_URI,
    "tos_uri": MAX_URI,
    "policy_uri": MAX_URI,
    "jwks_uri": MAX_URI,
    "scope": MAX_SCOPE,
    "token_endpoint_auth_method": MAX_TYPE,
}
LISTS: dict[str, tuple[int, int]] = {
    "redirect_uris": (MAX_URI, MAX_REDIRECT_URIS),
    "contacts": (MAX_CONTACT, MAX_CONTACTS),
    "grant_types": (MAX_TYPE, MAX_TYPES),
    "response_types": (MAX_TYPE, MAX_TYPES),
}


def field_problem(name: str, value: Any) -> str | None:
    """Why `value` may not be stored as the field `name`, or None (fields without a rule: None)."""
    if name in STRINGS:
        if not isinstance(value, str):
            return f"{name} must be a string"
        if len(value) > STRINGS[name]:
            return f"{name} is longer than {STRINGS[name]} characters"
        return None
    if name in LISTS:
        longest, most = LISTS[name]
        if not isinstance(value, list):
            return f"{name} must be a list of strings"
        if len(value) > most:
            return f"{name} has more than {most} entries"
        if not all(isinstance(item, str) for item in value):
            return f"{name} must be a list of strings"
        if any(len(item) > longest for item in value):
            return f"{name} has an entry longer than {longest} characters"
    return None


def fields_problem(data: dict[str, Any]) -> str | None:
    """Why one of the registration's fields may not be stored, naming it; None when none. Checked on the request
    as sent, before anything iterates over a field."""
    for name, value in data.items():
        found = field_problem(name, value)
        if found is not None:
            return found
    return None


def size_problem(metadata: dict[str, Any], max_bytes: int) -> str | None:
    """Why the metadata to store is too large as a whole (compact JSON, UTF-8, over `max_bytes`), or None."""
    size = len(stored(metadata))
    if size > max_bytes:
        return f"the client metadata is {size} bytes as stored, over {max_bytes} (MCPGATE_OAUTH_CLIENT_METADATA_BYTES)"
    return None


def stored(metadata: dict[str, Any]) -> bytes:
    """The metadata as it is measured (the storages keep it as JSON)."""
    return json.dumps(metadata, separators=(",", ":")).encode()
