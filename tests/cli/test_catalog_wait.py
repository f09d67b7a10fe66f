"""``envfactory catalog up`` waits with the engine's health semantics (issue 29, part 1): ``starting`` and
``unhealthy`` are passed through until the deadline (a slow start on a busy machine turns healthy at the
next successful probe); only a stopped container ends the wait early.  Driven by a fake clock and fake
container rows, so nothing here depends on time or Docker."""

from __future__ import annotations

from typing import Any

from gym_envfactory.cli.images import wait_for_health


def _rows(*states: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"service": f"s{i}", "state": st, "health": h} for i, (st, h) in enumerate(states)]


class FakeEngine:
    """Hands out one scripted list of rows per look; the clock moves by each sleep."""

    def __init__(self, script: list[list[dict[str, Any]]]) -> None:
        self.script, self.now, self.looks = script, 0.0, 0

    def containers(self, project: str) -> list[dict[str, Any]]:
        rows = self.script[min(self.looks, len(self.script) - 1)]
        self.looks += 1
        return rows

    def sleep(self, s: float) -> None:
        self.now += s


def _wait(engine: FakeEngine, wait: float) -> list[dict[str, Any]]:
    return wait_for_health("p", wait, containers=engine.containers, clock=lambda: engine.now, sleep=engine.sleep)


def test_unhealthy_then_healthy_is_waited_through():
    script = [_rows(("running", "starting"), ("running", "starting")),
              _rows(("running", "unhealthy"), ("running", "healthy")),  # the old wait gave up here
              _rows(("running", "unhealthy"), ("running", "healthy")),
              _rows(("running", "healthy"), ("running", "healthy"))]
    engine = FakeEngine(script)
    rows = _wait(engine, 180)
    assert all(r["health"] == "healthy" for r in rows) and engine.looks == 4


def test_a_stopped_container_ends_the_wait_and_the_deadline_holds():
    engine = FakeEngine([_rows(("running", "starting")), _rows(("exited", "unhealthy"))])
    assert _wait(engine, 180)[0]["state"] == "exited" and engine.looks == 2
    stuck = FakeEngine([_rows(("running", "unhealthy"))])
    rows = _wait(stuck, 30)
    assert rows[0]["health"] == "unhealthy" and stuck.now >= 30 and stuck.looks == 61  # polled every 0.5 s


def test_no_wait_looks_once():
    engine = FakeEngine([_rows(("running", "starting"))])
    assert _wait(engine, 0)[0]["health"] == "starting" and engine.looks == 1
