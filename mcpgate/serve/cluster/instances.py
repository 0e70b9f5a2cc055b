"""The instances of a fleet together (REDIS_URL set): this instance's id, the cluster key, the Redis client,
the directory of live instances, and the route of a request naming another instance's session to its owner.

Built once per worker (after the fork: the id and the heartbeat are the worker's own) by the app factory's
Runtime (serve/runtime.py), only when settings.redis_url is set (else redis is never imported). No module state:
whoever needs the cluster (the servers' pools and caps, the OAuth storage) is given it.

- The id: MCPGATE_INSTANCE_ID, or a random one. Session ids name it (core/session_ids).
- The key: MCPGATE_CLUSTER_SECRET, or one made once and kept in Redis (SET NX: the first instance's wins).
- The directory: `mcpgate:instance:<id>` -> this instance's internal URL, with a TTL, refreshed by one
  greenlet; withdrawn when the process exits. `lookup` reads another instance's entry, cached briefly
  (serve/cluster/directory.py). A graceful stop says so there as its drain begins (`draining`): a request
  forwarded to an owner that stops, reset unread as its listener closes, is served here (taken over), not
  answered "restarted" (serve/cluster/forward.py, LostInFlight.unread).
- `serve`: the Endpoint hands it every request for a server's MCP paths (after the guard). A request whose session
  id names another instance, or whose handler raises Forward (forwarding.py), is forwarded (forward.py).
- `forwarded_principal`: the guard's check of a request another instance forwarded. Its Mcpgate-Forwarded
  value must be signed for this very request (body included), within a few seconds, by an instance of the
  directory connecting from that instance's address (or from MCPGATE_CLUSTER_PEERS), and seen for the first
  time: its nonce is kept in Redis for the window (SET NX; cluster/nonces.py), so a captured value is refused
  when replayed (a connection's later values: against that connection's series, nonces.py's Channels).
"""

from __future__ import annotations

import atexit
import io
import logging
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import parse_qs

from mcpgate.config.settings import Settings
from mcpgate.core import jsonrpc, session_ids, wire
from mcpgate.serve.cluster import forward
from mcpgate.serve.cluster.directory import Directory
from mcpgate.serve.cluster.forward import Forwarder, LostInFlight, read_body, unread_body
from mcpgate.serve.cluster.forwarding import Forward as Forward  # raised by handlers; defined apart (forwarding.py)
from mcpgate.serve.cluster.moved import held_by, restarted
from mcpgate.serve.cluster.nonces import Channels, Nonces, series
from mcpgate.serve.cluster.peers import ForwardingPeers
from mcpgate.serve.cluster.resent import Resent
from mcpgate.serve.cluster.signing import CheckedBody, Signer
from mcpgate.serve.front import auth
from mcpgate.serve.front.context import RequestContext, context
from mcpgate.serve.front.http import HttpRequest, HttpResponse, Refusal

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger("mcpgate.cluster")

KEY_NAME = "mcpgate:cluster-key"  # the cluster key made once, when MCPGATE_CLUSTER_SECRET is not set
OWNERS_KEPT = 4096  # session ids whose checked owner is remembered (past it, the table starts again)
VALUE_MOST = 8192  # bytes of a Mcpgate-Forwarded value a body may lead with (a value as long as a head's line)
BODY_FORM = (wire.FORWARDED, forward.BODY_FORM)  # the reply to a forwarded request: send POSTs' values in bodies
HOLDERS_ASKED = 3  # holders a request is forwarded to after its owner was found gone (each once)
NOT_FOUND = {"mcp": "Session not found: initialize a new session", "messages": "Session not found: open a new stream"}

Handler = Callable[[HttpRequest], HttpResponse]


class Cluster:
    """This instance among the others: `instance`, `key`, `redis`, `directory` (its entry: where this instance
    is reached, the worker's listening address or MCPGATE_INTERNAL_URL)."""

    def __init__(
        self,
        instance: str,
        key: bytes,
        redis: Redis,
        directory: Directory,
        forwarder: Forwarder,
        peers: auth.Networks = (),
    ) -> None:
        self.instance, self.key, self.redis = instance, key, redis
        self.directory, self.forwarder = directory, forwarder
        self.signer = Signer(key)  # checks forwarded values (core/session_ids' check, with less work per call)
        self.resent = Resent(forwarder.max_body, forwarder.sse_after)  # a forwarded POST sent again (resent.py)
        self.nonces = Nonces(redis)  # forwarded values seen, in Redis (checks sent together: nonces.py)
        self.channels = Channels()  # the series of values each connection carries (their first one in Redis)
        # who may send a forwarded request: MCPGATE_CLUSTER_PEERS, else each sender's address in the directory (as
        # `lookup` gives it, else read from Redis: one restarted a moment ago under the same id is not refused)
        self.peers = ForwardingPeers(directory.lookup, peers, directory.read)
        self._owners: dict[str, str] = {}  # session ids whose MAC checked -> the instance they name
        self._senders: set[str] = set()  # Mcpgate-Forwarded values seen that are an instance id alone

    def mint(self) -> str:
        """A session id naming this instance."""
        return session_ids.mint(self.instance, self.key)

    def owner(self, session_id: str) -> str | None:
        """The instance a session id names when its MAC checks (each request asks: an id that checked is
        remembered, bounded, so that its MAC is not computed again for every call on it)."""
        known = self._owners.get(session_id)
        if known is not None:
            return known
        found = session_ids.owner(session_id, self.key)
        if found is not None:
            if len(self._owners) >= OWNERS_KEPT:
                self._owners.clear()
            self._owners[session_id] = found
        return found

    def lookup(self, instance: str) -> str | None:
        return self.directory.lookup(instance)

    def start(self) -> None:
        self.directory.start()
        atexit.register(self.stop)

    def draining(self, budget: float) -> None:
        """A graceful stop begins (a drain of at most `budget` seconds): the streams relayed for others' sessions
        end (not this instance's work: relayed.py), and the directory says this instance stops, so that a
        connection its closing listener resets is read as never served (directory.py)."""
        self.forwarder.relayed.end_all()
        self.directory.mark_stopping(budget)

    def stop(self) -> None:
        self.directory.stop()
        self.forwarder.close()
        self.nonces.close()

    def forwarded_principal(self, environ: dict[str, Any], found: RequestContext | None = None) -> str:
        """The principal of a request another instance forwarded, or a 403 Refusal (503: Redis unreachable).
        Checked in this order: the connection comes from the sender it names (before any body is read); the
        MAC covers this request, its body included (read here, bounded, and put back for the handler); the
        value is recent; its nonce is new. Marks the request as forwarded: it is never forwarded again. A head
        that names the sender alone has the value in the body's first line (forward.py: the body form), checked
        the same way, the sender named in the head checked before the body is read. `found`: the request's
        context when the caller has it at hand (else read from the environ)."""
        value = str(environ.get("HTTP_MCPGATE_FORWARDED", ""))
        peer = environ.get("REMOTE_ADDR")
        if found is None:
            found = context(environ)
        in_body = value in self._senders or self._a_sender(value)  # the sender alone: the value leads the body
        sender = value if in_body else session_ids.forwarded_sender(value)
        if sender is None or not self.peers.allowed(peer, sender):
            self.refuse_forwarded(peer, f"it does not come from the address of the instance it names ({sender})")
        if in_body:
            value, body = self.value_in_body(environ, peer, sender)
        else:
            body = unread_body(environ, self.forwarder.max_body)
        session = environ.get("HTTP_MCP_SESSION_ID")  # named_session's, its call only for a query's session_id
        if session is None:
            session = named_session(environ) or ""
        request = (environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""), session)
        signed = self.signer.check(value, time.time(), request, body)
        if signed is None:
            self.refuse_forwarded(peer, "its Mcpgate-Forwarded header does not check (another request, key or time)")
        # put back for the handler, with its digest (resent.py keys on it rather than hashing the body again)
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = CheckedBody(body, signed.digest), str(len(body))
        if not self.first_use(signed.nonce, found.peer_gone):
            self.refuse_forwarded(peer, "its Mcpgate-Forwarded value was used before (a replay)")
        found.forwarded = True
        found.view = signed.view  # the view its forwarder chose (views_file.ViewTable.key checks it is ours)
        return signed.principal

    def value_in_body(self, environ: dict[str, Any], peer: str | None, sender: str) -> tuple[str, bytes]:
        """The Mcpgate-Forwarded value a POST's body leads with (its first line, at most VALUE_MOST bytes) and the
        body after it (at most MCPGATE_MAX_BODY bytes, 413 past it); 403 when there is none, or it names another
        sender than the head did."""
        whole = unread_body(environ, self.forwarder.max_body + VALUE_MOST + 1)
        end = whole.find(b"\n", 0, VALUE_MOST + 1)  # the value's line feed, within its first VALUE_MOST + 1 bytes
        value = whole[:end].decode("ascii", "replace")
        # session_ids.forwarded_sender(value) == sender, `sender` a valid instance id (checked in the head)
        if end < 0 or value.count(".") != 5 or value.split(".", 2)[1] != sender:
            self.refuse_forwarded(peer, "its body does not lead with the Mcpgate-Forwarded value its head announced")
        body = whole[end + 1 :]
        if len(body) > self.forwarder.max_body:
            limit = self.forwarder.max_body
            raise Refusal(413, jsonrpc.INVALID_REQUEST, f"Payload Too Large: the body exceeds {limit} bytes")
        return value, body

    def _a_sender(self, value: str) -> bool:
        """Whether a head's Mcpgate-Forwarded value is a sender alone (a valid instance id: remembered, bounded)."""
        if not session_ids.valid_instance(value):
            return False
        if len(self._senders) >= OWNERS_KEPT:
            self._senders.clear()
        self._senders.add(value)
        return True

    @staticmethod
    def refuse_forwarded(peer: str | None, problem: str) -> NoReturn:
        log.warning("refused a forwarded request from %s: %s", peer, problem)
        raise Refusal(403, jsonrpc.INVALID_REQUEST, "Forbidden: invalid forwarded request")

    def first_use(self, nonce: str, connection: object | None = None) -> bool:
        """Whether no forwarded value with this nonce was accepted within the window (remembered in Redis; a
        later count of a connection's series against that connection: nonces.py, Channels). `connection`: the
        object the worker keeps for the connection the request came on (None: another WSGI server's, every
        nonce then goes to Redis)."""
        if connection is not None:  # a later value of a connection's series: against its count (no Redis)
            follows = self.channels.follows_nonce(connection, nonce)
            if follows is not None:
                return follows
        try:
            fresh = self.nonces.first_use(nonce)
        except self.directory.errors as exc:
            log.warning("could not record a forwarded request's nonce: %s", exc)
            raise Refusal(
                503, jsonrpc.INTERNAL_ERROR, "Service Unavailable: the fleet's Redis is unreachable"
            ) from None
        if fresh and connection is not None:
            found = series(nonce)
            if found is not None:  # count 0 (a later count went to Redis only when it is no series' count)
                self.channels.open(connection, found[0])
        return fresh

    def serve(
        self, environ: dict[str, Any], kind: str, handler: Handler, found: RequestContext | None = None
    ) -> HttpResponse:
        """Serve a request on a server's MCP path `kind`: here, or at the owner of the session it names (`found`:
        its context when the caller has it at hand, else read from the environ).

        A handler raising Forward for an owner that cannot be reached is run once more with the same body,
        the owner now gone from `lookup` (so it can answer as for a lost owner: a new call, not a 404)."""
        if kind == "sse":  # HTTP+SSE's stream: a new session, here
            session_id = None
        else:  # named_session's, its call only for a query's session_id
            session_id = environ.get("HTTP_MCP_SESSION_ID")
            if session_id is None:
                session_id = named_session(environ)
        owner = self.owner(session_id) if session_id else None
        if found is None:
            found = context(environ)
        if owner is not None and owner != self.instance:
            if kind != "mcp":
                return self.forward(environ, None, owner, session_id or "", kind)
            limit = self.forwarder.max_body
            body = unread_body(environ, limit) if found.message is None else read_body(environ, limit)
            response = None if found.forwarded else self._forward(environ, body, owner, session_id or "", found)
            if response is not None:
                return response
            return self._again(environ, body, kind, handler, owner)  # gone: taken over here (cluster/takeover.py)
        if kind == "mcp" and session_id:  # a POST its forwarder died under, sent again: serve/cluster/resent.py
            response = self.resent.serve(environ, session_id, lambda: self._here(environ, kind, handler), found)
        else:
            response = self._here(environ, kind, handler)
        # its forwarder may send the values of its POSTs in their bodies: said to one that sent it in the head (a
        # head naming the sender alone is the body form already: its reply keeps the worker's short way for JSON)
        if found.forwarded and environ.get("HTTP_MCPGATE_FORWARDED") not in self._senders:
            response.headers.append(BODY_FORM)
        return response

    def _here(self, environ: dict[str, Any], kind: str, handler: Handler) -> HttpResponse:
        """Serve it with `handler`; a Forward it raises goes to that owner (the handler runs again if it is gone)."""
        try:
            return handler(HttpRequest(environ))
        except Forward as forward:
            owner = forward.owner
            body = forward.body if forward.body is not None else read_body(environ, self.forwarder.max_body)
            response = self._forward(environ, body, owner, named_session(environ) or "")
            if response is not None:
                return response
        return self._again(environ, body, kind, handler, owner)

    def _again(self, environ: dict[str, Any], body: bytes, kind: str, handler: Handler, gone: str) -> HttpResponse:
        """Run the handler again, `gone` now gone from `lookup` (or not holding the session): each holder it names
        asked once (a stopping one lets it go when asked: the next run takes it over here), HOLDERS_ASKED runs."""
        asked = [gone]
        for _ in range(HOLDERS_ASKED):
            environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
            context(environ).message = None
            try:
                return handler(HttpRequest(environ))
            except Forward as again:
                if again.owner in asked:
                    break
                asked.append(again.owner)
                response = self._forward(environ, body, again.owner, named_session(environ) or "")
                if response is not None:
                    return response
        log.warning("instance %s: no holder of the session (%s) served it: not found", self.instance, ", ".join(asked))
        raise self.not_found(kind) from None

    def forward(
        self, environ: dict[str, Any], body: bytes | None, owner: str, session_id: str = "", kind: str = "mcp"
    ) -> HttpResponse:
        """The owner's reply to this request; 404 when the owner is gone (or the request was forwarded here)."""
        response = self._forward(environ, body, owner, session_id)
        if response is None:
            raise self.not_found(kind)
        return response

    def _forward(
        self,
        environ: dict[str, Any],
        body: bytes | None,
        owner: str,
        session_id: str,
        found: RequestContext | None = None,
        moved: bool = False,
    ) -> HttpResponse | None:
        """The owner's reply; None when it is not in the directory or cannot be reached (then it is taken for
        gone until its directory entry would have expired), or when this request was itself forwarded here.
        `found`: the request's context when the caller has it at hand (else read from the environ)."""
        if found is None:
            found = context(environ)
        if found.forwarded:  # a forwarded request is never forwarded again
            log.warning("refused a request forwarded here for instance %s", owner)
            return None
        url = self.lookup(owner)
        if url is None:
            self.forwarder.report_gone(owner, "not in the directory")
            return None
        try:
            principal = found.principal  # auth.principal's: the guard's, else the one of the static or no-auth case
            if principal is None:
                principal = auth.STATIC_PRINCIPAL
            view = found.view or ""  # the view the caller's identity chose here (the owner applies it)
            response = self.forwarder.forward(environ, body, url, owner, session_id, principal, view)
        except LostInFlight as lost:
            self.directory.forget(owner)
            if lost.unread and self.directory.stopping(owner, url):  # its listener closed under the request:
                log.info("instance %s stopped with a request forwarded there unread: served here", owner)
                return None  # never read there: taken over here, as for a gone owner (forward.py, LostInFlight)
            return restarted(body or b"") if environ["REQUEST_METHOD"] == "POST" else None
        if response is None:
            self.directory.forget(owner)
            return None
        holder = held_by(response)  # the owner no longer holds the session: its holder, or nobody (taken here)
        if holder and holder != self.instance and holder != owner and not moved:
            return self._forward(environ, body, holder, session_id, found, moved=True)
        return response if holder is None else None

    @staticmethod
    def not_found(kind: str) -> Refusal:
        return Refusal(404, jsonrpc.INVALID_REQUEST, NOT_FOUND.get(kind, NOT_FOUND["mcp"]))


def named_session(environ: dict[str, Any]) -> str | None:
    """The session a request names: its Mcp-Session-Id header, else the HTTP+SSE `session_id` query."""
    value = environ.get("HTTP_MCP_SESSION_ID")
    if value is not None:
        return str(value)
    query = environ.get("QUERY_STRING")
    if query:
        values = parse_qs(query).get(wire.SESSION_PARAM)
        if values and len(values) == 1:
            return str(values[0])
    return None


def create(settings: Settings, listening: Sequence[str] = ()) -> Cluster | None:
    """This worker's Cluster, built and started (the directory heartbeat) when settings.redis_url is set.
    `listening`: the worker's listening addresses ("host:port", "unix:/path"), the first one where other instances
    reach this one unless MCPGATE_INTERNAL_URL says otherwise."""
    if not settings.redis_url:
        return None
    from mcpgate.serve.cluster.redis_client import connect

    client = connect(settings.redis_url)
    instance = settings.instance_id or secrets.token_hex(4)
    key = cluster_key(settings, client)
    url = internal_url(settings, listening)
    forwarder = Forwarder(key, settings, instance)
    directory = Directory(client, instance, url)
    cluster = Cluster(instance, key, client, directory, forwarder, auth.networks(settings.cluster_peers))
    cluster.start()
    log.info("instance %s in the cluster, reached at %s", instance, url)
    return cluster


def cluster_key(settings: Settings, client: Redis) -> bytes:
    """MCPGATE_CLUSTER_SECRET, or the key the first instance made and kept in Redis (sealed with MCPGATE_STATE_KEY
    when it is set, under another name: oauth/sealing.py)."""
    if settings.cluster_secret:
        return settings.cluster_secret.encode()
    if settings.state_key:
        from mcpgate.serve.oauth.redis_storage import RedisStorage
        from mcpgate.serve.oauth.sealing import sealer_of

        sealed = RedisStorage(client, prefix="mcpgate:", sealer=sealer_of(settings.state_key))
        return sealed.stored_once("cluster-key", lambda: secrets.token_urlsafe(32).encode())
    client.set(KEY_NAME, secrets.token_urlsafe(32), nx=True)
    value = client.get(KEY_NAME)
    if not isinstance(value, bytes):
        raise RuntimeError("the cluster key vanished from Redis")
    return value


def internal_url(settings: Settings, listening: Sequence[str] = ()) -> str:
    """MCPGATE_INTERNAL_URL, else the first address the worker listens on (`listening`: gunicorn's -b included;
    0.0.0.0 or :: read as this host's name), else the configured bind."""
    if settings.internal_url:
        return settings.internal_url.rstrip("/")
    address = listening[0] if listening else settings.addresses[0]
    if address.startswith("unix:"):
        log.warning("bound to %s: set MCPGATE_INTERNAL_URL so other instances can forward here", address)
        return "http://unix-socket.invalid"
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
