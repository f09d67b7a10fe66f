"""The runtime image's content hash decides when a stale image is rebuilt: it must cover every source the
image runs, the generators included (EnvGen's and the importer's sandbox stages run the image's copy)."""

from __future__ import annotations

from gym_envfactory.containers.images import runtime_source_hash


def _tree(root):
    for rel, text in {"Dockerfile": "FROM x\n", "pyproject.toml": "[project]\n", "gym_envfactory/a.py": "A = 1\n",
                      "generators/tasks/b.py": "B = 1\n", "env_images/E/tools.py": "T = 1\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_a_changed_generator_changes_the_runtime_hash(tmp_path):
    _tree(tmp_path)
    before = runtime_source_hash(tmp_path, "base-1")
    assert runtime_source_hash(tmp_path, "base-1") == before
    (tmp_path / "generators/tasks/b.py").write_text("B = 2\n")
    after = runtime_source_hash(tmp_path, "base-1")
    assert after != before
    (tmp_path / "gym_envfactory/a.py").write_text("A = 2\n")
    assert runtime_source_hash(tmp_path, "base-1") != after
    assert runtime_source_hash(tmp_path, "base-2") != runtime_source_hash(tmp_path, "base-1")


def test_environment_packages_do_not_change_the_runtime_hash(tmp_path):
    _tree(tmp_path)
    before = runtime_source_hash(tmp_path, "base-1")
    (tmp_path / "env_images/E/tools.py").write_text("T = 2\n")
    assert runtime_source_hash(tmp_path, "base-1") == before
