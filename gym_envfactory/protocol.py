"""The wire protocol of the environment server, in one place: what the server (:mod:`gym_envfactory.server`) and
every client (:mod:`gym_envfactory.backends.remote`, :mod:`gym_envfactory.backends.subprocess`,
:mod:`gym_envfactory.containers.run`) must agree on (docs/architecture.md, "Backends").

- HTTP paths: :data:`HEALTH_PATH`, :data:`READY_PATH`, :data:`METRICS_PATH`, :data:`WS_PATH` (the fast
  session protocol), :data:`RPC_PATH` (the same methods over ``POST``), :data:`MCP_PATH` (:func:`mcp_path`).
- Headers: :data:`CLIENT_HEADER`, :data:`CLIENT_KEY_HEADER`, :data:`SESSION_HEADER`,
  :data:`CLOSE_ON_DISCONNECT_HEADER`, and the bearer token of RFC 6750 §2.1 (:func:`bearer_authorization`,
  checked by :func:`bearer_token_matches`).
- The JSON-RPC 2.0 error codes (spec §5.1) and the application codes (``ERR_*``, :data:`ERROR_CODES`).
- Client identity: the one rule for a client name (:func:`is_valid_client_id`), the name a process
  sends by default (:func:`default_client_id`), and the credential that proves it on a server with a token
  (:func:`client_key`).
- The announcement a server started with ``--announce`` prints on stdout, or with ``--announce-fd N``
  writes to that inherited descriptor (:func:`announcement`, :func:`parse_announcement`, :data:`ANNOUNCE_NONCE_VAR`).

Standard library only: a client never imports the server package (or Starlette) to speak the protocol.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "listening_socket",
    "HEALTH_PATH", "READY_PATH", "METRICS_PATH", "WS_PATH", "RPC_PATH", "MCP_PATH", "mcp_path",
    "CLIENT_HEADER", "CLIENT_KEY_HEADER", "SESSION_HEADER", "CLOSE_ON_DISCONNECT_HEADER", "SPLIT_HEADER", "AUTHORIZATION_HEADER",
    "CLIENT_QUERY", "CLOSE_ON_DISCONNECT_QUERY", "bearer_authorization", "bearer_credentials", "bearer_token_matches",
    "read_token_file",
    "ERR_PARSE", "ERR_INVALID_REQUEST", "ERR_METHOD", "ERR_PARAMS", "ERR_INTERNAL", "ERR_UNKNOWN_SESSION",
    "ERR_CAPACITY", "ERR_BAD_REQUEST", "ERR_UNAUTHORIZED", "ERR_OWNERSHIP", "ERR_MEMORY", "ERROR_CODES",
    "HTTP_STATUS", "UNAUTHORIZED_MESSAGE",
    "ANONYMOUS_CLIENT", "CLIENT_ENV_VAR", "CLIENT_ID_RULE", "is_valid_client_id", "default_client_id",
    "client_key", "client_key_matches",
    "ANNOUNCE_NONCE_VAR", "announcement", "parse_announcement", "STATE_DIGEST_ALGORITHM",
]

# ---------------------------------------------------------------------------------------------- paths
HEALTH_PATH = "/healthz"
"""``GET``: the process is alive (``{"status": "ok", "uptime_s"}``); the one route that needs no token."""
READY_PATH = "/readyz"
"""``GET``: the catalog is loaded (``{"status": "ready", "envs": [{name, version, ...}], "sessions", "skipped"}``)."""
METRICS_PATH = "/metrics"
"""``GET``: Prometheus text exposition format."""
WS_PATH = "/v1/ws"
"""WebSocket of the fast session protocol (JSON-RPC 2.0 text frames, one request or a batch)."""
RPC_PATH = "/v1/rpc"
"""``POST``: the fast protocol's methods over plain HTTP (one request or a batch per body)."""
MCP_PATH = "/mcp"
"""Prefix of the MCP streamable-HTTP endpoints (:func:`mcp_path`); alone when one environment is served."""


def mcp_path(env_name: str) -> str:
    """The MCP endpoint of environment ``env_name``: ``/mcp/<env_name>`` (MCP 2025-11-25, "Streamable HTTP")."""
    return f"{MCP_PATH}/{env_name}"


# -------------------------------------------------------------------------------------------- headers
CLIENT_HEADER = "X-Envfactory-Client"
"""HTTP header naming the client a request comes from (sessions are owned by the client that created them).
On a server with a token the name counts only with its credential (:func:`client_key`), sent as
:data:`CLIENT_KEY_HEADER` or as the bearer token itself; without it the request is :data:`ANONYMOUS_CLIENT`."""
CLIENT_KEY_HEADER = "X-Envfactory-Client-Key"
"""HTTP header carrying :func:`client_key` of the server's token and the :data:`CLIENT_HEADER` name: what
proves, to a server with a token, that a request comes from that client (docs/architecture.md, "Backends")."""
SESSION_HEADER = "X-Envfactory-Session"
"""HTTP header binding an MCP client to a session created through the control plane."""
CLOSE_ON_DISCONNECT_HEADER = "X-Envfactory-Close-On-Disconnect"
"""WebSocket handshake header, ``1``/``true``/``yes`` or ``0``/``false``/``no``: close the connection's
sessions when it drops (default: the server's ``close_on_disconnect``)."""
SPLIT_HEADER = "X-Envfactory-Split-Answers"
"""WebSocket handshake header, ``1``: this client takes a large batch's answers (over
``fastproto.SPLIT_BYTES``) in several frames, each a JSON array of responses it matches by id, so that one
large answer never holds the server's event loop (docs/architecture.md, "Backends").  Without it a batch is
answered in one frame, as JSON-RPC 2.0 §6 says."""
AUTHORIZATION_HEADER = "Authorization"
"""Carries ``Bearer <token>`` (RFC 6750 §2.1) on every route but :data:`HEALTH_PATH` of a server with a token."""
CLIENT_QUERY = "client"
"""``/v1/ws`` query parameter standing in for :data:`CLIENT_HEADER` (browsers cannot set WebSocket headers)."""
CLOSE_ON_DISCONNECT_QUERY = "close_on_disconnect"
"""``/v1/ws`` query parameter standing in for :data:`CLOSE_ON_DISCONNECT_HEADER`."""


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The bearer token held in ``path`` (its first line, surrounding whitespace stripped): what
    ``--token-file`` of ``envfactory serve``, ``envfactory ui`` and the NeMo Gym resources server read.

    Raises:
        ValueError: the file cannot be read or holds no token.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the token file {path}: {exc}") from None
    lines = text.strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token:
        raise ValueError(f"the token file {path} is empty")
    return token


def bearer_authorization(token: str) -> dict[str, str]:
    """The header a client sends to prove it holds ``token``: ``{"Authorization": "Bearer <token>"}``
    (RFC 6750 §2.1)."""
    return {AUTHORIZATION_HEADER: f"Bearer {token}"}


def bearer_credentials(authorization: str | None) -> str | None:
    """The credentials of an ``Authorization: Bearer <credentials>`` header value (scheme in any case, RFC
    7235 §2.1; surrounding spaces stripped), ``None`` for any other value.  Never raises."""
    scheme, _, got = (authorization or "").partition(" ")
    return got.strip() if scheme.lower() == "bearer" else None


def bearer_token_matches(authorization: str | None, token: str | None, client: str | None = None) -> bool:
    """Whether an ``Authorization`` header value grants access to a server whose token is ``token``.

    ``True`` when the server has no token (``None`` or empty); otherwise the value must be ``<scheme>
    <credentials>`` with the scheme ``Bearer`` in any case (RFC 7235 §2.1: schemes are case-insensitive)
    and the credentials, stripped of surrounding spaces, equal to ``token`` or, when the request names a
    ``client`` (:data:`CLIENT_HEADER`), to that client's credential :func:`client_key` (``token``,
    ``client``): a client given only its credential is let in as that client and no other.  Compared in
    constant time (:func:`secrets.compare_digest`, so the time taken does not reveal how much of a guess was
    right).  Never raises.
    """
    if not token:
        return True
    got = bearer_credentials(authorization)
    if got is None:
        return False
    if secrets.compare_digest(got.encode(), token.encode()):
        return True
    return client is not None and client_key_matches(token, client, got)


# ------------------------------------------------------------------------------------ JSON-RPC errors
ERR_PARSE = -32700
"""JSON-RPC 2.0 §5.1: the frame is not JSON."""
ERR_INVALID_REQUEST = -32600
"""JSON-RPC 2.0 §5.1: not a valid request object (also: a frame over the size cap, an empty batch)."""
ERR_METHOD = -32601
"""JSON-RPC 2.0 §5.1: unknown method."""
ERR_PARAMS = -32602
"""JSON-RPC 2.0 §5.1: invalid or missing parameters."""
ERR_INTERNAL = -32603
"""JSON-RPC 2.0 §5.1: the server failed (a bug, never a bad request)."""
ERR_UNKNOWN_SESSION = -32001
"""No such session (never created, closed, or expired after the idle TTL)."""
ERR_CAPACITY = -32002
"""A session cap refused (``data``: ``{"scope": "server" | "client", "limit": n}``); the client raises ``CapacityError``."""
ERR_BAD_REQUEST = -32003
"""A control request the server refused (unknown environment or task, bad snapshot, version mismatch)."""
ERR_UNAUTHORIZED = -32004
"""Missing or wrong bearer token: the HTTP 401 answer of ``/v1/rpc`` and ``/mcp`` is this error object (``id``
null, :data:`UNAUTHORIZED_MESSAGE`); a WebSocket without the token is refused at the handshake (close 4401)."""
UNAUTHORIZED_MESSAGE = "unauthorized: send Authorization: Bearer <token>"
"""The message of an :data:`ERR_UNAUTHORIZED` answer: names the header to send."""
ERR_OWNERSHIP = -32005
"""The session belongs to another client and is not shared (``SessionOwnershipError``)."""
ERR_MEMORY = -32006
"""Over the memory budget (``data``: ``{"scope": "memory", "limit", "estimate", "used", "headroom"}`` in
bytes); the client raises ``MemoryBudgetError``."""

ERROR_CODES: Mapping[str, int] = {
    "parse_error": ERR_PARSE, "invalid_request": ERR_INVALID_REQUEST, "method_not_found": ERR_METHOD,
    "invalid_params": ERR_PARAMS, "internal_error": ERR_INTERNAL, "unknown_session": ERR_UNKNOWN_SESSION,
    "capacity": ERR_CAPACITY, "bad_request": ERR_BAD_REQUEST, "unauthorized": ERR_UNAUTHORIZED,
    "ownership": ERR_OWNERSHIP, "memory": ERR_MEMORY,
}
"""Every error code of the protocol by a short name (``{name: code}``)."""

HTTP_STATUS: Mapping[int, int] = {ERR_UNKNOWN_SESSION: 404, ERR_CAPACITY: 429, ERR_BAD_REQUEST: 400,
                                  ERR_UNAUTHORIZED: 401, ERR_OWNERSHIP: 403, ERR_MEMORY: 503}
"""HTTP status of a ``POST /v1/rpc`` answer that is one error object, by its code (any other code: 400)."""

# ------------------------------------------------------------------------------------ client identity
ANONYMOUS_CLIENT = "anonymous"
"""The identity of every request without :data:`CLIENT_HEADER`, and on a server with a token of every request
whose name comes without its credential (:func:`client_key`); they share sessions and one quota."""
CLIENT_ENV_VAR = "ENVFACTORY_CLIENT"
"""Environment variable naming the client this process sends (:func:`default_client_id`)."""
CLIENT_ID_RULE = "1..128 printable ASCII characters without spaces"
"""What :func:`is_valid_client_id` accepts, in words (for error messages)."""


def is_valid_client_id(value: str) -> bool:
    """The one rule for a client name (:data:`CLIENT_HEADER`): 1 to 128 characters, each printable ASCII
    other than space (``!`` to ``~``, code points 33..126)."""
    return 1 <= len(value) <= 128 and all(33 <= ord(c) < 127 for c in value)


def default_client_id() -> str:
    """The client name this process sends, unchecked: ``$ENVFACTORY_CLIENT`` when set and not empty,
    else ``<hostname>:<pid>`` (so every connection of one trainer process shares its sessions and quota,
    and two processes never use each other's)."""
    return os.environ.get(CLIENT_ENV_VAR) or f"{socket.gethostname()}:{os.getpid()}"


def client_key(token: str, client: str) -> str:
    """The credential of client ``client`` on a server whose token is ``token``: HMAC-SHA256 keyed with the
    token over the client name (both UTF-8), in lower-case hex (64 characters).

    A server with a token takes a :data:`CLIENT_HEADER` name only with this credential, sent as
    :data:`CLIENT_KEY_HEADER` beside the token or as the bearer token itself (:func:`bearer_token_matches`).
    Whoever holds the server's token can make any client's credential (it is the operator's key); a client
    given only its own credential cannot make another's, nor the token (docs/architecture.md, "Backends")."""
    return hmac.new(token.encode(), client.encode(), hashlib.sha256).hexdigest()


def client_key_matches(token: str, client: str, key: str | None) -> bool:
    """Whether ``key`` (surrounding spaces stripped) is :func:`client_key` (``token``, ``client``), compared
    in constant time.  ``False`` for ``None``, an empty ``token`` or a non-ASCII ``key``.  Never raises."""
    if key is None or not token:
        return False
    try:
        got = key.strip().encode("ascii")
    except UnicodeEncodeError:
        return False
    return secrets.compare_digest(got, client_key(token, client).encode())


# ------------------------------------------------------------------------------------- announcement
ANNOUNCE_NONCE_VAR = "ENVFACTORY_ANNOUNCE_NONCE"
"""Environment variable a parent sets to a random value: a server started with ``--announce`` echoes it in
its announcement, so the parent ignores any other JSON line on the child's stdout (a module imported by
``--module`` printing one would otherwise redirect the client, and its token, elsewhere)."""


def announcement(url: str, nonce: str | None) -> str:
    """The one line (no newline) a server started with ``--announce`` prints on stdout once it listens:
    ``{"listening": "http://HOST:PORT"}``, plus ``"nonce"`` when ``nonce`` is given (not empty)."""
    line: dict[str, str] = {"listening": url}
    if nonce:
        line["nonce"] = nonce
    return json.dumps(line)


def parse_announcement(line: str, nonce: str) -> str | None:
    """The server URL of an :func:`announcement` line carrying ``nonce``; ``None`` for any other line (not
    JSON, not an object, another nonce or none, no string ``"listening"``).  Never raises."""
    if not line.startswith("{"):
        return None
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(msg, dict) or msg.get("nonce") != nonce:
        return None
    url = msg.get("listening")
    return url if isinstance(url, str) else None


# ------------------------------------------------------------------------------------- state digests
STATE_DIGEST_ALGORITHM = "sha256:canonical-json:pruned:v1"
"""What the fast protocol's ``digest`` method answers (``{"algorithm": this, "digest": hex}``): SHA-256 of
the canonical JSON bytes (sorted keys, no whitespace, UTF-8, as ``Session.state_bytes()``) of the
session's canonical state with the paths the reward leaves out removed (:mod:`gym_envfactory.digest`).  A
client trusts a digest only when the algorithm matches its own (docs/reward.md, "Scoring on the server")."""


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket for the server (``port`` 0: any free port).

    Created with ``IPPROTO_TCP`` as its protocol: asyncio turns Nagle's algorithm off (``TCP_NODELAY``)
    on every accepted connection only for such sockets; with protocol 0 each small response waited for
    the client's delayed ACK (~40 ms per MCP or ``/v1/rpc`` call).

    Raises:
        OSError: the address cannot be bound.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock
