"""HTML for ``envfactory ui``: one function per page, each returning a whole document as text.

Server-rendered, inline CSS, no scripts: what the browser shows is what these functions wrote, so a
test can check a page by its text.  Every value from a file or a tool is escaped (``html.escape``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote

from gym_envfactory.reward import REWARD_COMPONENTS
from gym_envfactory.ui.rollouts import Episode, split_turns

__all__ = ["page", "catalog_page", "environment_page", "task_page", "state_page", "graph_page",
           "rollouts_page", "episode_page", "error_page"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#243b53;color:#fff;padding:.6em 1.2em}header a{color:#fff;margin-right:1.2em;text-decoration:none}
main{padding:1em 1.5em;max-width:1200px}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;font-size:14px}td,th{border:1px solid #d0d7de;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#eef2f6}pre{background:#f3f4f6;padding:.5em;overflow-x:auto;
font-size:12px;max-height:28em;white-space:pre-wrap;overflow-wrap:anywhere}.tag{display:inline-block;border-radius:3px;padding:0 5px;font-size:12px;
margin-right:3px}.write{background:#fde2e1}.read{background:#e1f5e4}.err{color:#b42318;font-weight:600}
.ok{color:#067647}.turn{border-left:4px solid #9fb3c8;padding-left:1em;margin:1em 0}
.msg{margin:.4em 0}.role{font-weight:600;margin-right:.5em}.muted{color:#667085}
"""


def esc(value: Any) -> str:
    """``value`` as escaped HTML text (``str`` first)."""
    return html.escape(str(value), quote=True)


def _url(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


def _json(value: Any) -> str:
    return f"<pre>{esc(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))}</pre>"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def page(title: str, body: str) -> str:
    """A whole HTML document: the navigation bar, ``<h1>`` = ``title``, then ``body`` (already HTML)."""
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{esc(title)} · envfactory</title><style>{_CSS}</style></head><body>"
            "<header><a href='/'>Catalog</a><a href='/rollouts'>Rollouts</a></header>"
            f"<main><h1>{esc(title)}</h1>{body}</main></body></html>\n")


def error_page(status: int, message: str) -> str:
    """The page for a missing environment, task, state or episode (``status`` 404) or a bad file."""
    return page(f"{status}", f"<p class='err'>{esc(message)}</p><p><a href='/'>back to the catalog</a></p>")


def catalog_page(rows: Sequence[dict[str, Any]]) -> str:
    """The catalog: one row per environment (``name``, ``domain``, ``tools``, ``writes``, ``tasks``,
    ``multi_turn``, ``splits``, ``states``, ``image``), grouped by domain."""
    domains = sorted({r["domain"] for r in rows})
    total_tools = sum(r["tools"] for r in rows)
    total_tasks = sum(r["tasks"] for r in rows)
    body = [f"<p>{len(rows)} environments in {len(domains)} domains ({esc(', '.join(domains))}); "
            f"{total_tools} tools, {total_tasks} tasks.</p>"]
    table_rows = [[f"<a href='{_url('env', r['name'])}'>{esc(r['name'])}</a>", esc(r["domain"]),
                   f"{r['tools']} ({r['writes']} writes)", f"{r['tasks']} ({r['multi_turn']} multi-turn)",
                   esc(", ".join(f"{k} {v}" for k, v in sorted(r["splits"].items()))),
                   esc(", ".join(r["states"])), esc(r["image"])]
                  for r in sorted(rows, key=lambda r: (r["domain"], r["name"]))]
    body.append(_table(["environment", "domain", "tools", "tasks", "splits", "initial states", "image"], table_rows))
    return page("Catalog", "".join(body))


def environment_page(spec: Any, *, state_sizes: dict[str, str], graph_available: bool) -> str:
    """One environment: description, tools (schemas, annotations), initial states, tasks."""
    tools = list(spec.tools.values())
    tasks = list(spec.tasks)
    b = [f"<p>{esc(spec.description)}</p>",
         f"<p class='muted'>domain {esc(spec.domain)} · version {esc(spec.version)} · gym id "
         f"<code>{esc(spec.gym_id)}</code> · {len(tools)} tools · {len(tasks)} tasks</p>"]
    b.append(f"<p><a href='{_url('env', spec.name, 'graph')}'>Tool graph</a>"
             + ("" if graph_available else " <span class='muted'>(needs the synthesis extra)</span>") + "</p>")
    b.append("<h2>Tools</h2>")
    rows = []
    for t in tools:
        ann = t.annotations
        ro = t.read_only
        tags = [f"<span class='tag {'read' if ro else 'write'}'>{'read' if ro else 'write'}</span>"]
        if ann.destructive and not ro:
            tags.append("<span class='tag write'>destructive</span>")
        if ann.idempotent:
            tags.append("<span class='tag read'>idempotent</span>")
        rows.append([f"<code id='tool-{esc(t.name)}'>{esc(t.name)}</code>", "".join(tags),
                     f"<details><summary>{esc(t.description.splitlines()[0] if t.description else '')}</summary>"
                     f"<pre>{esc(t.description)}</pre><b>input schema</b>{_json(t.input_schema)}"
                     + (f"<b>output schema</b>{_json(t.output_schema)}" if t.output_schema else "")
                     + "</details>"])
    b.append(_table(["tool", "annotations", "description and schemas"], rows))
    b.append("<h2>Initial states</h2>")
    b.append(_table(["state", "size"], [[f"<a href='{_url('env', spec.name, 'state', s)}'>{esc(s)}</a>",
                                         esc(state_sizes.get(s, ""))] for s in spec.initial_state_names()]))
    b.append("<h2>Tasks</h2>")
    trows = []
    for t in tasks:
        envs = t.envs or [spec.name]
        first = t.turns[0].user
        trows.append([f"<a href='{_url('env', spec.name, 'task', t.task_id)}'>{esc(t.task_id)}</a>", esc(t.split),
                      str(len(t.turns)), esc(", ".join(e for e in envs if e)),
                      esc(first if len(first) <= 140 else first[:137] + "...")])
    b.append(_table(["task", "split", "turns", "environments", "first user message"], trows))
    return page(spec.name, "".join(b))


def task_page(spec: Any, task: Any) -> str:
    """One task: its initial state reference, then per turn the user message, the ground-truth calls
    and the expected outputs."""
    envs = task.envs or [spec.name]
    links = ", ".join(f"<a href='{_url('env', e)}'>{esc(e)}</a>" for e in envs)
    b = [f"<p class='muted'>environment{'s' if len(envs) > 1 else ''} {links} · split "
         f"{esc(task.split)} · {len(task.turns)} turns</p>",
         f"<p>initial state: <code>{esc(json.dumps(task.initial_state))}</code></p>"]
    for i, turn in enumerate(task.turns):
        calls = "".join(f"<li><code>{esc(c.name)}</code> <code>{esc(json.dumps(c.arguments, ensure_ascii=False))}</code>"
                        + (f" <span class='muted'>masked: {esc(', '.join(c.masked_arguments))}</span>"
                           if c.masked_arguments else "") + "</li>" for c in turn.ground_truth)
        b.append(f"<div class='turn'><h2>Turn {i}" + (" (clarification)" if turn.clarification else "") + "</h2>"
                 f"<div class='msg'><span class='role'>user</span>{esc(turn.user)}</div>"
                 f"<b>ground truth</b><ol>{calls or '<li class=muted>no tool call</li>'}</ol>"
                 + (f"<b>expected outputs</b>: {esc(', '.join(turn.expected_outputs))}" if turn.expected_outputs else "")
                 + "</div>")
    return page(f"Task {task.task_id}", "".join(b))


def state_page(spec: Any, name: str, state: Any) -> str:
    """One initial state: record counts per top-level field, then the JSON."""
    counts = [[esc(k), esc(len(v) if isinstance(v, (list, dict)) else v)] for k, v in state.items()]
    return page(f"{spec.name}: state {name}",
                f"<p><a href='{_url('env', spec.name)}'>back to {esc(spec.name)}</a></p>"
                + _table(["field", "records or value"], counts) + _json(state))


def graph_page(env_name: str, svg: str | None, rows: Sequence[dict[str, Any]], note: str = "") -> str:
    """The tool graph around one environment: the picture (inline SVG) and its ``output → input`` links."""
    b = [f"<p><a href='{_url('env', env_name)}'>back to {esc(env_name)}</a></p>"]
    if note:
        b.append(f"<p class='muted'>{esc(note)}</p>")
    if svg:
        b.append(f"<div class='graph'>{svg[svg.find('<svg'):]}</div>")
    b.append("<h2>Links</h2>")
    b.append(_table(["producer", "output", "consumer", "input", "score", "origin"],
                    [[esc(r["producer"]), esc(r["output"]), esc(r["consumer"]), esc(r["input"]),
                      f"{r['score']:.3f}", esc(r["origin"])] for r in rows]))
    return page(f"Tool graph: {env_name}", "".join(b))


def rollouts_page(files: Sequence[tuple[str, Sequence[Episode] | str, Sequence[str]]]) -> str:
    """Every loaded rollout file (``(name, episodes, notes)``) and its episodes, with reward, steps and
    errors; a file that does not load (a string: the error naming its line) is shown as that error; a
    malformed record (``Episode.problem``) is a row saying so, listed under the table; ``notes`` (a
    skipped incomplete last line) follow."""
    if not files:
        return page("Rollouts", "<p>No rollout file loaded: start with <code>envfactory ui --rollouts "
                                "trajectories.jsonl</code> (written by <code>envfactory rollout --out</code>).</p>")
    b = []
    for fi, (name, eps, notes) in enumerate(files):
        if isinstance(eps, str):
            b.append(f"<h2>{esc(name)}</h2><p class='err'>{esc(eps)}</p>")
            continue
        shown = [e for e in eps if e.problem is None]
        rewards = [float(rw) for e in shown if isinstance(rw := e.record.get("reward"), (int, float))]
        mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "n/a"
        malformed = len(eps) - len(shown)
        b.append(f"<h2>{esc(name)}</h2><p>{len(eps)} episodes"
                 f"{f' ({malformed} malformed)' if malformed else ''}, mean reward {mean}</p>")
        rows = []
        for ei, e in enumerate(eps):
            r = e.record
            rw = r.get("reward")
            reward = ("<span class='err'>malformed</span>" if e.problem is not None
                      else f"{float(rw):.3f}" if isinstance(rw, (int, float)) else "n/a")
            rows.append([f"<a href='{_url('rollouts', str(fi), str(ei))}'>{esc(r.get('task_id', '?'))}</a>",
                         esc(r.get("env", "")), esc(r.get("policy", "")), reward, esc(r.get("steps", "")),
                         esc(len(r.get("errors") or []))])
        b.append(_table(["task", "environment", "policy", "reward", "steps", "errors"], rows))
        problems = [e.problem for e in eps if e.problem is not None]
        if problems:
            b.append("<ul>" + "".join(f"<li class='err'>{esc(x)}</li>" for x in problems) + "</ul>")
        for note in notes:
            b.append(f"<p class='muted'>note: {esc(note)}</p>")
    return page("Rollouts", "".join(b))


def _components_table(c: dict[str, Any]) -> str:
    keys = [k for k in REWARD_COMPONENTS if k != "vacuous"] + ["matched", "n_ground_truth", "surplus", "invalid"]
    cells = [[esc(k), esc(f"{c[k]:.3f}" if isinstance(c.get(k), float) else c.get(k))] for k in keys if k in c]
    extra = [[esc(k), esc(", ".join(map(str, v)) if isinstance(v, list) else v)]
             for k in ("vacuous", "missed") if (v := c.get(k))]
    return _table(["component", "value"], cells + extra)


def episode_page(episode: Episode, fi: int, ei: int) -> str:
    """One episode, turn by turn: the user message, the assistant's messages, each tool call with its
    arguments, result and typed error, the turn's reward components; then the episode's components and
    its state diff against the ground truth."""
    r = episode.record
    raw_comps = r.get("components")
    comps: dict[str, Any] = raw_comps if isinstance(raw_comps, dict) else {}
    preamble, turns = split_turns(r)
    rw = r.get("reward")
    b = [f"<p class='muted'>{esc(episode.file)} line {episode.line} · environment {esc(r.get('env', '?'))} · "
         f"policy {esc(r.get('policy', '?'))} · seed {esc(r.get('seed', ''))} · steps {esc(r.get('steps', ''))} · "
         f"terminated {esc(r.get('terminated', ''))} · truncated {esc(r.get('truncated', ''))}</p>",
         f"<p>reward <b>{f'{float(rw):.3f}' if isinstance(rw, (int, float)) else 'n/a'}</b></p>"]
    if r.get("perturbations"):
        b.append(f"<p class='muted'>perturbations: {esc(', '.join(map(str, r['perturbations'])))}</p>")
    for m in preamble:
        b.append(f"<details><summary>{esc(m.get('role', ''))} message</summary><pre>{esc(m.get('content', ''))}</pre></details>")
    for t in turns:
        b.append(f"<div class='turn'><h2>Turn {t.index}</h2>"
                 f"<div class='msg'><span class='role'>user</span>{esc(t.user)}</div>")
        for m in t.messages:
            if m.get("role") == "assistant" and m.get("content"):
                b.append(f"<div class='msg'><span class='role'>assistant</span>{esc(m['content'])}</div>")
        if t.calls:
            rows = [[f"<code>{esc(c.name)}</code>", f"<code>{esc(c.arguments)}</code>",
                     (f"<span class='err'>{esc(c.error)}</span>" if c.error else "<span class='ok'>ok</span>"),
                     f"<pre>{esc(c.result if c.result is not None else '(no result)')}</pre>"] for c in t.calls]
            b.append(_table(["tool call", "arguments", "outcome", "result"], rows))
        if t.components:
            b.append("<b>turn reward</b>" + _components_table(t.components))
        b.append("</div>")
    b.append("<h2>Episode reward</h2>" + _components_table(comps))
    diff = comps.get("state_diff") or []
    b.append("<h2>State diff against the ground truth</h2>")
    if diff:
        b.append(_table(["path", "expected", "actual"],
                        [[f"<code>{esc(d.get('path', ''))}</code>", f"<code>{esc(d.get('expected', ''))}</code>",
                          f"<code>{esc(d.get('actual', ''))}</code>"] for d in diff if isinstance(d, dict)]))
    else:
        b.append("<p class='ok'>no difference: the final state equals the ground truth's</p>")
    if r.get("errors"):
        b.append("<h2>Errors</h2><ul>" + "".join(f"<li>{esc(e)}</li>" for e in r["errors"]) + "</ul>")
    return page(f"Episode {r.get('task_id', '?')}", "".join(b))
