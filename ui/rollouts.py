"""Reading ``trajectories.jsonl`` (the ``envfactory rollout --out`` format) into per-turn views.

One record per episode: ``task_id``, ``env``, ``policy``, ``seed``, ``reward``, ``components`` (the
reward's components, with per-turn scores under ``turns`` and the episode's ``state_diff``),
``messages`` (OpenAI chat format: ``system``, ``user``, ``assistant`` with ``tool_calls``, ``tool``),
``errors``, ``perturbations``, ``tools``.  A turn starts at each ``user`` message (docs/contributing.md,
"Words").

Lines are split on ``"\n"`` only, as the writer writes them (``json.dumps(..., ensure_ascii=False)``
leaves U+2028, U+0085 and the like raw inside strings: they are text, not line ends).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_envfactory.errors import DatasetError

__all__ = ["Episode", "RolloutFile", "Turn", "ToolCallView", "load_rollouts", "read_rollouts", "split_turns"]


@dataclass
class ToolCallView:
    """One tool call of a turn: the call the model made and the result the environment gave.

    Attributes:
        call_id: the ``tool_calls[i].id`` of the assistant message (``""`` when absent).
        name: the tool's name.  arguments: the raw argument text as the model wrote it.
        result: the ``tool`` message's content (``None`` when no result came back).
        error: the typed error code when the result is an error (``{"error": {"code": ...}}``), else ``None``.
    """

    call_id: str
    name: str
    arguments: str
    result: str | None = None
    error: str | None = None


@dataclass
class Turn:
    """One turn: the user message, the messages that followed it, the calls, and the turn's reward
    components (``components["turns"][index]``, ``{}`` when the record has none)."""

    index: int
    user: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: list[ToolCallView] = field(default_factory=list)
    components: dict[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    """One line of a ``trajectories.jsonl`` file, with where it came from (``file``, 1-based ``line``).

    ``problem``: why the record cannot be shown (its ``reward`` is not a finite number), naming the file,
    line and field; ``None`` for a record the pages show.
    """

    file: Path
    line: int
    record: dict[str, Any]
    problem: str | None = None

    @property
    def title(self) -> str:
        """``task_id`` (``env``, ``policy``), for lists."""
        r = self.record
        return f"{r.get('task_id', '?')} ({r.get('env', '?')}, {r.get('policy', '?')})"


def _error_code(content: Any) -> str | None:
    if not isinstance(content, str):
        return None
    try:
        data = json.loads(content)
    except ValueError:
        return None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return str(data["error"].get("code", "error"))
    return None


def split_turns(record: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Turn]]:
    """``(messages before the first user message, turns)`` of one episode record.

    Tool results are matched to calls by ``tool_call_id``; a result with no matching call is kept as a
    message of its turn (the view never drops what the file holds).
    """
    comps = record.get("components") or {}
    per_turn = comps.get("turns") if isinstance(comps, dict) else None
    preamble: list[dict[str, Any]] = []
    turns: list[Turn] = []
    for msg in record.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        if msg.get("role") == "user":
            i = len(turns)
            c = per_turn[i] if isinstance(per_turn, list) and i < len(per_turn) and isinstance(per_turn[i], dict) else {}
            turns.append(Turn(index=i, user=str(msg.get("content") or ""), components=c))
            continue
        if not turns:
            preamble.append(msg)
            continue
        t = turns[-1]
        t.messages.append(msg)
        if msg.get("role") == "assistant":
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                args = fn.get("arguments", "")
                t.calls.append(ToolCallView(call_id=str(call.get("id") or ""), name=str(fn.get("name", "?")),
                                            arguments=args if isinstance(args, str) else json.dumps(args)))
        elif msg.get("role") == "tool":
            cid = str(msg.get("tool_call_id") or "")
            for c in t.calls:
                if c.call_id == cid and c.result is None:
                    c.result = str(msg.get("content"))
                    c.error = _error_code(msg.get("content"))
                    break
    return preamble, turns


def _shape_problem(rec: dict[str, Any]) -> tuple[str, str] | None:
    """``(field, message)`` for the first value of ``rec`` whose type the pages cannot show, else ``None``."""
    for i, m in enumerate(rec["messages"]):
        if not isinstance(m, dict):
            return f"messages[{i}]", "a message must be a JSON object"
        calls = m.get("tool_calls")
        if calls is None:
            continue
        if not isinstance(calls, list):
            return f"messages[{i}].tool_calls", "tool_calls must be a list"
        for j, c in enumerate(calls):
            if not isinstance(c, dict) or not isinstance(c.get("function", {}), dict):
                return f"messages[{i}].tool_calls[{j}]", "a tool call must be an object with a 'function' object"
    for key in ("errors", "perturbations"):
        if rec.get(key) is not None and not isinstance(rec[key], list):
            return key, f"{key} must be a list"
    comps = rec.get("components")
    if comps is None:
        return None
    if not isinstance(comps, dict):
        return "components", "components must be an object"
    for key in ("turns", "state_diff"):
        v = comps.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, dict) for x in v)):
            return f"components.{key}", f"components.{key} must be a list of objects"
    for key in ("vacuous", "missed"):
        v = comps.get(key)
        if v is not None and not isinstance(v, list):
            return f"components.{key}", f"components.{key} must be a list"
    return None


@dataclass
class RolloutFile:
    """What :func:`read_rollouts` found in one file: its ``episodes`` in file order (malformed records
    included, with their ``problem``) and ``notes`` on what was skipped (an incomplete last line)."""

    path: Path
    episodes: list[Episode] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _reward_problem(rec: dict[str, Any]) -> str | None:
    """Why ``rec["reward"]`` cannot be shown (absent or ``null`` is fine: shown as n/a), else ``None``."""
    rw = rec.get("reward")
    if rw is None:
        return None
    if isinstance(rw, bool) or not isinstance(rw, (int, float)):
        return f"reward must be a number, got {type(rw).__name__}"
    try:
        finite = math.isfinite(float(rw))
    except OverflowError:  # a 400-digit integer: no float holds it
        finite = False
    return None if finite else f"reward must be a finite number, got {str(rw)[:40]}{'...' if len(str(rw)) > 40 else ''}"


def read_rollouts(path: str | Path) -> RolloutFile:
    """Every episode of a ``trajectories.jsonl`` file, in file order (blank lines skipped).

    Lines end at ``"\n"`` only (module docstring).  A last line with no newline at its end that is not
    JSON (a writer still appending) is skipped with a note.  A record whose ``reward`` is not a finite
    number is kept as an :class:`Episode` with a ``problem`` (the pages show it as malformed and the
    rest of the file as usual).

    Raises:
        DatasetError: the file is missing, or a (complete) line is not UTF-8, not a JSON object with
            ``messages``, nested too deeply to parse, or holds values the pages cannot show (naming the file,
            line and field); nothing is loaded then.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot read the rollouts file: {exc.strerror or exc}", file=str(p)) from None
    out = RolloutFile(p)
    lines = data.split(b"\n")
    for n, chunk in enumerate(lines, start=1):
        last = n == len(lines)  # the text after the final "\n": non-blank only when a writer is mid-line
        try:
            raw = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            if last:
                out.notes.append(f"{p}:{n}: skipped an incomplete last line (no newline at its end, cut inside "
                                 f"a character: a writer still appending?)")
                break
            raise DatasetError(f"not UTF-8 text: {exc.reason} at byte {exc.start} of the line", file=str(p),
                               line=n) from None
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except RecursionError:  # a line nested deeper than the parser goes: this line is bad, not the server
            raise DatasetError("nested too deeply to read (JSON arrays or objects inside one another beyond "
                               "Python's recursion limit)", file=str(p), line=n) from None
        except ValueError as exc:
            if last:
                out.notes.append(f"{p}:{n}: skipped an incomplete last line (no newline at its end and not JSON "
                                 f"yet: a writer still appending?)")
                break
            raise DatasetError(f"not JSON: {exc}", file=str(p), line=n) from None
        if not isinstance(rec, dict):
            raise DatasetError("an episode record must be a JSON object", file=str(p), line=n)
        if not isinstance(rec.get("messages"), list):
            raise DatasetError("an episode record needs a 'messages' list (the `envfactory rollout --out` format)",
                               file=str(p), line=n, field="messages")
        problem = _shape_problem(rec)
        if problem is not None:
            raise DatasetError(problem[1], file=str(p), line=n, field=problem[0])
        why = _reward_problem(rec)
        out.episodes.append(Episode(file=p, line=n, record=rec,
                                    problem=None if why is None else str(DatasetError(why, file=str(p), line=n,
                                                                                       field="reward"))))
    return out


def load_rollouts(path: str | Path) -> list[Episode]:
    """The episodes of :func:`read_rollouts` (its notes dropped).

    Raises:
        DatasetError: as :func:`read_rollouts`.
    """
    return read_rollouts(path).episodes
