"""The ParcelDelivery database: a national parcel carrier's customers (prepaid shipping accounts and
address books), depots and their pickup windows, parcel lockers, rate quotes, shipments with parcels
and tracking events, pickups and insurance claims.  Money is EUR, stored as floats rounded to 2
decimals; weights are kilograms, dimensions centimetres.

Zones follow the first digit of a German postcode (its postal region): same region = zone 1, regions
at most 3 apart = zone 2, otherwise zone 3.  Every served city has one depot; a shipment's route runs
origin depot -> national hub (zones 2 and 3 only) -> destination depot.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

ServiceLevel = Literal["economy", "express", "overnight"]
ShipmentStatus = Literal[
    "label_created", "picked_up", "in_transit", "at_final_depot", "out_for_delivery", "delivered",
    "cancelled", "lost",
]
PickupWindow = Literal["08-12", "12-16", "16-20"]


class Address(BaseModel):
    address_id: str
    customer_id: str
    label: str
    recipient: str
    street: str
    postcode: str
    city: str


class Customer(BaseModel):
    customer_id: str
    name: str
    email: str
    phone: str
    balance: float
    kind: Literal["private", "business"] = "private"


class Depot(BaseModel):
    depot_id: str
    city: str
    postal_region: int
    is_hub: bool = False
    pickup_capacity: int = 3


class Locker(BaseModel):
    locker_id: str
    name: str
    city: str
    street: str
    max_side_cm: int
    free_compartments: int


class Parcel(BaseModel):
    weight_kg: float
    length_cm: int
    width_cm: int
    height_cm: int
    billable_kg: int


class Quote(BaseModel):
    quote_id: str
    customer_id: str
    from_address_id: str
    to_address_id: str
    service: ServiceLevel
    zone: int
    parcels: list[Parcel]
    declared_value: float
    postage: float
    insurance_fee: float
    total: float
    estimated_delivery: date
    created_at: datetime


class TrackingEvent(BaseModel):
    at: datetime
    depot_id: str | None
    status: ShipmentStatus
    description: str


class Shipment(BaseModel):
    shipment_id: str
    customer_id: str
    from_address_id: str
    to_address_id: str
    locker_id: str | None = None
    service: ServiceLevel
    zone: int
    parcels: list[Parcel]
    declared_value: float
    coverage: float
    amount_paid: float
    status: ShipmentStatus
    route: list[str]
    route_position: int = 0
    estimated_delivery: date
    requested_delivery: date | None = None
    delivered_at: datetime | None = None
    pickup_id: str | None = None
    quote_id: str | None = None
    events: list[TrackingEvent] = Field(default_factory=list)
    created_at: datetime


class Pickup(BaseModel):
    pickup_id: str
    customer_id: str
    address_id: str
    depot_id: str
    date: date
    window: PickupWindow
    shipment_ids: list[str]
    status: Literal["scheduled", "completed", "cancelled"] = "scheduled"


class Claim(BaseModel):
    claim_id: str
    shipment_id: str
    customer_id: str
    kind: Literal["damaged", "lost"]
    amount_claimed: float
    description: str = ""
    status: Literal["submitted", "approved", "rejected", "paid"] = "submitted"
    filed_at: datetime


class LedgerEntry(BaseModel):
    entry_id: str
    customer_id: str
    at: datetime
    amount: float
    kind: Literal["top_up", "label", "refund", "redirect_fee"]
    shipment_id: str | None = None


class ParcelDB(BaseModel):
    """Root model: the carrier's data plus the fixed clock and id counters."""

    carrier: str
    now: datetime
    timezone: str = "Europe/Berlin"
    customers: dict[str, Customer] = Field(default_factory=dict)
    addresses: dict[str, Address] = Field(default_factory=dict)
    depots: dict[str, Depot] = Field(default_factory=dict)
    lockers: dict[str, Locker] = Field(default_factory=dict)
    quotes: dict[str, Quote] = Field(default_factory=dict)
    shipments: dict[str, Shipment] = Field(default_factory=dict)
    pickups: dict[str, Pickup] = Field(default_factory=dict)
    claims: dict[str, Claim] = Field(default_factory=dict)
    ledger: dict[str, LedgerEntry] = Field(default_factory=dict)
    next_address_seq: int = 1
    next_quote_seq: int = 1
    next_shipment_seq: int = 1
    next_pickup_seq: int = 1
    next_claim_seq: int = 1
    next_ledger_seq: int = 1
