"""The AtomicProbe database: a counter and notes by key."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ProbeDB(BaseModel):
    """A counter and notes; every write tool bumps the counter."""

    counter: int = 0
    notes: dict[str, str] = Field(default_factory=dict)
