"""A bounded memo for the front's pure checks of short header strings (a client sends the same request line, Host
and Accept each time): `remembered(compute)` answers a string seen before from a table, else computes it. Bounded:
at most MOST strings, each at most CHARS long, kept (first come; past either bound a value is computed each
time); a string whose check raises is never kept. `seen_by(lookup)` is the table itself, for a caller that asks it
first and calls the lookup only on a miss (one call less on the hit path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

MOST = 256
CHARS = 256


def remembered(compute: Callable[[str], T]) -> Callable[[str], T]:
    seen: dict[str, T] = {}

    def lookup(text: str) -> T:
        found = seen.get(text)
        if found is None:
            found = compute(text)
            if len(seen) < MOST and len(text) <= CHARS:
                seen[text] = found
        return found

    lookup.__doc__ = compute.__doc__
    lookup.seen = seen  # type: ignore[attr-defined]
    return lookup


def seen_by(lookup: Callable[[str], T]) -> dict[str, T]:
    """The table of a `remembered` lookup: a value found there is the lookup's (never None)."""
    return lookup.seen  # type: ignore[attr-defined,no-any-return]
