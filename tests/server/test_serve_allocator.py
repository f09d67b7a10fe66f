"""``envfactory serve`` runs on the system allocator (issue 24, part 6): started without ``PYTHONMALLOC`` it
re-executes itself once, same pid, with ``PYTHONMALLOC=malloc``; a caller's own setting is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc/<pid>/environ")


def serve(env: dict[str, str], *extra: str) -> tuple[subprocess.Popen, str, dict[str, str]]:
    p = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", "HotelBooking", "--port", "0",
                          "--announce", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None
    url = json.loads(p.stdout.readline())["listening"]
    raw = Path(f"/proc/{p.pid}/environ").read_bytes()
    environ = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
    return p, url, environ


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    p.wait(timeout=10)
    for f in (p.stdout, p.stderr):
        if f is not None:
            f.close()


def test_plain_serve_reexecutes_on_the_system_allocator(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONMALLOC", "ENVFACTORY_SERVE_REEXEC", "ENVFACTORY_TOKEN")}
    p, url, environ = serve(env, "--token-file", str(token))  # the token file is read after the re-exec
    try:
        assert environ.get("PYTHONMALLOC") == "malloc" and environ.get("ENVFACTORY_SERVE_REEXEC") == "1"
        req = urllib.request.Request(f"{url}/readyz", headers={"Authorization": "Bearer s3cret"})
        with urllib.request.urlopen(req, timeout=10) as r:  # the same process (pid) answers, with the token
            assert r.status == 200
    finally:
        stop(p)


def test_a_callers_allocator_choice_is_kept() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ENVFACTORY_SERVE_REEXEC", "ENVFACTORY_TOKEN")}
    env["PYTHONMALLOC"] = "pymalloc"
    p, _, environ = serve(env)
    try:
        assert environ.get("PYTHONMALLOC") == "pymalloc" and "ENVFACTORY_SERVE_REEXEC" not in environ
    finally:
        stop(p)


def test_stdio_serve_reexecutes_before_reading_stdin() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONMALLOC", "ENVFACTORY_SERVE_REEXEC", "ENVFACTORY_TOKEN")}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = subprocess.run([sys.executable, "-m", "gym_envfactory.cli", "serve", "HotelBooking", "--transport", "stdio"],
                       input=json.dumps(init) + "\n", capture_output=True, text=True, env=env, timeout=120)
    answer = json.loads(r.stdout.splitlines()[0])
    assert answer["id"] == 1 and "result" in answer, r.stdout + r.stderr
