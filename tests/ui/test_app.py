"""`envfactory ui` pages, through Starlette's test client: what each page shows, and that bad input is a
page saying what is wrong (issue 13 part 3; docs/ui.md).  The real-browser test is tests/ui/test_browser.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.errors import DatasetError
from gym_envfactory.ui.app import create_app
from gym_envfactory.ui.rollouts import load_rollouts, split_turns
from tests.ui.helpers import client_of as _client
from tests.ui.helpers import graph_source


@pytest.fixture(scope="module")
def rollout_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("ui") / "trajectories.jsonl"
    subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "rollout", "envfactory/HotelBooking-v0", "--policy",
                    "noisy", "--seed", "0", "--out", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def client(rollout_file):
    return _client(create_app([rollout_file], graph_source=graph_source, check_images=False))


def test_catalog_lists_every_environment_with_counts(client):
    from gym_envfactory import get_environment, list_environments

    text = client.get("/").text
    for name in list_environments():
        spec = get_environment(name)
        assert f"/env/{name}" in text
        assert f"{len(spec.tools)} (" in text and spec.domain in text


def test_environment_page_shows_tools_annotations_states_and_tasks(client):
    r = client.get("/env/HotelBooking")
    assert r.status_code == 200
    assert "cancel_hotel_booking" in r.text and "destructive" in r.text and "input schema" in r.text
    assert "/env/HotelBooking/state/large" in r.text and "/env/HotelBooking/task/hotel-003" in r.text


def test_task_page_shows_turns_and_ground_truth(client):
    r = client.get("/env/HotelBooking/task/hotel-003")
    assert "Turn 2" in r.text and "find_guest_by_email" in r.text and "ada.lovelace@example.com" in r.text


def test_state_page_counts_records(client):
    r = client.get("/env/HotelBooking/state/small")
    assert r.status_code == 200 and "records or value" in r.text


def test_episode_page_shows_turns_calls_errors_components_and_diff(client, rollout_file):
    eps = load_rollouts(rollout_file)
    # an episode with a typed tool error (the noisy policy makes some)
    i = next(k for k, e in enumerate(eps) if any("tool_error" in x for x in e.record.get("errors", [])))
    r = client.get(f"/rollouts/0/{i}")
    assert r.status_code == 200
    _, turns = split_turns(eps[i].record)
    assert all(f"Turn {t.index}" in r.text for t in turns)
    codes = {c.error for t in turns for c in t.calls if c.error}
    assert codes and all(code in r.text for code in codes)
    assert "turn reward" in r.text and "State diff against the ground truth" in r.text


def test_episode_with_a_state_diff_lists_its_paths(tmp_path):
    env = EnvFactoryEnv("HotelBooking", task_id="hotel-003")
    env.reset(seed=0)
    env.step({"role": "assistant", "content": "Done."})  # ends turn 0 without the calls
    rec = {"task_id": "hotel-003", "env": "HotelBooking", "reward": 0.0,
           "components": {"reward": 0.0, "state_diff": [{"path": "bookings.BK-0001.status", "expected": '"cancelled"',
                                                          "actual": '"confirmed"'}]},
           "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Done."}]}
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    c = _client(create_app([f], check_images=False))
    text = c.get("/rollouts/0/0").text
    assert "bookings.BK-0001.status" in text and "&quot;cancelled&quot;" in text


def test_graph_page_draws_the_tools_around_an_environment(client):
    r = client.get("/env/HotelBooking/graph")
    assert r.status_code == 200 and "<svg" in r.text and "Links" in r.text


def test_unknown_names_are_404_pages_saying_what(client):
    for url, words in [("/env/Nope", "no environment named 'Nope'"), ("/env/HotelBooking/task/x", "no task 'x'"),
                       ("/env/HotelBooking/state/huge", "no initial state 'huge'"), ("/rollouts/7/0", "no rollout file"),
                       ("/rollouts/0/99999", "no episode number")]:
        r = client.get(url)
        assert r.status_code == 404 and words.replace("'", "&#x27;") in r.text, url


def test_malformed_rollout_line_names_file_and_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"task_id": "a", "messages": []}\n{not json\n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2: not JSON"):
        load_rollouts(f)
    r = _client(create_app([f], check_images=False)).get("/rollouts")
    assert r.status_code == 422 and "bad.jsonl:2" in r.text  # the only file: the index is an error


def test_rollout_file_is_reread_when_it_changes(tmp_path, rollout_file):
    f = tmp_path / "grow.jsonl"
    lines = rollout_file.read_text().splitlines()
    f.write_text(lines[0] + "\n")
    c = _client(create_app([f], check_images=False))
    assert "1 episodes" in c.get("/rollouts").text
    import os
    f.write_text(lines[0] + "\n" + lines[1] + "\n")
    os.utime(f, (1, 1))  # a different mtime, whatever the clock's resolution
    assert "2 episodes" in c.get("/rollouts").text


def test_values_from_files_are_escaped(tmp_path):
    rec = {"task_id": "<script>alert(1)</script>", "messages": [{"role": "user", "content": "<b>hi</b>"}]}
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    c = _client(create_app([f], check_images=False))
    for url in ("/rollouts", "/rollouts/0/0"):
        t = c.get(url).text
        assert "<script>alert" not in t and "&lt;script&gt;" in t


def test_cli_refuses_a_malformed_rollouts_file_naming_the_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text("[1, 2]\n")
    r = subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "ui", "--rollouts", str(f), "--no-images"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "bad.jsonl:1" in r.stderr and "JSON object" in r.stderr


@pytest.mark.parametrize(("record", "field"), [
    ({"messages": ["hi"]}, "messages[0]"),
    ({"messages": [{"role": "assistant", "tool_calls": "x"}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": "f"}]}]}, "messages[0].tool_calls[0]"),
    ({"messages": [], "errors": 3}, "errors"),
    ({"messages": [], "components": {"state_diff": 1}}, "components.state_diff"),
    ({"messages": [], "components": {"turns": [1]}}, "components.turns"),
])
def test_oddly_typed_records_are_refused_naming_the_field_and_other_files_stay_readable(tmp_path, rollout_file, record, field):
    bad = tmp_path / "odd.jsonl"
    bad.write_text(json.dumps(record) + "\n")
    with pytest.raises(DatasetError, match=r"odd\.jsonl:1") as err:
        load_rollouts(bad)
    assert field in str(err.value)
    c = _client(create_app([bad, rollout_file], check_images=False))
    r = c.get("/rollouts")
    assert r.status_code == 200 and "odd.jsonl:1" in r.text and "mean reward" in r.text  # the good file still shows
    assert c.get("/rollouts/0/0").status_code == 422
    assert c.get("/rollouts/1/0").status_code == 200


def test_a_file_that_is_not_utf8_is_a_dataset_error(tmp_path):
    f = tmp_path / "bin.jsonl"
    f.write_bytes(b'{"messages": []}\n\xff\xfe\n')
    with pytest.raises(DatasetError, match="not UTF-8"):
        load_rollouts(f)


def test_a_cross_environment_task_page_names_both_environments(client):
    text = client.get("/env/HotelBooking/task/hotel-x01").text
    assert "/env/HotelBooking" in text and "/env/TeamCalendar" in text and "environments" in text
