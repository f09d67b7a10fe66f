"""The fast session protocol (docs/architecture.md, "Backends"): JSON-RPC 2.0 over one WebSocket, many sessions per connection.

Every request names its ``session_id``; a frame may carry one request or a JSON-RPC batch (an array),
so a GRPO group's k calls travel in one frame and come back in one frame (JSON-RPC 2.0 spec §6).
Methods (params → result):

- ``create`` {env: str | [str], task_id?, initial_state?, snapshot?, shared?, copies?} → {session_id, envs, tools,
  copies?}: with ``copies`` = k (1..1024), also k forks of the new session, made at once (``copies``: their
  ids; a refusal of them refuses the create and leaves nothing), so a GRPO group costs one round trip
- ``call`` {session_id, name, arguments, call_id?, tag?} → ToolResult dict (typed errors inside)
- ``record_invalid`` {session_id, name, raw, message, call_id?, tag?, error_type?} → ToolResult dict
- ``state`` / ``snapshot`` / ``action_log`` / ``info`` {session_id} → state dict / snapshot str / list / dict
- ``digest`` {session_id, excluded?: [pattern], set_fields?: [pattern]} → {algorithm, digest}: SHA-256 of the
  canonical state with the reward's excluded paths removed (:mod:`gym_envfactory.digest`), so a turn end whose
  state equals the reference's moves no state (docs/reward.md, "Scoring on the server")
- ``restore`` {session_id, snapshot}, ``reset`` {session_id}, ``close`` {session_id} → null/bool
- ``fork`` {session_id, k} → [session_id, ...]
- ``share`` {session_id, shared?: true} → bool (owner only: let every client use the session)
- ``stats`` {}, ``catalog`` {}, ``ping`` {} → dicts

Sessions belong to the client that created them (:class:`Caller`, the ``X-Envfactory-Client`` header);
another client's request on one gets :data:`ERR_OWNERSHIP` unless it is shared.

Errors (codes in :mod:`gym_envfactory.protocol`, re-exported here as ``ERR_*``) use JSON-RPC codes: -32700 parse error, -32600 invalid request, -32601 unknown method,
-32602 invalid params, and application codes: -32001 unknown session, -32002 capacity (``data``:
``{"scope": "server" | "client", "limit": n}``), -32003 bad request, -32004 unauthorized, -32005 the
session belongs to another client, -32006 over the memory budget (``data``: ``{"scope": "memory",
"limit": budget, "estimate", "used", "headroom"}`` in bytes; a frame whose reads would not fit gets it
for every request, and none of them runs; a frame whose answers outgrow the budget while it runs gets
it for the requests not yet run, checked each :data:`RESPONSE_CHECK_BYTES` of answers; a ``call`` or
``record_invalid`` past its session's action-log cap or the budget gets it alone and does not run, where
``limit`` is the log's cap and ``used`` the log's bytes for the former:
:meth:`~gym_envfactory.server.manager.SessionManager.admit_call`).

Dispatch never holds the event loop: :func:`dispatch_frame_async` parses, runs and encodes a frame on
the manager's worker thread (:mod:`.worker`) in slices of at most :data:`SLICE_REQUESTS` requests or
:data:`SLICE_SECONDS` of work; frames of other clients waiting meanwhile run between two slices.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from gym_envfactory.errors import (
    BadRequestError,
    CapacityError,
    MemoryBudgetError,
    SessionOwnershipError,
    UnknownSessionError,
)
from gym_envfactory.protocol import (  # the codes live in the protocol module; re-exported here
    ERR_BAD_REQUEST,
    ERR_CAPACITY,
    ERR_INTERNAL,
    ERR_INVALID_REQUEST,
    ERR_MEMORY,
    ERR_METHOD,
    ERR_OWNERSHIP,
    ERR_PARAMS,
    ERR_PARSE,
    ERR_UNAUTHORIZED,
    ERR_UNKNOWN_SESSION,
)
from gym_envfactory.server.manager import SessionManager
from gym_envfactory.session import INVALID_CALL_ERRORS, MAX_LOGGED_RAW

#: Most requests one frame (a JSON-RPC batch) may carry, and most bytes one response frame may hold.
MAX_BATCH = 4096
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
#: One slice of a frame's dispatch: at most this many requests, or this much time (checked after each request).
SLICE_REQUESTS = 256
SLICE_SECONDS = 0.005
#: Bytes of answers a frame builds between two checks of the memory budget (:meth:`SessionManager.admit_response`).
RESPONSE_CHECK_BYTES = 1024 * 1024
#: A batch's answers larger than this go out as several frames to a client that asked for it
#: (:data:`~gym_envfactory.protocol.SPLIT_HEADER`), each a JSON array of at most about this many bytes.
SPLIT_BYTES = 1024 * 1024

__all__ = ["dispatch_frame", "dispatch_frame_async", "FrameJob", "Caller", "METHODS", "ERR_UNKNOWN_SESSION",
           "ERR_CAPACITY", "ERR_BAD_REQUEST", "ERR_UNAUTHORIZED", "ERR_OWNERSHIP", "ERR_MEMORY", "SLICE_REQUESTS",
           "SLICE_SECONDS", "RESPONSE_CHECK_BYTES"]

log = logging.getLogger(__name__)

_LOGGED = frozenset({"call", "record_invalid"})  # methods that add a record to the session's action log


@dataclass
class Caller:
    """Who sends a frame: ``client`` owns what it creates (``None``: no ownership checks, for in-process
    callers); ``created`` collects the sessions a connection creates, to close them when it drops
    (``None``: not tracked)."""

    client: str | None = None
    created: set[str] | None = None


def _create(m: SessionManager, p: dict[str, Any], c: Caller) -> Any:
    copies = p.get("copies", 0)
    if not isinstance(copies, int) or isinstance(copies, bool) or not 0 <= copies <= 1024:
        raise BadRequestError(f"copies must be an integer in 0..1024, got {copies!r}")
    ms = m.create(p["env"], task_id=p.get("task_id"), initial_state=p.get("initial_state"), snapshot=p.get("snapshot"),
                  client=c.client, shared=p.get("shared", False))
    out = {"session_id": ms.session_id, "envs": ms.envs, "versions": {n: m.specs[n].version for n in ms.envs},
           "tools": [t.name for t in ms.session.tools.values()]}
    ids = [ms.session_id]
    if copies:  # a GRPO group's members made with it: one round trip instead of create, then fork
        try:
            out["copies"] = [f.session_id for f in m.fork(ms.session_id, copies, client=c.client)]
        except Exception:
            m.close(ms.session_id)  # all or nothing: the refusal of the copies refuses the create
            raise
        ids += out["copies"]
    if c.created is not None:
        c.created.update(ids)
    return out


def _fork(m: SessionManager, p: dict[str, Any], c: Caller) -> Any:
    ids = [ms.session_id for ms in m.fork(p["session_id"], p.get("k", 1), client=c.client)]
    if c.created is not None:
        c.created.update(ids)
    return ids


def _close(m: SessionManager, p: dict[str, Any], c: Caller) -> Any:
    closed = m.close(p["session_id"], client=c.client)
    if c.created is not None:
        c.created.discard(p["session_id"])
    return closed


METHODS: dict[str, Callable[[SessionManager, dict[str, Any], Caller], Any]] = {
    "create": _create,
    "call": lambda m, p, c: m.call(p["session_id"], p["name"], p.get("arguments"), call_id=p.get("call_id"),
                                   tag=p.get("tag"), client=c.client),
    "record_invalid": lambda m, p, c: m.record_invalid(p["session_id"], p["name"], p.get("raw"), p["message"],
                                                       call_id=p.get("call_id"), tag=p.get("tag"), client=c.client,
                                                       not_recorded=p.get("not_recorded", 0),
                                                       error_type=p.get("error_type", "parse_error")),
    "state": lambda m, p, c: RawJSON(m.state_json(p["session_id"], client=c.client).decode()),
    "digest": lambda m, p, c: m.digest(p["session_id"], excluded=p.get("excluded", ()), set_fields=p.get("set_fields", ()),
                                       client=c.client),
    "snapshot": lambda m, p, c: m.snapshot(p["session_id"], client=c.client),
    "restore": lambda m, p, c: m.restore(p["session_id"], p["snapshot"], client=c.client),
    "reset": lambda m, p, c: m.reset(p["session_id"], client=c.client),
    "fork": _fork,
    "close": _close,
    "share": lambda m, p, c: m.share(p["session_id"], p.get("shared", True), client=c.client),
    "info": lambda m, p, c: m.info(p["session_id"], client=c.client),
    "action_log": lambda m, p, c: m.action_log(p["session_id"], client=c.client),
    "score": lambda m, p, c: Deferred(m.score_job(p["session_id"], reward=p.get("reward"), texts=p.get("texts"),
                                                  client=c.client)),
    "stats": lambda m, p, c: m.stats(client=c.client),
    "catalog": lambda m, p, c: m.catalog(),
    "ping": lambda m, p, c: {"ok": True},
}


def _error(id_: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": err}


def _memory_error(id_: Any, exc: MemoryBudgetError) -> dict[str, Any]:
    return _error(id_, ERR_MEMORY, str(exc), {"scope": exc.scope, "limit": exc.limit, "estimate": exc.estimate,
                                             "used": exc.used, "headroom": exc.headroom})


Observe = Callable[[str, bool], None]


def _one(m: SessionManager, req: Any, observe: Observe | None, caller: Caller) -> dict[str, Any] | None:
    if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" or not isinstance(req.get("method"), str):
        id_ = req.get("id") if isinstance(req, dict) else None
        return _error(id_ if _valid_id(id_) else None, ERR_INVALID_REQUEST,
                      "a request is an object with jsonrpc='2.0', method and optional params/id")
    notification = "id" not in req  # JSON-RPC 2.0 §4.1: never answered, not even with an error
    id_ = req.get("id")
    if not notification and not _valid_id(id_):
        return _error(None, ERR_INVALID_REQUEST, "id must be a string, an integer or null")
    out = _call(m, req, id_, observe, caller)
    return None if notification else out


def _valid_id(id_: Any) -> bool:
    return id_ is None or isinstance(id_, str) or (isinstance(id_, int) and not isinstance(id_, bool))


def _call(m: SessionManager, req: dict[str, Any], id_: Any, observe: Observe | None, caller: Caller) -> dict[str, Any]:
    method = req["method"]
    fn = METHODS.get(method)
    if fn is None:
        return _error(id_, ERR_METHOD, f"unknown method {method!r}; methods: {', '.join(METHODS)}")
    params = req.get("params") or {}
    if not isinstance(params, dict):
        return _error(id_, ERR_PARAMS, "params must be an object")
    ok = False
    try:
        result = fn(m, params, caller)
        ok = True
    except Exception as exc:  # noqa: BLE001 - typed errors answered; a server bug must not kill the connection
        return _error_for(id_, method, exc)
    finally:
        if observe is not None:
            observe(method, ok)
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def _error_for(id_: Any, method: str, exc: Exception) -> dict[str, Any]:
    """The JSON-RPC error answering ``exc``, raised by ``method`` (module docstring, "Errors")."""
    if isinstance(exc, UnknownSessionError):
        return _error(id_, ERR_UNKNOWN_SESSION, str(exc))
    if isinstance(exc, KeyError):
        return _error(id_, ERR_PARAMS, f"missing parameter {exc.args[0]!r} for {method}")
    if isinstance(exc, SessionOwnershipError):
        return _error(id_, ERR_OWNERSHIP, str(exc))
    if isinstance(exc, MemoryBudgetError):
        return _memory_error(id_, exc)
    if isinstance(exc, CapacityError):
        return _error(id_, ERR_CAPACITY, str(exc), {"scope": exc.scope, "limit": exc.limit})
    if isinstance(exc, (BadRequestError, TypeError, ValueError)):
        return _error(id_, ERR_BAD_REQUEST, str(exc))
    log.error("method %s failed", method, exc_info=exc)
    return _error(id_, ERR_INTERNAL, f"internal error: {type(exc).__name__}: {exc}")


class Deferred:
    """A result still to compute: ``job()`` needs no lock and touches no session
    (:meth:`SessionManager.score_job`).  A frame run by the server hands it to the manager's scoring
    thread and goes on with its other requests (:class:`FrameJob`); run here and now otherwise."""

    __slots__ = ("job",)

    def __init__(self, job: Callable[[], Any]) -> None:
        self.job = job


def _logged_share(r: dict[str, Any], per_request: int) -> int:
    """Bytes of a ``call``/``record_invalid`` request the action log keeps: the request's share of its
    frame, or at most twice :data:`~gym_envfactory.session.MAX_LOGGED_RAW` for an invalid call (its log
    keeps a bounded rendering of the arguments)."""
    res = r.get("result")
    if isinstance(res, dict) and res.get("error_type") in INVALID_CALL_ERRORS:
        return min(per_request, 2 * MAX_LOGGED_RAW + 1024)
    return per_request


class RawJSON(str):
    """A result that is JSON text already (a session's state as it serialised it): spliced into the
    answer as it is, never parsed and encoded again (issue 24, part 4: a ``state`` answer is serialised once)."""


def _encode(obj: Any) -> str:
    # ASCII escapes: a lone surrogate a client sent (in an id, a tag) can never break the response
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, default=str)


class FrameJob:
    """One frame's dispatch, resumable: each :meth:`step` parses (the first time), runs and encodes
    requests until a slice is spent, and returns ``True`` once the response (:attr:`text`) is ready.
    Never raises: malformed, too deeply nested or oversized input gets a JSON-RPC error."""

    def __init__(self, manager: SessionManager, frame: str | bytes, observe: Observe | None = None,
                 caller: Caller | None = None, split: bool = False,
                 submit: Callable[[Callable[[], Any]], Future[Any]] | None = None) -> None:
        self.manager = manager
        #: Where a :class:`Deferred` result's job runs (``None``: here, in the slice that reached it).
        self.submit = submit
        #: ``(part index, id, future)`` of the answers still computing elsewhere; once every request
        #: has run, :meth:`step` returns ``True`` with :attr:`done` still ``False`` and :meth:`complete`
        #: (after the futures are done) builds the response.
        self.pending: list[tuple[int, Any, Future[Any]]] = []
        self.frame: str | bytes | None = frame
        self.observe = observe
        self.caller = caller or Caller()
        #: The response frame (``None``: nothing to answer, e.g. only notifications), once done.
        self.text: str | None = None
        #: With ``split``: a large batch's answers as several JSON arrays, in order (``text`` is ``None``).
        self.frames: list[list[str]] | None = None
        self.split = split
        self.done = False
        self._requests: list[Any] = []
        self._batch = False
        self._pos = 0
        self._parts: list[str] = []
        self._ids: list[Any] = []  # the id each part answers (to refuse an oversized answer by its own id)
        self._per_request = 0  # each request's share of the frame's bytes (what a call adds to its log)
        self._size = 0
        self._next_check = RESPONSE_CHECK_BYTES

    def _finish(self, text: str | None) -> bool:
        self.text, self.done, self._requests, self._parts, self._ids = text, True, [], [], []
        return True

    def _add(self, rid: Any, part: str) -> None:
        self._parts.append(part)
        self._ids.append(rid)
        self._size += len(part) + 1

    def _shrink_to_cap(self) -> None:
        """The answers outgrew :data:`MAX_RESPONSE_BYTES`: replace the largest ones, each by an error
        carrying its own request's id, until the frame fits, so the other answers (a write that ran,
        another session's call) still reach their callers."""
        for i in sorted(range(len(self._parts)), key=lambda k: -len(self._parts[k])):
            if self._size <= MAX_RESPONSE_BYTES:
                break
            big = len(self._parts[i])
            part = _encode(_error(self._ids[i], ERR_INVALID_REQUEST,
                                  f"this answer of {big} bytes takes the frame's response over {MAX_RESPONSE_BYTES} "
                                  f"bytes; ask for it in a frame of its own, or for less"))
            self._size += len(part) - big
            self._parts[i] = part

    def _start(self) -> bool:
        frame, self.frame = self.frame, None
        size = len(frame) if frame is not None else 0
        try:
            self.manager.admit_parse(frame or b"")  # what parsing may take, before parsing
        except MemoryBudgetError as exc:
            return self._finish(_encode(_memory_error(None, exc)))
        try:
            msg = json.loads(frame)  # type: ignore[arg-type]
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, nesting too deep
            return self._finish(_encode(_error(None, ERR_PARSE,
                                               f"frame is not usable JSON: {type(exc).__name__}: {str(exc)[:200]}")))
        if isinstance(msg, list):
            if not msg:
                return self._finish(_encode(_error(None, ERR_INVALID_REQUEST, "empty batch")))
            if len(msg) > MAX_BATCH:
                return self._finish(_encode(_error(None, ERR_INVALID_REQUEST,
                                                   f"batch of {len(msg)} requests; at most {MAX_BATCH} per frame")))
            self._requests, self._batch = msg, True
        else:
            self._requests = [msg]
        self._per_request = size // len(self._requests)
        try:
            self.manager.admit_frame(self._requests)  # reads' response size, before building any
        except MemoryBudgetError as exc:
            parts = [_encode(_memory_error(r["id"] if _valid_id(r.get("id")) else None, exc))
                     for r in self._requests if isinstance(r, dict) and "id" in r]
            if not parts:
                return self._finish(None)
            return self._finish("[" + ",".join(parts) + "]" if self._batch else parts[0])
        return False

    def _refuse_rest(self, exc: MemoryBudgetError) -> None:
        """Answer every request not yet run with ``exc`` (the answers so far outgrew the budget)."""
        for r in self._requests[self._pos:]:
            if isinstance(r, dict) and "id" in r:
                rid = r["id"] if _valid_id(r.get("id")) else None
                self._add(rid, _encode(_memory_error(rid, exc)))
        self._pos = len(self._requests)

    def _encoded(self, r: dict[str, Any]) -> str:
        raw = r.get("result")
        if type(raw) is RawJSON:
            return '{"jsonrpc":"2.0","id":' + _encode(r.get("id")) + ',"result":' + raw + "}"
        try:
            return _encode(r)
        except (RecursionError, ValueError) as exc:  # a result that cannot be encoded (nesting, NaN)
            return _encode(_error(r.get("id"), ERR_INTERNAL, f"response could not be encoded: {type(exc).__name__}"))

    def step(self, max_requests: int | None = None, max_seconds: float | None = None) -> bool:
        """Run one slice (default :data:`SLICE_REQUESTS` requests or :data:`SLICE_SECONDS`); ``True`` when done."""
        if self.done:
            return True
        t0 = time.perf_counter()
        if self.frame is not None and self._start():
            return True
        n = max_requests if max_requests is not None else SLICE_REQUESTS
        budget = max_seconds if max_seconds is not None else SLICE_SECONDS
        m, lock, stop = self.manager, self.manager.lock, min(len(self._requests), self._pos + n)
        while self._pos < stop:
            req = self._requests[self._pos]
            self._requests[self._pos] = None  # let each request's arguments go once answered
            self._pos += 1
            with lock:  # the call and the encoding of its result (a live state) see no other thread
                logged = isinstance(req, dict) and req.get("method") in _LOGGED and isinstance(req.get("params"), dict)
                if logged:  # a call is admitted like any other request: its log's cap, the memory budget
                    try:
                        m.admit_call(req["params"].get("session_id"), self._per_request)
                    except MemoryBudgetError as exc:
                        if "id" in req:
                            rid = req["id"] if _valid_id(req.get("id")) else None
                            self._add(rid, _encode(_memory_error(rid, exc)))
                        continue
                r = _one(m, req, self.observe, self.caller)
                if r is None and logged:  # a notification's call is logged too: count it at its full share
                    m.note_log_growth(req["params"].get("session_id"), self._per_request)
                if r is not None and type(r.get("result")) is Deferred:
                    if self.submit is not None:  # computed elsewhere; its place in the answer kept
                        self.pending.append((len(self._parts), r.get("id"), self.submit(r["result"].job)))
                        self._add(r.get("id"), "")
                        continue
                    try:
                        r["result"] = r["result"].job()
                    except Exception as exc:  # noqa: BLE001 - answered as its method's error
                        r = _error_for(r.get("id"), str(req.get("method")), exc)
                if r is not None:
                    part = self._encoded(r)
                    self._add(r.get("id"), part)
                    if logged:
                        m.note_log_growth(req["params"].get("session_id"), _logged_share(r, self._per_request) + len(part))
                    if self._size >= self._next_check:  # room to join and send what the answers hold?
                        self._next_check = self._size + RESPONSE_CHECK_BYTES
                        try:
                            m.admit_response(self._size)
                        except MemoryBudgetError as exc:
                            self._refuse_rest(exc)
                            break
            if time.perf_counter() - t0 >= budget:
                break
        if self._pos < len(self._requests):
            return False
        if self.pending:  # every request ran; answers computing elsewhere: :meth:`complete` finishes
            return True
        return self._wrap_up()

    def complete(self) -> bool:
        """Put the answers computed elsewhere (:attr:`pending`, every future done) in their places and
        build the response (run on the worker thread, after :meth:`step` returned ``True``)."""
        for index, rid, fut in self.pending:
            try:
                r: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "result": fut.result()}
            except Exception as exc:  # noqa: BLE001 - answered as a score's error
                r = _error_for(rid, "score", exc)
            part = self._encoded(r)
            self._parts[index] = part
            self._size += len(part)
        self.pending = []
        return self._wrap_up()

    def _wrap_up(self) -> bool:
        if self._size > MAX_RESPONSE_BYTES:
            self._shrink_to_cap()
        if not self._parts:
            return self._finish(None)
        if self.split and self._batch and self._size > SPLIT_BYTES:
            # no one large string built here: the sender joins and sends one group at a time
            groups: list[list[str]] = [[]]
            size = 0
            for part in self._parts:
                if groups[-1] and size + len(part) > SPLIT_BYTES:
                    groups.append([])
                    size = 0
                groups[-1].append(part)
                size += len(part) + 1
            self.frames = groups
            return self._finish(None)
        return self._finish("[" + ",".join(self._parts) + "]" if self._batch else self._parts[0])


def dispatch_frame(manager: SessionManager, frame: str | bytes, observe: Observe | None = None,
                   caller: Caller | None = None) -> str | None:
    """Handle one WebSocket text frame (a request or a batch) here and now; returns the response frame
    or ``None``.  Never raises.  The server uses :func:`dispatch_frame_async`."""
    job = FrameJob(manager, frame, observe, caller)
    while not job.step(MAX_BATCH, float("inf")):
        pass
    return job.text


async def dispatch_frame_split(manager: SessionManager, frame: str | bytes, observe: Observe | None = None,
                               caller: Caller | None = None) -> FrameJob:
    """:func:`dispatch_frame_async` for a client that takes a batch's answers in several frames: the
    finished job, whose ``frames`` (groups of encoded answers, each sent as one JSON array) are set when
    the answers pass :data:`SPLIT_BYTES`, else whose ``text`` is the one response frame."""
    job = FrameJob(manager, frame, observe, caller, split=True, submit=manager.scorer.submit)
    await _run(manager, job)
    return job


async def dispatch_frame_async(manager: SessionManager, frame: str | bytes, observe: Observe | None = None,
                               caller: Caller | None = None) -> str | None:
    """:func:`dispatch_frame` on the manager's worker thread, slice by slice: the event loop stays free,
    and frames of other connections queued meanwhile run between two slices of this one."""
    job = FrameJob(manager, frame, observe, caller, submit=manager.scorer.submit)
    await _run(manager, job)
    return job.text


async def _run(manager: SessionManager, job: FrameJob) -> None:
    """Run ``job`` on the worker thread; answers computing on the scoring thread meanwhile (a ``score``)
    are awaited off the worker, then put in place on it."""
    await manager.worker.run_steps(job.step)
    if job.pending:
        await asyncio.wait([asyncio.wrap_future(fut) for _, _, fut in job.pending])
        await manager.worker.run(job.complete)
