"""AtomicProbe tools: one honest write, one read, and writes that fail after changing the state."""

from __future__ import annotations

from gym_envfactory import ToolError, tool

from .state import ProbeDB


@tool
def add_note(state: ProbeDB, *, key: str, text: str) -> dict:
    """Store a note under ``key`` and bump the counter. Returns {counter, key}."""
    state.counter += 1
    state.notes[key] = text
    return {"counter": state.counter, "key": key}


@tool(read_only=True)
def get_counter(state: ProbeDB) -> int:
    """The counter."""
    return state.counter


@tool
def add_note_then_refuse(state: ProbeDB, *, key: str) -> dict:
    """Writes a note, then refuses with a domain error (a partial write followed by ToolError)."""
    state.counter += 1
    state.notes[key] = "half written"
    raise ToolError(f"refused after writing {key}", code="refused")


@tool
def add_note_then_crash(state: ProbeDB, *, key: str) -> dict:
    """Writes a note, then crashes (a partial write followed by an exception)."""
    state.counter += 1
    state.notes[key] = "half written"
    return {"ratio": 1 // (state.counter - state.counter)}


@tool
def add_note_bad_result(state: ProbeDB, *, key: str) -> int:
    """Writes a note, then returns a value that fails its declared return type."""
    state.counter += 1
    state.notes[key] = "half written"
    return key  # type: ignore[return-value]


@tool
def add_note_bad_write(state: ProbeDB, *, key: str) -> dict:
    """Writes a note, then assigns a value the state model refuses (the write fails validation)."""
    state.counter += 1
    state.notes[key] = "half written"
    state.counter = key  # type: ignore[assignment]
    return {"counter": state.counter, "key": key}
