"""Chat-message observations through ``gymnasium.vector.AsyncVectorEnv``'s shared-memory hooks.

``AsyncVectorEnv`` defaults to ``shared_memory=True``: each worker writes its observation with
``gymnasium.vector.utils.write_to_shared_memory`` and the parent returns the view that
``read_from_shared_memory`` built once.  Those are ``functools.singledispatch`` functions that a custom
space registers itself with (gymnasium's ``CustomSpaceError`` asks for exactly that).  A list of chat
messages has no fixed size, so no fixed buffer holds it; this module registers :class:`MessagesSpace`
with a channel that grows instead:

- ``create_shared_memory`` makes, per environment, a ``multiprocessing.Queue`` and one shared ``int64``
  write counter (``ctx.Array``, written synchronously);
- ``write_to_shared_memory`` (in the worker) bumps the environment's counter, then puts
  ``(count, messages)`` on its queue.  The counter is raised before the worker answers the parent, so
  when ``reset``/``step`` return the parent knows how many observations are due;
- ``read_from_shared_memory`` (in the parent) returns a :class:`MessagesBatchView`: a sequence of
  ``num_envs`` message lists that, when read, first takes every due observation off the queues.

So ``gym.make_vec(id, num_envs=n, vectorization_mode="async")`` works with no ``vector_kwargs``.  With
the default ``copy=True`` the vector env deep-copies the view as it returns: the caller gets a plain
tuple of message lists, as with ``shared_memory=False``.  With ``copy=False`` the caller gets the live
view, overwritten by the next ``reset``/``step`` (gymnasium's shared-memory semantics).
Source: gymnasium 1.x ``gymnasium/vector/utils/shared_memory.py`` and ``async_vector_env.py``.
"""

from __future__ import annotations

import copy
import multiprocessing as mp
import queue as queue_mod
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from gym_envfactory.envs.spaces import MessagesSpace

__all__ = ["MessagesSharedMemory", "MessagesBatchView"]

#: How long the parent waits for an observation a worker has announced (its counter is ahead): a hang
#: guard for a worker that died between announcing and sending, not a speed expectation.
_DUE_TIMEOUT_S = 300.0


class MessagesSharedMemory:
    """The per-environment channels of one vector env (picklable into its worker processes).

    Attributes:
        queues: ``n`` ``multiprocessing.Queue``; each carries ``(count, messages)`` from one worker.
        counts: a shared ``int64`` array of ``n`` write counters (how many observations each worker sent).
    """

    def __init__(self, n: int, ctx: Any) -> None:
        self.queues = [ctx.Queue() for _ in range(n)]
        self.counts = ctx.Array("q", n)

    def __len__(self) -> int:
        return len(self.queues)

    def __bool__(self) -> bool:  # the worker tests ``if shared_memory:``
        return True


class MessagesBatchView(Sequence[list[dict[str, Any]]]):
    """The parent's view of ``n`` environments' latest observations (message lists, ``[]`` before the
    first reset).  Reading it (``len``, indexing, iterating, ``copy.deepcopy``) first takes the due
    observations off the queues.

    Raises:
        RuntimeError: a worker announced an observation that did not arrive within 300 s (it died).
    """

    def __init__(self, memory: MessagesSharedMemory) -> None:
        self._memory = memory
        self._seen = [0] * len(memory)
        self._latest: list[list[dict[str, Any]]] = [[] for _ in range(len(memory))]

    def _sync(self) -> None:
        counts = self._memory.counts
        for i, q in enumerate(self._memory.queues):
            due = int(counts[i])
            while self._seen[i] < due:
                try:
                    count, messages = q.get(timeout=_DUE_TIMEOUT_S)
                except queue_mod.Empty:
                    raise RuntimeError(f"vector env {i}: observation {due} was announced but never arrived "
                                       "(its worker process died?)") from None
                self._seen[i] = count
                self._latest[i] = messages

    def __len__(self) -> int:
        return len(self._latest)

    def __getitem__(self, index: Any) -> Any:
        self._sync()
        return self._latest[index]

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        self._sync()
        return iter(list(self._latest))

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[list[dict[str, Any]], ...]:
        self._sync()
        return tuple(copy.deepcopy(self._latest, memo))

    def __repr__(self) -> str:
        return f"MessagesBatchView({list(self)!r})"


@create_shared_memory.register(MessagesSpace)
def _create(space: MessagesSpace, n: int = 1, ctx: ModuleType = mp) -> MessagesSharedMemory:
    return MessagesSharedMemory(n, ctx)


@read_from_shared_memory.register(MessagesSpace)
def _read(space: MessagesSpace, shared_memory: MessagesSharedMemory, n: int = 1) -> MessagesBatchView:
    return MessagesBatchView(shared_memory)


@write_to_shared_memory.register(MessagesSpace)
def _write(space: MessagesSpace, index: int, value: Any, shared_memory: MessagesSharedMemory) -> None:
    q = shared_memory.queues[index]
    q.cancel_join_thread()  # a worker that exits with unread observations (closing) must not hang on them
    with shared_memory.counts.get_lock():
        shared_memory.counts[index] += 1
        count = shared_memory.counts[index]
    q.put((count, list(value)))
