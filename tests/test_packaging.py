"""What a user installs (docs/architecture.md, "How the rooms reach the package"): the wheel built from the
checkout and the wheel built from the sdist hold the same files, the rooms (``generators``, ``training``,
``ui``) and the catalog inside ``gym_envfactory``, and nothing at the top level of site-packages but the
package.  Built with hatchling's own builders, the project's build backend (``[build-system]``)."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
hatchling_sdist = pytest.importorskip("hatchling.builders.sdist")
hatchling_wheel = pytest.importorskip("hatchling.builders.wheel")


def _wheel(source: Path, out: Path) -> set[str]:
    path = next(iter(hatchling_wheel.WheelBuilder(str(source)).build(directory=str(out), versions=["standard"])))
    with zipfile.ZipFile(path) as zf:
        return {n for n in zf.namelist() if ".dist-info/" not in n}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("build")
    sdist = next(iter(hatchling_sdist.SdistBuilder(str(ROOT)).build(directory=str(tmp / "sdist"), versions=["standard"])))
    with tarfile.open(sdist) as tf:
        members = tf.getmembers()
        tf.extractall(tmp / "unpacked", filter="data")
    unpacked = next((tmp / "unpacked").iterdir())
    return {"checkout": _wheel(ROOT, tmp / "w1"), "sdist": _wheel(unpacked, tmp / "w2"), "sdist_members": members}


def test_the_wheel_from_the_sdist_equals_the_wheel_from_the_checkout(built):
    assert built["checkout"] == built["sdist"]


@pytest.mark.parametrize("room", ["generators/cli.py", "generators/sandbox/stages.py", "training/export/rl.py",
                                  "training/verl/agent_loop.py", "ui/app.py", "_catalog/HotelBooking/tools.py"])
def test_the_wheel_holds_the_rooms_and_the_catalog_inside_the_package(built, room):
    assert f"gym_envfactory/{room}" in built["checkout"]


def test_nothing_but_the_package_lands_at_the_top_of_site_packages(built):
    assert {n.split("/")[0] for n in built["checkout"]} == {"gym_envfactory"}


def test_the_sdist_holds_real_folders_and_no_links(built):
    names = {m.name.split("/", 1)[1] for m in built["sdist_members"] if "/" in m.name}
    assert not [m.name for m in built["sdist_members"] if m.issym() or m.islnk()]
    assert "generators/cli.py" in names and "training/trl.py" in names and "ui/app.py" in names
    assert not any(n.startswith(("gym_envfactory/generators", "gym_envfactory/training", "gym_envfactory/ui",
                                 ".ci/", ".import_linter_cache")) for n in names)
