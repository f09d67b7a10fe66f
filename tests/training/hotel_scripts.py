"""Scripted model replies for HotelBooking episodes played through other gyms' clients (issue 28), and the
reference: ``envfactory rollout --policy openai`` on the same replies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gym_envfactory.cli import app
from gym_envfactory.testing import ScriptedChatServer


def call(name: str, **args: Any) -> dict[str, Any]:
    """One scripted tool call (OpenAI wire format, arguments as a dict)."""
    return {"type": "function", "function": {"name": name, "arguments": args}}


#: hotel-012 (one turn, three calls, a write) played right
ORACLE_012 = [
    {"content": None, "tool_calls": [call("find_guest_by_email", email="kenji.watanabe@example.jp")]},
    {"content": None, "tool_calls": [call("list_guest_bookings", guest_id="G-003")]},
    {"content": None, "tool_calls": [call("modify_hotel_booking", booking_id="BK-0003", check_in="2026-12-27",
                                          check_out="2026-12-31", room_type="TAT", guests=2)]},
    {"content": "Done: you now check out on the 31st; the extra night is 396."},
]
#: hotel-012 played wrong: the wrong check-out date, a repeated lookup (surplus), a tool that does not exist (invalid)
WRONG_012 = [
    {"content": None, "tool_calls": [call("find_guest_by_email", email="kenji.watanabe@example.jp")]},
    {"content": None, "tool_calls": [call("find_guest_by_email", email="kenji.watanabe@example.jp")]},
    {"content": None, "tool_calls": [call("modify_hotel_booking", booking_id="BK-0003", check_in="2026-12-27",
                                          check_out="2027-01-01", room_type="TAT", guests=2)]},
    {"content": None, "tool_calls": [call("refund_everything", booking_id="BK-0003")]},
    {"content": "All set."},
]
#: hotel-004 (one cancellation) played right
ORACLE_004 = [
    {"content": None, "tool_calls": [call("cancel_hotel_booking", booking_id="BK-0002", reason="")]},
    {"content": "Cancelled; 314.10 goes back to your card."},
]

CASES = [("hotel-012", ORACLE_012), ("hotel-012", WRONG_012), ("hotel-004", ORACLE_004)]


def rollout_record(tmp_path: Path, task_id: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    """``envfactory rollout HotelBooking --policy openai --task-id <task_id>`` against a scripted server
    answering ``script``: its trajectory record (``reward``, ``components``)."""
    out = tmp_path / f"{task_id}-{len(script)}-rollout.jsonl"
    with ScriptedChatServer(script) as server:
        res = CliRunner().invoke(app, ["rollout", "HotelBooking", "--policy", "openai", "--model", "m", "--base-url",
                                       server.base_url, "--task-id", task_id, "--out", str(out)],
                                 env={"OPENAI_API_KEY": "x"})
    assert res.exit_code == 0, res.output
    return dict(json.loads(out.read_text()))
