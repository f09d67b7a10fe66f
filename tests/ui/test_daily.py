"""The UI as a daily tool (issue 29 part 2; docs/ui.md): rollout views by query parameters, statistics,
comparisons, the episode page beside its ground truth, training curves, and the tool graph built in the
background.  Through Starlette's test client; the real-browser checks are in tests/ui/test_browser.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import pytest

from gym_envfactory.errors import DatasetError
from gym_envfactory.ui.app import create_app
from gym_envfactory.ui.browse import RolloutQuery, parse_side, sort_rows, summarise
from gym_envfactory.ui.rollouts import load_rollouts
from gym_envfactory.ui.traininglog import read_training_log
from tests.ui.helpers import client_of, graph_source


def _rollout(tmp_path_factory, policy: str):
    out = tmp_path_factory.mktemp("daily") / f"{policy}.jsonl"
    subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "rollout", "envfactory/HotelBooking-v0", "--policy",
                    policy, "--seed", "0", "--out", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _rollout(tmp_path_factory, "noisy"), _rollout(tmp_path_factory, "oracle")


@pytest.fixture(scope="module")
def client(files):
    return client_of(create_app(list(files), graph_source=graph_source, check_images=False))


def _rows(text: str, cls: str = "episodes") -> list[list[str]]:
    """Cell texts of the first ``<table class='cls'>`` body."""
    m = re.search(rf"<table class='{cls}'>.*?<tbody>(.*?)</tbody>", text, re.S)
    assert m, f"no table {cls}"
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", m.group(1), re.S)]


def _records(path):
    return [e.record for e in load_rollouts(path)]


def test_filters_by_query_parameters_match_the_records(client, files):
    recs = _records(files[0])
    with_tool_error = [r for r in recs if any(e.startswith("tool_error") for e in r["errors"])]
    rows = _rows(client.get("/rollouts?code=tool_error").text)
    assert len(rows) == len(with_tool_error) > 0 and {r[1] for r in rows} == {r["task_id"] for r in with_tool_error}
    low = [r for r in recs if 0.2 <= r["reward"] <= 0.8]
    rows = _rows(client.get("/rollouts?min=0.2&max=0.8").text)
    assert sorted(r[1] for r in rows) == sorted(r["task_id"] for r in low)
    tests = _rows(client.get("/rollouts?split=test").text)
    assert tests and all(r[3] == "test" for r in tests) and len(tests) < len(recs)
    assert [r[1] for r in _rows(client.get("/rollouts?task=x0").text)] == ["hotel-x01", "hotel-x02"]
    assert _rows(client.get("/rollouts?truncated=yes").text) == []
    assert len(_rows(client.get("/rollouts?env=Nope").text)) == 0
    # search in the messages: an e-mail address only some conversations hold
    hits = [r["task_id"] for r in recs if any("grace.hopper" in (m.get("content") or "") for m in r["messages"])]
    assert sorted(r[1] for r in _rows(client.get("/rollouts?q=GRACE.HOPPER").text)) == sorted(hits) and hits


def test_sorting_by_reward_descending_and_the_header_links_keep_the_filters(client, files):
    text = client.get("/rollouts?code=tool_error&sort=reward&order=desc").text
    rewards = [float(r[5]) for r in _rows(text)]
    assert rewards == sorted(rewards, reverse=True) and len(set(rewards)) > 1
    assert "href='/rollouts?code=tool_error&amp;sort=reward'>reward ▼" in text  # the toggle keeps the filter
    assert "showing " in text and "(filtered)" in text


def test_bad_parameters_are_named_and_ignored(client):
    text = client.get("/rollouts?min=lots&sort=colour").text
    assert "min=&#x27;lots&#x27; is not a number; ignored" in text and "sortable columns are" in text
    assert len(_rows(text)) == len(_rows(client.get("/rollouts").text))


def test_histogram_and_component_means_per_file(client, files):
    text = client.get("/rollouts?env=HotelBooking").text
    counts = [int(c) for c in re.findall(r"class='bar' data-count='(\d+)'", text)]
    assert len(counts) == 20 and sum(counts[:10]) == len(_records(files[0])) and counts[19] == len(_records(files[1]))
    means = _rows(text, "means")
    want = sum(r["components"]["r_traj"] for r in _records(files[0])) / len(_records(files[0]))
    assert ["r_traj", f"{want:.3f}", str(len(_records(files[0])))] in means
    assert not any(m[0] == "r_output" for m in means)  # weight 0 in these rollouts


def test_compare_two_files_per_task_with_the_difference_highlighted(client, files):
    r = client.get("/compare?a=0&b=1")
    assert r.status_code == 200
    noisy = {x["task_id"]: x["reward"] for x in _records(files[0])}
    better = re.findall(r"<tr class='better'><td>HotelBooking</td><td><a [^>]*>([^<]+)</a>", r.text)
    assert better and sorted(better) == sorted(t for t, v in noisy.items() if v < 1.0)
    assert "B better on" in r.text and "worse on 0" in r.text
    swapped = client.get("/compare?a=1&b=0").text
    assert sorted(re.findall(r"<tr class='worse'><td>HotelBooking</td><td><a [^>]*>([^<]+)</a>", swapped)) == sorted(better)
    # two policies of one file: the same side twice is all "same"
    same = client.get("/compare?a=0:noisy&b=0:noisy").text
    assert "<tr class='better'>" not in same and "B better on 0, worse on 0" in same


def test_compare_with_a_wrong_side_says_what_to_pass(client):
    r = client.get("/compare?a=7&b=0")
    assert r.status_code == 400 and "pass a file number from 0 to 1" in r.text
    with pytest.raises(ValueError, match="FILE|file number"):
        parse_side("x", 2)


def _episode_file(tmp_path, *, output_weight: float = 0.0, email: str = "ada@wrong.example") -> object:
    long_result = json.dumps({"bookings": [{"booking_id": f"BK-{i:04d}", "note": "x" * 40} for i in range(12)]})
    rec = {"task_id": "hotel-003", "env": "HotelBooking", "policy": "p", "reward": 0.3,
           "components": {"reward": 0.3, "r_traj": 0.5, "r_state": 0.0, "r_output": 0.0, "penalty": 0.05,
                          "config": {"output_weight": output_weight}, "turns": [{"reward": 0.3, "r_output": 0.0}]},
           "messages": [
               {"role": "user", "content": "Hi, this is Ada"},
               {"role": "assistant", "content": "FIRST-TEXT let me look you up.", "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "find_guest_by_email",
                                                                 "arguments": json.dumps({"email": email})}}]},
               {"role": "tool", "tool_call_id": "c1", "content": '{"guest_id": "G-001"}'},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "c2", "type": "function", "function": {"name": "list_hotel_destinations", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c2", "content": long_result},
               {"role": "assistant", "content": "SECOND-TEXT done."}]}
    f = tmp_path / "one.jsonl"
    f.write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    return f


def test_episode_page_sets_ground_truth_beside_the_calls_with_an_argument_diff(tmp_path):
    c = client_of(create_app([_episode_file(tmp_path)], check_images=False))
    text = c.get("/rollouts/0/0").text
    assert "ground truth and the agent's calls" in text
    # the e-mail differs: its row is marked, expected and actual side by side
    assert re.search(r"<tr class='arg-differs'><td><code>email</code></td><td><code>&quot;ada.lovelace@example.com"
                     r"&quot;</code></td><td><code>&quot;ada@wrong.example&quot;</code>", text)
    assert "pair-differs" in text and "pair-missed" in text and "pair-surplus" in text  # list_guest_bookings missed
    same = client_of(create_app([_episode_file(tmp_path, email="ada.lovelace@example.com")], check_images=False))
    assert "<tr class='arg-same'><td><code>email</code>" in same.get("/rollouts/0/0").text


def test_episode_page_keeps_the_conversation_in_order_and_collapses_long_results(tmp_path):
    text = client_of(create_app([_episode_file(tmp_path)], check_images=False)).get("/rollouts/0/0").text
    conv = text[text.index("class='conversation'"):]
    first, call, second = conv.index("FIRST-TEXT"), conv.index("find_guest_by_email"), conv.index("SECOND-TEXT")
    assert first < call < conv.index("list_hotel_destinations") < second
    assert "<details class='result'>" in text and "BK-0011" in text  # the long result, folded but all there
    assert "&quot;guest_id&quot;: &quot;G-001&quot;" in text  # a short result is shown pretty-printed


def test_episode_page_links_the_task_and_the_neighbouring_episodes(tmp_path):
    c = client_of(create_app([_episode_file(tmp_path)], check_images=False))
    first, second = c.get("/rollouts/0/0").text, c.get("/rollouts/0/1").text
    assert "href='/env/HotelBooking/task/hotel-003'" in first
    assert "href='/rollouts/0/1'" in first and "rel='prev'" not in first
    assert "href='/rollouts/0/0'" in second and "rel='next'" not in second


@pytest.mark.parametrize(("weight", "shown"), [(0.0, False), (0.25, True)])
def test_r_output_is_hidden_when_its_weight_is_zero(tmp_path, weight, shown):
    text = client_of(create_app([_episode_file(tmp_path, output_weight=weight)], check_images=False)).get("/rollouts/0/0").text
    assert ("<td>r_output</td>" in text) is shown
    assert ("its weight is 0" in text) is not shown


def test_an_episode_whose_task_is_unknown_says_why_no_ground_truth(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"task_id": "nope-1", "env": "HotelBooking", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    text = client_of(create_app([f], check_images=False)).get("/rollouts/0/0").text
    assert "ground truth not shown: HotelBooking has no task &#x27;nope-1&#x27;" in text


def test_training_page_draws_reward_and_components_against_step(tmp_path):
    log = tmp_path / "train.jsonl"
    log.write_text("".join(json.dumps({"phase": "grpo", "step": s, "reward": s / 10, "r_traj": s / 8, "r_state": 0.1,
                                       "loss": 1 / s, "note": "text is ignored"}) + "\n" for s in range(1, 6)))
    c = client_of(create_app(training_logs=[log, "docs/results/recipe-smollm2.json"], check_images=False))
    text = c.get("/training").text
    assert "5 logged steps, read as jsonl" in text and "read as recipe" in text
    reward_chart = text[text.index("data-metric='reward'"):]
    for name in ("reward", "r_traj", "r_state"):
        assert f"data-series='{name}'" in reward_chart.split("</svg>")[0]
    assert "data-metric='loss'" in text and "phase sft" in text and "phase grpo" in text
    assert "data-series='note'" not in text


def test_training_logs_bad_lines_are_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "reward": 0.5}\n{"step": "two"}\n{"step": 3}\n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2.*step"):
        read_training_log(bad)
    assert "bad.jsonl:2" in client_of(create_app(training_logs=[bad], check_images=False)).get("/training").text
    r = subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "ui", "--training-log", str(bad), "--no-images"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "bad.jsonl:2" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_trainer_state_log_history_reads(tmp_path):
    f = tmp_path / "trainer_state.json"
    f.write_text(json.dumps({"log_history": [{"step": 1, "loss": 0.9, "reward": 0.1}, {"step": 2, "reward": 0.3},
                                             {"train_runtime": 12.0}]}))
    log = read_training_log(f)
    assert log.form == "trainer_state" and log.series("", "reward") == [(1.0, 0.1), (2.0, 0.3)]


def test_graph_builds_in_the_background_with_a_progress_page(tmp_path):
    release = threading.Event()

    def slow_source(names):
        assert release.wait(120)  # hang guard: released by the test below
        return graph_source(names)

    c = client_of(create_app(graph_source=slow_source, check_images=False))
    r = c.get("/env/HotelBooking/graph")
    assert r.status_code == 202 and "Building the tool graph" in r.text and "http-equiv='refresh'" in r.text
    assert c.get("/env/HotelBooking/graph").status_code == 202  # one build, still going
    release.set()
    for _ in range(600):  # the build finishes once released; each request waits up to 1 s for it
        r = c.get("/env/HotelBooking/graph")
        if r.status_code != 202:
            break
    assert r.status_code == 200 and "class='toolgraph'" in r.text and "within/embedding" in r.text


def test_graph_page_labels_tools_and_draws_edges_by_kind(client):
    text = client.get("/env/HotelBooking/graph").text
    assert "data-tool='HotelBooking.find_guest_by_email'" in text and ">find_guest_by_email</text>" in text
    kinds = set(re.findall(r"class='edge' data-kind='([^']+)'", text))
    assert kinds and kinds <= {"within/embedding", "within/llm", "across/embedding", "across/llm"}
    assert "Links by kind" in text


def test_rows_without_a_reward_sort_last_both_ways(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps({"task_id": t, "reward": rw, "messages": []}) + "\n"
                         for t, rw in [("a", 0.5), ("b", None), ("c", 1.0)]))
    rows = summarise(0, load_rollouts(f), lambda env, tid: "")
    assert [r.task_id for r in sort_rows(rows, "reward", "desc")] == ["c", "a", "b"]
    assert [r.task_id for r in sort_rows(rows, "reward", "asc")] == ["a", "c", "b"]
    assert RolloutQuery.from_params({"min": "0.6"}).link() == "/rollouts?min=0.6"


def test_the_episode_page_steps_through_the_view_it_was_opened_from(client, files):
    recs = _records(files[0])
    view = sorted((i for i, r in enumerate(recs) if any(e.startswith("tool_error") for e in r["errors"])),
                  key=lambda i: (-recs[i]["reward"], i))  # the view's order: reward, best first (ties in file order)
    q = "?code=tool_error&sort=reward&order=desc"
    table = client.get("/rollouts" + q).text
    assert f"href='/rollouts/0/{view[0]}{q.replace('&', '&amp;')}'" in table  # the table's links carry the view
    text = client.get(f"/rollouts/0/{view[1]}{q}").text
    assert f"href='/rollouts/0/{view[0]}{q.replace('&', '&amp;')}'>← previous episode" in text
    assert f"href='/rollouts/0/{view[2]}{q.replace('&', '&amp;')}'>next episode →" in text
    assert f"episode 2 of {len(view)} in this view" in text and "back to the view" in text
    last = client.get(f"/rollouts/0/{view[-1]}{q}").text
    assert "rel='next'" not in last


def test_the_task_page_links_its_episodes(client):
    text = client.get("/env/HotelBooking/task/hotel-003").text
    assert "href='/rollouts?task=hotel-003&amp;env=HotelBooking'" in text
    assert [r[1] for r in _rows(client.get("/rollouts?task=hotel-003&env=HotelBooking").text)] == ["hotel-003"]


def test_a_failed_graph_build_is_shown_and_the_next_visit_tries_again():
    calls = []

    def flaky_source(names):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the encoder ran out of memory")
        return graph_source(names)

    c = client_of(create_app(graph_source=flaky_source, check_images=False))
    r = c.get("/env/HotelBooking/graph")
    for _ in range(600):  # hang guard: each request waits up to 1 s for the build
        if r.status_code != 202:
            break
        r = c.get("/env/HotelBooking/graph")
    assert r.status_code == 500 and "the encoder ran out of memory" in r.text and "reload to try again" in r.text
    for _ in range(600):
        r = c.get("/env/HotelBooking/graph")
        if r.status_code != 202:
            break
    assert r.status_code == 200 and len(calls) == 2


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the build thread's SystemExit
def test_a_graph_build_ended_by_a_base_exception_is_an_error_not_an_endless_wait():
    def exiting_source(names):
        raise SystemExit(3)  # a BaseException that is not an Exception: ends the build thread quietly

    c = client_of(create_app(graph_source=exiting_source, check_images=False))
    r = c.get("/env/HotelBooking/graph")
    for _ in range(600):  # hang guard: each request waits up to 1 s for the build
        if r.status_code != 202:
            break
        r = c.get("/env/HotelBooking/graph")
    assert r.status_code == 500 and "interrupted" in r.text and "reload to try again" in r.text
