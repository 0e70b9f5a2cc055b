"""The search view: one meta-tool (`search_tools`) that finds a server's tools by what they do and returns their
full definitions, for agents given more tools than they can read. With the view on, tools/list shows only the
meta-tool (and the tools pinned to be always shown): a few hundred bytes whatever the server has; a call of any
real tool the caller may see goes through as before.

The index: each tool's name (split at "_", "-", ".", "/" and camelCase humps), title, description, and its
parameters' names and descriptions, lowercased, stop words dropped, folded by a light suffix stemmer
("files" -> "file", "created" / "creating" -> "creat"). Ranking is BM25 over fields weighted by where a word
stands (the name weighs most; a parameter's description least); a query word's few common synonyms (find /
search, remove / delete, ...) count at a lower weight. Bounded: at most `max_tools` tools and TEXT_CHARS of any
one text are indexed; a query is read up to QUERY_CHARS; a search returns at most MAX_LIMIT definitions.

Pure: stdlib only, no I/O (serve/servers/search_view.py fetches the listing and answers the calls).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

NAME = "search_tools"
DEFAULT_LIMIT = 5
MAX_LIMIT = 20
MAX_TOOLS = 2000  # tools indexed by default (the rest of a larger listing is left out)
TEXT_CHARS = 2000  # of one description, title or parameter description
QUERY_CHARS = 500
PARAMS = 64  # parameters of one tool indexed
K1, B = 1.2, 0.75
WEIGHTS = {"name": 3.0, "title": 2.0, "description": 1.0, "param": 1.0, "param_text": 0.5}
SYNONYM_WEIGHT = 0.4

# a word: a run of capitals not followed by a small letter ("HTML" of "HTMLParser"), a capital and its small
# letters, small letters, or digits; anything else separates words
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_STOP_WORDS = (
    "a an and are as at be by can do does for from get give how i in into is it its me my of on or please some "
)
_STOP_WORDS += "that the their them then there these this to use using want what when which with you your"
STOP = frozenset(_STOP_WORDS.split(" "))
# A few verbs and nouns agents and servers name differently; each group is one meaning.
SYNONYMS = (
    ("find", "search", "lookup", "query", "look"),
    ("remove", "delete", "drop", "erase", "destroy"),
    ("create", "add", "new", "make", "insert", "open"),
    ("update", "edit", "modify", "change", "patch", "set", "rename"),
    ("show", "list", "enumerate", "all"),
    ("read", "fetch", "get", "view", "retrieve", "download", "load"),
    ("write", "save", "store", "upload", "put"),
    ("send", "post", "message", "notify"),
    ("run", "execute", "exec", "invoke", "start", "trigger"),
    ("stop", "cancel", "kill", "halt", "terminate"),
    ("file", "document", "doc"),
    ("folder", "directory", "dir"),
    ("user", "member", "person", "people", "account"),
    ("repo", "repository", "project"),
    ("email", "mail", "inbox"),
    ("event", "meeting", "appointment"),
    ("issue", "ticket", "bug"),
    ("pr", "pull", "merge"),
    ("pod", "container"),
    ("table", "schema"),
)


@functools.lru_cache(maxsize=8192)
def stem(word: str) -> str:
    """A light suffix stemmer: enough that "files", "filed" and "file" meet, and "creating" and "create"."""
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


def words(text: str) -> list[str]:
    """The index's terms of a text: split at non-alphanumerics and camelCase humps, lowercased, stop words out,
    stemmed."""
    out = []
    for piece in _WORD.findall(text):
        word = piece.lower()
        if word not in STOP:
            out.append(stem(word))
    return out


_RELATED: dict[str, frozenset[str]] = {}
for _group in SYNONYMS:
    _stems = frozenset(stem(word) for word in _group)
    for _word in _stems:
        _RELATED[_word] = _RELATED.get(_word, frozenset()) | (_stems - {_word})


def query_terms(query: str) -> dict[str, float]:
    """A query's terms with their weights: its own words 1.0, their synonyms SYNONYM_WEIGHT."""
    terms: dict[str, float] = {}
    for word in words(query[:QUERY_CHARS]):
        terms[word] = 1.0
    for word in list(terms):
        for related in _RELATED.get(word, ()):
            terms.setdefault(related, SYNONYM_WEIGHT)
    return terms


def _text(value: object) -> str:
    return value[:TEXT_CHARS] if isinstance(value, str) else ""


def fields(tool: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """(field, text) of a tool definition, as the index weighs them."""
    yield "name", _text(tool.get("name"))
    yield "title", _text(tool.get("title"))
    annotations = tool.get("annotations")
    if isinstance(annotations, dict):
        yield "title", _text(annotations.get("title"))
    yield "description", _text(tool.get("description"))
    schema = tool.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict):
        for name, spec in list(properties.items())[:PARAMS]:
            yield "param", _text(name)
            if isinstance(spec, dict):
                yield "param_text", _text(spec.get("description"))


@dataclass(frozen=True, slots=True)
class ToolIndex:
    """The tools of one listing (their definitions as listed) and the BM25 postings of their terms."""

    tools: tuple[Mapping[str, Any], ...]
    postings: Mapping[str, tuple[tuple[int, float], ...]]  # term -> (tool index, weighted frequency)
    lengths: tuple[float, ...]
    average: float

    @classmethod
    def build(cls, listed: Iterable[object], max_tools: int = MAX_TOOLS) -> ToolIndex:
        """The index of a tools/list result's tools (those without a string name left out; at most max_tools)."""
        tools: list[Mapping[str, Any]] = []
        postings: dict[str, dict[int, float]] = {}
        lengths: list[float] = []
        for tool in listed:
            if len(tools) >= max_tools:
                break
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                continue
            index, length = len(tools), 0.0
            tools.append(tool)
            for field, text in fields(tool):
                weight = WEIGHTS[field]
                for term in words(text):
                    counts = postings.setdefault(term, {})
                    counts[index] = counts.get(index, 0.0) + weight
                    length += weight
            lengths.append(length)
        average = sum(lengths) / len(lengths) if lengths else 1.0
        frozen = {term: tuple(counts.items()) for term, counts in postings.items()}
        return cls(tuple(tools), frozen, tuple(lengths), average or 1.0)

    def search(
        self, query: str, limit: int = DEFAULT_LIMIT, visible: Callable[[str], bool] | None = None
    ) -> list[Mapping[str, Any]]:
        """The definitions of the best `limit` tools for `query` (those `visible` refuses never among them), best
        first; ties in listing order. A query of no indexed word finds nothing."""
        count = len(self.tools)
        scores: dict[int, float] = {}
        for term, weight in query_terms(query).items():
            found = self.postings.get(term)
            if not found:
                continue
            idf = math.log(1.0 + (count - len(found) + 0.5) / (len(found) + 0.5))
            for index, frequency in found:
                norm = frequency + K1 * (1.0 - B + B * self.lengths[index] / self.average)
                scores[index] = scores.get(index, 0.0) + weight * idf * frequency * (K1 + 1.0) / norm
        ranked = sorted(scores, key=lambda index: (-scores[index], index))
        out = []
        for index in ranked:
            tool = self.tools[index]
            if visible is None or visible(tool["name"]):
                out.append(tool)
                if len(out) >= limit:
                    break
        return out


def definition() -> dict[str, Any]:
    """The meta-tool's definition, as tools/list shows it."""
    return {
        "name": NAME,
        "description": (
            "Find this server's tools by what they do (the full list is not shown). Give a few keywords, e.g. "
            "'create issue' or 'read file'; the matching tools' definitions come back, best first. Then call a "
            "tool by its name, with arguments as its inputSchema says."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the tool should do, in a few words."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "description": f"How many tools at most (default {DEFAULT_LIMIT}).",
                },
            },
            "required": ["query"],
        },
        "annotations": {"title": "Search tools", "readOnlyHint": True, "openWorldHint": False},
    }


DEFINITION = definition()


def listing(pinned: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The tools/list result of the search view: the meta-tool, then the pinned tools (as listed)."""
    return {"tools": [DEFINITION, *pinned]}


def is_search_call(params: object) -> bool:
    return isinstance(params, dict) and params.get("name") == NAME


def arguments(params: object) -> tuple[str, int] | str:
    """(query, limit) of a search_tools call's params, or why they are not valid (a tool error's text)."""
    args = params.get("arguments") if isinstance(params, dict) else None
    if not isinstance(args, dict):
        args = {}
    query, limit = args.get("query"), args.get("limit", DEFAULT_LIMIT)
    if not isinstance(query, str) or not query.strip():
        return "query must be a non-empty string: what the tool should do, in a few words"
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        return f"limit must be an integer from 1 to {MAX_LIMIT}"
    return query, limit


def result(found: list[Mapping[str, Any]]) -> dict[str, Any]:
    """A search_tools call's CallToolResult: the definitions as JSON text, and as structured content."""
    tools = [dict(tool) for tool in found]
    text = json.dumps({"tools": tools}, ensure_ascii=False, separators=(",", ":"))
    if not tools:
        text = "No tool matches; try other words (what the tool does, or the thing it works on)."
    return {"content": [{"type": "text", "text": text}], "structuredContent": {"tools": tools}, "isError": False}


def error(message: str) -> dict[str, Any]:
    """A search_tools call with invalid arguments: a tool error the model can read and correct."""
    return {"content": [{"type": "text", "text": message}], "isError": True}
