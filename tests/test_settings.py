"""Settings: declared once, validated with messages that name the variable, and documented in the README."""

from __future__ import annotations

import argparse

import pytest

from mcpgate.config.settings import (
    RelaySettings,
    Settings,
    SettingsError,
    add_arguments,
    declared,
    markdown_table,
    relay_markdown_table,
)
from mcpgate.relay.cli import build_parser
from tests.support import ROOT


def test_readme_table_matches_the_declaration() -> None:
    readme = (ROOT / "README.md").read_text()
    assert markdown_table() in readme, "regenerate the README table with: python -m mcpgate.config.settings"


def test_defaults_are_valid() -> None:
    settings = Settings.from_env(environ={})
    for setting in declared(Settings):
        assert getattr(settings, setting.name) == setting.default


@pytest.mark.parametrize(
    "env,fragment",
    [
        ({"MCPGATE_MAX_SESSIONS": "many"}, "MCPGATE_MAX_SESSIONS"),
        ({"MCPGATE_MAX_SESSIONS": "0"}, "MCPGATE_MAX_SESSIONS must be greater than 0"),
        ({"MCPGATE_PATH": "mcp"}, "MCPGATE_PATH must start with /"),
        ({"MCPGATE_COMMAND": "python 'unclosed"}, "MCPGATE_COMMAND is not valid shell-word syntax"),
        ({"MCPGATE_STDERR": "somewhere"}, "MCPGATE_STDERR"),
        ({"MCPGATE_CHILD_ENV": "[1]"}, "MCPGATE_CHILD_ENV must be a JSON object"),
        ({"MCPGATE_CHILD_ENV": "{"}, "MCPGATE_CHILD_ENV: expected json"),
        ({"MCPGATE_LOG_LEVEL": "loud"}, "MCPGATE_LOG_LEVEL"),
    ],
)
def test_invalid_values_name_the_variable(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(environ=env)
    assert fragment in str(info.value)


def test_values_are_converted() -> None:
    settings = Settings.from_env(
        environ={
            "MCPGATE_ALLOWED_HOSTS": "a.example, b.example",
            "MCPGATE_SSE_AFTER": "2.5",
            "MCPGATE_CHILD_ENV": '{"K": "v"}',
        }
    )
    assert settings.allowed_hosts == ("a.example", "b.example")
    assert settings.sse_after == 2.5 and settings.child_env == {"K": "v"}


def test_an_invalid_setting_stops_gunicorn_with_a_clear_message(gateway_factory) -> None:  # type: ignore[no-untyped-def]
    from tests.support import Gateway

    gw = Gateway({"MCPGATE_MAX_SESSIONS": "lots"})
    try:
        gw.proc.wait(30)
        assert gw.proc.returncode != 0
        assert "MCPGATE_MAX_SESSIONS" in gw.log()
    finally:
        gw.stop()


def test_readme_relay_table_matches_the_declaration() -> None:
    readme = (ROOT / "README.md").read_text()
    assert relay_markdown_table() in readme, "regenerate the README tables with: python -m mcpgate.config.settings"


def test_the_relay_parser_is_generated_from_the_declaration() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser, RelaySettings)
    args = parser.parse_args(["-H", "X-A: 1", "--header", "X-B: 2", "--max-inflight", "3", "https://h.example/mcp"])
    settings = RelaySettings.from_args(args, environ={"MCPGATE_BEARER_TOKEN": "tok"})
    assert settings.header == (("X-A", "1"), ("X-B", "2")) and settings.max_inflight == 3
    assert settings.url == "https://h.example/mcp" and settings.bearer_token == "tok"
    defaults = RelaySettings.from_args(parser.parse_args(["http://h/"]), environ={})
    for setting in declared(RelaySettings):
        if setting.flag and setting.flag.startswith("-"):
            assert getattr(defaults, setting.name) == setting.default, setting.name


def test_secret_values_never_appear_in_messages() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(environ={"MCPGATE_AUTH_TOKEN": "se cret"})
    assert "MCPGATE_AUTH_TOKEN" in str(info.value) and "se cret" not in str(info.value)
    with pytest.raises(SettingsError) as info:
        RelaySettings.from_args(
            build_parser().parse_args(["http://h/"]),  # every flag at its default
            environ={"MCPGATE_BEARER_TOKEN": "bad\ttoken"},
        )
    assert "bad\ttoken" not in str(info.value)


def test_settings_are_typed_fields() -> None:
    settings = Settings.from_env(environ={"PORT": "5000"})
    assert settings.addresses == ["0.0.0.0:5000"] and Settings.from_env(environ={}).addresses == ["127.0.0.1:8000"]
    with pytest.raises(AttributeError):
        settings.no_such_setting  # type: ignore[attr-defined]  # noqa: B018


AREAS = [base for base in Settings.__mro__[1:] if base is not object]  # auth_settings.py's AuthSettings, ...


@pytest.mark.parametrize("area", AREAS, ids=lambda area: area.__name__)
def test_an_area_generates_no_methods_of_its_own(area: type) -> None:
    """Only Settings is built, shown and compared: an area (auth_settings.py, ...) is a frozen dataclass for its
    fields alone, without the __init__, __repr__, __eq__ and __hash__ every gateway process would hold for nothing."""
    assert "__dataclass_fields__" in vars(area) and area.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert not {"__init__", "__repr__", "__eq__", "__hash__"} & set(vars(area))
    first, second = Settings.from_env(environ={}), Settings.from_env(environ={})
    assert first == second and first != Settings.from_env(environ={"MCPGATE_MAX_SESSIONS": "7"})
    assert all(f"{name}=" in repr(first) for name in area.__dataclass_fields__)  # type: ignore[attr-defined]
