"""What `gunicorn mcpgate.wsgi` loads: `application`, built by the factory (nothing is spawned at import)."""

from __future__ import annotations

import sys

from mcpgate.config.settings import SettingsError


def _refuse(message: str) -> None:
    """Stop loading. Under gunicorn, an app-load error halts the master instead of restarting workers forever."""
    if "gunicorn" in sys.modules:
        from gunicorn.errors import AppImportError

        raise AppImportError(f"mcpgate: {message}")
    raise SystemExit(f"mcpgate: {message}")


def _require_gevent_worker() -> None:
    """mcpgate holds SSE streams open on greenlets; a sync or threaded worker would stall on the first one."""
    if "gunicorn" not in sys.modules:
        return
    from gevent import monkey

    if not monkey.is_module_patched("socket"):
        _refuse(
            "needs gunicorn's gevent worker. Run it from the project root (its gunicorn.conf.py sets the "
            "worker), or anywhere with: gunicorn -c python:mcpgate.gunicorn_config mcpgate.wsgi"
        )


_require_gevent_worker()

from mcpgate.serve.front.app import create_app  # noqa: E402  (after the worker check)

try:
    application = create_app()
except SettingsError as exc:
    _refuse(f"invalid setting: {exc}")

app = application
