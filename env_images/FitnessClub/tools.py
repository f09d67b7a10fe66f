"""FitnessClub tools.

Id chains: list_club_locations / list_instructors -> search_classes -> get_class_details ->
book_class / join_waitlist -> list_member_bookings -> cancel_class_booking;
find_club_member -> get_membership -> preview_plan_change -> change_membership_plan;
list_instructors -> get_instructor_availability -> book_personal_training -> cancel_personal_training;
freeze_membership / unfreeze_membership; record_check_in; settle_member_balance.

Every domain failure raises ToolError before the state is touched.  The clock is ``state.now``.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Annotated, Literal

from pydantic import Field

from gym_envfactory import ToolError, tool

from .results import (
    CancelClassResult,
    CheckInResult,
    ClassBookingResult,
    ClassDetails,
    ClassHit,
    FreezeResult,
    InstructorDay,
    InstructorInfo,
    LocationInfo,
    MemberBookingItem,
    MembershipView,
    MemberSummary,
    PaymentResult,
    PlanChangeQuote,
    PlanChangeResult,
    PlanInfo,
    PTBookingResult,
    PTCancelResult,
    UnfreezeResult,
)
from .state import (
    Charge,
    ChargeKind,
    CheckIn,
    ClassBooking,
    ClassCategory,
    ClassSession,
    FitnessDB,
    Instructor,
    Location,
    Member,
    Plan,
    PTSession,
)

# ----------------------------------------------------------------------------- argument types

MemberId = Annotated[str, Field(description="Member id, e.g. M-001 (find it with find_club_member)")]
ClassId = Annotated[str, Field(description="Class session id, e.g. CL-104 (from search_classes)")]
LocationId = Annotated[str, Field(description="Location id, e.g. LOC-KRZ (from list_club_locations)")]
InstructorId = Annotated[str, Field(description="Instructor id, e.g. IN-03 (from list_instructors)")]
PlanId = Annotated[str, Field(description="Membership plan id, e.g. PLAN-PLUS (from list_membership_plans)")]
BookingId = Annotated[str, Field(description="Class booking id, e.g. BKG-0003 (from list_member_bookings)")]
SessionId = Annotated[str, Field(description="Personal-training session id, e.g. PT-0002")]

# ----------------------------------------------------------------------------- helpers


def _money(x: float) -> float:
    return round(x + 0.0, 2)


def _today(state: FitnessDB) -> date:
    return state.now.date()


def _hm(s: str) -> time:
    return time.fromisoformat(s)


def _member(state: FitnessDB, member_id: str) -> Member:
    m = state.members.get(member_id)
    if m is None:
        raise ToolError(f"No member {member_id}; member ids look like M-001 (use find_club_member)", code="not_found")
    return m


def _class(state: FitnessDB, class_id: str) -> ClassSession:
    c = state.classes.get(class_id)
    if c is None:
        raise ToolError(f"No class {class_id}; class ids look like CL-101 (use search_classes)", code="not_found")
    return c


def _location(state: FitnessDB, location_id: str) -> Location:
    loc = state.locations.get(location_id)
    if loc is None:
        ids = ", ".join(f"{x.location_id} ({x.name})" for x in state.locations.values())
        raise ToolError(f"No location {location_id}; locations: {ids}", code="not_found")
    return loc


def _instructor(state: FitnessDB, instructor_id: str) -> Instructor:
    i = state.instructors.get(instructor_id)
    if i is None:
        raise ToolError(f"No instructor {instructor_id}; instructor ids look like IN-01 (use list_instructors)",
                        code="not_found")
    return i


def _plan(state: FitnessDB, plan_id: str) -> Plan:
    p = state.plans.get(plan_id)
    if p is None:
        ids = ", ".join(state.plans)
        raise ToolError(f"No plan {plan_id}; plans: {ids}", code="not_found")
    return p


def _booking(state: FitnessDB, booking_id: str) -> ClassBooking:
    b = state.bookings.get(booking_id)
    if b is None:
        raise ToolError(f"No class booking {booking_id}; booking ids look like BKG-0001 (use list_member_bookings)",
                        code="not_found")
    return b


def _end(c: ClassSession) -> datetime:
    return c.start + timedelta(minutes=c.duration_min)


def _credits_left(state: FitnessDB, m: Member, plan: Plan | None = None) -> int | None:
    p = plan or state.plans[m.plan_id]
    return None if p.class_credits is None else max(p.class_credits - m.credits_used, 0)


def _passes_left(state: FitnessDB, m: Member, plan: Plan | None = None) -> int:
    p = plan or state.plans[m.plan_id]
    return max(p.guest_passes - m.guest_passes_used, 0)


def _freeze_left(state: FitnessDB, m: Member) -> int:
    return max(state.plans[m.plan_id].max_freeze_days - m.freeze_days_used, 0)


def _frozen_on(m: Member, d: date) -> bool:
    return m.freeze_start is not None and m.freeze_end is not None and m.freeze_start <= d <= m.freeze_end


def _check_active(m: Member, on: date, action: str) -> None:
    if m.status != "active":
        raise ToolError(f"membership {m.member_id} is {m.status}; it cannot {action}", code="invalid_state")
    if _frozen_on(m, on):
        raise ToolError(f"membership {m.member_id} is frozen from {m.freeze_start} to {m.freeze_end}; "
                        f"it cannot {action} on {on} (unfreeze_membership ends the freeze)", code="membership_frozen")


def _check_bookable(state: FitnessDB, m: Member, c: ClassSession) -> None:
    if c.status == "cancelled":
        raise ToolError(f"class {c.class_id} ({c.name}, {c.start:%a %d %b %H:%M}) was cancelled by the club",
                        code="class_cancelled")
    if c.start <= state.now:
        raise ToolError(f"class {c.class_id} started at {c.start.isoformat()}; book a later class",
                        code="class_started")
    horizon = state.now + timedelta(days=state.booking_window_days)
    if c.start > horizon:
        raise ToolError(f"class {c.class_id} starts {c.start.isoformat()}; classes open for booking "
                        f"{state.booking_window_days} days ahead (until {horizon.isoformat()})",
                        code="outside_booking_window")
    _check_active(m, c.start.date(), "book classes")
    plan = state.plans[m.plan_id]
    if not plan.all_locations and c.location_id != m.home_location_id:
        raise ToolError(f"{plan.name} gives access to the home location {m.home_location_id} only; class "
                        f"{c.class_id} is at {c.location_id}. Upgrade the plan or pick a class at home",
                        code="access_denied")


def _active_entry(state: FitnessDB, m: Member, c: ClassSession, guest_name: str | None) -> ClassBooking | None:
    for bid in c.roster + c.waitlist:
        b = state.bookings[bid]
        if b.member_id == m.member_id and (b.guest_name or "").lower() == (guest_name or "").lower():
            return b
    return None


def _check_credits(state: FitnessDB, m: Member, c: ClassSession, guest_name: str | None) -> int:
    if guest_name:
        if _passes_left(state, m) < 1:
            plan = state.plans[m.plan_id]
            raise ToolError(f"{m.name} has no guest passes left this cycle ({plan.name} includes "
                            f"{plan.guest_passes}; renews {m.cycle_end})", code="no_guest_passes")
        return 0
    left = _credits_left(state, m)
    if left is not None and left < c.credits:
        raise ToolError(f"{c.name} costs {c.credits} credit(s) and {m.name} has {left} left this cycle "
                        f"(renews {m.cycle_end}); change_membership_plan to a larger plan adds credits",
                        code="insufficient_credits")
    return c.credits if left is not None else 0


def _new_booking(state: FitnessDB, m: Member, c: ClassSession, guest: str | None, credits: int,
                 status: Literal["booked", "waitlisted"]) -> ClassBooking:
    bid = f"BKG-{state.next_booking_seq:04d}"
    state.next_booking_seq += 1
    b = ClassBooking(booking_id=bid, member_id=m.member_id, class_id=c.class_id, guest_name=guest,
                     status=status, credits_used=credits, created_at=state.now)
    state.bookings[bid] = b
    if guest:
        m.guest_passes_used += 1
    m.credits_used += credits
    (c.roster if status == "booked" else c.waitlist).append(bid)
    return b


def _booking_result(state: FitnessDB, b: ClassBooking) -> ClassBookingResult:
    c = state.classes[b.class_id]
    m = state.members[b.member_id]
    pos = c.waitlist.index(b.booking_id) + 1 if b.booking_id in c.waitlist else None
    return ClassBookingResult(booking_id=b.booking_id, class_id=c.class_id, class_name=c.name, start=c.start,
                              status=b.status, guest_name=b.guest_name, credits_used=b.credits_used,
                              credits_left=_credits_left(state, m), guest_passes_left=_passes_left(state, m),
                              waitlist_position=pos)


def _charge(state: FitnessDB, m: Member, kind: ChargeKind, amount: float, description: str,
            booking_id: str | None = None) -> str:
    cid = f"CH-{state.next_charge_seq:04d}"
    state.next_charge_seq += 1
    state.charges[cid] = Charge(charge_id=cid, member_id=m.member_id, kind=kind, amount=_money(amount),
                                description=description, created_at=state.now, booking_id=booking_id)
    m.charge_ids.append(cid)
    m.balance_due = _money(m.balance_due + amount)
    return cid


def _hit(state: FitnessDB, c: ClassSession) -> dict:
    loc = state.locations[c.location_id]
    studio = state.studios[c.studio_id]
    ins = state.instructors[c.instructor_id]
    return {"class_id": c.class_id, "name": c.name, "category": c.category, "location_id": c.location_id,
            "location": loc.name, "studio": studio.name, "instructor": ins.name, "start": c.start, "end": _end(c),
            "credits": c.credits, "spots_left": max(c.capacity - len(c.roster), 0),
            "waitlist_length": len(c.waitlist), "status": c.status}


def _naive(state: FitnessDB, dt: datetime, name: str) -> None:
    if dt.tzinfo is not None:
        raise ToolError(f"{name} must be the club's local time ({state.timezone}) as a naive ISO datetime without a "
                        f"UTC offset or Z, e.g. 2026-12-03T07:00:00; {dt.isoformat()} has one", code="invalid_time")


def _member_busy(state: FitnessDB, m: Member, start: datetime, end: datetime, skip_class: str = "") -> str | None:
    """What keeps the member busy between start and end: a place of their own in a class (booked or
    attended; guests' places and waitlist entries do not count) or a booked personal-training session."""
    for b in state.bookings.values():
        o = state.classes[b.class_id]
        if (b.member_id == m.member_id and b.status in ("booked", "attended") and not b.guest_name
                and o.class_id != skip_class and o.start < end and start < _end(o)):
            return f"booked into {o.name} ({o.class_id}, {o.start:%a %H:%M}-{_end(o):%H:%M}, {b.booking_id})"
    for p in state.pt_sessions.values():
        if (p.member_id == m.member_id and p.status == "booked" and p.start < end
                and start < p.start + timedelta(minutes=p.duration_min)):
            return f"booked for personal training {p.session_id} ({p.start:%a %H:%M})"
    return None


def _busy(state: FitnessDB, ins: Instructor, start: datetime, end: datetime) -> str | None:
    for c in state.classes.values():
        if c.instructor_id == ins.instructor_id and c.status == "scheduled" and c.start < end and start < _end(c):
            return f"teaching {c.name} ({c.class_id}) {c.start:%H:%M}-{_end(c):%H:%M}"
    for s in state.pt_sessions.values():
        if (s.instructor_id == ins.instructor_id and s.status == "booked"
                and s.start < end and start < s.start + timedelta(minutes=s.duration_min)):
            return f"already coaching personal training {s.session_id} at {s.start:%H:%M}"
    return None


def _in_window(ins: Instructor, start: datetime, end: datetime) -> bool:
    return any(w.weekday == start.weekday() and _hm(w.start) <= start.time() and end.time() <= _hm(w.end)
               and end.date() == start.date() for w in ins.pt_availability)


def _free_starts(state: FitnessDB, ins: Instructor, day: date) -> list[str]:
    out = []
    for w in ins.pt_availability:
        if w.weekday != day.weekday():
            continue
        t = datetime.combine(day, _hm(w.start))
        last = datetime.combine(day, _hm(w.end))
        while t + timedelta(hours=1) <= last:
            if t > state.now and _busy(state, ins, t, t + timedelta(hours=1)) is None:
                out.append(f"{t:%H:%M}")
            t += timedelta(hours=1)
    return sorted(set(out))


def _plan_quote(state: FitnessDB, m: Member, plan_id: str) -> PlanChangeQuote:
    old = state.plans[m.plan_id]
    new = _plan(state, plan_id)
    _check_active(m, _today(state), "change plan")
    if new.plan_id == old.plan_id:
        raise ToolError(f"{m.name} is already on {old.name}", code="no_change")
    if new.class_credits is not None and m.credits_used > new.class_credits:
        raise ToolError(f"{m.name} has used {m.credits_used} class credits this cycle and {new.name} includes "
                        f"{new.class_credits}; the change is possible from the renewal on {m.cycle_end}",
                        code="limit_exceeded")
    if m.guest_passes_used > new.guest_passes:
        raise ToolError(f"{m.name} has used {m.guest_passes_used} guest passes this cycle and {new.name} includes "
                        f"{new.guest_passes}; the change is possible from the renewal on {m.cycle_end}",
                        code="limit_exceeded")
    if m.freeze_days_used > new.max_freeze_days:
        raise ToolError(f"{m.name} has {m.freeze_days_used} freeze days on record this year and {new.name} allows "
                        f"{new.max_freeze_days}; unfreeze_membership first or keep the plan", code="limit_exceeded")
    if not new.all_locations:
        away = [b.booking_id for b in state.bookings.values()
                if b.member_id == m.member_id and b.status in ("booked", "waitlisted")
                and state.classes[b.class_id].location_id != m.home_location_id]
        if away:
            raise ToolError(f"{new.name} is home-location only and {m.name} holds bookings at other locations "
                            f"({', '.join(away)}); cancel them first", code="conflict")
    cycle_days = (m.cycle_end - m.cycle_start).days
    days_left = max((m.cycle_end - _today(state)).days, 0)
    amount = _money((new.monthly_fee - old.monthly_fee) * days_left / cycle_days)
    return PlanChangeQuote(member_id=m.member_id, current_plan_id=old.plan_id, new_plan_id=new.plan_id,
                           current_fee=old.monthly_fee, new_fee=new.monthly_fee, cycle_start=m.cycle_start,
                           cycle_end=m.cycle_end, days_left_in_cycle=days_left, cycle_days=cycle_days,
                           prorated_amount=amount, credits_left_after=_credits_left(state, m, new),
                           guest_passes_left_after=_passes_left(state, m, new))


def _membership(state: FitnessDB, m: Member) -> MembershipView:
    p = state.plans[m.plan_id]
    charges = [state.charges[c] for c in m.charge_ids[-5:] if c in state.charges]
    return MembershipView(member_id=m.member_id, name=m.name, email=m.email, phone=m.phone, status=m.status,
                          frozen_today=_frozen_on(m, _today(state)), home_location_id=m.home_location_id,
                          plan_id=p.plan_id, plan_name=p.name, monthly_fee=p.monthly_fee,
                          all_locations=p.all_locations, cycle_start=m.cycle_start, cycle_end=m.cycle_end,
                          credits_left=_credits_left(state, m), guest_passes_left=_passes_left(state, m),
                          freeze_start=m.freeze_start, freeze_end=m.freeze_end,
                          freeze_days_left=_freeze_left(state, m), balance_due=m.balance_due,
                          recent_charges=charges)


# ----------------------------------------------------------------------------- read tools


@tool(read_only=True)
def list_club_locations(
    state: FitnessDB,
    *,
    city: Annotated[str | None, Field(description="Only locations in this city, e.g. Berlin")] = None,
) -> list[LocationInfo]:
    """List the club's locations with address, opening hours (the same every day), studio names and the
    number of scheduled class sessions on the timetable.

    Returns [{location_id, name, city, address, opens, closes, studios, classes_scheduled}].
    Errors: not_found (no location in that city).
    """
    out = []
    for loc in state.locations.values():
        if city is not None and loc.city.lower() != city.strip().lower():
            continue
        studios = [s.name for s in state.studios.values() if s.location_id == loc.location_id]
        n = sum(1 for c in state.classes.values() if c.location_id == loc.location_id and c.status == "scheduled")
        out.append(LocationInfo(location_id=loc.location_id, name=loc.name, city=loc.city, address=loc.address,
                                opens=loc.opens, closes=loc.closes, studios=studios, classes_scheduled=n))
    if not out:
        cities = ", ".join(sorted({x.city for x in state.locations.values()}))
        raise ToolError(f"No location in {city!r}; the club has locations in: {cities}", code="not_found")
    return out


@tool(read_only=True)
def list_membership_plans(state: FitnessDB) -> list[PlanInfo]:
    """List the membership plans: monthly fee (EUR), class credits per billing cycle (null = unlimited),
    guest passes per cycle, whether every location is included, personal-training discount and the
    number of freeze days allowed per calendar year.

    Returns [{plan_id, name, monthly_fee, class_credits, guest_passes, all_locations, pt_discount_percent,
    max_freeze_days}], cheapest first. Never fails.
    """
    return [PlanInfo(**p.model_dump()) for p in sorted(state.plans.values(), key=lambda p: p.monthly_fee)]


@tool(read_only=True)
def search_classes(
    state: FitnessDB,
    *,
    location_id: Annotated[str | None, Field(description="Only classes at this location, e.g. LOC-KRZ")] = None,
    date_from: Annotated[date | None, Field(description="First day to search, YYYY-MM-DD (default today)")] = None,
    date_to: Annotated[date | None, Field(description="Last day to search, inclusive (default date_from)")] = None,
    category: Annotated[ClassCategory | None, Field(description="Class type")] = None,
    instructor_id: Annotated[str | None, Field(description="Only classes taught by this instructor")] = None,
    earliest: Annotated[str | None, Field(pattern=r"^\d{2}:\d{2}$", description="Start at or after HH:MM")] = None,
    latest: Annotated[str | None, Field(pattern=r"^\d{2}:\d{2}$", description="Start at or before HH:MM")] = None,
    only_open: Annotated[bool, Field(description="Only classes with a free place")] = False,
) -> list[ClassHit]:
    """Search the class timetable over a day or a range of days, ordered by start time.

    Classes that already started and cancelled ones are left out. Each hit reports the places left and
    the waitlist length; a full class can still be joined with join_waitlist. An empty list means
    nothing matches. Returns up to 30 hits: {class_id, name, category, location_id, location, studio,
    instructor, start, end, credits, spots_left, waitlist_length, status}.
    Errors: not_found (unknown location or instructor), invalid_dates (date_to before date_from, a day
    in the past, a range over 14 days).
    """
    if location_id is not None:
        _location(state, location_id)
    if instructor_id is not None:
        _instructor(state, instructor_id)
    first = date_from or _today(state)
    last = date_to or first
    if last < first:
        raise ToolError(f"date_to {last} is before date_from {first}", code="invalid_dates")
    if first < _today(state):
        raise ToolError(f"{first} is in the past (today is {_today(state)})", code="invalid_dates")
    if (last - first).days > 13:
        raise ToolError("search at most 14 days at a time", code="invalid_dates")
    hits = []
    for c in state.classes.values():
        if c.status != "scheduled" or c.start <= state.now or not first <= c.start.date() <= last:
            continue
        if (location_id and c.location_id != location_id) or (category and c.category != category):
            continue
        if instructor_id and c.instructor_id != instructor_id:
            continue
        if (earliest and c.start.time() < _hm(earliest)) or (latest and c.start.time() > _hm(latest)):
            continue
        if only_open and len(c.roster) >= c.capacity:
            continue
        hits.append(ClassHit(**_hit(state, c)))
    hits.sort(key=lambda h: (h.start, h.class_id))
    return hits[:30]


@tool(read_only=True)
def get_class_details(state: FitnessDB, *, class_id: ClassId) -> ClassDetails:
    """Get one class session: name, category, location, studio, instructor, start and end, credits per
    place, capacity, places booked and left, waitlist length and capacity, status, and the
    late-cancellation deadline (cancelling after it forfeits the credits and costs the late fee).

    Errors: not_found (unknown class id).
    """
    c = _class(state, class_id)
    return ClassDetails(**_hit(state, c), instructor_id=c.instructor_id, capacity=c.capacity, booked=len(c.roster),
                        waitlist_capacity=c.waitlist_capacity,
                        late_cancel_deadline=c.start - timedelta(hours=state.late_cancel_hours))


@tool(read_only=True)
def list_instructors(
    state: FitnessDB,
    *,
    location_id: Annotated[str | None, Field(description="Only instructors coaching at this location")] = None,
    specialty: Annotated[str | None, Field(description="Only instructors with this specialty, e.g. yoga, strength")] = None,
) -> list[InstructorInfo]:
    """List instructors with their home location, specialties and personal-training rate (EUR per
    60-minute session before plan discounts).

    Returns [{instructor_id, name, location_id, location, specialties, pt_rate}], by id.
    Errors: not_found (unknown location, or nobody matches).
    """
    if location_id is not None:
        _location(state, location_id)
    key = specialty.strip().lower() if specialty else None
    out = [InstructorInfo(instructor_id=i.instructor_id, name=i.name, location_id=i.location_id,
                          location=state.locations[i.location_id].name, specialties=i.specialties, pt_rate=i.pt_rate)
           for i in state.instructors.values()
           if (location_id is None or i.location_id == location_id) and (key is None or key in i.specialties)]
    if not out:
        known = ", ".join(sorted({s for i in state.instructors.values() for s in i.specialties}))
        raise ToolError(f"No instructor matches; specialties: {known}", code="not_found")
    return sorted(out, key=lambda x: x.instructor_id)


@tool(read_only=True)
def get_instructor_availability(
    state: FitnessDB,
    *,
    instructor_id: InstructorId,
    day: Annotated[date, Field(description="The day, YYYY-MM-DD")],
) -> InstructorDay:
    """List the start times (HH:MM, on the hour) at which an instructor can coach a 60-minute
    personal-training session on one day: inside their weekly availability, not teaching a class, not
    already booked, and not in the past.

    Returns {instructor_id, name, location_id, date, pt_rate, free_start_times} (empty when fully booked or
    not working that day). Errors: not_found, invalid_dates (a past day or beyond the booking window).
    """
    ins = _instructor(state, instructor_id)
    if day < _today(state):
        raise ToolError(f"{day} is in the past (today is {_today(state)})", code="invalid_dates")
    if day > (state.now + timedelta(days=state.booking_window_days)).date():
        raise ToolError(f"personal training opens {state.booking_window_days} days ahead; {day} is too far out",
                        code="invalid_dates")
    return InstructorDay(instructor_id=ins.instructor_id, name=ins.name, location_id=ins.location_id, date=day,
                         pt_rate=ins.pt_rate, free_start_times=_free_starts(state, ins, day))


@tool(read_only=True)
def find_club_member(
    state: FitnessDB,
    *,
    email: Annotated[str, Field(description="The member's email address (case-insensitive)")],
) -> MemberSummary:
    """Find a member by email address.

    Returns {member_id, name, email, home_location_id, plan_id, status}.
    Errors: not_found (no member with that email).
    """
    key = email.strip().lower()
    for m in state.members.values():
        if m.email.lower() == key:
            return MemberSummary(member_id=m.member_id, name=m.name, email=m.email,
                                 home_location_id=m.home_location_id, plan_id=m.plan_id, status=m.status)
    raise ToolError(f"No member with email {email!r}; check the spelling or ask the member", code="not_found")


@tool(read_only=True)
def get_membership(state: FitnessDB, *, member_id: MemberId) -> MembershipView:
    """Get a member's membership: plan and fee, billing cycle, class credits and guest passes left this
    cycle (credits_left null = unlimited), freeze dates and freeze days left this year, whether frozen
    today, balance due (EUR; negative = credit) and the last five account charges.

    Errors: not_found (unknown member id).
    """
    return _membership(state, _member(state, member_id))


@tool(read_only=True)
def list_member_bookings(
    state: FitnessDB,
    *,
    member_id: MemberId,
    status: Annotated[Literal["booked", "waitlisted", "cancelled", "attended"] | None,
                      Field(description="Only entries with this status (personal training: booked/cancelled)")] = None,
    include_past: Annotated[bool, Field(description="Also list classes and sessions that already started")] = False,
) -> list[MemberBookingItem]:
    """List a member's class bookings (their own and guests', waitlist places with their position) and
    personal-training sessions, ordered by start time.

    Returns [{booking_id (BKG-... or PT-...), kind, title, class_id, instructor, location_id, start, status,
    guest_name, waitlist_position}]; an empty list when there are none.
    Errors: not_found (unknown member id).
    """
    _member(state, member_id)
    out = []
    for b in state.bookings.values():
        c = state.classes[b.class_id]
        if b.member_id != member_id or (status and b.status != status) or (not include_past and c.start <= state.now):
            continue
        pos = c.waitlist.index(b.booking_id) + 1 if b.booking_id in c.waitlist else None
        out.append(MemberBookingItem(booking_id=b.booking_id, kind="class", title=c.name, class_id=c.class_id,
                                     instructor=state.instructors[c.instructor_id].name, location_id=c.location_id,
                                     start=c.start, status=b.status, guest_name=b.guest_name, waitlist_position=pos))
    for s in state.pt_sessions.values():
        if s.member_id != member_id or (status and s.status != status) or (not include_past and s.start <= state.now):
            continue
        ins = state.instructors[s.instructor_id]
        out.append(MemberBookingItem(booking_id=s.session_id, kind="personal_training",
                                     title=f"Personal training with {ins.name}", class_id=None, instructor=ins.name,
                                     location_id=s.location_id, start=s.start, status=s.status))
    return sorted(out, key=lambda x: (x.start, x.booking_id))


@tool(read_only=True)
def preview_plan_change(state: FitnessDB, *, member_id: MemberId, new_plan_id: PlanId) -> PlanChangeQuote:
    """Show what switching a member to another plan now would cost, without switching.

    The fee difference is prorated over the days left in the current billing cycle:
    (new fee - current fee) x days left / cycle days, rounded to cents; positive is charged to the
    account, negative is credited. Credits and guest passes left afterwards use the new plan's allowance
    minus what was already used this cycle.
    Returns {member_id, current_plan_id, new_plan_id, current_fee, new_fee, cycle_start, cycle_end,
    days_left_in_cycle, cycle_days, prorated_amount, credits_left_after, guest_passes_left_after}.
    Errors: not_found (member or plan), no_change (already on that plan), membership_frozen /
    invalid_state (frozen or cancelled membership), limit_exceeded (more credits or guest passes used
    this cycle, or more freeze days this year, than the new plan includes), conflict (home-only plan
    while holding bookings elsewhere).
    """
    return _plan_quote(state, _member(state, member_id), new_plan_id)


# ----------------------------------------------------------------------------- write tools


@tool
def book_class(
    state: FitnessDB,
    *,
    member_id: MemberId,
    class_id: ClassId,
    guest_name: Annotated[str | None, Field(description="Book a place for a guest of the member instead (uses a guest pass, no credits)")] = None,
) -> ClassBookingResult:
    """Book a place in a class session for a member (or, with guest_name, for their guest).

    A member's place costs the class's credits (none on an unlimited plan); a guest's place costs one
    guest pass. Classes open for booking booking_window_days ahead. Returns {booking_id (BKG-0001...),
    class_id, class_name, start, status, guest_name, credits_used, credits_left, guest_passes_left}.
    Errors: not_found (member or class), class_cancelled, class_started, outside_booking_window,
    membership_frozen / invalid_state (frozen on the class day, or cancelled membership), access_denied
    (home-location plan, class elsewhere), already_booked (a place or waitlist entry on this class
    already), schedule_conflict (the member's own place in another class, or a personal-training
    session, overlaps; guests' places and waitlist entries do not count), class_full (use
    join_waitlist), insufficient_credits, no_guest_passes.
    """
    m = _member(state, member_id)
    c = _class(state, class_id)
    guest = guest_name.strip() if guest_name and guest_name.strip() else None
    _check_bookable(state, m, c)
    prior = _active_entry(state, m, c, guest)
    if prior is not None:
        raise ToolError(f"{guest or m.name} already holds {prior.booking_id} ({prior.status}) on class {c.class_id}",
                        code="already_booked")
    busy = None if guest else _member_busy(state, m, c.start, _end(c), c.class_id)
    if busy:
        raise ToolError(f"{m.name} is {busy} at the same time", code="schedule_conflict")
    if len(c.roster) >= c.capacity:
        raise ToolError(f"{c.name} ({c.class_id}) is full ({c.capacity} places, {len(c.waitlist)} waiting); "
                        "use join_waitlist to queue for a place", code="class_full")
    credits = _check_credits(state, m, c, guest)
    return _booking_result(state, _new_booking(state, m, c, guest, credits, "booked"))


@tool
def join_waitlist(state: FitnessDB, *, member_id: MemberId, class_id: ClassId) -> ClassBookingResult:
    """Put a member on the waitlist of a full class session.

    The class's credits are held at once (returned if the member leaves the waitlist with
    cancel_class_booking); when someone with a place cancels, the first member on the waitlist who is
    free at that time gets it (see cancel_class_booking).
    Returns the waitlist entry {booking_id, ..., status: waitlisted, waitlist_position}.
    Errors: not_found, class_cancelled, class_started, outside_booking_window, membership_frozen /
    invalid_state, access_denied, already_booked, schedule_conflict (the member has their own place in
    an overlapping class or a personal-training session then), class_not_full (places are free: use
    book_class), waitlist_full, insufficient_credits.
    """
    m = _member(state, member_id)
    c = _class(state, class_id)
    _check_bookable(state, m, c)
    prior = _active_entry(state, m, c, None)
    if prior is not None:
        raise ToolError(f"{m.name} already holds {prior.booking_id} ({prior.status}) on class {c.class_id}",
                        code="already_booked")
    busy = _member_busy(state, m, c.start, _end(c), c.class_id)
    if busy:
        raise ToolError(f"{m.name} is {busy} at the same time", code="schedule_conflict")
    if len(c.roster) < c.capacity:
        raise ToolError(f"{c.name} ({c.class_id}) has {c.capacity - len(c.roster)} place(s) free; use book_class",
                        code="class_not_full")
    if len(c.waitlist) >= c.waitlist_capacity:
        raise ToolError(f"the waitlist of {c.name} ({c.class_id}) is full ({c.waitlist_capacity} waiting)",
                        code="waitlist_full")
    credits = _check_credits(state, m, c, None)
    return _booking_result(state, _new_booking(state, m, c, None, credits, "waitlisted"))


@tool(destructive=True)
def cancel_class_booking(
    state: FitnessDB,
    *,
    booking_id: BookingId,
    reason: Annotated[str, Field(description="Why the member cancels (free text)")] = "",
) -> CancelClassResult:
    """Cancel a class booking or leave a waitlist.

    Leaving a waitlist, or cancelling a place at least late_cancel_hours (12 h) before the class, returns
    the credits (or the guest pass). Later, the credits are forfeited and the late-cancellation fee
    (7.50 EUR) is charged to the member's account. A freed place goes to the first member on the
    waitlist who is free at that time, whose held credits pay for it. Waitlisted members ahead of them
    who meanwhile took a place in an overlapping class or booked personal training then are taken off
    the waitlist (status cancelled, held credits returned) instead of being double-booked; they are
    listed in dropped_waitlist_booking_ids.
    Returns {booking_id, status, late_cancellation, credits_refunded, guest_pass_refunded, fee_charged,
    fee_charge_id, promoted_booking_id, promoted_member_id, dropped_waitlist_booking_ids}.
    Errors: not_found, already_cancelled, invalid_state (already checked in), class_started.
    """
    b = _booking(state, booking_id)
    if b.status == "cancelled":
        raise ToolError(f"booking {booking_id} was already cancelled on {b.cancelled_at}", code="already_cancelled")
    if b.status == "attended":
        raise ToolError(f"booking {booking_id} is checked in; an attended class cannot be cancelled",
                        code="invalid_state")
    c = state.classes[b.class_id]
    if c.start <= state.now:
        raise ToolError(f"class {c.class_id} started at {c.start.isoformat()}; it can no longer be cancelled",
                        code="class_started")
    m = state.members[b.member_id]
    late = b.status == "booked" and state.now > c.start - timedelta(hours=state.late_cancel_hours)
    had_place = b.status == "booked"
    fee_id = None
    if late:
        fee_id = _charge(state, m, "late_cancel_fee", state.late_cancel_fee,
                         f"Late cancellation: {c.name} {c.start:%Y-%m-%d %H:%M}", b.booking_id)
        refunded, pass_back = 0, False
    else:
        refunded, pass_back = b.credits_used, bool(b.guest_name)
        m.credits_used = max(m.credits_used - refunded, 0)
        if pass_back:
            m.guest_passes_used = max(m.guest_passes_used - 1, 0)
    (c.roster if had_place else c.waitlist).remove(b.booking_id)
    b.status, b.cancelled_at, b.late_cancellation = "cancelled", state.now, late
    b.cancel_reason, b.fee_charge_id = reason.strip(), fee_id
    promoted, dropped = None, []
    while had_place and c.waitlist and len(c.roster) < c.capacity and promoted is None:
        w = state.bookings[c.waitlist.pop(0)]
        wm = state.members[w.member_id]
        if _member_busy(state, wm, c.start, _end(c), c.class_id):
            wm.credits_used = max(wm.credits_used - w.credits_used, 0)
            w.status, w.cancelled_at, w.cancel_reason = "cancelled", state.now, "schedule conflict at promotion"
            dropped.append(w.booking_id)
            continue
        promoted = w
        promoted.status = "booked"
        c.roster.append(promoted.booking_id)
    return CancelClassResult(booking_id=b.booking_id, status=b.status, late_cancellation=late,
                             credits_refunded=refunded, guest_pass_refunded=pass_back,
                             fee_charged=state.late_cancel_fee if late else 0.0, fee_charge_id=fee_id,
                             promoted_booking_id=promoted.booking_id if promoted else None,
                             promoted_member_id=promoted.member_id if promoted else None,
                             dropped_waitlist_booking_ids=dropped)


@tool
def book_personal_training(
    state: FitnessDB,
    *,
    member_id: MemberId,
    instructor_id: InstructorId,
    start: Annotated[datetime, Field(description="Start of the 60-minute session in the club's local time, naive ISO datetime (no UTC offset) on the hour, e.g. 2026-12-03T07:00:00")],
    focus: Annotated[str, Field(description="What the member wants to work on (free text)")] = "",
) -> PTBookingResult:
    """Book a 60-minute personal-training session with an instructor at the instructor's location.

    The price is the instructor's pt_rate less the plan's personal-training discount, charged to the
    member's account. Returns {session_id (PT-0001...), instructor, location_id, start, end, price,
    charge_id, balance_due}.
    Errors: not_found (member or instructor), invalid_time (a UTC offset or Z given: use the club's local
    time, e.g. 2026-12-03T07:00:00; past, not on the hour, beyond the booking window), membership_frozen / invalid_state, access_denied (home-location plan, instructor elsewhere),
    instructor_unavailable (outside their hours, teaching, or already booked; see
    get_instructor_availability), schedule_conflict (the member has their own place in a class, or a
    session, then).
    """
    _naive(state, start, "start")
    m = _member(state, member_id)
    ins = _instructor(state, instructor_id)
    end = start + timedelta(hours=1)
    if start <= state.now:
        raise ToolError(f"{start.isoformat()} is in the past (now is {state.now.isoformat()})", code="invalid_time")
    if start.minute or start.second:
        raise ToolError("personal-training sessions start on the hour, e.g. 07:00", code="invalid_time")
    if start > state.now + timedelta(days=state.booking_window_days):
        raise ToolError(f"personal training opens {state.booking_window_days} days ahead", code="invalid_time")
    _check_active(m, start.date(), "book personal training")
    plan = state.plans[m.plan_id]
    if not plan.all_locations and ins.location_id != m.home_location_id:
        raise ToolError(f"{plan.name} covers the home location {m.home_location_id} only; {ins.name} coaches at "
                        f"{ins.location_id}", code="access_denied")
    if not _in_window(ins, start, end):
        free = _free_starts(state, ins, start.date())
        raise ToolError(f"{ins.name} does not coach at {start:%H:%M} on {start:%a %d %b}; free start times that "
                        f"day: {', '.join(free) or 'none'}", code="instructor_unavailable")
    busy = _busy(state, ins, start, end)
    if busy:
        raise ToolError(f"{ins.name} is {busy}; free start times: "
                        f"{', '.join(_free_starts(state, ins, start.date())) or 'none'}", code="instructor_unavailable")
    mine = _member_busy(state, m, start, end)
    if mine:
        raise ToolError(f"{m.name} is {mine} at that time", code="schedule_conflict")
    price = _money(ins.pt_rate * (1 - plan.pt_discount_percent / 100))
    sid = f"PT-{state.next_pt_seq:04d}"
    state.next_pt_seq += 1
    cid = _charge(state, m, "personal_training", price, f"Personal training with {ins.name} {start:%Y-%m-%d %H:%M}",
                  sid)
    state.pt_sessions[sid] = PTSession(session_id=sid, member_id=m.member_id, instructor_id=ins.instructor_id,
                                       location_id=ins.location_id, start=start, price=price, focus=focus.strip(),
                                       charge_id=cid)
    return PTBookingResult(session_id=sid, instructor=ins.name, location_id=ins.location_id, start=start, end=end,
                           price=price, charge_id=cid, balance_due=m.balance_due)


@tool(destructive=True)
def cancel_personal_training(state: FitnessDB, *, session_id: SessionId) -> PTCancelResult:
    """Cancel a booked personal-training session.

    At least pt_free_cancel_hours (24 h) before the start the full price is credited back to the member's
    account; later, half of it. Returns {session_id, status, refund_amount, refund_charge_id, balance_due}.
    Errors: not_found, already_cancelled, invalid_time (the session has started).
    """
    s = state.pt_sessions.get(session_id)
    if s is None:
        raise ToolError(f"No personal-training session {session_id}; ids look like PT-0001 (use list_member_bookings)",
                        code="not_found")
    if s.status == "cancelled":
        raise ToolError(f"session {session_id} was already cancelled on {s.cancelled_at}", code="already_cancelled")
    if s.start <= state.now:
        raise ToolError(f"session {session_id} started at {s.start.isoformat()}", code="invalid_time")
    m = state.members[s.member_id]
    full = state.now <= s.start - timedelta(hours=state.pt_free_cancel_hours)
    refund = s.price if full else _money(s.price / 2)
    rid = _charge(state, m, "pt_refund", -refund, f"Refund: personal training {s.session_id}", s.session_id)
    s.status, s.cancelled_at, s.refund_charge_id = "cancelled", state.now, rid
    return PTCancelResult(session_id=s.session_id, status=s.status, refund_amount=refund, refund_charge_id=rid,
                          balance_due=m.balance_due)


@tool
def change_membership_plan(state: FitnessDB, *, member_id: MemberId, new_plan_id: PlanId) -> PlanChangeResult:
    """Switch a member to another plan now; the prorated fee difference is charged (upgrade) or
    credited (downgrade) to the account, and the new fee applies from the next renewal.

    Proration and errors are those of preview_plan_change: not_found, no_change, membership_frozen /
    invalid_state, limit_exceeded, conflict. Returns the quote plus {charge_id, balance_due}.
    """
    m = _member(state, member_id)
    q = _plan_quote(state, m, new_plan_id)
    cid = None
    if q.prorated_amount:
        old, new = state.plans[m.plan_id].name, state.plans[new_plan_id].name
        cid = _charge(state, m, "plan_change", q.prorated_amount,
                      f"Plan change {old} -> {new}, {q.days_left_in_cycle}/{q.cycle_days} days")
    m.plan_id = new_plan_id
    return PlanChangeResult(**q.model_dump(), charge_id=cid, balance_due=m.balance_due)


@tool
def freeze_membership(
    state: FitnessDB,
    *,
    member_id: MemberId,
    start_date: Annotated[date, Field(description="First frozen day, YYYY-MM-DD (today or later)")],
    end_date: Annotated[date, Field(description="Last frozen day, inclusive")],
    reason: Annotated[str, Field(description="Why the member pauses (free text), e.g. 'knee surgery'")] = "",
) -> FreezeResult:
    """Pause a membership for a period (both days inclusive): no class or personal-training bookings
    and no check-in while frozen. The frozen days count against the plan's yearly freeze allowance.

    Returns {member_id, freeze_start, freeze_end, days, freeze_days_left, frozen_today}.
    Errors: not_found, invalid_state (cancelled membership, or a freeze already set: unfreeze first),
    invalid_dates (start in the past, end before start, shorter than min_freeze_days (7)), freeze_limit
    (more days than the allowance left), has_bookings (class places or sessions inside the period: the
    message lists them; cancel them first).
    """
    m = _member(state, member_id)
    if m.status != "active":
        raise ToolError(f"membership {member_id} is {m.status}", code="invalid_state")
    if m.freeze_end is not None and m.freeze_end >= _today(state):
        raise ToolError(f"a freeze from {m.freeze_start} to {m.freeze_end} is already set; unfreeze_membership "
                        "first to change it", code="invalid_state")
    if start_date < _today(state):
        raise ToolError(f"start_date {start_date} is in the past (today is {_today(state)})", code="invalid_dates")
    if end_date < start_date:
        raise ToolError(f"end_date {end_date} is before start_date {start_date}", code="invalid_dates")
    days = (end_date - start_date).days + 1
    if days < state.min_freeze_days:
        raise ToolError(f"a freeze lasts at least {state.min_freeze_days} days; {days} requested",
                        code="invalid_dates")
    left = _freeze_left(state, m)
    if days > left:
        raise ToolError(f"{state.plans[m.plan_id].name} allows {state.plans[m.plan_id].max_freeze_days} freeze "
                        f"days a year; {left} left, {days} requested", code="freeze_limit")
    clash = [b.booking_id for b in state.bookings.values()
             if b.member_id == member_id and b.status in ("booked", "waitlisted")
             and start_date <= state.classes[b.class_id].start.date() <= end_date]
    clash += [s.session_id for s in state.pt_sessions.values()
              if s.member_id == member_id and s.status == "booked" and start_date <= s.start.date() <= end_date]
    if clash:
        raise ToolError(f"{m.name} has bookings inside the freeze: {', '.join(sorted(clash))}; cancel them first",
                        code="has_bookings")
    m.freeze_start, m.freeze_end, m.freeze_reason = start_date, end_date, reason.strip()
    m.freeze_days_used += days
    return FreezeResult(member_id=m.member_id, freeze_start=start_date, freeze_end=end_date, days=days,
                        freeze_days_left=_freeze_left(state, m), frozen_today=_frozen_on(m, _today(state)))


@tool
def unfreeze_membership(state: FitnessDB, *, member_id: MemberId) -> UnfreezeResult:
    """End a member's freeze now, or drop a freeze that has not started yet. Days not yet frozen
    (from today on) return to the yearly allowance; a freeze that started earlier keeps its past days.

    Returns {member_id, days_returned, freeze_days_left, freeze_start, freeze_end} (the dates that remain
    on record, null when the freeze was dropped). Errors: not_found, invalid_state (no current or
    upcoming freeze).
    """
    m = _member(state, member_id)
    today = _today(state)
    if m.freeze_start is None or m.freeze_end is None or m.freeze_end < today:
        raise ToolError(f"{m.name} has no current or upcoming freeze", code="invalid_state")
    first_unused = max(m.freeze_start, today)
    returned = (m.freeze_end - first_unused).days + 1
    m.freeze_days_used = max(m.freeze_days_used - returned, 0)
    if m.freeze_start >= today:
        m.freeze_start, m.freeze_end, m.freeze_reason = None, None, ""
    else:
        m.freeze_end = today - timedelta(days=1)
    return UnfreezeResult(member_id=m.member_id, days_returned=returned, freeze_days_left=_freeze_left(state, m),
                          freeze_start=m.freeze_start, freeze_end=m.freeze_end)


@tool
def record_check_in(state: FitnessDB, *, member_id: MemberId, location_id: LocationId) -> CheckInResult:
    """Check a member in at a location's front desk now. Classes the member booked there (their own
    places and their guests') that start within the next 60 minutes, or started up to 15 minutes ago,
    are marked attended.

    Returns {checkin_id (CI-0001...), member_id, location_id, at, attended_booking_ids}.
    Errors: not_found (member or location), location_closed (outside opening hours), invalid_state
    (cancelled membership), membership_frozen, access_denied (home-location plan elsewhere),
    balance_overdue (balance due above max_unpaid_balance, 30 EUR: settle_member_balance first),
    already_checked_in (already checked in there today).
    """
    m = _member(state, member_id)
    loc = _location(state, location_id)
    now = state.now
    if not _hm(loc.opens) <= now.time() < _hm(loc.closes):
        raise ToolError(f"{loc.name} is open {loc.opens}-{loc.closes}", code="location_closed")
    _check_active(m, now.date(), "check in")
    plan = state.plans[m.plan_id]
    if not plan.all_locations and location_id != m.home_location_id:
        raise ToolError(f"{plan.name} covers the home location {m.home_location_id} only", code="access_denied")
    if m.balance_due > state.max_unpaid_balance:
        raise ToolError(f"{m.name} owes {m.balance_due:.2f} EUR (more than {state.max_unpaid_balance:.2f}); "
                        "settle_member_balance before checking in", code="balance_overdue")
    for ci in state.checkins.values():
        if ci.member_id == member_id and ci.location_id == location_id and ci.at.date() == now.date():
            raise ToolError(f"{m.name} already checked in at {loc.name} today ({ci.checkin_id}, {ci.at:%H:%M})",
                            code="already_checked_in")
    attended = []
    for b in state.bookings.values():
        c = state.classes[b.class_id]
        if (b.member_id == member_id and b.status == "booked" and c.location_id == location_id
                and now - timedelta(minutes=15) <= c.start <= now + timedelta(minutes=60)):
            b.status = "attended"
            attended.append(b.booking_id)
    cid = f"CI-{state.next_checkin_seq:04d}"
    state.next_checkin_seq += 1
    state.checkins[cid] = CheckIn(checkin_id=cid, member_id=member_id, location_id=location_id, at=now,
                                  booking_ids=attended)
    return CheckInResult(checkin_id=cid, member_id=member_id, location_id=location_id, at=now,
                         attended_booking_ids=attended)


@tool
def settle_member_balance(
    state: FitnessDB,
    *,
    member_id: MemberId,
    amount: Annotated[float | None, Field(gt=0, description="EUR to pay; omit to pay the whole balance due")] = None,
) -> PaymentResult:
    """Take a payment towards a member's balance due with the card on file, recorded as a payment charge
    (negative amount). Returns {member_id, charge_id, amount_paid, balance_due}.
    Errors: not_found, invalid_state (nothing is due), invalid_amount (more than the balance due, or more
    than 2 decimals).
    """
    m = _member(state, member_id)
    if m.balance_due <= 0:
        raise ToolError(f"{m.name} owes nothing (balance {m.balance_due:.2f} EUR)", code="invalid_state")
    pay = m.balance_due if amount is None else amount
    if round(pay, 2) != pay:
        raise ToolError(f"amount {amount} has more than 2 decimals", code="invalid_amount")
    if pay > m.balance_due + 1e-9:
        raise ToolError(f"{pay:.2f} EUR is more than the balance due ({m.balance_due:.2f} EUR)", code="invalid_amount")
    cid = _charge(state, m, "payment", -pay, "Payment with card on file")
    return PaymentResult(member_id=m.member_id, charge_id=cid, amount_paid=_money(pay), balance_due=m.balance_due)
