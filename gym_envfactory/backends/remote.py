"""Clients of the fast session protocol (docs/architecture.md, "Backends") and a remote :class:`~gym_envfactory.session.Session`.

- :class:`AsyncSessionClient`: one WebSocket, many sessions multiplexed by JSON-RPC id; ``batch``
  sends many calls (a GRPO group's) in one frame.
- :class:`SessionClient`: the same API, synchronous (an event loop in a background thread), safe to
  share between many gym envs and threads.
- :class:`RemoteSession`: the Session API over a client; what the gym's remote backends use.

A lost connection (server killed, container stopped) raises :class:`BackendUnavailableError` on the
next request instead of hanging; requests time out after ``timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from gym_envfactory.backends.base import Backend
from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.tools import ToolSpec
from gym_envfactory.errors import (
    BackendError,
    BackendUnavailableError,
    CapacityError,
    EnvFactoryError,
    MemoryBudgetError,
    RemoteError,
    RequestTooLargeError,
)
from gym_envfactory.protocol import (
    CLIENT_ENV_VAR,
    CLIENT_HEADER,
    CLIENT_ID_RULE,
    CLIENT_KEY_HEADER,
    ERR_BAD_REQUEST,
    ERR_CAPACITY,
    ERR_INVALID_REQUEST,
    ERR_MEMORY,
    ERR_METHOD,
    SPLIT_HEADER,
    STATE_DIGEST_ALGORITHM,
    WS_PATH,
    bearer_authorization,
    client_key,
    default_client_id,
    is_valid_client_id,
)
from gym_envfactory.session import ActionRecord, ToolResult

__all__ = ["AsyncSessionClient", "SessionClient", "RemoteSession", "BackendUnavailableError", "RemoteError",
           "remote_error", "process_client_id"]


def ws_url(url: str) -> str:
    """``http://host:port`` (or ``ws://...``) → ``ws://host:port/v1/ws`` (:data:`~gym_envfactory.protocol.WS_PATH`);
    a Unix domain socket's ``unix:PATH`` (the ``isolated`` backend's server) stays as it is.

    Raises:
        BackendError: ``url`` has no ``http://``/``https://`` (or ``ws://``/``wss://``) scheme.
    """
    if url.startswith("unix:"):
        return url
    if not url.lower().startswith(("http://", "https://", "ws://", "wss://")):
        raise BackendError(f"the server url {url!r} needs a scheme: http://host:port (https:// behind TLS), "
                           f"e.g. http://127.0.0.1:8765")
    u = url.rstrip("/")
    if u.startswith("http://"):
        u = "ws://" + u[7:]
    elif u.startswith("https://"):
        u = "wss://" + u[8:]
    if not u.endswith(WS_PATH):
        u += WS_PATH
    return u


def refused_message(url: str, status: int, sent_token: bool) -> str:
    """What to tell the user when the server at ``url`` refused the WebSocket handshake with HTTP
    ``status``: for 401/403 (a server with a token refuses a missing or wrong one; docs/architecture.md,
    "Backends"), that the server wants a bearer token and the three ways to give one."""
    if status not in (401, 403):
        return f"cannot connect to {url}: the server refused the connection with HTTP {status}"
    which = "refused the bearer token sent" if sent_token else "wants a bearer token and none was sent"
    return (f"cannot connect to {url} (HTTP {status}): the server {which}; pass the server's token as "
            f"gym.make(..., token=...), set $ENVFACTORY_TOKEN, or start the server with --token-file PATH "
            f"and give the client the token in that file (a loopback server also refuses a foreign Origin or Host)")


class AsyncSessionClient:
    """Async JSON-RPC client over one WebSocket.  Use ``await client.connect()`` or ``async with``."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 60.0, max_size: int = 64 * 1024 * 1024,
                 max_request_bytes: int = 4 * 1024 * 1024) -> None:
        self.url = ws_url(url)
        self.token = token
        self.timeout = timeout
        self.max_size = max_size
        self.max_request_bytes = max_request_bytes  # the server's default frame cap
        self._ws: Any = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._closed_reason: str | None = None

    async def connect(self) -> AsyncSessionClient:
        """Open the WebSocket (``Authorization: Bearer <token>`` when a token is set) and start reading
        replies; returns ``self``.  The connection names this process's client (:func:`process_client_id`)
        and, with a token, proves it (``X-Envfactory-Client-Key``: :func:`gym_envfactory.protocol.client_key`),
        so every connection of this process counts as the one client that owns its sessions.  A ``token``
        that is itself the client's credential (given by the operator instead of the server's token) works
        as the bearer token alone.

        Raises:
            BackendUnavailableError: the server cannot be reached within ``timeout`` seconds.
        """
        websockets = require_websockets()

        headers = bearer_authorization(self.token) if self.token else {}
        headers[CLIENT_HEADER] = client = process_client_id()
        if self.token:
            headers[CLIENT_KEY_HEADER] = client_key(self.token, client)
        headers[SPLIT_HEADER] = "1"  # a large batch's answers may come in several frames: matched by id
        settings: dict[str, Any] = dict(additional_headers=headers, max_size=self.max_size, open_timeout=self.timeout,
                                        ping_interval=20, ping_timeout=20, compression=None)
        if self.url.startswith("unix:"):  # a server on a Unix domain socket (the isolated backend's)
            opening = websockets.unix_connect(self.url[5:], uri=f"ws://localhost{WS_PATH}", **settings)
        else:
            opening = websockets.connect(self.url, **settings)
        try:
            self._ws = await asyncio.wait_for(opening, self.timeout)
        except websockets.exceptions.InvalidStatus as exc:
            raise BackendUnavailableError(refused_message(self.url, exc.response.status_code, self.token is not None)) from None
        except (TimeoutError, OSError, websockets.exceptions.WebSocketException) as exc:
            raise BackendUnavailableError(f"cannot connect to {self.url}: {type(exc).__name__}: {exc}") from None
        self._closed_reason = None
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        websockets = require_websockets()

        reason = "server closed the connection"
        try:
            async for frame in self._ws:
                try:
                    msg = json.loads(frame)
                except (ValueError, RecursionError):
                    reason = "server sent a frame that is not JSON"
                    break
                for r in msg if isinstance(msg, list) else [msg]:
                    rid = r.get("id") if isinstance(r, dict) else None
                    if not isinstance(rid, int) or isinstance(rid, bool):
                        # an error the server could not tie to a request (e.g. an unparsable frame):
                        # fail what is waiting rather than let it sit until the timeout
                        err = r.get("error", {}) if isinstance(r, dict) else {}
                        msg_text = err.get("message", "unattributed server reply") if isinstance(err, dict) else "bad reply"
                        for fut in list(self._pending.values()):
                            if not fut.done():
                                code = err.get("code", ERR_INVALID_REQUEST) if isinstance(err, dict) else ERR_INVALID_REQUEST
                                fut.set_exception(RemoteError(code, str(msg_text)))
                        self._pending.clear()
                        continue
                    waiting = self._pending.pop(rid, None)
                    if waiting is not None and not waiting.done():
                        waiting.set_result(r)
        except websockets.exceptions.ConnectionClosed as exc:
            reason = f"connection closed ({exc.rcvd.code if exc.rcvd else 'no close frame'})"
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            reason = f"connection failed: {type(exc).__name__}: {exc}"
        self._closed_reason = reason
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(BackendUnavailableError(f"{self.url}: {reason}"))
        self._pending.clear()

    async def _send(self, payload: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self._ws is None or self._closed_reason is not None:
            raise BackendUnavailableError(f"{self.url}: {self._closed_reason or 'not connected'}")
        try:
            frame = json.dumps(payload if len(payload) > 1 else payload[0], ensure_ascii=True, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise RequestTooLargeError(f"request is not JSON-serialisable: {type(exc).__name__}: {str(exc)[:200]}") from None
        if len(frame) > self.max_request_bytes:
            raise RequestTooLargeError(f"request frame of {len(frame)} bytes is over {self.max_request_bytes}; "
                                       "send fewer calls per batch (the server would drop the connection)")
        loop = asyncio.get_running_loop()
        futs = []
        for req in payload:
            fut = loop.create_future()
            self._pending[req["id"]] = fut
            futs.append(fut)
        try:
            async with asyncio.timeout(self.timeout):  # no extra task per request (unlike wait_for)
                await self._ws.send(frame)
                if len(futs) == 1:
                    return [await futs[0]]
                return list(await asyncio.gather(*futs))
        except TimeoutError:
            for req in payload:
                self._pending.pop(req["id"], None)
            raise BackendUnavailableError(f"{self.url}: no answer within {self.timeout} s") from None
        except Exception as exc:
            if isinstance(exc, EnvFactoryError):
                raise
            raise BackendUnavailableError(f"{self.url}: {type(exc).__name__}: {exc}") from None

    @staticmethod
    def _result(resp: dict[str, Any]) -> Any:
        if "error" in resp:
            raise remote_error(resp["error"])
        return resp.get("result")

    async def request(self, method: str, **params: Any) -> Any:
        """One JSON-RPC request; returns its result or raises :class:`RemoteError` (a refusal for
        capacity as the server's own :class:`CapacityError` / :class:`MemoryBudgetError`: :func:`remote_error`)."""
        (resp,) = await self._send([{"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}])
        return self._result(resp)

    async def notify(self, method: str, **params: Any) -> None:
        """A JSON-RPC 2.0 notification (no ``id``): sent, never answered, so nothing waits for the
        server.  The server handles a connection's frames in order, so any later request sees its effect.

        Raises:
            BackendUnavailableError: not connected, or the connection is lost.
        """
        if self._ws is None or self._closed_reason is not None:
            raise BackendUnavailableError(f"{self.url}: {self._closed_reason or 'not connected'}")
        try:
            await self._ws.send(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}, ensure_ascii=True))
        except Exception as exc:
            raise BackendUnavailableError(f"{self.url}: {type(exc).__name__}: {exc}") from None

    async def batch(self, requests: Sequence[tuple[str, dict[str, Any]]]) -> list[Any]:
        """Many requests in one frame; results in order.  A failed request's slot holds its
        :class:`RemoteError` (not raised), so one bad call does not lose the others."""
        if not requests:
            return []
        payload = [{"jsonrpc": "2.0", "id": next(self._ids), "method": m, "params": p} for m, p in requests]
        out = []
        for resp in await self._send(payload):
            try:
                out.append(self._result(resp))
            except (RemoteError, CapacityError) as exc:
                out.append(exc)
        return out

    async def close(self) -> None:
        """Close the WebSocket and wait for the reader; requests still waiting fail with
        :class:`BackendUnavailableError`."""
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        self._ws = None

    async def __aenter__(self) -> AsyncSessionClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _request_key(method: str, params: dict[str, Any]) -> tuple[Any, ...]:
    return (method, json.dumps(params, sort_keys=True, default=repr))


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def remote_error(err: Any) -> EnvFactoryError:
    """The typed error a JSON-RPC error object stands for: code -32006 (``ERR_MEMORY``) is
    :class:`MemoryBudgetError` (with its ``estimate``, ``used``, ``budget``, ``headroom`` in bytes), -32002
    (``ERR_CAPACITY``) :class:`CapacityError` (its
    ``scope`` and ``limit``), anything else :class:`RemoteError` with the code (docs/architecture.md,
    "Backends": the codes of the fast session protocol)."""
    if not isinstance(err, dict):
        return RemoteError(ERR_INVALID_REQUEST, "malformed error object")
    code, message = err.get("code", 0), str(err.get("message", ""))
    data: dict[str, Any] = err["data"] if isinstance(err.get("data"), dict) else {}
    if code == ERR_MEMORY:
        return MemoryBudgetError(message, estimate=_int_or_none(data.get("estimate")), used=_int_or_none(data.get("used")),
                                 budget=_int_or_none(data.get("limit")), headroom=_int_or_none(data.get("headroom")))
    if code == ERR_CAPACITY:
        scope = data.get("scope")
        return CapacityError(message, scope=scope if isinstance(scope, str) else "server",
                             limit=_int_or_none(data.get("limit")))
    return RemoteError(code if isinstance(code, int) else 0, message)


def require_websockets() -> Any:
    """The ``websockets`` module, or a one-line :class:`BackendError` naming the extra that installs it."""
    try:
        import websockets
    except ImportError:
        raise BackendError("the remote backends (url, subprocess, docker) need the 'server' extra: "
                           "pip install 'gym-envfactory[server]' (in a checkout: pip install -e '.[server]')") from None
    return websockets


def process_client_id() -> str:
    """The :data:`~gym_envfactory.protocol.CLIENT_HEADER` value this process sends (the server's unit of
    session ownership and quota): :func:`gym_envfactory.protocol.default_client_id`, i.e.
    ``$ENVFACTORY_CLIENT`` when set, else ``<hostname>:<pid>``, so every connection of one trainer process
    shares its sessions and quota, and two processes never use each other's sessions.

    Raises:
        BackendError: ``$ENVFACTORY_CLIENT`` breaks :func:`gym_envfactory.protocol.is_valid_client_id`.
    """
    value = default_client_id()
    if not is_valid_client_id(value):
        # the server would refuse the handshake (HTTP 403), which reads like a token problem
        raise BackendError(f"${CLIENT_ENV_VAR} must be {CLIENT_ID_RULE} (got {value[:40]!r})")
    return value


class SessionClient:
    """Synchronous wrapper: an :class:`AsyncSessionClient` on a private event-loop thread.
    Thread-safe; one instance can serve many gym envs (it multiplexes their sessions)."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 60.0) -> None:
        self.url = url
        self.timeout = timeout
        self.no_digest = False  # set once the server answers that it has no ``digest`` method
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="envfactory-client", daemon=True)
        self._thread.start()
        self._client = AsyncSessionClient(url, token=token, timeout=timeout)
        try:
            self._run(self._client.connect())
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)  # no thread or loop left behind
            self._thread.join(timeout=5)
            self._loop.close()
            raise

    def _run(self, coro: Any) -> Any:
        if not self._loop.is_running():  # closed client: refuse at once (no never-awaited coroutine, no wait)
            coro.close()
            raise BackendUnavailableError(f"{self.url}: the connection is closed")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(self.timeout + 5)
        except TimeoutError:
            fut.cancel()
            raise BackendUnavailableError(f"{self.url}: no answer within {self.timeout} s") from None

    @property
    def alive(self) -> bool:
        """False once the connection is lost (the server died or closed it)."""
        return self._client._ws is not None and self._client._closed_reason is None

    def ping(self, timeout: float = 5.0) -> bool:
        """True when the connection is up and the server answers a ``ping`` within ``timeout`` seconds
        (a liveness check that never raises)."""
        if not self.alive or not self._loop.is_running():
            return False
        fut = asyncio.run_coroutine_threadsafe(asyncio.wait_for(self._client.request("ping"), timeout), self._loop)
        try:
            fut.result(timeout + 1)
        except Exception:  # noqa: BLE001 - any failure means "not usable"
            fut.cancel()
            return False
        return True

    def request(self, method: str, **params: Any) -> Any:
        """One JSON-RPC 2.0 request, blocking; returns its result.

        Raises:
            RemoteError: the server answered with an error object.
            CapacityError: the server refused for capacity (:class:`MemoryBudgetError`: its memory budget).
            BackendUnavailableError: the connection is lost or no answer came within ``timeout`` s.
        """
        return self._run(self._client.request(method, **params))

    def notify(self, method: str, **params: Any) -> None:
        """A notification (:meth:`AsyncSessionClient.notify`): blocks until it is sent, not answered.

        Raises:
            BackendUnavailableError: the connection is lost or closed.
        """
        self._run(self._client.notify(method, **params))

    def batch(self, requests: Sequence[tuple[str, dict[str, Any]]]) -> list[Any]:
        """Many ``(method, params)`` requests in one frame (a JSON-RPC 2.0 batch), blocking; results in
        order, a failed request's slot holding its :class:`RemoteError` or :class:`CapacityError` (see
        :meth:`AsyncSessionClient.batch`)."""
        return self._run(self._client.batch(requests))

    def close(self) -> None:
        """Close the connection and stop the event-loop thread (idempotent; errors on the way are ignored)."""
        if self._loop.is_running():
            try:
                self._run(self._client.close())
            except EnvFactoryError:
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._thread.is_alive() and not self._loop.is_closed():
                self._loop.close()  # else an "unclosed event loop" ResourceWarning at exit


def _tool_result(d: dict[str, Any]) -> ToolResult:
    return ToolResult(**d)


class RemoteSession:
    """The :class:`~gym_envfactory.session.Session` API over a :class:`SessionClient`.

    The tool specs come from the local catalog (the client needs the same environments installed for
    tasks and reward); state and tool execution live on the server.

    Raises:
        BackendUnavailableError: the server is gone.  RemoteError: the server refused a request.
    """

    def __init__(self, client: SessionClient, session_id: str, envs: Sequence[EnvironmentSpec]) -> None:
        self.client = client
        self.session_id = session_id
        self.envs = {e.name: e for e in envs}
        self.tools: dict[str, ToolSpec] = {n: t for e in envs for n, t in e.tools.items()}
        self._closed = False
        #: Answers already fetched for the requests this session makes next, in order (:meth:`prefetched`).
        self._ahead: deque[tuple[tuple[Any, ...], Any]] = deque()
        #: Ids of copies the server made with this session (:meth:`create` with ``copies``) while it is
        #: still as it was made: :meth:`fork_many` hands them out instead of asking for forks.
        self._copies: list[str] = []

    @classmethod
    def create(cls, client: SessionClient, envs: Sequence[EnvironmentSpec], *, task_id: str | None = None,
               initial_state: Any = None, copies: int = 0) -> RemoteSession:
        """Create a session on the server over ``envs``: from task ``task_id``'s initial state, or from
        ``initial_state`` (the state dict; ``{env_name: dict}`` for several environments).  ``copies``: forks
        the caller is about to ask for (a GRPO group's other members), made by the server with the
        session in the same round trip and handed out by the first :meth:`fork_many` while the session
        is unchanged (closed unused otherwise); an older server that makes none leaves :meth:`fork_many`
        to ask.

        Raises:
            RemoteError: the server refused, or serves another version of an environment (code -32003).
            BackendUnavailableError: the server is gone.
        """
        names = [e.name for e in envs]
        res = client.request("create", env=names if len(names) > 1 else names[0], task_id=task_id,
                             initial_state=initial_state, **({"copies": copies} if copies > 0 else {}))
        made = [i for i in res.get("copies") or [] if isinstance(i, str)]
        for e in envs:
            remote_v = res.get("versions", {}).get(e.name)
            if remote_v is not None and remote_v != e.version:
                for sid in [res["session_id"], *made]:
                    client.request("close", session_id=sid)
                raise RemoteError(ERR_BAD_REQUEST, f"server serves {e.name} v{remote_v}, this client has v{e.version}")
        session = cls(client, res["session_id"], envs)
        session._copies = made
        return session

    def _changed(self) -> None:
        """The session is about to change: copies made with it are no longer forks of it (closed)."""
        if self._copies:
            made, self._copies = self._copies, []
            for sid in made:
                RemoteSession(self.client, sid, list(self.envs.values())).close()

    def prefetch_requests(self, calls: Sequence[tuple[str, Any, str | None, Any]],
                          digest: tuple[Sequence[str], Sequence[str]] | None) -> list[tuple[str, dict[str, Any]]]:
        """The JSON-RPC requests for ``calls`` (``(name, arguments, call_id, tag)``, in order) and then,
        if given, a ``digest`` with ``(excluded, set_fields)``: what a caller batches with other
        sessions' requests into one frame and hands back with :meth:`prefetched`."""
        if calls:
            self._changed()
        reqs: list[tuple[str, dict[str, Any]]] = [
            ("call", {"session_id": self.session_id, "name": n, "arguments": a, "call_id": c, "tag": t})
            for n, a, c, t in calls]
        if digest is not None and not getattr(self.client, "no_digest", False):
            reqs.append(("digest", {"session_id": self.session_id, "excluded": list(digest[0]),
                                    "set_fields": list(digest[1])}))
        return reqs

    def prefetched(self, requests: Sequence[tuple[str, dict[str, Any]]], answers: Sequence[Any]) -> None:
        """Keep the ``answers`` (results, or the :class:`RemoteError` a request got) of ``requests`` made
        by :meth:`prefetch_requests`: the session's next :meth:`call` / :meth:`digest` with the same
        parameters, in the same order, take them instead of asking the server (the calls have run there
        already).  A kept ``digest`` nobody asks for is dropped (see :meth:`_take`)."""
        for (method, params), answer in zip(requests, answers, strict=True):
            self._ahead.append((_request_key(method, params), answer))

    def _take(self, method: str, params: dict[str, Any]) -> tuple[bool, Any]:
        """The kept answer for this request, if it is the next one kept.  A kept ``digest`` nobody asked
        for (it changes nothing) is dropped; a kept ``call`` that is not the one asked for means the
        calls already run on the server differ from what the env is about to record: raised, never
        sent again."""
        if not self._ahead:  # the common case: nothing kept, nothing to serialise
            return False, None
        key = _request_key(method, params)
        while self._ahead:
            kept, answer = self._ahead.popleft()
            if kept == key:
                if isinstance(answer, Exception):
                    raise answer
                return True, answer
            if kept[0] == "digest":
                continue
            self._ahead.clear()
            raise RuntimeError(f"session {self.session_id}: a prefetched tool call ran on the server but the env "
                               f"asked for another request ({method}); the episode's log no longer matches")
        return False, None

    def call(self, name: str, arguments: Any = None, *, call_id: str | None = None, tag: Any = None) -> ToolResult:
        """Validate and run one tool call on the server (see :meth:`Session.call`); a bad call is a typed
        result, never an exception.  An answer :meth:`prefetched` for this very call is taken instead."""
        self._changed()
        params = {"session_id": self.session_id, "name": name, "arguments": arguments, "call_id": call_id, "tag": tag}
        hit, answer = self._take("call", params)
        return _tool_result(answer if hit else self.client.request("call", **params))

    def call_many(self, calls: Sequence[tuple[str, Any, str | None, Any]]) -> list[ToolResult]:
        """Several calls of this session in one frame (executed in order on the server)."""
        self._changed()
        res = self.client.batch([("call", {"session_id": self.session_id, "name": n, "arguments": a,
                                           "call_id": c, "tag": t}) for n, a, c, t in calls])
        for r in res:
            if isinstance(r, Exception):
                raise r
        return [_tool_result(r) for r in res]

    def record_invalid(self, name: str, raw: Any, message: str, *, call_id: str | None = None, tag: Any = None,
                       not_recorded: int = 0, error_type: str = "parse_error") -> ToolResult:
        """Log a call that could not be parsed (``parse_error``), or one the env refused as an
        ``unknown_tool``, in the server's action log; ``raw`` that is not JSON-serialisable is sent as
        its ``repr``."""
        self._changed()
        try:
            json.dumps(raw)
        except (TypeError, ValueError):
            raw = repr(raw)
        return _tool_result(self.client.request("record_invalid", session_id=self.session_id, name=name, raw=raw,
                                                message=message, call_id=call_id, tag=tag,
                                                **({"not_recorded": not_recorded} if not_recorded else {}),
                                                **({"error_type": error_type} if error_type != "parse_error" else {})))

    def state(self) -> Any:
        """The canonical state (one env: its dict; several: ``{env_name: dict}``), fetched from the server."""
        return self.client.request("state", session_id=self.session_id)

    def digest(self, excluded: Sequence[str] = (), set_fields: Sequence[str] = ()) -> str | None:
        """The server's :func:`~gym_envfactory.digest.state_digest` of this session's state with the
        reward's ``excluded`` paths and ``set_fields`` (docs/reward.md, "Scoring on the server"): a few
        bytes on the wire instead of the whole state.  ``None`` when the server cannot say (a server
        without the ``digest`` method, or another digest algorithm): then read :meth:`state`.

        Raises:
            BackendUnavailableError: the connection is lost or no answer came in time.
        """
        if getattr(self.client, "no_digest", False):
            return None
        params = {"session_id": self.session_id, "excluded": list(excluded), "set_fields": list(set_fields)}
        try:
            hit, got = self._take("digest", params)
            if not hit:
                got = self.client.request("digest", **params)
        except RemoteError as exc:
            if exc.code != ERR_METHOD:
                raise
            self.client.no_digest = True  # an older server: ask it no more
            return None
        if not isinstance(got, dict) or got.get("algorithm") != STATE_DIGEST_ALGORITHM:
            return None
        value = got.get("digest")
        return value if isinstance(value, str) else None

    def state_bytes(self) -> bytes:
        """Canonical JSON bytes of :meth:`state` (sorted keys): byte-identical for equal states."""
        from gym_envfactory.environment.manifest import canonical_json

        return canonical_json(self.state())

    def state_model(self, env: str | None = None) -> Any:
        """A local Pydantic copy of environment ``env``'s state (default: the first); unlike
        :meth:`Session.state_model`, mutating it does not change the session."""
        name = env or next(iter(self.envs))
        st = self.state()
        return self.envs[name].state_model.model_validate(st if len(self.envs) == 1 else st[name])

    @property
    def action_log(self) -> list[ActionRecord]:
        """The calls since the last reset, fetched from the server."""
        return [ActionRecord(r["index"], r["name"], r["raw_arguments"], _tool_result(r["result"]), r.get("tag"))
                for r in self.client.request("action_log", session_id=self.session_id)]

    def snapshot(self) -> bytes:
        """States and action log as portable JSON bytes (the same format as :meth:`Session.snapshot`)."""
        return self.client.request("snapshot", session_id=self.session_id).encode()

    def restore(self, data: bytes) -> None:
        """Replace states and log with a :meth:`snapshot`; the server's :class:`SnapshotError` arrives as a
        :class:`RemoteError` and leaves the session unchanged."""
        self._ahead.clear()
        self._changed()
        self.client.request("restore", session_id=self.session_id, snapshot=data.decode())

    def reset(self, initial_state: Any = None) -> None:
        """Back to the state the session was created with, with an empty action log.

        Raises:
            NotImplementedError: ``initial_state`` given (create a new session instead).
        """
        if initial_state is not None:
            raise NotImplementedError("a remote reset returns to the session's creation state; create a new session instead")
        self._ahead.clear()
        self._changed()
        self.client.request("reset", session_id=self.session_id)

    def fork(self) -> RemoteSession:
        """An independent copy on the same server (state and action log)."""
        return self.fork_many(1)[0]

    def fork_many(self, k: int) -> list[RemoteSession]:
        """``k`` independent copies on the same server in one request (a GRPO group); copies made with the
        session (:meth:`create`'s ``copies``) while it is unchanged are handed out first, with no request."""
        if 0 < k <= len(self._copies):
            ids, self._copies = self._copies[:k], self._copies[k:]
        else:
            self._changed()
            ids = self.client.request("fork", session_id=self.session_id, k=k)
        return [RemoteSession(self.client, i, list(self.envs.values())) for i in ids]

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Close the session on the server (idempotent; a server that is gone is ignored).  Sent as a
        notification: nothing waits for the server's answer (a later request on the same connection sees
        the session closed)."""
        if not self._closed:
            self._changed()
            self._closed = True
            self._ahead.clear()
            notify = getattr(self.client, "notify", None)
            try:
                if notify is not None:
                    notify("close", session_id=self.session_id)
                else:
                    self.client.request("close", session_id=self.session_id)
            except EnvFactoryError:
                pass  # the server is gone: nothing left to close


def envs_by_name(names: Sequence[str]) -> list[EnvironmentSpec]:
    """The local :class:`EnvironmentSpec` of each name, in order.

    Raises:
        UnknownEnvironmentError: a name not in the catalog or registry.
    """
    return [get_environment(n) for n in names]


class RemoteBackend(Backend):
    """Sessions on a server at ``url`` over the fast session protocol."""

    name = "url"

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 60.0) -> None:
        self.url = url
        self.client = SessionClient(url, token=token, timeout=timeout)

    makes_copies = True

    def create_session(self, envs: Sequence[EnvironmentSpec], initial: dict[str, bytes], task_id: str | None,
                       *, copies: int = 0) -> RemoteSession:
        """A :class:`RemoteSession` over ``envs``: the server resolves ``task_id``'s initial state itself
        when given (``initial`` then stays local), else ``initial`` (JSON bytes per environment) is sent.
        ``copies``: see :meth:`RemoteSession.create` (:attr:`Backend.makes_copies`)."""
        if task_id is not None:
            return RemoteSession.create(self.client, envs, task_id=task_id, copies=copies)
        states = {n: json.loads(b) for n, b in initial.items()}
        return RemoteSession.create(self.client, envs, initial_state=states if len(states) > 1 else next(iter(states.values())),
                                    copies=copies)

    def restore_session(self, envs: Sequence[EnvironmentSpec], snapshot: bytes) -> RemoteSession:
        """A new :class:`RemoteSession` on the server holding ``snapshot`` (bytes of :meth:`Session.snapshot`)."""
        names = [e.name for e in envs]
        res = self.client.request("create", env=names if len(names) > 1 else names[0], snapshot=snapshot.decode())
        return RemoteSession(self.client, res["session_id"], envs)

    def close(self) -> None:
        self.client.close()
