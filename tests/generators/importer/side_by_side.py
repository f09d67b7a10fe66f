"""Run one side of a side-by-side comparison in this (fresh) process and print its record as JSON:
``python side_by_side.py REQUEST.json`` (tests/generators/importer/test_corpus.py, issue 26).

REQUEST: ``{"side": "original" | "import", "kind": "server" | "class", "source": file, "class": class name
(kind class), "loader": loader method or null, "state": initial state (the scenario) or null,
"package": imported package folder, "plan": [[tool, arguments], ...], "seed": the import's entropy seed
(original side)}``.

The original runs unedited: a server's module is loaded with ``fastmcp`` replaced by a stub whose
``tool()`` decorator returns the function (so each wrapper runs as written), its module-level API
instance loaded with the scenario; a plain class is constructed and its loader called.  The global
``random`` is seeded with the import's entropy seed.  A call that raises, or returns a failure-shaped
result (the importer's documented rule, ``bridge.error_in``), is a failure and, as in an imported
environment, changes nothing (the instance and the generator are put back).  Record: ``{"results":
[["ok", result] | ["error"], ...], "state": final state (JSON), "seed": (import side) the entropy seed}``.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import random
import sys
import types
from pathlib import Path
from typing import Any

import pydantic_core


def _jsonable(value: Any) -> Any:
    return json.loads(pydantic_core.to_json(value, fallback=repr))


def _stub_fastmcp() -> None:
    class FastMCP:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def tool(self, *args: Any, **kwargs: Any) -> Any:
            if args and callable(args[0]):
                return args[0]
            return lambda fn: fn

    mod = types.ModuleType("fastmcp")
    mod.FastMCP = FastMCP  # type: ignore[attr-defined]
    sys.modules["fastmcp"] = mod


def _load(path: str, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def original(req: dict[str, Any]) -> dict[str, Any]:
    from gym_envfactory.generators.importer.bridge import error_in

    random.seed(req["seed"])
    if req["kind"] == "server":
        _stub_fastmcp()
        module = _load(req["source"], "original_server")
        api_name = next(n for n, v in vars(module).items()
                        if not isinstance(v, type) and hasattr(v, "load_scenario") and hasattr(v, "save_scenario"))
        if req["state"] is not None:
            getattr(module, api_name).load_scenario(copy.deepcopy(req["state"]))

        def call(tool: str, args: dict[str, Any]) -> Any:
            return getattr(module, tool)(**args)

        def save() -> Any:
            return getattr(module, api_name).save_scenario()

        def keep() -> Any:
            return copy.deepcopy(getattr(module, api_name))

        def put_back(obj: Any) -> None:
            setattr(module, api_name, obj)
    else:
        module = _load(req["source"], "original_class")
        box = [getattr(module, req["class"])()]
        if req["loader"] and req["state"] is not None:
            getattr(box[0], req["loader"])(copy.deepcopy(req["state"]))

        def call(tool: str, args: dict[str, Any]) -> Any:
            return getattr(box[0], tool)(**args)

        def save() -> Any:
            return {k: v for k, v in vars(box[0]).items() if not k.startswith("_")}

        def keep() -> Any:
            return copy.deepcopy(box[0])

        def put_back(obj: Any) -> None:
            box[0] = obj
    results: list[list[Any]] = []
    for tool, args in req["plan"]:
        before, rng = keep(), random.getstate()
        try:
            out = call(tool, args)
            failed = error_in(out) is not None
        except Exception:  # noqa: BLE001 - a domain failure of the original
            failed = True
        if failed:
            put_back(before)
            random.setstate(rng)
            results.append(["error"])
        else:
            results.append(["ok", _jsonable(out)])
    return {"results": results, "state": _jsonable(save())}


def imported(req: dict[str, Any]) -> dict[str, Any]:
    from gym_envfactory.environment.package import load_environment
    from gym_envfactory.generators.importer import bridge
    from gym_envfactory.session import Session

    spec = load_environment(Path(req["package"]))
    probe = Session(spec)  # the data a session's first instance is built from (its entropy's seed)
    seed = bridge.state_seed(probe.state_model().model_dump(mode="json"))
    probe.close()
    s = Session(spec)
    results: list[list[Any]] = []
    for tool, args in req["plan"]:
        r = s.call(tool, args)
        results.append(["ok", _jsonable(r.content)] if r.ok else ["error"])
    return {"results": results, "state": s.state(), "seed": seed}


if __name__ == "__main__":
    request = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    record = original(request) if request["side"] == "original" else imported(request)
    print(json.dumps(record, sort_keys=True))
