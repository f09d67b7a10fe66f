"""Tasks files from anywhere (docs/synthesis.md, "Using a tasks file"): ``read_tasks`` checks every task against
the environments it names and refuses a bad one with file, line and field; ``gym.make(..., tasks=...)``
plays them, and the oracle earns 1.0 on each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from pydantic import BaseModel

from gym_envfactory import DatasetError, EnvFactoryEnv, define_environment, get_environment, tool
from gym_envfactory.environment.taskfiles import read_tasks, tasks_for
from gym_envfactory.replay import task_reference
from gym_envfactory.rollout.policies import OraclePolicy
from gym_envfactory.rollout.runner import run_episode

CATALOG = Path(__file__).resolve().parents[2] / "env_images"


def catalog_tasks(env: str, *ids: str) -> list[dict[str, Any]]:
    """Tasks of a catalog environment's own file, by id, renamed ``mine-<id>`` (a hand-written file's tasks)."""
    rows = [json.loads(line) for line in (CATALOG / env / "tasks.jsonl").read_text().splitlines() if line.strip()]
    by_id = {r["task_id"]: r for r in rows}
    return [{**by_id[i], "task_id": f"mine-{i}"} for i in ids]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


HOTEL = ("hotel-001", "hotel-003", "hotel-x01")


@pytest.fixture
def hotel_file(tmp_path: Path) -> Path:
    rows = catalog_tasks("HotelBooking", *HOTEL)  # hotel-x01 names both its environments; the others none
    rows[0]["env"] = "HotelBooking"  # one names its own
    return write_jsonl(tmp_path / "mine.jsonl", rows)


def test_read_tasks_groups_by_primary_environment_and_keeps_file_and_line(hotel_file: Path, tmp_path: Path) -> None:
    store = write_jsonl(tmp_path / "store.jsonl", catalog_tasks("OnlineStore", "store-023"))
    groups = read_tasks([hotel_file, store], env="HotelBooking")
    assert list(groups) == ["HotelBooking", "OnlineStore"]
    hotel = groups["HotelBooking"]
    assert hotel.ids() == [f"mine-{i}" for i in HOTEL]
    assert [t.envs for t in hotel] == [["HotelBooking"], ["HotelBooking"], ["HotelBooking", "TeamCalendar"]]
    assert hotel.file_of("mine-hotel-003") == hotel_file and hotel.line_of("mine-hotel-003") == 2
    assert tasks_for(groups, "OnlineStore").file_of("mine-store-023") == store
    assert len(tasks_for(groups, "TeamCalendar")) == 0


def test_gym_make_with_a_tasks_file_resets_to_its_task_and_the_oracle_earns_one(hotel_file: Path) -> None:
    env = gym.make("envfactory/HotelBooking-v0", tasks=hotel_file)
    try:
        obs, info = env.reset(options={"task_id": "mine-hotel-003"})
        assert info["task_id"] == "mine-hotel-003" and info["n_turns"] == 3
        assert obs[-1]["role"] == "user" and "Ada Lovelace" in obs[-1]["content"]
        inner = env.unwrapped
        assert isinstance(inner, EnvFactoryEnv) and inner.tasks.ids() == [f"mine-{i}" for i in HOTEL]
        for tid in inner.tasks.ids():
            assert run_episode(inner, OraclePolicy(), task_id=tid).reward == 1.0
    finally:
        env.close()


def test_gym_make_takes_a_list_of_task_dicts(tmp_path: Path) -> None:
    rows = catalog_tasks("HotelBooking", "hotel-002")
    env = EnvFactoryEnv("HotelBooking", tasks=rows)
    try:
        _, info = env.reset(options={"task_id": "mine-hotel-002"})
        assert info["task_id"] == "mine-hotel-002" and env.tasks.ids() == ["mine-hotel-002"]
    finally:
        env.close()


def test_tasks_of_another_environment_only_are_refused_at_construction(tmp_path: Path) -> None:
    store = write_jsonl(tmp_path / "store.jsonl", catalog_tasks("OnlineStore", "store-023"))
    with pytest.raises(DatasetError, match="none of the tasks given is HotelBooking's"):
        EnvFactoryEnv("HotelBooking", tasks=store)


def _refusal(tmp_path: Path, lines: list[Any], env: str | None = "HotelBooking") -> DatasetError:
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    with pytest.raises(DatasetError) as ei:
        read_tasks(path, env=env)
    assert ei.value.file == str(path) and str(path) in str(ei.value)
    return ei.value


GOOD = {"task_id": "ok", "turns": [{"user": "where?", "ground_truth": [{"name": "list_hotel_destinations"}]}]}


@pytest.mark.parametrize("line, field, needle", [
    ('{"task_id": "x" "turns": []}', None, "invalid JSON"),
    ({"task_id": "x", "turns": []}, "turns", "at least 1"),
    ({"task_id": "x", "turns": [{"usr": "hi"}]}, "turns.0.user", "required"),
    ({"task_id": "x", "env": "NoSuchPlace", "turns": [{"user": "hi"}]}, "env", "unknown environment 'NoSuchPlace'"),
    ({"task_id": "x", "env": ["HotelBooking", "Atlantis"], "turns": [{"user": "hi"}]}, "env", "unknown environment 'Atlantis'"),
    ({"task_id": "x", "turns": [{"user": "hi", "ground_truth": [{"name": "list_hotel_destinations"},
                                                               {"name": "teleport", "arguments": {}}]}]},
     "turns.0.ground_truth.1.name", "unknown tool 'teleport'"),
    ({"task_id": "x", "excluded_tools": ["teleport"], "turns": [{"user": "hi"}]}, "excluded_tools", "unknown tool"),
    ({"task_id": "ok", "turns": [{"user": "again"}]}, "task_id", "duplicate task_id 'ok'"),
])
def test_a_bad_line_is_refused_naming_file_line_and_field(tmp_path: Path, line: Any, field: str | None,
                                                          needle: str) -> None:
    err = _refusal(tmp_path, [GOOD, "", line])
    assert (err.line, err.field) == (3, field) and needle in str(err)
    assert "bad.jsonl:3" in str(err)


def test_a_task_using_another_environments_tool_must_name_it(tmp_path: Path) -> None:
    row = catalog_tasks("HotelBooking", "hotel-x01")[0]
    assert row["env"] == ["HotelBooking", "TeamCalendar"]
    assert read_tasks([row])["HotelBooking"].get("mine-hotel-x01").envs == ["HotelBooking", "TeamCalendar"]
    del row["env"]
    err = _refusal(tmp_path, [row])
    assert err.line == 1 and err.field is not None and err.field.endswith(".name") and "unknown tool" in str(err)
    assert "names them all in env" in str(err)


def test_a_task_without_env_is_refused_when_no_environment_is_given(tmp_path: Path) -> None:
    err = _refusal(tmp_path, [GOOD], env=None)
    assert (err.line, err.field) == (1, "env") and "names no environment" in str(err)


def test_duplicate_ids_across_two_files_name_the_first(tmp_path: Path, hotel_file: Path) -> None:
    again = write_jsonl(tmp_path / "again.jsonl", [GOOD, {**GOOD, "task_id": "mine-hotel-003"}])
    with pytest.raises(DatasetError) as ei:
        read_tasks([hotel_file, again], env="HotelBooking")
    assert (ei.value.file, ei.value.line, ei.value.field) == (str(again), 2, "task_id")
    assert f"{hotel_file}:2" in str(ei.value)


def test_a_ground_truth_that_does_not_replay_names_its_own_file_and_line(tmp_path: Path) -> None:
    bad = {"task_id": "nope", "turns": [{"user": "cancel", "ground_truth": [
        {"name": "cancel_hotel_booking", "arguments": {"booking_id": "BK-9999", "reason": "none"}}]}]}
    path = write_jsonl(tmp_path / "t.jsonl", [GOOD, bad])
    spec = get_environment("HotelBooking").with_tasks(tasks_for(read_tasks(path, env="HotelBooking"), "HotelBooking"))
    assert task_reference(spec, "ok").n_turns == 1
    with pytest.raises(DatasetError) as ei:
        task_reference(spec, "nope")
    assert (ei.value.file, ei.value.line, ei.value.field) == (str(path), 2, "turns.0.ground_truth.0")


def test_the_ui_shows_a_tasks_files_tasks_in_place_of_the_environments_own(hotel_file: Path) -> None:
    pytest.importorskip("starlette")
    from gym_envfactory.ui.app import create_app
    from tests.ui.helpers import client_of

    client = client_of(create_app([], check_images=False, tasks=read_tasks(hotel_file, env="HotelBooking")))
    page = client.get("/env/HotelBooking").text
    assert "mine-hotel-003" in page and "hotel-002" not in page
    assert client.get("/env/HotelBooking/task/mine-hotel-x01").status_code == 200
    assert "cal-001" in client.get("/env/TeamCalendar").text  # an environment the file does not name: its own
    assert "3 (" in client.get("/").text


class Tally(BaseModel):
    n: int = 0


@tool
def add(state: Tally, *, k: int) -> int:
    """Add k."""
    state.n += k
    return state.n


def test_an_unregistered_code_defined_environment_takes_tasks_too() -> None:
    spec = define_environment("TallyUnregistered", Tally, [add], register=False)
    env = EnvFactoryEnv(spec, tasks=[{"task_id": "t", "turns": [{"user": "add 2", "ground_truth": [
        {"name": "add", "arguments": {"k": 2}}]}]}])
    try:
        assert run_episode(env, OraclePolicy(), task_id="t").reward == 1.0
        with pytest.raises(DatasetError, match="unknown tool 'sub'"):
            EnvFactoryEnv(spec, tasks=[{"task_id": "u", "turns": [{"user": "x", "ground_truth": [{"name": "sub"}]}]}])
    finally:
        env.close()
