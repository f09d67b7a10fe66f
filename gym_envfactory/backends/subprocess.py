"""Starting ``envfactory serve`` as a local server process for the ``subprocess`` backend.

The server announces where it listens on a pipe of its own (``--announce-fd``), not on stdout: an
environment module that prints at import, or from a thread of its own, cannot garble or delay the
announcement.  The server's stdout is discarded (as it always was past the announcement); its stderr is
its log."""

from __future__ import annotations

import logging
import os
import queue
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from gym_envfactory.backends.isolated import isolated_launch
from gym_envfactory.environment.catalog import IMPORTING_ENV_VAR, get_environment
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import BackendError
from gym_envfactory.isolation import ChildLimits
from gym_envfactory.protocol import ANNOUNCE_NONCE_VAR, parse_announcement

__all__ = ["start_server_process", "ServerProcess", "module_argument"]

log = logging.getLogger(__name__)


class ServerProcess:
    """A running ``envfactory serve`` child: call it (``stop()``) to stop it; :attr:`alive` says whether
    it still runs.  Returned as the ``stop`` of :func:`start_server_process`."""

    def __init__(self, proc: subprocess.Popen[str], log_path: str, token_path: str | None,
                 private_dir: str | None = None) -> None:
        self.proc = proc
        self.log_path = log_path
        self.token_path = token_path
        self.private_dir = private_dir  # an isolated server's socket and HOME, removed when it stops

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """False once the server process has exited (killed, crashed or stopped)."""
        return self.proc.poll() is None

    def log_tail(self) -> str:
        """The last 2,000 characters of the server's log (stderr), or ``""`` when unreadable."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-2000:].strip()
        except OSError:
            return ""

    def forget_token(self) -> None:
        """Delete the token file (the server reads it once at start).  Idempotent."""
        if self.token_path is not None:
            try:
                os.unlink(self.token_path)
            except OSError:
                pass
            self.token_path = None

    def last_error(self) -> str:
        """The last line of the server's log that says what went wrong (:func:`last_error_line`)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return last_error_line(fh.read())
        except OSError:
            return ""

    def __call__(self, *, keep_log: bool = False) -> None:
        """Stop the server (terminate, then kill after 10 s) and remove its token file and, unless
        ``keep_log``, its log.  Idempotent.  An isolated server is killed at once: ``unshare`` does not pass
        the terminate signal on, and killing it takes its whole PID namespace down (its sessions are
        ephemeral)."""
        if self.private_dir is not None:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.forget_token()
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)
        if keep_log:
            return
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: Characters rich draws tracebacks' boxes and rules with: such lines are frames, not the error.
_BOX = set("│┃╭╮╰╯─━┌┐└┘├┤┬┴┼║═╔╗╚╝")


def last_error_line(log: str) -> str:
    """The line of a server log that says what went wrong: the last line that is neither blank, nor part
    of a traceback (rich's boxed frames, Python's ``Traceback``/``File`` lines), nor an INFO/DEBUG log
    line; ANSI codes removed, cut at 500 characters; ``""`` for an empty log.  A Python traceback ends
    with its ``Error: message`` line, an ``envfactory`` command's error is its one printed line."""
    last = ""
    for raw in _ANSI.sub("", log).splitlines():
        line = raw.strip()
        if (not line or line[0] in _BOX or line[-1] in _BOX
                or line.startswith(("Traceback (most recent", "File \"", "INFO", "DEBUG"))):
            continue
        last = line
    return last[:500]


def _pump_lines(stream: IO[str], lines: queue.Queue[str | None], done: threading.Event) -> None:
    """Read the announcement pipe to its end (then close it): every line goes to ``lines`` until ``done``
    is set (the announcement was taken), later ones are dropped; ``None`` marks the end (the server
    closed it, or exited)."""
    try:
        with stream:
            for line in stream:
                if not done.is_set():
                    lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put(None)


def _why(server: ServerProcess) -> str:
    """``": <the log's last error line>"`` for a server that failed to start (read before the log goes)."""
    error = server.last_error()
    return f": {error}" if error else " (its log was empty)"


def module_argument(spec: EnvironmentSpec) -> tuple[str, str | None] | None:
    """How a server process imports a code-defined environment: ``(--module value, sys.path entry the
    child needs or None)``; ``None`` for an environment with a package folder (the catalog finds it).

    Raises:
        BackendError: the environment was defined where importing a file again would not define it
            (inside a function, an interactive session, a notebook cell, ``exec``).
    """
    if spec.path is not None:
        return None
    origin = spec.defined_in
    file = origin[1] if origin is not None else None
    if origin is None or file is None or not os.path.isfile(file):
        raise BackendError(f"{spec.name} is defined in code that a server process cannot import again (inside a "
                           f"function, an interactive session or a notebook): call define_environment at the top level "
                           f"of a module file, or use backend='inprocess' (the default)")
    name = origin[0]
    if name == "__main__" or name.startswith("_envfactory_module_"):
        return file, None  # a script run directly: imported by path, under its file stem
    root = os.path.dirname(file)
    for _ in range(name.count(".") + (os.path.basename(file) == "__init__.py")):
        root = os.path.dirname(root)
    return name, root


def _write_token_file(token: str) -> str:
    fd, path = tempfile.mkstemp(prefix="envfactory-token-", suffix=".txt")  # mode 0600, this user only
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return path


def start_server_process(envs: Sequence[str], token: str | None, timeout: float, *,
                         isolation: ChildLimits | None = None,
                         packages: Mapping[str, str] | None = None) -> tuple[str, ServerProcess]:
    """Start ``envfactory serve`` on a free loopback port and return (url, stop).  The server's
    stderr goes to a log file (never an undrained pipe, which would block it once full).

    With ``isolation`` (the ``isolated`` backend: limits, :data:`~.isolated.ISOLATED_LIMITS` by default),
    the server runs isolated instead (:func:`~.isolated.isolated_launch`: no inherited environment, an
    empty ``HOME``, these limits, no network) on a Unix domain socket, announced as ``unix:PATH``.

    The token never appears on the child's command line (where ``ps`` shows it to every user) nor in
    its environment: it is written to a file readable by this user only, passed as
    ``--token-file``, and deleted once the server has announced itself.

    Args:
        envs: environment names the server serves; code-defined ones (``define_environment`` in an
            importable module or script) are passed as ``--module`` so the server imports their definition.
        token: bearer token the server requires, or ``None`` for none (a ``$ENVFACTORY_TOKEN`` of this
            process is not passed on either way).
        timeout: seconds to wait for the server's ``{"listening": url}`` announcement; the wait never
            blocks longer, whatever the server does meanwhile (a silent server is killed).
        packages: ``{name: package folder}`` of environments loaded by folder (``load_environment``),
            which the server finds first on its ``$ENVFACTORY_CATALOG`` (registered ones are found anyway).

    Returns:
        ``(url, stop)``: ``stop`` is a :class:`ServerProcess` (call it to stop the server; ``alive``).

    Raises:
        BackendError: the server exited or did not announce itself within ``timeout``: one line with the
            log's last error line (:func:`last_error_line`); its log and token files are removed.  A
            code-defined environment that no server can import (:func:`module_argument`), or a start
            from inside ``envfactory serve --module``'s import of a module.
    """
    deadline = time.monotonic() + timeout
    if os.environ.get(IMPORTING_ENV_VAR):
        raise BackendError(f"a server backend was started while `envfactory serve --module` imports "
                           f"{os.environ[IMPORTING_ENV_VAR]}: put the code that makes envs under "
                           f"`if __name__ == \"__main__\":` so importing the module only defines environments")
    args = [*envs]
    # the system allocator: a long-lived server's memory returns after its sessions close (pymalloc's arenas
    # fragment; docs/performance.md, "Memory returns after close"); a caller's own choice is kept
    extra = {"PYTHONMALLOC": os.environ.get("PYTHONMALLOC", "malloc")}
    nonce = secrets.token_hex(16)  # only the announcement carrying it is the server's (not a module's print)
    extra[ANNOUNCE_NONCE_VAR] = nonce
    # one error per line in the log (no rich wrapping at 80 columns, no boxed traceback): last_error_line reads it
    extra.update({"COLUMNS": "400", "TYPER_USE_RICH": "0", "TYPER_STANDARD_TRACEBACK": "1"})
    paths: list[str] = []
    folders: list[str] = []
    for name in envs:
        try:
            spec = get_environment(name)
            arg = module_argument(spec)
        except BackendError:
            raise
        except Exception:  # noqa: BLE001 - an unknown name is the server's one-line error, as before
            continue
        if spec.path is not None:
            folders.append(str(spec.path))
        if arg is not None:
            args += ["--module", arg[0]]
            if arg[1] is not None and arg[1] not in paths:
                paths.append(arg[1])
    for folder in (packages or {}).values():  # packages loaded by folder (load_environment), maybe not registered
        if folder not in folders:
            folders.append(folder)
    if folders:  # the server finds each served package where this process did, first (a name's first folder wins)
        current = [p for p in os.environ.get("ENVFACTORY_CATALOG", "").split(os.pathsep) if p]
        extra["ENVFACTORY_CATALOG"] = os.pathsep.join(dict.fromkeys([*(str(Path(f).parent) for f in folders), *current]))
    token_path = _write_token_file(token) if token else None
    if token_path is not None:
        args += ["--token-file", token_path]
    announce_r, announce_w = os.pipe()  # the server writes its announcement here (--announce-fd), never stdout
    args += ["--announce-fd", str(announce_w)]
    expected: str | None = None
    private: str | None = None
    cwd: str | None = None
    if isolation is not None:
        try:
            launch = isolated_launch(args, extra, paths, folders, isolation)
        except BaseException:
            os.close(announce_r)
            os.close(announce_w)
            raise
        cmd, environ, cwd, private, expected = launch.argv, launch.env, launch.cwd, launch.private_dir, launch.url
    else:
        cmd = [sys.executable, "-m", "gym_envfactory.cli", "serve", *args, "--host", "127.0.0.1", "--port", "0"]
        environ = {k: v for k, v in os.environ.items() if k not in ("ENVFACTORY_TOKEN", "ENVFACTORY_TOKEN_FILE")}
        environ.update(extra)
        if paths:
            environ["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [environ.get("PYTHONPATH")])])
    log_file = tempfile.NamedTemporaryFile(prefix="envfactory-server-", suffix=".log", delete=False)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log_file, text=True,
                                env=environ, cwd=cwd, pass_fds=(announce_w,))
    except OSError as exc:
        os.close(announce_r)
        os.close(announce_w)
        log_file.close()
        if token_path is not None:
            os.unlink(token_path)
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
        raise BackendError(f"cannot start the environment server: {exc}") from None
    os.close(announce_w)  # the server holds the write end now: the pipe ends when it closes it or exits
    log_file.close()
    server = ServerProcess(proc, log_file.name, token_path, private)
    announce = os.fdopen(announce_r, encoding="utf-8", errors="replace")
    lines: queue.Queue[str | None] = queue.Queue()
    announced = threading.Event()
    threading.Thread(target=_pump_lines, args=(announce, lines, announced), name="envfactory-server-announce",
                     daemon=True).start()
    url = None
    while url is None:
        left = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(0.0, left)) if left > 0 else lines.get_nowait()
        except queue.Empty:
            why = _why(server)
            server()
            raise BackendError(f"environment server did not start within {timeout} s{why}") from None
        if line is None:  # the pipe closed without an announcement: the server exited
            try:
                proc.wait(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
            code = proc.poll()
            why = _why(server)
            server()  # stops it and removes its token and log files: a failed start leaves nothing behind
            raise BackendError(f"environment server exited with {code}{why}")
        url = parse_announcement(line, nonce)
        if expected is not None and url != expected:
            url = None  # an isolated server listens only where it was told to
    announced.set()
    server.forget_token()
    log.info("environment server %s (pid %d) logs to %s", url, proc.pid, log_file.name)
    return url, server
