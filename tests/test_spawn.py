"""Tests for mcpgate.child.spawn: the command's words, its executable and its environment (no child is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpgate.child.spawn import ChildSpawnError, child_environment, resolve_executable, split_command


def test_split_command() -> None:
    assert split_command("npx -y '@scope/server x' \"a b\" c\\ d") == ["npx", "-y", "@scope/server x", "a b", "c d"]
    with pytest.raises(ValueError, match="empty"):
        split_command("   ")
    with pytest.raises(ValueError, match="cannot parse command"):
        split_command("npx 'unbalanced")


def test_resolve_executable(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    plain = tmp_path / "plain"
    plain.write_text("")
    assert resolve_executable("tool", f"/nonexistent:{tmp_path}") == str(tool)
    assert resolve_executable(str(tool), "") == str(tool)
    with pytest.raises(ChildSpawnError, match=r"command not found: 'no-such-tool' \(searched PATH=/nope:/bin\)"):
        resolve_executable("no-such-tool", "/nope:/bin")
    with pytest.raises(ChildSpawnError, match="not executable"):
        resolve_executable("plain", str(tmp_path))
    with pytest.raises(ChildSpawnError, match="command not found"):
        resolve_executable(str(tmp_path / "missing"), str(tmp_path))


def test_child_environment_unit() -> None:
    parent = {"PATH": "/usr/bin", "HOME": "/root", "SHELL": "() { :; }", "FOO": "bar", "TERM": "xterm"}
    env = child_environment({"HOME": "/h", "TOKEN": "t"}, parent)
    assert env == {"PATH": "/usr/bin", "HOME": "/h", "TERM": "xterm", "TOKEN": "t"}
