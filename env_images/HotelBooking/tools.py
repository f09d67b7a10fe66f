"""HotelBooking tools.

Id chain: list_hotel_destinations / search_hotels -> get_hotel_details / check_room_availability ->
create_hotel_quote -> create_hotel_booking -> modify_hotel_booking / cancel_hotel_booking.

Every domain failure raises ToolError before the state is touched.  The clock is ``state.now``.
"""

from __future__ import annotations

from collections.abc import Container
from datetime import date, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gym_envfactory import ToolError, tool

from .state import (
    Booking,
    CancellationPolicy,
    CardBrand,
    Guest,
    Hotel,
    HotelDB,
    Payment,
    PaymentMethod,
    PaymentPurpose,
    Quote,
    Refund,
    RefundReason,
    RoomType,
)

# ----------------------------------------------------------------------------- argument types

HotelId = Annotated[str, Field(description="Hotel id, e.g. H-101 (from search_hotels)")]
RoomCode = Annotated[str, Field(description="Room type code within the hotel, e.g. DLX (from get_hotel_details)")]
CheckIn = Annotated[date, Field(description="Check-in date, YYYY-MM-DD")]
CheckOut = Annotated[date, Field(description="Check-out date, YYYY-MM-DD (the morning after the last night)")]
Guests = Annotated[int, Field(ge=1, le=12, description="Number of guests staying in the room")]
GuestId = Annotated[str, Field(description="Guest id, e.g. G-001 (find it with find_guest_by_email)")]
BookingId = Annotated[str, Field(description="Booking id, e.g. BK-0001")]


# ----------------------------------------------------------------------------- result models


class DestinationSummary(BaseModel):
    city_id: str
    name: str
    country: str
    tax_percent: float
    hotel_count: int


class HotelSearchHit(BaseModel):
    hotel_id: str
    name: str
    city: str
    neighborhood: str
    stars: int
    rating: float
    amenities: list[str]
    free_cancellation_days: int
    cheapest_room_type: str
    cheapest_room_name: str
    avg_nightly_rate: float
    stay_subtotal: float | None


class RoomTypeInfo(BaseModel):
    code: str
    name: str
    bed_type: str
    max_guests: int
    base_rate: float


class HotelDetails(BaseModel):
    hotel_id: str
    name: str
    city: str
    country: str
    neighborhood: str
    stars: int
    rating: float
    amenities: list[str]
    service_fee_per_night: float
    city_tax_percent: float
    cancellation_policy: CancellationPolicy
    cancellation_summary: str
    room_types: list[RoomTypeInfo]


class RoomAvailability(BaseModel):
    code: str
    name: str
    bed_type: str
    max_guests: int
    fits_party: bool
    available: bool
    rooms_left: int
    nightly_rates: dict[date, float]
    avg_nightly_rate: float
    subtotal: float


class PaymentMethodView(BaseModel):
    payment_method_id: str
    brand: str
    last4: str
    expiry: str
    status: str
    available_credit: float


class GuestProfile(BaseModel):
    guest_id: str
    name: str
    email: str
    phone: str
    payment_methods: list[PaymentMethodView]


class BookingSummary(BaseModel):
    booking_id: str
    hotel_id: str
    hotel_name: str
    city: str
    room_type: str
    check_in: date
    check_out: date
    guests: int
    status: str
    total: float


class BookingDetails(Booking):
    hotel_name: str
    room_name: str
    payments: list[Payment]
    refunds: list[Refund]


class CancellationPreview(BaseModel):
    booking_id: str
    hotel_name: str
    check_in: date
    days_before_check_in: int
    free_cancellation_until: date
    policy: str
    cancellation_fee: float
    refund_amount: float


class CancellationResult(BaseModel):
    booking_id: str
    status: str
    cancellation_fee: float
    refund_amount: float
    refund_id: str | None
    refunded_to: str | None


class ModificationResult(BaseModel):
    booking_id: str
    hotel_id: str
    room_type: str
    check_in: date
    check_out: date
    guests: int
    old_total: float
    new_total: float
    price_difference: float
    payment_id: str | None
    refund_id: str | None
    payment_method_id: str


# ----------------------------------------------------------------------------- helpers


def _money(x: float) -> float:
    return round(x + 0.0, 2)


def _today(state: HotelDB) -> date:
    return state.now.date()


def _hotel(state: HotelDB, hotel_id: str) -> Hotel:
    h = state.hotels.get(hotel_id)
    if h is None:
        raise ToolError(f"No hotel {hotel_id}; hotel ids look like H-101 (use search_hotels)", code="not_found")
    return h


def _room(hotel: Hotel, code: str) -> RoomType:
    rt = hotel.room_types.get(code)
    if rt is None:
        codes = ", ".join(hotel.room_types)
        raise ToolError(f"{hotel.name} ({hotel.hotel_id}) has no room type {code!r}; its room types are: {codes}",
                        code="not_found")
    return rt


def _guest(state: HotelDB, guest_id: str) -> Guest:
    g = state.guests.get(guest_id)
    if g is None:
        raise ToolError(f"No guest {guest_id}; guest ids look like G-001 (use find_guest_by_email)", code="not_found")
    return g


def _booking(state: HotelDB, booking_id: str) -> Booking:
    b = state.bookings.get(booking_id)
    if b is None:
        raise ToolError(f"No booking {booking_id}; booking ids look like BK-0001 (use list_guest_bookings)",
                        code="not_found")
    return b


def _city_of(state: HotelDB, hotel: Hotel) -> str:
    c = state.cities.get(hotel.city_id)
    return c.name if c else hotel.city_id


def _nights(check_in: date, check_out: date) -> list[date]:
    return [check_in + timedelta(days=i) for i in range((check_out - check_in).days)]


def _check_stay(state: HotelDB, check_in: date, check_out: date) -> None:
    if check_out <= check_in:
        raise ToolError(f"check_out {check_out} must be after check_in {check_in}", code="invalid_dates")
    if check_in < _today(state):
        raise ToolError(f"check_in {check_in} is in the past (today is {_today(state)})", code="invalid_dates")
    n = (check_out - check_in).days
    if n > state.max_nights:
        raise ToolError(f"a stay is limited to {state.max_nights} nights; {n} requested", code="invalid_dates")
    if check_out - timedelta(days=1) > state.last_bookable_night:
        raise ToolError(f"rates are published only for nights through {state.last_bookable_night}; "
                        f"choose a check_out on or before {state.last_bookable_night + timedelta(days=1)}",
                        code="invalid_dates")


def _rate(hotel: Hotel, rt: RoomType, night: date) -> float:
    if night in rt.rate_overrides:
        return _money(rt.rate_overrides[night])
    return _money(rt.base_rate * hotel.rate_multipliers.get(night, 1.0))


def _left(rt: RoomType, night: date) -> int:
    return rt.inventory - rt.rooms_sold.get(night, 0)


def _price(state: HotelDB, hotel: Hotel, rt: RoomType, check_in: date, check_out: date) -> dict:
    nights = _nights(check_in, check_out)
    rates = {d: _rate(hotel, rt, d) for d in nights}
    subtotal = _money(sum(rates.values()))
    city = state.cities.get(hotel.city_id)
    taxes = _money(subtotal * (city.tax_percent if city else 0.0) / 100)
    fees = _money(hotel.service_fee_per_night * len(nights))
    return {"nights": len(nights), "nightly_rates": rates, "subtotal": subtotal, "taxes": taxes, "fees": fees,
            "total": _money(subtotal + taxes + fees)}


def _sold_out_nights(rt: RoomType, nights: list[date], released: Container[date] = frozenset()) -> list[date]:
    return [d for d in nights if _left(rt, d) + (1 if d in released else 0) < 1]


def _take(rt: RoomType, nights: list[date], delta: int) -> None:
    sold = dict(rt.rooms_sold)
    for d in nights:
        v = sold.get(d, 0) + delta
        if v:
            sold[d] = v
        else:
            sold.pop(d, None)
    rt.rooms_sold = dict(sorted(sold.items()))


def _card(guest: Guest, payment_method_id: str) -> PaymentMethod:
    pm = guest.payment_methods.get(payment_method_id)
    if pm is None:
        on_file = ", ".join(f"{p.payment_method_id} ({p.brand} {p.last4})" for p in guest.payment_methods.values())
        raise ToolError(f"{guest.name} has no payment method {payment_method_id}; on file: {on_file or 'none'}",
                        code="not_found")
    return pm


def _expired(state: HotelDB, pm: PaymentMethod) -> bool:
    return pm.expiry < state.now.strftime("%Y-%m")


def _check_charge(state: HotelDB, pm: PaymentMethod, amount: float) -> None:
    if pm.status != "active":
        raise ToolError(f"card {pm.payment_method_id} ({pm.brand} {pm.last4}) is blocked by the issuer; "
                        "use another payment method", code="payment_declined")
    if _expired(state, pm):
        raise ToolError(f"card {pm.payment_method_id} ({pm.brand} {pm.last4}) expired {pm.expiry}; "
                        "use another payment method or add a new card", code="payment_declined")
    available = _money(pm.credit_limit - pm.balance)
    if amount > available + 1e-9:
        raise ToolError(f"card {pm.payment_method_id} ({pm.brand} {pm.last4}) has {available:.2f} available, "
                        f"{amount:.2f} needed; use another payment method", code="insufficient_funds")


def _pay(state: HotelDB, booking: Booking, pm: PaymentMethod, amount: float, purpose: PaymentPurpose) -> str:
    pid = f"PAY-{state.next_payment_seq:04d}"
    state.next_payment_seq += 1
    state.payments[pid] = Payment(payment_id=pid, booking_id=booking.booking_id, guest_id=booking.guest_id,
                                  payment_method_id=pm.payment_method_id, amount=amount, purpose=purpose,
                                  created_at=state.now)
    pm.balance = _money(pm.balance + amount)
    booking.payment_ids.append(pid)
    booking.amount_paid = _money(booking.amount_paid + amount)
    return pid


def _refund(state: HotelDB, booking: Booking, amount: float, reason: RefundReason) -> str:
    rid = f"RF-{state.next_refund_seq:04d}"
    state.next_refund_seq += 1
    state.refunds[rid] = Refund(refund_id=rid, booking_id=booking.booking_id, guest_id=booking.guest_id,
                                payment_method_id=booking.payment_method_id, amount=amount, reason=reason,
                                created_at=state.now)
    guest = state.guests.get(booking.guest_id)
    pm = guest.payment_methods.get(booking.payment_method_id) if guest else None
    if pm is not None:
        pm.balance = _money(pm.balance - amount)
    booking.refund_ids.append(rid)
    booking.amount_paid = _money(booking.amount_paid - amount)
    return rid


def _policy_text(p: CancellationPolicy) -> str:
    fee = "one night's room rate" if p.late_fee == "first_night" else f"{p.late_fee_percent:g}% of the total"
    return f"Free cancellation until {p.free_until_days} day(s) before check-in; after that the fee is {fee}."


def _cancellation_terms(state: HotelDB, booking: Booking) -> tuple[int, date, float]:
    hotel = state.hotels[booking.hotel_id]
    p = hotel.cancellation_policy
    days = (booking.check_in - _today(state)).days
    free_until = booking.check_in - timedelta(days=p.free_until_days)
    if days >= p.free_until_days:
        fee = 0.0
    elif p.late_fee == "first_night":
        fee = next(iter(booking.nightly_rates.values()), 0.0)
    else:
        fee = _money(booking.total * p.late_fee_percent / 100)
    return days, free_until, _money(min(fee, booking.amount_paid))


def _check_changeable(state: HotelDB, booking: Booking, action: str) -> None:
    if booking.status == "cancelled":
        raise ToolError(f"booking {booking.booking_id} was already cancelled on {booking.cancelled_at}",
                        code="already_cancelled")
    if booking.check_in <= _today(state):
        raise ToolError(f"booking {booking.booking_id} checked in on {booking.check_in}; a stay that has started "
                        f"or ended cannot be {action} online", code="invalid_state")


def _card_view(pm: PaymentMethod) -> PaymentMethodView:
    return PaymentMethodView(payment_method_id=pm.payment_method_id, brand=pm.brand, last4=pm.last4,
                             expiry=pm.expiry, status=pm.status,
                             available_credit=_money(pm.credit_limit - pm.balance))


def _profile(g: Guest) -> GuestProfile:
    return GuestProfile(guest_id=g.guest_id, name=g.name, email=g.email, phone=g.phone,
                        payment_methods=[_card_view(p) for p in g.payment_methods.values()])


# ----------------------------------------------------------------------------- read tools


@tool(read_only=True)
def list_hotel_destinations(
    state: HotelDB,
    *,
    country: Annotated[str | None, Field(description="Only cities in this country, e.g. Portugal")] = None,
) -> list[DestinationSummary]:
    """List the cities where hotels can be booked, with the city tax rate and the number of hotels.

    Returns a list of {city_id, name, country, tax_percent, hotel_count}.
    Errors: not_found when no city is in the given country.
    """
    counts: dict[str, int] = {}
    for h in state.hotels.values():
        counts[h.city_id] = counts.get(h.city_id, 0) + 1
    out = [DestinationSummary(city_id=c.city_id, name=c.name, country=c.country, tax_percent=c.tax_percent,
                              hotel_count=counts.get(c.city_id, 0))
           for c in state.cities.values()
           if country is None or c.country.lower() == country.strip().lower()]
    if not out:
        countries = ", ".join(sorted({c.country for c in state.cities.values()}))
        raise ToolError(f"No destinations in {country!r}; countries served: {countries}", code="not_found")
    return sorted(out, key=lambda d: d.name)


@tool(read_only=True)
def search_hotels(
    state: HotelDB,
    *,
    city: Annotated[str, Field(description="City name (e.g. Lisbon) or city code (e.g. LIS)")],
    check_in: Annotated[date | None, Field(description="Check-in date, YYYY-MM-DD; omit (with check_out) to browse without dates")] = None,
    check_out: Annotated[date | None, Field(description="Check-out date, YYYY-MM-DD")] = None,
    guests: Annotated[int | None, Field(ge=1, le=12, description="Party size in one room (default 1)")] = None,
    max_nightly_rate: Annotated[float | None, Field(gt=0, description="Only hotels whose cheapest fitting room averages at most this per night, before taxes")] = None,
    min_stars: Annotated[int | None, Field(ge=1, le=5, description="Minimum star category")] = None,
    amenities: Annotated[list[str], Field(description="Amenities the hotel must all have, e.g. [\"pool\", \"parking\"]")] = [],  # noqa: B006
    sort_by: Annotated[Literal["price", "rating", "stars"], Field(description="price: cheapest first; rating/stars: highest first")] = "price",
) -> list[HotelSearchHit]:
    """Search hotels in a city; with dates, only hotels that have a room for the whole stay.

    With check_in and check_out, each hotel's cheapest room type that fits `guests` and has a room left
    every night is reported with its average nightly rate and the stay subtotal (before taxes and fees);
    hotels with nothing available are left out. Without dates (browsing, e.g. to find a hotel's id by
    name) the cheapest fitting room's base nightly rate is reported and stay_subtotal is null.
    An empty list means nothing matches the filters.
    Returns up to 20 hits: {hotel_id, name, city, neighborhood, stars, rating, amenities,
    free_cancellation_days, cheapest_room_type, cheapest_room_name, avg_nightly_rate, stay_subtotal}.
    Errors: not_found (unknown city), invalid_dates (only one of the two dates, check_out not after
    check_in, check_in in the past, stay too long or beyond the published calendar),
    invalid_request (an amenity no hotel offers).
    """
    key = city.strip().lower()
    c = next((c for c in state.cities.values() if c.name.lower() == key or c.city_id.lower() == key), None)
    if c is None:
        names = ", ".join(sorted(x.name for x in state.cities.values()))
        raise ToolError(f"No destination {city!r}; cities served: {names}", code="not_found")
    if (check_in is None) != (check_out is None):
        raise ToolError("give both check_in and check_out, or neither to browse without dates",
                        code="invalid_dates")
    if check_in is not None and check_out is not None:
        _check_stay(state, check_in, check_out)
    party = guests or 1
    wanted = [a.strip().lower() for a in amenities]
    known = {a for h in state.hotels.values() for a in h.amenities}
    unknown = [a for a in wanted if a not in known]
    if unknown:
        raise ToolError(f"Unknown amenities {unknown}; known amenities: {', '.join(sorted(known))}",
                        code="invalid_request")
    nights = _nights(check_in, check_out) if check_in and check_out else []
    hits: list[HotelSearchHit] = []
    for h in state.hotels.values():
        if h.city_id != c.city_id:
            continue
        if min_stars is not None and h.stars < min_stars:
            continue
        if any(a not in h.amenities for a in wanted):
            continue
        best: tuple[float, str] | None = None
        for rt in h.room_types.values():
            if rt.max_guests < party or _sold_out_nights(rt, nights):
                continue
            sub = _money(sum(_rate(h, rt, d) for d in nights)) if nights else rt.base_rate
            if best is None or sub < best[0]:
                best = (sub, rt.code)
        if best is None:
            continue
        avg = _money(best[0] / len(nights)) if nights else best[0]
        if max_nightly_rate is not None and avg > max_nightly_rate:
            continue
        rt = h.room_types[best[1]]
        hits.append(HotelSearchHit(
            hotel_id=h.hotel_id, name=h.name, city=c.name, neighborhood=h.neighborhood, stars=h.stars,
            rating=h.rating, amenities=h.amenities, free_cancellation_days=h.cancellation_policy.free_until_days,
            cheapest_room_type=rt.code, cheapest_room_name=rt.name, avg_nightly_rate=avg,
            stay_subtotal=best[0] if nights else None))
    if sort_by == "price":
        hits.sort(key=lambda x: (x.avg_nightly_rate, x.hotel_id))
    elif sort_by == "rating":
        hits.sort(key=lambda x: (-x.rating, x.hotel_id))
    else:
        hits.sort(key=lambda x: (-x.stars, -x.rating, x.hotel_id))
    return hits[:20]


@tool(read_only=True)
def get_hotel_details(state: HotelDB, *, hotel_id: HotelId) -> HotelDetails:
    """Get one hotel's details: address area, stars, rating, amenities, service fee per night, city tax,
    cancellation policy (with a plain-language summary) and its room types (code, name, bed type,
    max guests, base nightly rate; peak nights cost more, see check_room_availability).

    Errors: not_found (unknown hotel id).
    """
    h = _hotel(state, hotel_id)
    c = state.cities.get(h.city_id)
    return HotelDetails(
        hotel_id=h.hotel_id, name=h.name, city=c.name if c else h.city_id, country=c.country if c else "",
        neighborhood=h.neighborhood, stars=h.stars, rating=h.rating, amenities=h.amenities,
        service_fee_per_night=h.service_fee_per_night, city_tax_percent=c.tax_percent if c else 0.0,
        cancellation_policy=h.cancellation_policy, cancellation_summary=_policy_text(h.cancellation_policy),
        room_types=[RoomTypeInfo(code=r.code, name=r.name, bed_type=r.bed_type, max_guests=r.max_guests,
                                 base_rate=r.base_rate) for r in h.room_types.values()])


@tool(read_only=True)
def check_room_availability(
    state: HotelDB,
    *,
    hotel_id: HotelId,
    check_in: CheckIn,
    check_out: CheckOut,
    guests: Annotated[int | None, Field(ge=1, le=12, description="Party size; sets fits_party")] = None,
) -> list[RoomAvailability]:
    """Check every room type of a hotel for a stay: whether a room is free every night, the fewest rooms
    left on any night, the nightly rates, the average rate and the subtotal before taxes and fees.

    Returns one entry per room type: {code, name, bed_type, max_guests, fits_party, available,
    rooms_left, nightly_rates, avg_nightly_rate, subtotal}. Use create_hotel_quote for the full price.
    Errors: not_found (unknown hotel), invalid_dates (check_out not after check_in, past check_in,
    stay too long or beyond the published calendar).
    """
    h = _hotel(state, hotel_id)
    _check_stay(state, check_in, check_out)
    nights = _nights(check_in, check_out)
    out = []
    for rt in h.room_types.values():
        rates = {d: _rate(h, rt, d) for d in nights}
        left = min(_left(rt, d) for d in nights)
        sub = _money(sum(rates.values()))
        out.append(RoomAvailability(
            code=rt.code, name=rt.name, bed_type=rt.bed_type, max_guests=rt.max_guests,
            fits_party=guests is None or guests <= rt.max_guests, available=left > 0, rooms_left=max(left, 0),
            nightly_rates=rates, avg_nightly_rate=_money(sub / len(nights)), subtotal=sub))
    return out


@tool(read_only=True)
def find_guest_by_email(
    state: HotelDB,
    *,
    email: Annotated[str, Field(description="The guest's email address (case-insensitive)")],
) -> GuestProfile:
    """Find a guest profile by email address.

    Returns {guest_id, name, email, phone, payment_methods: [{payment_method_id, brand, last4, expiry,
    status, available_credit}]}.
    Errors: not_found (no guest with that email).
    """
    key = email.strip().lower()
    for g in state.guests.values():
        if g.email.lower() == key:
            return _profile(g)
    raise ToolError(f"No guest with email {email!r}; check the spelling or ask the user", code="not_found")


@tool(read_only=True)
def get_guest_profile(state: HotelDB, *, guest_id: GuestId) -> GuestProfile:
    """Get a guest profile by guest id: name, contact details and stored cards with available credit.

    Returns {guest_id, name, email, phone, payment_methods: [{payment_method_id, brand, last4, expiry,
    status, available_credit}]}.
    Errors: not_found (unknown guest id).
    """
    return _profile(_guest(state, guest_id))


@tool(read_only=True)
def list_guest_bookings(
    state: HotelDB,
    *,
    guest_id: GuestId,
    status: Annotated[Literal["confirmed", "cancelled"] | None, Field(description="Only bookings with this status")] = None,
) -> list[BookingSummary]:
    """List a guest's hotel bookings (past and upcoming), ordered by check-in date.

    Returns [{booking_id, hotel_id, hotel_name, city, room_type, check_in, check_out, guests, status, total}];
    an empty list when the guest has none.
    Errors: not_found (unknown guest id).
    """
    _guest(state, guest_id)
    out = []
    for b in state.bookings.values():
        if b.guest_id != guest_id or (status is not None and b.status != status):
            continue
        h = state.hotels[b.hotel_id]
        out.append(BookingSummary(booking_id=b.booking_id, hotel_id=b.hotel_id, hotel_name=h.name,
                                  city=_city_of(state, h), room_type=b.room_type, check_in=b.check_in,
                                  check_out=b.check_out, guests=b.guests, status=b.status, total=b.total))
    return sorted(out, key=lambda x: (x.check_in, x.booking_id))


@tool(read_only=True)
def get_hotel_booking(state: HotelDB, *, booking_id: BookingId) -> BookingDetails:
    """Get one booking with everything about it: guest, hotel and room, dates, nightly rates, subtotal,
    taxes, fees, total, amount paid, the card it is paid with, status, cancellation details, and the
    payment and refund records.

    Errors: not_found (unknown booking id).
    """
    b = _booking(state, booking_id)
    h = state.hotels[b.hotel_id]
    rt = h.room_types.get(b.room_type)
    return BookingDetails(**b.model_dump(), hotel_name=h.name, room_name=rt.name if rt else b.room_type,
                          payments=[state.payments[p] for p in b.payment_ids if p in state.payments],
                          refunds=[state.refunds[r] for r in b.refund_ids if r in state.refunds])


@tool(read_only=True)
def preview_hotel_cancellation(state: HotelDB, *, booking_id: BookingId) -> CancellationPreview:
    """Show what cancelling a booking now would cost, without cancelling it.

    Cancellation is free while check-in is at least the hotel's free_until_days away (counted from
    today, state clock); later the fee is one night's room rate or a percentage of the total.
    Returns {booking_id, hotel_name, check_in, days_before_check_in, free_cancellation_until, policy,
    cancellation_fee, refund_amount}.
    Errors: not_found, already_cancelled, invalid_state (the stay has started or ended).
    """
    b = _booking(state, booking_id)
    _check_changeable(state, b, "cancelled")
    days, free_until, fee = _cancellation_terms(state, b)
    h = state.hotels[b.hotel_id]
    return CancellationPreview(booking_id=b.booking_id, hotel_name=h.name, check_in=b.check_in,
                               days_before_check_in=days, free_cancellation_until=free_until,
                               policy=_policy_text(h.cancellation_policy), cancellation_fee=fee,
                               refund_amount=_money(b.amount_paid - fee))


# ----------------------------------------------------------------------------- write tools


@tool
def create_hotel_quote(
    state: HotelDB,
    *,
    hotel_id: HotelId,
    room_type: RoomCode,
    check_in: CheckIn,
    check_out: CheckOut,
    guests: Guests,
) -> Quote:
    """Price one room of a room type for a stay and hold the price as a quote.

    The quote has nightly rates, subtotal, taxes (city tax % of the subtotal), fees (hotel service fee
    per night) and total, and expires quote_ttl_minutes after creation (state clock). Book it with
    create_hotel_booking. Returns the quote {quote_id (Q-0001...), ..., total, expires_at, status}.
    Errors: not_found (hotel or room type), invalid_dates, capacity_exceeded (more guests than the room
    holds), sold_out (no room of that type left on some night; the message lists the nights).
    """
    h = _hotel(state, hotel_id)
    rt = _room(h, room_type)
    _check_stay(state, check_in, check_out)
    if guests > rt.max_guests:
        raise ToolError(f"{rt.name} ({rt.code}) sleeps at most {rt.max_guests}; {guests} guests requested. "
                        "Choose a larger room type", code="capacity_exceeded")
    nights = _nights(check_in, check_out)
    full = _sold_out_nights(rt, nights)
    if full:
        raise ToolError(f"{h.name} has no {rt.name} ({rt.code}) left on {', '.join(map(str, full))}; "
                        "try another room type or dates", code="sold_out")
    p = _price(state, h, rt, check_in, check_out)
    qid = f"Q-{state.next_quote_seq:04d}"
    state.next_quote_seq += 1
    q = Quote(quote_id=qid, hotel_id=h.hotel_id, room_type=rt.code, check_in=check_in, check_out=check_out,
              guests=guests, created_at=state.now,
              expires_at=state.now + timedelta(minutes=state.quote_ttl_minutes), **p)
    state.quotes[qid] = q
    return q


@tool
def create_hotel_booking(
    state: HotelDB,
    *,
    quote_id: Annotated[str, Field(description="An open quote id from create_hotel_quote, e.g. Q-0002")],
    guest_id: GuestId,
    payment_method_id: Annotated[str, Field(description="One of the guest's stored cards, e.g. PM-0001")],
    special_requests: Annotated[str, Field(description="Free-text requests passed to the hotel")] = "",
) -> BookingDetails:
    """Book a quoted stay for a guest and charge the quote total to one of the guest's stored cards.

    Takes a room off the hotel's availability for every night, records the charge as a payment
    (PAY-0001...) and marks the quote as used. Returns the new booking (BK-0001...) with its payment.
    Errors: not_found (quote, guest, or a card not on the guest's profile), quote_expired (request a new
    quote), invalid_state (quote already used), sold_out (the last room went since quoting),
    payment_declined (card blocked or expired), insufficient_funds (not enough available credit).
    """
    q = state.quotes.get(quote_id)
    if q is None:
        raise ToolError(f"No quote {quote_id}; create one with create_hotel_quote", code="not_found")
    if q.status == "booked":
        raise ToolError(f"quote {quote_id} was already used for booking {q.booking_id}", code="invalid_state")
    if q.expires_at <= state.now:
        raise ToolError(f"quote {quote_id} expired at {q.expires_at.isoformat()}; create a new quote",
                        code="quote_expired")
    g = _guest(state, guest_id)
    pm = _card(g, payment_method_id)
    h = _hotel(state, q.hotel_id)
    rt = _room(h, q.room_type)
    _check_stay(state, q.check_in, q.check_out)
    nights = _nights(q.check_in, q.check_out)
    full = _sold_out_nights(rt, nights)
    if full:
        raise ToolError(f"{h.name} has no {rt.name} ({rt.code}) left on {', '.join(map(str, full))}; "
                        "quote another room type or dates", code="sold_out")
    _check_charge(state, pm, q.total)
    bid = f"BK-{state.next_booking_seq:04d}"
    state.next_booking_seq += 1
    b = Booking(booking_id=bid, guest_id=g.guest_id, hotel_id=h.hotel_id, room_type=rt.code,
                check_in=q.check_in, check_out=q.check_out, nights=q.nights, guests=q.guests,
                nightly_rates=dict(q.nightly_rates), subtotal=q.subtotal, taxes=q.taxes, fees=q.fees,
                total=q.total, amount_paid=0.0, payment_method_id=pm.payment_method_id, quote_id=q.quote_id,
                special_requests=special_requests.strip(), created_at=state.now)
    state.bookings[bid] = b
    _pay(state, b, pm, q.total, "booking")
    _take(rt, nights, +1)
    q.status = "booked"
    q.booking_id = bid
    return get_hotel_booking(state, booking_id=bid)


@tool
def modify_hotel_booking(
    state: HotelDB,
    *,
    booking_id: BookingId,
    check_in: Annotated[date, Field(description="New check-in date (repeat the current one if unchanged)")],
    check_out: Annotated[date, Field(description="New check-out date (repeat the current one if unchanged)")],
    room_type: Annotated[str, Field(description="Room type code in the same hotel (repeat the current one if unchanged)")],
    guests: Annotated[int, Field(ge=1, le=12, description="Party size (repeat the current one if unchanged)")],
) -> ModificationResult:
    """Change a confirmed booking's dates, room type and/or party size in the same hotel.

    Give the complete new stay (current values for whatever does not change). The stay is re-priced at
    today's rates; a higher price charges the difference to the booking's card (new payment), a lower
    price refunds the difference to it (new refund). Availability of the old nights is released and the
    new nights are taken.
    Returns {booking_id, ..., old_total, new_total, price_difference, payment_id, refund_id}.
    Errors: not_found (booking or room type), already_cancelled, invalid_state (stay started),
    no_change (identical to the current booking), invalid_dates, capacity_exceeded, sold_out,
    payment_declined / insufficient_funds (for a price increase).
    """
    b = _booking(state, booking_id)
    _check_changeable(state, b, "changed")
    h = state.hotels[b.hotel_id]
    new_rt = _room(h, room_type)
    if (check_in, check_out, room_type, guests) == (b.check_in, b.check_out, b.room_type, b.guests):
        raise ToolError(f"booking {booking_id} already is {b.room_type} from {b.check_in} to {b.check_out} for "
                        f"{b.guests} guest(s); nothing to change", code="no_change")
    _check_stay(state, check_in, check_out)
    if guests > new_rt.max_guests:
        raise ToolError(f"{new_rt.name} ({new_rt.code}) sleeps at most {new_rt.max_guests}; {guests} guests "
                        "requested", code="capacity_exceeded")
    old_nights = _nights(b.check_in, b.check_out)
    new_nights = _nights(check_in, check_out)
    released = set(old_nights) if new_rt.code == b.room_type else set()
    full = _sold_out_nights(new_rt, new_nights, released)
    if full:
        raise ToolError(f"{h.name} has no {new_rt.name} ({new_rt.code}) left on {', '.join(map(str, full))}",
                        code="sold_out")
    p = _price(state, h, new_rt, check_in, check_out)
    old_total = b.total
    diff = _money(p["total"] - b.amount_paid)
    g = _guest(state, b.guest_id)
    pm = _card(g, b.payment_method_id)
    if diff > 0:
        _check_charge(state, pm, diff)
    # ---- all checks passed: mutate
    _take(h.room_types[b.room_type], old_nights, -1)
    _take(new_rt, new_nights, +1)
    b.check_in, b.check_out, b.room_type, b.guests = check_in, check_out, new_rt.code, guests
    b.nights, b.nightly_rates = p["nights"], p["nightly_rates"]
    b.subtotal, b.taxes, b.fees, b.total = p["subtotal"], p["taxes"], p["fees"], p["total"]
    b.updated_at = state.now
    pay_id = _pay(state, b, pm, diff, "modification") if diff > 0 else None
    ref_id = _refund(state, b, -diff, "modification") if diff < 0 else None
    return ModificationResult(booking_id=b.booking_id, hotel_id=b.hotel_id, room_type=b.room_type,
                              check_in=b.check_in, check_out=b.check_out, guests=b.guests, old_total=old_total,
                              new_total=b.total, price_difference=diff, payment_id=pay_id, refund_id=ref_id,
                              payment_method_id=b.payment_method_id)


@tool(destructive=True)
def cancel_hotel_booking(
    state: HotelDB,
    *,
    booking_id: BookingId,
    reason: Annotated[str, Field(description="Why the guest cancels (free text)")] = "",
) -> CancellationResult:
    """Cancel a confirmed booking under the hotel's cancellation policy and refund the rest.

    Free while check-in is at least the hotel's free_until_days away; later the fee is one night's room
    rate or a percentage of the total (see preview_hotel_cancellation). The refund (amount paid minus
    fee) goes back to the booking's card as a refund record (RF-0001...), and the room is released for
    every night. Returns {booking_id, status, cancellation_fee, refund_amount, refund_id, refunded_to}.
    Errors: not_found, already_cancelled, invalid_state (the stay has started or ended).
    """
    b = _booking(state, booking_id)
    _check_changeable(state, b, "cancelled")
    _, _, fee = _cancellation_terms(state, b)
    refund_amount = _money(b.amount_paid - fee)
    h = state.hotels[b.hotel_id]
    rt = h.room_types.get(b.room_type)
    if rt is not None:
        _take(rt, [d for d in _nights(b.check_in, b.check_out) if d in rt.rooms_sold], -1)
    b.status = "cancelled"
    b.cancelled_at = state.now
    b.cancellation_fee = fee
    b.cancel_reason = reason.strip()
    b.updated_at = state.now
    rid = _refund(state, b, refund_amount, "cancellation") if refund_amount > 0 else None
    return CancellationResult(booking_id=b.booking_id, status=b.status, cancellation_fee=fee,
                              refund_amount=refund_amount, refund_id=rid,
                              refunded_to=b.payment_method_id if rid else None)


@tool
def add_guest_payment_method(
    state: HotelDB,
    *,
    guest_id: GuestId,
    brand: Annotated[CardBrand, Field(description="Card network")],
    last4: Annotated[str, Field(pattern=r"^\d{4}$", description="Last four digits of the card number")],
    expiry: Annotated[str, Field(pattern=r"^\d{4}-(0[1-9]|1[0-2])$", description="Expiry month, YYYY-MM")],
) -> PaymentMethodView:
    """Store a new card on a guest's profile so it can pay for bookings.

    New cards get the platform's standard authorization limit (state.new_card_limit) and a zero balance.
    Returns the stored card {payment_method_id (PM-0001...), brand, last4, expiry, status, available_credit}.
    Errors: not_found (unknown guest), card_expired (expiry month before the current month),
    already_exists (the same brand and last four digits are already on file).
    """
    g = _guest(state, guest_id)
    if expiry < state.now.strftime("%Y-%m"):
        raise ToolError(f"card expiry {expiry} is in the past; ask the guest for a valid card", code="card_expired")
    for p in g.payment_methods.values():
        if p.brand == brand and p.last4 == last4:
            raise ToolError(f"{brand} ending {last4} is already on file as {p.payment_method_id}",
                            code="already_exists")
    pid = f"PM-{state.next_payment_method_seq:04d}"
    state.next_payment_method_seq += 1
    pm = PaymentMethod(payment_method_id=pid, brand=brand, last4=last4, expiry=expiry,
                       credit_limit=state.new_card_limit, balance=0.0)
    g.payment_methods[pid] = pm
    return _card_view(pm)


@tool
def update_guest_contact(
    state: HotelDB,
    *,
    guest_id: GuestId,
    email: Annotated[str | None, Field(description="New email address")] = None,
    phone: Annotated[str | None, Field(description="New phone number, e.g. +351 912 345 678")] = None,
) -> GuestProfile:
    """Update a guest's email and/or phone number (give at least one).

    Returns the updated guest profile.
    Errors: not_found (unknown guest), invalid_request (nothing given, or a malformed email),
    already_exists (email used by another guest), no_change (values equal the current ones).
    """
    g = _guest(state, guest_id)
    if email is None and phone is None:
        raise ToolError("give a new email and/or phone", code="invalid_request")
    new_email = email.strip() if email is not None else g.email
    new_phone = phone.strip() if phone is not None else g.phone
    local, _, domain = new_email.partition("@")
    if not local or "." not in domain or " " in new_email:
        raise ToolError(f"{new_email!r} is not a valid email address", code="invalid_request")
    if not new_phone:
        raise ToolError("phone number is empty", code="invalid_request")
    for other in state.guests.values():
        if other.guest_id != guest_id and other.email.lower() == new_email.lower():
            raise ToolError(f"email {new_email} belongs to another guest profile", code="already_exists")
    if new_email == g.email and new_phone == g.phone:
        raise ToolError("the contact details are already these values; nothing to change", code="no_change")
    g.email, g.phone = new_email, new_phone
    return _profile(g)
