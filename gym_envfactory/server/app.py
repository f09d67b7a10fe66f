"""The environment server's HTTP application (Starlette/ASGI, served by uvicorn).

Routes:
- ``GET /healthz`` (process alive), ``GET /readyz`` (catalog loaded; lists environments),
  ``GET /metrics`` (Prometheus text format: sessions, calls, errors, latency histograms);
- ``WS /v1/ws``: the fast session protocol (:mod:`.fastproto`), JSON-RPC 2.0 frames;
- ``POST /v1/rpc``: the same methods over plain HTTP, one request or a batch per POST — the control
  plane (create/reset/snapshot/restore/fork/state/close) for clients that do not speak WebSocket.
  Bad control requests get a 4xx with a message and change nothing.

The event loop only moves bytes: every frame is parsed, run and encoded on the session manager's
worker thread in slices (:func:`~.fastproto.dispatch_frame_async`), so ``/healthz`` and other clients
are served while one client's 4,096-call frame runs.

Clients: a request's ``X-Envfactory-Client`` header (or, on ``/v1/ws``, the ``client`` query
parameter) names the client that owns the sessions it creates; without one every request is the
``anonymous`` client.  With a token the name counts only with its credential (``X-Envfactory-Client-Key``,
or that credential as the bearer token; :func:`~.manager.authenticated_client`), else the request is
``anonymous``; without a token the name is taken on trust (loopback development).  A client holds at most ``max_sessions_per_client`` sessions.  A WebSocket
connection opened with ``X-Envfactory-Close-On-Disconnect: 1`` (or ``?close_on_disconnect=1``; the
server default is ``close_on_disconnect``) closes the sessions it created when it drops.

Security: when ``token`` is set every route but ``/healthz`` requires ``Authorization: Bearer <token>``
(:class:`~.middleware.BearerAuthMiddleware`); every route but ``/healthz`` and ``/mcp`` (whose SDK checks
its own) refuses (403) a foreign ``Origin`` and, on a loopback server, a ``Host`` that is not exactly a
loopback address or ``localhost`` (with an optional port: DNS rebinding;
:class:`~.middleware.OriginHostGuardMiddleware`); :func:`build_app` refuses to serve beyond loopback
without a token.  Paths, headers and error codes are those of :mod:`gym_envfactory.protocol`.  Request bodies are capped
(``max_body_bytes``).  Idle sessions expire after ``ttl_s`` (checked every ``ttl_s / 4``, at most 30 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from gym_envfactory.errors import BadRequestError, InsecureBindError, MemoryBudgetError
from gym_envfactory.protocol import (
    AUTHORIZATION_HEADER,
    CLIENT_HEADER,
    CLIENT_KEY_HEADER,
    CLIENT_QUERY,
    CLOSE_ON_DISCONNECT_HEADER,
    CLOSE_ON_DISCONNECT_QUERY,
    ERR_INVALID_REQUEST,
    ERR_MEMORY,
    ERR_PARSE,
    HEALTH_PATH,
    HTTP_STATUS,
    METRICS_PATH,
    READY_PATH,
    RPC_PATH,
    SPLIT_HEADER,
    UNAUTHORIZED_MESSAGE,
    WS_PATH,
)
from gym_envfactory.server.fastproto import Caller, dispatch_frame_async, dispatch_frame_split
from gym_envfactory.server.manager import SessionManager, authenticated_client
from gym_envfactory.server.middleware import (
    LOOPBACK,
    BearerAuthMiddleware,
    OriginHostGuardMiddleware,
    host_header_name,
    is_loopback,
    require_token_off_loopback,
)

__all__ = ["build_app", "ServerConfig", "ServerState", "Metrics", "is_loopback", "host_header_name", "FrameGate",
           "frame_gate", "frame_refusal", "read_capped_body", "FRAME_FACTOR", "SMALL_FRAME_ESTIMATE",
           "InsecureBindError", "LOOPBACK", "CLOSE_ON_DISCONNECT_HEADER"]

log = logging.getLogger(__name__)


class ServerConfig:
    """Server settings.  ``token``: bearer token (required beyond loopback); ``ttl_s``: idle session
    expiry; ``max_sessions``; ``max_body_bytes``: request/frame size cap; ``close_on_disconnect``: a
    WebSocket connection's sessions close when it drops unless the connection asks otherwise."""

    def __init__(self, *, envs: list[str] | None = None, token: str | None = None, ttl_s: float = 900.0,
                 max_sessions: int = 10_000, max_body_bytes: int = 4 * 1024 * 1024, host: str = "127.0.0.1",
                 allowed_origins: tuple[str, ...] = (), close_on_disconnect: bool = False) -> None:
        self.envs = envs
        self.token = token
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_body_bytes = max_body_bytes
        self.host = host
        self.allowed_origins = tuple(allowed_origins)
        self.close_on_disconnect = close_on_disconnect


class _ManagerCollector:
    """Reads the session manager's counters at scrape time (one source of truth for all transports)."""

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    def collect(self) -> Any:
        m = self.manager
        yield GaugeMetricFamily("envfactory_sessions", "Live sessions", value=len(m.sessions))
        for key, help_ in (("created", "Sessions created"), ("closed", "Sessions closed"),
                           ("expired", "Sessions expired after the idle TTL"), ("calls", "Tool calls"),
                           ("errors", "Tool calls that returned a typed error"),
                           ("state_reads", "Whole-state reads (state)"), ("digests", "State digests (digest)")):
            yield CounterMetricFamily(f"envfactory_{key}", help_, value=m.counters[key])
        adm = m.admission
        yield GaugeMetricFamily("envfactory_memory_budget_bytes", "Memory budget (cgroup limit, --memory-budget or a "
                                "share of physical memory)", value=adm.budget.limit)
        yield GaugeMetricFamily("envfactory_memory_reserved_bytes", "Memory reserved by live sessions", value=adm.reserved)
        yield CounterMetricFamily("envfactory_memory_refused", "Requests refused for the memory budget", value=adm.refused)


class Metrics:
    """The server's Prometheus registry: the manager's counters read at scrape time, requests by method and
    outcome (``envfactory_requests``), and the latency of one request or batch frame by transport
    (``envfactory_frame_seconds``, ``http`` or ``ws``, seconds)."""

    def __init__(self, manager: SessionManager) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_ManagerCollector(manager))
        self.requests = Counter("envfactory_requests", "Protocol requests", ["method", "outcome"], registry=self.registry)
        self.latency = Histogram("envfactory_frame_seconds", "Latency of one request or batch frame (seconds)",
                                 ["transport"],
                                 buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
                                 registry=self.registry)

    def observe(self, method: str, ok: bool) -> None:
        """Count one protocol request of ``method`` (``ok``: answered without an error object)."""
        self.requests.labels(method, "ok" if ok else "error").inc()

    def text(self) -> bytes:
        """The registry in the Prometheus text exposition format (``CONTENT_TYPE_LATEST``)."""
        return generate_latest(self.registry)


#: Resident bytes one byte of a frame may take while the frame is parsed and run (measured: a 3.9 MB frame
#: holding one call of nested empty lists, behind 299 pings so that it stays parsed between two slices,
#: took a server +182 MiB resident: 47x).
FRAME_FACTOR = 48
#: Frames estimated below this (frames under ~21 KiB) run at once: what they can hold is small.
SMALL_FRAME_ESTIMATE = 1024 * 1024


class FrameGate:
    """Holds a large frame until the large frames already running leave room for it (issue 25 adversarial
    pass: eight 3.9 MB frames, each parsed at once and interleaved on the worker, took a server to 831 MiB on
    a 512 MiB budget with no refusal; the manager's admission runs only once a frame is parsed).  One per
    :class:`SessionManager` (:func:`frame_gate`), shared by ``/v1/ws``, ``/v1/rpc`` and the MCP endpoint.

    A frame of ``n`` bytes is estimated at :data:`FRAME_FACTOR` x ``n``; under :data:`SMALL_FRAME_ESTIMATE` it
    passes at once, else it runs only while the large frames in flight hold at most :meth:`cap` with it
    (one always runs alone)."""

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager
        #: Estimated bytes of the large frames dispatched and not finished.
        self.held = 0
        self._room: tuple[asyncio.AbstractEventLoop, asyncio.Condition] | None = None

    def cap(self) -> int:
        """Most estimated bytes large frames may hold at once: a quarter of the budget's allowed bytes."""
        return max(1, self.manager.admission.budget.allowed // 4)

    def _condition(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()  # an app may outlive a test's event loop
        if self._room is None or self._room[0] is not loop:
            self._room = (loop, asyncio.Condition())
        return self._room[1]

    @contextlib.asynccontextmanager
    async def admitted(self, nbytes: int, *, wait: bool) -> AsyncIterator[None]:
        """Run the body once a frame of ``nbytes`` has room.  ``wait``: wait for it (a WebSocket, which runs
        one frame at a time), else refuse.

        Raises:
            MemoryBudgetError: no room and ``wait`` is false; nothing of the frame ran.
        """
        est = FRAME_FACTOR * nbytes
        if est < SMALL_FRAME_ESTIMATE:
            yield
            return
        cap = self.cap()
        room = self._condition()
        async with room:
            while self.held and self.held + est > cap:
                if not wait:
                    adm = self.manager.admission
                    adm.refused += 1
                    raise MemoryBudgetError(
                        f"refused a frame of {nbytes} bytes: it may take an estimated {est >> 20} MiB while it is "
                        f"parsed and run, and the large frames running already hold {self.held >> 20} MiB of the "
                        f"{cap >> 20} MiB they may hold together; retry when they are done, or send smaller frames",
                        estimate=est, used=self.held, budget=adm.budget.limit, headroom=adm.budget.headroom)
                await room.wait()
            self.held += est
        try:
            yield
        finally:
            async with room:
                self.held -= est
                room.notify_all()


_GATES: weakref.WeakKeyDictionary[SessionManager, FrameGate] = weakref.WeakKeyDictionary()


def frame_gate(manager: SessionManager) -> FrameGate:
    """The :class:`FrameGate` of ``manager`` (made on first use)."""
    gate = _GATES.get(manager)
    if gate is None:
        gate = _GATES[manager] = FrameGate(manager)
    return gate


def frame_refusal(exc: MemoryBudgetError) -> str:
    """The JSON-RPC error answering a frame refused before it was parsed (``id`` null: it was not read)."""
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": ERR_MEMORY, "message": str(exc), "data": {
        "scope": exc.scope, "limit": exc.limit, "estimate": exc.estimate, "used": exc.used, "headroom": exc.headroom}}})


def _flag(value: str | None, default: bool) -> bool:
    """A header or query flag: ``1``/``true``/``yes`` or ``0``/``false``/``no`` (absent: ``default``)."""
    if value is None:
        return default
    v = value.strip().lower()
    if v in ("1", "true", "yes"):
        return True
    if v in ("0", "false", "no"):
        return False
    raise BadRequestError(f"a flag header (e.g. {CLOSE_ON_DISCONNECT_HEADER}) must be 1 or 0, not {value[:40]!r}")


class ServerState:
    """What the routes of :func:`build_app` share (``app.state.server``): the session manager, the
    configuration, the metrics and the start time (``time.time()`` seconds)."""

    def __init__(self, manager: SessionManager, config: ServerConfig) -> None:
        self.manager = manager
        self.config = config
        self.metrics = Metrics(manager)
        self.started = time.time()
        #: Admits large frames before they are parsed (one per manager: the MCP endpoint's requests share it).
        self.gate = frame_gate(manager)

    @property
    def frame_bytes(self) -> int:
        """Estimated bytes of the large frames (and MCP requests) dispatched and not finished (:class:`FrameGate`)."""
        return self.gate.held

    @frame_bytes.setter
    def frame_bytes(self, value: int) -> None:
        self.gate.held = value

    def frame_cap(self) -> int:
        """:meth:`FrameGate.cap`."""
        return self.gate.cap()

    def frame_admitted(self, nbytes: int, *, wait: bool) -> contextlib.AbstractAsyncContextManager[None]:
        """:meth:`FrameGate.admitted`."""
        return self.gate.admitted(nbytes, wait=wait)

    async def dispatch(self, frame: str | bytes, transport: str, caller: Caller) -> str | None:
        """Run one frame (:func:`~.fastproto.dispatch_frame_async`, on the worker thread) and record its
        latency under ``transport`` (``"http"`` or ``"ws"``); the encoded answer, ``None`` for notifications."""
        t0 = time.perf_counter()
        out = await dispatch_frame_async(self.manager, frame, self.metrics.observe, caller)
        self.metrics.latency.labels(transport).observe(time.perf_counter() - t0)
        return out

    async def dispatch_split(self, frame: str | bytes, transport: str, caller: Caller) -> Any:
        """:meth:`dispatch` for a client that takes a large batch's answers in several frames
        (:data:`~gym_envfactory.protocol.SPLIT_HEADER`): the finished ``FrameJob``."""
        t0 = time.perf_counter()
        job = await dispatch_frame_split(self.manager, frame, self.metrics.observe, caller)
        self.metrics.latency.labels(transport).observe(time.perf_counter() - t0)
        return job


def _state(conn: Request | WebSocket) -> ServerState:
    return conn.app.state.server


def _client(conn: Request | WebSocket, token: str | None) -> str:
    """The client ``conn`` counts as (:func:`~.manager.authenticated_client`): its ``X-Envfactory-Client``
    header (on ``/v1/ws`` also the ``client`` query parameter), proved by ``X-Envfactory-Client-Key`` or the
    bearer token on a server with a ``token``.

    Raises:
        BadRequestError: a client name that breaks the rule.
    """
    headers = conn.headers
    claimed = headers.get(CLIENT_HEADER)
    if isinstance(conn, WebSocket):
        claimed = claimed or conn.query_params.get(CLIENT_QUERY)
    return authenticated_client(claimed, token=token, key=headers.get(CLIENT_KEY_HEADER),
                                authorization=headers.get(AUTHORIZATION_HEADER))


async def healthz(request: Request) -> Response:
    """``GET /healthz``: ``{"status": "ok", "uptime_s": seconds}``."""
    return JSONResponse({"status": "ok", "uptime_s": round(time.time() - _state(request).started, 3)})


async def readyz(request: Request) -> Response:
    """``GET /readyz``: ``{"status": "ready", "envs": catalog, "sessions": n, "skipped": {name: error}}``."""
    m = _state(request).manager
    return JSONResponse({"status": "ready", "envs": m.catalog(), "sessions": len(m.sessions), "skipped": dict(m.skipped)})


async def metrics_endpoint(request: Request) -> Response:
    """``GET /metrics``: the Prometheus text format (:class:`Metrics`)."""
    return Response(_state(request).metrics.text(), media_type=CONTENT_TYPE_LATEST)


async def read_capped_body(request: Request, limit: int) -> bytes | None:
    """The body of ``request``, or ``None`` when it is over ``limit`` bytes (answer 413 with
    ``Connection: close``).  At most ``limit`` bytes are kept; an over-limit body is drained so the client
    reads the answer, unless it passes ``16 * limit`` bytes (or its Content-Length says it will), where
    reading stops and the client sees the connection close.  Shared by every HTTP route that reads a body
    (``/v1/rpc``, the OpenEnv mounts).

    Raises:
        ValueError: the Content-Length header is not an integer.
    """
    length = int(request.headers.get("content-length") or 0)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        elif size > 16 * limit or length > 16 * limit:
            return None  # stop reading an absurd body
    return b"".join(chunks) if size <= limit else None


async def rpc(request: Request) -> Response:
    """``POST /v1/rpc``: one JSON-RPC request or batch; 200 with the answer, 204 for notifications only,
    the error's HTTP status (:data:`~gym_envfactory.protocol.HTTP_STATUS`, else 400) for a single error,
    413 for a body over ``max_body_bytes``, 400 for a bad client name or Content-Length, 503 (-32006, ``id``
    null) for a large frame while other large frames hold their share of the memory budget
    (:meth:`ServerState.frame_admitted`)."""
    state = _state(request)
    limit = state.config.max_body_bytes
    try:
        caller = Caller(_client(request, state.config.token))
    except BadRequestError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    try:
        body = await read_capped_body(request, limit)
    except ValueError:
        return JSONResponse({"error": "bad Content-Length"}, status_code=400)
    if body is None:
        return JSONResponse({"error": f"request body over {limit} bytes"}, status_code=413,
                            headers={"Connection": "close"})
    try:
        async with state.frame_admitted(len(body), wait=False):
            out = await state.dispatch(body, "http", caller)
    except MemoryBudgetError as exc:
        return Response(frame_refusal(exc), status_code=HTTP_STATUS[ERR_MEMORY], media_type="application/json")
    if out is None:
        return Response(status_code=204)
    status = 200
    if out.startswith('{"jsonrpc"') and '"error"' in out[:80]:
        parsed = json.loads(out)
        if "error" in parsed:
            status = HTTP_STATUS.get(parsed["error"]["code"], 400)
    return Response(out, status_code=status, media_type="application/json")


async def session_socket(websocket: WebSocket) -> None:
    """``WS /v1/ws``: the fast session protocol, one JSON-RPC text frame (request or batch) at a time.
    A bad client name or flag closes the handshake with 4400; a binary frame that is not UTF-8 or a frame
    over ``max_body_bytes`` is answered with an error object and the connection stays open.  A large frame
    waits until other large frames leave it room (:meth:`ServerState.frame_admitted`)."""
    state = _state(websocket)
    manager, config = state.manager, state.config
    query = websocket.query_params
    try:
        client = _client(websocket, config.token)
        close_on_disconnect = _flag(websocket.headers.get(CLOSE_ON_DISCONNECT_HEADER)
                                    or query.get(CLOSE_ON_DISCONNECT_QUERY), config.close_on_disconnect)
        split = _flag(websocket.headers.get(SPLIT_HEADER), False)
    except BadRequestError as exc:
        await websocket.close(code=4400, reason=str(exc)[:120])
        return
    caller = Caller(client, set() if close_on_disconnect else None)
    await websocket.accept()
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            frame = message.get("text")
            if frame is None:  # a binary frame: the protocol is text JSON
                raw = message.get("bytes") or b""
                try:
                    frame = raw.decode("utf-8")
                except UnicodeDecodeError:
                    await websocket.send_text(json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                        "code": ERR_PARSE, "message": "binary frame is not UTF-8 JSON text"}}))
                    continue
            if len(frame) > config.max_body_bytes:
                await websocket.send_text(json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                    "code": ERR_INVALID_REQUEST, "message": f"frame over {config.max_body_bytes} bytes"}}))
                continue
            if not split:
                async with state.frame_admitted(len(frame), wait=True):
                    out = await state.dispatch(frame, "ws", caller)
                if out is not None:
                    await websocket.send_text(out)
                continue
            async with state.frame_admitted(len(frame), wait=True):
                job = await state.dispatch_split(frame, "ws", caller)
            if job.frames is None:
                if job.text is not None:
                    await websocket.send_text(job.text)
                continue
            for group in job.frames:  # one group at a time, other connections served in between
                await websocket.send_text("[" + ",".join(group) + "]")
                await asyncio.sleep(0)
    except WebSocketDisconnect:
        pass
    finally:
        if caller.created:
            n = await manager.worker.run(manager.close_many, list(caller.created))
            log.debug("closed %d session(s) of a WebSocket connection that dropped", n)


async def _expire_idle(manager: SessionManager, ttl_s: float) -> None:
    """Expire idle sessions every ``ttl_s / 4`` seconds (at least 0.05, at most 30), forever."""
    period = max(0.05, min(30.0, ttl_s / 4))
    while True:
        await asyncio.sleep(period)
        n = await manager.worker.run(manager.expire)
        if n:
            log.info("expired %d idle session(s)", n)


def build_app(manager: SessionManager, config: ServerConfig, *, extra_routes: list[Any] | None = None,
              lifespan_hooks: list[Any] | None = None) -> Starlette:
    """Build the ASGI app over ``manager``: the routes of this module, each but ``/healthz`` behind
    :class:`~.middleware.OriginHostGuardMiddleware` then :class:`~.middleware.BearerAuthMiddleware`, plus
    ``extra_routes`` (the MCP routes, which bring their own guards) and a lifespan that runs the idle
    expiry, enters ``lifespan_hooks`` (``hook(app)`` async context managers) and closes every session at
    shutdown.  ``app.state.server`` is the :class:`ServerState`.

    Raises:
        InsecureBindError: ``config.host`` is not loopback and no token is set.
    """
    require_token_off_loopback(config.host, config.token)
    state = ServerState(manager, config)

    def guarded(message: str = "unauthorized", jsonrpc: bool = False) -> list[Middleware]:
        return [Middleware(OriginHostGuardMiddleware, host=config.host, allowed_origins=config.allowed_origins),
                Middleware(BearerAuthMiddleware, token=config.token, message=message, jsonrpc=jsonrpc)]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(_expire_idle(manager, config.ttl_s))
        async with contextlib.AsyncExitStack() as stack:
            for hook in lifespan_hooks or []:
                await stack.enter_async_context(hook(app))
            try:
                yield
            finally:
                task.cancel()
                await manager.worker.run(manager.close_all)
                manager.worker.stop()

    routes: list[Any] = [
        Route(HEALTH_PATH, healthz),
        Route(READY_PATH, readyz, middleware=guarded()),
        Route(METRICS_PATH, metrics_endpoint, middleware=guarded()),
        Route(RPC_PATH, rpc, methods=["POST"], middleware=guarded(UNAUTHORIZED_MESSAGE, jsonrpc=True)),
        WebSocketRoute(WS_PATH, session_socket, middleware=guarded()),
    ] + list(extra_routes or [])
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.server = state
    app.state.manager = manager
    app.state.config = config
    return app
