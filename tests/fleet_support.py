"""Moved to tests/support/fleet.py; this name stays only for modules that still import it."""

from tests.support.fleet import *  # noqa: F403
