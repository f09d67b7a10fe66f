"""HTML for the rollout pages of ``envfactory ui``: the rollouts index (filters, sorting, histogram,
component means), one episode (ground truth beside the agent's calls), a comparison of two files or
policies, and the training curves.  Same rules as :mod:`gym_envfactory.ui.pages`: whole documents as
text, every value from a file escaped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gym_envfactory.reward import REWARD_COMPONENTS
from gym_envfactory.ui import svg
from gym_envfactory.ui.browse import (
    EpisodeRow,
    RolloutQuery,
    Side,
    component_means,
    output_weighted,
    sort_rows,
)
from gym_envfactory.ui.pages import esc, page, table, url
from gym_envfactory.ui.rollouts import Episode, ToolCallView, split_turns
from gym_envfactory.ui.traininglog import REWARD_METRICS, TrainingCurves

__all__ = ["FileView", "GroundTruthCall", "rollouts_page", "episode_page", "compare_page", "training_page",
           "argument_diff", "pair_calls"]

_COLUMNS = [("line", "line"), ("task_id", "task"), ("env", "environment"), ("split", "split"), ("policy", "policy"),
            ("reward", "reward"), ("steps", "steps"), ("n_errors", "errors"), ("truncated", "truncated")]


@dataclass
class FileView:
    """One loaded rollout file for the index: its name, its rows (or the error that keeps it from
    loading) and notes on skipped lines."""

    name: str
    rows: list[EpisodeRow] | str
    notes: Sequence[str] = ()


@dataclass
class GroundTruthCall:
    """A ground-truth call of a task's turn: tool ``name``, ``arguments`` and the ``masked`` argument
    names the reward ignores (docs/reward.md)."""

    name: str
    arguments: dict[str, Any]
    masked: Sequence[str] = ()


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _options(name: str, values: Sequence[str], chosen: str, label: str) -> str:
    opts = [f"<option value=''>{esc(label)}: any</option>"]
    opts += [f"<option value='{esc(v)}'{' selected' if v == chosen else ''}>{esc(v)}</option>" for v in values]
    return f"<select name='{name}' aria-label='{esc(label)}'>{''.join(opts)}</select>"


def _filter_form(query: RolloutQuery, rows: Sequence[EpisodeRow]) -> str:
    def values(attr: str) -> list[str]:
        return sorted({str(getattr(r, attr)) for r in rows if getattr(r, attr)})

    codes = sorted({c for r in rows for c in r.codes})
    mn = "" if query.min is None else f"{query.min:g}"
    mx = "" if query.max is None else f"{query.max:g}"
    return ("<form class='filters' method='get' action='/rollouts'>"
            + _options("env", values("env"), query.env, "environment") + _options("split", values("split"), query.split, "split")
            + _options("policy", values("policy"), query.policy, "policy") + _options("code", codes, query.code, "error code")
            + _options("truncated", ["yes", "no"], query.truncated, "truncated")
            + f"<input name='task' placeholder='task id contains' value='{esc(query.task)}' size='14'>"
            + f"<input name='min' placeholder='reward ≥' value='{esc(mn)}' size='6'>"
            + f"<input name='max' placeholder='reward ≤' value='{esc(mx)}' size='6'>"
            + f"<input name='q' type='search' placeholder='search messages' value='{esc(query.q)}' size='18'>"
            + (f"<input type='hidden' name='sort' value='{esc(query.sort)}'><input type='hidden' name='order' "
               f"value='{esc(query.order)}'>" if query.sort != "line" else "")
            + "<button type='submit'>Filter</button> <a href='/rollouts'>clear</a></form>")


def _compare_form(files: Sequence[FileView]) -> str:
    choices: list[tuple[str, str]] = []
    for fi, f in enumerate(files):
        if isinstance(f.rows, str):
            continue
        choices.append((str(fi), f"{fi}: {f.name}"))
        choices += [(f"{fi}:{p}", f"{fi}: {f.name}, policy {p}") for p in sorted({r.policy for r in f.rows if r.policy})]
    if not choices:
        return ""

    def sel(name: str, default: int) -> str:
        return (f"<select name='{name}' aria-label='side {name}'>"
                + "".join(f"<option value='{esc(v)}'{' selected' if i == default else ''}>{esc(t)}</option>"
                          for i, (v, t) in enumerate(choices)) + "</select>")

    second = next((i for i, (v, _) in enumerate(choices) if v.split(":")[0] != choices[0][0].split(":")[0]),
                  min(1, len(choices) - 1))
    return (f"<form class='compare-form' method='get' action='/compare'>Compare {sel('a', 0)} with {sel('b', second)} "
            "<button type='submit'>Compare</button></form>")


def _means_table(rows: Sequence[EpisodeRow]) -> str:
    means = component_means(rows)
    if not means:
        return "<p class='muted'>no reward components</p>"
    return table(["component", "mean", "episodes"], [[esc(k), f"{m:.3f}", str(n)] for k, (m, n) in means.items()],
                 cls="means")


def rollouts_page(files: Sequence[FileView], query: RolloutQuery) -> str:
    """Every loaded rollout file: overall counts and mean reward, then, for the episodes passing
    ``query``'s filters (in its order), a reward histogram, per-component means and the table (column
    headers are sort links); malformed records and notes follow.  A file that does not load is its error."""
    if not files:
        return page("Rollouts", "<p>No rollout file loaded: start with <code>envfactory ui --rollouts "
                                "trajectories.jsonl</code> (written by <code>envfactory rollout --out</code>).</p>")
    everything = [r for f in files if not isinstance(f.rows, str) for r in f.rows]
    b = [_filter_form(query, everything), _compare_form(files)]
    b += [f"<p class='err'>{esc(p)}</p>" for p in query.problems]
    for f in files:
        b.append(f"<h2>{esc(f.name)}</h2>")
        if isinstance(f.rows, str):
            b.append(f"<p class='err'>{esc(f.rows)}</p>")
            continue
        rewards = [r.reward for r in f.rows if r.reward is not None]
        mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "n/a"
        malformed = sum(1 for r in f.rows if r.malformed)
        b.append(f"<p>{len(f.rows)} episodes{f' ({malformed} malformed)' if malformed else ''}, mean reward {mean}</p>")
        shown = sort_rows([r for r in f.rows if query.matches(r)], query.sort, query.order)
        if query.active:
            sub = [r.reward for r in shown if r.reward is not None]
            b.append(f"<p class='shown'>showing {len(shown)} of {len(f.rows)} episodes (filtered), mean reward "
                     f"{sum(sub) / len(sub) if sub else float('nan'):.3f}</p>" if sub else
                     f"<p class='shown'>showing {len(shown)} of {len(f.rows)} episodes (filtered)</p>")
        b.append("<div class='stats'><div>" + svg.histogram([r.reward for r in shown if r.reward is not None])
                 + "</div><div>" + _means_table(shown) + "</div></div>")
        heads = []
        for key, label in _COLUMNS:
            order = "desc" if query.sort == key and query.order == "asc" else "asc"
            arrow = (" ▲" if query.order == "asc" else " ▼") if query.sort == key else ""
            heads.append(f"<a href='{esc(query.link(sort=key, order=order))}'>{esc(label)}{arrow}</a>")
        body = []
        for r in shown:
            reward = "<span class='err'>malformed</span>" if r.malformed else _fmt(r.reward)
            link = url("rollouts", str(r.fi), str(r.ei)) + query.link("")  # the episode page keeps the view
            body.append([str(r.line), f"<a href='{esc(link)}'>{esc(r.task_id)}</a>",
                         esc(r.env), esc(r.split), esc(r.policy), reward, esc("" if r.steps is None else r.steps),
                         esc(r.n_errors) + (f" <span class='muted'>{esc(', '.join(r.codes))}</span>" if r.codes else ""),
                         "yes" if r.truncated else ""])
        b.append(table(heads, body, cls="episodes", raw_headers=True))
        problems = [r.malformed for r in f.rows if r.malformed]
        if problems:
            b.append("<ul>" + "".join(f"<li class='err'>{esc(x)}</li>" for x in problems) + "</ul>")
        b += [f"<p class='muted'>note: {esc(n)}</p>" for n in f.notes]
    return page("Rollouts", "".join(b))


# ------------------------------------------------------------------------------------------ one episode
def _parse_args(raw: str) -> dict[str, Any] | None:
    try:
        v = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, dict) else None


def pair_calls(truth: Sequence[GroundTruthCall], calls: Sequence[ToolCallView]) -> list[tuple[int | None, int | None]]:
    """Ground-truth calls paired with the agent's, as ``(truth index, call index)`` (``None``: no partner):
    each ground-truth call takes the unused agent call of the same tool whose arguments agree on the most
    keys (file order breaks ties); unpaired agent calls follow in their order.  A display aid, not the
    reward's matching (docs/reward.md)."""
    used: set[int] = set()
    out: list[tuple[int | None, int | None]] = []
    for ti, t in enumerate(truth):
        best, score = None, -1
        for ci, c in enumerate(calls):
            if ci in used or c.name != t.name:
                continue
            args = _parse_args(c.arguments) or {}
            s = sum(1 for k, v in t.arguments.items() if k in args and args[k] == v)
            if s > score:
                best, score = ci, s
        if best is not None:
            used.add(best)
        out.append((ti, best))
    out += [(None, ci) for ci in range(len(calls)) if ci not in used]
    return out


def argument_diff(truth: GroundTruthCall, raw: str) -> list[tuple[str, str, str, str]]:
    """Per argument in either call: ``(name, expected, actual, status)``, status ``same``, ``differs``,
    ``missing`` (only in the ground truth), ``extra`` (only the agent's), ``masked`` (the reward ignores
    it), or one row ``("(arguments)", ..., "unparsed")`` when the agent's arguments are not a JSON object."""
    args = _parse_args(raw)
    if args is None:
        return [("(arguments)", json.dumps(truth.arguments, ensure_ascii=False), raw, "unparsed")]
    out = []
    for k in [*truth.arguments, *(k for k in args if k not in truth.arguments)]:
        exp = json.dumps(truth.arguments[k], ensure_ascii=False) if k in truth.arguments else ""
        act = json.dumps(args[k], ensure_ascii=False) if k in args else ""
        if k in truth.masked:
            status = "masked"
        elif k not in args:
            status = "missing"
        elif k not in truth.arguments:
            status = "extra"
        else:
            status = "same" if args[k] == truth.arguments[k] else "differs"
        out.append((k, exp, act, status))
    return out


def _result(text: str | None) -> str:
    if text is None:
        return "<span class='muted'>(no result)</span>"
    try:
        pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        pretty = text
    if len(pretty) <= 240 and pretty.count("\n") <= 8:
        return f"<pre>{esc(pretty)}</pre>"
    head = " ".join(text.split())[:100]
    return (f"<details class='result'><summary><code>{esc(head)}</code>… <span class='muted'>({len(text)} "
            f"characters)</span></summary><pre>{esc(pretty)}</pre></details>")


def _gt_table(truth: Sequence[GroundTruthCall], calls: Sequence[ToolCallView]) -> str:
    rows = []
    for ti, ci in pair_calls(truth, calls):
        t = truth[ti] if ti is not None else None
        c = calls[ci] if ci is not None else None
        left = (f"<code>{esc(t.name)}</code>" if t else "<span class='muted'>none: a surplus call</span>")
        right = (f"<code>{esc(c.name)}</code>" if c else "<span class='err'>missed</span>")
        if t and c:
            diff = argument_diff(t, c.arguments)
            cells = "".join(f"<tr class='arg-{s}'><td><code>{esc(k)}</code></td><td><code>{esc(e)}</code></td>"
                            f"<td><code>{esc(a)}</code></td><td>{esc(s)}</td></tr>" for k, e, a, s in diff)
            detail = f"<table class='argdiff'>{cells}</table>" if diff else "<span class='muted'>no arguments</span>"
            state = "differs" if any(s in ("differs", "missing", "extra", "unparsed") for *_, s in diff) else "same"
        elif t:
            detail, state = f"<code>{esc(json.dumps(t.arguments, ensure_ascii=False))}</code>", "missed"
        else:
            assert c is not None
            detail, state = f"<code>{esc(c.arguments)}</code>", "surplus"
        rows.append(f"<tr class='pair pair-{state}'><td>{left}</td><td>{right}</td><td>{detail}</td><td>"
                     f"{esc(c.error) if c and c.error else ('ok' if c else '')}</td></tr>")
    head = "<tr><th>ground truth</th><th>agent</th><th>arguments: name, expected, actual</th><th>outcome</th></tr>"
    return f"<table class='gt'><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def _components_table(c: Mapping[str, Any], show_output: bool) -> str:
    keys = [k for k in REWARD_COMPONENTS if k != "vacuous" and (show_output or k != "r_output")]
    keys += ["matched", "n_ground_truth", "surplus", "invalid"]
    cells = [[esc(k), esc(f"{c[k]:.3f}" if isinstance(c.get(k), float) else c.get(k))] for k in keys if k in c]
    extra = [[esc(k), esc(", ".join(str(x) for x in v if show_output or x != "r_output") if isinstance(v, list) else v)]
             for k in ("vacuous", "missed") if (v := c.get(k))]
    return table(["component", "value"], cells + extra)


def _call_line(c: ToolCallView) -> str:
    outcome = f"<span class='err'>{esc(c.error)}</span>" if c.error else "<span class='ok'>ok</span>"
    return (f"<div class='call'><code>{esc(c.name)}</code> <code>{esc(c.arguments)}</code> → {outcome}"
            f"{_result(c.result)}</div>")


def episode_page(episode: Episode, fi: int, ei: int, *, count: int,
                 truth: Sequence[Sequence[GroundTruthCall]] | None = None, truth_note: str = "",
                 view: RolloutQuery | None = None, neighbours: tuple[int | None, int | None] | None = None,
                 position: tuple[int, int] | None = None) -> str:
    """One episode (episode ``ei`` of file ``fi``, of ``count``), turn by turn: the user message, the
    ground truth beside the agent's calls with an argument diff (``truth``: per turn, from the task), then
    the conversation in order (each assistant message's text with its own calls and results; long
    results collapsed), the turn's reward components; then the episode's components (``r_output`` hidden
    when its weight is 0), its state diff and errors.  Links: the task, the previous and next episode:
    in the file, or, within a ``view`` (filters or order), its ``neighbours`` (episode numbers) there, the
    episode being number ``position[0]`` (from 1) of ``position[1]``; the links keep the view."""
    r = episode.record
    comps: dict[str, Any] = r["components"] if isinstance(r.get("components"), dict) else {}
    show_output = output_weighted(r)
    preamble, turns = split_turns(r)
    rw = r.get("reward")
    env, tid = str(r.get("env", "")), str(r.get("task_id", "?"))
    filtered = view is not None and bool(view.params())
    before, after = neighbours if neighbours else (ei - 1 if ei > 0 else None, ei + 1 if ei + 1 < count else None)
    keep = view.link("") if filtered and view else ""
    nav = [f"<a href='{url('env', env, 'task', tid)}'>task {esc(tid)}</a>" if env else ""]
    nav.append(f"<a rel='prev' href='{esc(url('rollouts', str(fi), str(before)) + keep)}'>← previous episode</a>"
               if before is not None else "")
    nav.append(f"<a rel='next' href='{esc(url('rollouts', str(fi), str(after)) + keep)}'>next episode →</a>"
               if after is not None else "")
    back = esc(view.link()) if filtered and view else "/rollouts"
    where = (f" · episode {position[0]} of {position[1]} in this view" if filtered and position else "")
    b = [f"<p class='nav'>{' · '.join(x for x in nav if x)} · <a href='{back}'>"
         f"{'back to the view' if filtered else 'all rollouts'}</a>{where}</p>",
         f"<p class='muted'>{esc(episode.file)} line {episode.line} · episode {ei + 1} of {count} · environment "
         f"{esc(env or '?')} · policy {esc(r.get('policy', '?'))} · seed {esc(r.get('seed', ''))} · steps "
         f"{esc(r.get('steps', ''))} · terminated {esc(r.get('terminated', ''))} · truncated {esc(r.get('truncated', ''))}</p>",
         f"<p>reward <b>{f'{float(rw):.3f}' if isinstance(rw, (int, float)) else 'n/a'}</b></p>"]
    if truth_note:
        b.append(f"<p class='muted'>{esc(truth_note)}</p>")
    if r.get("perturbations"):
        b.append(f"<p class='muted'>perturbations: {esc(', '.join(map(str, r['perturbations'])))}</p>")
    for m in preamble:
        b.append(f"<details><summary>{esc(m.get('role', ''))} message</summary><pre>{esc(m.get('content', ''))}</pre></details>")
    for t in turns:
        b.append(f"<div class='turn'><h2>Turn {t.index}</h2><div class='msg'><span class='role'>user</span>{esc(t.user)}</div>")
        if truth is not None and t.index < len(truth):
            b.append("<b>ground truth and the agent's calls</b>" + _gt_table(truth[t.index], t.calls))
        b.append("<div class='conversation'>")
        by_id = {c.call_id: c for c in t.calls if c.call_id}
        pending = list(t.calls)
        for m in t.messages:
            role = m.get("role")
            if role == "assistant":
                own = []
                for call in m.get("tool_calls") or []:
                    cid = str(call.get("id") or "")
                    c = by_id.get(cid) if cid else None
                    if c is None:  # no id: the next call of this message in order
                        name = str((call.get("function") or {}).get("name", "?"))
                        c = next((x for x in pending if x.name == name and not x.call_id), None)
                    if c is not None and c in pending:
                        pending.remove(c)
                        own.append(c)
                text = f"<div class='text'>{esc(m['content'])}</div>" if m.get("content") else ""
                b.append(f"<div class='msg assistant'><span class='role'>assistant</span>{text}"
                         + "".join(_call_line(c) for c in own) + "</div>")
            elif role == "tool":
                cid = str(m.get("tool_call_id") or "")
                if cid and cid in by_id:
                    continue  # shown with its call
                b.append(f"<div class='msg'><span class='role'>tool</span>{_result(str(m.get('content')))}</div>")
            else:
                b.append(f"<div class='msg muted'><span class='role'>{esc(role)}</span>{esc(m.get('content', ''))}</div>")
        b.append("</div>")
        if t.components:
            b.append("<b>turn reward</b>" + _components_table(t.components, show_output))
        b.append("</div>")
    b.append("<h2>Episode reward</h2>" + _components_table(comps, show_output))
    if not show_output:
        b.append("<p class='muted'>r_output is not shown: its weight is 0 in this episode's reward configuration</p>")
    diff = comps.get("state_diff") or []
    b.append("<h2>State diff against the ground truth</h2>")
    if diff:
        b.append(table(["path", "expected", "actual"],
                       [[f"<code>{esc(d.get('path', ''))}</code>", f"<code>{esc(d.get('expected', ''))}</code>",
                         f"<code>{esc(d.get('actual', ''))}</code>"] for d in diff if isinstance(d, dict)]))
    else:
        b.append("<p class='ok'>no difference: the final state equals the ground truth's</p>")
    if r.get("errors"):
        b.append("<h2>Errors</h2><ul>" + "".join(f"<li>{esc(e)}</li>" for e in r["errors"]) + "</ul>")
    return page(f"Episode {tid}", "".join(b))


# ------------------------------------------------------------------------------------------ comparison
def compare_page(names: Sequence[str], a: Side, b: Side, rows: Sequence[Mapping[str, Any]]) -> str:
    """Two sides (files or policies) per task: episodes and mean reward on each side and the difference
    ``B − A``, highlighted (better, worse, same; a task on one side only is marked); a summary first.
    The table sorts by a click on its headers (or ``#sort=COLUMN`` / ``#sort=-COLUMN`` in the address)."""
    both = [r for r in rows if r["diff"] is not None]
    better = sum(1 for r in both if r["diff"] > 1e-9)
    worse = sum(1 for r in both if r["diff"] < -1e-9)
    mean_a = sum(r["mean_a"] for r in both) / len(both) if both else None
    mean_b = sum(r["mean_b"] for r in both) / len(both) if both else None
    out = [f"<p><b>A</b>: {esc(a.label(names))}<br><b>B</b>: {esc(b.label(names))}</p>",
           f"<p class='summary'>{len(both)} tasks on both sides: mean reward A {_fmt(mean_a)}, B {_fmt(mean_b)}; "
           f"B better on {better}, worse on {worse}, the same on {len(both) - better - worse}; "
           f"{len(rows) - len(both)} tasks on one side only.</p>",
           f"<p><a href='/compare?a={esc(b.spec())}&amp;b={esc(a.spec())}'>swap sides</a> · "
           "<a href='/rollouts'>all rollouts</a></p>"]
    body = []
    for r in rows:
        d = r["diff"]
        cls = "only" if d is None else "better" if d > 1e-9 else "worse" if d < -1e-9 else "same"
        diff = "" if d is None else f"{d:+.3f}"
        task = f"<a href='/rollouts?task={esc(r['task_id'])}&amp;env={esc(r['env'])}'>{esc(r['task_id'])}</a>"
        body.append(f"<tr class='{cls}'><td>{esc(r['env'])}</td><td>{task}</td><td>{r['n_a']}</td>"
                    f"<td>{_fmt(r['mean_a'])}</td><td>{r['n_b']}</td><td>{_fmt(r['mean_b'])}</td>"
                    f"<td class='diff' data-v='{'' if d is None else f'{d:.6f}'}'>{diff}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("environment", "task", "episodes A", "reward A", "episodes B",
                                              "reward B", "B − A"))
    out.append(f"<table class='sortable compare'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    return page("Compare rollouts", "".join(out))


# ------------------------------------------------------------------------------------------ training
def training_page(logs: Sequence[tuple[str, TrainingCurves | str]]) -> str:
    """Per training log and phase: the reward and its components against the step (one chart, 0-1),
    then each other metric on its own chart, and the last step's values."""
    if not logs:
        return page("Training", "<p>No training log loaded: start with <code>envfactory ui --training-log "
                                "train-log.jsonl</code> (JSON Lines with a <code>step</code> per line, as "
                                "<code>gym_envfactory.training.log.TrainingLog</code> writes; the recipe's "
                                "<code>docs/results/recipe-smollm2.json</code> and a <code>trainer_state.json</code> "
                                "read too).</p>")
    b = []
    for name, log in logs:
        b.append(f"<h2>{esc(name)}</h2>")
        if isinstance(log, str):
            b.append(f"<p class='err'>{esc(log)}</p>")
            continue
        b.append(f"<p class='muted'>{len(log.points)} logged steps, read as {esc(log.form)}</p>")
        for phase in log.phases():
            metrics = log.metrics(phase)
            rewards = [m for m in metrics if m in REWARD_METRICS or (m.startswith("rewards/") and m.endswith("/mean"))]
            others = [m for m in metrics if m not in rewards]
            title = f"phase {phase}" if phase else "all steps"
            b.append(f"<h3>{esc(title)}</h3>")
            if rewards:
                lo = min(0.0, *(v for m in rewards for _, v in log.series(phase, m)))
                hi = max(1.0, *(v for m in rewards for _, v in log.series(phase, m)))
                b.append("<div class='plot' data-metric='reward'>" + svg.line_chart(
                    {m: log.series(phase, m) for m in rewards}, y_label="reward", y_range=(lo, hi)) + "</div>")
            for m in others:
                b.append(f"<div class='plot small' data-metric='{esc(m)}'>"
                         + svg.line_chart({m: log.series(phase, m)}, width=460, height=200, y_label=m) + "</div>")
            last = next(p for p in reversed(log.points) if p.phase == phase)
            b.append(table(["metric", f"step {last.step:g}"], [[esc(k), f"{v:.4g}"] for k, v in last.metrics.items()]))
    return page("Training", "".join(b))
