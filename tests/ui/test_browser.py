"""`envfactory ui` in a real browser: headless Chromium (Debian's chromium-headless-shell, installed by
scripts/install-test-deps.sh) loads each page from a live server; the test checks the DOM the browser
built and keeps a screenshot of each page kind under test-artifacts/ui/ (issue 13 part 3; issue 29 part
2: filtered and sorted rollouts, a comparison sorted by the page's script, the episode beside its ground
truth, training curves, the tool graph).

Fails, never skips, when no Chromium is installed: the README's test command installs it."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gym_envfactory.training.log import TrainingLog
from gym_envfactory.ui.app import create_app
from tests.ui.helpers import graph_source, serve

ARTIFACTS = Path(os.environ.get("ENVFACTORY_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")) / "ui"


def _chromium() -> str:
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("no Chromium found: run scripts/install-test-deps.sh (installs Debian's chromium-headless-shell)")


def _browse(url: str, shot: Path) -> str:
    """The DOM Chromium built for ``url``; also writes a screenshot to ``shot``."""
    base = [_chromium(), "--headless", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1600"]
    if os.geteuid() == 0:
        base.append("--no-sandbox")  # Chromium refuses to run its sandbox as root (CI runs as root)
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True)
    assert shot.is_file() and shot.stat().st_size > 1000
    return dom.stdout


RECIPE = Path(__file__).resolve().parents[2] / "docs" / "results" / "recipe-smollm2.json"


@pytest.fixture(scope="module")
def rollout_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ui-browser")
    out = []
    for policy, name in (("noisy", "trajectories.jsonl"), ("oracle", "oracle.jsonl")):
        f = folder / name
        subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "rollout", "envfactory/HotelBooking-v0", "--policy",
                        policy, "--seed", "0", "--out", str(f)], check=True, capture_output=True)
        out.append(f)
    log = folder / "train-log.jsonl"  # a log as training.log.TrainingLog writes it: reward and components per step
    writer = TrainingLog(log)
    for s in range(1, 41):
        rise = 1 - math.exp(-s / 12)
        writer.observe([{"reward": 0.15 + 0.6 * rise + 0.04 * math.sin(s), "r_traj": 0.3 + 0.6 * rise + 0.03 * math.cos(s),
                         "r_state": 0.05 + 0.55 * rise + 0.05 * math.sin(2 * s), "penalty": 0.08 * (1 - rise)}])
        writer.write(s, "grpo", {"reward": 0.15 + 0.6 * rise, "loss": 0.4 * (1 - rise) + 0.02 * math.sin(3 * s)})
    return out, log


@pytest.fixture(scope="module")
def base_url(rollout_files):
    files, log = rollout_files
    with serve(create_app(files, graph_source=graph_source, check_images=False, training_logs=[RECIPE, log])) as url:
        deadline = time.monotonic() + 300  # hang guard: the graph builds in the background; wait for it once
        while True:
            try:
                if urllib.request.urlopen(url + "/env/HotelBooking/graph").status == 200:
                    break
            except urllib.error.HTTPError as exc:
                raise AssertionError(f"graph page: HTTP {exc.code}") from None
            assert time.monotonic() < deadline, "the tool graph never finished building"
        yield url


class _Tables(HTMLParser):
    """The DOM's tables: per table its class, header cells (text, aria-sort) and body rows (cell texts)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self._stack: list[dict] = []
        self._cell: list[str] | None = None
        self._sort: str | None = None
        self._where = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._stack.append({"class": a.get("class") or "", "head": [], "rows": []})
        elif not self._stack:
            return
        elif tag in ("thead", "tbody"):
            self._where = tag
        elif tag == "tr" and self._where == "tbody":
            self._stack[-1]["rows"].append({"class": a.get("class") or "", "cells": []})
        elif tag in ("td", "th"):
            self._cell = []
            self._sort = a.get("aria-sort")

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if not self._stack:
            return
        t = self._stack[-1]
        if tag in ("td", "th") and self._cell is not None:
            text = "".join(self._cell).strip()
            if tag == "th" and self._where == "thead":
                t["head"].append((text, self._sort))
            elif t["rows"]:
                t["rows"][-1]["cells"].append(text)
            self._cell = None
        elif tag == "table":
            self.tables.append(self._stack.pop())
            self._where = "tbody" if self._stack else ""


def _tables(dom: str, cls: str) -> list[dict]:
    p = _Tables()
    p.feed(dom)
    return [t for t in p.tables if cls in t["class"].split()]


@pytest.mark.parametrize(("path", "expect"), [
    ("/", ["Catalog", "HotelBooking", "TeamCalendar", "PersonalFinance", "environments in"]),
    ("/env/HotelBooking", ["Tools", "search_hotels", "input schema", "Initial states", "Tasks", "hotel-003"]),
    ("/env/HotelBooking/task/hotel-003", ["Turn 0", "ground truth", "find_guest_by_email"]),
    ("/env/HotelBooking/state/small", ["HotelBooking: state small", "records or value", "bookings"]),
    ("/env/HotelBooking/graph", ["Tool graph: HotelBooking", "class=\"toolgraph\"", "find_guest_by_email",
                                 "within/embedding", "across environments", "Links by kind"]),
    ("/rollouts", ["Rollouts", "episodes, mean reward", "hotel-003", "class=\"hist\"", "Compare"]),
    ("/rollouts/0/2", ["Episode hotel-003", "Turn 0", "turn reward", "already_cancelled", "ground truth and the agent",
                       "previous episode", "next episode", "/env/HotelBooking/task/hotel-003",
                       "State diff against the ground truth"]),
    ("/training", ["Training", "phase grpo", "phase sft", "data-series=\"r_traj\"", "data-series=\"env_reward\"", "read as recipe"]),
])
def test_page_renders_in_chromium(base_url, path, expect):
    name = path.strip("/").replace("/", "_") or "catalog"
    dom = _browse(base_url + path, ARTIFACTS / f"{name}.png")
    missing = [e for e in expect if e not in dom]
    assert not missing, f"{path}: the browser's DOM lacks {missing}"


def test_rollouts_table_sorts_and_filters_in_chromium(base_url, rollout_files):
    """The view is a link: the browser loads a filtered, sorted URL and its table holds exactly the
    matching episodes, best first."""
    recs = [json.loads(line) for line in rollout_files[0][0].read_text().splitlines()]
    want = sorted((r["reward"] for r in recs if any(e.startswith("tool_error") for e in r["errors"])), reverse=True)
    dom = _browse(base_url + "/rollouts?code=tool_error&sort=reward&order=desc", ARTIFACTS / "rollouts_filtered.png")
    first = _tables(dom, "episodes")[0]
    assert [r["cells"][5] for r in first["rows"]] == [f"{w:.3f}" for w in want] and len(want) > 1
    assert [h for h, _ in first["head"]][5].startswith("reward")
    assert f"showing {len(want)} of {len(recs)} episodes (filtered)" in dom


def test_comparison_opens_and_its_script_sorts_by_the_difference_in_chromium(base_url):
    """The comparison of the noisy and the oracle file; ``#sort=-6`` makes the page's script sort the table
    by the difference B − A, largest first, and mark the header (the script ran in the browser)."""
    plain = _tables(_browse(base_url + "/compare?a=0&b=1", ARTIFACTS / "compare.png"), "compare")[0]
    diffs_in_task_order = [float(r["cells"][6]) for r in plain["rows"]]
    assert diffs_in_task_order != sorted(diffs_in_task_order, reverse=True)  # so the sort below is the script's
    assert any(r["class"] == "better" for r in plain["rows"])
    t = _tables(_browse(base_url + "/compare?a=0&b=1#sort=-6", ARTIFACTS / "compare_sorted.png"), "compare")[0]
    diffs = [float(r["cells"][6]) for r in t["rows"]]
    assert diffs == sorted(diffs_in_task_order, reverse=True)
    assert t["head"][6][1] == "descending" and t["rows"][0]["class"] == "better"


def test_graph_progress_page_in_chromium():
    """While the tool graph builds, the page says so (and reloads itself) instead of staying blank."""
    import threading

    release = threading.Event()

    def slow_source(names):
        assert release.wait(300)  # hang guard; released below
        return graph_source(names)

    with serve(create_app(graph_source=slow_source, check_images=False)) as url:
        try:
            dom = _browse(url + "/env/HotelBooking/graph", ARTIFACTS / "graph_building.png")
        finally:
            release.set()
    assert "Building the tool graph over the catalog" in dom and 'http-equiv="refresh"' in dom


def test_episode_with_a_wrong_argument_shows_the_diff_in_chromium(base_url, rollout_files):
    """The noisy policy changed one argument of a call: the episode page marks that argument, expected
    beside actual, in the ground-truth table the browser built."""
    recs = [json.loads(line) for line in rollout_files[0][0].read_text().splitlines()]
    ei = next(i for i, r in enumerate(recs) if any("wrong_argument" in p for p in r["perturbations"]))
    dom = _browse(f"{base_url}/rollouts/0/{ei}", ARTIFACTS / "episode_wrong_argument.png")
    assert 'class="arg-differs"' in dom and 'class="pair pair-differs"' in dom
