"""Starting ``envfactory serve`` as a local server process for the ``subprocess`` backend."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

from gym_envfactory.errors import BackendError

__all__ = ["start_server_process"]

log = logging.getLogger(__name__)

def start_server_process(envs: Sequence[str], token: str | None, timeout: float) -> tuple[str, Callable[[], None]]:
    """Start ``envfactory serve`` on a free loopback port and return (url, stop).  The server's
    stderr goes to a log file (never an undrained pipe, which would block it once full).

    Args:
        envs: environment names the server serves.
        token: bearer token the server requires (``ENVFACTORY_TOKEN``), or ``None`` for none.
        timeout: seconds to wait for the server's ``{"listening": url}`` announcement.

    Raises:
        BackendError: the server exited or did not announce itself within ``timeout`` (with the log's tail).
    """
    cmd = [sys.executable, "-m", "gym_envfactory.cli", "serve", *envs, "--host", "127.0.0.1", "--port", "0", "--announce"]
    environ = dict(os.environ)
    if token:
        environ["ENVFACTORY_TOKEN"] = token
    log_file = tempfile.NamedTemporaryFile(prefix="envfactory-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, text=True, env=environ)
    log_file.close()
    stdout = proc.stdout
    assert stdout is not None  # stdout=PIPE

    def log_tail() -> str:
        try:
            return open(log_file.name, encoding="utf-8", errors="replace").read()[-2000:].strip()
        except OSError:
            return ""

    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = stdout.readline()
        if line.startswith("{"):
            break
        if proc.poll() is not None:
            raise BackendError(f"environment server exited with {proc.returncode}: {log_tail()}")
    else:
        proc.kill()
        raise BackendError(f"environment server did not start within {timeout} s: {log_tail()}")
    url = json.loads(line)["listening"]
    # keep draining stdout so the server can never block on a full pipe
    threading.Thread(target=lambda: [None for _ in stdout], name="envfactory-server-stdout", daemon=True).start()
    log.info("environment server %s (pid %d) logs to %s", url, proc.pid, log_file.name)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        try:
            os.unlink(log_file.name)
        except OSError:
            pass

    return url, stop
