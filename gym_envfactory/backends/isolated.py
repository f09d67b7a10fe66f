"""How the ``isolated`` backend starts its server: ``envfactory serve`` in a child that inherits no
environment variable but an allow-list, whose ``HOME`` is an empty private folder, with resource limits,
in fresh PID, network, IPC and mount namespaces where the host allows (:mod:`gym_envfactory.isolation`),
listening on a Unix domain socket in a private folder (mode 0700) since it has no network to listen on.

In its mount namespace the parent's home folders (``$HOME`` and the user's home in the password
database) and the shared temporary folders (:data:`SHARED_TMP_DIRS`) are covered by an empty ``tmpfs`` (the paths the child needs to run, such as the Python
installation or the package, are mounted back), and the packages it serves are mounted read-only.
Where ``unshare`` is not available the child still gets the scrubbed environment and the limits, but
no namespaces: it can then reach the network and read the home folder, and a warning says so.
(docs/architecture.md, "Backends"; README, "Untrusted environments".)
"""

from __future__ import annotations

import logging
import os
import pwd
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gym_envfactory.errors import BackendError
from gym_envfactory.isolation import ChildLimits, child_environment, limit_program, namespace_prefix

__all__ = ["ISOLATED_LIMITS", "IsolatedLaunch", "isolated_launch"]

log = logging.getLogger(__name__)

#: The isolated server's default limits: 4 GiB of address space, a day of CPU time, 256 processes and
#: threads (``RLIMIT_NPROC``, set only inside namespaces; the kernel does not apply it to root), 256 MiB
#: per file written, 1,024 descriptors.  ``backend_options`` ``memory``/``cpu_s`` override the first two.
ISOLATED_LIMITS = ChildLimits(address_space=4 << 30, cpu_s=24 * 3600, processes=256, file_size=256 << 20,
                              open_files=1024)

_GYM_ROOT = str(Path(__file__).resolve().parent.parent.parent)  # the folder gym_envfactory is imported from


@dataclass(frozen=True)
class IsolatedLaunch:
    """What :func:`isolated_launch` prepared: the command line ``argv``, its environment ``env`` and
    working folder ``cwd``, the ``private_dir`` to remove once the server stopped, the ``url`` the
    server must announce (``unix:PATH``), and whether it runs in fresh ``namespaces``."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    private_dir: str
    url: str
    namespaces: bool


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


#: Folders every process of the host shares for temporary files: covered in the isolated server by a
#: private, empty tmpfs of their own (what it writes there stays there and goes with it), so it reads
#: nothing the trainer or other users left in them.
SHARED_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
TMP_MOUNT_OPTIONS = "size=64m,mode=1777"


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _mount_script(private: str, hides: Sequence[str], keeps: Sequence[str], read_only: Sequence[str]) -> str:
    """The ``sh -c`` program run as root of the fresh mount namespace before the server: each folder of
    ``hides`` covered by an empty tmpfs with the ``keeps`` inside it mounted back, each of ``read_only``
    remounted read-only; any failure ends it before the server starts (fail closed)."""
    q = shlex.quote
    lines = ["set -e"]
    for i, hide in enumerate(hides):
        if hide in SHARED_TMP_DIRS:
            # the private folder (and its stash) may lie inside: keep the covered folder open as the
            # shell's working directory instead, and mount what is kept back from it by relative path
            # (--no-canonicalize, so the path is resolved there, not in the new tmpfs)
            lines += [f"cd {q(hide)}", f"mount -t tmpfs -o {TMP_MOUNT_OPTIONS} envfactory-hidden {q(hide)}"]
            for keep in keeps:
                if _inside(keep, hide) and keep != hide:
                    rel = os.path.relpath(keep, hide)
                    target = os.path.join(hide, rel)
                    make = f"mkdir -p {q(target)}" if os.path.isdir(keep) else \
                        f"mkdir -p {q(os.path.dirname(target))} && touch {q(target)}"
                    lines += [make, f"mount --no-canonicalize --rbind {q('./' + rel)} {q(target)}"]
            lines.append("cd /")
            continue
        stash = os.path.join(private, f"stash{i}")
        os.mkdir(stash, 0o700)
        lines += [f"mount --rbind {q(hide)} {q(stash)}",
                  f"mount -t tmpfs -o size=1m,mode=0755 envfactory-hidden {q(hide)}"]
        for keep in keeps:
            if _inside(keep, hide) and keep != hide:
                rel = os.path.relpath(keep, hide)
                target, source = os.path.join(hide, rel), os.path.join(stash, rel)
                make = f"mkdir -p {q(target)}" if os.path.isdir(keep) else \
                    f"mkdir -p {q(os.path.dirname(target))} && touch {q(target)}"
                lines += [make, f"mount --rbind {q(source)} {q(target)}"]
        lines.append(f"umount -l {q(stash)}")
    for folder in read_only:
        lines += [f"mount --bind {q(folder)} {q(folder)}", f"mount -o remount,bind,ro {q(folder)}"]
    # the server gets no capability at all (an empty bounding set: even uid 0 execs with none) and cannot
    # regain one, so it cannot undo these mounts, remount its package writable or join another namespace
    # (review finding: with its capabilities it could `umount` the hidden home and `setns` out)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise BackendError("the isolated backend needs `setpriv` (util-linux) to drop the server's privileges "
                           "after its mounts; install util-linux, or use backend='docker'")
    lines.append(f'exec {q(setpriv)} --no-new-privs --bounding-set=-all --inh-caps=-all "$@"')
    return "\n".join(lines)


def isolated_launch(serve_args: Sequence[str], extra_env: Mapping[str, str], python_paths: Sequence[str],
                    package_dirs: Sequence[str], limits: ChildLimits = ISOLATED_LIMITS) -> IsolatedLaunch:
    """Prepare an isolated ``envfactory serve <serve_args> --uds PATH``: a private folder (mode 0700)
    holding the socket and the child's empty ``HOME``; the environment :func:`child_environment` plus
    ``extra_env`` (the server's own settings), with ``PYTHONPATH`` = ``python_paths``, the folder this
    ``gym_envfactory`` is imported from, then the allow-listed ``$PYTHONPATH``; ``limits`` set first in
    the child; namespaces (and the mounts above) where :func:`namespace_prefix` allows, else a warning."""
    private = tempfile.mkdtemp(prefix="envfactory-isolated-")  # mode 0700: this user only
    home = os.path.join(private, "home")
    os.mkdir(home, 0o700)
    sock = os.path.join(private, "server.sock")
    env = child_environment(Path(home))
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*python_paths, _GYM_ROOT, *inherited]))
    env.update(extra_env)
    prefix = namespace_prefix() if limits.namespaces else []
    if not prefix:
        limits = replace(limits, processes=None)  # outside a user namespace it would count all this user's processes
    program = "\n".join([*limit_program(limits, 0),
                         f"sys.argv = {['envfactory', 'serve', *serve_args, '--uds', sock]!r}",
                         "from gym_envfactory.cli.main import main",
                         "main()"])
    command = [sys.executable, "-c", program]
    if not prefix:
        log.warning("the isolated backend runs %s WITHOUT network isolation and with the home folder readable: "
                    "this host does not allow `unshare` namespaces (only the environment is scrubbed and the "
                    "limits set); use backend='docker' for a sandbox", ", ".join(serve_args[:1]) or "its server")
        return IsolatedLaunch(command, env, home, private, f"unix:{sock}", False)
    keeps = sorted({_real(p) for p in [sys.base_prefix, sys.prefix, sys.exec_prefix, os.path.dirname(_real(sys.executable)),
                                       _GYM_ROOT, private, *python_paths, *inherited, *package_dirs,
                                       *os.environ.get("ENVFACTORY_CATALOG", "").split(os.pathsep)]
                   if p and os.path.exists(p)})  # a missing path would fail its mount, and so the start
    hides: list[str] = []
    for candidate in (os.environ.get("HOME"), pwd.getpwuid(os.getuid()).pw_dir):
        if not candidate or not os.path.isdir(candidate) or _real(candidate) in ("/", *hides):
            continue
        folder = _real(candidate)
        if any(_inside(folder, keep) for keep in keeps):
            log.warning("the isolated backend cannot hide %s: it holds a path the server needs", folder)
            continue
        hides.append(folder)
    tmp_hides = []
    for folder in SHARED_TMP_DIRS:
        if not os.path.isdir(folder) or os.path.islink(folder) or _real(folder) != folder or folder in hides:
            continue
        if any(_inside(folder, keep) for keep in keeps):
            log.warning("the isolated backend cannot give its server a private %s: %s is itself a path the server "
                        "needs (PYTHONPATH, the package or its script); it can read what others left there",
                        folder, folder)
            continue
        tmp_hides.append(folder)
    # homes inside a shared temporary folder go with it (a home under /tmp, as in tests); the others after
    hides = [h for h in hides if not any(_inside(h, t) for t in tmp_hides)] + tmp_hides
    read_only = sorted({_real(d) for d in package_dirs})
    argv = [*prefix, "sh", "-c", _mount_script(private, hides, keeps, read_only), "envfactory-isolated", *command]
    return IsolatedLaunch(argv, env, home, private, f"unix:{sock}", True)
