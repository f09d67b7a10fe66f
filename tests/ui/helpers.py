"""Shared by the UI tests: a deterministic stand-in encoder for the tool graph, a test client that comes
from a loopback address (the UI refuses other ``Host`` values), and a UI server in a thread."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np


def word_encoder(texts: list[str]) -> np.ndarray:
    """Bag-of-words vectors hashed into 64 dimensions: texts sharing words score high (no model download)."""
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().replace("_", " ").split():
            out[i, int(hashlib.sha256(w.encode()).hexdigest(), 16) % 64] += 1.0
    return out


def client_of(app, host: str = "127.0.0.1:8765"):
    """Starlette's test client for ``app``, sending ``Host: <host>`` (its default, ``testserver``, is not
    loopback: the UI's DNS-rebinding guard refuses it)."""
    from starlette.testclient import TestClient

    return TestClient(app, base_url=f"http://{host}")


def graph_source(names: list[str]):
    from gym_envfactory.generators.tasks.graph import build_graph

    return build_graph(names, encoder=word_encoder)


@contextmanager
def serve(app) -> Iterator[str]:
    """Run ``app`` with uvicorn on a free loopback port in a thread; yields its base URL."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 30  # hang guard, not a speed check
    while not server.started:
        if time.monotonic() > deadline or not t.is_alive():
            raise RuntimeError("the UI server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(timeout=10)
