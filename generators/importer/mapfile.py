"""The mapping file of a folder import (``envfactory import DIR --map FILE``, issue 26 item 11).

A folder of servers often needs per-file options: a name (two files whose API classes give one name),
a domain, the scenario to start from, the root model, a plain class to import instead of a server,
tasks.  The map gives them, so the whole corpus is one command.  TOML or JSON (by the file's suffix;
``.json`` is JSON, anything else TOML), one table per file of the folder under ``files``::

    [files."bank_results.py"]          # the file's name in DIR (or its stem: "bank_results")
    name = "Bank"                      # environment name (CamelCase)
    domain = "finance"                 # one of gym_envfactory.environment.manifest.DOMAINS
    initial_state = "bank.json"        # paths are relative to the map file
    state_model = "BankScenario"       # the root scenario model (--state-model)
    api_class = "BankAPI"              # the API class (--api-class)
    tasks = "bank_tasks.jsonl"         # copied into tasks.jsonl (--tasks)
    scenarios = "bank_scenarios.jsonl" # copied into scenarios.jsonl (--scenarios)

    [files."calculator.py"]
    class = "Calculator"               # a plain Python class (--class): runs in this process, so
                                       # refused under --sandbox docker/process (as --class is)
    lenient_types = true               # --lenient-types for this class

    [files."notes.txt.py"]
    skip = true                        # not imported (listed as skipped)

A file with no table is imported with the command line's options.  A malformed map is refused with
:class:`ImportMapError`, naming the map file, the key (the file's table) and the field.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym_envfactory.environment.manifest import DOMAINS, NAME_RE

from ..errors import ImporterError

__all__ = ["ImportMap", "ImportMapError", "MapEntry", "load_import_map", "map_field"]


class ImportMapError(ImporterError):
    """A mapping file that cannot be used: not TOML/JSON, an unknown or mistyped field, a path that
    does not exist, a key naming no file of the folder.  ``file`` is the map, ``field`` the dotted
    place (``files."bank.py".domain``), ``line`` the line of a parse error."""


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)  # "yes" is not a boolean

    name: str | None = None
    domain: str | None = None
    description: str | None = None
    initial_state: str | None = None
    state_model: str | None = None
    api_class: str | None = None
    class_name: str | None = Field(default=None, alias="class")
    tasks: str | None = None
    scenarios: str | None = None
    lenient_types: bool = False
    skip: bool = False


@dataclass(frozen=True)
class MapEntry:
    """The options of one file (paths resolved against the map's folder; ``None``: the command line's)."""

    key: str
    name: str | None = None
    domain: str | None = None
    description: str | None = None
    initial_state: Path | None = None
    state_model: str | None = None
    api_class: str | None = None
    class_name: str | None = None
    tasks: Path | None = None
    scenarios: Path | None = None
    lenient_types: bool = False
    skip: bool = False


@dataclass(frozen=True)
class ImportMap:
    """A loaded mapping file: ``path`` and the entries by file key (a file name or stem)."""

    path: Path
    entries: dict[str, MapEntry]

    def entry_for(self, src: Path) -> MapEntry | None:
        """The entry of server ``src`` (by file name, then stem), or ``None``."""
        return self.entries.get(src.name) or self.entries.get(src.stem)


def map_field(key: str, field: str | None = None) -> str:
    """The dotted place of ``field`` of file ``key``'s table in a map: ``files."bank.py".domain``."""
    return f"files.{json.dumps(key)}" + (f".{field}" if field else "")


def _json_problem(path: Path, *, lines: bool) -> str | None:
    """Why ``path`` is not a JSON document (``lines``: JSON Lines of objects), naming it and the line; or ``None``."""
    kind = "JSON Lines of objects" if lines else "JSON"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    except UnicodeDecodeError:
        return f"{path} is not UTF-8 text (expected {kind})"
    docs = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()] if lines else [(1, text)]
    for n, doc in docs:
        try:
            value = json.loads(doc)
        except json.JSONDecodeError as exc:
            return f"{path} line {exc.lineno if not lines else n}: not {kind}: {exc.msg}"
        except RecursionError:
            return f"{path} line {n}: nested too deeply to parse"
        if lines and not isinstance(value, dict):
            return f"{path} line {n}: not {kind}: a {type(value).__name__}, not an object"
    return None


def load_import_map(path: str | Path, folder: str | Path | None = None) -> ImportMap:
    """Read and check the mapping file ``path`` (format in the module doc).  With ``folder``, every key
    must name a ``*.py`` file of it (by name or stem).

    Raises:
        ImportMapError: the file is missing or unparsable (with its line), the top level is not one
            ``files`` table, an entry has an unknown field, a field of the wrong type (strict: ``"yes"`` is
            not a boolean), a name that is not an environment name (CamelCase, as the catalog's
            :data:`~gym_envfactory.environment.manifest.NAME_RE`), an unknown domain, two of
            ``class``/``api_class``/``state_model`` that exclude each other, a path that is not a
            file or not JSON (``initial_state``) / JSON Lines (``tasks``, ``scenarios``), or a key naming
            no file of ``folder``.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImportMapError(f"cannot read the map file: {exc.strerror or exc}", file=p) from None
    except UnicodeDecodeError as exc:
        raise ImportMapError(f"not UTF-8 text (byte {exc.start}); save the map as UTF-8", file=p) from None
    try:
        if p.suffix.lower() == ".json":
            raw: Any = json.loads(text)
        else:
            raw = tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportMapError(f"not JSON: {exc.msg}", file=p, line=exc.lineno) from None
    except tomllib.TOMLDecodeError as exc:
        raise ImportMapError(f"not TOML: {exc}", file=p) from None
    except RecursionError:
        raise ImportMapError("nested too deeply to parse; a map is one table 'files' of flat tables", file=p) from None
    if not isinstance(raw, dict) or set(raw) != {"files"} or not isinstance(raw["files"], dict):
        extra = sorted(set(raw) - {"files"}) if isinstance(raw, dict) else []
        hint = f" (unknown top-level key(s): {', '.join(extra)})" if extra else ""
        raise ImportMapError("the map must hold one table 'files' with a table per server file, e.g. "
                             f"[files.\"bank.py\"] name = \"Bank\"{hint}", file=p, field="files")
    names = None
    if folder is not None:
        py = [f for f in Path(folder).glob("*.py") if f.is_file()]
        names = {f.name for f in py} | {f.stem for f in py}
    base = p.resolve().parent
    entries: dict[str, MapEntry] = {}
    for key, value in raw["files"].items():
        if not isinstance(value, dict):
            raise ImportMapError(f"must be a table of options, not {type(value).__name__}", file=p, field=map_field(key))
        try:
            e = _Entry.model_validate(value)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"]) or None
            msg = ("unknown field; the fields are " + ", ".join(sorted({*(_Entry.model_fields), "class"} - {"class_name"}))
                   if err["type"] == "extra_forbidden" else err["msg"])
            raise ImportMapError(msg, file=p, field=map_field(key, loc)) from None
        if names is not None and key not in names:
            raise ImportMapError(f"names no *.py file of {folder}", file=p, field=map_field(key))
        if e.name is not None and not NAME_RE.match(e.name):
            raise ImportMapError(f"name {e.name!r} is not an environment name: CamelCase ASCII ([A-Z][A-Za-z0-9]*)",
                                 file=p, field=map_field(key, "name"))
        if e.domain is not None and e.domain not in DOMAINS:
            raise ImportMapError(f"unknown domain {e.domain!r}; one of {', '.join(DOMAINS)}", file=p,
                                 field=map_field(key, "domain"))
        if e.class_name is not None and (e.api_class or e.state_model):
            raise ImportMapError("'class' imports a plain class; 'api_class' and 'state_model' apply to servers only",
                                 file=p, field=map_field(key, "class"))
        paths: dict[str, Path | None] = {}
        for fld in ("initial_state", "tasks", "scenarios"):
            rel = getattr(e, fld)
            if rel is None:
                paths[fld] = None
                continue
            full = (base / rel).resolve()
            if not full.is_file():
                raise ImportMapError(f"no such file: {full}", file=p, field=map_field(key, fld))
            bad = _json_problem(full, lines=fld != "initial_state")
            if bad:
                raise ImportMapError(bad, file=p, field=map_field(key, fld))
            paths[fld] = full
        if key in entries or (key.endswith(".py") and key[:-3] in entries) or f"{key}.py" in entries:
            raise ImportMapError("the file has two tables (by name and by stem)", file=p, field=map_field(key))
        entries[key] = MapEntry(key=key, name=e.name, domain=e.domain, description=e.description,
                                initial_state=paths["initial_state"], state_model=e.state_model,
                                api_class=e.api_class, class_name=e.class_name, tasks=paths["tasks"],
                                scenarios=paths["scenarios"], lenient_types=e.lenient_types, skip=e.skip)
    return ImportMap(path=p, entries=entries)
