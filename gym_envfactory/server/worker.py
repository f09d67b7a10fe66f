"""The session worker: one thread that runs every session operation off the event loop, in order.

The server's event loop only moves bytes (HTTP, WebSocket, MCP framing); tool calls, ``score``,
``state``, ``snapshot``, ``fork`` and the JSON of frames run here, one job at a time, first come first
served.  A frame's requests run in slices (:mod:`.fastproto`, :meth:`Worker.run_steps`): after each
slice, when another job is waiting, the frame goes to the back of the queue, so a 4,096-call frame makes
nobody wait longer than one slice, and costs nothing extra when nobody waits (no round trip through the
event loop between slices).  ``/healthz`` never waits for the worker at all: the loop thread gets the
GIL within the interpreter's switch interval (~5 ms) whenever it has something to do.

One thread, not a pool: the GIL would not run two CPU-bound jobs at once anyway, and a FIFO of one
keeps every session's operations in the order their frames arrived.  The one exception is a ``score``,
whose comparison can run long in one piece: the worker reads what it needs and the manager's scorer
thread computes it (``SessionManager.score_job``; :mod:`.fastproto`), while this thread goes on.

Memory: closing sessions frees every object they held (the server's tables keep nothing per session:
``tests/server/test_memory.py``), but the allocators keep freed memory for reuse, so RSS after closing
every session stayed near its peak and wandered round to round.  While the worker has no job it checks,
every :data:`TRIM_INTERVAL_S`, how much free memory glibc's malloc holds (:func:`heap_free_bytes`) and,
when more than :data:`TRIM_FREE_BYTES` was freed since the last check that released memory, gives it back
to the system (:func:`release_free_heap`, ``malloc_trim``; outside the GIL).  Elsewhere than glibc both
are no-ops.  What stays is CPython's own small-object arenas (returned only once entirely empty): with
``PYTHONMALLOC=malloc`` in the server's environment those go through malloc too and RSS after close stays
flat round after round (``bench/bench_server.py --memory-only``), at a few percent of call speed.

Garbage collection (:func:`configure_gc`, called by ``serve`` once the catalog is loaded): a collector
pass holds the GIL, so a pass over many objects pauses the event loop too.  Live sessions are hundreds of
thousands of long-lived, acyclic objects (freed by reference counting on close); the young generation's
former threshold of 200,000 made each young pass walk up to that many survivors (a 270-330 ms pause on a
loaded 2-core machine, measured with ``gc.callbacks``), and a full pass walks every live session.  Now
young passes stay small (:data:`GC_THRESHOLDS`: at most ~5,000 new objects, a middle pass every second
young pass), the catalog is frozen out of the collector's sight, and full passes are never automatic:
the worker runs one when it is out of jobs and either the server holds no session (:attr:`Worker.quiet`)
or :data:`FULL_PASS_AFTER` middle passes have promoted objects since the last one, so cyclic garbage is
still reclaimed.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Worker", "heap_free_bytes", "release_free_heap", "configure_gc", "TRIM_FREE_BYTES", "TRIM_INTERVAL_S",
           "GC_THRESHOLDS", "FULL_PASS_AFTER"]

T = TypeVar("T")

#: Free heap bytes held by malloc above which an idle worker gives them back (:func:`release_free_heap`).
TRIM_FREE_BYTES = 16 * 1024 * 1024
#: Least seconds between two checks of the free heap by an idle worker.
TRIM_INTERVAL_S = 1.0


#: ``gc.set_threshold`` of a server process: young passes after 5,000 net new objects, a middle pass every
#: 2 young passes, and no automatic full pass (the worker runs them, see :meth:`Worker._idle`).
GC_THRESHOLDS = (5_000, 2, 1_000_000_000)
#: Middle passes since the last full pass after which an idle worker runs one even with sessions live.
FULL_PASS_AFTER = 2_000


def configure_gc() -> None:
    """Collect once, freeze what survives (the loaded catalog: never walked again) and set
    :data:`GC_THRESHOLDS`; process-wide, for a server process (module docstring, "Garbage collection")."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):  # not glibc >= 2.33 (musl, macOS): nothing to trim
        return None
    return libc


_LIBC = _libc()


def heap_free_bytes() -> int | None:
    """Bytes glibc's malloc holds free in its heaps, every arena (``mallinfo2().fordblks``); ``None``
    where the C library has no ``mallinfo2``."""
    if _LIBC is None:
        return None
    return int(_LIBC.mallinfo2().fordblks)


def release_free_heap() -> bool:
    """Give malloc's free heap memory back to the system (``malloc_trim(0)``, every arena); ``True`` when
    some was released.  Runs without the GIL (a ctypes call)."""
    return bool(_LIBC is not None and _LIBC.malloc_trim(0))


def _settle(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.done():  # the waiter was cancelled (server shutdown)
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


class Worker:
    """A daemon thread running jobs FIFO for asyncio callers (started on first use, :meth:`stop` ends it)."""

    def __init__(self, name: str = "envfactory-sessions", *, trim_free_bytes: int | None = TRIM_FREE_BYTES,
                 trim_interval_s: float = TRIM_INTERVAL_S) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        #: Free heap bytes above which the idle worker releases them (``None``: never).
        self.trim_free_bytes = trim_free_bytes
        self.trim_interval_s = trim_interval_s
        #: How many times the idle worker released free heap memory.
        self.trims = 0
        self._checked = 0.0
        self._kept_free = 0
        #: ``True`` when a full collection would delay nobody's session (``serve``: the server holds no
        #: session); ``None``: full passes only after :data:`FULL_PASS_AFTER` middle passes.
        self.quiet: Callable[[], bool] | None = None
        #: Full collector passes the idle worker ran.
        self.full_passes = 0

    def queued(self) -> int:
        """Jobs waiting (not counting the one running)."""
        return self._queue.qsize()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the worker thread; returns its result or raises its exception."""
        return await self._submit(False, fn, args)

    async def run_steps(self, step: Callable[[], bool]) -> None:
        """Call ``step()`` on the worker thread until it returns ``True``; whenever it returns ``False``
        and other jobs are waiting, they run first (this job goes to the back of the queue)."""
        await self._submit(True, step, ())

    async def _submit(self, steps: bool, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if self._thread is None:
            self._ensure_started()
        self._queue.put((steps, fn, args, loop, fut))
        return await fut

    def _ensure_started(self) -> None:
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
                self._thread.start()

    def _idle(self) -> None:
        """Out of jobs (at most every :attr:`trim_interval_s`): run a full collector pass when one is due
        (objects were promoted since the last one, and the server is :attr:`quiet` or
        :data:`FULL_PASS_AFTER` middle passes have run), then release malloc's free heap memory when more
        than :attr:`trim_free_bytes` of it was freed since the last release."""
        now = time.monotonic()
        if now - self._checked < self.trim_interval_s:
            return
        self._checked = now
        pending = gc.get_count()[2]
        if pending and gc.isenabled() and (pending >= FULL_PASS_AFTER or (self.quiet is not None and self.quiet())):
            gc.collect()
            self.full_passes += 1
        if self.trim_free_bytes is None:
            return
        free = heap_free_bytes()
        if free is None:
            return
        self._kept_free = min(self._kept_free, free)
        if free - self._kept_free > self.trim_free_bytes:
            release_free_heap()
            self.trims += 1
            # what stays free after a trim is released already (or cannot be): count only what is freed anew
            self._kept_free = heap_free_bytes() or 0

    def _main(self) -> None:
        while True:
            if self._queue.empty():
                self._idle()
            try:  # out of jobs, wake up now and then to release what the last ones freed
                item = self._queue.get(timeout=self.trim_interval_s if self.trim_interval_s > 0 else None)
            except queue.Empty:
                continue
            if item is None:  # stop: after every job queued before or still in slices
                if self._queue.empty():
                    return
                self._queue.put(None)
                continue
            steps, fn, args, loop, fut = item
            result, error = None, None
            try:
                if steps:
                    done = fn()
                    while not done and self._queue.empty():
                        done = fn()
                    if not done:  # others wait: they go first
                        self._queue.put(item)
                        continue
                else:
                    result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                error = exc
            try:
                loop.call_soon_threadsafe(_settle, fut, result, error)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass
            del item, fn, args, result, error

    def stop(self, timeout: float | None = 10.0) -> None:
        """Let queued jobs finish, then end the thread (a later :meth:`run` starts a new one)."""
        with self._start:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            if thread is not threading.current_thread():
                thread.join(timeout)
