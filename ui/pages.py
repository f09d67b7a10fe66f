"""HTML for ``envfactory ui``: one function per page, each returning a whole document as text.

Server-rendered, inline CSS, one small script that only sorts tables (:data:`SORT_SCRIPT`): what the
browser shows is what these functions wrote, so a
test can check a page by its text.  Every value from a file or a tool is escaped (``html.escape``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["page", "table", "url", "esc", "catalog_page", "environment_page", "task_page", "state_page", "graph_page",
           "graph_building_page", "error_page", "SORT_SCRIPT"]

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
.filters,.compare-form{margin:.6em 0;display:flex;flex-wrap:wrap;gap:.4em;align-items:center}
.stats{display:flex;gap:2em;align-items:flex-start}.nav a{margin-right:.3em}
table.sortable th{cursor:pointer}th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
tr.better td.diff{background:#d1fadf;font-weight:600}tr.worse td.diff{background:#fee4e2;font-weight:600}
tr.only td{color:#667085;font-style:italic}tr.pair-missed>td{background:#fef3f2}tr.pair-surplus>td{background:#fffaeb}
tr.pair-differs>td:first-child{border-left:4px solid #f79009}tr.pair-same>td:first-child{border-left:4px solid #12b76a}
table.argdiff td{border:none;padding:0 6px;font-size:12px}.arg-differs td,.arg-missing td,.arg-extra td,.arg-unparsed td{background:#fee4e2}
.arg-masked td{color:#98a2b3}.assistant{border-left:2px solid #d0d7de;padding-left:.6em}.call{margin:.3em 0 .3em 1em}
.call pre{margin:.2em 0}details.result summary{cursor:pointer}.plot{margin:.6em 0}.plot.small{display:inline-block;margin-right:1em}
"""

#: Sorts any ``table.sortable`` by a click on a header (numbers by value, text alphabetically; a second click
#: reverses), and on load by ``#sort=N`` or ``#sort=-N`` (column N from 0, ``-`` descending; ``@T`` picks the
#: T-th sortable table), so a sorted view is a link.  A cell's ``data-v`` overrides its text as the sort value.
SORT_SCRIPT = """(function(){
function v(td){var t=td.getAttribute('data-v');if(t===null)t=td.textContent.trim();
 return /^[-+]?[0-9]*[.]?[0-9]+(e[-+]?[0-9]+)?$/i.test(t)?parseFloat(t):t.toLowerCase();}
function sortBy(table,col,desc){var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);
 rows.sort(function(a,b){var x=v(a.cells[col]),y=v(b.cells[col]),c;
  if(typeof x===typeof y){c=x<y?-1:x>y?1:0;}else{c=typeof x==='number'?-1:1;}return desc?-c:c;});
 rows.forEach(function(r){body.appendChild(r);});
 var ths=table.tHead.rows[0].cells;for(var i=0;i<ths.length;i++){ths[i].removeAttribute('aria-sort');}
 ths[col].setAttribute('aria-sort',desc?'descending':'ascending');}
var tables=document.querySelectorAll('table.sortable');
Array.prototype.forEach.call(tables,function(t){var ths=t.tHead.rows[0].cells;
 Array.prototype.forEach.call(ths,function(th,i){th.title='sort by this column';
  th.addEventListener('click',function(){sortBy(t,i,th.getAttribute('aria-sort')==='ascending');});});});
var m=/^#sort=(-?)([0-9]+)(?:@([0-9]+))?$/.exec(location.hash);
if(m){var t=tables[m[3]?+m[3]:0];if(t&&+m[2]<t.tHead.rows[0].cells.length)sortBy(t,+m[2],m[1]==='-');}
})();"""


def esc(value: Any) -> str:
    """``value`` as escaped HTML text (``str`` first)."""
    return html.escape(str(value), quote=True)


def url(*parts: str) -> str:
    """An absolute path of URL-quoted ``parts`` (``url("env", "A/B")`` is ``/env/A%2FB``)."""
    return "/" + "/".join(quote(p, safe="") for p in parts)


def _json(value: Any) -> str:
    return f"<pre>{esc(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))}</pre>"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "", raw_headers: bool = False) -> str:
    """A ``<table>`` with a ``<thead>`` of ``headers`` (escaped unless ``raw_headers``) and a ``<tbody>`` of
    ``rows`` (cells already HTML); ``cls`` its class (``sortable``: :data:`SORT_SCRIPT` sorts it)."""
    head = "".join(f"<th>{h if raw_headers else esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table{f' class={chr(39)}{cls}{chr(39)}' if cls else ''}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, body: str, head: str = "") -> str:
    """A whole HTML document: the navigation bar, ``<h1>`` = ``title``, then ``body`` (already HTML);
    ``head``: more elements for ``<head>`` (already HTML)."""
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{head}"
            f"<title>{esc(title)} · envfactory</title><style>{_CSS}</style></head><body>"
            "<header><a href='/'>Catalog</a><a href='/rollouts'>Rollouts</a><a href='/training'>Training</a></header>"
            f"<main><h1>{esc(title)}</h1>{body}</main>"
            f"<script>{SORT_SCRIPT}</script></body></html>\n")


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
    table_rows = [[f"<a href='{url('env', r['name'])}'>{esc(r['name'])}</a>", esc(r["domain"]),
                   f"{r['tools']} ({r['writes']} writes)", f"{r['tasks']} ({r['multi_turn']} multi-turn)",
                   esc(", ".join(f"{k} {v}" for k, v in sorted(r["splits"].items()))),
                   esc(", ".join(r["states"])), esc(r["image"])]
                  for r in sorted(rows, key=lambda r: (r["domain"], r["name"]))]
    body.append(table(["environment", "domain", "tools", "tasks", "splits", "initial states", "image"], table_rows,
                      cls="sortable"))
    return page("Catalog", "".join(body))


def environment_page(spec: Any, *, state_sizes: dict[str, str], graph_available: bool) -> str:
    """One environment: description, tools (schemas, annotations), initial states, tasks."""
    tools = list(spec.tools.values())
    tasks = list(spec.tasks)
    b = [f"<p>{esc(spec.description)}</p>",
         f"<p class='muted'>domain {esc(spec.domain)} · version {esc(spec.version)} · gym id "
         f"<code>{esc(spec.gym_id)}</code> · {len(tools)} tools · {len(tasks)} tasks</p>"]
    b.append(f"<p><a href='{url('env', spec.name, 'graph')}'>Tool graph</a>"
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
    b.append(table(["tool", "annotations", "description and schemas"], rows))
    b.append("<h2>Initial states</h2>")
    b.append(table(["state", "size"], [[f"<a href='{url('env', spec.name, 'state', s)}'>{esc(s)}</a>",
                                         esc(state_sizes.get(s, ""))] for s in spec.initial_state_names()]))
    b.append("<h2>Tasks</h2>")
    trows = []
    for t in tasks:
        envs = t.envs or [spec.name]
        first = t.turns[0].user
        trows.append([f"<a href='{url('env', spec.name, 'task', t.task_id)}'>{esc(t.task_id)}</a>", esc(t.split),
                      str(len(t.turns)), esc(", ".join(e for e in envs if e)),
                      esc(first if len(first) <= 140 else first[:137] + "...")])
    b.append(table(["task", "split", "turns", "environments", "first user message"], trows, cls="sortable"))
    return page(spec.name, "".join(b))


def task_page(spec: Any, task: Any) -> str:
    """One task: its initial state reference, then per turn the user message, the ground-truth calls
    and the expected outputs."""
    envs = task.envs or [spec.name]
    links = ", ".join(f"<a href='{url('env', e)}'>{esc(e)}</a>" for e in envs)
    episodes = "/rollouts?" + urlencode({"task": task.task_id, "env": spec.name})
    b = [f"<p class='muted'>environment{'s' if len(envs) > 1 else ''} {links} · split "
         f"{esc(task.split)} · {len(task.turns)} turns · <a href='{esc(episodes)}'>its episodes in the loaded "
         "rollouts</a></p>",
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
                f"<p><a href='{url('env', spec.name)}'>back to {esc(spec.name)}</a></p>"
                + table(["field", "records or value"], counts) + _json(state))


def graph_page(env_name: str, picture: str, rows: Sequence[dict[str, Any]], kinds: Sequence[tuple[str, str, int]],
               note: str = "") -> str:
    """The tool graph around one environment: the picture (inline SVG, :mod:`gym_envfactory.ui.graphview`),
    the edge kinds with their counts (``(kind, legend text, count)``), and the ``output → input`` links
    (``producer``, ``output``, ``consumer``, ``input``, ``score``, ``origin``, ``kind``), sortable, grouped by kind."""
    b = [f"<p><a href='{url('env', env_name)}'>back to {esc(env_name)}</a></p>"]
    if note:
        b.append(f"<p class='muted'>{esc(note)}</p>")
    b.append(f"<div class='graph'>{picture}</div>")
    b.append("<h2>Links by kind</h2>")
    b.append(table(["kind", "what", "links"], [[f"<code>{esc(k)}</code>", esc(t), str(n)] for k, t, n in kinds]))
    order = {k: i for i, (k, _, _) in enumerate(kinds)}
    b.append(table(["kind", "producer", "output", "consumer", "input", "score", "origin"],
                   [[esc(r["kind"]), esc(r["producer"]), esc(r["output"]), esc(r["consumer"]), esc(r["input"]),
                     f"{r['score']:.3f}", esc(r["origin"])]
                    for r in sorted(rows, key=lambda r: (order.get(r["kind"], 99), -r["score"]))], cls="sortable links"))
    return page(f"Tool graph: {env_name}", "".join(b))


def graph_building_page(env_name: str, seconds: float, refresh_s: int = 2) -> str:
    """Shown while the tool graph is being built (a background thread): how long it has been building;
    the page reloads itself every ``refresh_s`` seconds until the graph is ready (no script needed)."""
    return page(f"Tool graph: {env_name}",
                f"<p class='building'>Building the tool graph over the catalog… {seconds:.0f} s so far (about a "
                "minute on 2 CPU cores with the embedding model; pass <code>--graph graph.json</code> from "
                "<code>envfactory graph build</code> to skip this). This page reloads itself every "
                f"{int(refresh_s)} s.</p><p><a href='{url('env', env_name)}'>back to {esc(env_name)}</a></p>",
                head=f"<meta http-equiv='refresh' content='{int(refresh_s)}'>")
