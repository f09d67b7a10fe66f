"""The options of an import (:func:`~.server.import_server_package`), grouped by what they decide.

:class:`ImportOptions` holds one frozen group each for the manifest (:class:`ManifestOptions`), the
data copied in (:class:`ImportData`), hints to the analysis (:class:`AnalysisHints`), the checks run
(:class:`CheckOptions`), where the code runs (:class:`SandboxOptions`) and where the package goes
(:class:`OutputOptions`).  The flat keywords of earlier releases (``name=``, ``sandbox=``,
``validate=``...: :class:`ImportKeywords`) still work: :meth:`ImportOptions.with_keywords` puts each
one in its group.  Defaults are those of ``envfactory import``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

from pydantic import BaseModel

__all__ = ["STAGE_TIMEOUT_S", "AnalysisHints", "CheckOptions", "ImportData", "ImportKeywords", "ImportOptions",
           "JsonlSource", "ManifestOptions", "OutputOptions", "SandboxOptions", "StateSource"]

#: Seconds one sandboxed stage of an import may take before its child is killed.
STAGE_TIMEOUT_S = 600.0

#: An initial state: a scenario JSON file, a JSON object, or a model instance (dumped in JSON mode).
StateSource = str | Path | Mapping[str, Any] | BaseModel
#: Scenarios or tasks: a JSON Lines file, or the objects themselves.
JsonlSource = str | Path | Iterable[Mapping[str, Any]]


@dataclass(frozen=True)
class ManifestOptions:
    """What the package's ``environment.toml`` says (docs/authoring.md).

    Attributes:
        name: environment name (CamelCase); ``None``: from the API class (``BookStoreAPI`` → ``BookStore``).
        domain: one of :data:`gym_envfactory.environment.manifest.DOMAINS`; ``None``: inferred from the
            environment's name, tools and state (:func:`gym_envfactory.generators.domains.infer_domain`).
        version: semver of the package.
        description: ``None``: the first line of the server's module docstring.
        bookkeeping_fields, free_text_fields, set_fields: dotted state paths, as in the manifest.
    """

    name: str | None = None
    domain: str | None = None
    version: str = "0.1.0"
    description: str | None = None
    bookkeeping_fields: Sequence[str] = ()
    free_text_fields: Sequence[str] = ()
    set_fields: Sequence[str] = ()


@dataclass(frozen=True)
class ImportData:
    """The data copied into the package.

    Attributes:
        initial_state: the ``small`` state; ``None``: the API's empty ``save_scenario()``.
        initial_states: more initial states by name.
        tasks, scenarios: copied into ``tasks.jsonl`` / ``scenarios.jsonl`` (probe scenarios are added).
    """

    initial_state: StateSource | None = None
    initial_states: Mapping[str, StateSource] | None = None
    tasks: JsonlSource | None = None
    scenarios: JsonlSource | None = None


@dataclass(frozen=True)
class AnalysisHints:
    """What the analysis of the server cannot always decide alone.

    Attributes:
        state_model, api_class: class names in the server module, when detection is ambiguous.
        read_only, destructive: per-tool overrides (tool name → flag) of the annotations guessed from
            names and code.
    """

    state_model: str | None = None
    api_class: str | None = None
    read_only: Mapping[str, bool] | None = None
    destructive: Mapping[str, bool] | None = None


@dataclass(frozen=True)
class CheckOptions:
    """The checks run before publication (each refuses the import when it fails).

    Attributes:
        probe: add scenarios recorded by calling every tool once (:func:`~.probe.probe_scenarios`).
        validate: run :func:`~gym_envfactory.validation.validate_environment` (scenarios, tasks, the
            determinism lint; per-tool coverage gaps are logged, not fatal).
        check_isolation: run the scenarios twice in fresh sessions and once interleaved with another
            session (:func:`~.isolation.check_session_isolation`).
    """

    probe: bool = True
    validate: bool = True
    check_isolation: bool = True


@dataclass(frozen=True)
class SandboxOptions:
    """Where the imported file's code runs before publication (:mod:`.sandbox`).

    Attributes:
        sandbox: ``"auto"`` (docker when an engine holds the runtime image, else ``"process"`` with a
            warning), ``"docker"``, ``"process"`` or ``"inline"`` (this process: trusted files and tests only).
        image: the runtime image for docker (``None``: ``envfactory/runtime:<version>``).
        timeout_s: seconds each stage may take.
    """

    sandbox: str = "auto"
    image: str | None = None
    timeout_s: float = STAGE_TIMEOUT_S


@dataclass(frozen=True)
class OutputOptions:
    """Where the package is published.

    Attributes:
        out_dir: the parent folder (``None``: :data:`~.server.DEFAULT_OUT_DIR`, ``./envfactory_envs``).
        overwrite: replace a previous import of the same name there (never a shipped or hand-written package).
        taken: names already given in this run (name → the file imported under it): an import whose name
            is one of them is refused, naming that file and asking for another name (a folder import
            passes the names of the files before; ``overwrite`` does not apply between them).
    """

    out_dir: str | Path | None = None
    overwrite: bool = False
    taken: Mapping[str, str] = field(default_factory=dict)


class ImportKeywords(TypedDict, total=False):
    """The flat keywords of :func:`~.server.import_server_package` (each a field of one group of
    :class:`ImportOptions`, same name, type and default)."""

    name: str | None
    domain: str | None
    version: str
    description: str | None
    bookkeeping_fields: Sequence[str]
    free_text_fields: Sequence[str]
    set_fields: Sequence[str]
    initial_state: StateSource | None
    initial_states: Mapping[str, StateSource] | None
    tasks: JsonlSource | None
    scenarios: JsonlSource | None
    state_model: str | None
    api_class: str | None
    read_only: Mapping[str, bool] | None
    destructive: Mapping[str, bool] | None
    probe: bool
    validate: bool
    check_isolation: bool
    sandbox: str
    image: str | None
    timeout_s: float
    out_dir: str | Path | None
    overwrite: bool
    taken: Mapping[str, str]


@dataclass(frozen=True)
class ImportOptions:
    """Every option of an import, in groups (see the module doc); the defaults are ``envfactory import``'s."""

    manifest: ManifestOptions = field(default_factory=ManifestOptions)
    data: ImportData = field(default_factory=ImportData)
    analysis: AnalysisHints = field(default_factory=AnalysisHints)
    checks: CheckOptions = field(default_factory=CheckOptions)
    sandbox: SandboxOptions = field(default_factory=SandboxOptions)
    output: OutputOptions = field(default_factory=OutputOptions)

    def with_keywords(self, **keywords: Unpack[ImportKeywords]) -> ImportOptions:
        """A copy with each flat keyword (:class:`ImportKeywords`: ``name="X"``, ``sandbox="process"``...)
        set in its group.  Raises ``TypeError`` for a keyword no group has, as a function call would."""
        changes: dict[str, dict[str, Any]] = {}
        for key, value in keywords.items():
            group = _GROUP_OF.get(key)
            if group is None:
                raise TypeError(f"unexpected import option {key!r}; the options are {', '.join(sorted(_GROUP_OF))}")
            changes.setdefault(group, {})[key] = value
        return dataclasses.replace(self, **{g: dataclasses.replace(getattr(self, g), **kw) for g, kw in changes.items()})


#: The groups of :class:`ImportOptions`: its field name → the group's class.
_GROUPS: dict[str, type] = {"manifest": ManifestOptions, "data": ImportData, "analysis": AnalysisHints,
                            "checks": CheckOptions, "sandbox": SandboxOptions, "output": OutputOptions}
#: Flat keyword → the :class:`ImportOptions` field holding its group.
_GROUP_OF: dict[str, str] = {f.name: group for group, cls in _GROUPS.items() for f in dataclasses.fields(cls)}
