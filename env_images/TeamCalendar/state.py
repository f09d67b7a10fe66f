"""The TeamCalendar database: people, meeting rooms, events, out-of-office blocks and notices.

All datetimes are naive ISO datetimes in the organisation's single timezone (``timezone``); the
clock ``now`` is fixed and every id comes from a counter in the state.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

Equipment = Literal["video", "whiteboard", "projector", "phone"]
RSVP = Literal["needs_action", "accepted", "declined", "tentative"]
Recurrence = Literal["none", "weekdays", "weekly"]
NoticeKind = Literal["invited", "removed", "rescheduled", "cancelled", "details_updated", "declined_out_of_office"]


class Person(BaseModel):
    person_id: str = Field(description="Person id, e.g. P-003")
    name: str
    email: str
    team: str
    title: str = ""
    timezone_label: str = Field(description="Where the person sits, informational only (all times are organisation time)")
    work_start: str = Field(description="Start of working hours, HH:MM organisation time")
    work_end: str = Field(description="End of working hours, HH:MM organisation time")


class Room(BaseModel):
    room_id: str = Field(description="Room id, e.g. RM-201")
    name: str
    capacity: int
    floor: int
    equipment: list[Equipment] = Field(default_factory=list)


class Attendee(BaseModel):
    person_id: str
    rsvp: RSVP = "needs_action"
    comment: str = ""


class Event(BaseModel):
    event_id: str = Field(description="Event id, e.g. EV-0007")
    title: str
    organizer_id: str
    attendees: list[Attendee] = Field(description="Everyone invited: the organizer first, then by person_id")
    start: datetime
    end: datetime
    room_id: str | None = None
    recurrence: Recurrence = "none"
    series_id: str | None = None
    status: Literal["confirmed", "cancelled"] = "confirmed"
    agenda: str = ""
    cancellation_reason: str | None = None
    created_at: datetime


class OutOfOffice(BaseModel):
    ooo_id: str = Field(description="Out-of-office id, e.g. OOO-0002")
    person_id: str
    start: datetime
    end: datetime
    note: str = ""


class Notice(BaseModel):
    notice_id: str
    event_id: str
    recipient_id: str
    kind: NoticeKind
    message: str
    sent_at: datetime


class CalendarDB(BaseModel):
    organisation: str = "Northwind Labs"
    timezone: str = "Europe/Berlin"
    now: datetime
    people: dict[str, Person] = Field(default_factory=dict)
    rooms: dict[str, Room] = Field(default_factory=dict)
    events: dict[str, Event] = Field(default_factory=dict)
    out_of_office: dict[str, OutOfOffice] = Field(default_factory=dict)
    notices: dict[str, Notice] = Field(default_factory=dict)
    next_event_seq: int = 1
    next_series_seq: int = 1
    next_ooo_seq: int = 1
    next_notice_seq: int = 1
