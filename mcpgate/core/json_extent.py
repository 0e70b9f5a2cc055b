"""Where a JSON object or array in a byte string ends, found without decoding it.

    value_end(data, start, steps) -> int | None     the index just past the value that opens at data[start]
    value_end(data, start, steps, quoteless)         also: where its long strings' insides hold no quote
    sole_value(data, start, end) -> bool             whether data[start:end] is one JSON value and nothing more

The value opening at data[start] (a "{" or a "[") is walked bracket by bracket, its strings skipped whole, until
its depth is back to none: the answer is the index just past its closing bracket (data[start:answer] is the
value). None means unknown: data[start] opens no object or array, the data ends first, a string never ends, or the
walk took more than `steps` steps. A caller that gets None decodes the whole text instead (always correct); the
bound keeps the walk cheaper than that decoding (a result of very many small tokens is not walked to its end).

What a step is: one match of a compiled pattern (which takes a bracket, or a run of short plain strings and the
bytes between them, at C speed), one search of a long string's closing quote (bytes.find: a memchr), one escaped
quote inside a string, or one backslash of the run before a quote (the quote is escaped when the run is odd). A
result of one long text without escaped quotes is a dozen steps whatever its size. A string past its sixteenth
escaped quote (JSON inside a text) has its rest read by pieces of 4 KiB, doubled up to 1 MiB, each one step: a
piece is copied and its escapes replaced (bytes.replace) so that its first quote is the string's end.

For JSON text the answer is exact: a bracket inside a string is never counted, and a quote is a string's end only
after an even run of backslashes. The walk checks nothing else (a bracket of the other kind closes as well): it
says where valid JSON ends, not whether the bytes are valid JSON. Pure: no I/O, standard library only.

`quoteless`, a list the walk appends to: the insides (a, b) of the first QUOTELESS_MOST strings of QUOTELESS_FROM
bytes or more found by one search, so data[a:b] holds no quote (data[a - 1] and data[b] are the string's quotes).
A caller searching the value for something that starts with a quote need not search those bytes again.

sole_value is for a splice that takes a decoded message's bytes from a place to its end: a decoding keeps a
repeated member's last value and says nothing of the first (`{"a":1},"id":"x","result":{"b":2}` is no one value).
The bytes were decoded before, so only "one value or more" is asked: read past in C by the skip a process
installs (use_skip: msgspec's Raw decoder, which builds nothing), else decoded by json.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

# From a position between tokens: every byte up to the next bracket or the next string that is long or escaped,
# short plain strings ("[^"\\]{0,64}") taken whole. It matches wherever it starts, so it never backtracks past a
# failed string (the quantifiers need not be possessive, which Python 3.10 lacks). A long string is not matched
# here: the pattern engine steps through each byte, bytes.find does not.
_SKIP = re.compile(rb'(?:[^"{}\[\]]+|"[^"\\]{0,64}")*')
_FOUND_ESCAPED = 16  # escaped quotes of one string found by bytes.find before _rest_of_string takes its rest
_CHUNK_FIRST, _CHUNK_MOST = 4096, 1 << 20  # _rest_of_string's pieces: the first one's bytes, doubled up to this
_BACKSLASH = ord("\\")
QUOTELESS_FROM, QUOTELESS_MOST = 4096, 16
_OPENERS = frozenset(b"{[")
_SKIP_VALUE: Callable[[bytes | memoryview], Any] | None = None  # use_skip's
_COPIED_BELOW = 4096  # sole_value: a span this small is copied (cheaper than a view's two objects)
_CLOSERS = frozenset(b"}]")


def value_end(data: bytes, start: int, steps: int, quoteless: list[tuple[int, int]] | None = None) -> int | None:
    """The index just past the object or array that opens at data[start], or None when unknown (see the module
    docstring). `steps` bounds the walk's Python-level steps; `quoteless` is appended to (the module docstring)."""
    if not 0 <= start < len(data) or data[start] not in _OPENERS:
        return None
    skip, size = _SKIP.match, len(data)
    depth, at = 1, start + 1
    while steps > 0:
        steps -= 1
        at = skip(data, at).end()  # type: ignore[union-attr]  # the pattern matches the empty string
        if at >= size:
            return None
        byte = data[at]
        if byte in _OPENERS:
            depth += 1
            at += 1
        elif byte in _CLOSERS:
            depth -= 1
            at += 1
            if depth == 0:
                return at
        else:  # a string the pattern gave up on: long, or holding a backslash
            opened = at + 1
            at, steps, searched_once = _string_end(data, opened, steps)
            if at < 0:
                return None
            long_plain = searched_once and at - opened > QUOTELESS_FROM
            if long_plain and quoteless is not None and len(quoteless) < QUOTELESS_MOST:
                quoteless.append((opened, at - 1))
    return None


def _string_end(data: bytes, at: int, steps: int) -> tuple[int, int, bool]:
    """The index just past the string whose opening quote is at data[at - 1] (-1: unknown, it never ends or its
    escaped quotes took all `steps`), the steps left, and whether its end was the first quote searched (then no
    quote is inside it). Its quotes are found by bytes.find; past _FOUND_ESCAPED escaped ones the rest of it is
    read by _rest_of_string."""
    find = data.find
    quote = find(b'"', at)
    escaped = 0
    while quote > 0 and data[quote - 1] == _BACKSLASH:  # escaped when the run of backslashes is odd
        run = quote - 1
        while data[run - 1] == _BACKSLASH:  # the string's opening quote ends the run at the latest
            run -= 1
            steps -= 1
            if steps <= 0:
                return -1, 0, False
        if (quote - run) % 2 == 0:  # an even run: the backslashes escape each other and the quote ends it
            break
        escaped += 1
        steps -= 1
        if steps <= 0:
            return -1, 0, False
        if escaped > _FOUND_ESCAPED:  # a text of many escaped quotes (JSON in a text): its rest by pieces
            end, steps = _rest_of_string(data, quote + 1, steps)
            return end, steps, False
        quote = find(b'"', quote + 1)
    return (-1 if quote < 0 else quote + 1), steps, escaped == 0


def _rest_of_string(data: bytes, at: int, steps: int) -> tuple[int, int]:
    """The index just past the string that data[at] is inside of, `at` not inside an escape (-1: unknown), and the
    steps left. A piece of it is copied and its escapes made plain at C speed (each pair of backslashes, then each
    escaped quote, replaced by two bytes that are neither): its first quote is then the string's end. A piece that
    ends in the middle of an escape (one backslash left) has the next one start past the escaped byte."""
    size, chunk = len(data), _CHUNK_FIRST
    while at < size and steps > 0:
        steps -= 1
        piece = data[at : at + chunk].replace(b"\\\\", b"__").replace(b'\\"', b"__")
        quote = piece.find(b'"')
        if quote >= 0:
            return at + quote + 1, steps
        at += len(piece) + (1 if piece.endswith(b"\\") else 0)
        chunk = min(chunk * 2, _CHUNK_MOST)
    return -1, 0


def use_skip(skip: Callable[[bytes | memoryview], Any] | None) -> None:
    """sole_value reads with `skip` from now on, in this process: a decoder of one value that builds nothing and
    raises ValueError on anything after it (`msgspec.json.Decoder(msgspec.Raw).decode`); None: json's decoding."""
    global _SKIP_VALUE
    _SKIP_VALUE = skip


def sole_value(data: bytes, start: int, end: int) -> bool:
    """Whether data[start:end] is one JSON value, with nothing but whitespace around it (the module docstring)."""
    if _SKIP_VALUE is not None:
        try:
            _SKIP_VALUE(data[start:end] if end - start < _COPIED_BELOW else memoryview(data)[start:end])
        except ValueError:  # msgspec's DecodeError is a ValueError: trailing characters
            return False
        return True
    try:
        json.loads(data[start:end])
    except (ValueError, RecursionError):
        return False
    return True
