"""Settings: declared once, validated with messages that name the variable, and documented in the README."""

from __future__ import annotations

import pytest

from mcpgate.settings import Settings, SettingsError, declared, markdown_table
from tests.support import ROOT


def test_readme_table_matches_the_declaration() -> None:
    readme = (ROOT / "README.md").read_text()
    assert markdown_table() in readme, "regenerate the README table with: python -m mcpgate.settings"


def test_defaults_are_valid() -> None:
    settings = Settings.from_env(environ={})
    for setting in declared(Settings):
        assert getattr(settings, setting.name) == setting.default


@pytest.mark.parametrize("env,fragment", [
    ({"MCPGATE_MAX_SESSIONS": "many"}, "MCPGATE_MAX_SESSIONS"),
    ({"MCPGATE_MAX_SESSIONS": "0"}, "MCPGATE_MAX_SESSIONS must be greater than 0"),
    ({"MCPGATE_PATH": "mcp"}, "MCPGATE_PATH must start with /"),
    ({"MCPGATE_COMMAND": "python 'unclosed"}, "MCPGATE_COMMAND is not valid shell-word syntax"),
    ({"MCPGATE_STDERR": "somewhere"}, "MCPGATE_STDERR"),
    ({"MCPGATE_CHILD_ENV": "[1]"}, "MCPGATE_CHILD_ENV must be a JSON object"),
    ({"MCPGATE_CHILD_ENV": "{"}, "MCPGATE_CHILD_ENV: expected json"),
    ({"MCPGATE_LOG_LEVEL": "loud"}, "MCPGATE_LOG_LEVEL"),
])
def test_invalid_values_name_the_variable(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(environ=env)
    assert fragment in str(info.value)


def test_values_are_converted() -> None:
    settings = Settings.from_env(environ={"MCPGATE_ALLOWED_HOSTS": "a.example, b.example", "MCPGATE_SSE_AFTER": "2.5",
                                 "MCPGATE_CHILD_ENV": '{"K": "v"}'})
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
