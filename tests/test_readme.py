"""Issue 14, item 6: the README's snippets and set-up words hold: the MCP snippet is a complete script
that runs as printed (against a server with the README's token), `make demo` is followed by how to use
`.venv`, and the resume snippet builds its `backend` with a public function."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.server.test_app import start_server

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_readme_mcp_snippet_is_a_complete_script_that_runs(tmp_path):
    (snippet,) = [b for b in _python_blocks() if "streamable_http_client" in b]
    assert "asyncio.run(" in snippet  # before: top-level `async with`/`await`, a SyntaxError as a script
    proc, url = start_server("HotelBooking", token="change-me")
    try:
        script = tmp_path / "mcp_snippet.py"
        script.write_text(snippet.replace("http://127.0.0.1:8765", url))
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "list_hotel_destinations" in r.stdout and "Vienna" in r.stdout


def test_readme_says_how_to_use_the_venv_after_make_demo():
    setup = README.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    assert ". .venv/bin/activate" in setup and ".venv/bin/envfactory" in setup


def test_readme_resume_snippet_builds_its_backend():
    (snippet,) = [b for b in _python_blocks() if "resume(" in b]
    assert "from gym_envfactory.backends import acquire_backend" in snippet
    from gym_envfactory.backends import acquire_backend  # noqa: F401 - the import the snippet shows works
    assert "env.unwrapped.resume(snapshot, backend=backend)" in snippet


def test_readme_documents_the_generators_default_out_and_code_defined_backends():
    assert "default\n`./envfactory_envs/`" in README and "ENVFACTORY_CATALOG=$PWD/envfactory_envs" in README
    assert "(default `env_images/`)" not in README
    assert "envfactory serve --module my_envs" in README and 'backend="subprocess"' in README
