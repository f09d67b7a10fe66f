"""EnvGen: synthesise, execution-validate and revise environments from tool metadata (arXiv 2605.18703, §3.2).

Per environment the pipeline runs four stages::

    Code Agent (LLM, stage "code")   metadata (+ authentic resources) -> state.py, tools.py, initial state, manifest
    Test Agent (LLM, stage "test")   code + metadata -> validation scenarios (simple ... error), optional tasks
    Validator  (no LLM)              fresh import + execution -> structured report (four dimensions)
    Reviser    (LLM, stage "revise") code + failures + metadata -> revised code (+ scenarios) -> Validator again

The loop ends when the report has no blocking finding or the revision budget is spent (default 3).
Only environments that pass are written to the output catalog (``out_dir/<Name>/``, default
``envfactory_envs/``; provenance ``kind = "generated"``) and registered as ``envfactory/<Name>-v0``; the others go to the quarantine
folder with their last code and ``report.json``.

SECURITY -- generated code is untrusted code.  EnvGen never imports it in its own process: the
Validator runs it in a child process whose environment is an allow-list (:data:`CHILD_ENV_ALLOW`;
``HOME`` is an empty temporary folder, so API keys, database URLs and cloud credentials are not
inherited), and a passing environment is registered with Gymnasium from its manifest only (the
output folder is added to ``$ENVFACTORY_CATALOG``), so its code runs again only on an explicit
``gym.make``.  The static gate (:func:`~.gate.check_imports`) is a SAFETY NET, not a sandbox: Python cannot
be confined by inspecting its source, and code that passes the gate can still read files or open
sockets through routes the gate does not know.  Generated code from a model you do not control must
be generated, validated and run inside a sandbox (a container or VM without credentials or network).

The Validator never asks the model anything.  It checks, by execution (docs/authoring.md):

* ``interface``: generated tool schemas against the metadata (missing/extra tools, parameter names,
  required fields, JSON types, enums) -- :func:`check_interface`;
* ``execution``: a static gate (a safety net, see above) allows only the modules, module attributes,
  builtins and dunders on its allow-list (:mod:`.allowlist`) before anything runs; the package imports in a fresh module (a unique module name per attempt, so revised
  code is really re-executed), the initial state validates, the determinism lint
  (:func:`gym_envfactory.validation.lint_environment`) and a replay-twice check are clean;
* ``results`` and ``state``: every scenario executed by :func:`gym_envfactory.validation.validate_environment`
  in isolated sessions with ``check_writes=True`` (a write that reports success without changing the
  state is a failure), per-tool coverage of success and error paths, replay of task ground truth.

Severities come from which check failed (:data:`SEVERITY`), never from wording; ``high`` and
``medium`` findings block, ``low`` ones are advice.  By default the Validator runs in a child process
(``isolation="process"``) with a timeout, so generated code that hangs or exits cannot take the run
down; ``isolation="inline"`` validates in this process.

Modules, one per stage: :mod:`.report` (findings and severities), :mod:`.interface` and
:mod:`.gate` (static checks), :mod:`.validator` (execution: the code that runs inside the sandbox, or
inline), :mod:`.sandbox` (where validation runs and how its report comes back), :mod:`.packaging`
(packages on disk), :mod:`.jobs` and :mod:`.pipeline` (the loop, checkpoints).  Shared with the
importer: the sandbox itself (process and container runners, digests, stages) in
:mod:`gym_envfactory.generators.sandbox`, the run-twice checks in
:mod:`gym_envfactory.generators.checks`, the package writer in :mod:`gym_envfactory.generators.packages`.

Checkpoints: ``<checkpoint_dir>/<Name>.json`` records the stage reached, the attempt, paths and token
usage after every stage; each attempt's artefacts (``code.json``, ``scenarios.json``, ``report.json``,
``pkg/``) live in ``<checkpoint_dir>/work/<Name>/attempt-<k>/``.  :func:`resume_checkpoint` continues from
the first missing artefact, and the LLM layer's on-disk cache (``<checkpoint_dir>/cache``) replays any
request already answered, so a resumed run repeats no paid call.
"""

from __future__ import annotations

from ..packages import add_catalog_dir
from ..sandbox import CHILD_ENV_ALLOW, child_environment
from .gate import ALLOWED_IMPORTS, ALLOWED_RUNTIME_MODULES, ALLOWED_RUNTIME_NAMES, check_imports
from .interface import check_interface
from .jobs import EnvGenError, EnvGenJob, EnvGenOptions, EnvGenResult, EnvGenRun
from .packaging import env_name, generated_manifest, manifest_toml, write_package
from .pipeline import CHECKPOINT_FORMAT, MAX_FAILURES_IN_PROMPT, EnvGen, resume_checkpoint
from .report import BLOCKING, LEVELS, SEVERITY, Finding, ScenarioOutcome, ValidationOutcome
from .sandbox import validate_in_child
from .validator import child_main, load_package, validate_package

__all__ = [
    "ALLOWED_IMPORTS",
    "ALLOWED_RUNTIME_MODULES",
    "ALLOWED_RUNTIME_NAMES",
    "BLOCKING",
    "CHECKPOINT_FORMAT",
    "CHILD_ENV_ALLOW",
    "LEVELS",
    "MAX_FAILURES_IN_PROMPT",
    "SEVERITY",
    "EnvGen",
    "EnvGenError",
    "EnvGenJob",
    "EnvGenOptions",
    "EnvGenResult",
    "EnvGenRun",
    "Finding",
    "ScenarioOutcome",
    "ValidationOutcome",
    "add_catalog_dir",
    "check_imports",
    "check_interface",
    "child_environment",
    "child_main",
    "env_name",
    "generated_manifest",
    "load_package",
    "manifest_toml",
    "resume_checkpoint",
    "validate_in_child",
    "validate_package",
    "write_package",
]
