"""The environment manifest (``environment.toml``): name, version, domain, description, state and tool
modules, fields excluded from state equivalence, provenance; read by :mod:`.package` and written back
by :meth:`Manifest.to_toml` (the same fields, so a written manifest loads unchanged).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gym_envfactory.errors import SpecError

#: The one place where environment domains are declared (docs/authoring.md).
DOMAINS: tuple[str, ...] = (
    "commerce",
    "finance",
    "travel",
    "office",
    "lifestyle",
    "research",
    "utilities",
)


NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")


STATE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # no paths: never a file outside initial_states/


SEMVER_RE = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8.  Used for hashes and C04 checks."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


#: Longest JSON text (one line of a JSON Lines file, or a whole state file) a package may hold, in characters.
MAX_JSON_CHARS = 64 * 1024 * 1024
#: Deepest nesting of arrays and objects accepted in a package's JSON (tasks and states nest a few levels).
MAX_JSON_DEPTH = 256


def json_depth_exceeds(text: str, limit: int) -> bool:
    """True when the JSON ``text`` nests arrays/objects deeper than ``limit`` (brackets inside strings
    are skipped), checked without recursion so a hostile line cannot exhaust the stack."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_str = escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def parse_json_text(text: str, *, file: Path | str | None, line: int | None = None,
                    error: type[SpecError] = SpecError, max_chars: int = MAX_JSON_CHARS) -> Any:
    """A package file's JSON text (a JSON Lines line, or a whole file) as a Python object.

    Raises:
        SpecError: (or ``error``, e.g. :class:`~gym_envfactory.errors.DatasetError`) the text is not
            JSON, is longer than ``max_chars``, nests deeper than :data:`MAX_JSON_DEPTH`, or holds a
            number Python refuses (an integer of thousands of digits), naming ``file`` and ``line``
            (for a whole file, the line of a syntax error).
    """
    if len(text) > max_chars:
        raise error(f"{'line' if line is not None else 'file'} is {len(text)} characters long, over the limit of "
                    f"{max_chars}", file=file, line=line)
    if json_depth_exceeds(text, MAX_JSON_DEPTH):
        raise error(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", file=file, line=line)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        at = line if line is not None else exc.lineno
        raise error(f"invalid JSON: {exc.msg} (column {exc.colno})", file=file, line=at) from None
    except (ValueError, RecursionError) as exc:
        raise error(f"invalid JSON: {type(exc).__name__}: {str(exc)[:200]}", file=file, line=line) from None


#: Provenance kinds whose code is untrusted: written by a model (EnvGen) or taken from someone else's
#: repository (the importer).  ``gym.make`` runs such a package on the ``isolated`` backend unless told
#: ``trust=True`` (docs/architecture.md, "Backends"; README, "Untrusted environments").
UNTRUSTED_KINDS: tuple[str, ...] = ("generated", "imported")


class Provenance(BaseModel):
    """Where an environment comes from (``[provenance]`` of ``environment.toml``): ``kind``, and for
    generated or imported ones the ``model``, ``date`` and ``source``; extra keys are kept."""

    model_config = ConfigDict(extra="allow")
    kind: Literal["hand-written", "generated", "imported", "programmatic"] = "hand-written"
    model: str | None = None
    date: str | None = None
    source: str | None = None

    @property
    def trusted(self) -> bool:
        """False for the :data:`UNTRUSTED_KINDS` (``"generated"``, ``"imported"``): their code runs
        outside this process unless the user says ``trust=True``; code written by hand or in a program
        (``"hand-written"``, ``"programmatic"``) is trusted like the rest of the user's code."""
        return self.kind not in UNTRUSTED_KINDS


class Manifest(BaseModel):
    """``environment.toml``.

    Fields: ``name`` (CamelCase, the gym id is ``envfactory/<name>-v<major>``), ``version`` (semver),
    ``domain`` (one of :data:`DOMAINS`), ``description``, ``state_model`` (``"module:Class"`` inside
    the package), ``tools_module``, ``default_initial_state``, ``bookkeeping_fields`` (dotted paths
    excluded from state equivalence, ``*`` matches any key), ``set_fields`` (lists compared as
    multisets), ``free_text_fields`` (dotted paths of free text such as notes and reasons that tasks
    mask in calls; excluded from state equivalence, since any faithful wording is right),
    ``strict_arguments`` (``true``: the environment's tools validate arguments in Pydantic's strict mode,
    so no string becomes a number or a boolean and no number a string; docs/argument-policy.md, "Strict
    mode"), ``shared_reads`` (``true``: the read-only tools read the state shared between sessions
    in place instead of copying the records they scan, which is safe only when they truly never write;
    ``envfactory validate`` checks that, and checks run with copies; docs/performance.md, "Shared
    reads"), ``provenance``.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    version: str
    domain: str
    description: str
    state_model: str = "state:State"
    tools_module: str = "tools"
    default_initial_state: str = "small"
    bookkeeping_fields: list[str] = Field(default_factory=list)
    free_text_fields: list[str] = Field(default_factory=list)
    set_fields: list[str] = Field(default_factory=list)
    strict_arguments: bool = False
    shared_reads: bool = False
    provenance: Provenance = Field(default_factory=Provenance)

    def check(self, file: Path | None) -> None:
        """Check the name (CamelCase ASCII), version (semver) and domain (one of :data:`DOMAINS`);
        ``file`` is named in the error.

        Raises:
            SpecError: the first field that breaks a rule.
        """
        if not NAME_RE.match(self.name):
            raise SpecError("name must be CamelCase ASCII ([A-Z][A-Za-z0-9]*)", file=file, field="name")
        if not SEMVER_RE.match(self.version):
            raise SpecError(f"version {self.version!r} is not semver", file=file, field="version")
        if self.domain not in DOMAINS:
            raise SpecError(
                f"domain {self.domain!r} is not one of {', '.join(DOMAINS)} (declare new domains in "
                "gym_envfactory.environment.manifest.DOMAINS)",
                file=file,
                field="domain",
            )

    def to_toml(self) -> str:
        """``environment.toml`` text for this manifest, symmetric with loading:
        ``Manifest.model_validate(tomllib.loads(m.to_toml())) == m``.

        Top-level fields come first in declaration order (empty field lists, ``strict_arguments =
        false`` and ``shared_reads = false`` are left out; they load back as the same default), then a ``[provenance]`` table: ``kind``, the standard fields
        that are set, then extra fields in insertion order.  TOML has no null, so a provenance value of
        ``None`` (standard or extra) is left out; standard ones load back as ``None``.  Strings,
        booleans, integers, floats (``inf``/``nan`` included), dates and times, lists and tables
        (written inline) are supported; keys that are not bare TOML keys are quoted.

        Raises:
            ValueError: a provenance value TOML cannot hold (``None`` inside a list or table, an
                integer outside 64 bits, any other Python object).
        """
        import datetime as dt

        def string(s: str) -> str:
            # JSON escapes are TOML basic-string escapes; DEL is the one control character JSON leaves raw.
            return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")

        def key(k: str) -> str:
            return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else string(k)

        def value(v: Any) -> str:
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, int):
                if not -(2**63) <= v < 2**63:
                    raise ValueError(f"integer {v} does not fit TOML's 64 bits")
                return str(v)
            if isinstance(v, float):
                if v != v:
                    return "nan"
                if v in (float("inf"), float("-inf")):
                    return "inf" if v > 0 else "-inf"
                return repr(v)
            if isinstance(v, str):
                return string(v)
            if isinstance(v, (dt.datetime, dt.date, dt.time)):
                return v.isoformat()
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(value(x) for x in v) + "]"
            if isinstance(v, dict):
                return "{" + ", ".join(f"{key(str(k))} = {value(x)}" for k, x in v.items()) + "}"
            if v is None:
                raise ValueError("TOML has no null: None inside a list or table cannot be written")
            raise ValueError(f"{type(v).__name__} values cannot be written to TOML")

        lines = [f"{key(k)} = {value(v)}" for k, v in self.model_dump(exclude={"provenance"}).items()
                 if not (isinstance(v, list) and not v) and not (k in ("strict_arguments", "shared_reads") and v is False)]
        lines += ["", "[provenance]"]
        prov = self.provenance
        fields = {"kind": prov.kind, "model": prov.model, "date": prov.date, "source": prov.source,
                  **(prov.model_extra or {})}
        lines += [f"{key(k)} = {value(v)}" for k, v in fields.items() if v is not None]
        return "\n".join(lines) + "\n"
