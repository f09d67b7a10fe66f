"""What EnvGen runs on and reports: jobs, options, results, and the mutable state of a run."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gym_envfactory.generators.errors import EnvGenError

from .packaging import env_name
from .report import ValidationOutcome

__all__ = ["EnvGenError", "EnvGenJob", "EnvGenOptions", "EnvGenResult", "EnvGenRun"]

_NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")





@dataclass
class EnvGenJob:
    """One environment to generate: its metadata (EnvFactory shape, as a dict), name and source."""

    metadata: dict[str, Any]
    name: str | None = None
    source: str = "metadata"
    resources: str | None = None

    def __post_init__(self) -> None:
        if hasattr(self.metadata, "model_dump"):
            self.metadata = self.metadata.model_dump(mode="json")
        self.name = env_name(self.name or str(self.metadata.get("class_name") or "Generated"))
        if not _NAME_RE.match(self.name):
            raise EnvGenError(f"environment name {self.name!r} is not CamelCase ASCII")


@dataclass
class EnvGenOptions:
    """Where things go and how long the loop runs.

    Attributes:
        out_dir: the output catalog (environments that pass).
        quarantine_dir: environments that never pass, with ``report.json``.
        checkpoint_dir: checkpoints, attempt artefacts, and the LLM cache (``cache/``).
        max_revisions: Reviser rounds after the first attempt (default 3).
        domain: force a domain (else the Code Agent's choice, ``utilities`` if unknown).
        register: register passing environments with Gymnasium in this process (by manifest only; the
            code is imported on the first ``gym.make``).
        isolation: ``"process"`` (child process per validation, with ``validation_timeout_s`` and an
            allow-listed environment) or ``"inline"`` (validates in THIS process: generated code runs
            with this process's secrets and files; only for trusted code and tests).
        sandbox: where ``isolation="process"`` validates: ``"docker"`` (the runtime image, no network, an
            empty environment, the package read-only, resource limits, non-root), ``"process"`` (a
            child with resource limits and an empty environment: not a sandbox, a warning is logged)
            or ``"auto"`` (``"docker"`` when the engine and the runtime image are there); see
            :func:`~.validator.validate_in_child`.
        after_stage: ``callback(stage, run)`` after each stage's checkpoint is written (tests use it to
            simulate a crash).
        on_event: ``callback(env_name, event, detail)`` for progress reports.
    """

    out_dir: Path = Path("envfactory_envs")
    quarantine_dir: Path = Path("build/quarantine")
    checkpoint_dir: Path = Path("build/envgen")
    max_revisions: int = 3
    domain: str | None = None
    register: bool = True
    isolation: Literal["process", "inline"] = "process"
    validation_timeout_s: float = 300.0
    sandbox: Literal["auto", "docker", "process"] = "auto"
    max_parallel_validations: int = max(1, min(8, os.cpu_count() or 1))
    after_stage: Callable[[str, EnvGenRun], None] | None = None
    on_event: Callable[[str, str, str], None] | None = None

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir).resolve()
        self.quarantine_dir = Path(self.quarantine_dir).resolve()
        self.checkpoint_dir = Path(self.checkpoint_dir).resolve()
        if self.max_revisions < 0:
            raise EnvGenError("max_revisions must be >= 0")
        if self.sandbox not in ("auto", "docker", "process"):
            raise EnvGenError(f"sandbox must be 'auto', 'docker' or 'process', not {self.sandbox!r}")

    def to_json(self) -> dict[str, Any]:
        """The options a checkpoint stores (paths as strings; the callbacks are left out)."""
        return {"out_dir": str(self.out_dir), "quarantine_dir": str(self.quarantine_dir),
                "checkpoint_dir": str(self.checkpoint_dir), "max_revisions": self.max_revisions,
                "domain": self.domain, "register": self.register, "isolation": self.isolation,
                "validation_timeout_s": self.validation_timeout_s, "sandbox": self.sandbox}


@dataclass
class EnvGenResult:
    """Outcome of one environment: ``status`` is ``passed``, ``quarantined`` or ``crashed``."""

    name: str
    status: Literal["passed", "quarantined", "crashed"]
    attempts: int
    report: ValidationOutcome | None
    path: Path | None
    checkpoint: Path
    usage: dict[str, dict[str, int]]
    history: list[dict[str, Any]] = field(default_factory=list)
    gym_id: str | None = None
    error: str | None = None

    @property
    def passed(self) -> bool:
        """Whether the environment passed validation and was published."""
        return self.status == "passed"

    @property
    def revisions(self) -> int:
        """Reviser rounds used (attempts after the first)."""
        return max(0, self.attempts - 1)


@dataclass
class EnvGenRun:
    """Mutable state of one environment's run; mirrored in its checkpoint file."""

    job: EnvGenJob
    options: EnvGenOptions
    date: str
    stage: str = "start"
    attempt: int = 0
    status: str = "running"
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    output: str | None = None
    error: str | None = None

    @property
    def name(self) -> str:
        """The environment name (the job's, already CamelCase)."""
        assert self.job.name is not None
        return self.job.name

    @property
    def work(self) -> Path:
        """The run's working folder, ``<checkpoint_dir>/work/<Name>``."""
        return self.options.checkpoint_dir / "work" / self.name

    @property
    def checkpoint(self) -> Path:
        """The run's checkpoint file, ``<checkpoint_dir>/<Name>.json``."""
        return self.options.checkpoint_dir / f"{self.name}.json"

    def attempt_dir(self, k: int | None = None) -> Path:
        """Artefacts of attempt ``k`` (default: the current one), ``<work>/attempt-<k>``."""
        return self.work / f"attempt-{self.attempt if k is None else k}"

    def add_usage(self, stage: str, reply: Any) -> None:
        """Count one LLM reply of ``stage``: a request, a cache hit, or its prompt/completion tokens
        (``reply.usage`` as a mapping or an object)."""
        u = self.usage.setdefault(stage, {"requests": 0, "cached_hits": 0, "prompt_tokens": 0, "completion_tokens": 0})
        u["requests"] += 1
        if getattr(reply, "cached", False):
            u["cached_hits"] += 1
            return
        usage = getattr(reply, "usage", None) or {}
        for k in ("prompt_tokens", "completion_tokens"):
            v = usage.get(k) if isinstance(usage, Mapping) else getattr(usage, k, None)
            u[k] += int(v or 0)

