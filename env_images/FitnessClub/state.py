"""FitnessClub database: a club chain's locations and studios, instructors with personal-training hours,
a timetable of class sessions with capacities and waitlists, membership plans, members, class
bookings, personal-training sessions, account charges and check-ins.

Conventions (kept compact so the small state stays readable):

- All datetimes are naive ISO datetimes in the club's single timezone (``timezone``); the clock
  ``now`` is fixed and every id comes from a counter in the state.
- A class session's ``roster`` holds the booking ids that have a place (in booking order) and its
  ``waitlist`` the waitlisted booking ids (first = next to be promoted).
- A member's class credits and guest passes are counted per billing cycle
  (``cycle_start`` inclusive to ``cycle_end`` exclusive): ``credits_used`` and ``guest_passes_used``.
  What is left is the plan's allowance minus what was used (a plan with ``class_credits = None`` is
  unlimited).  Joining a waitlist holds the credits at once; they come back if the member leaves it.
- A member's own class places and personal-training sessions never overlap.  A waitlisted member who
  meanwhile took another place or a session at that time is skipped at promotion: taken off the
  waitlist (cancelled) with the held credits returned.
- A freeze covers ``freeze_start`` through ``freeze_end`` (both inclusive); ``freeze_days_used``
  counts the frozen days of the current calendar year against the plan's allowance.
- Money is EUR rounded to cents.  A charge is signed from the club's point of view (positive: the
  member owes it, negative: a payment or credit); ``Member.balance_due`` is the running sum.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

ClassCategory = Literal["cycling", "yoga", "pilates", "hiit", "strength", "dance", "boxing", "swim"]
ChargeKind = Literal["late_cancel_fee", "plan_change", "personal_training", "pt_refund", "payment"]
ClassStatus = Literal["scheduled", "cancelled"]
BookingStatus = Literal["booked", "waitlisted", "cancelled", "attended"]


class Location(BaseModel):
    location_id: str  # e.g. "LOC-KRZ"
    name: str
    city: str
    address: str
    opens: str  # "HH:MM", every day
    closes: str  # "HH:MM"


class Studio(BaseModel):
    studio_id: str  # e.g. "ST-11"
    location_id: str
    name: str
    capacity: int  # places in the room; a class may cap lower


class AvailabilityWindow(BaseModel):
    weekday: int = Field(ge=0, le=6)  # 0 = Monday
    start: str  # "HH:MM"; personal-training sessions start on the hour inside the window
    end: str  # "HH:MM"; the last session ends by this time


class Instructor(BaseModel):
    instructor_id: str  # e.g. "IN-01"
    name: str
    location_id: str  # where they coach personal training
    specialties: list[str]
    pt_rate: float  # price of one 60-minute personal-training session before plan discounts
    pt_availability: list[AvailabilityWindow] = Field(default_factory=list)


class ClassSession(BaseModel):
    class_id: str  # e.g. "CL-101"
    name: str
    category: ClassCategory
    studio_id: str
    location_id: str
    instructor_id: str
    start: datetime
    duration_min: int
    capacity: int
    credits: int  # class credits one place costs
    waitlist_capacity: int = 5
    status: ClassStatus = "scheduled"
    roster: list[str] = Field(default_factory=list)  # booking ids holding a place
    waitlist: list[str] = Field(default_factory=list)  # booking ids waiting, first promoted first


class Plan(BaseModel):
    plan_id: str  # e.g. "PLAN-PLUS"
    name: str
    monthly_fee: float
    class_credits: int | None  # per billing cycle; None = unlimited classes
    guest_passes: int  # per billing cycle
    all_locations: bool  # False: classes and check-in at the home location only
    pt_discount_percent: float
    max_freeze_days: int  # per calendar year


class Member(BaseModel):
    member_id: str  # e.g. "M-001"
    name: str
    email: str
    phone: str
    home_location_id: str
    plan_id: str
    status: Literal["active", "cancelled"] = "active"
    joined_on: date
    cycle_start: date
    cycle_end: date  # next renewal (exclusive end of the current cycle)
    credits_used: int = 0
    guest_passes_used: int = 0
    freeze_start: date | None = None
    freeze_end: date | None = None
    freeze_reason: str = ""
    freeze_days_used: int = 0
    balance_due: float = 0.0
    charge_ids: list[str] = Field(default_factory=list)


class ClassBooking(BaseModel):
    booking_id: str  # e.g. "BKG-0001"
    member_id: str
    class_id: str
    guest_name: str | None = None  # a guest brought on a guest pass (no credits used)
    status: BookingStatus
    credits_used: int
    created_at: datetime
    cancelled_at: datetime | None = None
    late_cancellation: bool = False
    cancel_reason: str = ""
    fee_charge_id: str | None = None


class PTSession(BaseModel):
    session_id: str  # e.g. "PT-0001"
    member_id: str
    instructor_id: str
    location_id: str
    start: datetime
    duration_min: int = 60
    price: float
    status: Literal["booked", "cancelled"] = "booked"
    focus: str = ""
    charge_id: str | None = None
    cancelled_at: datetime | None = None
    refund_charge_id: str | None = None


class Charge(BaseModel):
    charge_id: str  # e.g. "CH-0001"
    member_id: str
    kind: ChargeKind
    amount: float  # positive: owed by the member; negative: paid or credited
    description: str
    created_at: datetime
    booking_id: str | None = None


class CheckIn(BaseModel):
    checkin_id: str  # e.g. "CI-0001"
    member_id: str
    location_id: str
    at: datetime
    booking_ids: list[str] = Field(default_factory=list)  # classes marked attended by this check-in


class FitnessDB(BaseModel):
    """The whole FitnessClub database (root model)."""

    club_name: str
    timezone: str = "Europe/Berlin"
    now: datetime  # fixed clock; tools never read the system clock
    currency: str = "EUR"
    booking_window_days: int = 7  # classes and personal training open this many days ahead
    late_cancel_hours: int = 12  # cancelling a class later than this before its start is late
    late_cancel_fee: float = 7.5
    pt_free_cancel_hours: int = 24  # personal training cancelled later than this refunds half
    max_unpaid_balance: float = 30.0  # check-in is refused above this balance
    min_freeze_days: int = 7
    locations: dict[str, Location]
    studios: dict[str, Studio]
    instructors: dict[str, Instructor]
    plans: dict[str, Plan]
    classes: dict[str, ClassSession]
    members: dict[str, Member]
    bookings: dict[str, ClassBooking] = Field(default_factory=dict)
    pt_sessions: dict[str, PTSession] = Field(default_factory=dict)
    charges: dict[str, Charge] = Field(default_factory=dict)
    checkins: dict[str, CheckIn] = Field(default_factory=dict)
    next_booking_seq: int = 1
    next_pt_seq: int = 1
    next_charge_seq: int = 1
    next_checkin_seq: int = 1
