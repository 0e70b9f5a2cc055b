"""The relay's own error types, and the one place transport exceptions become them.

Every failure the host can see is a RelayError: it carries the JSON-RPC code and
a message naming the cause, and says whether the request may have reached the
upstream (which decides whether a retry is safe). Transport exceptions (the relay's own HTTP client's, urllib3's,
requests') are translated here, in `mapped()`, and nowhere else. requests and urllib3 are not imported here: a
relay whose route needs neither never loads them (relay/http_routes.py), and their exceptions are looked for only
once they are loaded (nothing can raise one before).
"""

from __future__ import annotations

import email.utils
import sys
import time
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from mcpgate.config.relay_settings import TOKEN_ENV
from mcpgate.core import jsonrpc
from mcpgate.core.sse import EventTooLarge

EXCERPT_CHARS = 200
# 4xx statuses about the relay's own setup (credentials, proxy, rate): never the host's business alone.
CONFIG_STATUSES = frozenset({401, 403, 407, 429})

# Methods whose repetition cannot change anything upstream: retried even when the
# first attempt may have reached the server. tools/call is never on this list.
REPLAY_SAFE = frozenset(
    {
        "initialize",
        "ping",
        "resources/read",
        "prompts/get",
        "completion/complete",
    }
)


def is_replay_safe(method: str) -> bool:
    """Whether a request may be sent again after an attempt that may have reached the server."""
    return method in REPLAY_SAFE or method.endswith("/list")


class RelayError(Exception):
    """A failure reported to the host as a JSON-RPC error response."""

    code = jsonrpc.INTERNAL_ERROR
    # True when the upstream may have received (and acted on) the request.
    maybe_sent = True
    # False when trying again cannot help (bad credentials, bad URL, ...).
    retryable = False
    # True when the failure is the host's business, not the relay's: the upstream refused the
    # host's request (see HttpStatusError.refused_before_session). Logged at INFO, not WARNING.
    routine = False

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def response(self, msg_id: jsonrpc.Id | None) -> dict[str, Any]:
        return jsonrpc.error_response(msg_id, self.code, self.message, self.data)


class NotSent(RelayError):
    """The request never left the relay (connection refused, DNS failure, connect timeout)."""

    code = jsonrpc.CONNECTION_CLOSED
    maybe_sent = False
    retryable = True


class MaybeSent(RelayError):
    """The connection failed after the request may have been delivered."""

    code = jsonrpc.CONNECTION_CLOSED
    retryable = True


class ReplyLost(MaybeSent):
    """The request reached the upstream but its reply stream broke or ended early."""


class ConfigError(RelayError):
    """The relay cannot talk to the upstream as configured (bad URL, TLS failure)."""

    maybe_sent = False


class InvalidUpstream(RelayError):
    """The upstream answered with something that is not a usable MCP message."""


class ShuttingDown(RelayError):
    """The relay is exiting before the reply arrived."""

    code = jsonrpc.CONNECTION_CLOSED


class HttpStatusError(RelayError):
    """The upstream answered with an HTTP error status."""

    def __init__(self, message: str, status: int, data: Any = None, code: int | None = None) -> None:
        super().__init__(message, data)
        self.status = status
        if code is not None:
            self.code = code
        self.maybe_sent = status >= 500

    def refused_before_session(self) -> HttpStatusError:
        """Mark a 4xx to a request sent before any session existed as the host's business (say, a probe
        such as server/discover that a server without it refuses): the host gets the error and decides.
        Refusals that point at the relay's own setup (credentials, rate limits) stay warnings."""
        self.routine = 400 <= self.status < 500 and self.status not in CONFIG_STATUSES
        return self


class SessionExpired(HttpStatusError):
    """404 on a request that carried a session id: the upstream forgot the session."""

    def __init__(self, session_id: str) -> None:
        super().__init__("upstream session expired (HTTP 404)", 404)
        self.session_id = session_id
        self.maybe_sent = False


class FallbackToSse(RelayError):
    """auto transport: the Streamable HTTP initialize was refused in the way old servers refuse it."""

    def __init__(self, status: int, excerpt: str) -> None:
        super().__init__(f"Streamable HTTP initialize got HTTP {status}: {excerpt}")
        self.status = status


def redact(url: str) -> str:
    """A URL fit for messages and logs: no user info, no query (either may carry a secret)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "..." if parts.query else "", ""))


class ReplyBroke(Exception):
    """The relay's own HTTP client (relay/fast_http.py): the reply broke off, or is not HTTP/1.1 it reads."""


class NoReply(ReplyBroke):
    """The relay's own HTTP client: the connection ended before any reply (the server closed it)."""


class ReplyTimedOut(Exception):
    """The relay's own HTTP client: the reply did not come within the read timeout."""


class mapped:
    """Translate transport failures inside the block into RelayErrors: the relay's own HTTP client's, urllib3's
    and requests' (the relay sends on urllib3's pools directly when requests works out a route, see http_routes,
    so urllib3's exceptions arrive unwrapped; requests' still can, from preparing a request) and sockets'.
    The URL is redacted only when there is an error to name.
    A class, not a generator: it is entered several times on every relayed call.
    """

    __slots__ = ("url",)

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> Literal[False]:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, RelayError):
            return False
        translated = _translated(exc, self.url)
        if translated is None:
            return False
        raise translated from None


def _translated(failure: Exception, url: str) -> RelayError | None:
    """The RelayError for a failure, or None when it is none of the network's."""
    if isinstance(failure, EventTooLarge):
        return InvalidUpstream(f"upstream sent an oversized SSE event: {failure}")
    if isinstance(failure, NoReply):
        return MaybeSent(f"connection to upstream {redact(url)} failed: the server closed the connection")
    if isinstance(failure, ReplyBroke):
        return MaybeSent(f"connection to upstream {redact(url)} broke mid-reply: {_reason(failure)}")
    if isinstance(failure, ReplyTimedOut):
        return MaybeSent(f"upstream {redact(url)} did not answer in time (read timeout)")
    # Only a route requests worked out raises these: none can exist before their modules are loaded.
    found = _urllib3_error(failure, url) if "urllib3.exceptions" in sys.modules else None
    if found is None and "requests.exceptions" in sys.modules:
        found = _requests_error(failure, url)  # before OSError: requests' exceptions are OSErrors
    if found is None and isinstance(failure, OSError):
        found = MaybeSent(f"connection to upstream {redact(url)} failed: {failure.strerror or failure}")
    return found


def _urllib3_error(failure: Exception, url: str) -> RelayError | None:
    from urllib3 import exceptions as u3  # loaded already (see _translated)

    try:
        raise failure
    except u3.NewConnectionError as exc:  # refused, host not found (a ConnectTimeoutError subclass)
        return _connection_error(url, exc)
    except u3.ConnectTimeoutError:
        return NotSent(f"cannot reach upstream {redact(url)}: connection timed out")
    except u3.SSLError as exc:
        return ConfigError(f"TLS failure talking to {redact(url)}: {_reason(exc)}")
    except u3.LocationValueError as exc:
        return ConfigError(f"invalid request to {redact(url)}: {exc}")
    except u3.ReadTimeoutError:
        return MaybeSent(f"upstream {redact(url)} did not answer in time (read timeout)")
    except (u3.ProtocolError, u3.DecodeError) as exc:
        return _broken(url, exc)
    except u3.HTTPError as exc:
        return MaybeSent(f"connection to upstream {redact(url)} failed: {_reason(exc)}")
    except Exception:  # noqa: BLE001 (not urllib3's)
        return None


def _requests_error(failure: Exception, url: str) -> RelayError | None:
    from requests import exceptions as rq  # loaded already (see _translated)

    try:
        raise failure
    except rq.ConnectTimeout:
        return NotSent(f"cannot reach upstream {redact(url)}: connection timed out")
    except rq.SSLError as exc:
        return ConfigError(f"TLS failure talking to {redact(url)}: {_reason(exc)}")
    except rq.InvalidHeader:
        # The exception text quotes the header value, which may be the bearer token.
        return ConfigError(f"invalid request to {redact(url)}: a header value has characters HTTP does not allow")
    except (rq.InvalidURL, rq.MissingSchema, rq.InvalidSchema) as exc:
        return ConfigError(f"invalid request to {redact(url)}: {exc}")
    except rq.ReadTimeout:
        return MaybeSent(f"upstream {redact(url)} did not answer in time (read timeout)")
    except rq.ConnectionError as exc:
        return _connection_error(url, exc.args[0] if exc.args else exc)
    except (rq.ChunkedEncodingError, rq.ContentDecodingError) as exc:
        return _broken(url, exc)
    except rq.RequestException as exc:
        return MaybeSent(f"request to upstream {redact(url)} failed: {_reason(exc)}")
    except Exception:  # noqa: BLE001 (not requests')
        return None


def _broken(url: str, exc: Exception) -> RelayError:
    """A reply that broke off; urlopen's "Connection aborted." is an exchange that failed before any reply."""
    if exc.args[:1] == ("Connection aborted.",):
        return _connection_error(url, exc)
    return MaybeSent(f"connection to upstream {redact(url)} broke mid-reply: {_reason(exc)}")


def _connection_error(url: str, reason: BaseException) -> RelayError:
    """The error for a failed exchange, from urllib3's reason (what requests' ConnectionError wraps)."""
    from urllib3 import exceptions as u3  # loaded: the failure is urllib3's or requests'

    if isinstance(reason, u3.MaxRetryError) and reason.reason is not None:
        reason = reason.reason
    if isinstance(reason, u3.NameResolutionError):
        return NotSent(f"cannot reach upstream {redact(url)}: host name not found")
    if isinstance(reason, (u3.NewConnectionError, u3.ConnectTimeoutError)):
        return NotSent(f"cannot reach upstream {redact(url)}: {_reason(reason)}")
    return MaybeSent(f"connection to upstream {redact(url)} failed: {_reason(reason)}")


def network_reason(exc: BaseException) -> str:
    """The readable reason of a network error (e.g. "connection refused")."""
    return _reason(exc)


def _reason(exc: BaseException) -> str:
    """The innermost readable reason of a wrapped network error."""
    text = str(exc)
    for marker in (
        "Connection refused",
        "Connection reset",
        "timed out",
        "Remote end closed",
        "Broken pipe",
        "Name or service not known",
        "certificate verify failed",
    ):
        if marker in text:
            return marker.lower() if marker != "Remote end closed" else "the server closed the connection"
    return text[:EXCERPT_CHARS]


def excerpt(body: bytes) -> str:
    """A short one-line excerpt of a response body for an error message."""
    text = body.decode("utf-8", errors="replace").strip()
    text = " ".join(text.split())
    if len(text) > EXCERPT_CHARS:
        text = text[:EXCERPT_CHARS] + "..."
    return text or "(empty body)"


def status_error(
    status: int, reason: str, body: bytes, token_set: bool, www_authenticate: str | None = None
) -> HttpStatusError:
    """The error for an HTTP error status, naming the status, the body and what to do."""
    label = f"HTTP {status}{' ' + reason if reason else ''}"
    data: dict[str, Any] = {"httpStatus": status, "body": excerpt(body)}
    if status == 401:
        hint = (
            f"the bearer token in {TOKEN_ENV} was rejected"
            if token_set
            else f"set {TOKEN_ENV} to a bearer token for this server"
        )
        if www_authenticate:
            data["wwwAuthenticate"] = www_authenticate[:EXCERPT_CHARS]
        return HttpStatusError(f"upstream requires authorization ({label}): {hint}", status, data)
    if status == 403:
        return HttpStatusError(f"upstream refused the request ({label}): {excerpt(body)}", status, data)
    upstream = _jsonrpc_error(body)
    if upstream is not None:
        code, message = upstream
        return HttpStatusError(f"upstream {label}: {message}", status, data, code=code)
    return HttpStatusError(f"upstream {label}: {excerpt(body)}", status, data)


def _jsonrpc_error(body: bytes) -> tuple[int, str] | None:
    """(code, message) when an HTTP error body is a JSON-RPC error response."""
    if not body.strip():
        return None
    message = jsonrpc.parse(body)
    if isinstance(message, jsonrpc.Response) and message.is_error:
        error = message.obj["error"]
        return int(error["code"]), str(error.get("message", ""))[:EXCERPT_CHARS]
    return None


def is_jsonrpc_error(body: bytes) -> bool:
    """Whether an HTTP error body is a recognised JSON-RPC error response."""
    return _jsonrpc_error(body) is not None


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
