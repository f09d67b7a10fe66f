"""`envfactory ui` reads rollout files as the writer writes them, and one odd record or a line a job is
still appending never hides the rest of a file (issue 25, finding 6; docs/ui.md, "Pages")."""

from __future__ import annotations

import json

import pytest

from gym_envfactory.errors import DatasetError
from gym_envfactory.ui.app import create_app
from gym_envfactory.ui.rollouts import load_rollouts, read_rollouts
from tests.ui.helpers import client_of


def _rec(task_id: str, reward: float = 1.0, reply: str = "Done.") -> dict:
    return {"task_id": task_id, "env": "HotelBooking", "policy": "p", "reward": reward,
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": reply}]}


def _line(rec: dict) -> str:
    return json.dumps(rec, ensure_ascii=False) + "\n"  # as `envfactory rollout --out` writes (rollout/runner.py)


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085"])
def test_a_line_separator_inside_a_reply_is_text_not_a_line_end(tmp_path, char):
    f = tmp_path / "t.jsonl"
    f.write_text(_line(_rec("a", reply=f"one{char}two")) + _line(_rec("b")), encoding="utf-8")
    eps = load_rollouts(f)
    assert [e.record["task_id"] for e in eps] == ["a", "b"] and [e.line for e in eps] == [1, 2]
    assert eps[0].record["messages"][1]["content"] == f"one{char}two"
    c = client_of(create_app([f], check_images=False))
    r = c.get("/rollouts")
    assert r.status_code == 200 and "2 episodes" in r.text
    assert c.get("/rollouts/0/0").status_code == 200


@pytest.mark.parametrize("reward", ["1" + "0" * 400, "-" + "9" * 400, "1e400", "NaN", "-Infinity", '"0.5"', "true",
                                    "[1]"])
def test_a_reward_that_is_not_a_finite_number_is_that_record_malformed_and_the_rest_is_served(tmp_path, reward):
    good = _line(_rec("good-1", 0.5))
    bad = _line(_rec("bad", 0.0)).replace('"reward": 0.0', f'"reward": {reward}')
    f = tmp_path / "r.jsonl"
    f.write_text(good + bad + _line(_rec("good-2", 1.0)), encoding="utf-8")
    rf = read_rollouts(f)
    assert [e.problem is None for e in rf.episodes] == [True, False, True]
    assert "r.jsonl:2 field 'reward'" in rf.episodes[1].problem
    c = client_of(create_app([f], check_images=False))
    r = c.get("/rollouts")
    assert r.status_code == 200
    assert "3 episodes (1 malformed), mean reward 0.750" in r.text and "r.jsonl:2 field &#x27;reward&#x27;" in r.text
    assert c.get("/rollouts/0/0").status_code == 200 and c.get("/rollouts/0/2").status_code == 200
    r = c.get("/rollouts/0/1")
    assert r.status_code == 422 and "r.jsonl:2" in r.text and "reward" in r.text


@pytest.mark.parametrize("cut", ["json", "utf8"])
def test_a_half_written_last_line_is_skipped_with_a_note(tmp_path, cut):
    whole = _line(_rec("a", reply="d\u00e9j\u00e0 vu"))
    last = _line(_rec("b", reply="d\u00e9j\u00e0 vu")).encode()
    part = last[:len(last) // 2] if cut == "json" else last[:last.index("\u00e9".encode()) + 1]  # inside the é
    f = tmp_path / "growing.jsonl"
    f.write_bytes(whole.encode() + part)
    rf = read_rollouts(f)
    assert [e.record["task_id"] for e in rf.episodes] == ["a"]
    assert len(rf.notes) == 1 and "growing.jsonl:2" in rf.notes[0] and "incomplete last line" in rf.notes[0]
    r = client_of(create_app([f], check_images=False)).get("/rollouts")
    assert r.status_code == 200 and "1 episodes" in r.text and "incomplete last line" in r.text


def test_a_last_line_without_newline_that_is_whole_json_is_an_episode(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(_line(_rec("a")) + _line(_rec("b")).rstrip("\n"), encoding="utf-8")
    rf = read_rollouts(f)
    assert [e.record["task_id"] for e in rf.episodes] == ["a", "b"] and rf.notes == []


@pytest.mark.parametrize("middle", [b"{not json", b'{"messages": [], "x": "\xff"}'])
def test_a_broken_line_before_the_last_still_rejects_the_file_naming_it(tmp_path, middle):
    f = tmp_path / "t.jsonl"
    f.write_bytes(_line(_rec("a")).encode() + middle + b"\n" + _line(_rec("b")).encode())
    with pytest.raises(DatasetError, match=r"t\.jsonl:2"):
        read_rollouts(f)


def test_a_line_nested_beyond_the_parser_is_that_file_refused_not_a_server_error(tmp_path):
    """A record nested deeper than ``json.loads`` goes raised RecursionError, which no one caught: every page
    of the UI answered 500.  Now the file is refused naming the line, and the other files are served."""
    deep = '{"messages": [{"role": "assistant", "content": "x", "args": ' + "[" * 50_000 + "]" * 50_000 + "}]}"
    bad, good = tmp_path / "bad.jsonl", tmp_path / "good.jsonl"
    bad.write_text(_line(_rec("a")) + deep + "\n" + _line(_rec("b")), encoding="utf-8")
    good.write_text(_line(_rec("c")), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2.*nested too deeply"):
        read_rollouts(bad)
    client = client_of(create_app([bad, good]))
    index = client.get("/rollouts")
    assert index.status_code == 200 and "nested too deeply" in index.text
    assert client.get("/rollouts/1/0").status_code == 200
    assert client.get("/rollouts/0/0").status_code != 500
