"""Where untrusted code runs: the one sandbox of EnvGen and the importer.

Generated environments (EnvGen's Validator) and imported tool servers (the importer's stages) are
executed only here, away from the generating or importing process, and what is published is proven to
be what ran:

* :mod:`.container`: the sandbox proper, the product's runtime image with no network, an empty
  environment, read-only inputs, memory/CPU/pids limits, a non-root user, no capabilities
  (:func:`run_container`, :func:`container_stage`, :func:`docker_available`, :data:`CONTAINER_LIMITS`);
* :mod:`.process`: a child process with an allow-listed environment, an empty ``HOME``, resource
  limits and fresh namespaces where the host allows: *not* a sandbox (:func:`run_in_child`,
  :class:`ChildLimits`, :class:`ChildRun`, :func:`child_environment`, :data:`CHILD_ENV_ALLOW`,
  :func:`namespace_prefix`);
* :mod:`.stages`: one entry point run in either mode with read-only inputs and an answer file
  (:func:`run_sandboxed`, :func:`resolve_sandbox`, :data:`SANDBOX_MODES`);
* :mod:`.digest`: :func:`package_digest`, the SHA-256 of a package's files taken before code runs and
  checked before publication.

This package imports nothing from EnvGen or the importer (``pyproject.toml``, ``[tool.importlinter]``);
both import it.  Errors: :class:`~gym_envfactory.generators.errors.SandboxError`.
"""

from __future__ import annotations

from .container import CONTAINER_LIMITS, container_stage, docker_available, run_container
from .digest import package_digest
from .process import (
    CHILD_ENV_ALLOW,
    CPU_LIMIT_MARK,
    MEMORY_LIMIT_MARK,
    ChildLimits,
    ChildRun,
    child_environment,
    namespace_prefix,
    run_in_child,
)
from .stages import (
    ANSWER,
    SANDBOX_MODES,
    AnswerSlot,
    ReadOnly,
    StageArg,
    resolve_sandbox,
    run_sandboxed,
    warn_process_mode,
)

__all__ = [
    "ANSWER",
    "CHILD_ENV_ALLOW",
    "CONTAINER_LIMITS",
    "CPU_LIMIT_MARK",
    "MEMORY_LIMIT_MARK",
    "SANDBOX_MODES",
    "AnswerSlot",
    "ChildLimits",
    "ChildRun",
    "ReadOnly",
    "StageArg",
    "child_environment",
    "container_stage",
    "docker_available",
    "namespace_prefix",
    "package_digest",
    "resolve_sandbox",
    "run_container",
    "run_in_child",
    "run_sandboxed",
    "warn_process_mode",
]
