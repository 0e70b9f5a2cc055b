"""A loopback HTTP server that writes exact reply bytes, for the tests of HTTP clients (the relay's fast_http, the
bench's lean client): each request's head is read whole (its body by Content-Length), then `answer(head)`'s bytes
are sent, a connection closed after `per_connection` requests; connections and heads are counted."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from tests.support.waiting import HANG_GUARD

Answer = Callable[[bytes], bytes | None]  # the request's head -> the raw reply (None: close without one)


class RawServer:
    """Answers each request on a connection with `answer(head)`; counts connections and requests."""

    def __init__(self, answer: Answer, requests_per_connection: int = 1000) -> None:
        self.answer, self.per_connection = answer, requests_per_connection
        self.connections = 0
        self.heads: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for sock in [self.sock, *self._open]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(HANG_GUARD)
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buffer = b""
            for _ in range(self.per_connection):
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next(
                    (int(x.split(b":", 1)[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")),
                    0,
                )
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                buffer = buffer[length:]
                self.heads.append(head)
                reply = self.answer(head)
                if reply is None:
                    return
                conn.sendall(reply)
