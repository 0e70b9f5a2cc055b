"""A session's request sent again after the instance that forwarded it here died: it is given the first copy's
answer, neither run twice nor refused.

In round-robin routing another instance may carry a session's POST to its owner (here). When that instance dies
(SIGKILL, OOM) before the owner's answer came back through it, the balancer sends the request again, as it was
(deploy/haproxy.cfg: retry-on empty-response), through another instance or straight here. The first copy may
still be running (sent to the session's child again it would be refused: "already in flight"), or be answered
already (run again, a call would run twice). So the owner keeps, for every forwarded POST while it is being
answered, its session and the digest of its body; a POST on the same session with the same body is given the
first copy's answer when that copy's connection reads as closed (its carrier is gone): it waits for the answer
if need be, and an answer ready after its carrier has gone is kept for KEPT_FOR seconds for it. The carrier's
death closes its connection to the balancer and its connection here at about the same time, in no set order: a
copy sent again that comes in while the first copy's connection does not read as closed yet waits for that
(CARRIER_GRACE at most) before it is taken for a client's own duplicate. Only a whole
answer can be given (a JSON reply); one that became a stream (past MCPGATE_SSE_AFTER) stays the first copy's,
and the copy sent again is served as any request (a client's resumption, Last-Event-ID, is what recovers a
stream). A copy whose carrier is still there is never taken over: a client that sends an id twice is refused.

Bounded: one entry per forwarded POST being answered (at most the worker's connections), KEPT answers at most;
a copy waits no longer than the first may take before its reply turns into a stream, and a margin.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import AsyncResult

from mcpgate.serve.cluster.forward import read_body
from mcpgate.serve.cluster.signing import CheckedBody, body_digest
from mcpgate.serve.front.context import PeerGone, RequestContext, context
from mcpgate.serve.front.http import HttpResponse

log = logging.getLogger("mcpgate.cluster")

MARGIN = 5.0  # seconds a waiting copy allows beyond the first copy's switch to a stream
KEPT_FOR = 5.0  # seconds an answer whose carrier had gone waits for its copy sent again (a retry: milliseconds)
KEPT = 256  # such answers kept at most (past it, the oldest goes)
CARRIER_GRACE = 2.0  # seconds a copy sent again waits for the first copy's connection to read as closed
CARRIER_POLL = 0.01  # seconds between two looks at it

Key = tuple[str, str]  # the session id, the body's digest


@dataclass(eq=False)
class Copy:
    """A forwarded POST being answered: whether its connection is gone, and who waits for its answer."""

    peer_gone: PeerGone | None
    taker: AsyncResult | None = field(default=None)  # a copy sent again, waiting (None given: not whole)

    def carrier_gone(self) -> bool:
        return self.peer_gone is not None and self.peer_gone()


class Resent:
    """`serve(environ, session, run)`: run the handler, or give a copy sent again the first copy's answer."""

    def __init__(self, max_body: int, wait: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_body, self.wait, self.clock = max_body, wait + MARGIN, clock
        self._running: dict[Key, Copy] = {}
        self._kept: dict[Key, tuple[HttpResponse, float]] = {}  # answers whose carrier had gone, until when
        self._sessions: dict[str, int] = {}  # sessions with an entry in either table: how many

    def serve(
        self,
        environ: dict[str, Any],
        session: str,
        run: Callable[[], HttpResponse],
        found: RequestContext | None = None,
    ) -> HttpResponse:
        """`found`: the request's context when its caller has it at hand (else read from the environ)."""
        if found is None:
            found = context(environ)
        forwarded = found.forwarded
        if environ.get("REQUEST_METHOD") != "POST" or not (forwarded or session in self._sessions):
            return run()
        checked = environ["wsgi.input"]
        if isinstance(checked, CheckedBody) and checked.tell() == 0:  # its value checked: its digest is known
            digest = checked.digest
        else:
            body = read_body(environ, self.max_body)  # put back for the handler, as forwarded_principal does
            digest = body_digest(body)
            environ["wsgi.input"], environ["CONTENT_LENGTH"] = CheckedBody(body, digest), str(len(body))
        key = (session, digest)
        if key in self._running or key in self._kept:  # else no first copy to answer from (the usual case)
            answer = self._answer_of_first(key)
            if answer is not None:
                log.info("a request sent again after the instance that forwarded it died: given its first answer")
                return answer
            if key in self._running:
                return run()
        if not forwarded:
            return run()
        return self._run_first(key, Copy(found.peer_gone), run)

    def _answer_of_first(self, key: Key) -> HttpResponse | None:
        self._await_carrier(key)
        kept = self._kept.pop(key, None)
        if kept is not None:
            self._less(key[0])
            return kept[0] if kept[1] > self.clock() else None
        first = self._running.get(key)
        if first is None or first.taker is not None or not first.carrier_gone():
            return None
        first.taker = AsyncResult()
        answer: HttpResponse | None = first.taker.wait(self.wait)
        return answer

    def _await_carrier(self, key: Key) -> None:
        """While a first copy of `key` runs untaken with its connection still open, wait until that connection
        reads as closed, the copy ends, or CARRIER_GRACE has passed (a client's own duplicate: it is then served as
        any request, and the session refuses the id in flight)."""
        first = self._running.get(key)
        if first is None or first.taker is not None:
            return
        deadline = self.clock() + CARRIER_GRACE
        while self._running.get(key) is first and not first.carrier_gone() and self.clock() < deadline:
            gevent.sleep(CARRIER_POLL)

    def _run_first(self, key: Key, copy: Copy, run: Callable[[], HttpResponse]) -> HttpResponse:
        session, sessions = key[0], self._sessions  # _more's and _less's, in this frame (every forwarded POST)
        self._running[key] = copy
        sessions[session] = sessions.get(session, 0) + 1
        response: HttpResponse | None = None
        try:
            response = run()
            return response
        finally:
            del self._running[key]
            left = sessions[session] - 1
            if left > 0:
                sessions[session] = left
            else:
                del sessions[session]
            whole = response if response is not None and isinstance(response.body, bytes) else None
            if copy.taker is not None:  # a copy sent again waits for it
                copy.taker.set(whole)
            elif whole is not None and copy.peer_gone is not None and copy.peer_gone():  # copy.carrier_gone():
                self._keep(key, whole)  # its carrier died: a copy may yet be sent again

    def _keep(self, key: Key, answer: HttpResponse) -> None:
        now = self.clock()
        if self._kept.pop(key, None) is not None:
            self._less(key[0])
        for old, (_, until) in list(self._kept.items()):  # oldest first: the expired, and any past KEPT
            if until <= now or len(self._kept) >= KEPT:
                del self._kept[old]
                self._less(old[0])
        self._kept[key] = (answer, now + KEPT_FOR)
        self._more(key[0])

    def _more(self, session: str) -> None:
        self._sessions[session] = self._sessions.get(session, 0) + 1

    def _less(self, session: str) -> None:
        left = self._sessions[session] - 1
        if left > 0:
            self._sessions[session] = left
        else:
            del self._sessions[session]
