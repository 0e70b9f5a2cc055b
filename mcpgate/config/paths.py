"""Where the gateway keeps its state when MCPGATE_STATE_DIR is empty (standard library only: the embedded
authorization server's storage, the kept sessions and the start's checks ask it without importing either)."""

from __future__ import annotations

import os


def default_state_dir() -> str:
    """$XDG_STATE_HOME/mcpgate, else ~/.local/state/mcpgate (MCPGATE_STATE_DIR empty)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "mcpgate")


def make_private_dirs(path: str | os.PathLike[str]) -> None:
    """`path` and every missing directory above it made 0700 (mkdir's `parents` would make those 0777 less the
    umask: the state directory itself readable by other users when only a directory inside it was asked for).
    Directories that exist already are left as they are."""
    missing: list[str] = []
    here = os.path.abspath(path)
    while not os.path.isdir(here):
        missing.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
