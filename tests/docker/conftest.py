"""Fixtures of the Docker tests: the images are built once per test session (base from Debian packages
with debootstrap when no base exists, runtime from a host wheelhouse, one image per environment) and
reused across runs while their inputs are unchanged.  Nothing is pulled: testcontainers' reaper
("Ryuk") is disabled and every container started here is removed by the fixtures.

These tests never skip: without a Docker engine (or debootstrap, for the first base) they fail with a
message saying what is missing.
"""

from __future__ import annotations

import os
import sys

# Before testcontainers is imported anywhere: its reaper image cannot be pulled on an air-gapped host.
os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"

import pytest  # noqa: E402

OWNER = str(os.getpid())


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.docker)


def _say(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def docker_client():
    from gym_envfactory.containers.images import docker_client as client
    from gym_envfactory.errors import ImageError

    try:
        return client()
    except ImageError as exc:
        pytest.fail(f"the Docker tests need a Docker engine and the docker SDK: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def docker_images(docker_client):
    """Base, runtime and every environment image, built when missing or stale (once per session)."""
    from gym_envfactory.containers.images import ensure_images
    from gym_envfactory.errors import ImageError

    try:
        return ensure_images(say=_say)
    except ImageError as exc:
        pytest.fail(f"building the Docker images failed: {exc}", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _remove_leftover_containers():
    """Whatever a failed test leaves behind (backend containers of this process) is removed."""
    yield
    try:
        from gym_envfactory.containers.run import remove_containers

        remove_containers(**{"owner-pid": OWNER})
    except Exception:  # noqa: BLE001 - no engine: the tests already failed saying so
        pass


@pytest.fixture
def container_of(docker_client):
    """``container_of(url) -> docker Container`` publishing that URL's port (for a gym env's backend)."""

    def find(url: str):
        port = url.rstrip("/").rsplit(":", 1)[1]
        for c in docker_client.containers.list(filters={"label": f"org.envfactory.owner-pid={OWNER}"}):
            for binding in (c.attrs["NetworkSettings"]["Ports"] or {}).get("8765/tcp") or []:
                if binding["HostPort"] == port:
                    return c
        raise AssertionError(f"no container of this test session publishes {url}")

    return find
