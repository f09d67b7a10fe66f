"""Refusals of EnvFactory's RL rows name the file, the row and the row's own field (docs/synthesis.md,
"EnvFactory's own data format"), also when the refusal comes from reading or replaying the task the rows were
converted to; hostile rows (a very long conversation, a prompt nested past the parser's depth) give a typed
error or a task, never a traceback; a rows file is recognised by its first record alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gym_envfactory.cli import app
from gym_envfactory.cli.taskimport import import_rows
from gym_envfactory.environment.paperformat import is_paper_rows_file, read_rows, tasks_from_rows
from gym_envfactory.errors import DatasetError

ROWS = Path(__file__).parent / "fixtures" / "envfactory_rl_rows.jsonl"
KW = "extra_info.mcp_factory_kwargs"


def _rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in ROWS.read_text().splitlines()]


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _edit_gt(row: dict[str, Any], **changes: Any) -> None:
    calls = json.loads(row["reward_model"]["ground_truth"])
    calls[0].update(changes)
    row["reward_model"]["ground_truth"] = json.dumps(calls)


def _wrong_books(row: dict[str, Any]) -> None:
    kw = row["extra_info"]["mcp_factory_kwargs"]
    state = json.loads(kw["initial_config"])
    state["library_api"]["books"] = "oops"
    kw["initial_config"] = json.dumps(state)


def _unknown_argument(row: dict[str, Any]) -> None:
    args = json.loads(row["reward_model"]["ground_truth"])[0]["arguments"]
    _edit_gt(row, arguments={**args, "zzz": 1})


@pytest.mark.parametrize(("row", "edit", "field", "says"), [
    (1, _wrong_books, f"{KW}.initial_config.library_api.books", "initial_config of 'library_api' is no state"),
    (2, _unknown_argument, "reward_model.ground_truth[0].arguments.zzz", "unknown parameter"),
    (2, lambda r: _edit_gt(r, masked_arguments=["nope"]), "reward_model.ground_truth[0].masked_arguments",
     "not parameters"),
])
def test_a_refusal_after_conversion_names_the_row_and_its_field(library, tmp_path: Path, row: int, edit: Any,
                                                                 field: str, says: str) -> None:
    rows = _rows()
    edit(rows[row - 1])
    path = _write(tmp_path / "bad.jsonl", rows)
    refused: list[DatasetError] = []
    tasks = import_rows(path, on_bad=refused.append)
    assert [t["task_id"] for t in tasks] == ["bad-row3"]  # the other conversation is kept
    [err] = refused
    assert (err.file, err.line, err.field) == (str(path), row, field), str(err)
    assert says in str(err) and f"row {row}:" in str(err)
    res = CliRunner().invoke(app, ["tasks", "import", str(path), "--out", str(tmp_path / "t.jsonl")])
    assert res.exit_code == 0 and f"refused: {err}" in res.output.replace("\n", "")
    assert f"{path}:{row} field '{field}'" in res.output.replace("\n", "")


def _conversation_rows(n: int) -> list[tuple[int, Any]]:
    rows: list[tuple[int, Any]] = []
    messages: list[dict[str, str]] = []
    for i in range(1, n + 1):
        messages = [*messages, {"role": "user", "content": f"q{i}"}]
        rows.append((i, {"prompt": json.dumps(messages), "reward_model": {"ground_truth": "[]"},
                         "extra_info": {"mcp_factory_kwargs": {"mcp_servers": '["library_api"]',
                                                               "initial_config": '{"library_api": {}}',
                                                               "final_config": '{"library_api": {}}'}}}))
    return rows


def test_a_conversation_of_thousands_of_rows_is_one_task(library) -> None:
    n = 1100  # past the interpreter's default recursion limit (1000)
    [item] = tasks_from_rows(_conversation_rows(n))  # no on_bad: a refusal would raise
    assert [r.number for r in item.rows if r is not None] == list(range(1, n + 1))
    assert len(item.task["turns"]) == n


def test_branches_still_give_one_task_each_in_row_order(library) -> None:
    rows = _conversation_rows(3)
    branch = json.loads(rows[1][1]["prompt"]) + [{"role": "user", "content": "other"}]
    rows.append((4, {**rows[2][1], "prompt": json.dumps(branch)}))
    items = tasks_from_rows(rows, file="conv.jsonl")
    assert [[r.number for r in i.rows if r is not None] for i in items] == [[1, 2, 3], [1, 2, 4]]
    assert [i.task["task_id"] for i in items] == ["conv-row1-3", "conv-row1-4"]


def test_a_prompt_nested_past_the_parsers_depth_is_a_typed_error(library, tmp_path: Path) -> None:
    rows = _rows()
    rows[0]["prompt"] = "[" * 100_000 + "]" * 100_000
    path = _write(tmp_path / "deep.jsonl", rows)
    with pytest.raises(DatasetError) as info:
        tasks_from_rows(read_rows(path), file=path)
    assert (info.value.file, info.value.line, info.value.field) == (str(path), 1, "prompt")
    assert "nested too deeply" in str(info.value)
    res = CliRunner().invoke(app, ["tasks", "import", str(path), "--out", str(tmp_path / "t.jsonl")])
    assert "Traceback" not in res.output and f"{path}:1 field 'prompt'" in res.output.replace("\n", "")
    line = tmp_path / "deep_line.jsonl"
    line.write_text('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n")  # the line itself, not a field
    with pytest.raises(DatasetError) as info:
        read_rows(line)
    assert info.value.line == 1 and "nested too deeply" in str(info.value)


def test_a_rows_file_is_recognised_by_its_first_record_alone(tmp_path: Path) -> None:
    row = _rows()[0]
    task = {"task_id": "t1", "env": "Library", "turns": [{"user": "hi"}]}
    assert is_paper_rows_file(_write(tmp_path / "rows.jsonl", [row, task]))
    (tmp_path / "rows.json").write_text(json.dumps([row, task]))
    assert is_paper_rows_file(tmp_path / "rows.json")
    # a tasks file whose later task mentions the keys (here in a user message) stays a tasks file
    later = {**task, "task_id": "t2", "turns": [{"user": '"prompt" "reward_model" "extra_info"'}]}
    assert not is_paper_rows_file(_write(tmp_path / "tasks.jsonl", [task, later]))
    assert not is_paper_rows_file(_write(tmp_path / "tasks2.jsonl", [task, row]))
    big = {**row, "pad": "x" * (1 << 17)}  # a first record longer than one read
    assert is_paper_rows_file(_write(tmp_path / "big.jsonl", [big]))
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert not is_paper_rows_file(deep)
