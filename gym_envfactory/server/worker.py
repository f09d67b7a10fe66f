"""The session worker: one thread that runs every session operation off the event loop, in order.

The server's event loop only moves bytes (HTTP, WebSocket, MCP framing); tool calls, ``score``,
``state``, ``snapshot``, ``fork`` and the JSON of frames run here, one job at a time, first come first
served.  A frame's requests run in slices (:mod:`.fastproto`, :meth:`Worker.run_steps`): after each
slice, when another job is waiting, the frame goes to the back of the queue, so a 4,096-call frame makes
nobody wait longer than one slice, and costs nothing extra when nobody waits (no round trip through the
event loop between slices).  ``/healthz`` never waits for the worker at all: the loop thread gets the
GIL within the interpreter's switch interval (~5 ms) whenever it has something to do.

One thread, not a pool: the GIL would not run two CPU-bound jobs at once anyway, and a FIFO of one
keeps every session's operations in the order their frames arrived.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Worker"]

T = TypeVar("T")


def _settle(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.done():  # the waiter was cancelled (server shutdown)
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


class Worker:
    """A daemon thread running jobs FIFO for asyncio callers (started on first use, :meth:`stop` ends it)."""

    def __init__(self, name: str = "envfactory-sessions") -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

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

    def _main(self) -> None:
        while True:
            item = self._queue.get()
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
