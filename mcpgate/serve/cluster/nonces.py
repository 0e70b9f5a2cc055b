"""The single-use check of the nonces of forwarded requests (Mcpgate-Forwarded, core/session_ids), in Redis.

Each accepted value's nonce is kept in Redis (SET NX) for NONCE_TTL seconds, longer than the value is valid from
any clock: a value is accepted once across the whole fleet and across restarts of the instance it was sent to.
A table in this process alone would not do: a process restarted under the same instance id (or the new worker
of a HUP, which serves next to the old one on the same socket) starts with an empty table while the values the
other accepted are still valid, and a session is taken over by whichever instance serves its next request
(serve/cluster/takeover.py), so a replayed call would run again.

The owner's profile had that command at a quarter of its CPU per forwarded call, most of it the Redis client's
own work around the command (its retry wrapper, connection pool, command packing and reply parser: ~190 µs of
CPU against ~65 µs for the same exchange written and read directly). So the checks have their own connection
(made by the client's connection class from the same URL: its AUTH, database, TLS and timeouts), the command is
packed here, and checks are sent together: the first check sends its command at once; checks made while one is
on its way wait and then go in one write (each its own SET NX, each its own reply), as many as arrived, at most
MOST_AT_ONCE. Nothing is answered before Redis has answered for it. A connection that fails is dropped, and the
commands sent once more on a new one: a nonce set by the lost attempt then reads as used (a refusal, never a
replay let through). Bounded: one waiting entry per request being checked (the worker's connections at most);
each read waits at most the client's command timeout (serve/cluster/redis_client.py).

Most nonces never reach Redis (Channels): a forwarder signs the values it sends on one kept-alive connection with
`<channel>~<count>`, a random channel drawn when it connected and 0, 1, 2, ... The first (count 0) is checked in
Redis as any nonce; once accepted, this worker remembers that channel for the connection it came on (keyed by the
connection's own object, gone with it), and accepts a later value of that channel on that connection only with a
count above the last accepted. A captured value is refused everywhere: count 0 is in Redis; a later count is
accepted on no other connection (none has its channel: only a count 0 opens one), and on its own only once. The
owner's CPU per forwarded call was a quarter that Redis exchange; Redis's own, a tenth of the call.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import gevent
from gevent.event import AsyncResult

from mcpgate.core import session_ids

if TYPE_CHECKING:
    from redis import Redis

NONCE_PREFIX = "mcpgate:forwarded:"  # + the nonce of an accepted Mcpgate-Forwarded value, kept past its window
NONCE_TTL = 2 * session_ids.FORWARDED_WINDOW + 1  # seconds: a value is valid that long at most, from any clock
MOST_AT_ONCE = 128  # nonces sent in one write at most
_TAIL = b"\r\n$1\r\n1\r\n$2\r\nNX\r\n$2\r\nEX\r\n$%d\r\n%d\r\n" % (len(str(NONCE_TTL)), NONCE_TTL)


_ref = weakref.ref
CHANNEL_MARK = "~"  # <channel>~<count>: a nonce of a connection's series
MAX_COUNT_DIGITS = 18  # a count longer than this is no count of a series (it goes to Redis as any nonce)


def series(nonce: str) -> tuple[str, int] | None:
    """A nonce's channel and count when it is one of a connection's series (`<channel>~<count>`), else None."""
    channel, mark, count = nonce.rpartition(CHANNEL_MARK)
    if not (mark and channel and count.isascii() and count.isdigit() and len(count) <= MAX_COUNT_DIGITS):
        return None
    return channel, int(count)


class Channels:
    """The channel each connection opened (its count-0 value accepted in Redis) and the last count accepted on it.
    One entry per live connection that carried a forwarded request (a weak key: it goes with the connection)."""

    def __init__(self) -> None:
        # [channel, last count]: changed in place (a weak dictionary's store makes a weak reference each time)
        self._open: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
        # its table, read with weak references made here (they compare as the references it holds): get's frame spared
        self._data: dict[Any, list[Any]] = self._open.data  # type: ignore[attr-defined]

    def open(self, connection: Any, channel: str) -> None:
        self._open[connection] = [channel, 0]

    def follows_nonce(self, connection: Any, nonce: str) -> bool | None:
        """follows(connection, *series(nonce)) for a nonce of a series with a count above 0 (in one call: each
        forwarded request on an owner asks); None for any other nonce (count 0, or none of a series: Redis's)."""
        channel, mark, count = nonce.rpartition(CHANNEL_MARK)
        if not (mark and channel and count.isascii() and count.isdigit() and len(count) <= MAX_COUNT_DIGITS):
            return None
        number = int(count)
        if number <= 0:
            return None
        known = self._data.get(_ref(connection))  # WeakKeyDictionary.get's, its Python frame spared
        if known is None or known[0] != channel or number <= known[1]:
            return False
        known[1] = number
        return True

    def follows(self, connection: Any, channel: str, count: int) -> bool:
        """Whether `count` of `channel` is new on this connection (it is recorded now)."""
        known = self._open.get(connection)
        if known is None or known[0] != channel or count <= known[1]:
            return False
        known[1] = count
        return True


def set_nx(key: bytes) -> bytes:
    """SET <key> 1 NX EX NONCE_TTL in the Redis protocol."""
    return b"*6\r\n$3\r\nSET\r\n$%d\r\n%s%s" % (len(key), key, _TAIL)


class Nonces:
    """`first_use(nonce)`: whether no value with this nonce was accepted within NONCE_TTL (it is recorded now).
    Raises a RedisError or OSError when Redis does not answer (or answers an error)."""

    def __init__(self, redis: Redis) -> None:
        from redis.exceptions import ConnectionError, ResponseError, TimeoutError  # imported in a fleet only

        self._lost = (ConnectionError, TimeoutError, OSError)  # the connection is not usable any more
        self._refused, self._interrupted = ResponseError, ConnectionError
        self._redis = redis
        self._made: Any = None  # the connection, made at the first check
        self._waiting: list[tuple[bytes, AsyncResult]] = []
        self._sending = False

    @property
    def _connection(self) -> Any:
        if self._made is None:
            pool = self._redis.connection_pool
            self._made = pool.connection_class(**pool.connection_kwargs)
        return self._made

    def first_use(self, nonce: str) -> bool:
        key = (NONCE_PREFIX + nonce).encode()
        if self._sending:  # a command is on its way: this one goes with the next write
            waiter = AsyncResult()
            self._waiting.append((key, waiter))
            return bool(waiter.get())
        self._sending = True
        try:
            reply = self._exchange([key])[0]
        finally:
            self._next()
        if isinstance(reply, BaseException):
            raise reply
        return reply is not None

    def close(self) -> None:
        if self._made is not None:
            self._made.disconnect()

    def _next(self) -> None:
        """Send what waits (in another greenlet, so that this request goes on), or let the next check send."""
        if self._waiting:
            gevent.spawn(self._send_waiting)
        else:
            self._sending = False

    def _send_waiting(self) -> None:
        batch, self._waiting = self._waiting[:MOST_AT_ONCE], self._waiting[MOST_AT_ONCE:]
        try:
            replies = self._exchange([key for key, _ in batch])
            for (_, waiter), reply in zip(batch, replies, strict=True):
                if isinstance(reply, BaseException):
                    waiter.set_exception(reply)
                else:
                    waiter.set(reply is not None)
        except BaseException as exc:  # Redis away (or this greenlet killed): every check in the batch fails
            failure = exc if isinstance(exc, Exception) else self._interrupted("interrupted")
            for _, waiter in batch:
                if not waiter.ready():
                    waiter.set_exception(failure)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._next()

    def _exchange(self, keys: list[bytes]) -> list[Any]:
        """Each key's reply (b"OK": set now; None: there already; a ResponseError), on a connection that is
        made again, once, when it fails."""
        try:
            return self._send(keys)
        except self._lost:
            self._connection.disconnect()
        except BaseException:  # interrupted between a write and its replies: never read them as another's
            self._connection.disconnect()
            raise
        try:
            return self._send(keys)
        except BaseException:
            self._connection.disconnect()
            raise

    def _send(self, keys: list[bytes]) -> list[Any]:
        self._connection.send_packed_command([b"".join(set_nx(key) for key in keys)])
        replies: list[Any] = []
        for _ in keys:
            try:
                replies.append(self._connection.read_response())
            except self._refused as exc:  # this command's error reply, read whole: the others' follow
                replies.append(exc)
        return replies
