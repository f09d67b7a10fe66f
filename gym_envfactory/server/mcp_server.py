"""The MCP endpoint (docs/architecture.md, "Backends"): every served environment as an MCP server, over streamable HTTP
(``/mcp/<EnvName>``, plus ``/mcp`` when the server serves exactly one environment) and over stdio.

Built on the official ``mcp`` SDK (2.x, low-level :class:`mcp.server.Server`) and on the process's one
:class:`~gym_envfactory.server.manager.SessionManager`: there is no second session registry.

How an MCP session maps to an environment session:

- **Owned** (default): an MCP session (a streamable HTTP ``Mcp-Session-Id``, i.e. one handshake-era
  connection) gets its own manager session, created lazily on its first ``tools/call`` from the
  environment's default initial state and closed when the MCP session ends (client ``DELETE``, idle
  timeout, server shutdown).  Over stdio the process serves one client, so one session for the
  process's life.
- **Bound**: a client that sends ``X-Envfactory-Session: <session_id>`` (a session created beforehand
  through the control plane, ``POST /v1/rpc`` method ``create`` with a ``task_id``) acts on that
  session.  The control plane owns it: ending the MCP session does not close it, so a trainer can read
  ``state``/``action_log`` and score afterwards, then ``close`` it.  ``tools/list`` then lists that
  session's tools (a task spanning several environments brings all their tools).

Protocol eras: MCP 2026-07-28 is sessionless (every request stands alone), so over HTTP this endpoint
answers ``server/discover`` only for bound clients; an unbound ``mode="auto"`` client falls back to the
handshake era and gets a real MCP session.  A client pinned to 2026-07-28 without the header can list
tools but its ``tools/call`` is refused with an error naming both remedies.  Over stdio both eras work.

``tools/list`` returns only the environment's agent tools (``ToolSpec.mcp_schema()``); the control
plane is never listed.  On handshake-era connections (2025-xx, where ``outputSchema`` and
``structuredContent`` must be JSON objects) a tool whose output is not an object is published with its
schema wrapped as ``{"result": <schema>}`` and its structured result as ``{"result": <value>}`` (the
convention FastMCP uses); the text content is always the plain ``ToolResult.to_text()`` JSON.
``tools/call`` goes through :meth:`SessionManager.call` on the manager's worker thread (never on the
event loop): a typed error (unknown tool, invalid arguments, tool error, internal error) comes back as
``isError: true`` with the error JSON as text.  A bound session belongs to the client that created it:
the MCP requests must count as the same client as the ``create`` request (the same ``X-Envfactory-Client``
header, proved on a server with a token by ``X-Envfactory-Client-Key`` or the client's credential as the
bearer token: :func:`~.manager.authenticated_client`; or none on both).

Admission: a request that may open an MCP session (no ``Mcp-Session-Id``; a handshake-era or no
``MCP-Protocol-Version``) is admitted before the SDK sees it (:meth:`SessionManager.admit_mcp_session`:
a per-client and a server-wide cap and :data:`~.admission.MCP_SESSION_BYTES` of the memory budget, held
until the session ends); a refusal is a JSON-RPC error (-32002, HTTP 429; -32006, HTTP 503) and opens nothing.

Fast path (:class:`_FastCalls`): once the SDK has accepted a handshake-era session's first ``tools/call``,
that session's later plain ``tools/call`` POSTs are answered without the SDK's per-request machinery, with
the same JSON, the same checks (Host/Origin, Content-Type, Accept, body cap, session liveness) and the same
idle-timer restart.  It takes every field the spec allows in a ``tools/call`` (``_meta`` with a progress
token, as the fastmcp Client sends, ``task``), checked by the SDK's own validators; anything else (other
methods, malformed params, batches, the 2026-07-28 era, errors finding the session) goes through the SDK.  Measured by ``bench/bench_mcp.py`` (docs/performance.md, T3).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import mcp_types as types
import pydantic
import pydantic_core
from mcp.server import Server
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import (
    StreamableHTTPASGIApp,
    StreamableHTTPSessionManager,
)
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND
from mcp_types import methods as _methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gym_envfactory.environment.tools import ToolSpec
from gym_envfactory.errors import (
    BadRequestError,
    CapacityError,
    MemoryBudgetError,
    SessionOwnershipError,
    UnknownSessionError,
)
from gym_envfactory.protocol import (
    AUTHORIZATION_HEADER,
    CLIENT_HEADER,
    CLIENT_KEY_HEADER,
    ERR_BAD_REQUEST,
    ERR_CAPACITY,
    ERR_MEMORY,
    ERR_OWNERSHIP,
    ERR_UNKNOWN_SESSION,
    HTTP_STATUS,
    MCP_PATH,
    SESSION_HEADER,
    UNAUTHORIZED_MESSAGE,
    mcp_path,
)
from gym_envfactory.server.app import frame_gate, frame_refusal
from gym_envfactory.server.manager import ManagedSession, SessionManager, authenticated_client
from gym_envfactory.server.middleware import (
    BearerAuthMiddleware,
    OriginHostGuardMiddleware,
    is_loopback,
    jsonrpc_error_body,
)
from gym_envfactory.session import INVALID_CALL_ERRORS, MAX_LOGGED_RAW, ToolResult

__all__ = ["SESSION_HEADER", "EnvMCPServer", "junk_line_reply", "mcp_routes", "run_stdio"]

log = logging.getLogger(__name__)

_STATE_KEY = "envfactory.session_id"


def _wrap_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``{"result": schema}`` as an object schema; ``$defs`` stay at the root so ``#/$defs/...`` refs resolve."""
    inner = {k: v for k, v in schema.items() if k != "$defs"}
    out: dict[str, Any] = {"type": "object", "properties": {"result": inner}, "required": ["result"]}
    if "$defs" in schema:
        out["$defs"] = schema["$defs"]
    return out


def _needs_wrap(tool: ToolSpec) -> bool:
    return tool.output_schema is not None and tool.output_schema.get("type") != "object"


def _connection_of(ctx: Any) -> Any:
    """The SDK's per-connection object (``state`` dict and ``exit_stack`` torn down when the MCP session
    ends).  The 2.x low-level context does not expose it publicly yet, hence the private attribute."""
    return getattr(ctx.session, "_connection", None)


class EnvMCPServer:
    """One environment as an MCP server over ``manager``'s sessions.

    Args:
        manager: the process's session manager.
        env: the environment this endpoint serves (must be one of ``manager.specs``).
        single: one client for the process's lifetime (stdio): one owned session, closed by :meth:`close`.
        http: served over streamable HTTP (sessionless 2026-07-28 discovery only for bound clients).
        token: the server's bearer token: with one, a request's client name counts only with its
            credential (:meth:`client_of`).
    """

    def __init__(self, manager: SessionManager, env: str, *, single: bool = False, http: bool = True,
                 token: str | None = None) -> None:
        self.manager = manager
        self.token = token
        self.spec = manager.spec(env)
        self.env = self.spec.name
        self.single = single
        self._single_sid: str | None = None
        # Tool input schemas by name, for the SDK's Mcp-Param-* header check on 2026-07-28 HTTP calls (without
        # it the SDK runs the tools/list handler on every such call): this environment's tools first, then
        # those of the other served environments a bound session may span.
        self._input_schemas: dict[str, dict[str, Any]] = {}
        for spec in (self.spec, *manager.specs.values()):
            for name, tool in spec.tools.items():
                self._input_schemas.setdefault(name, tool.input_schema)
        self.server: Server[Any] = Server(
            f"envfactory-{self.env}",
            version=self.spec.version,
            title=f"{self.env} (gym_envfactory)",
            instructions=self.spec.description or None,
            get_tool_input_schema=self._input_schemas.get,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        if http:
            self.server.add_request_handler("server/discover", types.RequestParams, self._discover)
        #: Handshake-era MCP sessions (``Mcp-Session-Id``) whose ``tools/call`` the fast path may answer:
        #: registered by their first call through the SDK, dropped when the MCP session ends.
        self.fast: dict[str, _FastEntry] = {}
        #: ``tools/call`` requests the fast path answered (the rest went through the SDK).
        self.fast_calls = 0
        #: Whether :class:`_FastCalls` may answer at all (``False``: every request goes through the SDK, for
        #: comparing the two paths).
        self.fast_enabled = True

    # ------------------------------------------------------------------ session resolution
    @staticmethod
    def _bound_id(ctx: Any) -> str | None:
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        if headers is None:
            return None
        value = headers.get(SESSION_HEADER)
        return value.strip() if value else None

    def client_of(self, headers: Any) -> str:
        """The client a request with ``headers`` counts as (:func:`~.manager.authenticated_client`).

        Raises:
            BadRequestError: a client name that breaks the rule.
        """
        if headers is None:
            return authenticated_client(None, token=self.token)
        return authenticated_client(headers.get(CLIENT_HEADER), token=self.token, key=headers.get(CLIENT_KEY_HEADER),
                                    authorization=headers.get(AUTHORIZATION_HEADER))

    def _client(self, ctx: Any) -> str:
        try:
            return self.client_of(getattr(getattr(ctx, "request", None), "headers", None))
        except BadRequestError as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from None

    def _lookup(self, sid: str, *, bound: bool, client: str | None = None) -> ManagedSession:
        try:
            ms = self.manager.get(sid, client)
        except SessionOwnershipError as exc:
            raise MCPError(ERR_OWNERSHIP, f"{SESSION_HEADER}: {exc}") from None
        except UnknownSessionError as exc:
            if bound:
                raise MCPError(ERR_UNKNOWN_SESSION, f"{SESSION_HEADER}: {exc}") from None
            raise MCPError(ERR_UNKNOWN_SESSION, "this MCP session's environment session is gone (expired after the "
                           "idle TTL or closed); open a new MCP session") from None
        if self.env not in ms.envs:
            raise MCPError(INVALID_PARAMS, f"{SESSION_HEADER}: session {sid} is a session of {', '.join(ms.envs)}, "
                           f"not of {self.env}; use the endpoint /mcp/{ms.envs[0]}")
        return ms

    def admitted_call(self, ms: ManagedSession, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """Run one ``tools/call`` on ``ms`` as the fast protocol runs a ``call``: admitted first
        (:meth:`SessionManager.admit_call`: the session's action-log cap and the memory budget, for the
        arguments' JSON size), then counted (:meth:`SessionManager.note_log_growth`: the arguments the log
        keeps, a bounded rendering for an invalid call, and the result), all under the manager's lock.
        Without it an MCP client could grow a session's log without bound (issue 25, item 1, over MCP).

        Raises:
            MemoryBudgetError: the call was refused; it did not run and nothing was logged.
        """
        m = self.manager
        try:
            nbytes = len(pydantic_core.to_json(arguments)) if arguments is not None else 0
        except (ValueError, TypeError, RecursionError):  # not JSON data: the call refuses it, logged bounded
            nbytes = 2 * MAX_LOGGED_RAW
        with m.lock:
            m.admit_call(ms.session_id, nbytes)
            res = m.call(ms.session_id, name, arguments)
            kept = min(nbytes, 2 * MAX_LOGGED_RAW + 1024) if res.get("error_type") in INVALID_CALL_ERRORS else nbytes
            try:  # the log keeps the result too (a tool's error may echo its arguments)
                kept += len(pydantic_core.to_json({k: v for k, v in res.items() if k != "arguments"}, fallback=repr))
            except (ValueError, TypeError, RecursionError):
                kept += nbytes
            m.note_log_growth(ms.session_id, kept)
        return res

    @staticmethod
    def _memory_error(exc: MemoryBudgetError, hint: str = "") -> MCPError:
        """The MCP error of a memory refusal: -32006 with the fast protocol's ``data`` (``hint`` appended to
        the message)."""
        return MCPError(ERR_MEMORY, str(exc) + hint, {"scope": exc.scope, "limit": exc.limit,
                                                      "estimate": exc.estimate, "used": exc.used,
                                                      "headroom": exc.headroom})

    def _create(self, client: str | None = None) -> ManagedSession:
        try:
            return self.manager.create(self.env, client=client)
        except MemoryBudgetError as exc:  # the same code and figures as the fast protocol's
            raise self._memory_error(exc) from None
        except CapacityError as exc:
            raise MCPError(ERR_CAPACITY, str(exc)) from None
        except BadRequestError as exc:  # pragma: no cover - the default initial state always exists
            raise MCPError(INTERNAL_ERROR, str(exc)) from None

    def _release(self, sid: str) -> None:
        if self.manager.close(sid):
            log.debug("closed session %s with its MCP session", sid)

    def _session(self, ctx: Any, *, create: bool) -> ManagedSession | None:
        """The manager session this request acts on (``None``: none yet and ``create`` is false)."""
        bound = self._bound_id(ctx)
        if bound is not None:
            return self._lookup(bound, bound=True, client=self._client(ctx))
        if self.single:
            if self._single_sid is None:
                if not create:
                    return None
                self._single_sid = self._create().session_id
            return self._lookup(self._single_sid, bound=False)
        conn = _connection_of(ctx)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or conn is None:
            if not create:
                return None
            raise MCPError(INVALID_REQUEST, f"MCP {ctx.protocol_version} over HTTP has no session to hold an episode's "
                           f"state: send {SESSION_HEADER}: <session_id> (create one with POST /v1/rpc method "
                           f"'create') or connect with the initialize handshake (mode='auto' or 'legacy')")
        sid = conn.state.get(_STATE_KEY)
        if sid is None:
            if not create:
                return None
            ms = self._create(self._client(ctx))  # counts against the client's quota
            conn.state[_STATE_KEY] = ms.session_id
            conn.exit_stack.callback(self._release, ms.session_id)
            return ms
        return self._lookup(sid, bound=False)

    def close(self) -> None:
        """Close the stdio session (if any)."""
        if self._single_sid is not None:
            self._release(self._single_sid)
            self._single_sid = None

    # ------------------------------------------------------------------ handlers
    def _tools(self, ctx: Any) -> list[ToolSpec]:
        ms = self._session(ctx, create=False) if self._bound_id(ctx) is not None else None
        return list(ms.session.tools.values()) if ms is not None else list(self.spec.tools.values())

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        tools = []
        for t in self._tools(ctx):
            entry = t.mcp_schema()
            if not modern and _needs_wrap(t):
                entry["outputSchema"] = _wrap_output_schema(entry["outputSchema"])
            tools.append(types.Tool.model_validate(entry))
        # ttl 0 / private (the SDK defaults): a bound client's list depends on its session.
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await self.manager.worker.run(self._call_tool_now, ctx, params)

    def _call_tool_now(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        ms = self._session(ctx, create=True)
        assert ms is not None
        self._remember(ctx)
        try:
            res = ToolResult(**self.admitted_call(ms, params.name, params.arguments))
        except MemoryBudgetError as exc:  # MCP has no reset: an owned session's log empties with a new MCP session
            raise self._memory_error(exc, "" if self._bound_id(ctx) is not None else
                                     "; over MCP, end this MCP session (DELETE) and open a new one") from None
        out = types.CallToolResult(content=[types.TextContent(type="text", text=res.to_text())], is_error=not res.ok)
        tool = ms.session.tools.get(params.name)
        if res.ok and tool is not None and tool.output_schema is not None:
            wrap = ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and _needs_wrap(tool)
            out.structured_content = {"result": res.content} if wrap else res.content
        return out

    # ------------------------------------------------------------------ fast path (see _FastCalls)
    def _remember(self, ctx: Any) -> None:
        """After a ``tools/call`` the SDK accepted on a handshake-era HTTP session (so it is initialised
        and its ``Mcp-Session-Id`` valid), let :class:`_FastCalls` answer that session's next calls."""
        conn = _connection_of(ctx)
        headers = getattr(getattr(ctx, "request", None), "headers", None)
        if self.single or conn is None or headers is None or ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return
        msid = headers.get(_MCP_SESSION_ID)
        if not msid or headers.get(_MCP_PROTOCOL_VERSION) != ctx.protocol_version:
            return
        entry = self.fast.get(msid)
        if entry is None:
            entry = self.fast[msid] = _FastEntry(ctx.protocol_version)
            conn.exit_stack.callback(self.fast.pop, msid, None)
        entry.owned = conn.state.get(_STATE_KEY)

    def fast_call(self, entry: _FastEntry, bound: str | None, headers: Any, name: str,
                  arguments: dict[str, Any] | None) -> dict[str, Any] | None:
        """Run one ``tools/call`` for :class:`_FastCalls` (on the worker thread) and return its
        ``CallToolResult`` as a wire dict, the same JSON the SDK path answers; ``None`` when the request
        has no usable session (the SDK path then answers it, with its error).  ``headers``: the request's,
        for the client it counts as (:meth:`client_of`)."""
        try:
            if bound is not None:
                ms = self._lookup(bound.strip(), bound=True, client=self.client_of(headers))
            elif entry.owned is not None:
                ms = self._lookup(entry.owned, bound=False)
            else:
                return None
        except (MCPError, BadRequestError):
            return None
        try:
            res = self.admitted_call(ms, name, arguments)
        except MemoryBudgetError:
            return None  # the SDK path answers it, refused there with its -32006 error
        self.fast_calls += 1
        ok = res["ok"]
        out: dict[str, Any] = {"content": [{"type": "text", "text": ToolResult(**res).to_text()}], "isError": not ok}
        tool = ms.session.tools.get(name)
        if ok and tool is not None and tool.output_schema is not None:
            out["structuredContent"] = {"result": res["content"]} if _needs_wrap(tool) else res["content"]
        return out

    async def _discover(self, ctx: Any, params: Any) -> types.DiscoverResult:
        if self._bound_id(ctx) is None:
            # Unbound HTTP clients need the handshake era's MCP session to own an episode; METHOD_NOT_FOUND
            # makes a mode="auto" client fall back to initialize.
            raise MCPError(METHOD_NOT_FOUND, f"server/discover is served only with {SESSION_HEADER}; "
                           "use the initialize handshake for a stateful MCP session")
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=self.server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=self.server.instructions,
        )


@dataclasses.dataclass
class _FastEntry:
    """A handshake-era MCP session the fast path serves: its negotiated protocol version and the
    environment session it owns (``None``: none yet, or it acts only through ``X-Envfactory-Session``)."""

    protocol_version: str
    owned: str | None = None


_MCP_SESSION_ID = "mcp-session-id"
_MCP_PROTOCOL_VERSION = "mcp-protocol-version"
_FAST_PARAMS = frozenset({"name", "arguments"})
_FAST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})


@dataclasses.dataclass
class _LiveSession:
    """An MCP session of the SDK's, seen from the requests that pass :class:`_FastCalls`: the requests of it
    being served (an open GET stream included), when the last one ended (``time.monotonic()`` seconds),
    and the client it counts against (:meth:`SessionManager.admit_mcp_session`; ``None``: none)."""

    last: float
    in_flight: int = 0
    client: str | None = None


class _FastCalls:
    """The hot request of a trainer's MCP episode, ``tools/call`` on an established session, answered
    without the SDK's per-request machinery (memory streams, dispatcher task, middleware chain, Pydantic
    models of the request and the result); everything else goes to the SDK's streamable-HTTP app.

    It also keeps the table of live handshake-era MCP sessions (:attr:`live`) and their idle timeout, from
    what passes through it, so it never reads the SDK's private state: a session is live from the
    answer (status < 400, ``Mcp-Session-Id`` header) to a request without a session id, until the SDK
    answers a ``DELETE`` of it with 2xx or any request of it with 404.  The SDK's own idle timeout is off
    (``session_idle_timeout=None``); :meth:`expire_idle` ends a session no request of which has been in
    flight for ``idle_timeout`` seconds (as the SDK's timer did: the countdown starts when its last request
    ends, an open GET stream holds it) by sending the SDK a ``DELETE`` for it (MCP 2025-11-25, "Streamable
    HTTP", "Session Management"), checked every ``idle_timeout / 4`` seconds (0.05 to 30).

    Serves a ``POST`` only when the SDK has already accepted a ``tools/call`` on the same handshake-era
    MCP session (:meth:`EnvMCPServer._remember`: so it is initialised), the session is live, and the
    request is exactly what the SDK would accept and answer with a plain JSON result: its
    ``MCP-Protocol-Version`` is the negotiated one, the Host/Origin/Content-Type checks of the SDK's
    :class:`TransportSecurityMiddleware` pass, ``Accept`` includes ``application/json``, the body is within
    the size cap, and it is one JSON-RPC request (integer or string ``id``) with method ``tools/call`` whose
    params pass the SDK's validators (:func:`_fast_request`: ``_meta`` with a progress token and other keys
    is accepted; batches and anything malformed go to the SDK, which answers with its error).  The call runs on the manager's worker like the SDK path's, the answer is the same JSON (MCP
    2025-11-25, "Streamable HTTP": ``application/json`` response with the ``Mcp-Session-Id`` header), and
    it counts as a request of the session for the idle timeout.  A request whose environment session
    cannot be found is handed to the SDK unchanged, which answers it with the usual error.
    """

    def __init__(self, app: ASGIApp, srv: EnvMCPServer, security: TransportSecuritySettings | None, max_body: int,
                 idle_timeout: float | None, path: str) -> None:
        self.app = app
        self.srv = srv
        self.security = TransportSecurityMiddleware(security)
        self.max_body = max_body
        self.idle_timeout = idle_timeout
        self.path = path
        #: Live handshake-era MCP sessions by ``Mcp-Session-Id``.
        self.live: dict[str, _LiveSession] = {}

    def _forget(self, msid: str) -> None:
        live = self.live.pop(msid, None)
        self.srv.fast.pop(msid, None)
        if live is not None and live.client is not None:
            # bookkeeping only (a counter and a reservation), done here so that a cancelled request still
            # gives the room back
            self.srv.manager.release_mcp_session(live.client)

    async def _admit(self, scope: Scope, send: Send, headers: Headers) -> str | None:
        """Admit the MCP session a request without ``Mcp-Session-Id`` may open (the SDK opens one for every
        such request of the handshake era, and drops it when the request fails): the client it counts
        against (:meth:`SessionManager.admit_mcp_session`), or ``None`` once refused, answered with a
        JSON-RPC error (-32002 capacity, HTTP 429, ``data``: ``{"scope", "limit"}``; -32006 memory, HTTP
        503; a bad client name: -32602, HTTP 400)."""
        manager = self.srv.manager
        try:
            client = self.srv.client_of(headers)
            await manager.worker.run(manager.admit_mcp_session, client)
        except BadRequestError as exc:
            error: dict[str, Any] = {"code": INVALID_PARAMS, "message": str(exc)}
            status = 400
        except MemoryBudgetError as exc:
            error = {"code": ERR_MEMORY, "message": str(exc), "data": {
                "scope": exc.scope, "limit": exc.limit, "estimate": exc.estimate, "used": exc.used,
                "headroom": exc.headroom}}
            status = HTTP_STATUS[ERR_MEMORY]
        except CapacityError as exc:
            error = {"code": ERR_CAPACITY, "message": str(exc), "data": {"scope": exc.scope, "limit": exc.limit}}
            status = HTTP_STATUS[ERR_CAPACITY]
        else:
            return client
        data = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})
        return None

    async def _to_sdk(self, scope: Scope, receive: Receive, send: Send, msid: str | None) -> None:
        """Hand a request to the SDK and update :attr:`live` from its answer.  A request that may open an MCP
        session (no ``Mcp-Session-Id``, a handshake-era or no ``MCP-Protocol-Version``) is admitted first
        (:meth:`_admit`): the session it opens counts against its client until it ends."""
        live = self.live.get(msid) if msid else None
        answer: dict[str, Any] = {}
        opener: str | None = None
        if msid is None and scope["type"] == "http":
            headers = Headers(scope=scope)
            version = headers.get(_MCP_PROTOCOL_VERSION)
            if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
                opener = await self._admit(scope, send, headers)
                if opener is None:
                    return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                if msid is None:
                    answer["msid"] = next((v.decode("latin-1") for k, v in message.get("headers", ())
                                           if k.lower() == _MCP_SESSION_ID.encode()), None)
            await send(message)

        if live is not None:
            live.in_flight += 1
        try:
            await self.app(scope, receive, watch)
        finally:
            status = answer.get("status", 500)
            if live is not None:
                live.in_flight -= 1
                live.last = time.monotonic()
            if msid is None:
                opened = answer.get("msid") if status < 400 else None
                if opened and opened not in self.live:
                    self.live[opened] = _LiveSession(time.monotonic(), client=opener)
                elif opener is not None:  # no session opened: give its room back
                    self.srv.manager.release_mcp_session(opener)
            elif status == 404 or (scope["method"] == "DELETE" and 200 <= status < 300):
                self._forget(msid)

    async def expire_idle(self) -> None:
        """End, forever, every MCP session idle for ``idle_timeout`` seconds (nothing when it is ``None``)."""
        if self.idle_timeout is None:
            return
        period = max(0.05, min(30.0, self.idle_timeout / 4))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for msid, live in list(self.live.items()):
                if live.in_flight == 0 and now - live.last >= self.idle_timeout and self.live.get(msid) is live:
                    await self._end(msid)

    async def _end(self, msid: str) -> None:
        """Have the SDK end MCP session ``msid`` as its client would, with a ``DELETE`` (which also tears down
        its environment session through the connection's exit stack)."""
        scope: Scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "DELETE",
                        "scheme": "http", "path": self.path, "raw_path": self.path.encode(), "root_path": "",
                        "query_string": b"", "client": None, "server": None,
                        "headers": [(b"host", b"127.0.0.1"), (_MCP_SESSION_ID.encode(), msid.encode())]}
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.sleep(3600)  # pragma: no cover - the SDK reads no more of a DELETE
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            pass

        log.debug("MCP session %s idle for %s s: ending it", msid[:64], self.idle_timeout)
        await self._to_sdk(scope, receive, send, msid)
        self._forget(msid)

    async def _body(self, receive: Receive) -> tuple[bytes | None, list[Message]]:
        """The whole request body (``None``: over the cap or not a plain body) and the messages read,
        to replay to the SDK when it takes the request after all."""
        seen: list[Message] = []
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            seen.append(message)
            if message["type"] != "http.request":
                return None, seen
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None, seen
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if scope["method"] == "POST":  # a large body is admitted before anyone parses it (FrameGate)
            try:
                size = int(headers.get("content-length") or self.max_body)
            except ValueError:
                size = self.max_body
            try:
                async with frame_gate(self.srv.manager).admitted(min(max(0, size), self.max_body), wait=False):
                    await self._serve(scope, receive, send, headers)
            except MemoryBudgetError as exc:
                data = frame_refusal(exc).encode()
                await send({"type": "http.response.start", "status": HTTP_STATUS[ERR_MEMORY], "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
                await send({"type": "http.response.body", "body": data})
            return
        await self._serve(scope, receive, send, headers)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, headers: Headers) -> None:
        msid = headers.get(_MCP_SESSION_ID)
        entry = self.srv.fast.get(msid) if msid else None
        live = self.live.get(msid) if msid else None
        if live is not None and live.client is not None and not await self._same_client(scope, send, headers, live):
            return
        if (scope["method"] != "POST" or "user" in scope or entry is None or live is None or not self.srv.fast_enabled
                or headers.get(_MCP_PROTOCOL_VERSION) != entry.protocol_version):
            await self._to_sdk(scope, receive, send, msid)
            return
        assert msid is not None
        live.in_flight += 1  # a request in flight holds the session, on this path as on the SDK's
        try:
            await self._fast(scope, receive, send, headers, msid, entry)
        finally:
            live.in_flight -= 1
            live.last = time.monotonic()

    async def _same_client(self, scope: Scope, send: Send, headers: Headers, live: _LiveSession) -> bool:
        """Whether a request of an MCP session counts as the client that opened it (:meth:`EnvMCPServer.client_of`);
        else it is answered here, -32005 (HTTP 403), and reaches neither the SDK nor the session: an
        ``Mcp-Session-Id`` someone else learnt does not let them call, stream or end another client's
        episode (issue 25, finding 3, over MCP)."""
        try:
            client: str | None = self.srv.client_of(headers)
        except BadRequestError:
            client = None
        if client == live.client:
            return True
        data = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
            "code": ERR_OWNERSHIP, "message": f"this MCP session belongs to another client (this request counts as "
                                              f"client {client!r}); open your own with initialize"}}).encode()
        await send({"type": "http.response.start", "status": HTTP_STATUS[ERR_OWNERSHIP], "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})
        return False

    async def _fast(self, scope: Scope, receive: Receive, send: Send, headers: Headers, msid: str,
                    entry: _FastEntry) -> None:
        """Answer one ``POST`` of live MCP session ``msid`` here, or hand it to the SDK (unchanged, with
        the body messages already read replayed)."""
        request = Request(scope, receive)
        ct = headers.get("content-type", "")
        if (await self.security.validate_request(request, is_post=True) is not None
                or not check_accept_headers(request)[0]
                or "application/json" not in (p.strip() for p in ct.split(";")[0].split(","))):
            await self._to_sdk(scope, receive, send, msid)
            return
        body, seen = await self._body(receive)
        call = _fast_request(body, entry.protocol_version) if body is not None else None
        if call is None:
            await self._to_sdk(scope, _replay(seen, receive), send, msid)
            return
        id_, name, arguments = call
        srv = self.srv
        result = await srv.manager.worker.run(srv.fast_call, entry, headers.get(SESSION_HEADER), headers, name,
                                              arguments)
        if result is None:
            await self._to_sdk(scope, _replay(seen, receive), send, msid)
            return
        try:
            text = json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}, separators=(",", ":"), allow_nan=False)
        except (ValueError, TypeError, RecursionError) as exc:  # the SDK path would fail to serialise it too
            text = json.dumps({"jsonrpc": "2.0", "id": id_, "error": {
                "code": INTERNAL_ERROR, "message": f"result could not be encoded: {type(exc).__name__}"}})
        data = text.encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"mcp-session-id", msid.encode()),
            (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})


def _fast_request(body: bytes, version: str) -> tuple[int | str, str, dict[str, Any] | None] | None:
    """``(id, tool name, arguments)`` of a body that is exactly one ``tools/call`` request the SDK would accept
    on a session of protocol ``version``, else ``None`` (the SDK then answers it, with its own error).

    Params other than ``name`` and ``arguments`` (``_meta`` with a ``progressToken`` and any other keys,
    ``task``: every field the spec allows) are checked by the SDK's own validators, the two its request
    runner applies (the version's wire surface, then :class:`mcp_types.CallToolRequestParams`); neither
    changes the answer of this server, which sends no progress notifications and runs no tasks."""
    try:  # the SDK's own parser (pydantic-core): a body it refuses (BOM, UTF-16, lone surrogates) goes to it
        msg = pydantic_core.from_json(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or msg.get("method") != "tools/call" \
            or not msg.keys() <= _FAST_KEYS:
        return None
    id_, params = msg.get("id"), msg.get("params")
    if isinstance(id_, bool) or not isinstance(id_, (int, str)) or not isinstance(params, dict) \
            or not isinstance(params.get("name"), str):
        return None
    arguments = params.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        return None
    if not params.keys() <= _FAST_PARAMS:
        try:
            _methods.validate_client_request("tools/call", version, params)
            types.CallToolRequestParams.model_validate(params, by_name=False)
        except (pydantic.ValidationError, ValueError, KeyError):
            return None
    return id_, params["name"], arguments


def _replay(seen: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that hands out the messages already read, then reads on."""
    pending = list(seen)

    async def again() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()
    return again


class UnknownMCPEnvironment:
    """The answer of ``/mcp/<name>`` for a name this server does not serve (and of ``/mcp`` when it serves
    several): HTTP 404 with a JSON-RPC error object (``-32003``, ``id`` null) whose message lists the
    endpoints served, so an MCP client shows where to go instead of a bare "Not Found"."""

    def __init__(self, served: list[str]) -> None:
        self.served = list(served)

    def message(self, name: str | None) -> str:
        """The error message for a request of ``/mcp/<name>`` (``None``: of ``/mcp`` itself)."""
        what = (f"no environment {name!r} is served over MCP here" if name is not None else
                f"{MCP_PATH} alone is the endpoint of a server with one environment; this one serves {len(self.served)}")
        return f"{what}; served: {', '.join(mcp_path(n) for n in self.served) or 'none'}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry: answer 404 with the served endpoints."""
        from starlette.responses import JSONResponse

        name = (scope.get("path_params") or {}).get("name")
        body = jsonrpc_error_body(ERR_BAD_REQUEST, self.message(name), {"envs": self.served})
        await JSONResponse(body, status_code=404)(scope, receive, send)


def mcp_routes(manager: SessionManager, config: Any) -> tuple[list[Route], Callable[[Any], Any]]:
    """Routes ``/mcp/<EnvName>`` for every environment of ``manager`` (and ``/mcp`` when it serves exactly
    one), guarded by ``config.token`` (:class:`~.middleware.BearerAuthMiddleware`; the SDK checks Host and
    Origin itself), and the lifespan hook that runs their transports and their idle expiry.  Pass them to
    :func:`~gym_envfactory.server.app.build_app` as ``extra_routes`` and ``lifespan_hooks``."""
    host = getattr(config, "host", "127.0.0.1")
    security = None
    if is_loopback(host):
        # DNS-rebinding protection for loopback servers; beyond loopback the bearer token guards instead.
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    routes: list[Route] = []
    managers: list[StreamableHTTPSessionManager] = []
    fasts: list[_FastCalls] = []
    for name in manager.specs:
        srv = EnvMCPServer(manager, name, http=True, token=getattr(config, "token", None))
        sm = StreamableHTTPSessionManager(
            app=srv.server,
            json_response=True,
            security_settings=security,
            session_idle_timeout=None,  # _FastCalls.expire_idle: it sees the fast path's requests too
            max_request_body_size=getattr(config, "max_body_bytes", 4 * 1024 * 1024),
            max_sessions=getattr(config, "max_sessions", 10_000),
        )
        managers.append(sm)
        path = mcp_path(name)
        fast = _FastCalls(StreamableHTTPASGIApp(sm), srv, security,
                          max_body=getattr(config, "max_body_bytes", 4 * 1024 * 1024),
                          idle_timeout=getattr(config, "ttl_s", 900.0), path=path)
        fasts.append(fast)
        endpoint = BearerAuthMiddleware(fast, token=getattr(config, "token", None), message=UNAUTHORIZED_MESSAGE,
                                        jsonrpc=True)
        routes.append(Route(path, endpoint=endpoint))
        if len(manager.specs) == 1:
            routes.append(Route(MCP_PATH, endpoint=endpoint))
    # any other name (after the environments' own routes): 404 listing them, behind the same guards
    unknown = OriginHostGuardMiddleware(
        BearerAuthMiddleware(UnknownMCPEnvironment(list(manager.specs)), token=getattr(config, "token", None),
                             message=UNAUTHORIZED_MESSAGE, jsonrpc=True),
        host=host, allowed_origins=tuple(getattr(config, "allowed_origins", ())))
    routes.append(Route(f"{MCP_PATH}/{{name}}", endpoint=unknown))
    if len(manager.specs) != 1:
        routes.append(Route(MCP_PATH, endpoint=unknown))

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for sm in managers:
                await stack.enter_async_context(sm.run())
            sweeps = [asyncio.create_task(f.expire_idle()) for f in fasts]
            try:
                yield
            finally:
                for task in sweeps:
                    task.cancel()
                await asyncio.gather(*sweeps, return_exceptions=True)

    return routes, lifespan


def junk_line_reply(line: str) -> types.JSONRPCError | None:
    """The JSON-RPC error answering one stdio line that is not a JSON-RPC message, or ``None`` for a
    valid message (or a blank line, which is skipped).

    A line that is not JSON gets a parse error (-32700), a JSON value that is not a valid message an
    invalid-request error (-32600); both carry the line's ``id`` when one can be read from it (so a
    client waiting on that id gets its answer), else ``id: null`` (JSON-RPC 2.0 §5).
    """
    if not line.strip():
        return None
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception as exc:  # noqa: BLE001 - anything the SDK would drop silently
        reason = exc
    else:
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(
            code=types.PARSE_ERROR, message="parse error: the line is not JSON"))
    rid = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        rid = None
    detail = str(reason).splitlines()[0][:300] if str(reason) else type(reason).__name__
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(
        code=INVALID_REQUEST, message=f"invalid JSON-RPC message: {detail}"))


class _UnownedText(io.TextIOWrapper):
    """A text layer over stdin's buffer whose close leaves the buffer open (it is the process's)."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


def run_stdio(env: str, *, manager: SessionManager | None = None) -> None:
    """Serve ``env`` as an MCP server over stdin/stdout (one client, one session) until stdin closes.
    Logs go to stderr; stdout carries only protocol frames.  A line that is not a JSON-RPC message is
    answered with a JSON-RPC error (:func:`junk_line_reply`) instead of being dropped."""
    import anyio
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    manager = manager or SessionManager([env])
    srv = EnvMCPServer(manager, env, single=True, http=False)

    async def main() -> None:
        replies_in, replies_out = anyio.create_memory_object_stream[types.JSONRPCError](64)
        stdin = anyio.wrap_file(_UnownedText(sys.stdin.buffer, encoding="utf-8", errors="replace"))

        async def checked_lines() -> AsyncIterator[str]:
            async with replies_in:
                async for line in stdin:
                    reply = junk_line_reply(line)
                    if reply is None:
                        yield line
                    else:
                        await replies_in.send(reply)

        async with stdio_server(stdin=cast(Any, checked_lines())) as (read_stream, write_stream):
            async def answer_junk() -> None:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    async with replies_out:
                        async for reply in replies_out:
                            await write_stream.send(SessionMessage(reply))

            async with anyio.create_task_group() as tg:
                tg.start_soon(answer_junk)
                await srv.server.run(read_stream, write_stream, srv.server.create_initialization_options())
                tg.cancel_scope.cancel()

    try:
        anyio.run(main)
    finally:
        srv.close()
        manager.close_all()
        manager.worker.stop()
        manager.scorer.shutdown(wait=False, cancel_futures=True)
