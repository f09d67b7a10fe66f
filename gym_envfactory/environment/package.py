"""Loading an environment package folder (``env_images/<Name>/``): import its modules under a private
name, collect its ``@tool`` functions, check its manifest.  Public so generators load packages the same
way the runtime does.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel, ValidationError

from gym_envfactory.authoring import TOOL_ATTR
from gym_envfactory.environment.arguments import format_validation_error
from gym_envfactory.environment.manifest import Manifest
from gym_envfactory.environment.spec import EnvironmentSpec
from gym_envfactory.environment.tools import ToolSpec, tool_spec_from_function
from gym_envfactory.errors import SpecError


def import_package(name: str, folder: Path) -> ModuleType:
    """Import the package ``folder`` as ``gym_envfactory._envs.<name>`` (once; a private name, so two
    packages never clash with each other or with installed modules).

    Raises:
        SpecError: the package cannot be imported (its ``__init__.py`` raised, naming the file), or
            ``name`` is already imported from another folder (naming both; see :func:`unload_package`).
    """
    mod_name = f"gym_envfactory._envs.{name}"
    folder = Path(folder).resolve()
    loaded = sys.modules.get(mod_name)
    if loaded is not None:
        first = package_folder(loaded)
        if first is not None and first != folder:
            raise SpecError(
                f"environment name {name!r} is already loaded from {first}; refusing the package in {folder} "
                f"(two folders may not share an environment name: rename one, or call "
                f"unload_package({name!r}) first to replace it)",
                file=folder / "environment.toml", field="name")
        return loaded
    if "gym_envfactory._envs" not in sys.modules:
        parent = ModuleType("gym_envfactory._envs")
        parent.__path__ = []  # namespace-like container
        sys.modules["gym_envfactory._envs"] = parent
    init = folder / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        mod_name, init if init.exists() else None, submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise SpecError("cannot import environment package", file=folder)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        if init.exists():
            spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[mod_name]
        raise SpecError(f"importing the package failed: {exc!r}", file=init) from exc
    return module


def package_folder(module: ModuleType) -> Path | None:
    """The folder an environment package module (from :func:`import_package`) was loaded from, or
    ``None`` for a module without one."""
    paths = list(getattr(module, "__path__", None) or [])
    return Path(paths[0]).resolve() if paths else None


def unload_package(name: str) -> int:
    """Forget the imported modules of environment package ``name`` (``gym_envfactory._envs.<name>`` and its
    submodules), so the next :func:`import_package` of that name executes the files of the folder it is
    given.  Returns how many modules were dropped (0 when none was loaded)."""
    prefix = f"gym_envfactory._envs.{name}"
    mods = [m for m in list(sys.modules) if m == prefix or m.startswith(prefix + ".")]
    for m in mods:
        sys.modules.pop(m, None)
    return len(mods)


def import_member(pkg: ModuleType, folder: Path, module: str, *, field: str) -> ModuleType:
    """Import submodule ``module`` (dotted, relative to the package ``pkg`` loaded from ``folder``).

    Raises:
        SpecError: the module is missing or raised on import, naming its file and the manifest
            ``field`` that names it (``state_model``, ``tools_module``).
    """
    file = folder / (module.replace(".", "/") + ".py")
    try:
        return importlib.import_module(f"{pkg.__name__}.{module}")
    except ModuleNotFoundError as exc:
        raise SpecError(f"module {module!r} not found ({exc})", file=file, field=field) from exc
    except SpecError:
        raise
    except Exception as exc:
        raise SpecError(f"importing {module!r} failed: {exc!r}", file=file, field=field) from exc


def collect_tools(module: ModuleType, env: str) -> list[ToolSpec]:
    """Every ``@tool`` function defined in ``module``, in definition order."""
    out = []
    for obj in vars(module).values():
        if callable(obj) and hasattr(obj, TOOL_ATTR) and getattr(obj, "__module__", None) == module.__name__:
            out.append(tool_spec_from_function(obj, env))
    out.sort(key=lambda t: t.fn.__code__.co_firstlineno)
    return out


def load_environment(path: str | Path) -> EnvironmentSpec:
    """Load and check an environment package folder.

    The folder must be named after the manifest's ``name`` (``env_images/HotelBooking/`` holds
    ``name = "HotelBooking"``), and a name already loaded from another folder is refused: modules are
    imported once per name, so a copy keeping another package's name would otherwise run that
    package's code (or lend it its own) depending on load order.

    Raises:
        SpecError: a malformed package (file, line, field); a folder whose name is not the manifest's
            name; a name already loaded from another folder (naming both folders).
    """
    folder = Path(path).resolve()
    man_file = folder / "environment.toml"
    if not man_file.is_file():
        raise SpecError("missing manifest environment.toml", file=man_file)
    try:
        raw = tomllib.loads(man_file.read_text())
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise SpecError(f"invalid TOML: {exc}", file=man_file, line=int(m.group(1)) if m else None) from None
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        d = format_validation_error(exc)[0]
        raise SpecError(d["message"], file=man_file, field=d["field"]) from None
    manifest.check(man_file)
    if folder.name != manifest.name:
        raise SpecError(
            f"the package folder {folder} is named {folder.name!r} but its manifest names the environment "
            f"{manifest.name!r}: a package lives in a folder of its own name ({folder.parent / manifest.name})",
            file=man_file, field="name")
    pkg = import_package(manifest.name, folder)
    mod_name, _, cls_name = manifest.state_model.partition(":")
    state_mod = import_member(pkg, folder, mod_name, field="state_model")
    state_model = getattr(state_mod, cls_name or "State", None)
    if not (isinstance(state_model, type) and issubclass(state_model, BaseModel)):
        raise SpecError(
            f"{manifest.state_model!r} is not a Pydantic model", file=man_file, field="state_model"
        )
    tools_mod = import_member(pkg, folder, manifest.tools_module, field="tools_module")
    tools = collect_tools(tools_mod, manifest.name)
    return EnvironmentSpec(manifest, state_model, tools, path=folder)
