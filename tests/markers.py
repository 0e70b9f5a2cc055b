"""Which tests get the suite's markers (declared in pyproject.toml) without saying so; tests/conftest.py applies
them.

`gateway` and `fleet` follow what a test runs: a test whose code (its function, the fixtures it uses, and the
helpers of this test suite they call, followed name by name) reaches one of the starters below is marked.
`slow` and `npm` are named here or in the modules. `pytest -m "not gateway"` is the fast tier: the pure decisions,
tables and in-process tests, a few processes at most.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any

import pytest

# nodeid prefixes of the tests marked slow (each takes 10 s or more on an idle two-core machine)
SLOW = (
    "tests/test_install.py",
    "tests/test_packaging.py",
    "tests/test_bench.py::test_sigterm_ends_every_gateway_and_child_the_bench_started",
    "tests/serve/test_slow_start.py",
    "tests/serve/test_deploy.py",
    "tests/interop/test_conformance_server.py",
    "tests/interop/test_conformance_2026.py",
    "tests/relay/test_oauth_conformance.py",
    "tests/test_typing.py",
)
# tests that start gunicorn in a way the search below cannot see (a program of their own starts it)
GATEWAY = ("tests/test_bench.py::test_sigterm_ends_every_gateway_and_child_the_bench_started",)


def _own(value: object) -> bool:
    """Whether a value is code of this test suite (followed further), not of a library or the project."""
    module = getattr(value, "__module__", None) or getattr(value, "__name__", "")
    return isinstance(module, str) and (module == "tests" or module.startswith("tests."))


def _codes(code: types.CodeType) -> Iterable[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


class Reach:
    """Which starters a function reaches through the names its code (and nested code) uses."""

    def __init__(self, starters: dict[str, tuple[object, ...]]) -> None:
        self.starters = starters
        self.cache: dict[int, frozenset[str]] = {}

    def of(self, value: object) -> frozenset[str]:
        key = id(value)
        if key in self.cache:
            return self.cache[key]
        self.cache[key] = frozenset()  # a cycle reaches nothing new
        found = set(self._direct(value))
        for nested in self._referenced(value):
            found |= self.of(nested)
        self.cache[key] = frozenset(found)
        return self.cache[key]

    def _direct(self, value: object) -> Iterable[str]:
        return (marker for marker, starters in self.starters.items() if any(value is s for s in starters))

    def _referenced(self, value: object) -> Iterable[object]:
        if isinstance(value, type):
            for member in vars(value).values():
                member = getattr(member, "__func__", member)
                if isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member):
                    yield member
            return
        func = inspect.unwrap(value) if callable(value) else value
        if not inspect.isfunction(func):
            return
        scope: dict[str, Any] = func.__globals__
        modules = [v for v in scope.values() if isinstance(v, types.ModuleType) and _own(v)]
        for code in _codes(func.__code__):
            for name in code.co_names:
                for candidate in (scope.get(name), *(getattr(m, name, None) for m in modules)):
                    if candidate is not None and (_own(candidate) or any(self._direct(candidate))):
                        yield candidate


def apply(items: list[pytest.Item], starters: dict[str, tuple[object, ...]]) -> None:
    reach = Reach(starters)
    for item in items:
        found: set[str] = set()
        function: Callable[..., Any] | None = getattr(item, "function", None)
        if function is not None:
            found |= reach.of(function)
        info = getattr(item, "_fixtureinfo", None)
        for definitions in info.name2fixturedefs.values() if info is not None else ():
            for definition in definitions:
                if _own(definition.func):
                    found |= reach.of(definition.func)
        if item.nodeid.startswith(GATEWAY):
            found.add("gateway")
        if item.nodeid.startswith(SLOW):
            found.add("slow")
        for marker in sorted(found):
            item.add_marker(marker)
