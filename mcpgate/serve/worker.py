"""The gunicorn worker: gunicorn's gevent_pywsgi worker with a lighter request-header parser."""

from __future__ import annotations

from typing import Any, BinaryIO

from gunicorn.workers.ggevent import GeventPyWSGIWorker, PyWSGIHandler

from .request_headers import RequestHeaders


class Handler(PyWSGIHandler):  # type: ignore[misc]
    def MessageClass(self, fp: BinaryIO, *args: Any) -> RequestHeaders:  # noqa: N802 (pywsgi's name)
        return RequestHeaders.read(fp)


class GatewayWorker(GeventPyWSGIWorker):  # type: ignore[misc]
    """gunicorn's gevent_pywsgi worker with the header parser above."""

    wsgi_handler = Handler
