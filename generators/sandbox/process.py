"""Running untrusted code in a child Python process with an allow-listed environment and resource limits.

:func:`run_in_child` starts ``from <module> import <function>; <function>()`` in a child interpreter
whose environment is an allow-list (:data:`CHILD_ENV_ALLOW`, :func:`child_environment`), whose
``HOME`` and working folder are an empty temporary folder, with ``setrlimit`` limits
(:class:`ChildLimits`) and, where the host allows, fresh PID/network/IPC/mount namespaces
(:func:`namespace_prefix`).  This is *not* a sandbox: the child runs as this user.  The container
runner (:mod:`.container`) is the sandbox; EnvGen and the importer pick one through :mod:`.stages`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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

#: The only variables of this process's environment a validation child inherits (an allow-list: API
#: keys, database URLs and cloud credentials never reach generated code, whatever they are called).
CHILD_ENV_ALLOW: tuple[str, ...] = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ",
                                    "ENVFACTORY_CATALOG", "SYSTEMROOT")


def child_environment(home: Path) -> dict[str, str]:
    """The environment of a validation child: :data:`CHILD_ENV_ALLOW` from ours, ``HOME`` a fresh
    empty folder, ``PYTHONHASHSEED=0``, no user site-packages, no bytecode written next to the package."""
    env = {k: os.environ[k] for k in CHILD_ENV_ALLOW if k in os.environ}
    env.update(HOME=str(home), PYTHONHASHSEED="0", PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1")
    return env


@dataclass(frozen=True)
class ChildLimits:
    """Resource limits of a validation child, set with ``resource.setrlimit`` in the child before
    anything else runs (a package holding more memory than ``address_space`` at import fails with
    ``MemoryError``, one spinning longer than ``cpu_s`` of CPU time is killed by ``SIGXCPU``).

    Attributes:
        address_space: bytes of virtual memory (``RLIMIT_AS``; default 1 GiB).
        cpu_s: seconds of CPU time (``RLIMIT_CPU``; ``None``: the timeout plus 5 s).
        processes: further processes and threads the child may start (``RLIMIT_NPROC``; 0: none.
            Not enforced when this process runs as root: the kernel exempts root from it).
        file_size: bytes any one file written may reach (``RLIMIT_FSIZE``; default 64 MiB).
        open_files: open file descriptors (``RLIMIT_NOFILE``).
        namespaces: run the child in fresh PID, network, IPC and mount namespaces with its own
            ``/proc`` (``unshare``, where the kernel and the user allow it): it sees no other process,
            so not ``/proc/<parent>/environ`` either, and has no network.
    """

    address_space: int = 1 << 30
    cpu_s: int | None = None
    processes: int = 0
    file_size: int = 64 << 20
    open_files: int = 256
    namespaces: bool = True

    def rlimits(self, timeout_s: float) -> list[tuple[str, int]]:
        """``(RLIMIT_NAME, value)`` pairs for this child (core dumps always off)."""
        cpu = self.cpu_s if self.cpu_s is not None else int(timeout_s) + 5
        return [("RLIMIT_AS", self.address_space), ("RLIMIT_CPU", max(1, cpu)), ("RLIMIT_FSIZE", self.file_size),
                ("RLIMIT_NOFILE", self.open_files), ("RLIMIT_CORE", 0), ("RLIMIT_NPROC", self.processes)]


#: Exit status of a child whose memory limit was hit (:data:`MEMORY_LIMIT_MARK` on its standard error).
MEMORY_LIMIT_MARK = "ENVFACTORY-CHILD: memory limit exceeded"
#: Written to standard error by a child that used up its CPU time (``SIGXCPU``; exit status 4).
CPU_LIMIT_MARK = "ENVFACTORY-CHILD: CPU time limit exceeded"
_unshare_prefix: list[list[str]] = []


def namespace_prefix() -> list[str]:
    """The ``unshare`` command line that puts a child in fresh PID/network/IPC/mount namespaces with its
    own ``/proc`` (``--user --map-root-user`` first when not root), or ``[]`` when this host does not
    allow it (no ``unshare``, user namespaces disabled).  Probed once per process."""
    if not _unshare_prefix:
        exe = shutil.which("unshare")
        prefix: list[str] = []
        if exe and sys.platform.startswith("linux"):
            cand = [exe, *([] if os.geteuid() == 0 else ["--user", "--map-root-user"]),
                    "--pid", "--kill-child", "--mount-proc", "--net", "--ipc"]
            try:
                ok = subprocess.run([*cand, sys.executable, "-c", "import os; assert os.getpid() == 1"],
                                    capture_output=True, timeout=30, env={"PATH": os.environ.get("PATH", "")}).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
            prefix = cand if ok else []
        _unshare_prefix.append(prefix)
    return list(_unshare_prefix[0])


def _child_program(module: str, function: str, limits: ChildLimits | None, timeout_s: float) -> str:
    """The ``-c`` program of a child: limits first, then the entry point; a ``MemoryError`` anywhere ends
    it with :data:`MEMORY_LIMIT_MARK` on standard error and exit status 3, the CPU time limit
    (``SIGXCPU`` at the soft limit; ``SIGKILL`` 2 s of CPU later) with :data:`CPU_LIMIT_MARK` and exit status 4."""
    lines = ["import sys"]
    if limits is not None:
        pairs = limits.rlimits(timeout_s)
        lines += ["import os as _o, resource as _r, signal as _s",
                  f"_s.signal(_s.SIGXCPU, lambda *_: (sys.stderr.write({CPU_LIMIT_MARK!r} + '\\n'), "
                  "sys.stderr.flush(), _o._exit(4)))",
                  *(f"_r.setrlimit(_r.{k}, ({v}, {v + 2 if k == 'RLIMIT_CPU' else v}))" for k, v in pairs
                    if k != "RLIMIT_NPROC"),
                  f"_r.setrlimit(_r.RLIMIT_NPROC, ({limits.processes}, {limits.processes}))"]
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
                       limits: ChildLimits | None = None) -> ChildRun:
    """Run ``from <module> import <function>; <function>()`` in a child Python with ``args`` as
    ``sys.argv[1:]``, the allow-listed :func:`child_environment`, and an empty temporary ``HOME``
    (also its working folder, removed afterwards).  The child is killed after ``timeout_s`` seconds.

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
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=child_environment(home), cwd=home)
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
