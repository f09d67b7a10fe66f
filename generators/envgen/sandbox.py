"""Where generated code is validated, and proof that what is published is what was validated.

* :func:`validate_in_container`: the Validator inside the product's own runtime image
  (``envfactory image runtime``), with no network, an empty environment, the package and the metadata
  mounted read-only, memory/CPU/pids limits, a non-root user, every capability dropped and no new
  privileges (the hardening of :data:`gym_envfactory.containers.run.HARDENING`).  The validator code
  that runs there is the image's copy of ``gym_envfactory.generators``: rebuild the image after
  changing it.
* :func:`package_digest`: a SHA-256 of a package folder's files (sorted relative paths and contents,
  ``__pycache__`` left out).  EnvGen takes it before validation and checks it again right before
  publication: code that rewrote its own files while it was validated is never published.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import EnvGenError
from .report import ValidationOutcome

__all__ = ["CHILD_PROGRAM", "CONTAINER_LIMITS", "container_stage", "docker_available", "package_digest", "run_container",
           "validate_in_container"]

log = logging.getLogger(__name__)

#: Resource limits of a validation container (docker SDK ``containers.run`` keywords).
CONTAINER_LIMITS: dict[str, Any] = {"mem_limit": "1g", "memswap_limit": "1g", "nano_cpus": 1_000_000_000,
                                    "pids_limit": 64}
#: The ``python3 -c`` program a validation container runs (the image's own Validator); read at each start,
#: so a test can swap in a Validator without its static gate to check the container's confinement alone.
CHILD_PROGRAM = "from gym_envfactory.generators.envgen.validator import child_main; child_main()"


def package_digest(folder: str | Path) -> str:
    """SHA-256 (hex) of every file under ``folder`` except ``__pycache__``: each file's relative POSIX
    path and its bytes, in sorted path order.  A symlink counts as its target's path text, so
    replacing a file by a link changes the digest.  Raises ``OSError``."""
    root = Path(folder)
    h = hashlib.sha256()
    for p in sorted(root.rglob("*"), key=lambda x: x.relative_to(root).as_posix()):
        rel = p.relative_to(root)
        if "__pycache__" in rel.parts or (p.is_dir() and not p.is_symlink()):
            continue
        data = f"link:{p.readlink()}".encode() if p.is_symlink() else p.read_bytes()
        h.update(rel.as_posix().encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()


def _runtime_image(client: Any, image: str | None) -> str | None:
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


def run_container(program: str, args: list[str], volumes: dict[str, dict[str, str]], *, timeout_s: float,
                  image: str | None = None, role: str = "envgen-validation",
                  option: str = "sandbox='docker'") -> tuple[bool, int | None, str]:
    """Run ``python3 -c program *args`` in the runtime image with the hardening of the module doc
    (no network, ``PYTHONHASHSEED=0`` as its whole environment, :data:`CONTAINER_LIMITS`, a non-root
    user, no capabilities, no new privileges) and ``volumes`` (docker SDK form); the container is
    removed afterwards.  Returns ``(timed_out, exit status, end of its standard error)``.

    Raises :class:`EnvGenError` (its message starting with ``option``) when no engine or no runtime
    image is there or the container cannot start."""
    import docker

    from gym_envfactory.containers.images import CONTAINER_UID, docker_client
    from gym_envfactory.containers.run import HARDENING

    try:
        client = docker_client()
    except Exception as exc:  # noqa: BLE001 - ImageError and whatever the SDK raises
        raise EnvGenError(f"{option}: no Docker engine: {exc}") from None
    img = _runtime_image(client, image)
    if img is None:
        raise EnvGenError(f"{option}: the runtime image {image or 'envfactory/runtime'} is missing; build it "
                          "with `envfactory image base && envfactory image runtime`")
    hardening = {**HARDENING, "user": f"{CONTAINER_UID}:{CONTAINER_UID}"}
    try:
        container = client.containers.run(
            img, entrypoint=["python3", "-c", program], command=args, detach=True, network_mode="none",
            environment={"PYTHONHASHSEED": "0"}, volumes=volumes, working_dir="/tmp",
            labels={"org.envfactory.role": role}, **CONTAINER_LIMITS, **hardening)
    except docker.errors.DockerException as exc:
        raise EnvGenError(f"{option}: cannot start a container from {img}: {exc}") from None
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


def container_stage(inputs: dict[str, Path]) -> tuple[Path, Path]:
    """A fresh temporary folder holding a world-readable copy of each of ``inputs`` (name → file or
    folder; ``__pycache__`` left out) for a container user that is not this user, and an ``out``
    folder that user can write.  Returns ``(stage, out)``; the caller removes ``stage``."""
    from gym_envfactory.containers.images import CONTAINER_UID

    stage = Path(tempfile.mkdtemp(prefix="envgen-container-"))
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
        outdir.chmod(0o777)  # not root: the container user must still be able to write its report
    return stage, outdir


def _run_container(pkg: Path, metadata_file: Path, outdir: Path, attempt: int, timeout_s: float,
                   image: str | None) -> tuple[bool, int | None, str]:
    """Run the validator in a container; ``(timed_out, exit status, end of its log)``."""
    volumes = {str(pkg.resolve()): {"bind": f"/pkg/{pkg.name}", "mode": "ro"},
               str(Path(metadata_file).resolve()): {"bind": "/in/metadata.json", "mode": "ro"},
               str(outdir.resolve()): {"bind": "/out", "mode": "rw"}}
    return run_container(CHILD_PROGRAM, [f"/pkg/{pkg.name}", "/in/metadata.json", "/out/report.json", str(attempt)],
                         volumes, timeout_s=timeout_s, image=image)


async def validate_in_container(pkg: Path, metadata_file: Path, out: Path, attempt: int, timeout_s: float, *,
                                image: str | None = None) -> ValidationOutcome:
    """:func:`~.validator.validate_package` on ``pkg`` inside the runtime image (see the module doc),
    killed after ``timeout_s`` seconds; the report is copied to ``out``.

    Never raises for faults of the package (timeouts, memory, crashes become findings, as in
    :func:`~.validator.validate_in_child`).  Raises :class:`EnvGenError` when no engine or no runtime
    image is there.
    """
    from .validator import outcome_of_child

    pkg, out = Path(pkg), Path(out)
    if not await asyncio.to_thread(docker_available, image):
        raise EnvGenError(f"sandbox='docker': no Docker engine with the runtime image {image or 'envfactory/runtime'}; "
                          "build it with `envfactory image base && envfactory image runtime`")
    # a world-readable copy (the container user is not this user), mounted read-only
    stage, outdir = container_stage({f"pkg/{pkg.name}": pkg, "metadata.json": Path(metadata_file)})
    try:
        timed_out, code, tail = await asyncio.to_thread(_run_container, stage / "pkg" / pkg.name,
                                                        stage / "metadata.json", outdir, attempt, timeout_s, image)
        report = outdir / "report.json"
        if report.is_file() and not report.is_symlink():
            shutil.copyfile(report, out)
        else:
            out.unlink(missing_ok=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return outcome_of_child(pkg.name, attempt, timeout_s, timed_out, code, tail,
                            "MemoryError" in tail or code == 137, out)
