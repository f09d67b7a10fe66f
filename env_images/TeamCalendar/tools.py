"""TeamCalendar tools: people and room look-ups, free/busy, common free slots, scheduling,
invitations, RSVPs, rescheduling, cancellation and out-of-office blocks.

Every datetime is a naive ISO datetime (``2026-12-03T14:00:00``) in the organisation's timezone.
Meetings must start at or after ``now``, on one day, between 07:00 and 20:00.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gym_envfactory import ToolError, tool

from .state import (
    RSVP,
    Attendee,
    CalendarDB,
    Equipment,
    Event,
    Notice,
    NoticeKind,
    OutOfOffice,
    Person,
    Recurrence,
    Room,
)

DAY_OPEN = time(7, 0)
DAY_CLOSE = time(20, 0)
SLOT_STEP = timedelta(minutes=30)

# ----------------------------------------------------------------------------- result models


class BusyBlock(BaseModel):
    start: datetime
    end: datetime
    kind: Literal["event", "out_of_office"]
    event_id: str | None = None
    title: str | None = None
    ooo_id: str | None = None
    note: str | None = None


class FreeBusy(BaseModel):
    person_id: str
    name: str
    work_start: str
    work_end: str
    busy: list[BusyBlock]


class Slot(BaseModel):
    start: datetime
    end: datetime


class AttendeeView(BaseModel):
    person_id: str
    name: str
    rsvp: RSVP
    comment: str = ""


class EventView(BaseModel):
    event_id: str
    title: str
    status: Literal["confirmed", "cancelled"]
    start: datetime
    end: datetime
    organizer_id: str
    organizer_name: str
    room_id: str | None
    room_name: str | None
    attendees: list[AttendeeView] = Field(description="Organizer first, then by person_id")
    recurrence: Recurrence
    series_id: str | None
    agenda: str
    cancellation_reason: str | None


class EventSummary(BaseModel):
    event_id: str
    title: str
    status: Literal["confirmed", "cancelled"]
    start: datetime
    end: datetime
    organizer_id: str
    room_id: str | None
    room_name: str | None
    attendee_count: int
    series_id: str | None
    rsvp: RSVP | None = Field(None, description="The filtered person's RSVP (only with person_id)")


class CreateEventResult(BaseModel):
    event_id: str = Field(description="Id of the (first) event created")
    occurrence_ids: list[str] = Field(description="All event ids created (several for a recurring series)")
    series_id: str | None
    event: EventView


class CancelResult(BaseModel):
    cancelled_event_ids: list[str]
    notified_person_ids: list[str]
    notice_ids: list[str]


class EventRef(BaseModel):
    event_id: str
    title: str
    start: datetime
    end: datetime


class OutOfOfficeResult(BaseModel):
    out_of_office: OutOfOffice
    declined_event_ids: list[str] = Field(description="Invitations declined because of this block")
    organized_conflicts: list[EventRef] = Field(
        description="Events this person organizes inside the block (left unchanged; reschedule or cancel them)"
    )


# ----------------------------------------------------------------------------- helpers


def _person(state: CalendarDB, person_id: str) -> Person:
    p = state.people.get(person_id)
    if p is None:
        raise ToolError(
            f"No person {person_id!r}; person ids look like P-003. Use find_person to look someone up by name.",
            code="not_found",
        )
    return p


def _room(state: CalendarDB, room_id: str) -> Room:
    r = state.rooms.get(room_id)
    if r is None:
        raise ToolError(
            f"No meeting room {room_id!r}; room ids look like RM-201. Use search_meeting_rooms to find one.",
            code="not_found",
        )
    return r


def _event(state: CalendarDB, event_id: str) -> Event:
    e = state.events.get(event_id)
    if e is None:
        raise ToolError(
            f"No event {event_id!r}; event ids look like EV-0007. Use list_events to find it.", code="not_found"
        )
    return e


def _naive(dt: datetime, name: str) -> None:
    if dt.tzinfo is not None:
        raise ToolError(
            f"{name} must be a naive ISO datetime in organisation time (e.g. 2026-12-03T14:00:00), without a UTC offset",
            code="invalid_time",
        )


def _window(start: datetime, end: datetime, max_days: int) -> None:
    _naive(start, "start")
    _naive(end, "end")
    if end <= start:
        raise ToolError(f"The end {end.isoformat()} must be after the start {start.isoformat()}", code="invalid_time")
    if end - start > timedelta(days=max_days):
        raise ToolError(f"The window may span at most {max_days} days; narrow it", code="invalid_time")


def _check_meeting_time(state: CalendarDB, start: datetime, end: datetime) -> None:
    _naive(start, "start")
    _naive(end, "end")
    if end <= start:
        raise ToolError(f"The end {end.isoformat()} must be after the start {start.isoformat()}", code="invalid_time")
    if start < state.now:
        raise ToolError(
            f"{start.isoformat()} is in the past (it is now {state.now.isoformat()}); choose a later time",
            code="invalid_time",
        )
    if start.date() != end.date():
        raise ToolError("A meeting must start and end on the same day", code="invalid_time")
    if start.time() < DAY_OPEN or end.time() > DAY_CLOSE:
        raise ToolError("Meetings can only be scheduled between 07:00 and 20:00 organisation time", code="invalid_time")
    if start.second or end.second or start.microsecond or end.microsecond or start.minute % 5 or end.minute % 5:
        raise ToolError("Meeting times must be on 5-minute boundaries (e.g. 14:00, 14:35)", code="invalid_time")


def _overlaps(a_start: datetime, a_end: datetime, b_start: datetime, b_end: datetime) -> bool:
    return a_start < b_end and b_start < a_end


def _busy(state: CalendarDB, person_id: str, start: datetime, end: datetime,
          exclude: frozenset[str] = frozenset()) -> list[BusyBlock]:
    """Confirmed events the person has not declined, and out-of-office blocks, overlapping [start, end)."""
    out: list[BusyBlock] = []
    for e in state.events.values():
        if e.status != "confirmed" or e.event_id in exclude or not _overlaps(e.start, e.end, start, end):
            continue
        for a in e.attendees:
            if a.person_id == person_id and a.rsvp != "declined":
                out.append(BusyBlock(start=e.start, end=e.end, kind="event", event_id=e.event_id, title=e.title))
                break
    for o in state.out_of_office.values():
        if o.person_id == person_id and _overlaps(o.start, o.end, start, end):
            out.append(BusyBlock(start=o.start, end=o.end, kind="out_of_office", ooo_id=o.ooo_id, note=o.note))
    out.sort(key=lambda b: (b.start, b.end, b.event_id or b.ooo_id or ""))
    return out


def _room_clash(state: CalendarDB, room_id: str, start: datetime, end: datetime,
                exclude: frozenset[str] = frozenset()) -> Event | None:
    for e in sorted(state.events.values(), key=lambda x: (x.start, x.event_id)):
        if (e.status == "confirmed" and e.room_id == room_id and e.event_id not in exclude
                and _overlaps(e.start, e.end, start, end)):
            return e
    return None


def _attendee_clashes(state: CalendarDB, person_ids: list[str], start: datetime, end: datetime,
                      exclude: frozenset[str] = frozenset()) -> list[str]:
    msgs = []
    for pid in person_ids:
        for b in _busy(state, pid, start, end, exclude):
            what = f"event {b.event_id} '{b.title}'" if b.kind == "event" else f"out of office ({b.ooo_id})"
            msgs.append(f"{state.people[pid].name} ({pid}) is busy {b.start:%Y-%m-%d %H:%M}-{b.end:%H:%M}: {what}")
    return msgs


def _dedupe(ids: list[str]) -> list[str]:
    seen: list[str] = []
    for i in ids:
        if i not in seen:
            seen.append(i)
    return seen


def _notify(state: CalendarDB, event: Event, recipients: list[str], kind: NoticeKind, message: str) -> list[str]:
    ids = []
    for pid in recipients:
        nid = f"NT-{state.next_notice_seq:04d}"
        state.next_notice_seq += 1
        state.notices[nid] = Notice(notice_id=nid, event_id=event.event_id, recipient_id=pid, kind=kind,
                                    message=message, sent_at=state.now)
        ids.append(nid)
    return ids


def _view(state: CalendarDB, e: Event) -> EventView:
    room = state.rooms.get(e.room_id) if e.room_id else None
    org = state.people.get(e.organizer_id)
    return EventView(
        event_id=e.event_id, title=e.title, status=e.status, start=e.start, end=e.end,
        organizer_id=e.organizer_id, organizer_name=org.name if org else e.organizer_id,
        room_id=e.room_id, room_name=room.name if room else None,
        attendees=[AttendeeView(person_id=a.person_id,
                                name=state.people[a.person_id].name if a.person_id in state.people else a.person_id,
                                rsvp=a.rsvp, comment=a.comment) for a in e.attendees],
        recurrence=e.recurrence, series_id=e.series_id, agenda=e.agenda,
        cancellation_reason=e.cancellation_reason,
    )


def _require_organizer(state: CalendarDB, e: Event, requested_by: str) -> None:
    _person(state, requested_by)
    if e.organizer_id != requested_by:
        org = state.people.get(e.organizer_id)
        raise ToolError(
            f"Only the organizer ({org.name if org else e.organizer_id}, {e.organizer_id}) can change {e.event_id}",
            code="not_organizer",
        )


def _require_active(e: Event) -> None:
    if e.status == "cancelled":
        raise ToolError(f"Event {e.event_id} is already cancelled", code="already_cancelled")


def _require_future(state: CalendarDB, e: Event) -> None:
    if e.start <= state.now:
        raise ToolError(
            f"Event {e.event_id} started at {e.start.isoformat()} (now is {state.now.isoformat()}); it can no longer be changed",
            code="invalid_state",
        )


def _sort_attendees(e: Event) -> None:
    """Canonical attendee order: the organizer first, then by person_id."""
    e.attendees.sort(key=lambda a: (a.person_id != e.organizer_id, a.person_id))


def _fmt(e: Event) -> str:
    return f"'{e.title}' ({e.event_id}) on {e.start:%Y-%m-%d %H:%M}-{e.end:%H:%M}"


def _hhmm(s: str) -> time:
    h, m = s.split(":")
    return time(int(h), int(m))


# ----------------------------------------------------------------------------- read tools


@tool(read_only=True)
def find_person(
    state: CalendarDB,
    *,
    query: Annotated[str, Field(description="Part of a name or email, case-insensitive; empty to list a whole team")] = "",
    team: Annotated[str | None, Field(description="Only people in this team (e.g. 'Design'), case-insensitive")] = None,
) -> list[Person]:
    """Look up people in the organisation directory by (part of) name or email, optionally within a team.

    Returns the matching people (person_id, name, email, team, title, timezone label, working hours
    in organisation time), sorted by person_id. Use the person_id with every other tool.
    Errors: invalid_argument (neither query nor team given), not_found (nobody matches).
    """
    q = query.strip().lower()
    if not q and not team:
        raise ToolError("Give a name/email fragment in query, or a team", code="invalid_argument")
    out = [
        p for p in state.people.values()
        if (not q or q in p.name.lower() or q in p.email.lower())
        and (team is None or p.team.lower() == team.strip().lower())
    ]
    if not out:
        teams = sorted({p.team for p in state.people.values()})
        raise ToolError(f"Nobody matches query={query!r} team={team!r}; teams are: {', '.join(teams)}", code="not_found")
    return sorted(out, key=lambda p: p.person_id)


@tool(read_only=True)
def get_free_busy(
    state: CalendarDB,
    *,
    person_ids: Annotated[list[str], Field(min_length=1, description="Person ids, e.g. ['P-001', 'P-004']")],
    start: Annotated[datetime, Field(description="Window start, naive ISO datetime")],
    end: Annotated[datetime, Field(description="Window end, naive ISO datetime")],
) -> list[FreeBusy]:
    """Show when people are busy in a window (at most 14 days).

    Returns, per person, their working hours and busy blocks: confirmed events they have not declined
    (with event id and title) and out-of-office blocks. Times not listed are free.
    Errors: not_found (unknown person), invalid_time (end not after start, window over 14 days).
    """
    ids = _dedupe(person_ids)
    for pid in ids:
        _person(state, pid)
    _window(start, end, 14)
    return [
        FreeBusy(person_id=pid, name=state.people[pid].name, work_start=state.people[pid].work_start,
                 work_end=state.people[pid].work_end, busy=_busy(state, pid, start, end))
        for pid in ids
    ]


@tool(read_only=True)
def find_free_slots(
    state: CalendarDB,
    *,
    person_ids: Annotated[list[str], Field(min_length=1, description="Everyone who must attend (organizer included)")],
    window_start: Annotated[datetime, Field(description="Earliest start to consider, naive ISO datetime")],
    window_end: Annotated[datetime, Field(description="Latest end to consider, naive ISO datetime")],
    duration_minutes: Annotated[int, Field(ge=15, le=480, description="Meeting length in minutes")],
    max_results: Annotated[int, Field(ge=1, le=20, description="How many slots to return")] = 5,
) -> list[Slot]:
    """Find common free slots for a group of people.

    Candidate starts are on the hour or half hour, on weekdays, not before now, inside everyone's
    working hours (and 07:00-20:00), with nobody busy (events not declined, out of office).
    Returns the earliest slots first, at most max_results. Window at most 14 days.
    Errors: not_found (unknown person), invalid_time (bad window or window entirely in the past),
    no_free_slot (nothing fits; widen the window, shorten the meeting or drop someone).
    """
    ids = _dedupe(person_ids)
    people = [_person(state, pid) for pid in ids]
    _window(window_start, window_end, 14)
    if window_end <= state.now:
        raise ToolError(f"The window ends before now ({state.now.isoformat()})", code="invalid_time")
    dur = timedelta(minutes=duration_minutes)
    open_t = max([DAY_OPEN] + [_hhmm(p.work_start) for p in people])
    close_t = min([DAY_CLOSE] + [_hhmm(p.work_end) for p in people])
    first = max(window_start, state.now)
    # round up to the slot grid
    base = first.replace(minute=0, second=0, microsecond=0)
    while base < first:
        base += SLOT_STEP
    busy = {pid: _busy(state, pid, base, window_end) for pid in ids}
    slots: list[Slot] = []
    day = base.date()
    while day <= window_end.date() and len(slots) < max_results:
        if day.weekday() < 5:
            t = max(datetime.combine(day, open_t), base)
            while t.minute % 30 or t.second:
                t = t.replace(second=0, microsecond=0) + timedelta(minutes=1)
            stop = min(datetime.combine(day, close_t), window_end)
            while t + dur <= stop and len(slots) < max_results:
                if not any(_overlaps(b.start, b.end, t, t + dur) for bl in busy.values() for b in bl):
                    slots.append(Slot(start=t, end=t + dur))
                t += SLOT_STEP
        day += timedelta(days=1)
    if not slots:
        raise ToolError(
            f"No common {duration_minutes}-minute slot for {', '.join(ids)} between "
            f"{window_start.isoformat()} and {window_end.isoformat()} (shared working hours "
            f"{open_t:%H:%M}-{close_t:%H:%M}); widen the window, shorten the meeting or drop someone",
            code="no_free_slot",
        )
    return slots


@tool(read_only=True)
def search_meeting_rooms(
    state: CalendarDB,
    *,
    start: Annotated[datetime, Field(description="Meeting start, naive ISO datetime")],
    end: Annotated[datetime, Field(description="Meeting end, naive ISO datetime")],
    min_capacity: Annotated[int, Field(ge=1, description="Seats needed (everyone, organizer included)")] = 1,
    equipment: Annotated[list[Equipment], Field(description="Equipment the room must have")] = [],  # noqa: B006 - the schema default; never mutated
    floor: Annotated[int | None, Field(description="Only rooms on this floor")] = None,
    max_results: Annotated[int, Field(ge=1, le=50)] = 10,
) -> list[Room]:
    """Find meeting rooms free for the whole of [start, end) with enough seats and the equipment asked for.

    Returns rooms (room_id, name, capacity, floor, equipment), smallest fitting room first, then by room_id.
    Errors: invalid_time (end before start, in the past, not on one day between 07:00 and 20:00),
    no_room_available (nothing free matches; relax capacity/equipment/floor or pick another time).
    """
    _check_meeting_time(state, start, end)
    need = set(equipment)
    rooms = [
        r for r in state.rooms.values()
        if r.capacity >= min_capacity and need <= set(r.equipment) and (floor is None or r.floor == floor)
        and _room_clash(state, r.room_id, start, end) is None
    ]
    if not rooms:
        raise ToolError(
            f"No free room for {min_capacity}+ people with {sorted(need) or 'no special equipment'}"
            f"{'' if floor is None else f' on floor {floor}'} from {start.isoformat()} to {end.isoformat()}",
            code="no_room_available",
        )
    rooms.sort(key=lambda r: (r.capacity, r.room_id))
    return rooms[:max_results]


@tool(read_only=True)
def get_event(
    state: CalendarDB,
    *,
    event_id: Annotated[str, Field(description="Event id, e.g. EV-0007")],
) -> EventView:
    """Get one event with its title, status, times, organizer, room (id and name), attendees with their
    RSVP (needs_action/accepted/declined/tentative), recurrence/series, agenda and cancellation reason.
    Errors: not_found.
    """
    return _view(state, _event(state, event_id))


@tool(read_only=True)
def list_events(
    state: CalendarDB,
    *,
    person_id: Annotated[str | None, Field(description="Only events this person is invited to (declined included)")] = None,
    room_id: Annotated[str | None, Field(description="Only events booked in this room")] = None,
    start: Annotated[datetime | None, Field(description="Window start (default: now)")] = None,
    end: Annotated[datetime | None, Field(description="Window end (default: start + 14 days)")] = None,
    title_contains: Annotated[str | None, Field(description="Case-insensitive fragment of the title")] = None,
    include_cancelled: bool = False,
    limit: Annotated[int, Field(ge=1, le=200)] = 50,
) -> list[EventSummary]:
    """List events overlapping a window (at most 62 days), optionally for one person, one room or a
    title fragment. Cancelled events are skipped unless include_cancelled.

    Returns summaries sorted by start (event_id, title, status, times, organizer, room, attendee
    count, series, and the person's RSVP when person_id is given); an empty list means no events.
    Errors: not_found (unknown person or room), invalid_time (end not after start, window too long).
    """
    if person_id is not None:
        _person(state, person_id)
    if room_id is not None:
        _room(state, room_id)
    s = start if start is not None else state.now
    e = end if end is not None else s + timedelta(days=14)
    _window(s, e, 62)
    frag = (title_contains or "").lower()
    out = []
    for ev in sorted(state.events.values(), key=lambda x: (x.start, x.event_id)):
        if not _overlaps(ev.start, ev.end, s, e):
            continue
        if ev.status == "cancelled" and not include_cancelled:
            continue
        if room_id is not None and ev.room_id != room_id:
            continue
        if frag and frag not in ev.title.lower():
            continue
        rsvp = None
        if person_id is not None:
            mine = [a for a in ev.attendees if a.person_id == person_id]
            if not mine:
                continue
            rsvp = mine[0].rsvp
        room = state.rooms.get(ev.room_id) if ev.room_id else None
        out.append(EventSummary(event_id=ev.event_id, title=ev.title, status=ev.status, start=ev.start, end=ev.end,
                                organizer_id=ev.organizer_id, room_id=ev.room_id, room_name=room.name if room else None,
                                attendee_count=len(ev.attendees), series_id=ev.series_id, rsvp=rsvp))
        if len(out) >= limit:
            break
    return out


# ----------------------------------------------------------------------------- write tools


@tool
def create_event(
    state: CalendarDB,
    *,
    organizer_id: Annotated[str, Field(description="Person id of the organizer (added as an accepted attendee)")],
    title: Annotated[str, Field(description="Event title")],
    start: Annotated[datetime, Field(description="Start, naive ISO datetime in organisation time")],
    end: Annotated[datetime, Field(description="End, same day, naive ISO datetime")],
    attendee_ids: Annotated[list[str], Field(description="Person ids to invite, besides the organizer")] = [],  # noqa: B006 - the schema default; never mutated
    room_id: Annotated[str | None, Field(description="Meeting room id (e.g. RM-201), or none for a call")] = None,
    agenda: Annotated[str, Field(description="Agenda / notes shown to attendees")] = "",
    recurrence: Annotated[Recurrence, Field(description="'none', 'weekdays' (Mon-Fri) or 'weekly'")] = "none",
    occurrences: Annotated[int, Field(ge=1, le=12, description="Number of occurrences for a recurring event (2-12)")] = 1,
    allow_conflicts: Annotated[bool, Field(description="Book even if attendees are already busy (never overrides a room conflict)")] = False,
) -> CreateEventResult:
    """Schedule a meeting (optionally recurring) and send invitations.

    The organizer is an accepted attendee; invitees start as needs_action and get an invitation notice.
    A recurring event creates one event per occurrence sharing a series_id (weekdays skips Sat/Sun).
    Returns event_id (first occurrence), occurrence_ids, series_id and the full event.
    Errors: invalid_argument (empty title, recurrence/occurrences mismatch), not_found (person or room),
    invalid_time (end before start, in the past, not on one day within 07:00-20:00),
    capacity_exceeded (more people than the room seats), room_conflict (room already booked),
    attendee_conflict (someone is busy or out of office; pass allow_conflicts=true to double-book).
    """
    if not title.strip():
        raise ToolError("The title must not be empty", code="invalid_argument")
    _person(state, organizer_id)
    invitees = [p for p in _dedupe(attendee_ids) if p != organizer_id]
    for pid in invitees:
        _person(state, pid)
    room = _room(state, room_id) if room_id is not None else None
    _check_meeting_time(state, start, end)
    if recurrence == "none" and occurrences != 1:
        raise ToolError("occurrences > 1 needs recurrence 'weekdays' or 'weekly'", code="invalid_argument")
    if recurrence != "none" and occurrences < 2:
        raise ToolError("A recurring event needs occurrences between 2 and 12", code="invalid_argument")
    times: list[tuple[datetime, datetime]] = []
    s, e = start, end
    while len(times) < occurrences:
        if recurrence != "weekdays" or s.weekday() < 5:
            times.append((s, e))
        step = timedelta(days=7 if recurrence == "weekly" else 1)
        s, e = s + step, e + step
    everyone = [organizer_id] + invitees
    if room is not None and len(everyone) > room.capacity:
        raise ToolError(
            f"{room.name} ({room.room_id}) seats {room.capacity} but {len(everyone)} people are invited; "
            "search_meeting_rooms with a larger min_capacity",
            code="capacity_exceeded",
        )
    if room is not None:
        for s, e in times:
            clash = _room_clash(state, room.room_id, s, e)
            if clash is not None:
                raise ToolError(
                    f"{room.name} ({room.room_id}) is booked by {_fmt(clash)}; pick another room or time",
                    code="room_conflict",
                )
    if not allow_conflicts:
        msgs = [m for s, e in times for m in _attendee_clashes(state, everyone, s, e)]
        if msgs:
            raise ToolError(
                "Attendee conflict: " + "; ".join(msgs) + ". Pick another time (find_free_slots) or pass allow_conflicts=true",
                code="attendee_conflict",
            )
    series_id = None
    if recurrence != "none":
        series_id = f"SR-{state.next_series_seq:03d}"
        state.next_series_seq += 1
    ids = []
    for s, e in times:
        eid = f"EV-{state.next_event_seq:04d}"
        state.next_event_seq += 1
        ev = Event(event_id=eid, title=title.strip(), organizer_id=organizer_id,
                   attendees=[Attendee(person_id=organizer_id, rsvp="accepted")]
                   + [Attendee(person_id=p) for p in invitees],
                   start=s, end=e, room_id=room_id, recurrence=recurrence, series_id=series_id,
                   agenda=agenda, created_at=state.now)
        _sort_attendees(ev)
        state.events[eid] = ev
        ids.append(eid)
    first = state.events[ids[0]]
    org_name = state.people[organizer_id].name
    _notify(state, first, invitees, "invited",
            f"{org_name} invited you to {_fmt(first)}" + (f" ({len(ids)} occurrences)" if len(ids) > 1 else ""))
    return CreateEventResult(event_id=ids[0], occurrence_ids=ids, series_id=series_id, event=_view(state, first))


@tool
def invite_attendees(
    state: CalendarDB,
    *,
    event_id: Annotated[str, Field(description="Event id, e.g. EV-0007")],
    requested_by: Annotated[str, Field(description="Person id of whoever asks; must be the organizer")],
    person_ids: Annotated[list[str], Field(min_length=1, description="Person ids to add")],
    allow_conflicts: Annotated[bool, Field(description="Invite even if they are busy then")] = False,
) -> EventView:
    """Add people to an upcoming event (organizer only); each new invitee gets an invitation notice.

    People already invited are skipped. Returns the updated event.
    Errors: not_found, already_cancelled, not_organizer, invalid_state (event already started, or
    everyone is already invited), capacity_exceeded (room too small), attendee_conflict (an invitee is
    busy; pass allow_conflicts=true to double-book).
    """
    ev = _event(state, event_id)
    _require_active(ev)
    _require_organizer(state, ev, requested_by)
    _require_future(state, ev)
    ids = _dedupe(person_ids)
    for pid in ids:
        _person(state, pid)
    present = {a.person_id for a in ev.attendees}
    new = [p for p in ids if p not in present]
    if not new:
        raise ToolError(f"Everyone listed is already invited to {event_id}", code="invalid_state")
    room = state.rooms.get(ev.room_id) if ev.room_id else None
    if room is not None and len(ev.attendees) + len(new) > room.capacity:
        raise ToolError(
            f"{room.name} seats {room.capacity}; {len(ev.attendees)} are invited already, so {len(new)} more do not fit. "
            "Move the event to a larger room with reschedule_event(new_room_id=...)",
            code="capacity_exceeded",
        )
    if not allow_conflicts:
        msgs = _attendee_clashes(state, new, ev.start, ev.end, frozenset({ev.event_id}))
        if msgs:
            raise ToolError("Attendee conflict: " + "; ".join(msgs) + ". Pass allow_conflicts=true to invite anyway",
                            code="attendee_conflict")
    for pid in new:
        ev.attendees.append(Attendee(person_id=pid))
    _sort_attendees(ev)
    _notify(state, ev, new, "invited", f"{state.people[ev.organizer_id].name} invited you to {_fmt(ev)}")
    return _view(state, ev)


@tool(destructive=True)
def remove_attendee(
    state: CalendarDB,
    *,
    event_id: Annotated[str, Field(description="Event id")],
    requested_by: Annotated[str, Field(description="Person id of whoever asks; must be the organizer")],
    person_id: Annotated[str, Field(description="Person id to remove")],
) -> EventView:
    """Remove one invitee from an upcoming event (organizer only) and notify them.

    Returns the updated event.
    Errors: not_found, already_cancelled, not_organizer, invalid_state (event started, the person is
    the organizer), not_attendee (the person is not invited).
    """
    ev = _event(state, event_id)
    _require_active(ev)
    _require_organizer(state, ev, requested_by)
    _require_future(state, ev)
    _person(state, person_id)
    if person_id == ev.organizer_id:
        raise ToolError("The organizer cannot be removed; cancel the event instead", code="invalid_state")
    if all(a.person_id != person_id for a in ev.attendees):
        raise ToolError(f"{state.people[person_id].name} is not invited to {event_id}", code="not_attendee")
    ev.attendees = [a for a in ev.attendees if a.person_id != person_id]
    _notify(state, ev, [person_id], "removed", f"You were removed from {_fmt(ev)}")
    return _view(state, ev)


@tool
def respond_to_invitation(
    state: CalendarDB,
    *,
    event_id: Annotated[str, Field(description="Event id")],
    person_id: Annotated[str, Field(description="The invitee answering (you may answer on their behalf)")],
    response: Annotated[Literal["accepted", "declined", "tentative"], Field(description="The RSVP")],
    comment: Annotated[str, Field(description="Optional note to the organizer")] = "",
) -> EventView:
    """Record an invitee's RSVP (accepted, declined or tentative), with an optional comment.

    A declined invitee no longer counts as busy for that event. Returns the updated event.
    Errors: not_found, already_cancelled, not_attendee (person not invited), invalid_state (the
    organizer cannot RSVP, the event is over, or the same answer is already recorded).
    """
    ev = _event(state, event_id)
    _require_active(ev)
    _person(state, person_id)
    mine = [a for a in ev.attendees if a.person_id == person_id]
    if not mine:
        raise ToolError(f"{state.people[person_id].name} is not invited to {event_id}", code="not_attendee")
    if person_id == ev.organizer_id:
        raise ToolError("The organizer does not RSVP to their own event", code="invalid_state")
    if ev.end <= state.now:
        raise ToolError(f"{event_id} is already over", code="invalid_state")
    a = mine[0]
    if a.rsvp == response and a.comment == comment:
        raise ToolError(f"{state.people[person_id].name} has already answered {response}", code="invalid_state")
    a.rsvp = response
    a.comment = comment
    return _view(state, ev)


@tool
def reschedule_event(
    state: CalendarDB,
    *,
    event_id: Annotated[str, Field(description="Event id")],
    requested_by: Annotated[str, Field(description="Person id of whoever asks; must be the organizer")],
    new_start: Annotated[datetime, Field(description="New start, naive ISO datetime")],
    new_end: Annotated[datetime | None, Field(description="New end (default: keep the duration)")] = None,
    new_room_id: Annotated[str | None, Field(description="Move to this room (default: keep the room)")] = None,
    allow_conflicts: Annotated[bool, Field(description="Move even if attendees are busy then")] = False,
) -> EventView:
    """Move one upcoming event (one occurrence of a series) to a new time and/or room (organizer only).

    The room (current or new) must be free at the new time (to change only the room, pass the
    current start). When the time changes every invitee's RSVP is reset to needs_action; invitees
    always get a rescheduled notice. Returns the updated event.
    Errors: not_found, already_cancelled, not_organizer, invalid_state (event already started or
    nothing would change), invalid_time, capacity_exceeded, room_conflict, attendee_conflict.
    """
    ev = _event(state, event_id)
    _require_active(ev)
    _require_organizer(state, ev, requested_by)
    _require_future(state, ev)
    _naive(new_start, "new_start")
    end = new_end if new_end is not None else new_start + (ev.end - ev.start)
    _check_meeting_time(state, new_start, end)
    room_id = new_room_id if new_room_id is not None else ev.room_id
    room = _room(state, room_id) if room_id is not None else None
    if new_start == ev.start and end == ev.end and room_id == ev.room_id:
        raise ToolError("The event already has this time and room; nothing to change", code="invalid_state")
    if room is not None and len(ev.attendees) > room.capacity:
        raise ToolError(f"{room.name} seats {room.capacity} but {len(ev.attendees)} are invited", code="capacity_exceeded")
    excl = frozenset({ev.event_id})
    if room is not None:
        clash = _room_clash(state, room.room_id, new_start, end, excl)
        if clash is not None:
            raise ToolError(f"{room.name} ({room.room_id}) is booked by {_fmt(clash)} at that time; pick another room or time",
                            code="room_conflict")
    if not allow_conflicts:
        msgs = _attendee_clashes(state, [a.person_id for a in ev.attendees], new_start, end, excl)
        if msgs:
            raise ToolError("Attendee conflict: " + "; ".join(msgs) + ". Pick another time or pass allow_conflicts=true",
                            code="attendee_conflict")
    old = f"{ev.start:%Y-%m-%d %H:%M}"
    time_changed = (new_start, end) != (ev.start, ev.end)
    ev.start, ev.end, ev.room_id = new_start, end, room_id
    invitees = [a.person_id for a in ev.attendees if a.person_id != ev.organizer_id]
    if time_changed:
        for a in ev.attendees:
            if a.person_id != ev.organizer_id:
                a.rsvp = "needs_action"
        msg = f"{_fmt(ev)} was moved from {old}; please respond again"
    else:
        room = state.rooms.get(room_id) if room_id else None
        msg = f"{_fmt(ev)} moved to room {room.name if room else 'none'}"
    _notify(state, ev, invitees, "rescheduled", msg)
    return _view(state, ev)


@tool
def update_event_details(
    state: CalendarDB,
    *,
    event_id: Annotated[str, Field(description="Event id")],
    requested_by: Annotated[str, Field(description="Person id of whoever asks; must be the organizer")],
    title: Annotated[str | None, Field(description="New title (default: unchanged)")] = None,
    agenda: Annotated[str | None, Field(description="New agenda/notes, replacing the old text (default: unchanged)")] = None,
) -> EventView:
    """Change an event's title and/or agenda (organizer only); invitees get a details_updated notice.

    Returns the updated event.
    Errors: not_found, already_cancelled, not_organizer, invalid_argument (nothing given, empty
    title), invalid_state (the values are already the same).
    """
    ev = _event(state, event_id)
    _require_active(ev)
    _require_organizer(state, ev, requested_by)
    if title is None and agenda is None:
        raise ToolError("Give a new title and/or agenda", code="invalid_argument")
    if title is not None and not title.strip():
        raise ToolError("The title must not be empty", code="invalid_argument")
    new_title = title.strip() if title is not None else ev.title
    new_agenda = agenda if agenda is not None else ev.agenda
    if new_title == ev.title and new_agenda == ev.agenda:
        raise ToolError("Title and agenda are already like that", code="invalid_state")
    ev.title, ev.agenda = new_title, new_agenda
    invitees = [a.person_id for a in ev.attendees if a.person_id != ev.organizer_id]
    _notify(state, ev, invitees, "details_updated", f"Details of {_fmt(ev)} were updated")
    return _view(state, ev)


@tool(destructive=True)
def cancel_event(
    state: CalendarDB,
    *,
    event_id: Annotated[str, Field(description="Event id")],
    requested_by: Annotated[str, Field(description="Person id of whoever asks; must be the organizer")],
    reason: Annotated[str, Field(description="Reason, recorded on the event and shown to attendees")] = "",
    scope: Annotated[Literal["this_event", "entire_series"], Field(description="'entire_series' cancels every upcoming occurrence of a recurring event")] = "this_event",
) -> CancelResult:
    """Cancel an upcoming event, or every upcoming occurrence of its series (organizer only).

    The room is released, the reason is recorded, and every invitee gets a cancellation notice.
    Returns the cancelled event ids, the people notified and the notice ids.
    Errors: not_found, already_cancelled, not_organizer, invalid_state (event already started),
    invalid_argument (entire_series on an event that is not recurring).
    """
    ev = _event(state, event_id)
    _require_active(ev)
    _require_organizer(state, ev, requested_by)
    _require_future(state, ev)
    if scope == "entire_series":
        if ev.series_id is None:
            raise ToolError(f"{event_id} is not part of a recurring series; use scope='this_event'", code="invalid_argument")
        targets = sorted((e for e in state.events.values()
                          if e.series_id == ev.series_id and e.status == "confirmed" and e.start > state.now),
                         key=lambda e: (e.start, e.event_id))
    else:
        targets = [ev]
    notified: list[str] = []
    notices: list[str] = []
    for t in targets:
        t.status = "cancelled"
        t.cancellation_reason = reason
        invitees = [a.person_id for a in t.attendees if a.person_id != t.organizer_id]
        msg = f"{_fmt(t)} was cancelled by {state.people[t.organizer_id].name}"
        notices += _notify(state, t, invitees, "cancelled", msg)
        notified += [p for p in invitees if p not in notified]
    return CancelResult(cancelled_event_ids=[t.event_id for t in targets], notified_person_ids=notified,
                        notice_ids=notices)


@tool
def set_out_of_office(
    state: CalendarDB,
    *,
    person_id: Annotated[str, Field(description="Who is away")],
    start: Annotated[datetime, Field(description="Start of the absence, naive ISO datetime")],
    end: Annotated[datetime, Field(description="End of the absence, naive ISO datetime (may span days)")],
    note: Annotated[str, Field(description="Optional note, e.g. 'Parental leave'")] = "",
    decline_meetings: Annotated[bool, Field(description="Also decline the person's invitations inside the block")] = False,
) -> OutOfOfficeResult:
    """Block a person's calendar as out of office (at most 60 days). They show as busy and cannot be
    booked without allow_conflicts. With decline_meetings, their pending/accepted invitations inside the
    block are declined and each organizer is notified; events they organize are only reported.
    Returns the block (OOO id), the declined event ids and the organized conflicts.
    Errors: not_found, invalid_time (end not after start, start in the past, longer than 60 days),
    invalid_state (overlaps an existing out-of-office block of that person).
    """
    _person(state, person_id)
    _window(start, end, 60)
    if start < state.now:
        raise ToolError(f"The block cannot start in the past (now is {state.now.isoformat()})", code="invalid_time")
    for o in state.out_of_office.values():
        if o.person_id == person_id and _overlaps(o.start, o.end, start, end):
            raise ToolError(f"Overlaps the existing out-of-office block {o.ooo_id} ({o.start.isoformat()} to {o.end.isoformat()})",
                            code="invalid_state")
    declined: list[str] = []
    organized: list[EventRef] = []
    for ev in sorted(state.events.values(), key=lambda x: (x.start, x.event_id)):
        if ev.status != "confirmed" or not _overlaps(ev.start, ev.end, start, end):
            continue
        if ev.organizer_id == person_id:
            organized.append(EventRef(event_id=ev.event_id, title=ev.title, start=ev.start, end=ev.end))
            continue
        if decline_meetings:
            for a in ev.attendees:
                if a.person_id == person_id and a.rsvp != "declined":
                    a.rsvp = "declined"
                    a.comment = "Out of office"
                    declined.append(ev.event_id)
                    _notify(state, ev, [ev.organizer_id], "declined_out_of_office",
                            f"{state.people[person_id].name} is out of office and declined {_fmt(ev)}")
    oid = f"OOO-{state.next_ooo_seq:04d}"
    state.next_ooo_seq += 1
    block = OutOfOffice(ooo_id=oid, person_id=person_id, start=start, end=end, note=note)
    state.out_of_office[oid] = block
    return OutOfOfficeResult(out_of_office=block, declined_event_ids=declined, organized_conflicts=organized)
