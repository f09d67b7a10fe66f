"""Running untrusted code in the product's own runtime image: the sandbox of EnvGen and the importer.

:func:`run_container` runs ``python3 -c PROGRAM ARGS`` in the runtime image (``envfactory image
runtime``) with no network, ``PYTHONHASHSEED`` (0 unless told) as its whole environment, the resource limits of
:data:`CONTAINER_LIMITS`, a non-root user, every capability dropped and no new privileges (the
hardening of :data:`gym_envfactory.containers.run.HARDENING`; docs/containers.md).  The code that runs
there is the image's copy of ``gym_envfactory``: rebuild the image after changing it.
:func:`container_stage` prepares world-readable copies of its inputs for the container user, and
:func:`docker_available` says whether an engine holds the image.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SandboxError

__all__ = ["CONTAINER_LIMITS", "container_stage", "docker_available", "run_container"]

log = logging.getLogger(__name__)

#: Resource limits of a sandbox container (docker SDK ``containers.run`` keywords): 1 GiB of memory and no
#: swap beyond it, one CPU, 64 processes and threads.
CONTAINER_LIMITS: dict[str, Any] = {"mem_limit": "1g", "memswap_limit": "1g", "nano_cpus": 1_000_000_000,
                                    "pids_limit": 64}


def _runtime_image(client: Any, image: str | None) -> str | None:
    """The tag of the runtime image (``image``, default ``envfactory/runtime:<version>``) when ``client``'s
    engine holds it, else ``None``."""
    from gym_envfactory.containers.images import find_image, runtime_tag

    tag = image or runtime_tag()
    return tag if find_image(client, tag) is not None else None


def docker_available(image: str | None = None) -> bool:
    """Whether a Docker engine answers and holds the runtime image (``image``, default
    ``envfactory/runtime:<version>``).  Never raises."""
    try:
        from gym_envfactory.containers.images import docker_client

        return _runtime_image(docker_client(), image) is not None
    except Exception:  # noqa: BLE001 - no SDK, no engine, a broken engine: not available
        return False


def run_container(program: str, args: list[str], volumes: Mapping[str, Mapping[str, str]], *, timeout_s: float,
                  image: str | None = None, role: str = "envgen-validation",
                  option: str = "sandbox='docker'", hash_seed: int = 0) -> tuple[bool, int | None, str]:
    """Run ``python3 -c program *args`` in the runtime image with the hardening of the module doc and
    ``volumes`` (docker SDK form: ``{host path: {"bind": container path, "mode": "ro" | "rw"}}``),
    labelled ``org.envfactory.role=<role>``, ``PYTHONHASHSEED=<hash_seed>`` its whole environment; the
    container is removed afterwards.

    Returns ``(timed_out, exit status, the last 1,500 characters of its standard error)``; after
    ``timeout_s`` seconds the container is removed and ``(True, None, "")`` returned.

    Raises :class:`~gym_envfactory.generators.errors.SandboxError` (its message starting with ``option``)
    when no engine or no runtime image is there or the container cannot start."""
    import docker

    from gym_envfactory.containers.images import CONTAINER_UID, docker_client
    from gym_envfactory.containers.run import HARDENING

    try:
        client = docker_client()
    except Exception as exc:  # noqa: BLE001 - ImageError and whatever the SDK raises
        raise SandboxError(f"{option}: no Docker engine: {exc}") from None
    img = _runtime_image(client, image)
    if img is None:
        raise SandboxError(f"{option}: the runtime image {image or 'envfactory/runtime'} is missing; build it "
                           "with `envfactory image base && envfactory image runtime`")
    hardening = {**HARDENING, "user": f"{CONTAINER_UID}:{CONTAINER_UID}"}
    try:
        container = client.containers.run(
            img, entrypoint=["python3", "-c", program], command=args, detach=True, network_mode="none",
            environment={"PYTHONHASHSEED": str(int(hash_seed))}, volumes={k: dict(v) for k, v in volumes.items()}, working_dir="/tmp",
            labels={"org.envfactory.role": role}, **CONTAINER_LIMITS, **hardening)
    except docker.errors.DockerException as exc:
        raise SandboxError(f"{option}: cannot start a container from {img}: {exc}") from None
    try:
        try:
            status = container.wait(timeout=timeout_s)
        except Exception:  # noqa: BLE001 - requests' ReadTimeout / ConnectionError: treated as a timeout
            return True, None, ""
        logs = container.logs(stdout=False, stderr=True).decode(errors="replace")
        return False, int(status.get("StatusCode", -1)), logs[-1500:]
    finally:
        try:
            container.remove(force=True)
        except docker.errors.DockerException:
            log.warning("could not remove container %s", container.id)


def container_stage(inputs: Mapping[str, Path]) -> tuple[Path, Path]:
    """A fresh temporary folder holding a world-readable copy of each of ``inputs`` (relative name →
    file or folder; ``__pycache__`` left out) for a container user that is not this user, and an
    ``out`` folder that user can write.  Returns ``(stage, out)``; the caller removes ``stage``.
    Raises ``OSError`` when an input cannot be copied."""
    from gym_envfactory.containers.images import CONTAINER_UID

    stage = Path(tempfile.mkdtemp(prefix="envfactory-sandbox-"))
    for name, src in inputs.items():
        if Path(src).is_dir():
            shutil.copytree(src, stage / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, stage / name)
    for p in [stage, *stage.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    outdir = stage / "out"
    outdir.mkdir()
    try:
        os.chown(outdir, CONTAINER_UID, CONTAINER_UID)
    except PermissionError:
        outdir.chmod(0o777)  # not root: the container user must still be able to write its answer
    return stage, outdir
