"""Where the gateway keeps its state when MCPGATE_STATE_DIR is empty (standard library only: the embedded
authorization server's storage, the kept sessions and the start's checks ask it without importing either)."""

from __future__ import annotations

import os


def default_state_dir() -> str:
    """$XDG_STATE_HOME/mcpgate, else ~/.local/state/mcpgate (MCPGATE_STATE_DIR empty)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "mcpgate")
