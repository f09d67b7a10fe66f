"""The ``envfactory ui`` web app (Starlette): routes, data loading and caching.

Routes (all ``GET``, HTML unless said): ``/`` the catalog; ``/env/{name}`` one environment;
``/env/{name}/task/{task_id}``; ``/env/{name}/state/{state}``; ``/env/{name}/graph`` the tool graph
around the environment; ``/rollouts`` the loaded rollout files; ``/rollouts/{file}/{episode}`` one
episode turn by turn; ``/healthz`` (text ``ok``).  Unknown names answer 404 with a page saying what was
not found.  Rollout files are re-read when their modification time changes, so a page shows a training
run's newest episodes.

Every route but ``/healthz`` has the environment server's guards (gym_envfactory.server.middleware):
a request with an ``Origin`` header, or on a loopback UI a ``Host`` that is not a loopback address
(a DNS-rebinding page), is refused with 403; with a ``token``, a request without ``Authorization:
Bearer <token>`` is refused with 401.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse
from starlette.routing import Route

from gym_envfactory.environment.catalog import get_environment, list_environments
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.tasks import TaskSet
from gym_envfactory.errors import EnvFactoryError
from gym_envfactory.server.middleware import BearerAuthMiddleware, OriginHostGuardMiddleware, require_token_off_loopback
from gym_envfactory.ui import pages
from gym_envfactory.ui.rollouts import Episode, RolloutFile, read_rollouts

__all__ = ["create_app", "GraphSource"]

_TOKEN_HOW = ("pass --token-file PATH (every page then needs Authorization: Bearer <token>), or keep the UI on "
              "127.0.0.1 and reach it through an SSH tunnel (ssh -L 8765:127.0.0.1:8765 HOST)")

#: Builds the tool graph of the named environments (a ``networkx.DiGraph``, generators.tasks.graph).
GraphSource = Callable[[list[str]], Any]


def _image_status(names: Sequence[str]) -> dict[str, str]:
    """Per environment: ``built (<size> MB)``, ``not built``, or why Docker could not be asked."""
    try:
        from gym_envfactory.containers.images import docker_client, env_image_tag, find_image, image_size
    except ImportError:
        return dict.fromkeys(names, "unknown (docker extra not installed)")
    try:
        client = docker_client()
    except Exception as exc:  # noqa: BLE001 - any failure to reach the engine is reported, not raised
        return dict.fromkeys(names, f"unknown (Docker unreachable: {type(exc).__name__})")
    out = {}
    for n in names:
        try:
            tag = env_image_tag(n)
            out[n] = f"built ({image_size(client, tag) / 1e6:.0f} MB)" if find_image(client, tag) else "not built"
        except Exception as exc:  # noqa: BLE001
            out[n] = f"unknown ({type(exc).__name__})"
    return out


def _default_graph_source(names: list[str]) -> Any:
    from gym_envfactory.generators.tasks.graph import build_graph

    return build_graph(names)


class _State:
    def __init__(self, rollouts: Sequence[Path], graph_file: Path | None, graph_source: GraphSource | None,
                 check_images: bool) -> None:
        self.rollout_paths = [Path(p) for p in rollouts]
        self.rollouts: dict[Path, tuple[float, RolloutFile]] = {}
        self.graph_file = graph_file
        self.graph_source = graph_source
        self.graph: Any = None
        self.graph_note = ""
        self.check_images = check_images
        self.images: dict[str, str] | None = None
        self.lock = threading.Lock()

    def episodes(self, path: Path) -> RolloutFile:
        mtime = path.stat().st_mtime if path.exists() else -1.0
        cached = self.rollouts.get(path)
        if cached is None or cached[0] != mtime:
            cached = (mtime, read_rollouts(path))
            self.rollouts[path] = cached
        return cached[1]

    def tool_graph(self) -> Any:
        with self.lock:
            if self.graph is None:
                if self.graph_file is not None:
                    from gym_envfactory.generators.tasks.graph import load_graph

                    self.graph = load_graph(self.graph_file)
                    self.graph_note = f"from {self.graph_file}"
                else:
                    source = self.graph_source or _default_graph_source
                    names = list_environments()
                    self.graph = source(names)
                    self.graph_note = f"built over the catalog ({len(names)} environments) when first asked"
            return self.graph


def _graph_available() -> bool:
    try:
        import networkx  # noqa: F401
    except ImportError:
        return False
    return True


def create_app(rollouts: Sequence[str | Path] = (), *, graph_file: str | Path | None = None,
               graph_source: GraphSource | None = None, check_images: bool = True, host: str = "127.0.0.1",
               token: str | None = None, tasks: dict[str, TaskSet] | None = None) -> Starlette:
    """The UI's Starlette app.

    Args:
        rollouts: ``trajectories.jsonl`` files to browse (read when a page needs them; a malformed line
            is shown as an error page naming the file and line).
        graph_file: a graph JSON from ``envfactory graph build``; without it the graph is built over the
            whole catalog on the first graph page (the embedding model: the ``synthesis`` extra).
        graph_source: builds the graph instead of the embedding model (tests pass a deterministic one).
        check_images: ask the Docker engine whether each environment's image is built (else "not checked").
        host: the address the UI binds: on a loopback one, a request's ``Host`` must be loopback too.
        token: the bearer token every page but ``/healthz`` requires (``None``: none).
        tasks: tasks by primary environment (``--tasks FILE``,
            :func:`~gym_envfactory.environment.taskfiles.read_tasks`): the environments they name show them
            in place of their own.

    Raises:
        InsecureBindError: ``host`` is not loopback and no ``token`` is given (the server's rule).
    """
    require_token_off_loopback(host, token, what="the UI", how=_TOKEN_HOW)
    st = _State([Path(p) for p in rollouts], Path(graph_file) if graph_file else None, graph_source, check_images)

    def not_found(message: str) -> HTMLResponse:
        return HTMLResponse(pages.error_page(404, message), status_code=404)

    shown: dict[str, EnvironmentSpec] = {}

    def load(name: str) -> EnvironmentSpec:
        """The environment ``name`` as the UI shows it: with the ``tasks`` given for it, if any."""
        spec = get_environment(name)
        if tasks is None or spec.name not in tasks:
            return spec
        if spec.name not in shown:
            shown[spec.name] = spec.with_tasks(tasks[spec.name])
        return shown[spec.name]

    def spec_or_404(request: Request) -> Any:
        name = request.path_params["name"]
        try:
            return load(name)
        except EnvFactoryError:
            return None

    def catalog(request: Request) -> HTMLResponse:
        names = list_environments()
        if st.images is None:
            st.images = _image_status(names) if st.check_images else dict.fromkeys(names, "not checked")
        rows = []
        for n in names:
            try:
                spec = load(n)
                env_tasks = list(spec.tasks)
            except EnvFactoryError as exc:  # one broken package must not hide the rest of the catalog
                rows.append({"name": n, "domain": "?", "tools": 0, "writes": 0, "tasks": 0, "multi_turn": 0,
                             "splits": {}, "states": [], "image": f"does not load: {exc}"})
                continue
            splits: dict[str, int] = {}
            for t in env_tasks:
                splits[t.split] = splits.get(t.split, 0) + 1
            rows.append({"name": n, "domain": spec.domain, "tools": len(spec.tools),
                         "writes": sum(1 for t in spec.tools.values() if not t.read_only),
                         "tasks": len(env_tasks), "multi_turn": sum(1 for t in env_tasks if len(t.turns) > 1),
                         "splits": splits, "states": spec.initial_state_names(),
                         "image": st.images.get(n, "not checked")})
        return HTMLResponse(pages.catalog_page(rows))

    def environment(request: Request) -> HTMLResponse:
        spec = spec_or_404(request)
        if spec is None:
            return not_found(f"no environment named {request.path_params['name']!r}")
        sizes = {}
        for s in spec.initial_state_names():
            raw = spec.initial_state_json(s)
            sizes[s] = f"{len(raw) / 1024:.0f} KiB"
        return HTMLResponse(pages.environment_page(spec, state_sizes=sizes, graph_available=_graph_available()))

    def task(request: Request) -> HTMLResponse:
        spec = spec_or_404(request)
        if spec is None:
            return not_found(f"no environment named {request.path_params['name']!r}")
        tid = request.path_params["task_id"]
        for t in list(spec.tasks):
            if t.task_id == tid:
                return HTMLResponse(pages.task_page(spec, t))
        return not_found(f"{spec.name} has no task {tid!r}")

    def state(request: Request) -> HTMLResponse:
        spec = spec_or_404(request)
        if spec is None:
            return not_found(f"no environment named {request.path_params['name']!r}")
        name = request.path_params["state"]
        if name not in spec.initial_state_names():
            return not_found(f"{spec.name} has no initial state {name!r}; it has {', '.join(spec.initial_state_names())}")
        return HTMLResponse(pages.state_page(spec, name, json.loads(spec.initial_state_json(name))))

    def graph(request: Request) -> HTMLResponse:
        spec = spec_or_404(request)
        if spec is None:
            return not_found(f"no environment named {request.path_params['name']!r}")
        try:
            G = st.tool_graph()
            from gym_envfactory.generators.tasks.draw import draw_figure, edge_rows
            from gym_envfactory.generators.tasks.graph import depends_edges, tool_nodes
        except ImportError as exc:
            return HTMLResponse(pages.page(f"Tool graph: {spec.name}",
                                           "<p class='err'>The tool graph needs the synthesis extra "
                                           f"(pip install '.[synthesis]'): {pages.esc(exc)}</p>"), status_code=501)
        except EnvFactoryError as exc:
            return HTMLResponse(pages.page(f"Tool graph: {spec.name}", f"<p class='err'>{pages.esc(exc)}</p>"),
                                status_code=500)
        own = set(tool_nodes(G, spec.name))
        keep = set(own)
        for u, v, _ in depends_edges(G):
            if u in own or v in own:
                keep.update((u, v))
        H = G.subgraph(keep).copy()  # the picture draws tool nodes and their depends edges only
        H.graph.update(G.graph)
        rows = [r for r in edge_rows(G) if r["producer"] in own or r["consumer"] in own]
        svg = None
        try:
            import io

            import matplotlib.pyplot as plt

            fig = draw_figure(H)
            buf = io.StringIO()
            fig.savefig(buf, format="svg")
            plt.close(fig)
            svg = buf.getvalue()
        except (ImportError, EnvFactoryError):
            svg = None
        note = (f"{len(own)} tools of {spec.name} and the tools they exchange values with; "
                f"{st.graph_note}; threshold {G.graph.get('threshold')}")
        return HTMLResponse(pages.graph_page(spec.name, svg, rows, note))

    def rollouts_index(request: Request) -> HTMLResponse:
        files: list[tuple[str, list[Episode] | str, list[str]]] = []
        bad = 0
        for p in st.rollout_paths:
            try:
                rf = st.episodes(p)
                files.append((str(p), rf.episodes, rf.notes))
            except EnvFactoryError as exc:  # shown in that file's section; the other files stay readable
                files.append((str(p), str(exc), []))
                bad += 1
        return HTMLResponse(pages.rollouts_page(files), status_code=422 if bad and bad == len(files) else 200)

    def episode(request: Request) -> HTMLResponse:
        try:
            fi, ei = int(request.path_params["file"]), int(request.path_params["episode"])
        except ValueError:
            return not_found("episode addresses are /rollouts/<file number>/<episode number>")
        if not 0 <= fi < len(st.rollout_paths):
            return not_found(f"no rollout file number {fi}")
        try:
            eps = st.episodes(st.rollout_paths[fi]).episodes
        except EnvFactoryError as exc:
            return HTMLResponse(pages.error_page(422, str(exc)), status_code=422)
        if not 0 <= ei < len(eps):
            return not_found(f"{st.rollout_paths[fi]} has no episode number {ei} ({len(eps)} episodes)")
        problem = eps[ei].problem
        if problem is not None:  # a malformed record: its own error, the file's other episodes still show
            return HTMLResponse(pages.error_page(422, problem), status_code=422)
        return HTMLResponse(pages.episode_page(eps[ei], fi, ei))

    def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    guards = [Middleware(OriginHostGuardMiddleware, host=host),
              Middleware(BearerAuthMiddleware, token=token, message="unauthorized: send Authorization: Bearer <token>")]

    def guarded(path: str, endpoint: Callable[[Request], Any]) -> Route:
        return Route(path, endpoint, middleware=guards)

    return Starlette(routes=[
        guarded("/", catalog), guarded("/env/{name}", environment), guarded("/env/{name}/task/{task_id}", task),
        guarded("/env/{name}/state/{state}", state), guarded("/env/{name}/graph", graph),
        guarded("/rollouts", rollouts_index), guarded("/rollouts/{file}/{episode}", episode), Route("/healthz", healthz),
    ])
