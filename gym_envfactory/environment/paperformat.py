"""EnvFactory's published RL rows read as tasks (arXiv 2605.18703 §3.5; docs/synthesis.md, "EnvFactory's
own data format").

The paper's RL data is one row per user turn (VeRL parquet, or JSON / JSON Lines with the same fields)::

    prompt        JSON text of the messages: the earlier turns flattened to user/assistant text (tool calls
                  as <tool_call> blocks in an assistant message, tool results as <tool_response> blocks in
                  a user message), then the turn's user query
    data_source   "EnvFactory"          agent_name  "tool_agent"          ability  "tool_use"
    reward_model  {"style": "rule", "ground_truth": JSON text of [{"name", "arguments", "masked_arguments"}]}
    extra_info    {"mcp_factory_kwargs": {"mcp_servers": JSON list of the turn's servers,
                                          "initial_config": JSON {server: state before the turn},
                                          "final_config": JSON {server: reference state after it}}}

:func:`tasks_from_rows` turns such rows into tasks of this gym: each server is mapped to an environment (a
mapping, else :func:`server_environment`'s name rule), tool names lose their ``<server><separator>`` prefix,
and the rows of one conversation become one multi-turn task.  A row continues another when the other's
``prompt`` is a prefix of its own; the turns between them that the file holds no row for (the paper writes
no row for a turn without tool calls) become turns with no ground truth, and must make no tool call.  The
task starts from the first row's ``initial_config``; each later row's ``initial_config`` must equal the
``final_config`` of the row before (a conversation's state carries over).  ``final_config`` is the
reference state after each turn: ``envfactory tasks import`` replays the ground truth and refuses a task
whose replayed state differs from it (:mod:`gym_envfactory.cli.taskimport`).

Every refusal is a :class:`~gym_envfactory.errors.DatasetError` naming the file, the row (1-based, as
``line``) and the field (``prompt[3]``, ``reward_model.ground_truth[0].name``,
``extra_info.mcp_factory_kwargs.initial_config`` ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_envfactory.environment.catalog import get_environment, list_environments
from gym_envfactory.errors import DatasetError, EnvFactoryError, SpecError

__all__ = ["PaperRow", "ImportedTask", "TOOL_SEPARATORS", "read_rows", "parse_rl_row", "is_paper_rows_file",
           "server_environment", "tasks_from_rows", "tasks_from_sft_rows", "is_tool_response", "tool_call_blocks"]

#: The separators tried, in order, between a server name and a tool name (``Stocks-get_quote``,
#: ``stocks__get_quote``) when none is given.
TOOL_SEPARATORS = ("-", "__", ".", ":", "_")
KWARGS = "extra_info.mcp_factory_kwargs"
_SUFFIX = re.compile(r"(API|Api|Service|Server|Client|_api|_server|_service|_mcp|MCP|Mcp)$")


@dataclass
class PaperRow:
    """One parsed RL row.  ``number``: its 1-based position in the file; ``messages``: the prompt;
    ``calls``: the ground truth (``name``, ``arguments``, ``masked_arguments``); ``servers``: the turn's
    servers; ``initial``/``final``: ``{server: state}``; ``meta``: ``data_source``, ``agent_name``,
    ``ability``."""

    number: int
    messages: list[dict[str, Any]]
    calls: list[dict[str, Any]]
    servers: list[str]
    initial: dict[str, Any]
    final: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def query(self) -> str:
        """The turn's user query (the prompt's last message)."""
        return str(self.messages[-1]["content"])


@dataclass
class ImportedTask:
    """A task built from rows: ``task`` (a task JSON object), ``rows`` (one per turn; ``None`` for a turn
    the file holds no row for) and the ``servers`` of each environment (``{env: server}``)."""

    task: dict[str, Any]
    rows: list[PaperRow | None]
    servers: dict[str, str]


def is_tool_response(message: Mapping[str, Any]) -> bool:
    """True for a flattened tool-result message (a user message holding ``<tool_response>`` blocks)."""
    return message.get("role") == "user" and str(message.get("content") or "").lstrip().startswith("<tool_response>")


def read_rows(path: str | Path) -> list[tuple[int, Any]]:
    """``(row number, row)`` of a parquet file (pyarrow), a JSON file holding a list of rows, or JSON Lines.

    Raises:
        DatasetError: the file cannot be read, a line is not JSON, a JSON file is not a list; ImportError:
            a parquet file without pyarrow (the ``export`` extra).
    """
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return list(enumerate(pq.read_table(path).to_pylist(), 1))
        except (OSError, ValueError) as exc:
            raise DatasetError(f"cannot read the parquet file: {exc}", file=path) from None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read the rows file: {exc}", file=path) from None
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise DatasetError(f"not JSON: {_json_problem(exc)}", file=path) from None
        return list(enumerate(rows, 1))
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append((n, json.loads(line)))
            except (ValueError, RecursionError) as exc:
                raise DatasetError(f"not JSON: {_json_problem(exc)}", file=path, line=n) from None
    return out


#: The most of a file :func:`is_paper_rows_file` reads to find its first record (bytes, as characters).
FIRST_RECORD_LIMIT = 1 << 24


def _json_problem(exc: BaseException) -> str:
    """What a failed ``json.loads`` says; nesting too deep for the parser (``RecursionError``) in words."""
    return "nested too deeply to parse" if isinstance(exc, RecursionError) else str(exc)


def _first_record(path: Path) -> Any:
    """The first JSON value of a JSON Lines file (its first line) or of a JSON list (its first item), read
    in growing chunks up to :data:`FIRST_RECORD_LIMIT`; ``None`` when there is none within it."""
    decoder = json.JSONDecoder()
    buf, size = "", 1 << 16
    with path.open(encoding="utf-8") as fh:
        while True:
            chunk = fh.read(size)
            buf += chunk
            text = buf.lstrip()
            if text.startswith("["):
                text = text[1:].lstrip()
            try:
                return decoder.raw_decode(text)[0]
            except RecursionError:
                return None
            except ValueError:
                if not chunk or len(buf) >= FIRST_RECORD_LIMIT:
                    return None
            size = min(2 * size, FIRST_RECORD_LIMIT)


def is_paper_rows_file(path: str | Path) -> bool:
    """True when ``path`` holds the paper's RL rows rather than tasks: a parquet file, or JSON (Lines)
    whose first record (first line, or first item of a list) is an object with ``prompt``,
    ``reward_model`` and ``extra_info`` (a later record's keys are not looked at)."""
    path = Path(path)
    if path.suffix == ".parquet":
        return True
    try:
        first = _first_record(path)
    except (OSError, UnicodeDecodeError):
        return False
    return isinstance(first, dict) and all(k in first for k in ("prompt", "reward_model", "extra_info"))


def _json(value: Any, *, file: Path | None, line: int, field: str) -> Any:
    """``value`` parsed when it is JSON text (the paper writes nested values as JSON strings).
    Raises :class:`DatasetError` (file, row, field) for text that is not JSON or nests too deeply."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError) as exc:
            raise DatasetError(f"row {line}: not JSON text: {_json_problem(exc)}", file=file, line=line,
                               field=field) from None
    return value


def parse_rl_row(obj: Any, *, file: Path | None = None, line: int = 0) -> PaperRow:
    """One row (module docstring) checked and parsed.  Raises :class:`DatasetError` (file, row, field)."""
    def bad(message: str, where: str) -> DatasetError:
        return DatasetError(f"row {line}: {message}", file=file, line=line, field=where)

    if not isinstance(obj, Mapping):
        raise bad(f"a row is an object, got {type(obj).__name__}", "row")
    if isinstance(obj.get("extra_info"), Mapping) and "reset_options" in obj["extra_info"]:
        raise bad("a row of `envfactory export rl` (its episode is named by extra_info.reset_options), not EnvFactory's "
                  "row format: give the tasks file it was exported from, or export with --format envfactory",
                  "extra_info.reset_options")
    messages = _json(obj.get("prompt"), file=file, line=line, field="prompt")
    if not isinstance(messages, list) or not messages:
        raise bad("prompt must be a non-empty list of messages (JSON text)", "prompt")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or m.get("role") not in ("system", "user", "assistant", "tool") \
                or not isinstance(m.get("content"), str):
            raise bad("a message is {role: system|user|assistant|tool, content: text}", f"prompt[{i}]")
    if messages[-1]["role"] != "user" or is_tool_response(messages[-1]):
        raise bad("the prompt must end with the turn's user query", f"prompt[{len(messages) - 1}]")
    reward = obj.get("reward_model")
    if not isinstance(reward, Mapping):
        raise bad("reward_model must be an object with ground_truth", "reward_model")
    calls = _json(reward.get("ground_truth"), file=file, line=line, field="reward_model.ground_truth")
    if not isinstance(calls, list):
        raise bad("ground_truth must be a list of {name, arguments, masked_arguments} (JSON text)",
                  "reward_model.ground_truth")
    for i, c in enumerate(calls):
        at = f"reward_model.ground_truth[{i}]"
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str) or not c["name"]:
            raise bad("a ground-truth call needs a name", f"{at}.name")
        args = _json(c.get("arguments", {}), file=file, line=line, field=f"{at}.arguments")
        if not isinstance(args, Mapping):
            raise bad("arguments must be an object", f"{at}.arguments")
        masked = c.get("masked_arguments") or []
        if not isinstance(masked, list) or not all(isinstance(k, str) for k in masked):
            raise bad("masked_arguments must be a list of argument names", f"{at}.masked_arguments")
        calls[i] = {"name": c["name"], "arguments": dict(args), "masked_arguments": list(masked)}
    extra = _json(obj.get("extra_info"), file=file, line=line, field="extra_info")
    kwargs = extra.get("mcp_factory_kwargs") if isinstance(extra, Mapping) else None
    kwargs = _json(kwargs, file=file, line=line, field=KWARGS)
    if not isinstance(kwargs, Mapping):
        raise bad("extra_info.mcp_factory_kwargs (mcp_servers, initial_config, final_config) is missing", KWARGS)
    servers = _json(kwargs.get("mcp_servers"), file=file, line=line, field=f"{KWARGS}.mcp_servers")
    if not isinstance(servers, list) or not servers or not all(isinstance(s, str) and s for s in servers):
        raise bad("mcp_servers must be a non-empty list of server names", f"{KWARGS}.mcp_servers")
    configs = {}
    for key in ("initial_config", "final_config"):
        cfg = _json(kwargs.get(key), file=file, line=line, field=f"{KWARGS}.{key}")
        if not isinstance(cfg, Mapping):
            raise bad(f"{key} must be an object of server states", f"{KWARGS}.{key}")
        for s in servers:
            if not isinstance(cfg.get(s), Mapping):
                raise bad(f"{key} has no state (an object) for server {s!r}", f"{KWARGS}.{key}.{s}")
        configs[key] = {s: cfg[s] for s in servers}
    meta = {k: obj[k] for k in ("data_source", "agent_name", "ability") if isinstance(obj.get(k), str)}
    return PaperRow(line, [dict(m) for m in messages], calls, list(dict.fromkeys(servers)),
                    configs["initial_config"], configs["final_config"], meta)


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _camel(raw: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", raw.strip()) if p)


def server_environment(server: str, known: Sequence[str] | None = None) -> str | None:
    """The environment a server name stands for, by the importer's name rule: the server name in
    CamelCase without an ``API``/``Service``/``Server``/``Client``/``MCP`` suffix (``hotel_booking_api`` →
    ``HotelBooking``), matched case- and punctuation-blind against the environments' names and against an
    imported environment's source file stem and API class; ``None`` when none matches.

    Raises:
        SpecError: no environment is named like the server and several imported ones come from a source
            file or API class of its name (the same server imported twice): name one with a mapping.
    """
    known = list(list_environments() if known is None else known)
    wanted = {_key(server), _key(_SUFFIX.sub("", server)), _key(_SUFFIX.sub("", _camel(server)))}
    for name in known:
        if _key(name) in wanted:
            return name
    found = []
    for name in known:
        try:
            prov = get_environment(name).manifest.provenance
        except EnvFactoryError:
            continue
        extra = prov.model_dump() if hasattr(prov, "model_dump") else dict(prov or {})
        names = [Path(str(extra.get("source") or "")).stem, str(extra.get("api_class") or "")]
        if any(n and (_key(n) in wanted or _key(_SUFFIX.sub("", n)) in wanted) for n in names):
            found.append(name)
    if len(found) > 1:
        raise SpecError(f"server {server!r} was imported as several environments ({', '.join(found)}): "
                        f"name the one meant in the mapping")
    return found[0] if found else None


class _Resolver:
    """Server → environment and prefixed tool name → (environment, tool), with file/row/field errors."""

    def __init__(self, mapping: Mapping[str, str] | None, separator: str | None, file: Path | None) -> None:
        self.mapping = dict(mapping or {})
        self.separators = (separator,) if separator else TOOL_SEPARATORS
        self.file = file
        self.envs: dict[str, str] = {}
        self.tools: dict[str, list[str]] = {}
        self.used_separator: str | None = None
        self.known = list_environments()

    def env(self, server: str, row: PaperRow | int, where: str) -> str:
        number = row if isinstance(row, int) else row.number
        if server not in self.envs:
            try:
                name = self.mapping.get(server) or server_environment(server, self.known)
            except SpecError as exc:
                raise DatasetError(f"row {number}: {exc} (--map servers.json: {{\"{server}\": \"Environment\"}})",
                                   file=self.file, line=number, field=where) from None
            if name is None or name not in self.known:
                hint = (f"the mapping names {name!r}, no environment" if name else
                        "no environment matches its name") + "; give --map servers.json ({\"server\": \"Environment\"})"
                raise DatasetError(f"row {number}: server {server!r}: {hint}", file=self.file, line=number,
                                   field=where)
            self.envs[server] = name
            self.tools[name] = list(get_environment(name).tools)
        return self.envs[server]

    def split_tool(self, name: str, number: int, where: str) -> tuple[str, str, str]:
        """``(server, environment, tool)`` of a tool name in a row that lists no servers (an SFT row):
        ``<server><separator><tool>``, or a bare name of an environment of the mapping."""
        for sep in self.separators:
            server, found, tool = name.partition(sep)
            if not found or not server:
                continue
            env = self.mapping.get(server) or server_environment(server, self.known)
            if env is not None and env in self.known:
                self.env(server, number, where)
                if tool in self.tools[env]:
                    self.used_separator = self.used_separator or sep
                    return server, env, tool
        for server in self.mapping:
            env = self.env(server, number, where)
            if name in self.tools[env]:
                return server, env, name
        raise DatasetError(f"row {number}: tool {name!r} is no '<server>{'|'.join(self.separators)}<tool>' of a known "
                           f"environment, nor a tool of an environment the mapping names (--map, --separator)",
                           file=self.file, line=number, field=where)

    def tool(self, name: str, row: PaperRow, where: str) -> tuple[str, str]:
        envs = [(s, self.env(s, row, f"{KWARGS}.mcp_servers")) for s in row.servers]
        for _, env in envs:
            if name in self.tools[env]:
                return env, name
        for server, env in envs:
            for sep in self.separators:
                prefix = server + sep
                if name.lower().startswith(prefix.lower()) and name[len(prefix):] in self.tools[env]:
                    self.used_separator = self.used_separator or sep
                    return env, name[len(prefix):]
        names = ", ".join(f"{s} ({e})" for s, e in envs)
        raise DatasetError(f"row {row.number}: tool {name!r} is no tool of {names}, with or without a "
                           f"'<server>{'|'.join(self.separators)}' prefix (--separator)", file=self.file,
                           line=row.number, field=where)


def _calls_in(messages: Iterable[Mapping[str, Any]]) -> bool:
    return any(m.get("role") == "assistant" and "<tool_call>" in str(m.get("content") or "") for m in messages)


def _earlier_turns(row: PaperRow, start: int, file: Path | None) -> list[str]:
    """The user queries of ``row``'s prompt from ``start`` on (before its own query) whose turns the file
    holds no row for; each must make no tool call (module docstring)."""
    history = row.messages[:-1]
    queries = [i for i in range(start, len(history)) if history[i]["role"] == "user" and not is_tool_response(history[i])]
    for n, i in enumerate(queries):
        end = queries[n + 1] if n + 1 < len(queries) else len(history)
        if _calls_in(history[i:end]):
            raise DatasetError(f"row {row.number}: an earlier turn of the prompt makes tool calls but no row of "
                               f"the file holds it, so the state it starts from is unknown", file=file,
                               line=row.number, field=f"prompt[{i}]")
    if not queries and start == 0 and _calls_in(history):
        raise DatasetError(f"row {row.number}: the prompt holds tool calls before any user query", file=file,
                           line=row.number, field="prompt[0]")
    return [history[i]["content"] for i in queries]


def tasks_from_rows(rows: Sequence[tuple[int, Any]], *, file: str | Path | None = None,
                    mapping: Mapping[str, str] | None = None, separator: str | None = None, split: str = "train",
                    id_prefix: str | None = None,
                    on_bad: Callable[[DatasetError], None] | None = None) -> list[ImportedTask]:
    """Tasks from the paper's RL rows (module docstring), one per conversation (a chain of rows).

    Args:
        rows: ``(row number, row)`` pairs (:func:`read_rows`).
        file: the file they came from (named in errors and in the tasks' provenance).
        mapping: ``{server: environment}``; servers it leaves out follow :func:`server_environment`.
        separator: the separator between server and tool names; ``None``: :data:`TOOL_SEPARATORS` in turn.
        split: the tasks' split.
        id_prefix: task ids are ``<id_prefix><first row>``; default ``<file stem>-row``.
        on_bad: handed each refused row or conversation (which is then left out); ``None``: raise it.

    Raises:
        DatasetError: a malformed row (file, row, field), an unknown server or tool, a conversation whose
            state does not carry over from one row to the next.
    """
    path = Path(file) if file is not None else None
    prefix = id_prefix if id_prefix is not None else f"{path.stem if path else 'envfactory'}-row"
    resolver = _Resolver(mapping, separator, path)

    def refuse(err: DatasetError) -> None:
        if on_bad is None:
            raise err
        on_bad(err)

    parsed: list[PaperRow] = []
    for number, obj in rows:
        try:
            parsed.append(parse_rl_row(obj, file=path, line=number))
        except DatasetError as err:
            refuse(err)
    by_prompt = {json.dumps(r.messages, sort_keys=True): r for r in parsed}
    parent: dict[int, tuple[PaperRow, int]] = {}
    for r in parsed:
        history = r.messages[:-1]
        for k in range(len(history), 0, -1):
            if history[k - 1]["role"] == "user" and not is_tool_response(history[k - 1]):
                p = by_prompt.get(json.dumps(r.messages[:k], sort_keys=True))
                if p is not None and p is not r:
                    parent[r.number] = (p, k)
                    break
    children: dict[int, list[PaperRow]] = {}
    for r in parsed:
        if r.number in parent:
            children.setdefault(parent[r.number][0].number, []).append(r)
    out: list[ImportedTask] = []

    def chains(head: PaperRow) -> list[list[PaperRow]]:
        """The conversations from ``head``: each path to a row no other row continues, depth first (a
        stack, not recursion: a conversation may have thousands of rows)."""
        paths, stack = [], [head]
        while stack:
            r = stack.pop()
            kids = children.get(r.number, [])
            if not kids:
                path = [r]
                while path[-1] is not head:
                    path.append(parent[path[-1].number][0])
                paths.append(path[::-1])
            stack.extend(reversed(kids))
        return paths

    for head in (r for r in parsed if r.number not in parent):
        paths = chains(head)
        for chain in paths:
            tid = f"{prefix}{head.number}" if len(paths) == 1 else f"{prefix}{head.number}-{chain[-1].number}"
            try:
                out.append(_task(chain, parent, resolver, tid, split, path))
            except DatasetError as err:
                refuse(err)
    return out


def _task(chain: list[PaperRow], parent: Mapping[int, tuple[PaperRow, int]], resolver: _Resolver, task_id: str,
          split: str, file: Path | None) -> ImportedTask:
    turns: list[dict[str, Any]] = []
    turn_rows: list[PaperRow | None] = []
    initial: dict[str, Any] = {}
    servers: dict[str, str] = {}
    state: dict[str, Any] = {}  # server -> the state the conversation has reached
    for j, row in enumerate(chain):
        start = parent[row.number][1] if row.number in parent else 0
        skipped = _earlier_turns(row, start, file)
        for q in skipped:
            turns.append({"user": q})
            turn_rows.append(None)
        for s in row.servers:
            env = resolver.env(s, row, f"{KWARGS}.mcp_servers")
            if servers.get(env, s) != s:
                raise DatasetError(f"row {row.number}: servers {servers[env]!r} and {s!r} both map to {env}",
                                   file=file, line=row.number, field=f"{KWARGS}.mcp_servers", task_id=task_id)
            servers[env] = s
            if s in state and state[s] != row.initial[s]:
                before = chain[j - 1].number if j else row.number
                raise DatasetError(f"row {row.number}: initial_config of {s!r} differs from the final_config of row "
                                   f"{before}, the turn before it in the conversation", file=file, line=row.number,
                                   field=f"{KWARGS}.initial_config.{s}", task_id=task_id)
            if s not in state:
                initial[env] = row.initial[s]
        ground_truth = []
        for i, c in enumerate(row.calls):
            _, tool = resolver.tool(c["name"], row, f"reward_model.ground_truth[{i}].name")
            call: dict[str, Any] = {"name": tool, "arguments": c["arguments"]}
            if c["masked_arguments"]:
                call["masked_arguments"] = c["masked_arguments"]
            ground_truth.append(call)
        turns.append({"user": row.query, "ground_truth": ground_truth})
        turn_rows.append(row)
        state.update(row.final)
    envs = list(initial)
    head = chain[0]
    provenance: dict[str, Any] = {"kind": "imported", "format": "envfactory", "rows": [r.number for r in chain],
                                  "servers": servers, **head.meta}
    if file is not None:
        provenance["source"] = str(file)
    if resolver.used_separator:
        provenance["tool_separator"] = resolver.used_separator
    task: dict[str, Any] = {
        "task_id": task_id, "env": envs[0] if len(envs) == 1 else envs, "split": split,
        "initial_state": {"state": initial[envs[0]]} if len(envs) == 1 else {e: {"state": initial[e]} for e in envs},
        "turns": turns, "provenance": provenance}
    return ImportedTask(task, turn_rows, servers)


# ------------------------------------------------------------------------------------------- SFT rows

_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_THINK = re.compile(r"<think>.*?</think>\s*", re.S)


def tool_call_blocks(text: str) -> list[str]:
    """The JSON texts of the ``<tool_call>`` blocks of a model output (a leading ``<think>`` block skipped)."""
    return _CALL.findall(_THINK.sub("", text))


def _sft_steps(obj: Any, *, file: Path | None, line: int) -> list[tuple[str, str]]:
    """``(input, output)`` steps of an alpaca row: its ``history`` pairs, then its own ``instruction``
    (with ``input`` appended when not empty) and ``output``; inputs stripped as the paper's instructions are."""
    def bad(message: str, where: str) -> DatasetError:
        return DatasetError(f"row {line}: {message}", file=file, line=line, field=where)

    if not isinstance(obj, Mapping):
        raise bad(f"a row is an object, got {type(obj).__name__}", "row")
    for key in ("instruction", "output"):
        if not isinstance(obj.get(key), str):
            raise bad(f"an alpaca row needs {key} (text)", key)
    history = obj.get("history") or []
    if not isinstance(history, list):
        raise bad("history must be a list of [instruction, output] pairs", "history")
    steps = []
    for i, pair in enumerate(history):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise bad("a history entry is [instruction, output] (two texts)", f"history[{i}]")
        steps.append((pair[0].strip(), pair[1]))
    extra = obj.get("input") or ""
    steps.append(((obj["instruction"] + ("\n" + extra if extra else "")).strip(), obj["output"]))
    return steps


def _failed(response: str) -> bool:
    """The paper's rule for a failed call (its data_process.py): the tool response says Fail or Error."""
    return "Fail" in response or "Error" in response


def tasks_from_sft_rows(rows: Sequence[tuple[int, Any]], *, file: str | Path | None = None,
                        mapping: Mapping[str, str] | None = None, separator: str | None = None,
                        split: str = "train", id_prefix: str | None = None, initial_state: str | None = None,
                        on_bad: Callable[[DatasetError], None] | None = None) -> list[ImportedTask]:
    """Tasks from the paper's SFT rows (LlamaFactory alpaca: ``system``, ``instruction``, ``input``,
    ``output`` with ``<tool_call>`` blocks, ``history``), one per conversation.

    The rows of a conversation repeat its earlier steps in ``history``; the row whose steps no other row
    continues ends one, and its steps are the task's: a step whose input is not ``<tool_response>`` blocks
    opens a user turn, the ``<tool_call>`` blocks of the turn's outputs are its ground truth (a call whose
    response says ``Fail`` or ``Error``, the paper's own filter, is left out: it changed nothing). Tool
    names are ``<server><separator><tool>`` (servers mapped as for RL rows) or, with a mapping, bare. The
    rows carry no state: the task starts from ``initial_state`` (a named initial state of its
    environments, default their default) and has no reference state but its replay.

    Raises:
        DatasetError: (file, row, field) a malformed row, a call that is not ``{"name", "arguments"}``
            JSON, an unknown server or tool; without ``on_bad``.
    """
    path = Path(file) if file is not None else None
    prefix = id_prefix if id_prefix is not None else f"{path.stem if path else 'envfactory'}-row"
    resolver = _Resolver(mapping, separator, path)

    def refuse(err: DatasetError) -> None:
        if on_bad is None:
            raise err
        on_bad(err)

    parsed: list[tuple[int, list[tuple[str, str]]]] = []
    for number, obj in rows:
        try:
            parsed.append((number, _sft_steps(obj, file=path, line=number)))
        except DatasetError as err:
            refuse(err)
    continued = {json.dumps(steps[:n]) for _, steps in parsed for n in range(1, len(steps))}
    out: list[ImportedTask] = []
    seen: set[str] = set()
    for number, steps in parsed:
        key = json.dumps(steps)
        if key in continued or key in seen:
            continue
        seen.add(key)
        try:
            out.append(_sft_task(number, steps, resolver, f"{prefix}{number}", split, initial_state))
        except DatasetError as err:
            refuse(err)
    return out


def _sft_task(number: int, steps: list[tuple[str, str]], resolver: _Resolver, task_id: str, split: str,
              initial_state: str | None) -> ImportedTask:
    turns: list[dict[str, Any]] = []
    servers: dict[str, str] = {}
    envs: list[str] = []
    for i, (inp, out) in enumerate(steps):
        where = "output" if i == len(steps) - 1 else f"history[{i}][1]"
        if not inp.startswith("<tool_response>"):
            turns.append({"user": inp, "ground_truth": []})
        elif not turns:
            raise DatasetError(f"row {number}: tool responses before any user instruction", file=resolver.file,
                               line=number, field="history[0][0]" if len(steps) > 1 else "instruction")
        response = steps[i + 1][0] if i + 1 < len(steps) else ""
        if _failed(response) and response.startswith("<tool_response>"):
            continue
        for text in tool_call_blocks(out):
            try:
                call = json.loads(text)
            except (ValueError, RecursionError):
                call = None
            if not (isinstance(call, Mapping) and isinstance(call.get("name"), str)
                    and isinstance(call.get("arguments", {}), Mapping)):
                raise DatasetError(f"row {number}: a <tool_call> block is not {{\"name\", \"arguments\"}} JSON",
                                   file=resolver.file, line=number, field=where, task_id=task_id)
            server, env, tool = resolver.split_tool(call["name"], number, where)
            if servers.get(env, server) != server:
                raise DatasetError(f"row {number}: servers {servers[env]!r} and {server!r} both map to {env}",
                                   file=resolver.file, line=number, field=where, task_id=task_id)
            servers[env] = server
            if env not in envs:
                envs.append(env)
            turns[-1]["ground_truth"].append({"name": tool, "arguments": dict(call.get("arguments") or {})})
    if not envs:
        raise DatasetError(f"row {number}: the conversation makes no tool call: nothing to check", file=resolver.file,
                           line=number, field="output", task_id=task_id)
    for turn in turns:
        if not turn["ground_truth"]:
            del turn["ground_truth"]
    provenance: dict[str, Any] = {"kind": "imported", "format": "envfactory-sft", "rows": [number],
                                  "servers": servers}
    if resolver.file is not None:
        provenance["source"] = str(resolver.file)
    if resolver.used_separator:
        provenance["tool_separator"] = resolver.used_separator
    task: dict[str, Any] = {"task_id": task_id, "env": envs[0] if len(envs) == 1 else envs, "split": split,
                            "turns": turns, "provenance": provenance}
    if initial_state is not None:
        task["initial_state"] = initial_state if len(envs) == 1 else {e: initial_state for e in envs}
    return ImportedTask(task, [None] * len(turns), servers)
