"""ParcelDelivery tools: customers and address books, rate quotes, shipments (labels paid from the
customer's prepaid balance), tracking, delivery-date changes, redirections, parcel lockers, pickups
and insurance claims.  Money is EUR rounded to 2 decimals; weights kg, dimensions cm.

Rates (per parcel): base[service] + zone surcharge + per_kg[service] * billable kg, where billable kg
is the actual or volumetric weight (L*W*H / 5000), whichever is larger, rounded up to a whole kg.
Insurance: 50 EUR of cover is included; cover above that costs 2% of the declared value above 50.
Every write raises :class:`ToolError` before it mutates anything; a write that succeeds always
changes the state.  The clock is ``state.now`` (never the wall clock); ids come from counters.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gym_envfactory import ToolError, tool

from .state import (
    Address,
    Claim,
    Customer,
    Depot,
    LedgerEntry,
    Locker,
    Parcel,
    ParcelDB,
    Pickup,
    PickupWindow,
    Quote,
    ServiceLevel,
    Shipment,
    ShipmentStatus,
    TrackingEvent,
)

BASE_RATE = {"economy": 4.90, "express": 9.90, "overnight": 19.90}
PER_KG = {"economy": 0.35, "express": 0.60, "overnight": 0.95}
ZONE_SURCHARGE = {1: 0.0, 2: 1.50, 3: 3.00}
INCLUDED_COVER = 50.0
INSURANCE_RATE = 0.02
MAX_DECLARED_VALUE = 2500.0
MAX_WEIGHT_KG = 31.5
MAX_SIDE_CM = 120
MAX_SIZE_SUM_CM = 300
OVERNIGHT_MAX_KG = 20.0
REDIRECT_FEE = 4.90
MAX_TOP_UP = 500.0
DAMAGE_CLAIM_DAYS = 14
LOST_AFTER_DAYS = 7
MAX_DATE_SHIFT_DAYS = 10
PICKUP_HORIZON_DAYS = 14
HUB_ID = "HUB-KS"
TOO_LATE = ("at_final_depot", "out_for_delivery", "delivered")
_POSTCODE_RE = re.compile(r"^\d{5}$")

CustomerId = Annotated[str, Field(description="Customer id, e.g. C-1001 (see find_shipping_customer)")]
ShipmentId = Annotated[str, Field(description="Shipment / tracking id, e.g. SH-10001")]


# ----------------------------------------------------------------------------- result models


class ParcelSpec(BaseModel):
    """One parcel as the customer describes it."""

    weight_kg: Annotated[float, Field(description="Actual weight in kg, greater than 0, at most 31.5")]
    length_cm: Annotated[int, Field(description="Longest side in cm (at most 120)")]
    width_cm: Annotated[int, Field(description="Width in cm")]
    height_cm: Annotated[int, Field(description="Height in cm")]


class ShipmentLine(BaseModel):
    shipment_id: str
    status: str
    service: str
    to_recipient: str
    to_city: str
    estimated_delivery: date
    pickup_id: str | None
    created_at: datetime


class TrackingReport(BaseModel):
    shipment_id: str
    status: str
    service: str
    current_depot: str | None
    current_city: str | None
    route: list[str]
    route_cities: list[str]
    deliver_to: str
    locker_id: str | None
    estimated_delivery: date
    requested_delivery: date | None
    can_change_delivery: bool
    pickup_id: str | None
    coverage: float
    events: list[TrackingEvent]


class ShipmentReceipt(BaseModel):
    shipment: Shipment
    charged: float
    balance: float


class CancellationReceipt(BaseModel):
    shipment_id: str
    status: str
    refunded: float
    balance: float


class RedirectReceipt(BaseModel):
    shipment_id: str
    to_address_id: str
    route: list[str]
    estimated_delivery: date
    fee: float
    balance: float


class DeliveryChange(BaseModel):
    shipment_id: str
    estimated_delivery: date
    requested_delivery: date


class LockerAssignment(BaseModel):
    shipment_id: str
    locker_id: str
    locker_name: str
    released_locker_id: str | None


class WindowSlot(BaseModel):
    window: str
    capacity: int
    booked: int
    free: int


class PickupWindows(BaseModel):
    address_id: str
    depot_id: str
    date: date
    windows: list[WindowSlot]


class BalanceReceipt(BaseModel):
    customer_id: str
    topped_up: float
    balance: float
    entry_id: str


# ----------------------------------------------------------------------------- helpers


def _money(x: float) -> float:
    return round(x + 0.0, 2)


def _today(state: ParcelDB) -> date:
    return state.now.date()


def _customer(state: ParcelDB, customer_id: str) -> Customer:
    c = state.customers.get(customer_id)
    if c is None:
        raise ToolError(f"No customer {customer_id}; customer ids look like C-1001 (use find_shipping_customer)",
                        code="not_found")
    return c


def _address(state: ParcelDB, address_id: str, customer_id: str | None = None) -> Address:
    a = state.addresses.get(address_id)
    if a is None:
        raise ToolError(f"No address {address_id}; address ids look like A-0001 (use list_address_book)",
                        code="not_found")
    if customer_id is not None and a.customer_id != customer_id:
        raise ToolError(f"Address {address_id} is not in the address book of {customer_id}; add it with "
                        "add_address_book_entry", code="not_found")
    return a


def _shipment(state: ParcelDB, shipment_id: str) -> Shipment:
    s = state.shipments.get(shipment_id)
    if s is None:
        raise ToolError(f"No shipment {shipment_id}; shipment ids look like SH-10001 (use list_customer_shipments)",
                        code="not_found")
    return s


def _locker(state: ParcelDB, locker_id: str) -> Locker:
    lk = state.lockers.get(locker_id)
    if lk is None:
        raise ToolError(f"No locker {locker_id}; locker ids look like LK-101 (use find_parcel_lockers)",
                        code="not_found")
    return lk


def _depot_for_city(state: ParcelDB, city: str) -> Depot:
    for d in state.depots.values():
        if not d.is_hub and d.city.lower() == city.strip().lower():
            return d
    served = ", ".join(sorted(d.city for d in state.depots.values() if not d.is_hub))
    raise ToolError(f"We do not deliver to {city!r}; served cities: {served}", code="unserved_area")


def _zone(a: Depot, b: Depot) -> int:
    diff = abs(a.postal_region - b.postal_region)
    return 1 if diff == 0 else 2 if diff <= 3 else 3


def _route(state: ParcelDB, start: str, end: str) -> list[str]:
    if start == end:
        return [start]
    a, b = state.depots[start], state.depots[end]
    if a.is_hub or a.postal_region == b.postal_region:
        return [start, end]
    return [start, HUB_ID, end]


def _add_days(start: date, days: int) -> date:
    """``days`` delivery days after ``start``; Sundays are not delivery days."""
    d = start
    while days > 0:
        d += timedelta(days=1)
        if d.weekday() != 6:
            days -= 1
    return d


def _transit_days(service: str, zone: int) -> int:
    return {"economy": zone + 2, "express": zone, "overnight": 1}[service]


def _parcel(spec: ParcelSpec, i: int) -> Parcel:
    dims = (spec.length_cm, spec.width_cm, spec.height_cm)
    if spec.weight_kg <= 0 or spec.weight_kg > MAX_WEIGHT_KG:
        raise ToolError(f"Parcel {i + 1}: weight must be above 0 and at most {MAX_WEIGHT_KG} kg, got "
                        f"{spec.weight_kg}", code="invalid_parcel")
    if min(dims) <= 0 or max(dims) > MAX_SIDE_CM or sum(dims) > MAX_SIZE_SUM_CM:
        raise ToolError(f"Parcel {i + 1}: sides must be 1-{MAX_SIDE_CM} cm and add up to at most "
                        f"{MAX_SIZE_SUM_CM} cm, got {dims}", code="invalid_parcel")
    volumetric = spec.length_cm * spec.width_cm * spec.height_cm / 5000
    billable = math.ceil(max(spec.weight_kg, volumetric) - 1e-9)
    return Parcel(weight_kg=spec.weight_kg, length_cm=spec.length_cm, width_cm=spec.width_cm,
                  height_cm=spec.height_cm, billable_kg=max(billable, 1))


def _ledger(state: ParcelDB, customer: Customer, amount: float,
            kind: Literal["top_up", "label", "refund", "redirect_fee"], shipment_id: str | None) -> LedgerEntry:
    eid = f"LE-{state.next_ledger_seq:05d}"
    state.next_ledger_seq += 1
    customer.balance = _money(customer.balance + amount)
    entry = LedgerEntry(entry_id=eid, customer_id=customer.customer_id, at=state.now, amount=_money(amount),
                        kind=kind, shipment_id=shipment_id)
    state.ledger[eid] = entry
    return entry


def _check_changeable(s: Shipment) -> None:
    if s.status in TOO_LATE:
        raise ToolError(f"Shipment {s.shipment_id} is already {s.status.replace('_', ' ')}; delivery changes are "
                        "only possible before the parcel reaches its final depot", code="too_late")
    if s.status in ("cancelled", "lost"):
        raise ToolError(f"Shipment {s.shipment_id} is {s.status}", code="invalid_state")


def _event(state: ParcelDB, s: Shipment, status: ShipmentStatus, description: str) -> None:
    depot = s.route[s.route_position] if s.route else None
    s.events.append(TrackingEvent(at=state.now, depot_id=depot, status=status, description=description))


# ----------------------------------------------------------------------------- customers & addresses


@tool(read_only=True)
def find_shipping_customer(
    state: ParcelDB,
    *,
    email: Annotated[str, Field(description="The customer's e-mail address (case-insensitive)")],
) -> Customer:
    """Find a shipping customer by e-mail address.

    Returns customer_id (C-1001), name, email, phone, kind (private/business) and balance (prepaid
    shipping balance in EUR, from which labels and fees are paid).
    Errors: not_found (no customer with that e-mail).
    """
    needle = email.strip().lower()
    for c in state.customers.values():
        if c.email.lower() == needle:
            return c
    raise ToolError(f"No customer with e-mail {email!r}; check the spelling", code="not_found")


@tool(read_only=True)
def list_address_book(state: ParcelDB, *, customer_id: CustomerId) -> list[Address]:
    """List a customer's saved addresses: their own (sender) addresses and their recipients.

    Returns address_id (A-0001), label (e.g. 'home', 'office', 'Grandma'), recipient, street, postcode, city.
    Errors: not_found (unknown customer_id).
    """
    _customer(state, customer_id)
    return [a for a in state.addresses.values() if a.customer_id == customer_id]


@tool
def add_address_book_entry(
    state: ParcelDB,
    *,
    customer_id: CustomerId,
    label: Annotated[str, Field(description="Short name for the entry, e.g. 'Grandma' or 'office'")],
    recipient: Annotated[str, Field(description="Person or company the parcel is addressed to")],
    street: Annotated[str, Field(description="Street and house number, e.g. 'Lindenstr. 12'")],
    postcode: Annotated[str, Field(description="5-digit German postcode, e.g. 10115")],
    city: Annotated[str, Field(description="City; must be one we deliver to")],
) -> Address:
    """Save an address in a customer's address book (a sender address or a recipient).

    Shipments can only be quoted between addresses of the customer's own address book. Returns the new
    address with its id (A-xxxx).
    Errors: not_found (customer), invalid_address (empty label/recipient/street, postcode not 5 digits,
    or postcode outside the city's postal region), unserved_area (no depot in that city),
    already_exists (same recipient, street and postcode already saved; use that address_id).
    """
    _customer(state, customer_id)
    if not label.strip() or not recipient.strip() or not street.strip():
        raise ToolError("label, recipient and street must not be empty", code="invalid_address")
    if not _POSTCODE_RE.match(postcode.strip()):
        raise ToolError(f"Postcode must be 5 digits, got {postcode!r}", code="invalid_address")
    depot = _depot_for_city(state, city)
    if int(postcode.strip()[0]) != depot.postal_region:
        raise ToolError(f"Postcode {postcode} is not in {depot.city} (its postcodes start with "
                        f"{depot.postal_region}); check the address", code="invalid_address")
    for a in state.addresses.values():
        if (a.customer_id == customer_id and a.recipient.lower() == recipient.strip().lower()
                and a.street.lower() == street.strip().lower() and a.postcode == postcode.strip()):
            raise ToolError(f"Address {a.address_id} ({a.label}) already holds this address", code="already_exists")
    aid = f"A-{state.next_address_seq:04d}"
    state.next_address_seq += 1
    addr = Address(address_id=aid, customer_id=customer_id, label=label.strip(), recipient=recipient.strip(),
                   street=street.strip(), postcode=postcode.strip(), city=depot.city)
    state.addresses[aid] = addr
    return addr


@tool
def top_up_shipping_balance(
    state: ParcelDB,
    *,
    customer_id: CustomerId,
    amount: Annotated[float, Field(description="EUR to add, above 0 and at most 500, at most 2 decimals")],
) -> BalanceReceipt:
    """Add money to a customer's prepaid shipping balance (labels and redirect fees are paid from it).

    Returns the amount added, the new balance and the ledger entry id (LE-xxxxx).
    Errors: not_found (customer), invalid_amount (<= 0, more than 2 decimals), limit_exceeded (above 500 EUR
    in one top-up).
    """
    c = _customer(state, customer_id)
    if amount <= 0 or abs(amount * 100 - round(amount * 100)) > 1e-6:
        raise ToolError(f"Amount must be above 0 with at most 2 decimals, got {amount}", code="invalid_amount")
    if amount > MAX_TOP_UP + 1e-9:
        raise ToolError(f"One top-up is at most {MAX_TOP_UP:.2f} EUR; split larger amounts", code="limit_exceeded")
    entry = _ledger(state, c, _money(amount), "top_up", None)
    return BalanceReceipt(customer_id=customer_id, topped_up=_money(amount), balance=c.balance,
                          entry_id=entry.entry_id)


# ----------------------------------------------------------------------------- quotes & shipments


@tool
def quote_parcel_rate(
    state: ParcelDB,
    *,
    customer_id: CustomerId,
    from_address_id: Annotated[str, Field(description="Sender address id from the customer's address book")],
    to_address_id: Annotated[str, Field(description="Recipient address id from the customer's address book")],
    parcels: Annotated[list[ParcelSpec], Field(description="The parcels (1-5) with weight_kg, length_cm, width_cm, height_cm")],
    service: Annotated[ServiceLevel, Field(description="economy (cheapest, zone+2 days), express (zone days) or overnight (next day, dearest)")] = "economy",
    declared_value: Annotated[float, Field(description="Value to insure in EUR (0-2500); 50 EUR cover is included free")] = 0.0,
) -> Quote:
    """Price a shipment and save the quote (Q-xxxx) that create_parcel_shipment turns into a paid label.

    The zone (1-3) comes from the postal regions of the two addresses. Returns zone, each parcel's
    billable_kg, postage, insurance_fee, total and estimated_delivery (delivery days Mon-Sat).
    Errors: not_found (customer, or an address not in their book), invalid_state (same address twice),
    invalid_parcel (0 or more than 5 parcels, weight above 31.5 kg, a side above 120 cm or sides adding up to
    more than 300 cm), service_unavailable (overnight to zone 3, or an overnight parcel above 20 kg),
    limit_exceeded (declared value above 2500 EUR), invalid_amount (negative declared value).
    """
    _customer(state, customer_id)
    src = _address(state, from_address_id, customer_id)
    dst = _address(state, to_address_id, customer_id)
    if src.address_id == dst.address_id:
        raise ToolError("from_address_id and to_address_id are the same address", code="invalid_state")
    if not 1 <= len(parcels) <= 5:
        raise ToolError(f"A shipment holds 1 to 5 parcels, got {len(parcels)}", code="invalid_parcel")
    items = [_parcel(p, i) for i, p in enumerate(parcels)]
    if declared_value < 0:
        raise ToolError("declared_value must not be negative", code="invalid_amount")
    if declared_value > MAX_DECLARED_VALUE:
        raise ToolError(f"Declared value is at most {MAX_DECLARED_VALUE:.0f} EUR per shipment", code="limit_exceeded")
    zone = _zone(_depot_for_city(state, src.city), _depot_for_city(state, dst.city))
    if service == "overnight" and zone == 3:
        raise ToolError(f"Overnight is not offered from {src.city} to {dst.city} (zone 3); use express",
                        code="service_unavailable")
    if service == "overnight" and any(p.weight_kg > OVERNIGHT_MAX_KG for p in items):
        raise ToolError(f"Overnight parcels weigh at most {OVERNIGHT_MAX_KG:.0f} kg; use express",
                        code="service_unavailable")
    postage = _money(sum(BASE_RATE[service] + ZONE_SURCHARGE[zone] + PER_KG[service] * p.billable_kg for p in items))
    fee = _money(max(declared_value - INCLUDED_COVER, 0.0) * INSURANCE_RATE)
    qid = f"Q-{state.next_quote_seq:04d}"
    state.next_quote_seq += 1
    q = Quote(quote_id=qid, customer_id=customer_id, from_address_id=src.address_id, to_address_id=dst.address_id,
              service=service, zone=zone, parcels=items, declared_value=_money(declared_value), postage=postage,
              insurance_fee=fee, total=_money(postage + fee),
              estimated_delivery=_add_days(_today(state), _transit_days(service, zone)), created_at=state.now)
    state.quotes[qid] = q
    return q


@tool
def create_parcel_shipment(
    state: ParcelDB,
    *,
    quote_id: Annotated[str, Field(description="Quote id from quote_parcel_rate, e.g. Q-0001")],
) -> ShipmentReceipt:
    """Buy the label for a quote: creates the shipment (SH-xxxxx, status label_created) and charges the
    quote's total to the customer's prepaid balance.

    Returns the shipment (route of depot ids, estimated_delivery, coverage), the amount charged and the new
    balance. The parcel is then handed in at a depot or collected with schedule_parcel_pickup.
    Errors: not_found (quote), already_exists (a shipment was already created from this quote),
    insufficient_funds (balance below the total; top it up with top_up_shipping_balance).
    """
    q = state.quotes.get(quote_id)
    if q is None:
        raise ToolError(f"No quote {quote_id}; get one with quote_parcel_rate", code="not_found")
    for s in state.shipments.values():
        if s.quote_id == quote_id:
            raise ToolError(f"Quote {quote_id} was already used for shipment {s.shipment_id}", code="already_exists")
    c = _customer(state, q.customer_id)
    if c.balance + 1e-9 < q.total:
        raise ToolError(f"Balance of {c.balance:.2f} EUR does not cover the {q.total:.2f} EUR label; top up at "
                        f"least {q.total - c.balance:.2f} EUR first", code="insufficient_funds")
    src = state.addresses[q.from_address_id]
    dst = state.addresses[q.to_address_id]
    route = _route(state, _depot_for_city(state, src.city).depot_id, _depot_for_city(state, dst.city).depot_id)
    sid = f"SH-{state.next_shipment_seq}"
    state.next_shipment_seq += 1
    s = Shipment(shipment_id=sid, customer_id=c.customer_id, from_address_id=src.address_id,
                 to_address_id=dst.address_id, service=q.service, zone=q.zone, parcels=q.parcels,
                 declared_value=q.declared_value, coverage=max(INCLUDED_COVER, q.declared_value),
                 amount_paid=q.total, status="label_created", route=route, estimated_delivery=q.estimated_delivery,
                 quote_id=quote_id, created_at=state.now)
    _event(state, s, "label_created", "Label created; awaiting hand-in or pickup")
    state.shipments[sid] = s
    _ledger(state, c, -q.total, "label", sid)
    return ShipmentReceipt(shipment=s, charged=q.total, balance=c.balance)


@tool(destructive=True)
def cancel_parcel_shipment(state: ParcelDB, *, shipment_id: ShipmentId) -> CancellationReceipt:
    """Cancel a shipment whose parcel has not been handed over yet (status label_created) and refund the
    label price to the prepaid balance. Frees its locker compartment and takes it off a scheduled pickup
    (a pickup left without shipments is cancelled).

    Returns the refunded amount and the new balance.
    Errors: not_found (shipment), already_cancelled, invalid_state (the parcel is already with the carrier).
    """
    s = _shipment(state, shipment_id)
    if s.status == "cancelled":
        raise ToolError(f"Shipment {shipment_id} is already cancelled", code="already_cancelled")
    if s.status != "label_created":
        raise ToolError(f"Shipment {shipment_id} is {s.status.replace('_', ' ')}; only shipments not yet handed "
                        "over can be cancelled (redirect it instead)", code="invalid_state")
    c = _customer(state, s.customer_id)
    if s.locker_id is not None:
        state.lockers[s.locker_id].free_compartments += 1
        s.locker_id = None
    if s.pickup_id is not None:
        p = state.pickups[s.pickup_id]
        p.shipment_ids = [x for x in p.shipment_ids if x != shipment_id]
        if not p.shipment_ids:
            p.status = "cancelled"
        s.pickup_id = None
    s.status = "cancelled"
    _event(state, s, "cancelled", "Shipment cancelled by the sender; label refunded")
    _ledger(state, c, s.amount_paid, "refund", shipment_id)
    return CancellationReceipt(shipment_id=shipment_id, status=s.status, refunded=s.amount_paid, balance=c.balance)


@tool(read_only=True)
def list_customer_shipments(
    state: ParcelDB,
    *,
    customer_id: CustomerId,
    status: Annotated[ShipmentStatus | None, Field(description="Only shipments in this status; omit for all")] = None,
    recipient: Annotated[str | None, Field(description="Case-insensitive text in the recipient's name or city")] = None,
) -> list[ShipmentLine]:
    """List a customer's shipments, newest first.

    Returns shipment_id, status, service, recipient (to_recipient), destination city (to_city),
    estimated_delivery (the requested date if one was set), pickup_id (a scheduled courier pickup) and
    created_at.
    Errors: not_found (unknown customer_id).
    """
    _customer(state, customer_id)
    needle = recipient.strip().lower() if recipient else None
    out = []
    for s in state.shipments.values():
        if s.customer_id != customer_id or (status is not None and s.status != status):
            continue
        dst = state.addresses[s.to_address_id]
        if needle and needle not in dst.recipient.lower() and needle not in dst.city.lower():
            continue
        out.append(ShipmentLine(shipment_id=s.shipment_id, status=s.status, service=s.service,
                                to_recipient=dst.recipient, to_city=dst.city,
                                estimated_delivery=s.requested_delivery or s.estimated_delivery,
                                pickup_id=s.pickup_id, created_at=s.created_at))
    out.sort(key=lambda x: (x.created_at, x.shipment_id), reverse=True)
    return out


@tool(read_only=True)
def track_parcel(state: ParcelDB, *, shipment_id: ShipmentId) -> TrackingReport:
    """Track a shipment: status, where it is on its route, the tracking events and whether its delivery can
    still be changed (only before it reaches the final depot).

    Returns status, current_depot / current_city, route (depot ids) and route_cities, deliver_to (recipient
    and city, or the locker), estimated and requested delivery dates, coverage and the events, oldest first.
    Errors: not_found (unknown shipment_id).
    """
    s = _shipment(state, shipment_id)
    dst = state.addresses[s.to_address_id]
    at_depot = s.status not in ("label_created", "cancelled", "delivered")
    current = s.route[s.route_position] if at_depot else None
    target = (f"locker {state.lockers[s.locker_id].name}, {dst.city}" if s.locker_id
              else f"{dst.recipient}, {dst.street}, {dst.postcode} {dst.city}")
    return TrackingReport(
        shipment_id=s.shipment_id, status=s.status, service=s.service, current_depot=current,
        current_city=state.depots[current].city if current else None, route=s.route,
        route_cities=[state.depots[d].city for d in s.route], deliver_to=target, locker_id=s.locker_id,
        estimated_delivery=s.estimated_delivery, requested_delivery=s.requested_delivery,
        can_change_delivery=s.status in ("label_created", "picked_up", "in_transit"), pickup_id=s.pickup_id,
        coverage=s.coverage, events=s.events)


# ----------------------------------------------------------------------------- delivery changes


@tool
def reschedule_parcel_delivery(
    state: ParcelDB,
    *,
    shipment_id: ShipmentId,
    delivery_date: Annotated[date, Field(description="Requested delivery date, YYYY-MM-DD (Mon-Sat)")],
) -> DeliveryChange:
    """Ask for a shipment to be delivered on a later day than estimated (e.g. nobody is home).

    The date must be a delivery day (not a Sunday) from the estimated delivery date up to 10 days after it.
    Only possible before the parcel reaches its final depot, and not for parcels going to a locker.
    Returns the estimated and the requested delivery dates.
    Errors: not_found, too_late (already at the final depot, out for delivery or delivered), invalid_state
    (cancelled, lost, or delivered to a locker), invalid_date (Sunday, before the estimated date, more than 10
    days after it, or the date already requested).
    """
    s = _shipment(state, shipment_id)
    _check_changeable(s)
    if s.locker_id is not None:
        raise ToolError(f"Shipment {shipment_id} goes to locker {s.locker_id}, where it waits 7 days; no date "
                        "change needed", code="invalid_state")
    if delivery_date.weekday() == 6:
        raise ToolError(f"{delivery_date} is a Sunday; we deliver Monday to Saturday", code="invalid_date")
    if delivery_date < s.estimated_delivery:
        raise ToolError(f"The earliest possible delivery is {s.estimated_delivery}; choose that day or later",
                        code="invalid_date")
    if delivery_date > s.estimated_delivery + timedelta(days=MAX_DATE_SHIFT_DAYS):
        raise ToolError(f"Delivery can be postponed by at most {MAX_DATE_SHIFT_DAYS} days (until "
                        f"{s.estimated_delivery + timedelta(days=MAX_DATE_SHIFT_DAYS)})", code="invalid_date")
    if s.requested_delivery == delivery_date:
        raise ToolError(f"Delivery on {delivery_date} is already requested", code="invalid_date")
    s.requested_delivery = delivery_date
    _event(state, s, s.status, f"Delivery rescheduled to {delivery_date} at the recipient's request")
    return DeliveryChange(shipment_id=shipment_id, estimated_delivery=s.estimated_delivery,
                          requested_delivery=delivery_date)


@tool
def redirect_parcel(
    state: ParcelDB,
    *,
    shipment_id: ShipmentId,
    to_address_id: Annotated[str, Field(description="New destination, an address id from the sender's address book")],
) -> RedirectReceipt:
    """Send a shipment to another address of the sender's address book, for a 4.90 EUR fee charged to the
    prepaid balance. The route is recomputed from where the parcel is now; the delivery estimate moves one
    delivery day later; a locker choice and a requested date are dropped (locker compartment freed).

    Returns the new route, estimated_delivery, the fee and the new balance.
    Errors: not_found (shipment, or an address not in the sender's book), too_late (already at the final
    depot, out for delivery or delivered), invalid_state (cancelled, lost, or already going to that
    address), unserved_area, insufficient_funds (balance below the fee).
    """
    s = _shipment(state, shipment_id)
    _check_changeable(s)
    dst = _address(state, to_address_id, s.customer_id)
    if dst.address_id == s.to_address_id:
        raise ToolError(f"Shipment {shipment_id} already goes to {to_address_id}", code="invalid_state")
    depot = _depot_for_city(state, dst.city)
    c = _customer(state, s.customer_id)
    if c.balance + 1e-9 < REDIRECT_FEE:
        raise ToolError(f"Balance of {c.balance:.2f} EUR does not cover the {REDIRECT_FEE:.2f} EUR redirect fee; "
                        "top it up first", code="insufficient_funds")
    if s.locker_id is not None:
        state.lockers[s.locker_id].free_compartments += 1
        s.locker_id = None
    s.route = s.route[:s.route_position] + _route(state, s.route[s.route_position], depot.depot_id)
    s.to_address_id = dst.address_id
    s.requested_delivery = None
    s.estimated_delivery = _add_days(max(s.estimated_delivery, _today(state)), 1)
    _event(state, s, s.status, f"Redirected to {dst.recipient}, {dst.city}")
    _ledger(state, c, -REDIRECT_FEE, "redirect_fee", shipment_id)
    return RedirectReceipt(shipment_id=shipment_id, to_address_id=dst.address_id, route=s.route,
                           estimated_delivery=s.estimated_delivery, fee=REDIRECT_FEE, balance=c.balance)


@tool(read_only=True)
def find_parcel_lockers(
    state: ParcelDB,
    *,
    city: Annotated[str, Field(description="City to search, e.g. Leipzig")],
    only_free: Annotated[bool, Field(description="Only lockers with a free compartment")] = False,
) -> list[Locker]:
    """Find parcel lockers in a city.

    Returns locker_id (LK-101), name, street, max_side_cm (the longest parcel side a compartment takes) and
    free_compartments.
    Errors: unserved_area (we do not deliver to that city).
    """
    depot = _depot_for_city(state, city)
    return [lk for lk in state.lockers.values()
            if lk.city == depot.city and (not only_free or lk.free_compartments > 0)]


@tool
def deliver_to_locker(
    state: ParcelDB,
    *,
    shipment_id: ShipmentId,
    locker_id: Annotated[str, Field(description="Locker id in the destination city, e.g. LK-101 (see find_parcel_lockers)")],
) -> LockerAssignment:
    """Have a shipment delivered to a parcel locker in its destination city instead of the door (free).

    Reserves one compartment (a previously chosen locker's compartment is freed) and drops a requested
    delivery date. Only possible before the parcel reaches its final depot, for single-parcel shipments.
    Errors: not_found (shipment or locker), too_late, invalid_state (cancelled, lost, more than one parcel,
    already that locker, or a locker in another city than the destination), no_capacity (no free
    compartment), too_large (a parcel side longer than the compartments take).
    """
    s = _shipment(state, shipment_id)
    _check_changeable(s)
    lk = _locker(state, locker_id)
    dst = state.addresses[s.to_address_id]
    if lk.city != dst.city:
        raise ToolError(f"Locker {locker_id} is in {lk.city}; the shipment goes to {dst.city}. Redirect it "
                        "first or pick a locker there", code="invalid_state")
    if len(s.parcels) != 1:
        raise ToolError(f"Shipment {shipment_id} has {len(s.parcels)} parcels; lockers take single-parcel "
                        "shipments only", code="invalid_state")
    if s.locker_id == locker_id:
        raise ToolError(f"Shipment {shipment_id} already goes to locker {locker_id}", code="invalid_state")
    if lk.free_compartments <= 0:
        raise ToolError(f"Locker {lk.name} ({locker_id}) is full; choose another (find_parcel_lockers with "
                        "only_free=true)", code="no_capacity")
    longest = max(max(p.length_cm, p.width_cm, p.height_cm) for p in s.parcels)
    if longest > lk.max_side_cm:
        raise ToolError(f"The parcel's longest side ({longest} cm) exceeds the compartments of {locker_id} "
                        f"({lk.max_side_cm} cm)", code="too_large")
    released = s.locker_id
    if released is not None:
        state.lockers[released].free_compartments += 1
    lk.free_compartments -= 1
    s.locker_id = locker_id
    s.requested_delivery = None
    _event(state, s, s.status, f"Delivery point changed to locker {lk.name}")
    return LockerAssignment(shipment_id=shipment_id, locker_id=locker_id, locker_name=lk.name,
                            released_locker_id=released)


# ----------------------------------------------------------------------------- pickups


def _check_pickup_date(state: ParcelDB, day: date) -> None:
    today = _today(state)
    if day <= today:
        raise ToolError(f"Pickups can be booked from tomorrow on (today is {today})", code="invalid_date")
    if day > today + timedelta(days=PICKUP_HORIZON_DAYS):
        raise ToolError(f"Pickups can be booked at most {PICKUP_HORIZON_DAYS} days ahead", code="invalid_date")
    if day.weekday() == 6:
        raise ToolError(f"{day} is a Sunday; couriers collect Monday to Saturday", code="invalid_date")


def _booked(state: ParcelDB, depot_id: str, day: date, window: str) -> int:
    return sum(1 for p in state.pickups.values()
               if p.depot_id == depot_id and p.date == day and p.window == window and p.status == "scheduled")


@tool(read_only=True)
def list_pickup_windows(
    state: ParcelDB,
    *,
    address_id: Annotated[str, Field(description="Pickup address id (a sender address from the address book)")],
    pickup_date: Annotated[date, Field(description="Pickup day, YYYY-MM-DD: tomorrow up to 14 days ahead, not a Sunday")],
) -> PickupWindows:
    """Show the courier pickup windows (08-12, 12-16, 16-20) for an address on one day, with how many
    pickups the local depot can still take in each.

    Errors: not_found (address), invalid_date (today or earlier, more than 14 days ahead, or a Sunday).
    """
    a = _address(state, address_id)
    _check_pickup_date(state, pickup_date)
    depot = _depot_for_city(state, a.city)
    slots = []
    for w in ("08-12", "12-16", "16-20"):
        booked = _booked(state, depot.depot_id, pickup_date, w)
        slots.append(WindowSlot(window=w, capacity=depot.pickup_capacity, booked=booked,
                                free=max(depot.pickup_capacity - booked, 0)))
    return PickupWindows(address_id=address_id, depot_id=depot.depot_id, date=pickup_date, windows=slots)


@tool
def schedule_parcel_pickup(
    state: ParcelDB,
    *,
    address_id: Annotated[str, Field(description="Where the courier collects: the shipments' sender address id")],
    pickup_date: Annotated[date, Field(description="Pickup day, YYYY-MM-DD (tomorrow up to 14 days ahead, not a Sunday)")],
    window: Annotated[PickupWindow, Field(description="Time window: 08-12, 12-16 or 16-20")],
    shipment_ids: Annotated[list[str], Field(description="Shipments to collect (status label_created, sent from this address)")],
) -> Pickup:
    """Book a courier to collect one or more labelled shipments at their sender address.

    Returns the pickup (PU-xxxx) with depot, date, window and shipment ids.
    Errors: not_found (address or shipment), invalid_date, invalid_state (no shipments given, a shipment
    not sent from this address, not in label_created, or already on a pickup), no_capacity (the window is
    fully booked; see list_pickup_windows).
    """
    a = _address(state, address_id)
    _check_pickup_date(state, pickup_date)
    if not shipment_ids:
        raise ToolError("Give at least one shipment id to collect", code="invalid_state")
    for sid in shipment_ids:
        s = _shipment(state, sid)
        if s.from_address_id != address_id:
            raise ToolError(f"Shipment {sid} is not sent from {address_id}", code="invalid_state")
        if s.status != "label_created":
            raise ToolError(f"Shipment {sid} is {s.status.replace('_', ' ')}; only labelled shipments not yet "
                            "handed over can be collected", code="invalid_state")
        if s.pickup_id is not None:
            raise ToolError(f"Shipment {sid} is already on pickup {s.pickup_id}", code="invalid_state")
    depot = _depot_for_city(state, a.city)
    if _booked(state, depot.depot_id, pickup_date, window) >= depot.pickup_capacity:
        raise ToolError(f"The {window} window on {pickup_date} is fully booked; see list_pickup_windows for another",
                        code="no_capacity")
    pid = f"PU-{state.next_pickup_seq:04d}"
    state.next_pickup_seq += 1
    p = Pickup(pickup_id=pid, customer_id=a.customer_id, address_id=address_id, depot_id=depot.depot_id,
               date=pickup_date, window=window, shipment_ids=list(dict.fromkeys(shipment_ids)))
    state.pickups[pid] = p
    for sid in p.shipment_ids:
        state.shipments[sid].pickup_id = pid
    return p


@tool(destructive=True)
def cancel_parcel_pickup(
    state: ParcelDB,
    *,
    pickup_id: Annotated[str, Field(description="Pickup id, e.g. PU-0001")],
) -> Pickup:
    """Cancel a scheduled courier pickup; its shipments stay labelled and can be handed in or collected later.

    Returns the cancelled pickup.
    Errors: not_found, already_cancelled, invalid_state (the pickup already took place).
    """
    p = state.pickups.get(pickup_id)
    if p is None:
        raise ToolError(f"No pickup {pickup_id}; pickup ids look like PU-0001", code="not_found")
    if p.status == "cancelled":
        raise ToolError(f"Pickup {pickup_id} is already cancelled", code="already_cancelled")
    if p.status == "completed":
        raise ToolError(f"Pickup {pickup_id} already took place", code="invalid_state")
    p.status = "cancelled"
    for sid in p.shipment_ids:
        if state.shipments[sid].pickup_id == pickup_id:
            state.shipments[sid].pickup_id = None
    return p


# ----------------------------------------------------------------------------- claims


@tool
def file_parcel_claim(
    state: ParcelDB,
    *,
    shipment_id: ShipmentId,
    kind: Annotated[Literal["damaged", "lost"], Field(description="damaged (delivered broken) or lost")],
    amount: Annotated[float, Field(description="EUR claimed, above 0 and at most the shipment's coverage")],
    description: Annotated[str, Field(description="What happened / what is damaged")] = "",
) -> Claim:
    """File an insurance claim for a damaged or lost shipment. Rules: a damage claim needs a delivered
    shipment and is filed within 14 days of delivery; a loss claim needs a shipment marked lost or one in
    transit without a scan for 7 days or more; the amount is at most the coverage (50 EUR included, or the
    declared value); one claim per shipment.

    Returns the claim (CL-xxxx, status submitted).
    Errors: not_found, invalid_amount (<= 0 or more than 2 decimals), limit_exceeded (above the coverage),
    already_exists (the shipment already has a claim), claim_not_allowed (the rules above are not met).
    """
    s = _shipment(state, shipment_id)
    if amount <= 0 or abs(amount * 100 - round(amount * 100)) > 1e-6:
        raise ToolError(f"Amount must be above 0 with at most 2 decimals, got {amount}", code="invalid_amount")
    if amount > s.coverage + 1e-9:
        raise ToolError(f"Shipment {shipment_id} is covered up to {s.coverage:.2f} EUR; claim at most that",
                        code="limit_exceeded")
    for c in state.claims.values():
        if c.shipment_id == shipment_id:
            raise ToolError(f"Shipment {shipment_id} already has claim {c.claim_id} ({c.status})", code="already_exists")
    now = state.now
    if kind == "damaged":
        if s.status != "delivered" or s.delivered_at is None:
            raise ToolError(f"Shipment {shipment_id} is {s.status.replace('_', ' ')}; damage claims need a "
                            "delivered parcel", code="claim_not_allowed")
        if now - s.delivered_at > timedelta(days=DAMAGE_CLAIM_DAYS):
            raise ToolError(f"Shipment {shipment_id} was delivered on {s.delivered_at.date()}; damage must be "
                            f"claimed within {DAMAGE_CLAIM_DAYS} days", code="claim_not_allowed")
    else:
        last = s.events[-1].at if s.events else s.created_at
        stalled = s.status in ("picked_up", "in_transit") and now - last >= timedelta(days=LOST_AFTER_DAYS)
        if s.status != "lost" and not stalled:
            raise ToolError(f"Shipment {shipment_id} is {s.status.replace('_', ' ')} (last scan {last.date()}); "
                            f"a loss claim needs {LOST_AFTER_DAYS} days without a scan", code="claim_not_allowed")
    cid = f"CL-{state.next_claim_seq:04d}"
    state.next_claim_seq += 1
    claim = Claim(claim_id=cid, shipment_id=shipment_id, customer_id=s.customer_id, kind=kind,
                  amount_claimed=_money(amount), description=description, filed_at=now)
    state.claims[cid] = claim
    return claim


@tool(read_only=True)
def get_parcel_claim(
    state: ParcelDB,
    *,
    claim_id: Annotated[str, Field(description="Claim id, e.g. CL-0001")],
) -> Claim:
    """Get one insurance claim: shipment, kind (damaged/lost), amount claimed, status (submitted, approved,
    rejected, paid) and when it was filed.

    Errors: not_found (unknown claim_id).
    """
    c = state.claims.get(claim_id)
    if c is None:
        raise ToolError(f"No claim {claim_id}; claim ids look like CL-0001", code="not_found")
    return c
