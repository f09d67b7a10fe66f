"""HotelBooking database: cities, hotels with room types and a nightly calendar, guests with stored
cards, quotes, bookings, payments and refunds.

Calendar model (kept compact so the small state stays readable): a room type has a ``base_rate`` and an
``inventory`` (rooms of that type).  The rate of one night is ``rate_overrides[night]`` if present,
else ``base_rate * hotel.rate_multipliers.get(night, 1.0)`` rounded to cents.  Rooms left for a night
are ``inventory - rooms_sold.get(night, 0)``; a key is removed when its count returns to 0.

All money is in ``HotelDB.currency`` and rounded to cents.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

BedType = Literal["single", "double", "queen", "king", "twin", "futon", "bunk"]
CardBrand = Literal["visa", "mastercard", "amex", "jcb", "discover"]
PaymentPurpose = Literal["booking", "modification"]
RefundReason = Literal["cancellation", "modification"]


class City(BaseModel):
    city_id: str  # IATA-like code, e.g. "LIS"
    name: str
    country: str
    tax_percent: float  # tourist/VAT tax applied to the room subtotal


class CancellationPolicy(BaseModel):
    free_until_days: int  # free cancellation while check-in is at least this many days away
    late_fee: Literal["first_night", "percent"]
    late_fee_percent: float = 0.0  # used when late_fee == "percent": percent of the booking total


class RoomType(BaseModel):
    code: str  # unique within its hotel, e.g. "DLX"
    name: str
    bed_type: BedType
    max_guests: int
    inventory: int
    base_rate: float
    rate_overrides: dict[date, float] = Field(default_factory=dict)
    rooms_sold: dict[date, int] = Field(default_factory=dict)


class Hotel(BaseModel):
    hotel_id: str
    name: str
    city_id: str
    neighborhood: str
    stars: int
    rating: float  # guest review score out of 10
    amenities: list[str]
    service_fee_per_night: float = 0.0
    cancellation_policy: CancellationPolicy
    rate_multipliers: dict[date, float] = Field(default_factory=dict)  # peak nights
    room_types: dict[str, RoomType]


class PaymentMethod(BaseModel):
    payment_method_id: str
    brand: CardBrand
    last4: str
    expiry: str  # "YYYY-MM"; valid through the end of that month
    credit_limit: float
    balance: float  # amount currently used on the card
    status: Literal["active", "blocked"] = "active"


class Guest(BaseModel):
    guest_id: str
    name: str
    email: str
    phone: str
    payment_methods: dict[str, PaymentMethod] = Field(default_factory=dict)


class Quote(BaseModel):
    quote_id: str
    hotel_id: str
    room_type: str
    check_in: date
    check_out: date
    nights: int
    guests: int
    nightly_rates: dict[date, float]
    subtotal: float
    taxes: float
    fees: float
    total: float
    created_at: datetime
    expires_at: datetime
    status: Literal["open", "booked"] = "open"
    booking_id: str | None = None


class Booking(BaseModel):
    booking_id: str
    guest_id: str
    hotel_id: str
    room_type: str
    check_in: date
    check_out: date
    nights: int
    guests: int
    nightly_rates: dict[date, float]
    subtotal: float
    taxes: float
    fees: float
    total: float  # current price of the stay
    amount_paid: float  # charges minus refunds so far
    payment_method_id: str
    quote_id: str | None = None
    special_requests: str = ""
    status: Literal["confirmed", "cancelled"] = "confirmed"
    created_at: datetime
    updated_at: datetime | None = None
    cancelled_at: datetime | None = None
    cancellation_fee: float | None = None
    cancel_reason: str = ""
    payment_ids: list[str] = Field(default_factory=list)
    refund_ids: list[str] = Field(default_factory=list)


class Payment(BaseModel):
    payment_id: str
    booking_id: str
    guest_id: str
    payment_method_id: str
    amount: float
    purpose: PaymentPurpose
    created_at: datetime


class Refund(BaseModel):
    refund_id: str
    booking_id: str
    guest_id: str
    payment_method_id: str
    amount: float
    reason: RefundReason
    created_at: datetime


class HotelDB(BaseModel):
    """The whole HotelBooking database (root model)."""

    now: datetime  # fixed clock; tools never read the system clock
    currency: str = "USD"
    last_bookable_night: date  # rates and availability are published through this night
    max_nights: int = 21
    quote_ttl_minutes: int = 60
    new_card_limit: float = 5000.0  # authorization limit given to newly added cards
    cities: dict[str, City]
    hotels: dict[str, Hotel]
    guests: dict[str, Guest]
    quotes: dict[str, Quote] = Field(default_factory=dict)
    bookings: dict[str, Booking] = Field(default_factory=dict)
    payments: dict[str, Payment] = Field(default_factory=dict)
    refunds: dict[str, Refund] = Field(default_factory=dict)
    next_quote_seq: int = 1
    next_booking_seq: int = 1
    next_payment_seq: int = 1
    next_refund_seq: int = 1
    next_payment_method_seq: int = 1
