"""RemoteSpec: what a remote server's children (RemoteChild, child.py) are made from: its upstream (the config
entry's url, transport, era, headers, auth), the relay's limits, and the server's own settings that apply to a
remote: max_message_bytes, write_queue_bytes (a child's unread input), request_timeout (per request, see
transport.py), close_timeout (the drain at its end). tools_allow/deny, max_sessions, the pool's settings and
the metrics labels act above the child, as for a stdio server. The child process limits (child_cpu_seconds,
child_memory_bytes, child_open_files, child_processes, child_no_network, stderr, pass_env) have nothing to act
on: the config file refuses them for a remote server.

The relay's other limits are its declared defaults (mcpgate/config/relay_settings.py: connect and read timeouts,
requests in flight and queued, the cancel grace). Each RemoteChild has its own HTTP client (its own connections
and cookies: one client session never shares an upstream's affinity cookie with another); the OAuth client
credentials' token source, when the entry has one, is the server's, shared by its children.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from mcpgate.child.process import ChildProcess, OnMessage
from mcpgate.config.settings import RelaySettings, Settings
from mcpgate.relay.eras import EraTransport
from mcpgate.relay.http_client import POOL_SPARE, HttpClient, HttpOptions
from mcpgate.relay.pump import PumpOptions
from mcpgate.relay.transport import Sink, Transport
from mcpgate.serve.remote.child import RemoteChild
from mcpgate.serve.remote.transport import Reachability, RemoteTransport, WatchedHttpClient
from mcpgate.serve.servers.remote_entry import RemoteEntry
from mcpgate.serve.sessions.spec import ChildSpec, _weakly

RELAY = RelaySettings()  # the relay's declared defaults


@dataclass(frozen=True, kw_only=True)
class RemoteSpec(ChildSpec):
    """A ChildSpec whose `process(...)` is a RemoteChild (argv is the url alone: it names the upstream in the
    era verdicts the pool remembers per command)."""

    server: str
    remote: RemoteEntry
    reachability: Reachability
    http_options: HttpOptions
    pump_options: PumpOptions
    request_timeout: float
    close_grace: float
    authorizer: Any = field(default=None, compare=False)  # the client credentials' Authorizer (HttpClient.auth)
    user_auth: Any = field(default=None, compare=False)  # user_oauth: each principal's sign-in (vault/upstream_oauth)

    @classmethod
    def of(
        cls, settings: Settings, name: str, remote: RemoteEntry, watch: Callable[[ChildProcess], None] | None
    ) -> RemoteSpec:
        pump = PumpOptions(
            max_message_bytes=settings.max_message_bytes,
            max_inflight=RELAY.max_inflight,
            max_queued=RELAY.max_queued,
            cancel_filter=True,
            shutdown_grace=max(0.1, settings.close_timeout),
        )
        per_user = getattr(remote.auth, "per_user", False)  # user_oauth: a token per principal, none shared
        http = HttpOptions(
            connect_timeout=RELAY.connect_timeout,
            read_timeout=RELAY.read_timeout,
            max_message_bytes=settings.max_message_bytes,
            pool_size=RELAY.max_inflight + POOL_SPARE,
            cancel_grace=RELAY.cancel_grace,
            headers=dict(remote.headers),
            bearer_token=remote.bearer_token,
            user_agent="mcpgate",
        )
        return cls(
            argv=(remote.url,),
            env=None,
            cwd=None,
            stderr="discard",
            max_line_bytes=settings.max_message_bytes,
            max_write_queue_bytes=settings.write_queue_bytes,
            close_timeout=settings.close_timeout,
            term_timeout=0.0,
            watch=watch,
            label_prefix=f"{name}/",
            server=name,
            remote=remote,
            reachability=Reachability(name),
            http_options=http,
            pump_options=pump,
            request_timeout=settings.request_timeout,
            close_grace=1.0 + RELAY.connect_timeout,  # the upstream session's DELETE after the drain
            authorizer=remote.auth.auth(remote.url) if remote.auth is not None and not per_user else None,
            user_auth=remote.auth.upstream(settings, name, remote.url) if per_user else None,
        )

    def process(
        self,
        *,
        on_message: OnMessage,
        on_exit: Callable[[str], None],
        label: str,
        principal: str | None = None,
        on_revoke: Callable[[str], None] | None = None,
        **_: Any,
    ) -> ChildProcess:
        """A RemoteChild (typed as the ChildProcess whose surface it has), not started yet. With user_oauth its
        HTTP client carries `principal`'s token alone (SlotsEmpty when they have not signed in upstream), and it
        is stopped (`on_revoke`) when that sign-in ends."""
        spec, stamp = self, None
        if self.user_auth is not None:
            token, stamp = self.user_auth.token_source(principal)
            spec = dataclasses.replace(self, authorizer=token)
        child = RemoteChild(
            spec,
            on_message=on_message,
            on_exit=on_exit if self.watch is None else lambda reason: self._ended_remote(child, on_exit, reason),
            label=label,
        )
        if stamp is not None and principal is not None:
            self.user_auth.vault.hold(principal, child, stamp, _weakly(on_revoke))  # as ChildSpec: not kept by it
        return cast(ChildProcess, child)

    def _ended_remote(self, child: RemoteChild, on_exit: Callable[[str], None], reason: str) -> None:
        self._ended(cast(ChildProcess, child), on_exit, reason)

    def http_client(self) -> HttpClient:
        """A child's own HTTP client (its connections and cookies)."""
        http = WatchedHttpClient(self.http_options, self.remote.url, self.reachability)
        if self.authorizer is not None:
            http.auth = self.authorizer
        return http

    def transport(self, http: HttpClient, sink: Sink) -> Transport:
        """The relay's transport for one child: both eras, the entry's transport and era, errors named."""
        era = EraTransport(
            self.remote.url, http, sink, era=self.remote.protocol_era, transport_mode=self.remote.transport
        )
        return RemoteTransport(era, self.server, self.request_timeout)
