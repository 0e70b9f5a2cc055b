"""The worker class gunicorn's master loads (mcpgate/gunicorn_config.py names it): the gateway's worker
(serve/front/worker.py: gevent, its pywsgi server, the request reader) is imported in the worker only, after the
fork, so that the master, which only starts and watches workers, never loads gevent (about 7 MB of its RSS).

gunicorn loads the class in the master and makes each worker object there, before the fork (gunicorn's Worker
`__init__` does nothing to the process); in the forked worker it calls `init_process`, which never returns. Here
that makes the gateway's worker from the same arguments, gives it the heartbeat file the master watches (`tmp`)
and the request budget drawn in the master (`max_requests`), and runs it.
"""

from __future__ import annotations

from gunicorn.workers.base import Worker


class GatewayWorker(Worker):  # type: ignore[misc]  # gunicorn is untyped
    """Stands in for mcpgate.serve.front.worker.GatewayWorker in the master; becomes it in the worker."""

    def init_process(self) -> None:
        from mcpgate.serve.front.worker import GatewayWorker as Gateway

        # gunicorn's Worker(age, ppid, sockets, app, timeout, cfg, log), as they are now (with reuse_port the forked
        # worker has sockets of its own)
        worker = Gateway(self.age, self.ppid, self.sockets, self.app, self.timeout, self.cfg, self.log)
        worker.tmp.close()  # its own heartbeat file: the master watches this one's
        worker.tmp, worker.pid, worker.max_requests = self.tmp, self.pid, self.max_requests
        worker.init_process()
