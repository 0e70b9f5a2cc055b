"""Whether a client has closed its connection, asked without waiting and without yielding to gevent's hub: a
request's probe (peer_gone for any socket, peer_polled for a plain one's own socket object, the connection keeping
its poll object), and a watch's check of a descriptor that turned readable (ended). Data waiting, such as a
pipelined request, means the client is still there; a reset connection or a closed socket reads as gone."""

from __future__ import annotations

import _socket
import select
import socket
from typing import Any

from gevent.monkey import get_original

_poll = get_original("select", "poll")  # the system call itself: gevent's select yields to the hub even with no wait


def peer_gone(sock: socket.socket) -> bool:
    """Whether the client closed its connection: the socket reads as ended (never blocks, never yields to the hub
    (one poll system call, any descriptor number); data waiting, such as a pipelined request, means it is still
    there)."""
    try:
        probe = _poll()
        probe.register(sock.fileno(), select.POLLIN)
        return bool(probe.poll(0)) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT


def peer_polled(raw: Any, pollers: list[Any]) -> bool:
    """peer_gone's verdict for a plain socket, read on its own socket object (never gevent's, which would wait) with
    the one poll object its connection keeps in `pollers` (made at its first probe): a poll system call, and a peek
    only when that reads as ready. (A lone non-blocking peek costs more: an open, quiet connection's raises.)"""
    try:
        if raw.fileno() < 0:  # closed: its descriptor's number may be another connection's by now
            return True
        if not pollers:
            pollers.append(polling(raw))
        return bool(pollers[0].poll(0)) and raw.recv(1, _PEEK) == b""
    except (OSError, ValueError):
        return True


def polling(raw: Any) -> Any:
    """A poll object (the system call's, never gevent's) asking whether `raw`'s socket is readable."""
    poller = _poll()
    poller.register(raw.fileno(), select.POLLIN)
    return poller


def ended(fd: int) -> bool:
    """Whether the connection on `fd` reads as ended, without waiting (data waiting: not ended)."""
    raw = _socket.socket(fileno=fd)  # the fd's own socket object, detached below (never closed here)
    try:
        return raw.recv(1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True
    finally:
        raw.detach()
