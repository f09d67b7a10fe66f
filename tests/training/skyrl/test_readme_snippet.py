"""The README's SkyRL snippet runs as printed (issue 28, the README table)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = (Path(__file__).resolve().parents[3] / "README.md").read_text()


def test_readme_skyrl_snippet_runs(tmp_path):
    (snippet,) = [b for b in re.findall(r"```python\n(.*?)```", README, flags=re.S) if "skyrl_gym" in b]
    script = tmp_path / "skyrl_snippet.py"
    script.write_text(snippet)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("True 1.0 {")
