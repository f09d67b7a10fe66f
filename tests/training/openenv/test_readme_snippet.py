"""The README's OpenEnv snippet runs as printed against `envfactory serve HotelBooking` (issue 28, part 5
of the README table)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.server.test_app import start_server

README = (Path(__file__).resolve().parents[3] / "README.md").read_text()


def test_readme_openenv_snippet_runs(tmp_path):
    (snippet,) = [b for b in re.findall(r"```python\n(.*?)```", README, flags=re.S) if "GenericEnvClient" in b]
    proc, url = start_server("HotelBooking", token=None)
    try:
        script = tmp_path / "openenv_snippet.py"
        script.write_text(snippet.replace("http://127.0.0.1:8765", url))
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert "Vienna" in lines[1] and lines[2].startswith("True 1.0 {")
