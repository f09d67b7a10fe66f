"""Generated packages on disk: the manifest and files written from a Code Agent answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gym_envfactory.environment.manifest import DOMAINS, Manifest, Provenance

from ..packages import camel_name, write_environment_package

__all__ = ["env_name", "generated_manifest", "manifest_toml", "write_package"]


def _root_class(state_py: str) -> str:
    """The last top-level class of ``state.py`` (the root model usually comes after its records)."""
    import ast

    try:
        classes = [n.name for n in ast.parse(state_py).body if isinstance(n, ast.ClassDef)]
    except SyntaxError:
        return "State"
    return classes[-1] if classes else "State"


def generated_manifest(name: str, code: Mapping[str, Any], provenance: Mapping[str, Any], *,
                       domain: str | None = None) -> Manifest:
    """The manifest of a generated package from a Code Agent answer's ``manifest`` object.

    The name is forced to ``name`` and the version to ``0.1.0``; ``domain`` (else the answer's) falls
    back to ``utilities`` when it is not one of :data:`~gym_envfactory.environment.manifest.DOMAINS`;
    the state model defaults to the last class of ``state.py``; only string entries of the field lists
    are kept; ``provenance`` entries that are ``None`` are left out.  Never raises for a malformed
    answer (loading the package reports what is wrong with it).
    """
    m = dict(code.get("manifest") or {})
    dom = domain or m.get("domain")
    if dom not in DOMAINS:
        dom = "utilities"
    state_model = str(m.get("state_model") or f"state:{_root_class(str(code.get('state_py', '')))}")
    if ":" not in state_model:
        state_model = f"state:{state_model}"
    def strings(key: str) -> list[str]:
        return [x for x in m.get(key) or [] if isinstance(x, str)]

    return Manifest(name=name, version="0.1.0", domain=dom, description=str(m.get("description") or name),
                    state_model=state_model, tools_module="tools", default_initial_state="small",
                    bookkeeping_fields=strings("bookkeeping_fields"), free_text_fields=strings("free_text_fields"),
                    set_fields=strings("set_fields"),
                    provenance=Provenance(**{k: v for k, v in provenance.items() if v is not None}))


def manifest_toml(name: str, code: Mapping[str, Any], provenance: Mapping[str, Any], *, domain: str | None = None) -> str:
    """``environment.toml`` text of :func:`generated_manifest` (:meth:`Manifest.to_toml`)."""
    return generated_manifest(name, code, provenance, domain=domain).to_toml()


def write_package(folder: Path, name: str, code: Mapping[str, Any], scenarios: Sequence[Mapping[str, Any]],
                  tasks: Sequence[Mapping[str, Any]], provenance: Mapping[str, Any], *, domain: str | None = None) -> Path:
    """Write an environment package (docs/authoring.md) from a Code Agent answer into ``folder``,
    replacing what is there: an empty ``__init__.py``, ``state.py`` and ``tools.py`` as answered,
    ``initial_states/small.json``, the manifest (:func:`generated_manifest`), ``scenarios.jsonl`` and
    ``tasks.jsonl`` (written even when empty).  Returns ``folder``.  Raises ``OSError``."""
    return write_environment_package(
        folder, generated_manifest(name, code, provenance, domain=domain),
        files={"__init__.py": "", "state.py": str(code.get("state_py", "")), "tools.py": str(code.get("tools_py", ""))},
        initial_states={"small": code.get("initial_state") or {}}, scenarios=scenarios, tasks=tasks, replace=True)


def env_name(raw: str) -> str:
    """A CamelCase environment name from a metadata ``class_name`` (``plant_nursery_api`` -> ``PlantNurseryApi``;
    ``Env`` in front when it would not start with a letter)."""
    return camel_name(raw, prefix="Env")
