"""Memory-aware admission: a server refuses work that would take it past its memory budget, with a
typed :class:`~gym_envfactory.errors.MemoryBudgetError`, instead of being OOM-killed (docs/architecture.md,
"Backends", memory budget; issue 10, part 4).

The **budget** (:func:`detect_budget`) is the container's cgroup memory limit when there is one (cgroup
v2 ``memory.max``, v1 ``memory/memory.limit_in_bytes``), capped by ``--memory-budget`` /
``$ENVFACTORY_MEMORY_BUDGET`` when given; with neither, :data:`DEFAULT_FRACTION` of physical memory.
:data:`HEADROOM_FRACTION` of it (at least :data:`MIN_HEADROOM`) is kept free for what is never
estimated: the frame being parsed, the event loop, the interpreter's own growth.

**Estimates are made up front**, from sizes known before anything is built:

- a session (create, each member of a fork) reserves ``state bytes x (1 + parsed factor) +``
  :data:`SESSION_OVERHEAD`: the JSON bytes it holds plus the Pydantic models its first tool call
  parses them into.  The *parsed factor* is measured once per environment (:func:`parsed_factor`:
  ``tracemalloc`` over one parse of its default initial state, 5-8 for the catalog, plus 25%).
  Reserved for the session's life, conservative on purpose: it holds however states are shared
  between forks, and whatever a state's models build on first use.
- a restore (or a create from a snapshot) also needs the snapshot's dict for a moment
  (:data:`DICT_FACTOR` x its size).
- a frame of ``state`` / ``snapshot`` / ``info`` reads needs ``3 x`` :data:`ENCODE_FACTOR` x the sum of
  the items' sizes (the encoded parts, the joined frame, the bytes sent) plus one item's dict: the
  response size is checked *before* building N copies.

A request is admitted while ``used + estimate <= budget - headroom``, where ``used`` is the larger of
the process's resident memory (``/proc/self/statm``) and the memory the server had with no session plus
everything reserved by live sessions (a fork costs little until its first call parses the state; the
reservation counts it already).  Before refusing, memory freed by closed sessions is handed back to the
operating system (``malloc_trim``) and measured again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import re
import time
import tracemalloc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import BadRequestError, MemoryBudgetError

__all__ = ["MemoryBudget", "Admission", "detect_budget", "parse_size", "current_rss", "physical_memory",
           "cgroup_limit", "parsed_factor", "release_free_memory", "ENV_VAR", "DEFAULT_FRACTION",
           "HEADROOM_FRACTION", "MIN_HEADROOM", "ENCODE_FACTOR", "DICT_FACTOR", "SESSION_OVERHEAD", "FACTOR_MARGIN",
           "MCP_SESSION_BYTES",
           "tools_bytes"]

log = logging.getLogger(__name__)

MiB = 1024 * 1024
#: Environment variable giving the budget when ``--memory-budget`` is not (same forms as :func:`parse_size`).
ENV_VAR = "ENVFACTORY_MEMORY_BUDGET"
#: Share of physical memory the budget is when neither a cgroup limit nor an option gives one.
DEFAULT_FRACTION = 0.6
#: Share of the budget kept free (at least :data:`MIN_HEADROOM` bytes, at most half the budget).
HEADROOM_FRACTION = 0.15
MIN_HEADROOM = 48 * MiB
#: Encoded response bytes per state byte (measured: ``state`` 1.10, ``snapshot`` 1.19 on the large states).
ENCODE_FACTOR = 1.25
#: Bytes of a ``json.loads`` dict per JSON byte (measured 3.9-5.0 on the catalog's states).
DICT_FACTOR = 6.0
#: Parsed factor used when it cannot be measured (``tracemalloc`` already tracing; measured 5.1-7.8).
DEFAULT_PARSED_FACTOR = 9.0
#: Margin on a measured parsed factor: a state's models may build parts on first use (TeamCalendar's
#: large state: 0.3 MiB resident after a first lookup, 3.4 MiB once its events are listed, 7x its bytes,
#: where one parse of the small state measures 5.8x).
FACTOR_MARGIN = 1.25
#: Bytes one session costs besides its state (session, bookkeeping, log head).
SESSION_OVERHEAD = 16 * 1024
#: Bytes one MCP transport session of the SDK holds (its streamable-HTTP transport, memory streams and
#: server task; ~20 KiB measured), reserved while it lives besides its environment session's own cost.
MCP_SESSION_BYTES = 20 * 1024
#: Transient estimates below this are admitted without reading the resident size.
TRANSIENT_CHECK_MIN = 1 * MiB
#: Seconds a resident-size reading is reused for (re-read whenever a check comes near the budget).
RSS_TTL_S = 0.05

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": MiB, "g": 1024 * MiB, "t": 1024 * 1024 * MiB}
_FACTORS: dict[tuple[str, str], float] = {}
_TOOLS_BYTES: dict[tuple[str, str], int] = {}


def physical_memory() -> int:
    """Bytes of physical memory of this machine (4 GiB when the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 4096 * MiB


def parse_size(value: int | str) -> int:
    """Bytes from ``value``: an integer, ``"512M"`` / ``"512MiB"`` / ``"1.5G"`` / ``"2GB"`` (binary
    units K, M, G, T), or a percentage of physical memory (``"50%"``).

    Raises:
        BadRequestError: anything else, or a size that is not positive.
    """
    if isinstance(value, bool):
        raise BadRequestError(f"a memory budget is a size such as 512M, 2G or 50%, not {value!r}")
    if isinstance(value, int):
        n = value
    else:
        text = str(value).strip()
        if text.endswith("%"):
            try:
                pct = float(text[:-1])
            except ValueError:
                pct = -1.0
            if not 0 < pct <= 100:
                raise BadRequestError(f"a memory budget percentage is in (0, 100], not {text[:40]!r}")
            return int(physical_memory() * pct / 100)
        m = _SIZE.match(text)
        if m is None:
            raise BadRequestError(f"a memory budget is a size such as 512M, 2G or 50%, not {text[:40]!r}")
        n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n <= 0:
        raise BadRequestError(f"a memory budget must be positive, not {value!r}")
    return n


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (cgroup v2): no limit


def cgroup_limit(root: str | Path = "/sys/fs/cgroup", proc_cgroup: str | Path = "/proc/self/cgroup") -> tuple[int, str] | None:
    """``(bytes, where)`` of this process's cgroup memory limit, or ``None`` without one.

    Reads cgroup v2 ``memory.max`` of the process's own cgroup as ``/proc/self/cgroup`` names it and of
    each cgroup above it up to ``root`` (inside a container, ``root`` is the container's own cgroup),
    taking the smallest, else cgroup v1 ``memory/memory.limit_in_bytes``.  ``max`` and limits at or
    above physical memory mean none.
    """
    base = Path(root)
    candidates: list[Path] = []
    try:
        for line in Path(proc_cgroup).read_text().splitlines():
            hier, _, rest = line.partition(":")
            controllers, _, own = rest.partition(":")
            if hier == "0" and controllers == "" and own.startswith("/") and ".." not in own:
                parts = [p for p in own.split("/") if p]
                candidates += [base.joinpath(*parts[:i], "memory.max") for i in range(len(parts), 0, -1)]
    except OSError:
        pass
    candidates.append(base / "memory.max")
    phys = physical_memory()
    found = [(n, path) for path in candidates if (n := _read_int(path)) is not None and 0 < n < phys]
    if found:
        n, path = min(found)
        return n, f"cgroup v2 {path}"
    v1 = base / "memory" / "memory.limit_in_bytes"
    n = _read_int(v1)
    return (n, f"cgroup v1 {v1}") if n is not None and 0 < n < phys else None


@dataclass(frozen=True)
class MemoryBudget:
    """A server's memory budget: ``limit`` bytes (what ``source`` says), of which ``headroom`` bytes
    stay free; requests are admitted up to :attr:`allowed`."""

    limit: int
    source: str
    headroom: int

    @property
    def allowed(self) -> int:
        """Bytes the server may use for admitted work (``limit - headroom``)."""
        return self.limit - self.headroom


def detect_budget(option: int | str | None = None, *, environ: Mapping[str, str] | None = None,
                  root: str | Path = "/sys/fs/cgroup", proc_cgroup: str | Path = "/proc/self/cgroup",
                  headroom: int | None = None) -> MemoryBudget:
    """The budget of this process: the cgroup limit (:func:`cgroup_limit`), capped by ``option``
    (``--memory-budget``; else ``$ENVFACTORY_MEMORY_BUDGET``) when given; with neither,
    :data:`DEFAULT_FRACTION` of physical memory.  ``headroom`` bytes (default :data:`HEADROOM_FRACTION`
    of the limit, at least :data:`MIN_HEADROOM`, at most half the limit) are kept free.

    Raises:
        BadRequestError: ``option`` or the environment variable is not a size (:func:`parse_size`).
    """
    env = os.environ if environ is None else environ
    given: tuple[int, str] | None = None
    if option is not None:
        given = parse_size(option), "--memory-budget"
    elif env.get(ENV_VAR):
        given = parse_size(env[ENV_VAR]), f"${ENV_VAR}"
    cgroup = cgroup_limit(root, proc_cgroup)
    options = [x for x in (cgroup, given) if x is not None]
    if options:
        limit, source = min(options)
    else:
        limit, source = int(physical_memory() * DEFAULT_FRACTION), f"{int(DEFAULT_FRACTION * 100)}% of physical memory"
    if headroom is None:
        headroom = max(MIN_HEADROOM, int(limit * HEADROOM_FRACTION))
    return MemoryBudget(limit, source, min(max(0, headroom), limit // 2))


def current_rss() -> int:
    """Resident bytes of this process (``/proc/self/statm``; elsewhere the peak, ``ru_maxrss``)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)


_LIBC: Any = None


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the operating system (glibc ``malloc_trim``; elsewhere nothing)."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim  # noqa: B018 - absent on musl and macOS
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


def parsed_factor(spec: EnvironmentSpec) -> float:
    """Bytes of parsed Pydantic state per byte of its JSON for environment ``spec``: ``tracemalloc``
    over one parse of its default initial state, times :data:`FACTOR_MARGIN`, measured once per
    environment and version (:data:`DEFAULT_PARSED_FACTOR` when another caller is tracing, or the state
    does not load)."""
    key = (spec.name, spec.version)
    factor = _FACTORS.get(key)
    if factor is None:
        factor = DEFAULT_PARSED_FACTOR
        if not tracemalloc.is_tracing():
            try:
                raw = spec.initial_state_json()
                tracemalloc.start()
                try:
                    model = spec.state_model.model_validate_json(raw)
                    used = tracemalloc.get_traced_memory()[0]
                finally:
                    tracemalloc.stop()
                del model
                factor = max(2.0, FACTOR_MARGIN * used / max(1, len(raw)))
            except Exception as exc:  # noqa: BLE001 - an estimate: a package that cannot say gets the default
                log.debug("parsed factor of %s not measured: %s", spec.name, exc)
        _FACTORS[key] = factor
    return factor


def tools_bytes(spec: EnvironmentSpec) -> int:
    """Bytes of the encoded tool schemas ``info`` returns for ``spec`` (measured once per version)."""
    key = (spec.name, spec.version)
    n = _TOOLS_BYTES.get(key)
    if n is None:
        n = _TOOLS_BYTES[key] = len(json.dumps([t.openai_schema() for t in spec.tools.values()]))
    return n


def _mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB"


class Admission:
    """Reservations and checks against one :class:`MemoryBudget` (module docstring).

    Not thread-safe by itself: the :class:`~gym_envfactory.server.manager.SessionManager` calls it
    under its lock.

    Args:
        budget: the budget (:func:`detect_budget`).
        rss: resident bytes of the process now (injectable for tests).
        trim: hands freed memory back to the system before a refusal (:func:`release_free_memory`).
        clock: monotonic seconds.
    """

    def __init__(self, budget: MemoryBudget, *, rss: Callable[[], int] = current_rss,
                 trim: Callable[[], None] = release_free_memory, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = budget
        self.rss = rss
        self.trim = trim
        self.clock = clock
        #: Bytes reserved by live sessions (:meth:`reserve`, :meth:`release`).
        self.reserved = 0
        #: Resident bytes with no live session (measured at the first check with nothing reserved).
        self.baseline: int | None = None
        #: Requests refused so far.
        self.refused = 0
        self._rss = 0
        self._rss_at = float("-inf")
        self._released = 0
        self._trimmed_at = -1

    # ------------------------------------------------------------------ estimates
    @staticmethod
    def session_cost(specs: Iterable[EnvironmentSpec], nbytes: int) -> int:
        """Bytes one session holding ``nbytes`` of state JSON over ``specs`` reserves: the bytes, their
        parsed models (:func:`parsed_factor`, the largest of ``specs``), :data:`SESSION_OVERHEAD`."""
        factor = max((parsed_factor(s) for s in specs), default=DEFAULT_PARSED_FACTOR)
        return int(nbytes * (1.0 + factor)) + SESSION_OVERHEAD

    @staticmethod
    def restore_transient(nbytes: int) -> int:
        """Bytes a restore of an ``nbytes`` snapshot needs for a moment besides the session's own cost."""
        return int(nbytes * DICT_FACTOR)

    @staticmethod
    def response_estimate(sizes: Iterable[int]) -> int:
        """Bytes a frame answering reads of ``sizes`` (JSON bytes each) needs while it is built and
        sent: 3 x :data:`ENCODE_FACTOR` x their sum (parts, joined frame, bytes sent) + the largest
        one's dict (:data:`DICT_FACTOR`)."""
        total, largest = 0, 0
        for n in sizes:
            total += n
            largest = max(largest, n)
        return int(3 * ENCODE_FACTOR * total + DICT_FACTOR * largest)

    # ------------------------------------------------------------------ accounting
    def reserve(self, nbytes: int) -> None:
        """Count ``nbytes`` as held by a session just admitted."""
        self.reserved += max(0, nbytes)

    def release(self, nbytes: int) -> None:
        """Give back what a closed (or restored) session reserved."""
        nbytes = max(0, min(nbytes, self.reserved))
        self.reserved -= nbytes
        self._released += nbytes

    def _resident(self, fresh: bool) -> int:
        now = self.clock()
        if fresh or now - self._rss_at > RSS_TTL_S:
            self._rss, self._rss_at = self.rss(), now
        return self._rss

    def used(self, *, fresh: bool = False) -> int:
        """Bytes counted as in use: ``max(resident, baseline + reserved)``."""
        rss = self._resident(fresh)
        if self.reserved == 0 and (self.baseline is None or fresh):
            self.baseline = rss
        return max(rss, (self.baseline if self.baseline is not None else rss) + self.reserved)

    def check(self, what: str, estimate: int, *, transient: bool = False) -> None:
        """Admit a request needing ``estimate`` more bytes, or refuse it.  ``transient``: memory it needs
        only while it runs (a read frame; small ones are admitted without measuring).

        Raises:
            MemoryBudgetError: ``used + estimate`` would exceed the budget less its headroom, even after
                freed memory was handed back to the system; the message says what was refused, the
                estimate, the memory in use and the budget, and what to do.
        """
        if transient and estimate < TRANSIENT_CHECK_MIN:
            return
        allowed = self.budget.allowed
        used = self.used()
        if used + estimate <= allowed - self.budget.limit // 10:
            return  # clearly fits: the cached reading is good enough
        used = self.used(fresh=True)
        if used + estimate > allowed and self._released != self._trimmed_at:
            self._trimmed_at = self._released
            self.trim()
            used = self.used(fresh=True)
        if used + estimate <= allowed:
            return
        self.refused += 1
        b = self.budget
        raise MemoryBudgetError(
            f"refused {what}: it needs an estimated {_mib(estimate)} and the server already uses {_mib(used)} of its "
            f"{_mib(b.limit)} memory budget ({b.source}; {_mib(b.headroom)} of it kept free); close sessions you no "
            f"longer need, ask for less per frame or a smaller group, or give the server more memory (raise the "
            f"container's memory limit or --memory-budget)",
            estimate=estimate, used=used, budget=b.limit, headroom=b.headroom)

    def stats(self) -> dict[str, Any]:
        """The budget, headroom, bytes reserved, bytes in use (resident, measured now) and refusals."""
        b = self.budget
        return {"budget": b.limit, "source": b.source, "headroom": b.headroom, "reserved": self.reserved,
                "rss": self._resident(True), "used": self.used(), "refused": self.refused}
