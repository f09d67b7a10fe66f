"""``backend="docker"``: the environment server in a hardened container (docs/containers.md).

:func:`start_container` is what :func:`gym_envfactory.backends.acquire_backend` calls; the pool there
shares one container among every gym env that asks for the same configuration and stops it when the
last one closes.

Which image serves several environments: an environment image (``envfactory image build``) holds its
environment and every environment its tasks use (cross-environment tasks), so the first environment's
image ``envfactory/<name>:<version>`` serves the whole set a gym env asks for; its
``org.envfactory.envs`` label is checked before the container starts.  For an ad-hoc set (or while
editing an environment) pass ``catalog_dir=``: the runtime image then serves that folder, mounted
read-only at ``/catalog``.  Nothing is built or pulled here: a missing image is a :class:`BackendError`
naming the command that builds it.

Every container runs as a non-root user on a read-only root filesystem (tmpfs ``/tmp``), without new
privileges or capabilities, under memory/CPU/pids limits, publishing its port on 127.0.0.1 only (a
random host port), with a fresh bearer token unless one is given.  The token reaches the server as a
read-only file mounted at :data:`TOKEN_PATH` (``ENVFACTORY_TOKEN_FILE``), never as a variable or an
argument: ``docker inspect`` and ``ps`` show neither.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gym_envfactory.containers.images import (
    CONTAINER_PORT,
    CONTAINER_UID,
    LABEL,
    docker_client,
    env_image_info,
    env_image_tag,
    find_image,
    runtime_tag,
)
from gym_envfactory.environment.catalog import get_environment
from gym_envfactory.errors import BackendError, ImageError
from gym_envfactory.protocol import HEALTH_PATH, READY_PATH, bearer_authorization

__all__ = ["start_container", "ContainerHandle", "HARDENING", "TOKEN_PATH", "wait_healthy", "remove_containers",
           "write_token_file"]

#: Defaults of every container started here (and of the compose services of ``envfactory catalog``).
HARDENING: dict[str, Any] = {
    "user": f"{CONTAINER_UID}:{CONTAINER_UID}",
    "read_only": True,
    "tmpfs": {"/tmp": "rw,noexec,nosuid,nodev,size=64m"},
    "security_opt": ["no-new-privileges:true"],
    "cap_drop": ["ALL"],
}
DEFAULT_MEM_LIMIT = "512m"
DEFAULT_NANO_CPUS = 1_000_000_000  # one CPU
DEFAULT_PIDS_LIMIT = 256
#: Where a container started here reads its bearer token (a read-only bind mount of a host file).
TOKEN_PATH = "/run/secrets/envfactory_token"


class ContainerHandle:
    """The ``stop`` callable returned by :func:`start_container`: calling it stops and removes the
    container (idempotent; a container that is already gone is fine).  ``container`` is the docker
    SDK object, ``id``/``name`` identify it, ``url`` is where it serves."""

    def __init__(self, client: Any, container: Any, url: str) -> None:
        self.client = client
        self.container = container
        self.id = container.id
        self.name = container.name
        self.url = url
        self._lock = threading.Lock()
        self._stopped = False

    def __call__(self, timeout: float = 5.0) -> None:
        """Stop the container (``timeout`` seconds of grace before SIGKILL) and remove it; idempotent.

        Raises:
            docker.errors.APIError: the engine refused the removal (other than one already in progress).
        """
        import docker

        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            self.container.stop(timeout=int(timeout))
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            pass
        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:  # "removal already in progress"
            if "in progress" not in str(exc):
                raise

    stop = __call__

    def logs(self, tail: int = 50) -> str:
        """The last ``tail`` lines of the container's output (empty when they cannot be read)."""
        try:
            return self.container.logs(tail=tail).decode(errors="replace")
        except Exception:  # noqa: BLE001
            return ""

    def __repr__(self) -> str:
        return f"ContainerHandle({self.name!r}, {self.url!r})"


def _http(url: str, token: str | None = None, timeout: float = 2.0) -> tuple[int, Any]:
    req = urllib.request.Request(url, headers=bearer_authorization(token) if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def wait_healthy(url: str, *, timeout: float = 60.0, container: Any = None, interval: float = 0.05) -> float:
    """Poll ``url/healthz`` until it answers 200; returns the seconds waited.

    Raises:
        BackendError: the container exited, or no answer within ``timeout`` (with the logs' tail).
    """
    t0 = time.monotonic()
    deadline = t0 + timeout
    last = "no answer"
    n = 0
    while time.monotonic() < deadline:
        try:
            status, _ = _http(url.rstrip("/") + HEALTH_PATH, timeout=1.0)
            if status == 200:
                return time.monotonic() - t0
            last = f"HTTP {status}"
        except Exception as exc:  # noqa: BLE001 - refused, reset by docker-proxy before the server listens
            last = f"{type(exc).__name__}: {exc}"
        n += 1
        if container is not None and n % 5 == 0:
            container.reload()
            if container.status in ("exited", "dead"):
                raise BackendError(f"container {container.name} exited ({container.attrs['State'].get('ExitCode')}) "
                                   f"before it was healthy; logs:\n{_tail(container)}")
        time.sleep(interval)
    raise BackendError(f"{url} was not healthy within {timeout} s ({last})"
                       + (f"; logs of {container.name}:\n{_tail(container)}" if container is not None else ""))


def _tail(container: Any, n: int = 40) -> str:
    try:
        return container.logs(tail=n).decode(errors="replace").rstrip() or "(no output)"
    except Exception as exc:  # noqa: BLE001
        return f"(logs unavailable: {exc})"


def _resolve_image(client: Any, envs: Sequence[str], image: str | None, catalog_dir: str | Path | None) -> str:
    if catalog_dir is not None:
        img = image or runtime_tag()
        if find_image(client, img) is None:
            raise BackendError(f"image {img} is missing: run `envfactory image base` (air-gapped hosts) and "
                               "`envfactory image runtime`")
        return img
    first = get_environment(envs[0])
    img = image or env_image_tag(first)
    info = env_image_info(client, img)
    if not info:
        raise BackendError(f"image {img} is missing: run `envfactory image build {first.name}` (after "
                           "`envfactory image base` on air-gapped hosts and `envfactory image runtime`), "
                           "or `make images`")
    served = info.get("envs")
    if served is not None:
        missing = [e for e in envs if e not in served]
        if missing:
            raise BackendError(f"image {img} serves {', '.join(served)}, not {', '.join(missing)}: pass "
                               "backend_options={'catalog_dir': 'env_images'} or build an image holding them")
    versions = info.get("env-versions")
    if isinstance(versions, dict):
        for e in envs:
            want = get_environment(e).version
            if e in versions and versions[e] != want:
                raise BackendError(f"image {img} holds {e} v{versions[e]}, this client has v{want}: rebuild with "
                                   f"`envfactory image build {first.name}`")
    if info.get("name") == first.name and info.get("content-hash") and info["content-hash"] != first.content_hash():
        raise BackendError(f"image {img} was built from other {first.name} files (content hash differs): "
                           f"rebuild with `envfactory image build {first.name}`")
    return img


def start_container(envs: Sequence[str], token: str | None = None, timeout: float = 60.0, image: str | None = None,
                    mem_limit: str = DEFAULT_MEM_LIMIT, nano_cpus: int = DEFAULT_NANO_CPUS,
                    pids_limit: int = DEFAULT_PIDS_LIMIT, catalog_dir: str | Path | None = None,
                    host_ip: str = "127.0.0.1", host_port: int | None = None, ttl_s: float | None = None,
                    labels: dict[str, str] | None = None, name: str | None = None) -> tuple[str, ContainerHandle, str]:
    """Start a hardened container serving ``envs`` and wait until ``/healthz`` answers.

    Args:
        envs: environment names (the first one's image is used, see the module doc).
        token: the control-plane bearer token (a fresh random one when ``None``).
        timeout: seconds to wait for health.
        image: an explicit image instead of ``envfactory/<name>:<version>``.
        mem_limit, nano_cpus, pids_limit: resource limits.
        catalog_dir: serve this folder (mounted read-only at /catalog) from the runtime image.
        host_ip, host_port: where the port is published (127.0.0.1, a random port).
        ttl_s: idle-session expiry of the server; labels, name: extra container labels / a name.

    Returns:
        ``(url, stop, token)``; ``stop()`` removes the container (a :class:`ContainerHandle`).

    Raises:
        BackendError: no Docker engine, missing or mismatched image, the container did not become
        healthy (the message carries its logs' tail).
    """
    if not envs:
        raise BackendError("backend='docker' needs at least one environment")
    envs = [get_environment(e).name for e in envs]
    try:
        client = docker_client()
    except ImageError as exc:
        raise BackendError(str(exc)) from None
    img = _resolve_image(client, envs, image, catalog_dir)
    token = token or secrets.token_urlsafe(32)
    command = list(envs)
    if ttl_s is not None:
        command += ["--ttl", str(ttl_s)]
    volumes = {}
    if catalog_dir is not None:
        volumes[str(Path(catalog_dir).resolve())] = {"bind": "/catalog", "mode": "ro"}
    secret_dir = Path(tempfile.mkdtemp(prefix="envfactory-token-"))  # 0700: no other host user reaches the file
    volumes[str(write_token_file(secret_dir, token))] = {"bind": TOKEN_PATH, "mode": "ro"}
    all_labels = {f"{LABEL}.backend": "docker", f"{LABEL}.envs": ",".join(envs), f"{LABEL}.owner-pid": str(os.getpid()),
                  **(labels or {})}
    import docker

    try:
        container = client.containers.run(
            img, command=command, detach=True, name=name,
            environment={"ENVFACTORY_TOKEN_FILE": TOKEN_PATH}, ports={f"{CONTAINER_PORT}/tcp": (host_ip, host_port)},
            mem_limit=mem_limit, memswap_limit=mem_limit, nano_cpus=int(nano_cpus), pids_limit=int(pids_limit),
            volumes=volumes, labels=all_labels, stop_signal="SIGTERM", **HARDENING)
    except docker.errors.DockerException as exc:
        shutil.rmtree(secret_dir, ignore_errors=True)
        raise BackendError(f"cannot start a container from {img}: {exc}") from None
    handle = ContainerHandle(client, container, "")
    try:
        port = None
        deadline = time.monotonic() + min(timeout, 10.0)
        while port is None:
            container.reload()
            bindings = (container.attrs.get("NetworkSettings", {}).get("Ports") or {}).get(f"{CONTAINER_PORT}/tcp")
            if bindings:
                port = int(bindings[0]["HostPort"])
            elif container.status in ("exited", "dead") or time.monotonic() > deadline:
                raise BackendError(f"container {container.name} from {img} published no port "
                                   f"(status {container.status}); logs:\n{_tail(container)}")
            else:
                time.sleep(0.02)
        url = f"http://{'127.0.0.1' if host_ip in ('0.0.0.0', '') else host_ip}:{port}"
        handle.url = url
        wait_healthy(url, timeout=timeout, container=container)
        status, ready = _http(url + READY_PATH, token=token, timeout=5.0)
        if status != 200 or not isinstance(ready, dict):
            raise BackendError(f"{url}{READY_PATH} answered {status}; logs:\n{_tail(container)}")
        served = {e["name"]: e["version"] for e in ready.get("envs", [])}
        for e in envs:
            want = get_environment(e).version
            if served.get(e) != want:
                raise BackendError(f"container {container.name} serves {e} v{served.get(e)}, this client has v{want}")
    except BaseException:
        handle()
        raise
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)  # the server read it at start; the mount keeps its copy
    return url, handle, token


def write_token_file(folder: Path, token: str) -> Path:
    """``folder/token`` holding ``token`` (to mount read-only at :data:`TOKEN_PATH`), readable by the container user only where this process can give
    it away (root), else by everyone (the 0700 ``folder`` keeps other host users out; the container sees
    the file through its mount, not through the folder)."""
    path = folder / "token"
    path.write_text(token + "\n")
    try:
        os.chown(path, CONTAINER_UID, CONTAINER_UID)
        path.chmod(0o400)
    except PermissionError:
        path.chmod(0o644)
    return path


def remove_containers(**labels: str) -> int:
    """Remove every container (running or not) carrying ``org.envfactory.<key>=<value>`` labels;
    returns how many.  Used by test fixtures and ``envfactory`` cleanup paths."""
    client = docker_client()
    flt = [f"{LABEL}.{k}={v}" for k, v in labels.items()] or [f"{LABEL}.backend=docker"]
    n = 0
    for c in client.containers.list(all=True, filters={"label": flt}):
        try:
            c.remove(force=True)
            n += 1
        except Exception:  # noqa: BLE001
            pass
    return n
