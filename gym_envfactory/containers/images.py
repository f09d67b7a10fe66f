"""Docker images of the catalog, built offline (docs/containers.md).

Three layers, each skipped when it is already up to date:

1. **base** (:func:`build_base`): a Debian root filesystem with ``python3``, ``python3-venv`` and
   ``ca-certificates`` made by ``debootstrap --variant=minbase`` and turned into an image with
   ``tar -C root -c . | docker import - envfactory/base:bookworm``.  For hosts that reach no registry;
   elsewhere the official ``python:3.11-slim`` serves as well.
2. **runtime** (:func:`build_runtime`): the root ``Dockerfile`` over ``BASE_IMAGE``, installing
   ``gym-envfactory[server]`` from a wheelhouse made on the host (``pip wheel .[server]``), so the
   build needs no network.  Labelled with a hash of the sources; rebuilt only when they change.
3. **environment images** (:func:`build_env_image`): ``FROM`` the runtime, ``COPY env_images/<Name>/``
   to ``/catalog/<Name>/`` plus the environments its tasks also use (cross-environment tasks), tagged
   ``envfactory/<name>:<version>`` and labelled ``org.envfactory.name/version/tool-count/content-hash``
   (and ``envs``, the environments the image serves).  Skipped when an image with the same inputs exists.

Everything talks to the engine through the docker SDK (``pip install gym-envfactory[docker]``), except
``debootstrap``/``docker import`` (a pipe of two processes) and ``docker-compose`` (see
:mod:`gym_envfactory.cli_images`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_envfactory.environment.catalog import get_environment, list_environments
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.errors import ImageError

__all__ = [
    "ImageError",
    "docker_client",
    "build_base",
    "build_runtime",
    "build_env_image",
    "build_env_images",
    "ensure_images",
    "env_image_tag",
    "env_dependencies",
    "runtime_tag",
    "find_image",
    "image_size",
    "ImageResult",
    "DEFAULT_BASE_TAG",
    "DEFAULT_SUITE",
    "LABEL",
    "CONTAINER_UID",
    "CONTAINER_PORT",
]

log = logging.getLogger(__name__)

DEFAULT_SUITE = "bookworm"
DEFAULT_BASE_TAG = "envfactory/base:bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
OFFICIAL_BASE = "python:3.11-slim"
LABEL = "org.envfactory"
CONTAINER_UID = 10001
CONTAINER_PORT = 8765
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
_LAYER_FORMAT = "1"  # bump when the generated environment Dockerfile changes

#: Pruned from the debootstrap tree before ``docker import`` (package caches, docs, translations).
_BASE_PRUNE = ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*",
               "usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*",
               "var/log/*.log", "var/log/apt/*")




@dataclass
class ImageResult:
    """The outcome of one build: ``tag``, image ``id``, whether it was ``built`` (or reused), size."""

    tag: str
    id: str
    built: bool
    size: int = 0
    seconds: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: tag, id, built, size in bytes and MB (10^6 bytes), build seconds."""
        return {"tag": self.tag, "id": self.id, "built": self.built, "size_bytes": self.size,
                "size_mb": round(self.size / 1e6, 1), "seconds": round(self.seconds, 1)}


Log = Callable[[str], None]


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ engine access
def docker_client() -> Any:
    """A docker SDK client for the local engine (``DOCKER_HOST`` etc. are honoured).

    Raises:
        ImageError: the SDK is not installed or the engine does not answer.
    """
    try:
        import docker
    except ImportError:
        raise ImageError("the docker SDK is missing: pip install 'gym-envfactory[docker]' (in a checkout: pip install -e '.[docker]')") from None
    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - DockerException, requests errors, socket errors
        raise ImageError(f"cannot reach the Docker engine ({type(exc).__name__}: {exc}); is dockerd running and "
                         "is /var/run/docker.sock (or DOCKER_HOST) accessible?") from None
    return client


def find_image(client: Any, tag: str) -> Any | None:
    """The local image ``tag`` or ``None`` (never pulls)."""
    import docker

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def image_size(client: Any, tag: str) -> int:
    """Virtual size in bytes of a local image (all its layers)."""
    img = find_image(client, tag)
    return int(img.attrs.get("Size", 0)) if img is not None else 0


def _labelled(client: Any, **labels: str) -> Any | None:
    """The newest local image carrying all ``labels`` (keys without the ``org.envfactory.`` prefix)."""
    flt = [f"{LABEL}.{k}={v}" for k, v in labels.items()]
    imgs = client.images.list(filters={"label": flt})
    if not imgs:
        return None
    return max(imgs, key=lambda i: i.attrs.get("Created", ""))


def _result(client: Any, tag: str, built: bool, t0: float) -> ImageResult:
    img = client.images.get(tag)
    return ImageResult(tag, img.id, built, int(img.attrs.get("Size", 0)), time.monotonic() - t0, dict(img.labels or {}))


def _drop_replaced(client: Any, old: Any, tag: str) -> None:
    """Remove the image ``tag`` pointed at before a rebuild when nothing names it any more (keeps
    repeated builds from filling the disk with dangling images); in use or tagged elsewhere: kept."""
    if old is None:
        return
    try:
        now = client.images.get(old.id)
    except Exception:  # noqa: BLE001 - already gone
        return
    if now.id == getattr(find_image(client, tag), "id", None) or now.tags:
        return
    try:
        client.images.remove(now.id, noprune=False)
    except Exception:  # noqa: BLE001 - a container still uses it, or a child image: leave it
        pass


def _tag(img: Any, tag: str) -> None:
    repo, _, t = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    img.tag(repo, t or "latest")


def project_root() -> Path:
    """The source checkout (the folder holding ``pyproject.toml`` and the ``Dockerfile``)."""
    here = Path(__file__).resolve().parent.parent
    if (here / "pyproject.toml").is_file() and (here / "Dockerfile").is_file():
        return here
    cwd = Path.cwd()
    if (cwd / "pyproject.toml").is_file() and (cwd / "Dockerfile").is_file():
        return cwd
    raise ImageError("building images needs the source checkout (pyproject.toml and Dockerfile); run from the repository root")


def _hash_tree(h: Any, root: Path, rel_to: Path) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo"):
            h.update(str(p.relative_to(rel_to)).encode() + b"\0")
            h.update(hashlib.sha256(p.read_bytes()).digest())


# ------------------------------------------------------------------------------------ base
def _debootstrap() -> str:
    found = shutil.which("debootstrap") or shutil.which("debootstrap", path="/usr/sbin:/sbin")
    if not found:
        raise ImageError("debootstrap is not installed: apt-get install -y debootstrap (needs root)")
    return found


def _umount_below(path: Path) -> None:
    """Unmount anything debootstrap left mounted inside ``path`` (never delete through a mount)."""
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return
    for m in sorted((m for m in mounts if m.startswith(str(path) + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], check=False)


def build_base(*, suite: str = DEFAULT_SUITE, tag: str = DEFAULT_BASE_TAG, mirror: str = DEFAULT_MIRROR,
               packages: Sequence[str] = BASE_PACKAGES, force: bool = False, workdir: str | Path | None = None,
               say: Log = _say) -> ImageResult:
    """A base image from Debian packages: ``debootstrap --variant=minbase`` into a temporary folder,
    prune caches and docs, then ``tar -C root -c . | docker import - TAG``.  Skipped when ``tag``
    exists (unless ``force``).  Needs root and a reachable Debian mirror.

    Raises:
        ImageError: no debootstrap, not root, debootstrap or docker import failed.
    """
    t0 = time.monotonic()
    client = docker_client()
    if not force and find_image(client, tag) is not None:
        say(f"base {tag}: exists (use --force to rebuild)")
        return _result(client, tag, False, t0)
    deb = _debootstrap()
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise ImageError("debootstrap needs root (run `envfactory image base` as root)")
    tmp = Path(tempfile.mkdtemp(prefix="envfactory-base-", dir=workdir))
    root = tmp / "root"
    try:
        say(f"base {tag}: debootstrap {suite} (minbase + {', '.join(packages)}) from {mirror} ...")
        proc = subprocess.run([deb, "--variant=minbase", f"--include={','.join(packages)}", suite, str(root), mirror],
                              capture_output=True, text=True)
        _umount_below(root)
        if proc.returncode != 0:
            raise ImageError(f"debootstrap failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
        for pattern in _BASE_PRUNE:
            for p in root.glob(pattern):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
        # `python3 -m venv` must work in the image: fail here rather than in the runtime build.
        if not (root / "usr/bin/python3").exists():
            raise ImageError("the debootstrap tree has no /usr/bin/python3")
        say(f"base {tag}: docker import ...")
        changes = ["ENV LANG=C.UTF-8", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                   'CMD ["python3"]', f"LABEL {LABEL}.kind=base {LABEL}.suite={suite}"]
        cmd = ["docker", "import"]
        for c in changes:
            cmd += ["--change", c]
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run([*cmd, "-", tag], stdin=tar.stdout, capture_output=True, text=True)
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
        if tar.returncode != 0 or imp.returncode != 0:
            raise ImageError(f"docker import failed: tar rc={tar.returncode}, import rc={imp.returncode}: {imp.stderr.strip()}")
    finally:
        _umount_below(root)
        shutil.rmtree(tmp, ignore_errors=True)
    res = _result(client, tag, True, t0)
    say(f"base {tag}: {res.size / 1e6:.0f} MB in {res.seconds:.0f} s")
    return res


# ------------------------------------------------------------------------------------ runtime
def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("gym-envfactory")
    except Exception:  # noqa: BLE001
        return "0.0.0"


def runtime_tag(version: str | None = None) -> str:
    """The runtime image tag, ``envfactory/runtime:<version>`` (default: the installed package's
    version, ``0.0.0`` when it is not installed)."""
    return f"envfactory/runtime:{version or _package_version()}"


def default_base(client: Any) -> str:
    """The local debootstrap base when it exists, else the official slim Python image."""
    return DEFAULT_BASE_TAG if find_image(client, DEFAULT_BASE_TAG) is not None else OFFICIAL_BASE


def runtime_source_hash(root: Path, base_id: str) -> str:
    """What the runtime image is made of: the Dockerfile, pyproject.toml, the package sources (the
    runtime and the generators, whose sandbox stages run inside the image) and the base image id (not
    env_images/: images serve only the catalog layered on top)."""
    h = hashlib.sha256()
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml"):
        p = root / name
        if p.is_file():
            h.update(name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    _hash_tree(h, root / "gym_envfactory", root)
    if (root / "generators").is_dir():
        _hash_tree(h, root / "generators", root)
    h.update(base_id.encode())
    return h.hexdigest()


def build_wheelhouse(root: Path, out: Path, *, say: Log = _say) -> None:
    """``pip wheel .[server] -w out`` on the host (network only here, never in ``docker build``).

    Raises:
        ImageError: pip failed.
    """
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("gym_envfactory-*.whl"):
        old.unlink()
    say(f"wheelhouse: pip wheel .[server] -w {out} ...")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                           f"{root}[server]", "-w", str(out)], capture_output=True, text=True, cwd=root)
    if proc.returncode != 0:
        raise ImageError(f"pip wheel failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")


def _docker_build(client: Any, *, path: Path, tag: str, buildargs: dict[str, str] | None = None,
                  labels: dict[str, str] | None = None, dockerfile: str = "Dockerfile") -> Any:
    """``docker build`` with the SDK's low-level API (streams the log; raises with its tail)."""
    lines: list[str] = []
    try:
        stream = client.api.build(path=str(path), dockerfile=dockerfile, tag=tag, buildargs=buildargs or {},
                                  labels=labels or {}, rm=True, forcerm=True, pull=False, decode=True)
        for chunk in stream:
            if "stream" in chunk:
                lines.extend(chunk["stream"].rstrip("\n").splitlines())
            if "error" in chunk:
                raise ImageError(f"docker build of {tag} failed: {chunk['error'].strip()}\n" + "\n".join(lines[-40:]))
    except ImageError:
        raise
    except Exception as exc:  # noqa: BLE001 - APIError, BuildError
        raise ImageError(f"docker build of {tag} failed: {exc}\n" + "\n".join(lines[-40:])) from None
    img = find_image(client, tag)
    if img is None:
        raise ImageError(f"docker build of {tag} produced no image:\n" + "\n".join(lines[-40:]))
    return img


def build_runtime(*, base_image: str | None = None, tag: str | None = None, force: bool = False,
                  say: Log = _say) -> ImageResult:
    """The runtime image: a wheelhouse on the host, then the root Dockerfile with ``BASE_IMAGE``.
    Skipped when an image with the same source hash exists (it is re-tagged).

    Raises:
        ImageError: the base image is missing (nothing is pulled), pip or docker build failed.
    """
    t0 = time.monotonic()
    client = docker_client()
    root = project_root()
    tag = tag or runtime_tag()
    base = base_image or default_base(client)
    base_img = find_image(client, base)
    if base_img is None:
        raise ImageError(f"base image {base} is not present locally (nothing is pulled): run `envfactory image base` "
                         f"or `docker pull {base}` where a registry is reachable")
    src = runtime_source_hash(root, base_img.id)
    if not force:
        cur = find_image(client, tag)
        if cur is not None and (cur.labels or {}).get(f"{LABEL}.source-hash") == src:
            say(f"runtime {tag}: up to date")
            return _result(client, tag, False, t0)
        same = _labelled(client, kind="runtime", **{"source-hash": src})
        if same is not None:
            _tag(same, tag)
            say(f"runtime {tag}: up to date (re-tagged)")
            return _result(client, tag, False, t0)
    previous = find_image(client, tag)
    build_wheelhouse(root, root / "build" / "wheelhouse", say=say)
    say(f"runtime {tag}: docker build (BASE_IMAGE={base}) ...")
    _docker_build(client, path=root, tag=tag, buildargs={"BASE_IMAGE": base, "ENVFACTORY_SOURCE_HASH": src,
                                                         "ENVFACTORY_VERSION": _package_version()})
    _drop_replaced(client, previous, tag)
    try:  # the classic builder keeps the untagged build stage (the venv before COPY --from): drop it
        client.images.prune(filters={"dangling": True, "label": f"{LABEL}.kind"})
    except Exception:  # noqa: BLE001 - a concurrent prune or build: harmless
        pass
    res = _result(client, tag, True, t0)
    say(f"runtime {tag}: {res.size / 1e6:.0f} MB in {res.seconds:.0f} s")
    return res


# ------------------------------------------------------------------------------------ environment images
def env_image_tag(spec: EnvironmentSpec | str) -> str:
    """``envfactory/<name-lowercase>:<version>``."""
    s = spec if isinstance(spec, EnvironmentSpec) else get_environment(spec)
    return f"envfactory/{s.name.lower()}:{s.version}"


def env_dependencies(spec: EnvironmentSpec) -> list[EnvironmentSpec]:
    """``spec`` and every environment its tasks also use (cross-environment tasks), ``spec`` first."""
    names = [spec.name] + sorted({n for t in spec.tasks for n in t.envs} - {spec.name})
    return [spec if n == spec.name else get_environment(n) for n in names]


def _layer_hash(runtime_id: str, specs: Sequence[EnvironmentSpec]) -> str:
    h = hashlib.sha256(f"{_LAYER_FORMAT}\0{runtime_id}".encode())
    for s in specs:
        h.update(f"\0{s.name}\0{s.content_hash()}".encode())
    return h.hexdigest()


def build_env_image(env: str | EnvironmentSpec, *, runtime: str | None = None, force: bool = False,
                    say: Log = _say) -> ImageResult:
    """``envfactory/<name>:<version>``: ``FROM`` the runtime image plus ``/catalog/<Name>/`` for the
    environment and the environments its tasks use.  Skipped when an image built from the same
    runtime and the same environment contents exists.

    Raises:
        ImageError: no runtime image, the environment has no package folder, docker build failed.
    """
    t0 = time.monotonic()
    spec = env if isinstance(env, EnvironmentSpec) else get_environment(env)
    client = docker_client()
    runtime = runtime or runtime_tag()
    rt = find_image(client, runtime)
    if rt is None:
        raise ImageError(f"runtime image {runtime} is missing: run `envfactory image runtime` first")
    specs = env_dependencies(spec)
    for s in specs:
        if s.path is None:
            raise ImageError(f"{s.name} is a programmatic environment (no package folder): it cannot go in an image")
    tag = env_image_tag(spec)
    layer = _layer_hash(rt.id, specs)
    if not force:
        cur = find_image(client, tag)
        if cur is not None and (cur.labels or {}).get(f"{LABEL}.layer-hash") == layer:
            say(f"{tag}: up to date")
            return _result(client, tag, False, t0)
        same = _labelled(client, name=spec.name, **{"layer-hash": layer})
        if same is not None:
            _tag(same, tag)
            say(f"{tag}: up to date (re-tagged)")
            return _result(client, tag, False, t0)
    labels = {
        f"{LABEL}.kind": "environment",
        f"{LABEL}.name": spec.name,
        f"{LABEL}.version": spec.version,
        f"{LABEL}.tool-count": str(len(spec.tools)),
        f"{LABEL}.content-hash": spec.content_hash(),
        f"{LABEL}.domain": spec.domain,
        f"{LABEL}.envs": ",".join(s.name for s in specs),
        f"{LABEL}.env-versions": json.dumps({s.name: s.version for s in specs}, separators=(",", ":")),
        f"{LABEL}.layer-hash": layer,
        f"{LABEL}.runtime": runtime,
    }
    previous = find_image(client, tag)
    with tempfile.TemporaryDirectory(prefix="envfactory-img-") as d:
        ctx = Path(d)
        for s in specs:
            assert s.path is not None
            shutil.copytree(s.path, ctx / "catalog" / s.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # Three instructions (each one is a layer commit for the classic builder): FROM, COPY, LABEL.
        label_line = " \\\n      ".join(f"{k}={json.dumps(v)}" for k, v in labels.items())
        (ctx / "Dockerfile").write_text("ARG RUNTIME_IMAGE\nFROM ${RUNTIME_IMAGE}\n"
                                        "COPY --chown=0:0 catalog/ /catalog/\n"
                                        f"LABEL {label_line}\n")
        say(f"{tag}: docker build ({' + '.join(s.name for s in specs)} on {runtime}) ...")
        _docker_build(client, path=ctx, tag=tag, buildargs={"RUNTIME_IMAGE": runtime})
    _drop_replaced(client, previous, tag)
    res = _result(client, tag, True, t0)
    say(f"{tag}: {res.size / 1e6:.0f} MB ({(res.size - int(rt.attrs.get('Size', 0))) / 1e3:.0f} kB over the runtime) "
        f"in {res.seconds:.1f} s")
    return res


def catalog_environments() -> list[EnvironmentSpec]:
    """Every environment with a package folder (the ones that can become images)."""
    out = []
    for n in list_environments():
        s = get_environment(n)
        if s.path is not None:
            out.append(s)
    return out


def build_env_images(envs: Iterable[str] | None = None, *, runtime: str | None = None, force: bool = False,
                     say: Log = _say) -> list[ImageResult]:
    """Environment images for ``envs`` (default: the whole catalog)."""
    specs = [get_environment(e) for e in envs] if envs else catalog_environments()
    return [build_env_image(s, runtime=runtime, force=force, say=say) for s in specs]


def ensure_images(envs: Iterable[str] | None = None, *, base: str | None = None, say: Log = _say) -> dict[str, Any]:
    """Base (debootstrap, when neither it nor ``base`` exists), runtime and environment images, each
    reused when up to date.  What the Docker tests and ``make images`` run.  Returns the results."""
    client = docker_client()
    out: dict[str, Any] = {}
    if base is None:
        if find_image(client, DEFAULT_BASE_TAG) is None and find_image(client, OFFICIAL_BASE) is not None:
            base = OFFICIAL_BASE
        else:
            out["base"] = build_base(say=say)
            base = DEFAULT_BASE_TAG
    out["runtime"] = build_runtime(base_image=base, say=say)
    out["envs"] = build_env_images(envs, say=say)
    return out


def env_image_info(client: Any, tag: str) -> dict[str, Any]:
    """Labels of an environment image as a dict (``envs`` split), or {} when absent."""
    img = find_image(client, tag)
    if img is None:
        return {}
    lab = {k[len(LABEL) + 1:]: v for k, v in (img.labels or {}).items() if k.startswith(LABEL + ".")}
    if "envs" in lab:
        lab["envs"] = [e for e in lab["envs"].split(",") if e]
    if "env-versions" in lab:
        try:
            lab["env-versions"] = json.loads(lab["env-versions"])
        except ValueError:
            pass
    lab["id"] = img.id
    lab["size"] = int(img.attrs.get("Size", 0))
    return lab


def layer_sizes(client: Any, tag: str) -> list[dict[str, Any]]:
    """``docker history`` of an image: one entry per layer (size, instruction)."""
    img = find_image(client, tag)
    if img is None:
        return []
    return [{"size": int(h.get("Size", 0)), "created_by": (h.get("CreatedBy") or "")[:120]} for h in img.history()]
