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
``anonymous`` client.  A client holds at most ``max_sessions_per_client`` sessions.  A WebSocket
connection opened with ``X-Envfactory-Close-On-Disconnect: 1`` (or ``?close_on_disconnect=1``; the
server default is ``close_on_disconnect``) closes the sessions it created when it drops.

Security: when ``token`` is set every route but ``/healthz`` requires ``Authorization: Bearer <token>``;
on a loopback server every route but ``/healthz`` also refuses (403) a foreign ``Origin`` and a ``Host``
that is not exactly a loopback address or ``localhost`` (with an optional port: DNS rebinding);
:func:`build_app` refuses to serve beyond loopback without one.  Request bodies are capped
(``max_body_bytes``).  Idle sessions expire after ``ttl_s`` (checked every ``ttl_s / 4``, at most 30 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from gym_envfactory.errors import BadRequestError, InsecureBindError
from gym_envfactory.server.fastproto import (
    ERR_BAD_REQUEST,
    ERR_CAPACITY,
    ERR_MEMORY,
    ERR_OWNERSHIP,
    ERR_UNKNOWN_SESSION,
    Caller,
    dispatch_frame_async,
)
from gym_envfactory.server.manager import SessionManager, client_identity

__all__ = ["build_app", "ServerConfig", "is_loopback", "host_header_name", "InsecureBindError"]

log = logging.getLogger(__name__)

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
CLOSE_ON_DISCONNECT_HEADER = "X-Envfactory-Close-On-Disconnect"


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
                           ("errors", "Tool calls that returned a typed error")):
            yield CounterMetricFamily(f"envfactory_{key}", help_, value=m.counters[key])
        adm = m.admission
        yield GaugeMetricFamily("envfactory_memory_budget_bytes", "Memory budget (cgroup limit, --memory-budget or a "
                                "share of physical memory)", value=adm.budget.limit)
        yield GaugeMetricFamily("envfactory_memory_reserved_bytes", "Memory reserved by live sessions", value=adm.reserved)
        yield CounterMetricFamily("envfactory_memory_refused", "Requests refused for the memory budget", value=adm.refused)


class Metrics:
    def __init__(self, manager: SessionManager) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_ManagerCollector(manager))
        self.requests = Counter("envfactory_requests", "Protocol requests", ["method", "outcome"], registry=self.registry)
        self.latency = Histogram("envfactory_frame_seconds", "Latency of one request or batch frame (seconds)",
                                 ["transport"],
                                 buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
                                 registry=self.registry)


_HTTP_STATUS = {ERR_UNKNOWN_SESSION: 404, ERR_CAPACITY: 429, ERR_BAD_REQUEST: 400, ERR_OWNERSHIP: 403, ERR_MEMORY: 503}


def _flag(value: str | None, default: bool) -> bool:
    """A header or query flag: ``1``/``true``/``yes`` or ``0``/``false``/``no`` (absent: ``default``)."""
    if value is None:
        return default
    v = value.strip().lower()
    if v in ("1", "true", "yes"):
        return True
    if v in ("0", "false", "no"):
        return False
    raise BadRequestError(f"{CLOSE_ON_DISCONNECT_HEADER} must be 1 or 0, not {value[:40]!r}")


def build_app(manager: SessionManager, config: ServerConfig, *, extra_routes: list[Any] | None = None,
              lifespan_hooks: list[Any] | None = None) -> Starlette:
    """Build the ASGI app over ``manager``.

    Raises:
        InsecureBindError: ``config.host`` is not loopback and no token is set.
    """
    if not is_loopback(config.host) and not config.token:
        raise InsecureBindError(
            f"refusing to serve the control plane on {config.host} without a token: pass --token or set ENVFACTORY_TOKEN")
    metrics = Metrics(manager)
    started = time.time()

    def authorized(headers: Any) -> bool:
        if not config.token:
            return True
        scheme, _, got = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(got.strip().encode(), config.token.encode())

    def foreign(headers: Any) -> str | None:
        """Browsers send Origin on cross-site requests and a page's own Host when a name is rebound to
        127.0.0.1 (DNS rebinding): refuse both on a loopback server, where the token is optional."""
        if headers.get("origin") and headers.get("origin") not in config.allowed_origins:
            return f"origin {headers.get('origin')!r} is not allowed"
        if is_loopback(config.host):
            raw = headers.get("host", "")
            host = host_header_name(raw)
            if raw and (host is None or not is_loopback(host)):
                return f"host {raw[:200]!r} is not this loopback server"
        return None

    def observe(method: str, ok: bool) -> None:
        metrics.requests.labels(method, "ok" if ok else "error").inc()

    async def handle(frame: str | bytes, transport: str, caller: Caller) -> str | None:
        t0 = time.perf_counter()
        out = await dispatch_frame_async(manager, frame, observe, caller)
        metrics.latency.labels(transport).observe(time.perf_counter() - t0)
        return out

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "uptime_s": round(time.time() - started, 3)})

    async def readyz(request: Request) -> Response:
        bad = foreign(request.headers)
        if bad:
            return JSONResponse({"error": bad}, status_code=403)
        if not authorized(request.headers):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return JSONResponse({"status": "ready", "envs": manager.catalog(), "sessions": len(manager.sessions),
                             "skipped": dict(manager.skipped)})

    async def metrics_route(request: Request) -> Response:
        bad = foreign(request.headers)
        if bad:
            return JSONResponse({"error": bad}, status_code=403)
        if not authorized(request.headers):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def rpc(request: Request) -> Response:
        bad = foreign(request.headers)
        if bad:
            return JSONResponse({"error": bad}, status_code=403)
        if not authorized(request.headers):
            return JSONResponse({"error": "unauthorized: send Authorization: Bearer <token>"}, status_code=401)
        try:
            caller = Caller(client_identity(request.headers.get("x-envfactory-client")))
        except BadRequestError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        too_big = JSONResponse({"error": f"request body over {config.max_body_bytes} bytes"}, status_code=413,
                               headers={"Connection": "close"})
        try:
            length = int(request.headers.get("content-length") or 0)
        except ValueError:
            return JSONResponse({"error": "bad Content-Length"}, status_code=400)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size <= config.max_body_bytes:
                chunks.append(chunk)
            elif size > 16 * config.max_body_bytes or length > 16 * config.max_body_bytes:
                return too_big  # stop reading an absurd body; the client sees the connection close
        if size > config.max_body_bytes:
            return too_big  # drained, so the client reads this 413
        body = b"".join(chunks)
        out = await handle(body, "http", caller)
        if out is None:
            return Response(status_code=204)
        status = 200
        if out.startswith('{"jsonrpc"') and '"error"' in out[:80]:
            parsed = json.loads(out)
            if "error" in parsed:
                status = _HTTP_STATUS.get(parsed["error"]["code"], 400)
        return Response(out, status_code=status, media_type="application/json")

    async def ws(websocket: WebSocket) -> None:
        if foreign(websocket.headers):
            await websocket.close(code=4403, reason="forbidden origin or host")
            return
        if not authorized(websocket.headers):
            await websocket.close(code=4401, reason="unauthorized")
            return
        query = websocket.query_params
        try:
            client = client_identity(websocket.headers.get("x-envfactory-client") or query.get("client"))
            close_on_disconnect = _flag(websocket.headers.get("x-envfactory-close-on-disconnect")
                                        or query.get("close_on_disconnect"), config.close_on_disconnect)
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
                            "code": -32700, "message": "binary frame is not UTF-8 JSON text"}}))
                        continue
                if len(frame) > config.max_body_bytes:
                    await websocket.send_text(json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                        "code": -32600, "message": f"frame over {config.max_body_bytes} bytes"}}))
                    continue
                out = await handle(frame, "ws", caller)
                if out is not None:
                    await websocket.send_text(out)
        except WebSocketDisconnect:
            pass
        finally:
            if caller.created:
                n = await manager.worker.run(manager.close_many, list(caller.created))
                log.debug("closed %d session(s) of a WebSocket connection that dropped", n)

    async def expiry_loop() -> None:
        period = max(0.05, min(30.0, config.ttl_s / 4))
        while True:
            await asyncio.sleep(period)
            n = await manager.worker.run(manager.expire)
            if n:
                log.info("expired %d idle session(s)", n)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(expiry_loop())
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
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics_route),
        Route("/v1/rpc", rpc, methods=["POST"]),
        WebSocketRoute("/v1/ws", ws),
    ] + list(extra_routes or [])
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.manager = manager
    app.state.config = config
    app.state.authorized = authorized
    return app
