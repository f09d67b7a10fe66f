"""The AtomicProbe database: a counter and notes by key."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ProbeDB(BaseModel):
    """A counter and notes; every write tool bumps the counter.  Assignments are validated, so a tool
    writing a wrong type fails inside the call (add_note_bad_write)."""

    model_config = ConfigDict(validate_assignment=True)
    counter: int = 0
    notes: dict[str, str] = Field(default_factory=dict)
