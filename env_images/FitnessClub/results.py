"""FitnessClub tool results: what the tools return, beyond the state's own records (``state.py``).

Dates and datetimes are naive, in the club's timezone; money is EUR rounded to cents.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel

from .state import Charge


class LocationInfo(BaseModel):
    location_id: str
    name: str
    city: str
    address: str
    opens: str
    closes: str
    studios: list[str]
    classes_scheduled: int


class PlanInfo(BaseModel):
    plan_id: str
    name: str
    monthly_fee: float
    class_credits: int | None
    guest_passes: int
    all_locations: bool
    pt_discount_percent: float
    max_freeze_days: int


class ClassHit(BaseModel):
    class_id: str
    name: str
    category: str
    location_id: str
    location: str
    studio: str
    instructor: str
    start: datetime
    end: datetime
    credits: int
    spots_left: int
    waitlist_length: int
    status: str


class ClassDetails(ClassHit):
    instructor_id: str
    capacity: int
    booked: int
    waitlist_capacity: int
    late_cancel_deadline: datetime


class InstructorInfo(BaseModel):
    instructor_id: str
    name: str
    location_id: str
    location: str
    specialties: list[str]
    pt_rate: float


class InstructorDay(BaseModel):
    instructor_id: str
    name: str
    location_id: str
    date: date
    pt_rate: float
    free_start_times: list[str]


class MemberSummary(BaseModel):
    member_id: str
    name: str
    email: str
    home_location_id: str
    plan_id: str
    status: str


class MembershipView(BaseModel):
    member_id: str
    name: str
    email: str
    phone: str
    status: str
    frozen_today: bool
    home_location_id: str
    plan_id: str
    plan_name: str
    monthly_fee: float
    all_locations: bool
    cycle_start: date
    cycle_end: date
    credits_left: int | None
    guest_passes_left: int
    freeze_start: date | None
    freeze_end: date | None
    freeze_days_left: int
    balance_due: float
    recent_charges: list[Charge]


class MemberBookingItem(BaseModel):
    booking_id: str
    kind: Literal["class", "personal_training"]
    title: str
    class_id: str | None
    instructor: str
    location_id: str
    start: datetime
    status: str
    guest_name: str | None = None
    waitlist_position: int | None = None


class ClassBookingResult(BaseModel):
    booking_id: str
    class_id: str
    class_name: str
    start: datetime
    status: str
    guest_name: str | None
    credits_used: int
    credits_left: int | None
    guest_passes_left: int
    waitlist_position: int | None = None


class CancelClassResult(BaseModel):
    booking_id: str
    status: str
    late_cancellation: bool
    credits_refunded: int
    guest_pass_refunded: bool
    fee_charged: float
    fee_charge_id: str | None
    promoted_booking_id: str | None
    promoted_member_id: str | None
    dropped_waitlist_booking_ids: list[str] = []  # waitlisted members skipped: busy then, taken off, credits back


class PTBookingResult(BaseModel):
    session_id: str
    instructor: str
    location_id: str
    start: datetime
    end: datetime
    price: float
    charge_id: str
    balance_due: float


class PTCancelResult(BaseModel):
    session_id: str
    status: str
    refund_amount: float
    refund_charge_id: str | None
    balance_due: float


class PlanChangeQuote(BaseModel):
    member_id: str
    current_plan_id: str
    new_plan_id: str
    current_fee: float
    new_fee: float
    cycle_start: date
    cycle_end: date
    days_left_in_cycle: int
    cycle_days: int
    prorated_amount: float  # positive: charged now; negative: credited to the account
    credits_left_after: int | None
    guest_passes_left_after: int


class PlanChangeResult(PlanChangeQuote):
    charge_id: str | None
    balance_due: float


class FreezeResult(BaseModel):
    member_id: str
    freeze_start: date
    freeze_end: date
    days: int
    freeze_days_left: int
    frozen_today: bool


class UnfreezeResult(BaseModel):
    member_id: str
    days_returned: int
    freeze_days_left: int
    freeze_start: date | None
    freeze_end: date | None


class CheckInResult(BaseModel):
    checkin_id: str
    member_id: str
    location_id: str
    at: datetime
    attended_booking_ids: list[str]


class PaymentResult(BaseModel):
    member_id: str
    charge_id: str
    amount_paid: float
    balance_due: float
