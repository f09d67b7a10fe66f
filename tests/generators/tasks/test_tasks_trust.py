"""Task synthesis executes environments' code in this process (chain checks, oracle replays, pass@k solving), so
``envfactory gen tasks`` (both writers) and ``envfactory graph sample --check`` refuse an untrusted package
(provenance ``generated`` or ``imported``) unless ``--trust``, as ``validate``, ``rollout`` and ``tasks import``
do; with ``--trust`` they run as before.  The probe package's tools leave a file behind when they run, so a
refusal is seen to run nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gym_envfactory.environment.catalog import register_catalog

nx = pytest.importorskip("networkx")

STATE = "from pydantic import BaseModel\n\n\nclass State(BaseModel):\n    n: int = 0\n"
TOOLS = '''import os
from pathlib import Path

from gym_envfactory import tool

from .state import State


def _ran() -> None:
    Path(os.environ["PROBE_SENTINEL"]).write_text("ran")


@tool(read_only=True)
def get_count(state: State) -> int:
    """The count."""
    _ran()
    return state.n


@tool
def add_to_count(state: State, *, amount: int) -> int:
    """Add amount to the count; the new count."""
    _ran()
    state.n += amount
    return state.n
'''


def _package(catalog: Path, kind: str) -> str:
    name = f"ProbeTasks{kind.title()}"  # one name per kind: the catalog caches a package by name
    folder = catalog / name
    (folder / "initial_states").mkdir(parents=True)
    (folder / "environment.toml").write_text(
        f'name = "{name}"\nversion = "0.1.0"\ndomain = "utilities"\ndescription = "Counts."\n\n'
        f'[provenance]\nkind = "{kind}"\nmodel = "test"\n')
    (folder / "__init__.py").write_text("")
    (folder / "state.py").write_text(STATE)
    (folder / "tools.py").write_text(TOOLS)
    (folder / "initial_states" / "small.json").write_text('{"n": 0}')
    return name


def _graph(path: Path, name: str) -> Path:
    """A hand-made tool graph over the probe package: get_count's result feeds add_to_count's amount."""
    from gym_envfactory.generators.tasks.graph import save_graph

    G = nx.DiGraph(envs=[name])
    a, b = f"{name}.get_count", f"{name}.add_to_count"
    G.add_node(a, kind="tool", env=name, name="get_count")
    G.add_node(b, kind="tool", env=name, name="add_to_count")
    G.add_edge(a, b, kind="depends", score=1.0, via=[{"output": "", "input": "amount", "score": 1.0,
                                                       "origin": "test"}])
    return save_graph(G, path)


@pytest.fixture(params=["generated", "imported"])
def probe(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    name = _package(tmp_path / "cat", request.param)
    sentinel = tmp_path / "ran.txt"
    monkeypatch.setenv("ENVFACTORY_CATALOG", str(tmp_path / "cat"))
    monkeypatch.setenv("PROBE_SENTINEL", str(sentinel))
    monkeypatch.chdir(tmp_path)
    register_catalog()
    return {"tmp": tmp_path, "sentinel": sentinel, "kind": request.param, "name": name,
            "graph": _graph(tmp_path / "g.json", name)}


def _one_line(output: str) -> str:
    return " ".join(output.split())


@pytest.mark.parametrize("writer", [[], ["--writer", "template"]])
def test_gen_tasks_refuses_an_untrusted_package_without_trust(probe: dict[str, Any], writer: list[str]) -> None:
    from gym_envfactory.generators.cli import gen_app

    out = probe["tmp"] / "tasks.jsonl"
    res = CliRunner().invoke(gen_app, ["tasks", probe["name"], *writer, "--model", "m", "--graph", str(probe["graph"]),
                                       "--n", "1", "--out", str(out), "--checkpoint-dir", str(probe["tmp"] / "qg")])
    text = _one_line(res.output)
    assert res.exit_code == 2, res.output
    assert f"{probe['name']} (provenance {probe['kind']}) untrusted" in text and "pass --trust" in text, text
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) <= 2
    assert not out.exists() and not probe["sentinel"].exists()  # nothing ran, nothing written


def test_gen_tasks_template_with_trust_runs_as_before(probe: dict[str, Any]) -> None:
    from gym_envfactory.generators.cli import gen_app

    out = probe["tmp"] / "tasks.jsonl"
    res = CliRunner().invoke(gen_app, ["tasks", probe["name"], "--writer", "template", "--trust", "--graph", str(probe["graph"]),
                                       "--n", "1", "--out", str(out), "--checkpoint-dir", str(probe["tmp"] / "qg")])
    assert "untrusted" not in res.output, res.output
    assert probe["sentinel"].exists(), res.output  # the chains ran, in this process
    # the writer's own report (this tiny package's chains are mostly dropped: exit 1 when no task is kept)
    assert res.exit_code in (0, 1) and f"{probe['name']}: kept " in _one_line(res.output), res.output
    assert out.exists() and (probe["tmp"] / "tasks.stats.json").exists()


def test_graph_sample_check_refuses_an_untrusted_package_without_trust(probe: dict[str, Any]) -> None:
    from gym_envfactory.generators.tasks.cli import graph_app

    out = probe["tmp"] / "chains.jsonl"
    args = ["sample", "--graph", str(probe["graph"]), "--n", "1", "--out", str(out)]
    res = CliRunner().invoke(graph_app, args)
    text = _one_line(res.output)
    assert res.exit_code == 1 and "pass --trust" in text and f"{probe['name']} (provenance {probe['kind']})" in text, text
    assert not out.exists() and not probe["sentinel"].exists()
    res = CliRunner().invoke(graph_app, [*args, "--no-check"])  # sampling alone runs no code: no gate
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(graph_app, [*args, "--trust"])
    assert res.exit_code == 0 and probe["sentinel"].exists(), res.output  # checked: the chains ran, in this process
    assert out.exists() and "untrusted" not in res.output


def test_validate_refuses_an_untrusted_package_without_trust_by_the_same_rule(probe: dict[str, Any]) -> None:
    """``envfactory validate`` shares the rule (environment.spec.require_trusted) and its message."""
    from gym_envfactory.cli import app

    res = CliRunner().invoke(app, ["validate", probe["name"]])
    text = _one_line(res.output)
    assert res.exit_code == 1 and f"{probe['name']} (provenance {probe['kind']}) untrusted: validating" in text, text
    assert "pass --trust" in text and not probe["sentinel"].exists()


def test_shipped_packages_need_no_trust() -> None:
    from gym_envfactory.generators.tasks.solvable import require_trusted

    require_trusted(["HotelBooking", "NoSuchEnvironment"], trust=False, doing="gen tasks")  # trusted / unknown: no error
