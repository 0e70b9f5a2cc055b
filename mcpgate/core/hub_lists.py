"""The hub's pure rules for names, merged lists, cursors, capabilities and resource URIs (core/hub.py drives them).

Names. A member server's tool, prompt and resource-template names reach the client as `<prefix>__<name>`, where
the prefix is the server's `prefix` (config file) or its name. The separator is the FIRST `__` of a qualified
name, so a prefix may contain no `__` and may not end with `_` (`prefix_problem` says why one is refused; a
server whose name breaks the rule needs a `prefix` to join a group), while the member's own name is carried
verbatim (it may contain `__`). Two members of a group may not share a prefix. A qualified name depends on its
own server's prefix alone: adding or removing a server renames no other tool. Names are never truncated (one
over 64 characters stays as long: truncating would make two names one).

Resources keep their names and URIs unchanged; `UriMap` says which member serves a URI (from the members' own
resources/list answers, and the literal start of their URI templates); a URI two members list is ambiguous and
answered as such, never guessed.

Cursors. A merged list's `nextCursor` is `h1.` + base64url(JSON {"k": list kind, "m": {member: its cursor}}):
opaque to the client, bounded (each member's cursor at most MAX_MEMBER_CURSOR characters, the whole at most
MAX_CURSOR), and validated (`decode_cursor` returns None for anything else, answered -32602 by the hub). A
member named in a cursor that has since left the group is skipped.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SEP = "__"
PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_MEMBER_CURSOR = 1024  # characters of one member's cursor carried inside the hub's
MAX_CURSOR = 64 * 1024  # characters of a hub cursor the hub decodes at all
MAX_TEMPLATES = 256  # URI templates remembered per member
CURSOR_TAG = "h1."

# list method -> (result key, capability, whether item names are namespaced)
LISTS: dict[str, tuple[str, str, bool]] = {
    "tools/list": ("tools", "tools", True),
    "prompts/list": ("prompts", "prompts", True),
    "resources/list": ("resources", "resources", False),
    "resources/templates/list": ("resourceTemplates", "resources", True),
}
# list_changed notification -> the capability whose list it names
CHANGED = {
    "notifications/tools/list_changed": "tools",
    "notifications/prompts/list_changed": "prompts",
    "notifications/resources/list_changed": "resources",
}


def prefix_problem(prefix: str) -> str | None:
    """Why `prefix` cannot namespace a server's names, or None."""
    if not PREFIX.fullmatch(prefix):
        return "a prefix must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
    if SEP in prefix or prefix.endswith("_"):
        return f"a prefix may not contain {SEP!r} nor end with '_' (the first {SEP!r} of a name ends its prefix)"
    return None


def qualify(prefix: str, name: str) -> str:
    return prefix + SEP + name


def split(qualified: str) -> tuple[str, str] | None:
    """(prefix, member's name) of a qualified name; None when it has no separator or an empty part."""
    prefix, sep, name = qualified.partition(SEP)
    return (prefix, name) if sep and prefix and name else None


def renamed(items: Iterable[Any], prefix: str, namespaced: bool) -> list[Any]:
    """A member's list items as the client sees them (an item that is no object with a string name is left out
    of a namespaced list: it could not be called back)."""
    if not namespaced:
        return [item for item in items if isinstance(item, dict)]
    out = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            out.append({**item, "name": qualify(prefix, item["name"])})
    return out


def encode_cursor(kind: str, parts: Mapping[str, str]) -> str:
    body = json.dumps({"k": kind, "m": dict(parts)}, separators=(",", ":")).encode()
    return CURSOR_TAG + base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode_cursor(kind: str, cursor: object) -> dict[str, str] | None:
    """The members' cursors a hub cursor of list `kind` carries; None when it is not one."""
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR or not cursor.startswith(CURSOR_TAG):
        return None
    text = cursor[len(CURSOR_TAG) :]
    try:
        body = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        return None
    if not isinstance(body, dict) or body.get("k") != kind or not isinstance(body.get("m"), dict):
        return None
    parts = body["m"]
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_MEMBER_CURSOR for v in parts.values()):
        return None
    return dict(parts)


@dataclass(frozen=True, slots=True)
class Page:
    """One merged page: the result for the client, and members whose next page was too long a cursor to carry."""

    result: dict[str, Any]
    cut: tuple[str, ...] = ()


def merge_page(method: str, answers: Iterable[tuple[str, str, object]]) -> Page:
    """The client's page of list `method` from (member, prefix, result) answers in member order (a result that
    is not an object with the list is taken as empty)."""
    key, _, namespaced = LISTS[method]
    items: list[Any] = []
    parts: dict[str, str] = {}
    cut = []
    for member, prefix, result in answers:
        if not isinstance(result, dict) or not isinstance(result.get(key), list):
            continue
        items.extend(renamed(result[key], prefix, namespaced))
        following = result.get("nextCursor")
        if isinstance(following, str) and following:
            if len(following) <= MAX_MEMBER_CURSOR:
                parts[member] = following
            else:
                cut.append(member)
    out: dict[str, Any] = {key: items}
    if parts:
        out["nextCursor"] = encode_cursor(method, parts)
    return Page(out, tuple(cut))


def merge_capabilities(each: Iterable[object]) -> dict[str, Any]:
    """The union of the members' capabilities: every key any member has; inside an object, true wins. A hub
    with tools, prompts or resources says listChanged: members come and go, and that changes its lists."""
    merged: dict[str, Any] = {}
    for caps in each:
        if not isinstance(caps, dict):
            continue
        for key, value in caps.items():
            if isinstance(value, dict):
                into = merged.setdefault(key, {})
                if isinstance(into, dict):
                    for inner, flag in value.items():
                        into[inner] = into.get(inner) is True or flag if isinstance(flag, bool) else flag
            else:
                merged.setdefault(key, value)
    for key in ("tools", "prompts", "resources"):
        if isinstance(merged.get(key), dict):
            merged[key]["listChanged"] = True
    return merged


def every_list_may_change(capabilities: dict[str, Any]) -> None:
    """Say listChanged for tools, prompts and resources whether a member has them or not (a member that is
    not available now may bring them when it comes back)."""
    for key in ("tools", "prompts", "resources"):
        section = capabilities.get(key)
        capabilities[key] = {**section, "listChanged": True} if isinstance(section, dict) else {"listChanged": True}


def choose_version(requested: object, answered: Iterable[object]) -> str | None:
    """The protocol revision the hub answers the client: the one it asked for when every member answered with
    it, else the oldest any member answered (each member goes on with its own; the hub translates nothing).
    None when no member answered a revision."""
    versions = [v for v in answered if isinstance(v, str)]
    if not versions:
        return None
    if isinstance(requested, str) and all(v == requested for v in versions):
        return requested
    return min(versions)


def initialize_result(requested: object, answers: list[tuple[str, object]]) -> dict[str, Any]:
    """The hub's InitializeResult from the (prefix, result) answers of the members that initialized: the revision
    (`choose_version`), the union of their capabilities, and their instructions, each line led by its prefix."""
    results = [result if isinstance(result, dict) else {} for _, result in answers]
    out: dict[str, Any] = {
        "protocolVersion": choose_version(requested, [r.get("protocolVersion") for r in results]),
        "capabilities": merge_capabilities(r.get("capabilities") for r in results),
        "serverInfo": {"name": "mcpgate-hub", "version": "1"},
    }
    lines = [f"[{p}] {r['instructions']}" for (p, _), r in zip(answers, results, strict=True) if r.get("instructions")]
    if lines:
        out["instructions"] = "\n".join(lines)
    return out


class Ambiguous:
    """A URI (or template start) that more than one member serves."""

    __slots__ = ("members",)

    def __init__(self, members: tuple[str, ...]) -> None:
        self.members = members


class UriMap:
    """Which member serves a resource URI, bounded: at most `size` URIs (the least recently listed forgotten
    first), MAX_TEMPLATES template starts per member."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._uris: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._templates: dict[str, list[str]] = {}

    def __len__(self) -> int:
        return len(self._uris)

    def add(self, member: str, uris: Iterable[object]) -> None:
        for uri in uris:
            if not isinstance(uri, str):
                continue
            held = self._uris.get(uri, ())
            self._uris[uri] = held if member in held else (*held, member)
            self._uris.move_to_end(uri)
        while len(self._uris) > self.size:
            self._uris.popitem(last=False)

    def add_templates(self, member: str, templates: Iterable[object]) -> None:
        starts = self._templates.setdefault(member, [])
        for template in templates:
            if isinstance(template, str) and len(starts) < MAX_TEMPLATES:
                start = template.split("{", 1)[0]
                if start and start not in starts:
                    starts.append(start)

    def take(self, member: str, method: str, result: object) -> str | None:
        """What a member's resources/list or resources/templates/list answer tells of its URIs; its next cursor."""
        if not isinstance(result, dict):
            return None
        key, field = ("resources", "uri") if method == "resources/list" else ("resourceTemplates", "uriTemplate")
        items = result.get(key)
        found = [item.get(field) for item in items if isinstance(item, dict)] if isinstance(items, list) else []
        self.add(member, found) if method == "resources/list" else self.add_templates(member, found)
        following = result.get("nextCursor")
        return following if isinstance(following, str) and following else None

    def forget(self, member: str, *, templates: bool = True) -> None:
        for uri in [uri for uri, held in self._uris.items() if member in held]:
            rest = tuple(m for m in self._uris[uri] if m != member)
            if rest:
                self._uris[uri] = rest
            else:
                del self._uris[uri]
        if templates:
            self._templates.pop(member, None)

    def resolve(self, uri: str, fallback: tuple[str, ...] = ()) -> str | Ambiguous | None:
        """The member serving `uri`: the one that lists it, else the one whose template starts it longest,
        else the only member in `fallback` (those that serve resources at all); None when none does."""
        held = self._uris.get(uri)
        if held:
            return held[0] if len(held) == 1 else Ambiguous(held)
        best, length = [], 0
        for member, starts in self._templates.items():
            longest = max((len(s) for s in starts if uri.startswith(s)), default=0)
            if longest > length:
                best, length = [member], longest
            elif longest and longest == length:
                best.append(member)
        if best:
            return best[0] if len(best) == 1 else Ambiguous(tuple(best))
        return fallback[0] if len(fallback) == 1 else None
