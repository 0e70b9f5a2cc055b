"""Which tests get the suite's markers (declared in pyproject.toml) without saying so; tests/conftest.py applies
them at collection.

`gateway`, `fleet` and `process` follow what a test runs: a test whose code (its function, the fixtures it uses,
and the helpers of this test suite they call, followed name by name) reaches one of STARTERS is marked. `slow`
is named below (and given to every `npm` test); `npm` is set in the modules. `fast` is every test with none of
them: `python -m pytest -m fast` is the newcomer's loop (pure decisions, tables, in-process apps, short-lived
children). A test that starts something the search cannot see is named in EXTRA.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any

import pytest

# what starts a process of each kind, by module and qualified name (nothing is imported to find them)
STARTERS = {
    "gateway": {
        "tests.support.gateway.Gateway",
        "tests.support.gateway.gunicorn_refusal",
        "tests.support.recipe.fleet_recipe",
    },
    "fleet": {
        "tests.support.fleet.redis_server",
        "tests.support.fleet.haproxy",
        "tests.support.recipe.fleet_recipe",
    },
    "process": {
        "tests.support.relay.RawRelay",
        "tests.support.relay.Upstream",
        "tests.support.relay.EraServer",
        "tests.support.remote.SdkUpstream",
        "tests.support.fastmcp.FastmcpUpstream",
        "tests.support.relay.run_host",
        "tests.support.relay.run_bridged_host",
        "tests.support.oauth.oidc_issuer",
        "tests.support.token_server.token_server",
    },
}
# nodeid prefixes of the tests marked slow: each takes 10 s or more on an idle two-core machine
SLOW = (
    "tests/test_install.py",
    "tests/test_packaging.py",
    "tests/test_bench.py::test_sigterm_ends_every_gateway_and_child_the_bench_started",
    "tests/test_typing.py",
    "tests/serve/test_slow_start.py",
    "tests/serve/test_deploy.py",
    "tests/interop/test_conformance_server.py",
    "tests/interop/test_conformance_2026.py",
    "tests/relay/test_oauth_conformance.py",
    "tests/serve/test_cluster_caps.py::test_redis_away_falls_back_to_this_instances_count",  # Redis's timeouts
)
# markers of tests that start what the search cannot see (a program of their own starts it)
EXTRA = {
    "tests/test_bench.py::test_sigterm_ends_every_gateway_and_child_the_bench_started": ("gateway",),
    "tests/serve/test_lifecycle.py::test_a_failing_test_report_shows_its_gateways_log_tail": ("gateway",),  # a pytest
    "tests/relay/test_oauth_store.py": ("process",),  # relays and lock holders in processes of their own
    "tests/relay/test_stdio_and_errors.py": ("process",),
    "tests/relay/test_cancel_grace.py": ("process",),
    "tests/relay/test_modern_wire.py": ("process",),
    "tests/security/test_relay_url_escapes.py": ("process",),
}
NOT_FAST = ("gateway", "fleet", "process", "slow", "npm")


def _own(value: object) -> bool:
    """Whether a value is code of this test suite (followed further), not of a library or the project."""
    module = getattr(value, "__module__", None) or getattr(value, "__name__", "")
    return isinstance(module, str) and (module == "tests" or module.startswith("tests."))


def _name(value: object) -> str:
    return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"


def _codes(code: types.CodeType) -> Iterable[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


class Reach:
    """Which markers a function earns through the names its code (and nested code) uses, followed through the
    test suite's own functions and classes."""

    def __init__(self) -> None:
        self.cache: dict[int, frozenset[str]] = {}

    def of(self, value: object) -> frozenset[str]:
        key = id(value)
        if key in self.cache:
            return self.cache[key]
        self.cache[key] = frozenset()  # a cycle reaches nothing new
        found = {marker for marker, names in STARTERS.items() if _name(value) in names}
        for nested in self._referenced(value):
            found |= self.of(nested)
        self.cache[key] = frozenset(found)
        return self.cache[key]

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
                    if candidate is not None and _own(candidate):
                        yield candidate


def apply(items: list[pytest.Item]) -> None:
    reach = Reach()
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
        for prefix, markers in EXTRA.items():
            if item.nodeid.startswith(prefix):
                found.update(markers)
        if item.nodeid.startswith(SLOW) or item.get_closest_marker("npm") is not None:
            found.add("slow")
        if not found and not any(item.get_closest_marker(name) for name in NOT_FAST):
            found.add("fast")
        for marker in sorted(found):
            item.add_marker(marker)
