"""Importer: existing tool servers and plain Python classes become catalog environments (issue 4, part 5).

Two entry points:

:func:`import_tool_server` takes a single-file tool server in the common EnvFactory layout and writes an
environment package (docs/authoring.md) **without editing the file**.  The layout::

    class Book(BaseModel): ...                     # Pydantic record models
    class BookStoreScenario(BaseModel): ...        # the root scenario model (what save_scenario returns)
    class BookStoreAPI:                            # constructor sets empty state
        def load_scenario(self, scenario: dict): ...
        def save_scenario(self) -> dict: ...
        def search_books(self, query: str) -> list: ...   # one method per tool
    api = BookStoreAPI()                           # ONE instance shared by every client of the server
    mcp = FastMCP("bookstore")
    @mcp.tool()
    def search_books(query: str) -> list:          # the wrapper: name, docstring, typed parameters
        '''Search the catalogue.'''
        return api.search_books(query)

The package written to ``out_dir/<Name>/``::

    environment.toml        provenance kind = "imported", source = <path>, sha256 of the source
    __init__.py             loads _source.py through _bridge (FastMCP stubbed out)
    _source.py              the server, copied byte for byte
    _bridge.py              the runtime bridge (:mod:`.bridge`, copied byte for byte)
    _undo.py                undo of a failed write in place (:mod:`.undo`, copied byte for byte)
    state.py                re-exports the root scenario model (the state model)
    tools.py                one generated @tool per FastMCP wrapper
    initial_states/small.json   the scenario given, or the API's empty save_scenario()
    scenarios.jsonl         scenarios given, plus scenarios recorded by probing every tool
    tasks.jsonl             tasks given (optional)

How a tool call runs (``_bridge.ImportedServer.call``): each session's state holds **one live API
instance** (built on its first call with ``load_scenario(state.model_dump(mode="json"))``); the original
wrapper function runs with its module-level API name (``api``) bound to that instance (the function is
re-created over a copy of the module globals, so argument conversion and post-processing in the wrapper
are kept exactly), so private attributes survive between calls and a call costs what the method costs.
The state's fields are refreshed from ``save_scenario()`` (validated by the root model) only when they
are read: scoring, snapshots, forks, comparisons; a fork or rollback point deep-copies the instance.
The server's ``random``, ``uuid``, ``time``, ``datetime`` imports and builtin ``hash`` are per-session
seeded stand-ins (the same calls give the same state in any process).  See :mod:`.bridge`.
An exception raised by the API (``ValueError``, ``KeyError``, a custom error class) or an error-looking
result (``{"error": ...}``, ``{"success": False, ...}``, ``"Error: ..."``) becomes a :class:`ToolError`;
the session rolls the failed call back (a fresh view of its rollback point, with a copy of the instance
as it was there, and a replay of the writes since).  Programming errors (``TypeError``,
``AttributeError``...) stay internal errors.  The module-level instance of the package's own copy is
replaced by a guard that raises on use, so nothing can reach a shared instance; the original module (if
imported elsewhere) is never touched.  ``load_scenario``/``save_scenario`` are the state interface only:
wrappers that expose them as tools are not imported.

:func:`import_python_class` turns a plain class into a programmatic environment: public attributes of
an instance are the state (a generated Pydantic model: ``__init__`` annotations, sets, ``int`` keys, or the
class's ``to_dict``/``from_dict`` or ``__getstate__``/``__setstate__``), public methods with typed
signatures are the tools (parameters keyword-only), and each session keeps one live instance, so private
attributes survive between calls.  :func:`~.python_class.import_class_package` (``envfactory import FILE
--class NAME``) writes such a class, unedited, as a package (:mod:`.classbridge` is its runtime).

Modules, one per stage: :mod:`.bridge` (the runtime bridge, imported here and copied into packages),
:mod:`.analysis` (discovery of the API class, wrappers and state model), :mod:`.codegen` (``tools.py``),
:mod:`.probe` (recorded scenarios), :mod:`.isolation` (session isolation), :mod:`.determinism` (what
the seeded stand-ins cannot fix, by file and line), :mod:`.sandbox` (the
stages that run the file's code: every execution of it before publication goes through the shared
sandbox, docker or a child process, never this process unless ``sandbox="inline"`` is asked for),
:mod:`.options` (the grouped options of an import, :class:`ImportOptions`), :mod:`.server`
(:func:`import_tool_server`; :func:`import_server_package`, what the CLI calls, which never loads the
file here) and :mod:`.python_class` (:func:`import_python_class` takes a live class object, so it runs
in this process: only pass classes you trust).  Shared with EnvGen, never imported from it: the
sandbox (:mod:`gym_envfactory.generators.sandbox`: runners, digests, stages), the package writer
(:mod:`gym_envfactory.generators.packages`) and the run-twice checks
(:mod:`gym_envfactory.generators.checks`).
"""

from __future__ import annotations

from . import bridge
from .analysis import ImporterError, ServerAnalysis, ToolPlan, analyze_tool_server, classify_tool, function_node
from .codegen import generate_tools_py
from .isolation import check_session_isolation, shared_module_globals
from .options import (
    AnalysisHints,
    CheckOptions,
    ImportData,
    ImportKeywords,
    ImportOptions,
    ManifestOptions,
    OutputOptions,
    SandboxOptions,
)
from .probe import probe_scenarios
from .python_class import import_class_package, import_python_class
from .sandbox import SANDBOX_MODES, resolve_sandbox
from .server import DEFAULT_OUT_DIR, ImportedPackage, bridge_source, import_server_package, import_tool_server

#: The text of :mod:`.bridge`, as written into imported packages (``_bridge.py``).
BRIDGE_SOURCE = bridge_source()

__all__ = [
    "BRIDGE_SOURCE",
    "DEFAULT_OUT_DIR",
    "SANDBOX_MODES",
    "AnalysisHints",
    "CheckOptions",
    "ImportData",
    "ImportKeywords",
    "ImportOptions",
    "ImportedPackage",
    "ImporterError",
    "ManifestOptions",
    "OutputOptions",
    "SandboxOptions",
    "ServerAnalysis",
    "ToolPlan",
    "analyze_tool_server",
    "bridge",
    "bridge_source",
    "check_session_isolation",
    "classify_tool",
    "function_node",
    "generate_tools_py",
    "import_class_package",
    "import_python_class",
    "import_server_package",
    "import_tool_server",
    "probe_scenarios",
    "resolve_sandbox",
    "shared_module_globals",
]
