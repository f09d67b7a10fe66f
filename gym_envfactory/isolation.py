"""Isolating a child process that runs untrusted code: an allow-listed environment, resource limits and,
where the host allows, fresh PID/network/IPC/mount namespaces (docs/architecture.md, "Backends").

One home for the pieces both the runtime's ``isolated`` backend (:mod:`gym_envfactory.backends.subprocess`)
and the generators' validation child (``gym_envfactory.generators.sandbox.process``) use:
:data:`CHILD_ENV_ALLOW` and :func:`child_environment` (what a child inherits), :class:`ChildLimits`
(``setrlimit`` limits, as the first lines of the child's program: :func:`limit_program`) and
:func:`namespace_prefix` (the probed ``unshare`` command line).  Standard library only.

This is *not* a sandbox: the child runs as this user.  The Docker backend is the sandbox.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHILD_ENV_ALLOW",
    "CPU_LIMIT_MARK",
    "MEMORY_LIMIT_MARK",
    "ChildLimits",
    "child_environment",
    "limit_program",
    "namespace_prefix",
]

#: The only variables of this process's environment an isolated child inherits (an allow-list: API
#: keys, database URLs and cloud credentials never reach untrusted code, whatever they are called).
CHILD_ENV_ALLOW: tuple[str, ...] = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ",
                                    "ENVFACTORY_CATALOG", "SYSTEMROOT")


def child_environment(home: Path, *, hash_seed: int = 0) -> dict[str, str]:
    """The environment of an isolated child: :data:`CHILD_ENV_ALLOW` from ours, ``HOME`` a fresh
    empty folder, ``PYTHONHASHSEED=<hash_seed>`` (default 0; the determinism probe replays a package
    under several seeds: :func:`gym_envfactory.validation.hash_seed_differences`), no user site-packages, no
    bytecode written next to the package."""
    env = {k: os.environ[k] for k in CHILD_ENV_ALLOW if k in os.environ}
    env.update(HOME=str(home), PYTHONHASHSEED=str(int(hash_seed)), PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1")
    return env


@dataclass(frozen=True)
class ChildLimits:
    """Resource limits of an isolated child, set with ``resource.setrlimit`` in the child before
    anything else runs (a child holding more memory than ``address_space`` fails with ``MemoryError``,
    one spinning longer than ``cpu_s`` of CPU time is killed by ``SIGXCPU``).

    Attributes:
        address_space: bytes of virtual memory (``RLIMIT_AS``; default 1 GiB).
        cpu_s: seconds of CPU time (``RLIMIT_CPU``; ``None``: the timeout plus 5 s).
        processes: further processes and threads the child may start (``RLIMIT_NPROC``; 0: none;
            ``None``: not set.  Not enforced when this process runs as root: the kernel exempts root from it).
        file_size: bytes any one file written may reach (``RLIMIT_FSIZE``; default 64 MiB).
        open_files: open file descriptors (``RLIMIT_NOFILE``).
        namespaces: run the child in fresh PID, network, IPC and mount namespaces with its own
            ``/proc`` (``unshare``, where the kernel and the user allow it): it sees no other process,
            so not ``/proc/<parent>/environ`` either, and has no network.
    """

    address_space: int = 1 << 30
    cpu_s: int | None = None
    processes: int | None = 0
    file_size: int = 64 << 20
    open_files: int = 256
    namespaces: bool = True

    def rlimits(self, timeout_s: float) -> list[tuple[str, int]]:
        """``(RLIMIT_NAME, value)`` pairs for this child (core dumps always off; ``RLIMIT_NPROC`` last,
        when set)."""
        cpu = self.cpu_s if self.cpu_s is not None else int(timeout_s) + 5
        pairs = [("RLIMIT_AS", self.address_space), ("RLIMIT_CPU", max(1, cpu)), ("RLIMIT_FSIZE", self.file_size),
                 ("RLIMIT_NOFILE", self.open_files), ("RLIMIT_CORE", 0)]
        if self.processes is not None:
            pairs.append(("RLIMIT_NPROC", self.processes))
        return pairs


#: Written to standard error by a child whose memory limit was hit (exit status 3).
MEMORY_LIMIT_MARK = "ENVFACTORY-CHILD: memory limit exceeded"
#: Written to standard error by a child that used up its CPU time (``SIGXCPU``; exit status 4).
CPU_LIMIT_MARK = "ENVFACTORY-CHILD: CPU time limit exceeded"


def limit_program(limits: ChildLimits, timeout_s: float) -> list[str]:
    """The first lines of a child's ``python -c`` program: ``sys`` imported, ``limits`` set (hard CPU limit
    2 s above the soft one), and ``SIGXCPU`` ending the child with :data:`CPU_LIMIT_MARK` on standard
    error and exit status 4."""
    return ["import sys",
            "import os as _o, resource as _r, signal as _s",
            f"_s.signal(_s.SIGXCPU, lambda *_: (sys.stderr.write({CPU_LIMIT_MARK!r} + '\\n'), "
            "sys.stderr.flush(), _o._exit(4)))",
            *(f"_r.setrlimit(_r.{k}, ({v}, {v + 2 if k == 'RLIMIT_CPU' else v}))" for k, v in limits.rlimits(timeout_s))]


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
