"""InProcessRelay: the relay's pump (pump.py) for a host in the same process (serve/remote's RemoteChild), with
nothing framed or parsed twice on the way.

The host feeds the relay's stdin through pipes of its own, and while the relay's reader waits on empty input it
hands a line (take_line) or a message it has parsed already (take_message) to the relay at once, in its own
greenlet, as the reader would have handled it: no wake-up of the reader, no parse again of a parsed message. What
the relay writes reaches the host as the messages themselves (MessagePipes.write_messages), never encoded and
parsed again, each at once whenever nothing is queued before it (an in-process host gains nothing from one write
for several answers).
"""

from __future__ import annotations

from typing import Protocol, cast

from mcpgate.core import jsonrpc
from mcpgate.relay.host_writer import HostWriter, Out
from mcpgate.relay.pump import Relay
from mcpgate.relay.stdio import IDLE_WAIT_SECONDS, StdPipes


class MessagePipes(StdPipes, Protocol):
    """An in-process host's pipes: what the relay writes reaches it as the messages (or the relay's own lines)
    themselves, in order."""

    def write_messages(self, items: list[Out]) -> None: ...


class MessageWriter(HostWriter):
    """A HostWriter whose host takes the messages themselves (MessagePipes), each at once whenever nothing is
    queued before it."""

    def emit(self, pipes: StdPipes, items: list[Out]) -> None:
        cast(MessagePipes, pipes).write_messages(items)


class InProcessRelay(Relay):
    """A Relay whose host is in the same process (see the module docstring); served over MessagePipes."""

    def _host_writer(self) -> HostWriter:
        return MessageWriter(self.options.out_queue, self.options.out_put_timeout, lambda: True, self._stop.set)

    def serve(self, pipes: StdPipes, wake: float = IDLE_WAIT_SECONDS) -> int:
        if getattr(pipes, "write_messages", None) is None:
            raise TypeError("an InProcessRelay is served over MessagePipes")
        return super().serve(pipes, wake)

    def take_line(self, line: bytes) -> bool:
        """The host's line handled at once in its greenlet as the reader would (the host has seen the
        reader wait on empty input), unless that could block, overtake or answer before returning (a line not
        whole, invalid or batched, an id in use, a full queue): False, and the host puts it in the pipes."""
        if line[:1] != b"{" or 10 in line or not self._may_take(len(line)):
            return False
        message = jsonrpc.parse(line)
        if not isinstance(message, (jsonrpc.Request, jsonrpc.Notification, jsonrpc.Response)):
            return False
        return self.take_message(message, len(line))

    def take_message(self, message: jsonrpc.Request | jsonrpc.Notification | jsonrpc.Response, size: int) -> bool:
        """take_line() of a message the host has parsed already (`size`: its encoded length): the same rules, no
        parse again."""
        if not self._may_take(size) or (
            isinstance(message, jsonrpc.Request) and jsonrpc.id_key(message.id) in self._admission.jobs
        ):
            return False
        self._handle(message)
        return True

    def _may_take(self, size: int) -> bool:
        return not (
            self._stop.is_set()
            or size > self.options.max_message_bytes
            or not self._admission.room
            or self._oneway.full()
        )
