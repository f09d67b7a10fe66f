"""ASGI middleware of the environment server (Starlette style: ``Middleware(cls, **options)`` on a route or
an app), each one check: docs/architecture.md, "Backends".

- :class:`OriginHostGuardMiddleware`: refuses (403, or WebSocket close 4403) a request whose ``Origin``
  is not allowed, and on a loopback server a ``Host`` that is not a loopback address (DNS rebinding).
- :class:`BearerAuthMiddleware`: refuses (401, or WebSocket close 4401) a request without the bearer
  token (:func:`gym_envfactory.protocol.bearer_token_matches`, RFC 6750 §2.1).
- :func:`require_token_off_loopback`: the bind rule, no address beyond loopback without a token.

``envfactory ui`` (gym_envfactory.ui) puts the same guards and rule on its pages.

Both pass every other ASGI scope (``lifespan``) through untouched, and are put on the routes they guard
(:func:`~gym_envfactory.server.app.build_app`), so ``/healthz`` and unknown paths (404) stay unguarded.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from starlette.datastructures import Headers, QueryParams
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from gym_envfactory.errors import InsecureBindError
from gym_envfactory.protocol import CLIENT_HEADER, CLIENT_QUERY, ERR_UNAUTHORIZED, bearer_token_matches

__all__ = ["LOOPBACK", "is_loopback", "host_header_name", "foreign_request", "OriginHostGuardMiddleware",
           "BearerAuthMiddleware", "require_token_off_loopback", "jsonrpc_error_body"]

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
"""Loopback names and addresses taken as they are (any other ``127.0.0.0/8`` or ``::1`` form is parsed)."""


def is_loopback(host: str) -> bool:
    """True for a loopback bind address (``127.0.0.0/8``, ``localhost``, ``::1``): binding there needs no token.

    Exact: an address of ``127.0.0.0/8`` written in full, never a name that merely starts like one
    (``127.0.0.1.evil.com``)."""
    host = host.strip("[]")
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_token_off_loopback(host: str, token: str | None, *, what: str = "the control plane",
                               how: str = "pass --token-file PATH (or --token, or set ENVFACTORY_TOKEN)") -> None:
    """Refuse to serve ``what`` on ``host`` when it is not loopback (:func:`is_loopback`) and no ``token`` is set.

    Raises:
        InsecureBindError: ``refusing to serve <what> on <host> without a token: <how>``.
    """
    if not is_loopback(host) and not token:
        raise InsecureBindError(f"refusing to serve {what} on {host} without a token: {how}")


def host_header_name(value: str) -> str | None:
    """The host of an HTTP ``Host`` header, ``host[:port]`` or ``[v6]:port``; ``None`` when the value is
    not of that form (a port that is not a number, stray brackets or colons)."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[1:end], value[end + 1:]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return host
    host, sep, port = value.partition(":")
    if sep and not port.isdigit():
        return None
    return host


def foreign_request(headers: Mapping[str, str], *, loopback: bool, allowed_origins: tuple[str, ...] = ()) -> str | None:
    """Why a request is refused as coming from a browser page rather than a client, or ``None`` to let it in.

    Browsers send ``Origin`` on cross-site requests, and a page's own ``Host`` when a name is rebound to
    127.0.0.1 (DNS rebinding): an ``Origin`` not in ``allowed_origins`` is refused on any server, a
    ``Host`` that is not exactly a loopback address or ``localhost`` (with an optional port) on a
    ``loopback`` one, where the token is optional.  ``headers``: lower-case names (Starlette ``Headers``).
    """
    origin = headers.get("origin")
    if origin and origin not in allowed_origins:
        return f"origin {origin!r} is not allowed"
    if loopback:
        raw = headers.get("host", "")
        host = host_header_name(raw)
        if raw and (host is None or not is_loopback(host)):
            return f"host {raw[:200]!r} is not this loopback server"
    return None


class OriginHostGuardMiddleware:
    """Refuses foreign requests (:func:`foreign_request`): HTTP ``403 {"error": <why>}``, WebSocket handshake
    closed with code 4403 (``"forbidden origin or host"``; the client sees HTTP 403).

    Args:
        app: the ASGI app guarded.
        host: the address the server binds; the ``Host`` check applies when it is loopback (:func:`is_loopback`).
        allowed_origins: ``Origin`` values let in (default none: any request with an ``Origin`` is refused).
    """

    def __init__(self, app: ASGIApp, *, host: str, allowed_origins: tuple[str, ...] = ()) -> None:
        self.app = app
        self.loopback = is_loopback(host)
        self.allowed_origins = tuple(allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry: answer a foreign HTTP or WebSocket request, else hand it to the wrapped app."""
        kind = scope["type"]
        if kind in ("http", "websocket"):
            why = foreign_request(Headers(scope=scope), loopback=self.loopback, allowed_origins=self.allowed_origins)
            if why is not None:
                if kind == "websocket":
                    await WebSocket(scope, receive, send).close(code=4403, reason="forbidden origin or host")
                else:
                    await JSONResponse({"error": why}, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def jsonrpc_error_body(code: int, message: str, data: object | None = None) -> dict[str, object]:
    """A JSON-RPC 2.0 error response with ``id`` null (the request was refused before its id was read):
    what an HTTP refusal on a JSON-RPC route (``/v1/rpc``, ``/mcp``) carries, so a client (the MCP SDK
    among them) shows ``message`` instead of a bare status."""
    error: dict[str, object] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": None, "error": error}


class BearerAuthMiddleware:
    """Refuses requests without ``Authorization: Bearer <token>`` (:func:`gym_envfactory.protocol.bearer_token_matches`:
    scheme in any case, constant-time comparison; the credential of the client the request names,
    :func:`gym_envfactory.protocol.client_key`, lets it in too): HTTP ``401 {"error": message}`` with ``WWW-Authenticate:
    Bearer`` (RFC 6750 §3), WebSocket handshake closed with code 4401 (``"unauthorized"``; the client sees
    HTTP 403).  With no ``token`` every request passes.

    Args:
        app: the ASGI app guarded.
        token: the server's bearer token, or ``None`` for none.
        message: the ``error`` text of the 401 answer.
        jsonrpc: the 401 body is a JSON-RPC error object instead (:func:`jsonrpc_error_body`, code
            ``-32004``, :data:`~gym_envfactory.protocol.ERR_UNAUTHORIZED`): for ``/v1/rpc`` and ``/mcp``.
    """

    def __init__(self, app: ASGIApp, *, token: str | None, message: str = "unauthorized", jsonrpc: bool = False) -> None:
        self.app = app
        self.token = token
        self.message = message
        self.body = jsonrpc_error_body(ERR_UNAUTHORIZED, message) if jsonrpc else {"error": message}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry: answer an HTTP or WebSocket request without the token, else hand it to the wrapped app."""
        kind = scope["type"]
        if self.token and kind in ("http", "websocket"):
            headers = Headers(scope=scope)
            client = headers.get(CLIENT_HEADER)
            if kind == "websocket":
                client = client or QueryParams(scope.get("query_string", b"")).get(CLIENT_QUERY)
            if not bearer_token_matches(headers.get("authorization"), self.token,
                                        client.strip() if client is not None else None):
                if kind == "websocket":
                    await WebSocket(scope, receive, send).close(code=4401, reason="unauthorized")
                else:
                    await JSONResponse(self.body, status_code=401,
                                       headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await self.app(scope, receive, send)
