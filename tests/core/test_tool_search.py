"""core/tool_search: the terms of a tool definition, BM25 ranking, the meta-tool's listing and arguments, and the
query corpus (tests/fixtures/tool_search_corpus.json: 300 tools of 10 servers, each query with the tool it
should find): the expected tool is in the top 5 for at least 90 % of the queries, on the aggregate's namespaced
names and on each server alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcpgate.core import tool_search
from mcpgate.core.tool_search import ToolIndex, arguments, listing, query_terms, stem, words

CORPUS = json.loads((Path(__file__).parent.parent / "fixtures" / "tool_search_corpus.json").read_text())
TOP = 5
BAR = 0.9


def tool(name: str, description: str = "", **params: str) -> dict[str, Any]:
    properties = {key: {"type": "string", "description": text} for key, text in params.items()}
    return {"name": name, "description": description, "inputSchema": {"type": "object", "properties": properties}}


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("create_pull_request", ["creat", "pull", "request"]),
        ("getPullRequestDiff", ["pull", "request", "diff"]),  # "get" is a stop word
        ("HTMLParser.parse-file", ["html", "parser", "pars", "file"]),
        ("list-files/in.dir", ["list", "file", "dir"]),
        ("Deleting the created files", ["delet", "creat", "file"]),
        ("repositories", ["repository"]),
        ("", []),
        ("!!!", []),
    ],
)
def test_words(text: str, terms: list[str]) -> None:
    assert words(text) == terms


@pytest.mark.parametrize(
    ("word", "stemmed"),
    [
        ("files", "file"),
        ("file", "file"),
        ("creating", "creat"),
        ("create", "creat"),
        ("created", "creat"),
        ("class", "class"),
        ("queries", "query"),
        ("bus", "bus"),
    ],
)
def test_stem(word: str, stemmed: str) -> None:
    assert stem(word) == stemmed


def test_a_querys_synonyms_weigh_less() -> None:
    terms = query_terms("remove file")
    assert terms["remov"] == terms["file"] == 1.0
    assert terms["delet"] == terms["document"] == tool_search.SYNONYM_WEIGHT


TOOLS = [
    tool("read_file", "Read the contents of a file.", path="Path of the file"),
    tool("write_file", "Write text to a file.", path="Path", content="Text"),
    tool("delete_file", "Delete a file for good.", path="Path"),
    tool("list_directory", "List a directory's entries.", path="Directory"),
    {"name": 7},  # no string name: not indexed
    "not a tool",
]


def test_the_best_first_and_the_limit() -> None:
    index = ToolIndex.build(TOOLS)
    assert len(index.tools) == 4
    found = [t["name"] for t in index.search("read a file", 2)]
    assert len(found) == 2 and found[0] == "read_file"
    assert index.search("remove a file", 1)[0]["name"] == "delete_file"  # by its synonym
    assert index.search("folder contents")[0]["name"] == "list_directory"


def test_a_search_returns_the_definitions_as_listed() -> None:
    index = ToolIndex.build(TOOLS)
    assert index.search("write", 1) == [TOOLS[1]]


def test_a_hidden_tool_is_never_found() -> None:
    index = ToolIndex.build(TOOLS)
    found = index.search("delete file", 5, visible=lambda name: name != "delete_file")
    assert found and "delete_file" not in [t["name"] for t in found]


@pytest.mark.parametrize("query", ["", "the of and", "zzzz qqqq"])
def test_a_query_of_no_indexed_word_finds_nothing(query: str) -> None:
    assert ToolIndex.build(TOOLS).search(query) == []


def test_the_index_is_bounded() -> None:
    many = [tool(f"tool_{i}", "same words") for i in range(50)]
    index = ToolIndex.build(many, max_tools=10)
    assert len(index.tools) == 10
    long = tool("long", "word " * 100_000 + "needle")
    assert ToolIndex.build([long]).search("needle") == []  # past TEXT_CHARS: not read


def test_the_listing_stays_small_for_any_number_of_tools() -> None:
    size = len(json.dumps(listing(), separators=(",", ":")))
    print(f"search view: tools/list is {size} bytes whatever the number of tools")
    assert size < 2048
    assert listing()["tools"][0]["name"] == tool_search.NAME
    pinned = listing([TOOLS[0]])["tools"]
    assert [t["name"] for t in pinned] == [tool_search.NAME, "read_file"]


@pytest.mark.parametrize(
    ("params", "parsed"),
    [
        ({"name": "search_tools", "arguments": {"query": "x"}}, ("x", tool_search.DEFAULT_LIMIT)),
        ({"arguments": {"query": "x", "limit": 20}}, ("x", 20)),
        ({"arguments": {"query": " "}}, "query must be a non-empty string"),
        ({"arguments": {}}, "query must be a non-empty string"),
        ({}, "query must be a non-empty string"),
        ({"arguments": {"query": "x", "limit": 0}}, "limit must be an integer from 1 to 20"),
        ({"arguments": {"query": "x", "limit": True}}, "limit must be an integer from 1 to 20"),
        ({"arguments": {"query": "x", "limit": "5"}}, "limit must be an integer from 1 to 20"),
    ],
)
def test_arguments(params: dict[str, Any], parsed: tuple[str, int] | str) -> None:
    got = arguments(params)
    assert got == parsed if isinstance(parsed, tuple) else isinstance(got, str) and got.startswith(parsed)


def test_the_result_carries_the_definitions() -> None:
    result = tool_search.result([TOOLS[0]])
    assert result["structuredContent"] == {"tools": [TOOLS[0]]} and not result["isError"]
    assert json.loads(result["content"][0]["text"]) == {"tools": [TOOLS[0]]}
    assert tool_search.result([])["structuredContent"] == {"tools": []}
    assert tool_search.error("bad")["isError"] is True


# -- the corpus -----------------------------------------------------------------------------------------------


def test_the_corpus_is_big_enough() -> None:
    servers = CORPUS["servers"]
    assert len(servers) >= 10 and sum(len(tools) for tools in servers.values()) >= 300
    assert len(CORPUS["queries"]) >= 60


def hit_rate(index: ToolIndex, queries: list[dict[str, str]]) -> tuple[float, list[str]]:
    missed = []
    for entry in queries:
        found = [t["name"] for t in index.search(entry["query"], TOP)]
        if entry["expected"] not in found:
            missed.append(f"{entry['query']!r}: {entry['expected']} not in {found}")
    return 1 - len(missed) / len(queries), missed


def test_the_expected_tool_is_in_the_top_5_on_the_aggregate() -> None:
    tools = [{**t, "name": f"{server}__{t['name']}"} for server, ts in CORPUS["servers"].items() for t in ts]
    rate, missed = hit_rate(ToolIndex.build(tools), CORPUS["queries"])
    print(f"aggregate of {len(tools)} tools: the expected tool in the top {TOP} for {rate:.1%} of the queries")
    print("\n".join(missed))
    assert rate >= BAR, missed


def test_the_expected_tool_is_in_the_top_5_on_its_own_server() -> None:
    hits = total = 0
    for server, tools in CORPUS["servers"].items():
        index = ToolIndex.build(tools)
        mine = [q for q in CORPUS["queries"] if q["expected"].startswith(server + "__")]
        asked = [{"query": q["query"], "expected": q["expected"].split("__", 1)[1]} for q in mine]
        rate, _ = hit_rate(index, asked)
        hits, total = hits + round(rate * len(asked)), total + len(asked)
    print(f"each server alone: the expected tool in the top {TOP} for {hits / total:.1%} of the queries")
    assert hits / total >= BAR
