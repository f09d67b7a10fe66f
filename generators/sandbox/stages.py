"""One sandboxed stage: an entry point run in a container or a child process, answering in a file.

EnvGen's Validator and the importer's stages run untrusted code the same way: a child calls
``<function>()`` of an installed module with file arguments, writes a JSON answer to a file, and the
parent reads how it ended (:class:`~.process.ChildRun`) and the answer.  :func:`run_sandboxed` does
this in either sandbox mode:

* ``"docker"``: the runtime image (:func:`~.container.run_container`); the read-only inputs
  (:class:`ReadOnly`) are world-readable copies mounted read-only under ``/in``, the answer is written
  under ``/out`` and copied back;
* ``"process"``: a child process (:func:`~.process.run_in_child`) reading the inputs where they are:
  *not* a sandbox (:func:`warn_process_mode`).

:func:`resolve_sandbox` turns ``"auto"`` into ``"docker"`` when an engine holds the runtime image,
else ``"process"`` (:data:`SANDBOX_MODES`).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import SandboxError
from . import container
from .process import ChildLimits, ChildRun, run_in_child

__all__ = ["ANSWER", "SANDBOX_MODES", "AnswerSlot", "ReadOnly", "StageArg", "resolve_sandbox", "run_sandboxed",
           "warn_process_mode"]

#: The sandbox modes EnvGen and the importer accept (the importer adds ``"inline"``, its own process).
SANDBOX_MODES = ("auto", "docker", "process")


@dataclass(frozen=True)
class ReadOnly:
    """An argument of a sandboxed child naming a file or folder it reads: in a child process the
    resolved path itself; in a container a world-readable copy mounted read-only, at
    ``/in/<argument index>/<path.name>`` (the base name is kept: a package folder keeps its name)."""

    path: Path


@dataclass(frozen=True)
class AnswerSlot:
    """The argument of a sandboxed child naming the file it writes its answer to (:data:`ANSWER`)."""


#: Where the child's answer goes, as an argument of :func:`run_sandboxed`.
ANSWER = AnswerSlot()

#: One argument of a sandboxed child: a plain string, a file or folder it reads, or its answer file.
StageArg = str | ReadOnly | AnswerSlot


def resolve_sandbox(sandbox: str, image: str | None = None) -> str:
    """``"docker"`` or ``"process"`` for ``sandbox`` (one of :data:`SANDBOX_MODES`; ``"auto"``: docker when
    an engine holds the runtime image ``image``, default ``envfactory/runtime:<version>``, else process).
    Raises :class:`~gym_envfactory.generators.errors.SandboxError` for an unknown mode."""
    if sandbox not in SANDBOX_MODES:
        raise SandboxError(f"sandbox must be 'auto', 'docker' or 'process', not {sandbox!r}")
    if sandbox != "auto":
        return sandbox
    return "docker" if container.docker_available(image) else "process"


def warn_process_mode(logger: logging.Logger, doing: str) -> None:
    """Log, on ``logger``, that ``doing`` (``"validating Foo"``, ``"importing server.py"``) happens in a child
    process, which is not a sandbox, and how to get one.  Called once for each run in that mode."""
    logger.warning("%s in a child process with resource limits and an empty environment: this is NOT a sandbox "
                   "(the code runs as this user and can read and write this user's files); build the runtime "
                   "image (`envfactory image runtime`) to run it in a container", doing)


def _process_args(args: Sequence[StageArg], answer: Path) -> list[str]:
    return [str(a.path.resolve()) if isinstance(a, ReadOnly) else str(answer.resolve()) if isinstance(a, AnswerSlot)
            else a for a in args]


def _in_container(program: str, args: Sequence[StageArg], answer: Path, *, timeout_s: float, image: str | None,
                  role: str, hash_seed: int = 0) -> ChildRun:
    if not container.docker_available(image):  # before copying anything
        raise SandboxError(f"sandbox='docker': no Docker engine with the runtime image {image or 'envfactory/runtime'}; "
                           "build it with `envfactory image base && envfactory image runtime`")
    inputs = {f"in/{i}/{a.path.name}": a.path for i, a in enumerate(args) if isinstance(a, ReadOnly)}
    stage, outdir = container.container_stage(inputs)
    try:
        argv = [f"/{name}" for name in inputs]
        it = iter(argv)
        mapped = [next(it) if isinstance(a, ReadOnly) else "/out/answer" if isinstance(a, AnswerSlot) else a
                  for a in args]
        volumes = {str(outdir.resolve()): {"bind": "/out", "mode": "rw"}}
        if inputs:
            volumes[str((stage / "in").resolve())] = {"bind": "/in", "mode": "ro"}
        timed_out, code, tail = container.run_container(program, mapped, volumes, timeout_s=timeout_s, image=image,
                                                        role=role, hash_seed=hash_seed)
        written = outdir / "answer"
        if written.is_file() and not written.is_symlink():
            shutil.copyfile(written, answer)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return ChildRun(timed_out=timed_out, returncode=code, stderr_tail=tail,
                    memory_exceeded="MemoryError" in tail or code == 137)


async def run_sandboxed(module: str, function: str, args: Sequence[StageArg], *, sandbox: str, answer: Path,
                        timeout_s: float, limits: ChildLimits | None = None, image: str | None = None,
                        program: str | None = None, role: str = "envgen-validation",
                        hash_seed: int = 0) -> ChildRun:
    """Run ``from <module> import <function>; <function>()`` with ``args`` as ``sys.argv[1:]`` in
    ``sandbox`` (``"docker"`` or ``"process"``, as :func:`resolve_sandbox` gives; see the module doc),
    killed after ``timeout_s`` seconds.  ``answer`` is removed first; afterwards it holds what the child
    wrote to its answer slot (:data:`ANSWER`), if it wrote anything.

    ``limits`` applies to a child process (default :class:`~.process.ChildLimits`); ``image``
    (default ``envfactory/runtime:<version>``), ``program`` (the ``python3 -c`` text, default the import
    and call above) and ``role`` (the container's ``org.envfactory.role`` label) to a container;
    ``hash_seed`` is the child's ``PYTHONHASHSEED`` in either mode.

    Returns how the child ended; never raises for the child's faults.  Raises
    :class:`~gym_envfactory.generators.errors.SandboxError` for another mode, or when the container
    cannot run (no engine, no image), and ``OSError`` when a child process cannot start.
    """
    answer = Path(answer)
    answer.unlink(missing_ok=True)
    if sandbox == "process":
        return await run_in_child(module, function, _process_args(args, answer), timeout_s=timeout_s, limits=limits,
                                  hash_seed=hash_seed)
    if sandbox == "docker":
        text = program if program is not None else f"from {module} import {function}; {function}()"
        return await asyncio.to_thread(_in_container, text, args, answer, timeout_s=timeout_s, image=image, role=role,
                                       hash_seed=hash_seed)
    raise SandboxError(f"run_sandboxed: sandbox must be 'docker' or 'process', not {sandbox!r}")
