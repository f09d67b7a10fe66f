"""`envfactory ui` in a real browser: headless Chromium (Debian's chromium-headless-shell, installed by
scripts/install-test-deps.sh) loads each page from a live server; the test checks the DOM the browser
built and keeps a screenshot of each page under test-artifacts/ui/ (issue 13 part 3).

Fails, never skips, when no Chromium is installed: the README's test command installs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    out = tmp_path_factory.mktemp("ui-browser") / "trajectories.jsonl"
    subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "rollout", "envfactory/HotelBooking-v0", "--policy",
                    "noisy", "--seed", "0", "--out", str(out)], check=True, capture_output=True)
    with serve(create_app([out], graph_source=graph_source, check_images=False)) as url:
        yield url


@pytest.mark.parametrize(("path", "expect"), [
    ("/", ["Catalog", "HotelBooking", "TeamCalendar", "PersonalFinance", "environments in"]),
    ("/env/HotelBooking", ["Tools", "search_hotels", "input schema", "Initial states", "Tasks", "hotel-003"]),
    ("/env/HotelBooking/task/hotel-003", ["Turn 0", "ground truth", "find_guest_by_email"]),
    ("/env/HotelBooking/graph", ["Tool graph: HotelBooking", "<svg", "Links"]),
    ("/rollouts", ["Rollouts", "episodes, mean reward", "hotel-003"]),
    ("/rollouts/0/2", ["Episode hotel-003", "Turn 0", "turn reward", "tool_error", "State diff against the ground truth"]),
])
def test_page_renders_in_chromium(base_url, path, expect):
    name = path.strip("/").replace("/", "_") or "catalog"
    dom = _browse(base_url + path, ARTIFACTS / f"{name}.png")
    missing = [e for e in expect if e not in dom]
    assert not missing, f"{path}: the browser's DOM lacks {missing}"
