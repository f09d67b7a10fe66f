"""Sampling that delivers what was asked: chains drawn and executed until ``n`` are solvable or a budget of
checks is spent, with the reasons for every drop (issue 27 part 3; docs/synthesis.md, "Sampling to a count").

:func:`sample_solvable` grows the request to :func:`~.sampler.sample_chains` (same seed, so its first
chains are exactly the ones ``sample_chains(G, n, seed=seed)`` returns) until ``n`` chains pass
:func:`~.sampler.check_chain` and an optional ``accept`` test, the graph gives no new chain, or
``budget`` checks were made.  When the graph is exhausted and ``variants`` is positive, the chains found
are checked again with other fillings (``check_chain(..., variant=v)``: another record, date or value),
which gives other executed ground truths of the same chain: the template writer (:mod:`.template`) uses
them, a chains file cannot (it holds the structure only).  :class:`SolvableSample.summary` is the one
line a command prints: ``kept K of N (why dropped: ...)``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from gym_envfactory.generators.tasks.sampler import Chain, ChainCheck, check_chain, sample_chains

__all__ = ["SolvableSample", "sample_solvable", "drop_reason", "default_budget", "Accept", "Checker", "require_trusted"]

#: ``accept(chain, check) -> None`` to keep a solvable chain, or the reason it is dropped.
Accept = Callable[[Chain, ChainCheck], "str | None"]
#: ``check(chain, variant) -> ChainCheck`` (default: :func:`~.sampler.check_chain` on the default states).
Checker = Callable[[Chain, int], ChainCheck]


def require_trusted(envs: Iterable[str], *, trust: bool, doing: str) -> None:
    """Refuse to execute chains over untrusted packages (provenance ``generated`` or ``imported``) in this
    process unless ``trust``: :func:`~.sampler.check_chain` and QueryGen's solving run the environments'
    code here, as ``envfactory validate`` does, so the same rule holds (docs/architecture.md, "Backends").
    Names the catalog does not know are skipped (the sampler reports them as drops).

    Raises:
        UntrustedPackageError: one of ``envs`` is untrusted and ``trust`` is false; the message names the
            packages, what ``doing`` would run, and says to pass ``--trust``.
    """
    if trust:
        return
    from gym_envfactory.environment.catalog import get_environment
    from gym_envfactory.environment.spec import require_trusted as require
    from gym_envfactory.errors import EnvFactoryError

    specs = []
    for name in dict.fromkeys(envs):
        try:
            specs.append(get_environment(name))
        except EnvFactoryError:
            continue
    require(specs, trust=False, doing=doing)


def default_budget(n: int) -> int:
    """The checks :func:`sample_solvable` makes at most for ``n`` chains: ``10 n + 50``."""
    return 10 * n + 50


_STEP = re.compile(r"^step \d+ \(([^)]*)\): (.*)$", re.S)


def drop_reason(reason: str | None) -> str:
    """A short, countable form of a :class:`~.sampler.ChainCheck` reason: ``<tool>: <error code>``
    (``HotelBooking.get_hotel_booking: not_found``), ``<tool>: empty <input> source`` (an earlier
    result held no value for it), ``<tool>: no value for <input>``, ``<tool>: write changed nothing``,
    ``<tool>: read-only tool wrote``; other reasons cut to 80 characters."""
    text = (reason or "unknown").strip()
    m = _STEP.match(text)
    if not m:
        return text[:80]
    tool, rest = m.group(1), m.group(2)
    if "the result holds no value there" in rest:
        param = re.match(r"input '([^']*)'", rest)
        return f"{tool}: empty {param.group(1) if param else 'step'} source"
    if rest.startswith("no value found for user input"):
        param = re.search(r"'([^']*)'", rest)
        return f"{tool}: no value for {param.group(1) if param else 'an input'}"
    if rest.startswith("read-only tool changed"):
        return f"{tool}: read-only tool wrote"
    if rest.startswith("write tool succeeded but changed nothing"):
        return f"{tool}: write changed nothing"
    code = re.match(r"([a-z_]+): ", rest)
    return f"{tool}: {code.group(1)}" if code else f"{tool}: {rest[:60]}"


@dataclass
class SolvableSample:
    """What :func:`sample_solvable` found.

    Attributes:
        requested: ``n``.
        budget: the most checks allowed.
        chains, checks: the kept chains and their executed checks (same order; a variant's chain id ends
            in ``-v<variant>``).
        attempts: checks made.
        distinct: distinct chains the graph gave.
        exhausted: the graph gave no more distinct chains (``sample_chains`` returned fewer than asked).
        drops: ``{drop_reason: count}`` over the checks that were not kept.
    """

    requested: int
    budget: int
    chains: list[Chain] = field(default_factory=list)
    checks: list[ChainCheck] = field(default_factory=list)
    attempts: int = 0
    distinct: int = 0
    exhausted: bool = False
    drops: Counter[str] = field(default_factory=Counter)

    @property
    def kept(self) -> int:
        """How many chains were kept."""
        return len(self.chains)

    def why_short(self) -> str:
        """Why fewer than ``requested`` came back ("" when none are missing): the budget, or the graph."""
        if self.kept >= self.requested:
            return ""
        if self.attempts >= self.budget:
            return f"the budget of {self.budget} checks was spent"
        return f"the graph holds only {self.distinct} distinct chains" + (" (and their variants)" if self.exhausted else "")

    def summary(self, top: int = 8) -> str:
        """``kept K of N (why dropped: 12 Env.tool: not_found, ...; <why short>)``: the line a command prints."""
        parts = [f"{c} {r}" for r, c in self.drops.most_common(top)]
        if len(self.drops) > top:
            parts.append(f"{sum(c for _, c in self.drops.most_common()[top:])} more in {len(self.drops) - top} other reasons")
        why = "; ".join(x for x in ("why dropped: " + ", ".join(parts) if parts else "", self.why_short()) if x)
        return f"kept {self.kept} of {self.requested} after {self.attempts} checks" + (f" ({why})" if why else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (statistics files): requested, kept, attempts, budget, distinct, exhausted, drop_reasons."""
        return {"requested": self.requested, "kept": self.kept, "attempts": self.attempts, "budget": self.budget,
                "distinct_chains": self.distinct, "exhausted": self.exhausted,
                "drop_reasons": dict(self.drops.most_common())}


def _steps_key(chain: Chain) -> str:
    return json.dumps([s.model_dump(mode="json") for s in chain.steps], sort_keys=True)


def _calls_key(check: ChainCheck) -> str:
    return json.dumps(check.calls, sort_keys=True, default=str)


def sample_solvable(G: nx.DiGraph, n: int, *, seed: int, envs: Iterable[str] | None = None, budget: int | None = None,
                    variants: int = 0, accept: Accept | None = None, checker: Checker | None = None,
                    min_tools: int = 2, max_tools: int = 6, max_envs: int = 3, depth_limit: int = 3) -> SolvableSample:
    """Up to ``n`` chains of ``G`` that run (:func:`~.sampler.check_chain`) and pass ``accept``, sampling
    until there are ``n``, the graph is exhausted (then ``variants`` rounds of other fillings) or
    ``budget`` checks (default :func:`default_budget`) were made (paper §3.3; issue 27 part 3).

    The sampling arguments are :func:`~.sampler.sample_chains`'; with the same seed the chains come in
    the order ``sample_chains`` draws them.  ``accept(chain, check)`` returns ``None`` to keep a chain
    that ran, or a drop reason (counted as given).  A variant whose executed calls repeat a kept
    check's of the same chain is dropped as ``same calls as an earlier filling``.

    Returns:
        A :class:`SolvableSample` (kept chains and checks, attempts, drop reasons, ``summary()``).

    Raises:
        ValueError: ``n < 0`` or bad sampling bounds (as :func:`~.sampler.sample_chains`).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    budget = default_budget(n) if budget is None else budget
    run: Checker = checker or (lambda chain, variant: check_chain(chain, variant=variant))
    wanted = None if envs is None else list(envs)
    out = SolvableSample(requested=n, budget=budget)
    pool: list[Chain] = []
    seen: set[str] = set()
    done_calls: set[tuple[str, str]] = set()

    def consider(chain: Chain, variant: int) -> None:
        out.attempts += 1
        check = run(chain, variant)
        if not check.ok:
            out.drops[drop_reason(check.reason)] += 1
            return
        key = (_steps_key(chain), _calls_key(check))
        if key in done_calls:
            out.drops["same calls as an earlier filling"] += 1
            return
        why = accept(chain, check) if accept is not None else None
        if why is not None:
            out.drops[why] += 1
            return
        done_calls.add(key)
        kept = chain if not variant else chain.model_copy(update={"chain_id": f"{chain.chain_id}-v{variant}"})
        out.chains.append(kept)
        out.checks.append(check)

    target = n
    while out.kept < n and out.attempts < budget and not out.exhausted:
        drawn = sample_chains(G, target, seed=seed, envs=wanted, min_tools=min_tools, max_tools=max_tools,
                              max_envs=max_envs, depth_limit=depth_limit)
        out.exhausted = len(drawn) < target
        for chain in drawn[len(pool):]:
            key = _steps_key(chain)
            if key in seen:
                continue
            seen.add(key)
            pool.append(chain)
            if out.kept < n and out.attempts < budget:
                consider(chain, 0)
        out.distinct = len(pool)
        target = len(pool) + max(n - out.kept, 1) * 2
    for variant in range(1, variants + 1):
        for chain in pool:
            if out.kept >= n or out.attempts >= budget:
                return out
            consider(chain, variant)
    return out
