"""The environment server: many isolated sessions per process over the fast session protocol
(JSON-RPC 2.0 over WebSocket), an HTTP control plane, health/readiness and Prometheus metrics, and
the MCP endpoint (:mod:`.mcp_server`: ``/mcp/<EnvName>`` over streamable HTTP, or stdio).

Needs the ``server`` extra (starlette, uvicorn, websockets, prometheus-client).
"""

import os
import socket

from gym_envfactory.errors import BadRequestError, CapacityError, SessionOwnershipError, UnknownSessionError
from gym_envfactory.protocol import ANNOUNCE_NONCE_VAR, announcement, listening_socket
from gym_envfactory.server.manager import ManagedSession, SessionManager

__all__ = ["SessionManager", "ManagedSession", "UnknownSessionError", "CapacityError", "BadRequestError",
           "SessionOwnershipError", "serve", "listening_socket", "write_announcement", "ANNOUNCE_NONCE_VAR"]

#: The GIL switch interval of a server process (``sys.setswitchinterval``; CPython's default is 5 ms):
#: how long a thread waiting for the GIL may wait for one that holds it (see :func:`serve`).
SWITCH_INTERVAL_S = 0.001
#: Frames one WebSocket connection may have received and not yet run (uvicorn's ``ws_max_queue``).
WS_MAX_QUEUE = 4


def serve(envs: list[str] | None = None, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          ttl_s: float = 900.0, max_sessions: int = 10_000, max_sessions_per_client: int | None = None,
          close_on_disconnect: bool = False, announce: bool = False, log_level: str = "warning",
          memory_budget: int | str | None = None, uds: str | None = None,
          max_mcp_sessions_per_client: int | None = None, announce_fd: int | None = None) -> None:
    """Run the server until interrupted (blocking).  ``port=0`` picks a free port; with ``announce``
    the bound address is printed as one JSON line on stdout (``{"listening": "http://127.0.0.1:PORT"}``,
    plus ``"nonce"``: the value of ``$ENVFACTORY_ANNOUNCE_NONCE`` when set; :func:`gym_envfactory.protocol.announcement`) so a parent process can find it.
    ``announce_fd``: also write that line (and a newline) to this inherited file descriptor, then close it:
    a parent's own pipe, which no print of an environment module can garble (the ``subprocess`` and
    ``isolated`` backends read it there; :func:`write_announcement`).  ``max_sessions_per_client``: most sessions one client
    (``X-Envfactory-Client``) may hold (default half of ``max_sessions``); ``close_on_disconnect``: a
    WebSocket connection's sessions close when it drops (a connection may ask either way).
    ``max_mcp_sessions_per_client``: most MCP transport sessions (``Mcp-Session-Id``) one client may hold
    (default ``max_sessions_per_client``).
    ``memory_budget``: a size capping the memory budget (``"512M"``, ``"50%"``; default: the cgroup
    limit, else ``$ENVFACTORY_MEMORY_BUDGET``, else a share of physical memory; :mod:`.admission`).
    ``uds``: listen on this Unix domain socket path instead of ``host:port`` (mode 0600; announced as
    ``unix:PATH``; the ``isolated`` backend reaches a server with no network this way).

    Raises:
        InsecureBindError: ``host`` is not loopback and no ``token`` is given.
        BadRequestError: ``memory_budget`` is not a size.
    """
    import asyncio
    import logging
    import sys

    import uvicorn

    from gym_envfactory.server.app import ServerConfig, build_app
    from gym_envfactory.server.worker import configure_gc

    manager = SessionManager(envs, ttl_s=ttl_s, max_sessions=max_sessions, max_sessions_per_client=max_sessions_per_client,
                             memory_budget=memory_budget, max_mcp_sessions_per_client=max_mcp_sessions_per_client)
    for name, error in manager.skipped.items():
        print(f"envfactory: not serving {name}, its package is broken: {error}", file=sys.stderr, flush=True)
    for spec in manager.specs.values():  # load tasks and initial states before serving
        spec.tasks  # noqa: B018
    # Live sessions are hundreds of thousands of long-lived, acyclic objects: small young passes, the
    # catalog frozen, full passes only by the idle worker (server/worker.py, "Garbage collection").
    configure_gc()
    # Three threads share the GIL (event loop, session worker, scorer): a thread waiting for it gets it
    # within the switch interval, and a bystander's request needs it about three times (loop, worker,
    # loop), so CPython's 5 ms made it wait ~15 ms per request behind a long score and queue up
    # (bench/bench_stall.py --heavy score).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    manager.worker.quiet = lambda: not manager.sessions
    config = ServerConfig(envs=envs, token=token, ttl_s=ttl_s, max_sessions=max_sessions, host=host,
                          close_on_disconnect=close_on_disconnect)
    extra_routes: list = []
    hooks: list = []
    try:
        from gym_envfactory.server.mcp_server import mcp_routes
    except ImportError as exc:  # the mcp SDK is an optional dependency
        logging.getLogger(__name__).warning("MCP endpoint disabled (%s); install the mcp package", exc)
    else:
        extra_routes, hook = mcp_routes(manager, config)
        hooks.append(hook)
    plugins: list[str] = []
    extra_routes = list(extra_routes) + plugin_routes(manager, config, hooks, plugins)
    app = build_app(manager, config, extra_routes=extra_routes, lifespan_hooks=hooks)
    if uds is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(uds)
        os.chmod(uds, 0o600)
        where = f"unix:{uds}"
    else:
        sock = listening_socket(host, port)
        where = f"http://{host}:{sock.getsockname()[1]}"
    # no permessage-deflate (issue 24, part 4): compressing a large answer runs on the event loop and
    # holds every other client's frames behind it; the sessions' answers travel as they are
    # a connection runs one frame at a time: frames received and not yet run wait in its queue, each up to
    # the frame cap (uvicorn's default of 32 let one connection hold 128 MiB of them; issue 25); a full
    # queue stops reading that socket (TCP back-pressure), it refuses nothing
    ucfg = uvicorn.Config(app, log_level=log_level, ws_max_size=config.max_body_bytes, lifespan="on",
                          ws_per_message_deflate=False, ws_max_queue=WS_MAX_QUEUE,
                          timeout_graceful_shutdown=5)
    server = uvicorn.Server(ucfg)

    async def main() -> None:
        sock.listen(2048)
        # the nonce is the parent's proof that this line is ours, not something a module printed
        line = announcement(where, os.environ.get(ANNOUNCE_NONCE_VAR))
        if announce:
            print(line, flush=True)
        if announce_fd is not None:
            write_announcement(announce_fd, line)
        print(f"envfactory: serving {', '.join(manager.specs)} on {where} "
              f"(fast protocol /v1/ws, control plane /v1/rpc, MCP /mcp/<Env>, "
              f"{''.join(f'{n} /{n}/<Env>, ' for n in plugins)}/healthz, /readyz, /metrics)"
              f"{'; token required' if token else ''}", file=sys.stderr, flush=True)
        await server.serve(sockets=[sock])

    try:
        asyncio.run(main())
    except KeyboardInterrupt:  # pragma: no cover
        pass
    finally:
        sock.close()
        sys.stdout.flush()


#: Entry-point group of the protocols other packages add to ``envfactory serve`` (the OpenEnv mounts of
#: ``gym_envfactory.training.openenv``): each is ``provider(manager, config) -> (routes, hook | None)``.
ROUTES_GROUP = "envfactory.routes"


def plugin_routes(manager: SessionManager, config: object, hooks: list, names: list[str] | None = None) -> list:
    """The routes of every ``envfactory.routes`` entry point (their lifespan hooks appended to ``hooks``,
    their names to ``names``).  A provider whose optional dependency is missing is skipped with a
    warning, as the MCP endpoint is."""
    import logging
    from importlib.metadata import entry_points

    routes: list = []
    for ep in entry_points(group=ROUTES_GROUP):
        try:
            provider = ep.load()
        except ImportError as exc:
            logging.getLogger(__name__).warning("%s endpoint disabled (%s)", ep.name, exc)
            continue
        more, hook = provider(manager, config)
        routes += more
        if names is not None:
            names.append(ep.name)
        if hook is not None:
            hooks.append(hook)
    return routes


def write_announcement(fd: int, line: str) -> None:
    """Write ``line`` and a newline to the file descriptor ``fd`` (a pipe the parent reads) and close it.
    A parent that went away is a line on stderr, not a failed start (the server still serves)."""
    import sys

    data = (line + "\n").encode("utf-8")
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError as exc:
        print(f"envfactory: could not announce on file descriptor {fd}: {exc}", file=sys.stderr, flush=True)
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
