"""Running untrusted code in a child Python process with an allow-listed environment and resource limits.

:func:`run_in_child` starts ``from <module> import <function>; <function>()`` in a child interpreter
whose environment is an allow-list (:data:`CHILD_ENV_ALLOW`, :func:`child_environment`), whose
``HOME`` and working folder are an empty temporary folder, with ``setrlimit`` limits
(:class:`ChildLimits`) and, where the host allows, fresh PID/network/IPC/mount namespaces
(:func:`namespace_prefix`); those pieces live in the runtime, :mod:`gym_envfactory.isolation`, which
the ``isolated`` backend shares.  This is *not* a sandbox: the child runs as this user.  The container
runner (:mod:`.container`) is the sandbox; EnvGen and the importer pick one through :mod:`.stages`.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gym_envfactory.isolation import (
    CHILD_ENV_ALLOW,
    CPU_LIMIT_MARK,
    MEMORY_LIMIT_MARK,
    ChildLimits,
    child_environment,
    limit_program,
    namespace_prefix,
)

__all__ = [
    "CHILD_ENV_ALLOW",
    "CPU_LIMIT_MARK",
    "MEMORY_LIMIT_MARK",
    "ChildLimits",
    "ChildRun",
    "child_environment",
    "namespace_prefix",
    "run_in_child",
]


def _child_program(module: str, function: str, limits: ChildLimits | None, timeout_s: float) -> str:
    """The ``-c`` program of a child: limits first, then the entry point; a ``MemoryError`` anywhere ends
    it with :data:`MEMORY_LIMIT_MARK` on standard error and exit status 3, the CPU time limit
    (``SIGXCPU`` at the soft limit; ``SIGKILL`` 2 s of CPU later) with :data:`CPU_LIMIT_MARK` and exit status 4."""
    lines = limit_program(limits, timeout_s) if limits is not None else ["import sys"]
    lines += ["try:",
              f"    from {module} import {function}",
              f"    {function}()",
              "except MemoryError:",
              f"    sys.stderr.write({MEMORY_LIMIT_MARK!r} + '\\n')",
              "    sys.exit(3)"]
    return "\n".join(lines)


@dataclass(frozen=True)
class ChildRun:
    """How a sandboxed child (a process, or a container: :func:`~.stages.run_sandboxed`) ended:
    ``timed_out`` (killed after the timeout; ``returncode`` is then ``None``), else its exit status and
    the last 1,500 characters of its standard error.  ``memory_exceeded``: the child hit its memory
    limit (:class:`ChildLimits`, or the container's)."""

    timed_out: bool
    returncode: int | None
    stderr_tail: str
    memory_exceeded: bool = False


async def run_in_child(module: str, function: str, args: Sequence[str], *, timeout_s: float,
                       limits: ChildLimits | None = None, hash_seed: int = 0) -> ChildRun:
    """Run ``from <module> import <function>; <function>()`` in a child Python with ``args`` as
    ``sys.argv[1:]``, the allow-listed :func:`child_environment` (``PYTHONHASHSEED=<hash_seed>``), and an
    empty temporary ``HOME`` (also its working folder, removed afterwards).  The child is killed after
    ``timeout_s`` seconds.

    ``limits`` (default :class:`ChildLimits`) caps its memory, CPU time, processes, file sizes and
    descriptors, and puts it in fresh namespaces where the host allows (:func:`namespace_prefix`).
    This is *not* a sandbox: the child runs as this user and can read and write what this user can.

    The child reports through files named in ``args``; this returns how it ended and never raises for
    the child's faults.  Raises ``OSError`` when the interpreter cannot be started.
    """
    limits = limits if limits is not None else ChildLimits()
    prefix = namespace_prefix() if limits.namespaces else []
    home = Path(tempfile.mkdtemp(prefix="envgen-validate-"))
    try:
        proc = await asyncio.create_subprocess_exec(
            *prefix, sys.executable, "-c", _child_program(module, function, limits, timeout_s), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=child_environment(home, hash_seed=hash_seed), cwd=home)
        try:
            _, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return ChildRun(timed_out=True, returncode=None, stderr_tail="")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    text = err.decode(errors="replace")
    return ChildRun(timed_out=False, returncode=proc.returncode, stderr_tail=text[-1500:],
                    memory_exceeded=MEMORY_LIMIT_MARK in text or "MemoryError" in text[-1500:])
