"""The ``envfactory ui`` web app (Starlette): routes, data loading and caching.

Routes (all ``GET``, HTML unless said): ``/`` the catalog; ``/env/{name}`` one environment;
``/env/{name}/task/{task_id}``; ``/env/{name}/state/{state}``; ``/env/{name}/graph`` the tool graph
around the environment (built in a background thread the first time: until it is ready the page says
so and reloads itself, answering 202); ``/rollouts`` the loaded rollout files, filtered and sorted by
query parameters (:mod:`gym_envfactory.ui.browse`); ``/rollouts/{file}/{episode}`` one episode turn by
turn beside its task's ground truth; ``/compare?a=..&b=..`` two files or policies per task;
``/training`` the training logs' curves; ``/healthz`` (text ``ok``).  Unknown names answer 404 with a
page saying what was not found.  Rollout files and training logs are re-read when their modification
time changes, so a page shows a training run's newest episodes and steps.

Every route but ``/healthz`` has the environment server's guards (gym_envfactory.server.middleware):
a request with an ``Origin`` header, or on a loopback UI a ``Host`` that is not a loopback address
(a DNS-rebinding page), is refused with 403; with a ``token``, a request without ``Authorization:
Bearer <token>`` is refused with 401.
"""

from __future__ import annotations

import json
import threading
import time
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
from gym_envfactory.ui import graphview, pages, rollout_pages
from gym_envfactory.ui.browse import EpisodeRow, RolloutQuery, compare_rows, parse_side, sort_rows, summarise
from gym_envfactory.ui.rollout_pages import FileView, GroundTruthCall
from gym_envfactory.ui.rollouts import RolloutFile, read_rollouts
from gym_envfactory.ui.traininglog import TrainingCurves, read_training_log

__all__ = ["create_app", "GraphSource"]

_TOKEN_HOW = ("pass --token-file PATH (every page then needs Authorization: Bearer <token>), or keep the UI on "
              "127.0.0.1 and reach it through an SSH tunnel (ssh -L PORT:127.0.0.1:PORT HOST, PORT being --port, 8760 by default)")

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
                 check_images: bool, training_logs: Sequence[Path] = ()) -> None:
        self.rollout_paths = [Path(p) for p in rollouts]
        self.rollouts: dict[Path, tuple[float, RolloutFile]] = {}
        self.training_paths = [Path(p) for p in training_logs]
        self.training: dict[Path, tuple[float, TrainingCurves]] = {}
        self.graph_file = graph_file
        self.graph_source = graph_source
        self.graph: Any = None
        self.graph_note = ""
        self.graph_started: float | None = None
        self.graph_error: Exception | None = None
        self.check_images = check_images
        self.images: dict[str, str] | None = None
        self.lock = threading.Lock()
        self.graph_done = threading.Event()

    def episodes(self, path: Path) -> RolloutFile:
        mtime = path.stat().st_mtime if path.exists() else -1.0
        cached = self.rollouts.get(path)
        if cached is None or cached[0] != mtime:
            cached = (mtime, read_rollouts(path))
            self.rollouts[path] = cached
        return cached[1]

    def training_log(self, path: Path) -> TrainingCurves:
        mtime = path.stat().st_mtime if path.exists() else -1.0
        cached = self.training.get(path)
        if cached is None or cached[0] != mtime:
            cached = (mtime, read_training_log(path))
            self.training[path] = cached
        return cached[1]

    def _build_graph(self) -> None:
        try:
            if self.graph_file is not None:
                from gym_envfactory.generators.tasks.graph import load_graph

                graph, note = load_graph(self.graph_file), f"from {self.graph_file}"
            else:
                source = self.graph_source or _default_graph_source
                names = list_environments()
                graph = source(names)
                note = f"built over the catalog ({len(names)} environments) when first asked"
            with self.lock:
                self.graph, self.graph_note = graph, note
        except Exception as exc:  # noqa: BLE001 - not swallowed: shown on the graph page (ImportError: 501, else 500)
            with self.lock:
                self.graph_error = exc
        finally:
            with self.lock:  # a BaseException (SystemExit, KeyboardInterrupt) left neither: say so, or the page loops
                if self.graph is None and self.graph_error is None:
                    self.graph_error = RuntimeError("the tool graph build was interrupted before it finished")
            self.graph_done.set()

    def tool_graph(self, wait_s: float = 1.0) -> tuple[Any, float | None, Exception | None]:
        """``(graph, None, None)`` when built; ``(None, seconds building, None)`` while a background thread
        builds it (started by the first call; a build that ends within ``wait_s`` is waited for); ``(None,
        None, error)`` when the build failed (the next call starts a new one)."""
        with self.lock:
            if self.graph is not None:
                return self.graph, None, None
            if self.graph_error is not None:
                err, self.graph_error, self.graph_started = self.graph_error, None, None
                return None, None, err
            if self.graph_started is None:
                self.graph_started = time.monotonic()
                self.graph_done.clear()
                threading.Thread(target=self._build_graph, name="envfactory-ui-graph", daemon=True).start()
            started = self.graph_started
        if self.graph_done.wait(wait_s):
            return self.tool_graph(0.0)
        return None, time.monotonic() - started, None


def _depends(G: Any) -> list[tuple[str, str, dict[str, Any]]]:
    from gym_envfactory.generators.tasks.graph import depends_edges

    return depends_edges(G)


def _graph_available() -> bool:
    try:
        import networkx  # noqa: F401
    except ImportError:
        return False
    return True


def create_app(rollouts: Sequence[str | Path] = (), *, graph_file: str | Path | None = None,
               graph_source: GraphSource | None = None, check_images: bool = True, host: str = "127.0.0.1",
               token: str | None = None, tasks: dict[str, TaskSet] | None = None,
               training_logs: Sequence[str | Path] = ()) -> Starlette:
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
        training_logs: training logs for ``/training`` (:mod:`gym_envfactory.ui.traininglog`: JSON Lines
            with a ``step`` per line, the recipe's result JSON, or a ``trainer_state.json``).

    Raises:
        InsecureBindError: ``host`` is not loopback and no ``token`` is given (the server's rule).
    """
    require_token_off_loopback(host, token, what="the UI", how=_TOKEN_HOW)
    st = _State([Path(p) for p in rollouts], Path(graph_file) if graph_file else None, graph_source, check_images,
                [Path(p) for p in training_logs])

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
        G, building, error = st.tool_graph()
        if building is not None:
            return HTMLResponse(pages.graph_building_page(spec.name, building), status_code=202)
        if isinstance(error, ImportError):
            return HTMLResponse(pages.page(f"Tool graph: {spec.name}",
                                           "<p class='err'>The tool graph needs the synthesis extra "
                                           f"(pip install -e '.[synthesis]'): {pages.esc(error)}</p>"), status_code=501)
        if error is not None:
            return HTMLResponse(pages.page(f"Tool graph: {spec.name}", f"<p class='err'>building the tool graph "
                                           f"failed: {pages.esc(error)}; reload to try again</p>"), status_code=500)
        nodes, edges = graphview.environment_view(G, spec.name)

        def short(tool_id: str) -> str:  # the environment's own tools by name, the others as ENV.tool
            return tool_id.removeprefix(f"{spec.name}.")

        kind_of = {(e.producer, e.consumer): e.kind for e in edges}
        rows = []
        for u, v, a in _depends(G):
            if (u, v) in kind_of:
                rows += [{"producer": short(u), "consumer": short(v), "kind": kind_of[(u, v)], "output": via.get("output", "?"),
                          "input": via.get("input", "?"), "score": float(via.get("score", 0.0)),
                          "origin": via.get("origin", "")} for via in a.get("via", [])]
        kinds = [(k, text, sum(1 for e in edges if e.kind == k)) for k, (_, _, text) in graphview.EDGE_KINDS.items()]
        note = (f"{sum(1 for n in nodes if n.own)} tools of {spec.name} and {sum(1 for n in nodes if not n.own)} tools "
                f"of other environments they exchange values with; {st.graph_note}; threshold {G.graph.get('threshold')}")
        return HTMLResponse(pages.graph_page(spec.name, graphview.graph_svg(nodes, edges), rows, kinds, note))

    split_cache: dict[tuple[str, str], str] = {}

    def split_of(env: str, task_id: str) -> str:
        if (env, task_id) not in split_cache:
            try:
                for t in load(env).tasks:
                    split_cache[(env, t.task_id)] = t.split
            except EnvFactoryError:
                pass
            split_cache.setdefault((env, task_id), "")
        return split_cache[(env, task_id)]

    summaries: dict[int, tuple[RolloutFile, list[EpisodeRow]]] = {}  # per file: rows of the file as last read

    def file_views() -> list[FileView]:
        out = []
        for fi, p in enumerate(st.rollout_paths):
            try:
                rf = st.episodes(p)
                if fi not in summaries or summaries[fi][0] is not rf:
                    summaries[fi] = (rf, summarise(fi, rf.episodes, split_of))
                out.append(FileView(str(p), summaries[fi][1], rf.notes))
            except EnvFactoryError as exc:  # shown in that file's section; the other files stay readable
                out.append(FileView(str(p), str(exc)))
        return out

    def rollouts_index(request: Request) -> HTMLResponse:
        files = file_views()
        bad = sum(1 for f in files if isinstance(f.rows, str))
        query = RolloutQuery.from_params(request.query_params)
        return HTMLResponse(rollout_pages.rollouts_page(files, query),
                            status_code=422 if bad and bad == len(files) else 200)

    def ground_truth(env: str, task_id: str) -> tuple[list[list[GroundTruthCall]] | None, str]:
        try:
            spec = load(env)
        except EnvFactoryError:
            return None, f"ground truth not shown: no environment named {env!r} in the catalog"
        for t in spec.tasks:
            if t.task_id == task_id:
                return [[GroundTruthCall(c.name, dict(c.arguments), list(c.masked_arguments)) for c in turn.ground_truth]
                        for turn in t.turns], ""
        return None, f"ground truth not shown: {spec.name} has no task {task_id!r} (pass its tasks file with --tasks)"

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
        rec = eps[ei].record
        truth, note = ground_truth(str(rec.get("env", "")), str(rec.get("task_id", "")))
        view: RolloutQuery | None = RolloutQuery.from_params(request.query_params)
        neighbours = position = None
        if view is not None and view.params():  # prev/next within the view the table showed
            rows = file_views()[fi].rows
            order = [] if isinstance(rows, str) else [r.ei for r in sort_rows(filter(view.matches, rows), view.sort,
                                                                                view.order)]
            if ei in order:
                k = order.index(ei)
                neighbours = (order[k - 1] if k > 0 else None, order[k + 1] if k + 1 < len(order) else None)
                position = (k + 1, len(order))
            else:
                view = None  # not in that view (an edited address): the file's order
        return HTMLResponse(rollout_pages.episode_page(eps[ei], fi, ei, count=len(eps), truth=truth, truth_note=note,
                                                       view=view, neighbours=neighbours, position=position))

    def compare(request: Request) -> HTMLResponse:
        files = file_views()
        names = [f.name for f in files]
        try:
            a = parse_side(request.query_params.get("a", ""), len(files))
            b = parse_side(request.query_params.get("b", ""), len(files))
        except ValueError as exc:
            return HTMLResponse(pages.error_page(400, f"compare needs a=.. and b=..: {exc}"), status_code=400)
        sides: list[list[EpisodeRow]] = []
        for side in (a, b):
            rows = files[side.fi].rows
            if isinstance(rows, str):
                return HTMLResponse(pages.error_page(422, rows), status_code=422)
            sides.append([r for r in rows if not side.policy or r.policy == side.policy])
        return HTMLResponse(rollout_pages.compare_page(names, a, b, compare_rows(sides[0], sides[1])))

    def training(request: Request) -> HTMLResponse:
        logs: list[tuple[str, TrainingCurves | str]] = []
        for p in st.training_paths:
            try:
                logs.append((str(p), st.training_log(p)))
            except EnvFactoryError as exc:
                logs.append((str(p), str(exc)))
        return HTMLResponse(rollout_pages.training_page(logs))

    def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    guards = [Middleware(OriginHostGuardMiddleware, host=host),
              Middleware(BearerAuthMiddleware, token=token, message="unauthorized: send Authorization: Bearer <token>")]

    def guarded(path: str, endpoint: Callable[[Request], Any]) -> Route:
        return Route(path, endpoint, middleware=guards)

    return Starlette(routes=[
        guarded("/", catalog), guarded("/env/{name}", environment), guarded("/env/{name}/task/{task_id}", task),
        guarded("/env/{name}/state/{state}", state), guarded("/env/{name}/graph", graph),
        guarded("/rollouts", rollouts_index), guarded("/rollouts/{file}/{episode}", episode),
        guarded("/compare", compare), guarded("/training", training), Route("/healthz", healthz),
    ])
