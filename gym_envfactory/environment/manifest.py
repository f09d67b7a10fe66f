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

#: The one place where environment domains are declared (DESIGN §3).
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


class Provenance(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["hand-written", "generated", "imported", "programmatic"] = "hand-written"
    model: str | None = None
    date: str | None = None
    source: str | None = None


class Manifest(BaseModel):
    """``environment.toml``.

    Fields: ``name`` (CamelCase, the gym id is ``envfactory/<name>-v<major>``), ``version`` (semver),
    ``domain`` (one of :data:`DOMAINS`), ``description``, ``state_model`` (``"module:Class"`` inside
    the package), ``tools_module``, ``default_initial_state``, ``bookkeeping_fields`` (dotted paths
    excluded from state equivalence, ``*`` matches any key), ``set_fields`` (lists compared as
    multisets), ``free_text_fields`` (dotted paths of free text such as notes and reasons that tasks
    mask in calls; excluded from state equivalence, since any faithful wording is right), ``provenance``.
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
    provenance: Provenance = Field(default_factory=Provenance)

    def check(self, file: Path | None) -> None:
        if not NAME_RE.match(self.name):
            raise SpecError("name must be CamelCase ASCII ([A-Z][A-Za-z0-9]*)", file=file, field="name")
        if not SEMVER_RE.match(self.version):
            raise SpecError(f"version {self.version!r} is not semver", file=file, field="version")
        if self.domain not in DOMAINS:
            raise SpecError(
                f"domain {self.domain!r} is not one of {', '.join(DOMAINS)} (declare new domains in "
                "gym_envfactory.spec.DOMAINS)",
                file=file,
                field="domain",
            )
