"""Where EnvGen validates generated code: the Validator run in the shared sandbox, and its report read back.

:func:`validate_in_child` runs :func:`~.validator.child_main` through
:func:`gym_envfactory.generators.sandbox.run_sandboxed`: in the product's runtime image (``"docker"``:
no network, an empty environment, the package and the metadata mounted read-only, memory/CPU/pids
limits, a non-root user, no capabilities, no new privileges; the image's copy of
``gym_envfactory.generators`` runs, so rebuild the image after changing it) or in a child process
(``"process"``: *not* a sandbox).  :func:`outcome_of_child` turns how the child ended into the
Validator's report.  This module never imports the Validator: the child does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gym_envfactory.validation import PROBE_HASH_SEEDS

from ..errors import EnvGenError, SandboxError
from ..sandbox import (
    ANSWER,
    CPU_LIMIT_MARK,
    ChildLimits,
    ChildRun,
    ReadOnly,
    resolve_sandbox,
    run_sandboxed,
    warn_process_mode,
)
from .report import MEMORY_LIMIT_MESSAGE, Finding, ValidationOutcome, hash_seed_finding

__all__ = ["CHILD_PROGRAM", "PROBE_MODULE", "VALIDATOR_MODULE", "hash_seed_probe", "outcome_of_child",
           "validate_in_child"]

log = logging.getLogger(__name__)

#: The module whose ``child_main`` a validation child runs (imported by the child under its installed name).
VALIDATOR_MODULE = "gym_envfactory.generators.envgen.validator"
#: The ``python3 -c`` program a validation container runs (the image's own Validator); read at each start,
#: so a test can swap in a Validator without its static gate to check the container's confinement alone.
CHILD_PROGRAM = f"from {VALIDATOR_MODULE} import child_main; child_main()"
#: The module whose ``fingerprint_main`` a hash-seed probe child runs (:func:`hash_seed_probe`).
PROBE_MODULE = "gym_envfactory.validation"


async def validate_in_child(pkg: Path, metadata_file: Path, out: Path, attempt: int, timeout_s: float, *,
                            sandbox: str = "auto", limits: ChildLimits | None = None,
                            image: str | None = None) -> ValidationOutcome:
    """:func:`~.validator.validate_package` on ``pkg`` away from this process, killed after ``timeout_s`` seconds.

    ``sandbox``:

    * ``"docker"``: in the product's runtime image (:func:`gym_envfactory.generators.sandbox.run_container`,
      ``image``, default ``envfactory/runtime:<version>``): ``--network none``, an empty environment,
      the package mounted read-only, memory/CPU/pids limits, non-root, all capabilities dropped, no
      new privileges.
    * ``"process"``: a child process (:func:`gym_envfactory.generators.sandbox.run_in_child`) with an
      allow-listed environment, an empty ``HOME``, resource limits (``limits``, default
      :class:`~gym_envfactory.generators.sandbox.ChildLimits`: 1 GiB of address space, CPU time,
      no further processes, file sizes) and fresh PID/network namespaces where the host allows.
      *Not a sandbox*: a warning is logged every time.
    * ``"auto"`` (default): ``"docker"`` when an engine and the runtime image are there, else ``"process"``.

    ``metadata_file`` holds the metadata JSON; the report is written to ``out`` (JSON of
    :class:`~.report.ValidationOutcome`).  Never raises for faults of the package: a timeout is a
    ``timeout`` finding, a memory or CPU limit hit a ``resource_limit`` finding, a child that dies or
    writes no report an ``import`` finding (with the end of its standard error).  Raises
    :class:`EnvGenError` for an unknown ``sandbox``, or for ``"docker"`` when no engine or no runtime
    image is there.
    """
    pkg, out = Path(pkg), Path(out)
    try:
        mode = resolve_sandbox(sandbox, image)
    except SandboxError as exc:
        raise EnvGenError(str(exc)) from None
    if mode == "process":
        warn_process_mode(log, f"validating {pkg.name}")
    try:
        run = await run_sandboxed(VALIDATOR_MODULE, "child_main",
                                  [ReadOnly(pkg), ReadOnly(Path(metadata_file)), ANSWER, str(attempt)],
                                  sandbox=mode, answer=out, timeout_s=timeout_s, limits=limits, image=image,
                                  program=CHILD_PROGRAM, role="envgen-validation")
    except SandboxError as exc:
        raise EnvGenError(str(exc)) from None
    outcome = outcome_of_child(pkg.name, attempt, timeout_s, run, out)
    if outcome.n_tasks or outcome.scenarios:  # the package loaded and ran: replay it under the probe's hash seeds
        outcome.findings += await hash_seed_probe(pkg, out, mode=mode, timeout_s=timeout_s, limits=limits,
                                                  image=image)
        outcome.finish()
    return outcome


async def hash_seed_probe(pkg: Path, out: Path, *, mode: str, timeout_s: float, limits: ChildLimits | None = None,
                          image: str | None = None, seeds: Sequence[int] = PROBE_HASH_SEEDS) -> list[Finding]:
    """Replay ``pkg`` (tasks' ground truth and validation scenarios:
    :func:`gym_envfactory.validation.replay_fingerprint`) in one sandboxed child per hash seed of ``seeds``
    (``PYTHONHASHSEED``; ``mode`` ``"docker"`` or ``"process"``, the children at once, each killed after
    ``timeout_s`` seconds; answers next to ``out``) and compare them: a ``hash_seed_dependence`` finding
    per task or scenario whose replays differ (naming the turn and call, or step), a ``timeout`` or
    ``validator_crash`` finding per child that did not answer.  The validation child cannot do this itself:
    it may start no process (:class:`ChildLimits`)."""
    from gym_envfactory.validation import fingerprint_differences

    answers = {seed: out.with_name(f"{out.stem}.hashseed{seed}.json") for seed in seeds}
    runs = await asyncio.gather(*(
        run_sandboxed(PROBE_MODULE, "fingerprint_main", [ReadOnly(pkg), ANSWER], sandbox=mode, answer=answer,
                      timeout_s=timeout_s, limits=limits, image=image, role="envgen-validation", hash_seed=seed)
        for seed, answer in answers.items()))
    findings: list[Finding] = []
    prints: dict[int, Any] = {}
    for (seed, answer), run in zip(answers.items(), runs, strict=True):
        if run.timed_out:
            findings.append(Finding.of("execution", "timeout", f"the replay under PYTHONHASHSEED={seed} did not "
                                                               f"finish in {timeout_s:.0f} s"))
            continue
        try:
            prints[seed] = json.loads(answer.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            findings.append(Finding.of("execution", "validator_crash",
                                       f"the replay under PYTHONHASHSEED={seed} wrote no answer (exit "
                                       f"{run.returncode}): {run.stderr_tail[-500:]}"))
    if not findings:
        findings = [hash_seed_finding(x) for x in fingerprint_differences(prints)]
    return findings


def outcome_of_child(env: str, attempt: int, timeout_s: float, run: ChildRun, out: Path) -> ValidationOutcome:
    """The report of validation child ``env`` (process or container) from how it ended (``run``) and what it
    wrote to ``out``: the child's own report, or one ``execution`` finding (``timeout``,
    ``resource_limit`` for memory, CPU time or a kill, ``import`` for a crash or an unreadable report)."""
    def failed(check: str, message: str) -> ValidationOutcome:
        return ValidationOutcome(env=env, attempt=attempt, findings=[Finding.of("execution", check, message)]).finish()

    code, tail = run.returncode, run.stderr_tail
    if run.timed_out:
        return failed("timeout", f"validation did not finish in {timeout_s:.0f} s (an endless loop in a tool or at import?)")
    if run.memory_exceeded and (code != 0 or not out.is_file()):
        return failed("resource_limit", MEMORY_LIMIT_MESSAGE)
    if CPU_LIMIT_MARK in tail and code != 0:
        return failed("resource_limit", "the package used up the validation CPU time limit (a busy loop in a tool "
                                        "or at import?)")
    if code in (-9, 137) and not out.is_file():
        return failed("resource_limit", f"the validator was killed (exit {code}): a memory or process limit "
                                        f"was hit: {tail[-500:]}")
    if code != 0 or not out.is_file():
        return failed("import", f"the validator process exited with {code}: {tail}")
    try:
        return ValidationOutcome.model_validate_json(out.read_text())
    except (OSError, ValueError) as exc:
        return failed("import", f"the validator wrote no readable report: {exc}")
