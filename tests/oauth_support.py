"""Moved to tests/support/oauth.py; this name stays only for modules that still import it."""

from tests.support.oauth import *  # noqa: F403
