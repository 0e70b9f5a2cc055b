"""Pinned tool definitions (the "rug pull" defence): a fingerprint per tool, and a listing compared with the
fingerprints pinned when the server's tools were first seen.

The fingerprint: SHA-256 of the canonical JSON (keys sorted at every depth, no whitespace, UTF-8, a float with
an integral value written as the integer) of the tool's `name`, `title`, `description`, `inputSchema`,
`outputSchema` and `annotations` (those present; DEFINITION). So it is stable under key order, whitespace, \\u
escapes and `1` versus `1.0`, and the tools' order in a listing and its pagination never matter (each tool is
pinned by its name). Strings are compared exactly: a changed character anywhere in them counts, whitespace
inside a description included (what the model reads is those characters; any normalization would be a hole a
homoglyph or an invisible character slips through).

Left out, on purpose: `_meta` (the specification reserves it for metadata attached by implementations, which an
SDK or a server may change from run to run, request ids, timestamps, UI hints, none of it the tool's contract
with the model: counting it would raise alarms for unchanged tools), `icons` and `execution` (how a client draws
or runs a tool, not what it tells the model it does).

Each field also gets a short digest of its own (`Pin.fields`), so that a change names the fields that changed
without keeping the definitions.

`compare` tells, per tool: NEW (no pin by that name), UNCHANGED, CHANGED (with the fields) and, for a complete
listing, REMOVED (pinned, not listed). `review` is the policy's input: what to pin now (first seen, while the
server's first complete listing has not been seen: its pages pin as they come), which changes are fresh (not
already pending with the same fingerprint), which names are blocked (their definition is not the pinned one,
or a tool that appears after the first complete listing), and which pending changes are settled (the tool is
back to its pin). Pure: no clock, no I/O.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFINITION = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
FIELD_DIGEST = 16  # hex characters of a field's own digest (enough to tell which field changed)


class Verdict(enum.Enum):
    NEW = "new"
    UNCHANGED = "unchanged"
    CHANGED = "changed"
    REMOVED = "removed"


def _normalized(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {str(key): _normalized(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalized(item) for item in value]
    return value


def canonical(value: Any) -> bytes:
    """The canonical JSON of a value (ValueError for NaN or infinity, RecursionError for a too deep one)."""
    text = json.dumps(_normalized(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8", "surrogatepass")


def definition(tool: Mapping[str, Any]) -> dict[str, Any]:
    """What is fingerprinted of a tool: the fields of DEFINITION it has."""
    return {key: tool[key] for key in DEFINITION if key in tool}


@dataclass(frozen=True, slots=True)
class Pin:
    """A tool's fingerprint, and a digest per field it has (an absent field: no entry)."""

    fingerprint: str
    fields: Mapping[str, str] = field(default_factory=dict)

    def encode(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "fields": dict(self.fields)}

    @classmethod
    def decode(cls, obj: object) -> Pin | None:
        if not isinstance(obj, dict) or not isinstance(obj.get("fingerprint"), str):
            return None
        fields = obj.get("fields")
        if not isinstance(fields, dict) or not all(isinstance(v, str) for v in fields.values()):
            return None
        return cls(obj["fingerprint"], {str(k): v for k, v in fields.items()})

    def changed(self, other: Pin) -> tuple[str, ...]:
        """The fields whose digests differ (present in one, absent in the other included), in DEFINITION order."""
        return tuple(key for key in DEFINITION if self.fields.get(key) != other.fields.get(key))


def pin_of(tool: object) -> Pin | None:
    """A tool's Pin; None when it is no object with a string name, or cannot be written as JSON."""
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        return None
    try:
        whole = definition(tool)
        fields = {key: hashlib.sha256(canonical(value)).hexdigest()[:FIELD_DIGEST] for key, value in whole.items()}
        return Pin(hashlib.sha256(canonical(whole)).hexdigest(), fields)
    except (ValueError, TypeError, RecursionError):
        return None


def fingerprint(tool: Mapping[str, Any]) -> str:
    """The tool's fingerprint (ValueError when it has no string name or cannot be written as JSON)."""
    pin = pin_of(tool)
    if pin is None:
        raise ValueError("not a tool definition")
    return pin.fingerprint


@dataclass(frozen=True, slots=True)
class Finding:
    name: str
    verdict: Verdict
    old: str | None = None  # the pinned fingerprint
    new: str | None = None  # the listed one
    fields: tuple[str, ...] = ()  # CHANGED: the fields that changed
    pin: Pin | None = None  # the listed tool's Pin (NEW, CHANGED)


def _whole(tool: dict[str, Any]) -> str | None:
    """The tool's fingerprint alone (no field digests: what an unchanged tool costs), None when unwritable."""
    try:
        return hashlib.sha256(canonical(definition(tool))).hexdigest()
    except (ValueError, TypeError, RecursionError):
        return None


def compare(tools: Iterable[object], pinned: Mapping[str, Pin], complete: bool = True) -> list[Finding]:
    """One finding per listed tool (by name; entries without a string name are no tool), sorted by name then
    fingerprint, and with `complete` (the whole listing, every page) one REMOVED per pinned name not listed. A
    tool that cannot be fingerprinted counts as CHANGED (every field) when pinned, NEW otherwise."""
    findings: list[Finding] = []
    seen: set[str] = set()
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(name := tool.get("name"), str):
            continue
        seen.add(name)
        old = pinned.get(name)
        if old is not None and _whole(tool) == old.fingerprint:
            findings.append(Finding(name, Verdict.UNCHANGED, old.fingerprint, old.fingerprint))
            continue
        pin = pin_of(tool)
        new = pin.fingerprint if pin is not None else None
        if old is None:
            findings.append(Finding(name, Verdict.NEW, None, new, (), pin))
        else:
            fields = old.changed(pin) if pin is not None else DEFINITION
            findings.append(Finding(name, Verdict.CHANGED, old.fingerprint, new, fields, pin))
    if complete:
        findings.extend(
            Finding(name, Verdict.REMOVED, pin.fingerprint) for name, pin in pinned.items() if name not in seen
        )
    return sorted(findings, key=lambda f: (f.name, f.new or ""))


@dataclass(frozen=True, slots=True)
class Review:
    pin: dict[str, Pin]  # first seen: pin now
    fresh: list[Finding]  # changes not already pending with the same fingerprint (NEW after sealing, CHANGED)
    blocked: frozenset[str]  # names whose listed definition is not the pinned one (or could not be pinned)
    settled: frozenset[str]  # pending names listed unchanged again (their pending change is gone)
    unpinnable: frozenset[str] = frozenset()  # first seen, but no room (or no fingerprint): not pinned


def review(
    tools: Iterable[object],
    pinned: Mapping[str, Pin],
    pending: Mapping[str, str | None],
    sealed: bool,
    room: int,
) -> Review:
    """A page of a listing against the server's pins. `pending`: name -> the new fingerprint of its pending
    change; `sealed`: a complete listing was seen before (a tool first seen after that is a change, NEW, not a
    pin); `room`: how many more tools may be pinned."""
    pin: dict[str, Pin] = {}
    fresh: list[Finding] = []
    blocked: set[str] = set()
    settled: set[str] = set()
    unpinnable: set[str] = set()
    findings = compare(tools, pinned, complete=False)
    prints: dict[str, set[str | None]] = {}
    for finding in findings:
        prints.setdefault(finding.name, set()).add(finding.new)
    twofold = {name for name, seen in prints.items() if len(seen) > 1}  # one name, two definitions in one page
    for finding in findings:
        name = finding.name
        if finding.verdict is Verdict.UNCHANGED:
            if name in pending:
                settled.add(name)
            continue
        if finding.verdict is Verdict.NEW and not sealed and name not in pending:
            if finding.pin is not None and name not in twofold and (name in pin or len(pin) < room):
                pin[name] = finding.pin
            else:
                unpinnable.add(name)
                blocked.add(name)
            continue
        blocked.add(name)
        if finding.new is not None and pending.get(name, "") != finding.new:
            fresh.append(finding)
    blocked |= twofold
    return Review(pin, fresh, frozenset(blocked), frozenset(settled - blocked), frozenset(unpinnable))
