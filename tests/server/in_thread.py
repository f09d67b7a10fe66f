"""One way for tests to serve an ASGI app: uvicorn on a free loopback port, in a thread of this process."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from gym_envfactory.protocol import listening_socket

#: How long the server may take to start on a busy machine before the test fails (a deadline, not a timing).
START_DEADLINE_S = 60.0


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields ``"127.0.0.1:PORT"``.  Waits for uvicorn's own ``started``
    flag (lifespan startup done, socket listening) up to :data:`START_DEADLINE_S`.

    Raises:
        RuntimeError: the server did not start before the deadline (or its thread ended first).
    """
    sock = listening_socket("127.0.0.1", 0)
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + START_DEADLINE_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the test server did not start within {START_DEADLINE_S:.0f} s")
        time.sleep(0.01)
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
