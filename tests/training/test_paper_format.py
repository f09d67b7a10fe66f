"""EnvFactory's own data format both ways (issue 27 part 4): the paper's RL rows read as tasks
(``envfactory tasks import --format envfactory``, ``--tasks ROWS``), ``export rl|sft --format envfactory``
writing the same shapes, and round trips on fixture rows written for these tests
(tests/training/fixtures/envfactory_rl_rows.jsonl: a two-turn conversation whose second call masks
``reason``, and a conversation whose first turn makes no call; server ``library_api``, tools prefixed
``library_api-``) over the test suite's Library environment (tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.cli import app
from gym_envfactory.environment.paperformat import read_rows, server_environment, tasks_from_rows
from gym_envfactory.environment.taskfiles import read_tasks
from gym_envfactory.errors import DatasetError
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode
from gym_envfactory.training.export.paper import envfactory_rl_rows, envfactory_sft_records

ROWS = Path(__file__).parent / "fixtures" / "envfactory_rl_rows.jsonl"
KEYS = {"prompt", "data_source", "agent_name", "ability", "reward_model", "extra_info"}


def invoke(*args: Any):
    return CliRunner().invoke(app, [str(a) for a in args])


def decoded(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its JSON-text fields parsed (the documented normalisation: JSON text compares by value)."""
    kw = row["extra_info"]["mcp_factory_kwargs"]
    return {**row, "prompt": json.loads(row["prompt"]),
            "reward_model": {**row["reward_model"], "ground_truth": json.loads(row["reward_model"]["ground_truth"])},
            "extra_info": {"mcp_factory_kwargs": {k: json.loads(v) for k, v in kw.items()}}}


def fixture_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in ROWS.read_text().splitlines()]


@pytest.fixture
def imported(library, tmp_path: Path) -> Path:
    out = tmp_path / "tasks.jsonl"
    res = invoke("tasks", "import", ROWS, "--out", out)
    assert res.exit_code == 0, res.output
    assert "wrote 2 task(s) (4 turns)" in res.output
    return out


def test_rows_become_one_multi_turn_task_per_conversation(library) -> None:
    items = tasks_from_rows(read_rows(ROWS), file=ROWS)
    assert [i.task["task_id"] for i in items] == ["envfactory_rl_rows-row1", "envfactory_rl_rows-row3"]
    first, second = (i.task for i in items)
    assert first["env"] == "Library" and first["provenance"]["servers"] == {"Library": "library_api"}
    assert first["provenance"]["tool_separator"] == "-"
    assert [t["ground_truth"] for t in first["turns"]] == [
        [{"name": "borrow_book", "arguments": {"book_id": "B1", "member": "ada"}}],
        [{"name": "extend_loan", "arguments": {"loan_id": "L-0001", "new_due": "2026-12-31", "reason": "holidays"},
          "masked_arguments": ["reason"]}]]
    rows = fixture_rows()
    assert first["initial_state"]["state"] == json.loads(rows[0]["extra_info"]["mcp_factory_kwargs"]["initial_config"])["library_api"]
    # the turn before row 3 made no call: a turn with no ground truth, and no row of its own
    assert second["turns"][0] == {"user": "Which books do you have?"} and items[1].rows[0] is None


def test_import_checks_replay_against_final_config_and_the_oracle_scores_one(imported: Path) -> None:
    env = EnvFactoryEnv("Library", tasks=imported)
    try:
        for task_id in env.tasks.ids():
            assert run_episode(env, OraclePolicy(), task_id=task_id).reward == 1.0
    finally:
        env.close()


def test_import_then_export_gives_the_same_rows(imported: Path, tmp_path: Path) -> None:
    out = tmp_path / "back.jsonl"
    res = invoke("export", "rl", "--format", "envfactory", "--tasks", imported, "--out", out)
    assert res.exit_code == 0, res.output
    back = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(set(r) == KEYS for r in back)
    assert [decoded(r) for r in back] == [decoded(r) for r in fixture_rows()]


def test_export_then_import_gives_the_same_tasks(library, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    rows_file = tmp_path / "library.parquet"
    res = invoke("export", "rl", "Library", "--format", "envfactory", "--out", rows_file)
    assert res.exit_code == 0, res.output
    tasks_file = tmp_path / "tasks.jsonl"
    res = invoke("tasks", "import", rows_file, "--out", tasks_file)
    assert res.exit_code == 0, res.output
    back = {t.task_id: t for t in read_tasks(tasks_file)["Library"]}
    by_first_query = {t.turns[0].user: t for t in back.values()}
    for task in library.tasks:
        if not any(turn.ground_truth for turn in task.turns):
            continue  # the paper writes no row for a task without calls
        got = by_first_query[task.turns[0].user]
        # normalisation: clarification flags and expected outputs do not travel (the paper's rows have neither)
        assert [t.user for t in got.turns] == [t.user for t in task.turns]
        assert [[c.model_dump() for c in t.ground_truth] for t in got.turns] == \
            [[c.model_dump() for c in t.ground_truth] for t in task.turns]
        want = json.loads(library.dump_state(library.validate_state(_initial(library, task))))
        assert got.initial_state == {"state": want}


def _initial(spec, task) -> Any:
    return json.loads(spec.initial_state_json(task.initial_state if isinstance(task.initial_state, str) else None))


def test_tasks_option_reads_rows_directly(library) -> None:
    groups = read_tasks(ROWS)
    assert list(groups) == ["Library"] and groups["Library"].ids() == ["envfactory_rl_rows-row1", "envfactory_rl_rows-row3"]
    assert groups["Library"].line_of("envfactory_rl_rows-row3") == 3
    import gymnasium as gym

    env = gym.make("envfactory/Library-v0", tasks=ROWS)
    try:
        obs, info = env.reset(options={"task_id": "envfactory_rl_rows-row1"})
        assert info["n_turns"] == 2 and obs[-1] == {"role": "user", "content": "Please lend Dune to ada."}
    finally:
        env.close()


def test_server_map_and_separator_options(library, tmp_path: Path) -> None:
    rows = [json.loads(json.dumps(r).replace("library_api", "shelf")) for r in fixture_rows()]
    src = tmp_path / "shelf.json"
    src.write_text(json.dumps(rows, indent=2))  # the paper's own files are JSON lists
    assert server_environment("shelf") is None
    out = tmp_path / "t.jsonl"
    res = invoke("tasks", "import", src, "--out", out)
    assert res.exit_code == 1 and "server 'shelf'" in res.output and "--map" in res.output
    (tmp_path / "map.json").write_text(json.dumps({"shelf": "Library"}))
    res = invoke("tasks", "import", src, "--out", out, "--map", tmp_path / "map.json", "--separator", "-")
    assert res.exit_code == 0, res.output
    res = invoke("tasks", "import", src, "--out", out, "--map", tmp_path / "map.json", "--separator", "__")
    assert res.exit_code == 1 and "'shelf-borrow_book' is no tool of shelf (Library)" in " ".join(res.output.split())


def _bad(tmp_path: Path, row: int, edit) -> Path:
    rows = fixture_rows()
    edit(rows[row - 1])
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(("row", "edit", "field", "says"), [
    (1, lambda r: r["reward_model"].update(ground_truth="[{"), "reward_model.ground_truth", "not JSON text"),
    (2, lambda r: r["reward_model"].update(ground_truth=json.dumps([{"name": "library_api-burn_book", "arguments": {}}])),
     "reward_model.ground_truth[0].name", "'library_api-burn_book' is no tool"),
    (3, lambda r: r["extra_info"]["mcp_factory_kwargs"].update(final_config="{}"),
     "extra_info.mcp_factory_kwargs.final_config.library_api", "no state"),
    (1, lambda r: r.update(prompt=json.dumps([{"role": "assistant", "content": "hi"}])), "prompt[0]", "user query"),
])
def test_a_malformed_row_names_file_row_and_field(library, tmp_path: Path, row, edit, field, says) -> None:
    path = _bad(tmp_path, row, edit)
    with pytest.raises(DatasetError) as info:
        tasks_from_rows(read_rows(path), file=path)
    err = info.value
    assert (str(err.file), err.line, err.field) == (str(path), row, field) and says in str(err)
    res = invoke("tasks", "import", path, "--out", tmp_path / "t.jsonl")
    assert f"refused: {err}" in res.output.replace("\n", "")  # one line: file:row, field, why


def test_state_that_does_not_carry_over_or_replay_is_refused(library, tmp_path: Path) -> None:
    def wrong_start(r):
        kw = r["extra_info"]["mcp_factory_kwargs"]
        state = json.loads(kw["initial_config"])
        state["library_api"]["next_loan"] = 7
        kw["initial_config"] = json.dumps(state)
    path = _bad(tmp_path, 2, wrong_start)
    with pytest.raises(DatasetError) as info:
        tasks_from_rows(read_rows(path), file=path)
    assert info.value.field == "extra_info.mcp_factory_kwargs.initial_config.library_api" and "row 1" in str(info.value)

    def wrong_end(r):
        kw = r["extra_info"]["mcp_factory_kwargs"]
        state = json.loads(kw["final_config"])
        state["library_api"]["books"]["B2"]["fee"] = 9.0
        kw["final_config"] = json.dumps(state)
    path = _bad(tmp_path, 3, wrong_end)
    out = tmp_path / "t.jsonl"
    res = invoke("tasks", "import", path, "--out", out)
    text = " ".join(res.output.split())
    assert res.exit_code == 0 and "refused 1" in text  # the other conversation is written
    assert "final_config.library_api.books.B2.fee" in text and [json.loads(x)["task_id"] for x in out.read_text().splitlines()] == ["bad-row1"]


def test_sft_rows_in_the_papers_alpaca_layout(library, tmp_path: Path) -> None:
    records = envfactory_sft_records(["Library"], tasks=read_tasks(ROWS))
    assert all(set(r) == {"instruction", "input", "output", "system", "history"} for r in records)
    first = records[:3]  # the first conversation's first turn: query -> call, result -> reply
    assert first[0]["instruction"] == "Please lend Dune to ada." and first[0]["history"] == []
    assert first[0]["output"].startswith("<tool_call>\n") and '"library_api-borrow_book"' in first[0]["output"]
    assert first[1]["instruction"].startswith("<tool_response>\n") and first[1]["output"] == "Done."
    assert first[1]["history"] == [["Please lend Dune to ada.", first[0]["output"]]]
    assert "<tools>" in first[0]["system"] and "library_api-extend_loan" in first[0]["system"]
    # the first turn of the second conversation has no call: no record, not in history
    assert not any(r["instruction"] == "Which books do you have?" for r in records)
    out = tmp_path / "sft.json"
    res = invoke("export", "sft", "--format", "envfactory", "--tasks", ROWS, "--out", out)
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text()) == records


def test_rl_rows_of_a_catalog_environment_are_bare_named() -> None:
    rows = envfactory_rl_rows(["HotelBooking"], split="test")
    assert rows and all(set(r) == KEYS for r in rows)
    r = decoded(rows[0])
    assert r["extra_info"]["mcp_factory_kwargs"]["mcp_servers"] == ["HotelBooking"]
    assert all("-" not in c["name"] for c in r["reward_model"]["ground_truth"])
    assert r["prompt"][-1]["role"] == "user" and not any(m["role"] == "system" for m in r["prompt"])


def test_an_imported_server_is_found_by_its_source_file_and_double_underscore_prefixes(tmp_path: Path, monkeypatch,
                                                                                       request) -> None:
    """A package imported by ``envfactory import`` (the importer's own fixture server, under a name the server
    name does not match) is found from its provenance (the source file's stem); ``__`` prefixes are stripped."""
    from gym_envfactory.generators.importer import import_tool_server
    from gym_envfactory.generators.sandbox import container

    monkeypatch.setattr(container, "docker_available", lambda image=None: False)  # the process sandbox
    fixtures = Path(__file__).resolve().parents[1] / "generators" / "fixtures"
    from gym_envfactory.environment.catalog import forget_environment

    spec = import_tool_server(fixtures / "bookstore_server.py", name="ShelfShopPaper", out_dir=tmp_path / "pkgs",
                              initial_state=fixtures / "bookstore_scenario.json")
    request.addfinalizer(lambda: forget_environment(spec.name))  # the tmp package leaves the registry after
    start = json.loads((fixtures / "bookstore_scenario.json").read_text())
    end = json.loads(json.dumps(start))
    end["books"]["B-002"]["stock"] = 0
    end["orders"]["ORD-0002"] = {"order_id": "ORD-0002", "items": [{"book_id": "B-002", "quantity": 1}],
                                 "total": 24.0, "status": "placed"}
    end["next_order_number"] = 3
    server = "bookstore_server"
    row = {"prompt": json.dumps([{"role": "user", "content": "Buy me Rivers of Salt."}]),
           "data_source": "EnvFactory", "agent_name": "tool_agent", "ability": "tool_use",
           "reward_model": {"style": "rule", "ground_truth": json.dumps([
               {"name": f"{server}__add_to_cart", "arguments": {"book_id": "B-002"}, "masked_arguments": []},
               {"name": f"{server}__place_order", "arguments": {}, "masked_arguments": []}])},
           "extra_info": {"mcp_factory_kwargs": {"mcp_servers": json.dumps([server]),
                                                 "initial_config": json.dumps({server: start}),
                                                 "final_config": json.dumps({server: end})}}}
    src = tmp_path / "shop.jsonl"
    src.write_text(json.dumps(row) + "\n")
    from gym_envfactory.environment import paperformat
    from tests.shipped import SHIPPED

    # other tests of the session may have imported the same server under names of their own (an ambiguity,
    # tested below): this test sees the shipped catalog and its own import
    monkeypatch.setattr(paperformat, "list_environments", lambda: [*SHIPPED, spec.name])
    assert server_environment(server) == spec.name
    out = tmp_path / "tasks.jsonl"
    res = invoke("tasks", "import", src, "--out", out)  # the replay would run the imported code here
    assert res.exit_code == 1 and "--trust" in res.output and not out.exists()
    res = invoke("tasks", "import", src, "--out", out, "--trust")
    assert res.exit_code == 0, res.output
    task = json.loads(out.read_text())
    assert task["env"] == spec.name and task["provenance"]["tool_separator"] == "__"
    assert [c["name"] for c in task["turns"][0]["ground_truth"]] == ["add_to_cart", "place_order"]
    back = envfactory_rl_rows([spec.name], tasks=read_tasks(out))
    assert decoded(back[0]) == decoded(row)
    # the same server imported twice: the rows name a server two environments come from
    twin = import_tool_server(fixtures / "bookstore_server.py", name="ShelfShopPaperTwin", out_dir=tmp_path / "pkgs",
                              initial_state=fixtures / "bookstore_scenario.json")
    request.addfinalizer(lambda: forget_environment(twin.name))
    monkeypatch.setattr(paperformat, "list_environments", lambda: [*SHIPPED, spec.name, twin.name])
    res = invoke("tasks", "import", src, "--out", tmp_path / "again.jsonl", "--trust")
    assert res.exit_code == 1 and "ShelfShopPaper, ShelfShopPaperTwin" in res.output and "--map" in res.output
    assert f"{src}:1" in res.output or "row 1" in res.output


def test_sft_rows_read_back_as_tasks_and_export_the_same_records(library, tmp_path: Path) -> None:
    """export sft --format envfactory -> tasks import --format envfactory-sft -> the same tasks (the turns
    with calls; the paper's SFT rows hold no turn without) -> the same records again."""
    sft = tmp_path / "sft.jsonl"
    res = invoke("export", "sft", "--format", "envfactory", "--tasks", ROWS, "--out", sft)
    assert res.exit_code == 0, res.output
    out = tmp_path / "tasks.jsonl"
    res = invoke("tasks", "import", sft, "--format", "envfactory-sft", "--out", out)
    assert res.exit_code == 0, res.output
    back = read_tasks(out)["Library"]
    original = read_tasks(ROWS)["Library"]
    assert len(back) == len(original)
    for got, want in zip(back, original, strict=True):
        assert [(t.user, [c.model_dump(exclude={"masked_arguments"}) for c in t.ground_truth]) for t in got.turns] == \
            [(t.user, [c.model_dump(exclude={"masked_arguments"}) for c in t.ground_truth]) for t in want.turns
             if t.ground_truth]
    assert [json.loads(line) for line in sft.read_text().splitlines()] == envfactory_sft_records(["Library"], tasks=read_tasks(out))


def test_an_sft_row_with_a_bad_call_names_its_row_and_field(library, tmp_path: Path) -> None:
    records = envfactory_sft_records(["Library"], tasks=read_tasks(ROWS))
    records[2]["history"][1][1] = "<tool_call>\n{not json}\n</tool_call>\n"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(records))
    from gym_envfactory.environment.paperformat import tasks_from_sft_rows

    with pytest.raises(DatasetError) as info:
        tasks_from_sft_rows(read_rows(path), file=path)
    assert (info.value.line, info.value.field) == (3, "history[1][1]")


def test_the_gyms_own_verl_rows_are_not_taken_for_the_papers(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from gym_envfactory.training.export.rl import rl_rows, write_parquet

    path = write_parquet(rl_rows(["HotelBooking"], split="test")[:2], tmp_path / "verl.parquet")
    with pytest.raises(DatasetError) as info:
        read_tasks(path)
    assert info.value.field == "extra_info.reset_options" and "--format envfactory" in str(info.value)


def test_a_catalog_environment_round_trips_up_to_the_closing_replies(tmp_path: Path) -> None:
    """export -> import -> export on HotelBooking: the same rows, but for an earlier turn's closing reply
    (expected outputs do not travel: the re-export's reply is a bare "Done.")."""
    first = tmp_path / "a.jsonl"
    assert invoke("export", "rl", "HotelBooking", "--format", "envfactory", "--out", first).exit_code == 0
    tasks = tmp_path / "tasks.jsonl"
    res = invoke("tasks", "import", first, "--out", tasks)
    assert res.exit_code == 0 and "refused" not in res.output, res.output
    again = tmp_path / "b.jsonl"
    assert invoke("export", "rl", "--format", "envfactory", "--tasks", tasks, "--out", again).exit_code == 0

    def norm(path: Path) -> list[str]:
        out = []
        for line in path.read_text().splitlines():
            row = decoded(json.loads(line))
            row["prompt"] = [{**m, "content": "<reply>"} if m["role"] == "assistant" and not m["content"].startswith("<tool_call>")
                             else m for m in row["prompt"]]
            out.append(json.dumps(row, sort_keys=True))
        return sorted(out)

    assert norm(first) == norm(again) and len(norm(first)) > 20
