"""Write initial_states/small.json and initial_states/large.json (deterministic; not imported by the runtime).

    python env_images/HotelBooking/build_states.py

The small state is spelled out below.  The large state is the small state plus generated cities,
hotels, room types, guests, cards and bookings from ``random.Random(SEED)``.  Existing bookings are
priced with the same helpers the tools use, and take inventory, so every state is self-consistent.
"""

from __future__ import annotations

import json
import random
import sys
from datetime import date, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from HotelBooking import tools as T  # noqa: E402
from HotelBooking.state import (  # noqa: E402
    Booking,
    CancellationPolicy,
    City,
    Guest,
    Hotel,
    HotelDB,
    PaymentMethod,
    Quote,
    RoomType,
)

SEED = 20261201
NOW = datetime(2026, 12, 1, 9, 0, 0)


def d(s: str) -> date:
    return date.fromisoformat(s)


def span(first: str, last: str, mult: float) -> dict[date, float]:
    a, b = d(first), d(last)
    return {a + timedelta(days=i): mult for i in range((b - a).days + 1)}


def rt(code, name, bed, maxg, inv, rate, overrides=None):
    return RoomType(code=code, name=name, bed_type=bed, max_guests=maxg, inventory=inv, base_rate=rate,
                    rate_overrides=overrides or {})


def policy(days, fee, pct=0.0):
    return CancellationPolicy(free_until_days=days, late_fee=fee, late_fee_percent=pct)


def hotel(hid, name, city, hood, stars, rating, amen, pol, rooms, fee=0.0, mult=None):
    return Hotel(hotel_id=hid, name=name, city_id=city, neighborhood=hood, stars=stars, rating=rating,
                 amenities=amen, service_fee_per_night=fee, cancellation_policy=pol,
                 rate_multipliers=mult or {}, room_types={r.code: r for r in rooms})


def card(pid, brand, last4, expiry, limit, balance, status="active"):
    return PaymentMethod(payment_method_id=pid, brand=brand, last4=last4, expiry=expiry, credit_limit=limit,
                         balance=balance, status=status)


def small_state() -> HotelDB:
    cities = [
        City(city_id="LIS", name="Lisbon", country="Portugal", tax_percent=6.0),
        City(city_id="VIE", name="Vienna", country="Austria", tax_percent=3.2),
        City(city_id="KYO", name="Kyoto", country="Japan", tax_percent=10.0),
        City(city_id="YUL", name="Montreal", country="Canada", tax_percent=15.0),
    ]
    lis_peak = span("2026-12-29", "2027-01-01", 1.3)
    vie_peak = {**span("2026-12-24", "2026-12-26", 1.4), **span("2026-12-30", "2027-01-01", 1.4)}
    kyo_peak = span("2026-12-28", "2027-01-03", 1.5)
    yul_peak = span("2026-12-22", "2027-01-02", 1.25)
    hotels = [
        hotel("H-101", "Casa Azul Alfama", "LIS", "Alfama", 3, 8.6, ["wifi", "breakfast", "rooftop_terrace"],
              policy(3, "first_night"),
              [rt("STD", "Standard Double", "double", 2, 6, 95.0), rt("TWN", "Twin Room", "twin", 2, 4, 95.0),
               rt("FAM", "Family Room", "queen", 4, 2, 150.0)], mult=lis_peak),
        hotel("H-102", "Tejo Riverside Hotel", "LIS", "Cais do Sodre", 4, 8.9,
              ["wifi", "pool", "gym", "spa", "parking", "restaurant"], policy(7, "percent", 50.0),
              [rt("STD", "Standard King", "king", 2, 8, 140.0), rt("DLX", "Deluxe River View", "king", 2, 4, 190.0),
               rt("STE", "Riverside Suite", "king", 4, 1, 320.0)], fee=8.0, mult=lis_peak),
        hotel("H-103", "Bairro Alto Rooms", "LIS", "Bairro Alto", 2, 7.8, ["wifi", "bar"], policy(1, "first_night"),
              [rt("ECO", "Economy Double", "double", 2, 5, 55.0), rt("QUA", "Quad Room", "bunk", 4, 2, 90.0)],
              mult=lis_peak),
        hotel("H-201", "Ringstrasse Grand", "VIE", "Innere Stadt", 5, 9.3,
              ["wifi", "spa", "gym", "restaurant", "concierge"], policy(14, "first_night"),
              [rt("DLX", "Deluxe King", "king", 2, 5, 310.0), rt("JST", "Junior Suite", "king", 3, 2, 450.0),
               rt("STE", "Imperial Suite", "king", 4, 1, 780.0)], mult=vie_peak),
        hotel("H-202", "Hotel Donaukanal", "VIE", "Leopoldstadt", 3, 8.1, ["wifi", "breakfast", "bike_rental"],
              policy(2, "first_night"),
              [rt("STD", "Standard Double", "double", 2, 6, 110.0), rt("TWN", "Twin Room", "twin", 2, 4, 110.0),
               rt("TRP", "Triple Room", "twin", 3, 2, 145.0)], mult=vie_peak),
        hotel("H-203", "Schoenbrunn Garden Inn", "VIE", "Hietzing", 4, 8.7,
              ["wifi", "breakfast", "parking", "pet_friendly"], policy(5, "percent", 30.0),
              [rt("STD", "Garden Queen", "queen", 2, 6, 135.0), rt("FAM", "Family Suite", "queen", 4, 2, 220.0)],
              mult=vie_peak),
        hotel("H-301", "Gion Machiya Residence", "KYO", "Gion", 4, 9.5, ["wifi", "onsen", "breakfast", "kitchen"],
              policy(10, "percent", 50.0),
              [rt("TAT", "Tatami Room", "futon", 3, 3, 240.0), rt("GDN", "Garden Suite", "king", 4, 1, 380.0)],
              mult=kyo_peak),
        hotel("H-302", "Kyoto Station Business Hotel", "KYO", "Shimogyo", 3, 8.0, ["wifi", "laundry"],
              policy(1, "first_night"),
              [rt("SGL", "Single Room", "single", 1, 10, 70.0), rt("DBL", "Double Room", "double", 2, 8, 95.0)],
              mult=kyo_peak),
        hotel("H-401", "Le Vieux-Port Boutique", "YUL", "Old Montreal", 4, 8.8,
              ["wifi", "restaurant", "gym", "pet_friendly"], policy(3, "first_night"),
              [rt("QN", "Queen Room", "queen", 2, 5, 165.0), rt("KNG", "King Loft", "king", 2, 3, 210.0)],
              fee=12.0, mult=yul_peak),
        hotel("H-402", "Plateau Family Suites", "YUL", "Plateau-Mont-Royal", 3, 8.4,
              ["wifi", "kitchen", "laundry", "parking"], policy(7, "first_night"),
              [rt("1BR", "One-Bedroom Suite", "queen", 4, 4, 175.0), rt("2BR", "Two-Bedroom Suite", "queen", 6, 2, 260.0)],
              mult=yul_peak),
    ]
    guests = [
        Guest(guest_id="G-001", name="Ada Lovelace", email="ada.lovelace@example.com", phone="+44 20 7946 0101",
              payment_methods={"PM-0001": card("PM-0001", "visa", "4242", "2028-09", 5000.0, 1200.0),
                               "PM-0002": card("PM-0002", "amex", "0005", "2027-03", 2000.0, 1950.0)}),
        Guest(guest_id="G-002", name="Grace Hopper", email="grace.hopper@example.com", phone="+1 202 555 0147",
              payment_methods={"PM-0003": card("PM-0003", "mastercard", "5454", "2026-11", 3000.0, 0.0),
                               "PM-0004": card("PM-0004", "visa", "1881", "2029-01", 8000.0, 500.0)}),
        Guest(guest_id="G-003", name="Kenji Watanabe", email="kenji.watanabe@example.jp", phone="+81 75 555 0199",
              payment_methods={"PM-0005": card("PM-0005", "jcb", "3530", "2027-12", 4000.0, 300.0)}),
        Guest(guest_id="G-004", name="Amelie Tremblay", email="amelie.tremblay@example.ca", phone="+1 514 555 0123",
              payment_methods={"PM-0006": card("PM-0006", "visa", "7788", "2028-02", 1500.0, 200.0),
                               "PM-0007": card("PM-0007", "mastercard", "2231", "2029-06", 10000.0, 0.0, "blocked")}),
        Guest(guest_id="G-005", name="Lukas Gruber", email="lukas.gruber@example.at", phone="+43 1 555 0177",
              payment_methods={"PM-0008": card("PM-0008", "mastercard", "6612", "2027-08", 6000.0, 2500.0)}),
        Guest(guest_id="G-006", name="Priya Raman", email="priya.raman@example.in", phone="+91 80 5550 0142"),
    ]
    db = HotelDB(now=NOW, last_bookable_night=d("2027-01-31"),
                 cities={c.city_id: c for c in cities}, hotels={h.hotel_id: h for h in hotels},
                 guests={g.guest_id: g for g in guests}, next_payment_method_seq=9)
    add_booking(db, "G-001", "H-201", "DLX", "2026-12-20", "2026-12-23", 2, "PM-0001", "2026-10-02T18:40:00")
    add_booking(db, "G-002", "H-102", "DLX", "2026-12-06", "2026-12-09", 2, "PM-0004", "2026-11-12T08:15:00",
                requests="Late arrival, around 23:00")
    add_booking(db, "G-003", "H-301", "TAT", "2026-12-27", "2026-12-30", 2, "PM-0005", "2026-09-21T03:05:00")
    add_booking(db, "G-004", "H-401", "QN", "2026-12-12", "2026-12-14", 2, "PM-0006", "2026-11-02T16:30:00",
                cancelled_at="2026-11-25T10:12:00", reason="Trip postponed")
    add_booking(db, "G-005", "H-202", "STD", "2026-11-20", "2026-11-23", 2, "PM-0008", "2026-10-15T12:00:00")
    add_booking(db, "G-005", "H-202", "TRP", "2026-12-03", "2026-12-06", 3, "PM-0008", "2026-11-28T19:45:00")
    # Sold-out nights: New Year's Eve at Casa Azul, Christmas in the Imperial Suite, the Gion garden suite
    # over New Year, and one Tatami room left around the existing Kyoto booking.
    sell(db, "H-101", "STD", "2026-12-30", "2027-01-01", 6)
    sell(db, "H-201", "STE", "2026-12-23", "2026-12-26", 1)
    sell(db, "H-301", "GDN", "2026-12-29", "2027-01-02", 1)
    sell(db, "H-301", "TAT", "2026-12-28", "2026-12-30", 1)
    sell(db, "H-102", "STE", "2026-12-31", "2027-01-01", 1)
    # An old quote that has expired (quote_expired path).
    h = db.hotels["H-401"]
    p = T._price(db, h, h.room_types["KNG"], d("2026-12-18"), d("2026-12-20"))
    db.quotes["Q-0001"] = Quote(quote_id="Q-0001", hotel_id="H-401", room_type="KNG", check_in=d("2026-12-18"),
                                check_out=d("2026-12-20"), guests=2, created_at=datetime(2026, 11, 30, 10, 0),
                                expires_at=datetime(2026, 11, 30, 11, 0), **p)
    db.next_quote_seq = 2
    return db


def sell(db: HotelDB, hid: str, code: str, first: str, last: str, count: int) -> None:
    r = db.hotels[hid].room_types[code]
    a, b = d(first), d(last)
    for i in range((b - a).days + 1):
        night = a + timedelta(days=i)
        r.rooms_sold[night] = min(r.inventory, r.rooms_sold.get(night, 0) + count)
    r.rooms_sold = dict(sorted(r.rooms_sold.items()))


def add_booking(db: HotelDB, gid, hid, code, ci, co, guests, pmid, created, *, requests="", cancelled_at=None,
                reason="") -> Booking:
    h = db.hotels[hid]
    r = h.room_types[code]
    p = T._price(db, h, r, d(ci), d(co))
    bid = f"BK-{db.next_booking_seq:04d}"
    db.next_booking_seq += 1
    created_at = datetime.fromisoformat(created)
    b = Booking(booking_id=bid, guest_id=gid, hotel_id=hid, room_type=code, check_in=d(ci), check_out=d(co),
                guests=guests, amount_paid=0.0, payment_method_id=pmid, special_requests=requests,
                created_at=created_at, **p)
    db.bookings[bid] = b
    pm = db.guests[gid].payment_methods[pmid]
    saved_now = db.now
    db.now = created_at
    T._pay(db, b, pm, b.total, "booking")
    if cancelled_at is None:
        future = [n for n in T._nights(b.check_in, b.check_out) if n >= NOW.date()]
        T._take(r, future, +1)
    else:
        db.now = datetime.fromisoformat(cancelled_at)
        b.status, b.cancelled_at, b.cancellation_fee, b.cancel_reason = "cancelled", db.now, 0.0, reason
        b.updated_at = db.now
        T._refund(db, b, b.total, "cancellation")
    db.now = saved_now
    return b


# ------------------------------------------------------------------------------------ large

CITY_POOL = [
    ("BCN", "Barcelona", "Spain", 5.5, ["Eixample", "Gracia", "El Born", "Barceloneta", "Poblenou"]),
    ("EDI", "Edinburgh", "United Kingdom", 5.0, ["Old Town", "New Town", "Leith", "Stockbridge"]),
    ("MEX", "Mexico City", "Mexico", 16.0, ["Roma Norte", "Condesa", "Polanco", "Centro Historico"]),
    ("CPT", "Cape Town", "South Africa", 15.0, ["City Bowl", "Sea Point", "Camps Bay", "Waterfront"]),
    ("SEL", "Seoul", "South Korea", 10.0, ["Myeongdong", "Hongdae", "Gangnam", "Insadong"]),
    ("BUE", "Buenos Aires", "Argentina", 21.0, ["Palermo", "San Telmo", "Recoleta", "Puerto Madero"]),
    ("OSL", "Oslo", "Norway", 12.0, ["Sentrum", "Grunerlokka", "Frogner", "Bjorvika"]),
    ("MEL", "Melbourne", "Australia", 10.0, ["CBD", "Fitzroy", "St Kilda", "Southbank"]),
]
NAME_A = ["Harbor", "Garden", "Royal", "Old Town", "Skyline", "Riverside", "Park", "Central", "Grand", "Little",
          "Lantern", "Cedar", "Atlas", "Copper", "Meridian", "Juniper", "Saffron", "Willow", "Beacon", "Orchid"]
NAME_B = ["Hotel", "Inn", "Suites", "House", "Lodge", "Residences", "Boutique Hotel", "Guesthouse"]
AMENITIES = ["wifi", "breakfast", "pool", "gym", "spa", "parking", "restaurant", "bar", "rooftop_terrace",
             "pet_friendly", "kitchen", "laundry", "concierge", "bike_rental", "airport_shuttle"]
ROOM_POOL = [("SGL", "Single Room", "single", 1, 0.7), ("STD", "Standard Double", "double", 2, 1.0),
             ("TWN", "Twin Room", "twin", 2, 1.0), ("QN", "Queen Room", "queen", 2, 1.1),
             ("DLX", "Deluxe King", "king", 2, 1.35), ("TRP", "Triple Room", "twin", 3, 1.4),
             ("FAM", "Family Room", "queen", 4, 1.6), ("STE", "Suite", "king", 4, 2.3)]
FIRST = ["Maria", "James", "Wei", "Fatima", "Olga", "Diego", "Aisha", "Noah", "Yuki", "Lena", "Omar", "Ines",
         "Tom", "Zara", "Pavel", "Chloe", "Ravi", "Sofia", "Hugo", "Mina", "Erik", "Nadia", "Leo", "Amara"]
LAST = ["Silva", "Chen", "Okafor", "Novak", "Garcia", "Schmidt", "Kowalski", "Haddad", "Tanaka", "Murphy",
        "Rossi", "Jensen", "Moreau", "Kim", "Patel", "Costa", "Larsen", "Ibrahim", "Dubois", "Nguyen"]


def large_state() -> HotelDB:
    rng = random.Random(SEED)
    db = small_state()
    for cid, name, country, tax, _hoods in CITY_POOL:
        db.cities[cid] = City(city_id=cid, name=name, country=country, tax_percent=tax)
    hoods_of = {c[0]: c[4] for c in CITY_POOL}
    hoods_of.update({"LIS": ["Alfama", "Baixa", "Belem", "Principe Real"], "VIE": ["Innere Stadt", "Neubau", "Wieden"],
                     "KYO": ["Higashiyama", "Nakagyo", "Arashiyama"], "YUL": ["Downtown", "Mile End", "Griffintown"]})
    city_ids = list(db.cities)
    used_names = {h.name for h in db.hotels.values()}
    n_rooms = sum(len(h.room_types) for h in db.hotels.values())
    serial = {c: 10 for c in city_ids}
    i = 0
    while len(db.hotels) < 150:
        cid = city_ids[i % len(city_ids)]
        i += 1
        city = db.cities[cid]
        serial[cid] += 1
        hid = f"H-{city_ids.index(cid) + 1}{serial[cid]:02d}"
        while True:
            name = f"{rng.choice(NAME_A)} {rng.choice(NAME_B)} {city.name}"
            if name not in used_names:
                break
            name = f"{rng.choice(NAME_A)} {rng.choice(NAME_A)} {rng.choice(NAME_B)}"
            if name not in used_names:
                break
        used_names.add(name)
        stars = rng.choice([2, 3, 3, 3, 4, 4, 4, 5])
        base = rng.choice([50, 60, 70, 80, 90, 100]) + 35 * (stars - 2)
        want = 3 if len(db.hotels) % 3 else 2
        if n_rooms + want > 400 - (150 - len(db.hotels) - 1) * 2:
            want = 2
        codes = rng.sample(ROOM_POOL, want)
        codes.sort(key=lambda x: ROOM_POOL.index(x))
        rooms = [rt(c, nm, bed, mg, rng.randint(1, 8), float(round(base * f))) for c, nm, bed, mg, f in codes]
        n_rooms += len(rooms)
        amen = ["wifi"] + sorted(rng.sample(AMENITIES[1:], rng.randint(2, 6)), key=AMENITIES.index)
        pol = rng.choice([policy(1, "first_night"), policy(3, "first_night"), policy(7, "first_night"),
                          policy(5, "percent", 30.0), policy(14, "percent", 50.0), policy(2, "percent", 100.0)])
        peak_start = d("2026-12-20") + timedelta(days=rng.randint(0, 8))
        mult = span(peak_start.isoformat(), (peak_start + timedelta(days=rng.randint(3, 10))).isoformat(),
                    rng.choice([1.2, 1.25, 1.3, 1.5]))
        fee = rng.choice([0.0, 0.0, 0.0, 5.0, 10.0, 15.0])
        db.hotels[hid] = hotel(hid, name, cid, rng.choice(hoods_of[cid]), stars, round(rng.uniform(6.8, 9.7), 1),
                               amen, pol, rooms, fee=fee, mult=mult)
    brands = ["visa", "mastercard", "amex", "jcb", "discover"]
    emails = {g.email for g in db.guests.values()}
    gseq = len(db.guests)
    while len(db.guests) < 120:
        gseq += 1
        gid = f"G-{gseq:03d}"
        first, last = rng.choice(FIRST), rng.choice(LAST)
        email = f"{first.lower()}.{last.lower()}@example.org"
        k = 2
        while email in emails:
            email = f"{first.lower()}.{last.lower()}{k}@example.org"
            k += 1
        emails.add(email)
        pms = {}
        for _ in range(rng.choice([1, 1, 2, 2, 3])):
            pid = f"PM-{db.next_payment_method_seq:04d}"
            db.next_payment_method_seq += 1
            limit = float(rng.choice([2000, 3000, 5000, 8000, 12000]))
            pms[pid] = card(pid, rng.choice(brands), f"{rng.randint(0, 9999):04d}",
                            f"{rng.randint(2026, 2030)}-{rng.randint(1, 12):02d}", limit,
                            float(round(rng.uniform(0, limit * 0.4), 2)),
                            "blocked" if rng.random() < 0.04 else "active")
        db.guests[gid] = Guest(guest_id=gid, name=f"{first} {last}", email=email,
                               phone=f"+1 555 {rng.randint(100, 999)} {rng.randint(1000, 9999)}", payment_methods=pms)
    gen_guests = [g for g in db.guests.values() if g.guest_id > "G-006"]
    hotels = list(db.hotels.values())
    made = 0
    while made < 120:
        g = rng.choice(gen_guests)
        pm = next((p for p in g.payment_methods.values() if p.status == "active" and not T._expired(db, p)), None)
        if pm is None:
            continue
        h = rng.choice(hotels)
        r = rng.choice(list(h.room_types.values()))
        ci = d("2026-12-02") + timedelta(days=rng.randint(0, 55))
        co = ci + timedelta(days=rng.randint(1, 5))
        if co - timedelta(days=1) > db.last_bookable_night or T._sold_out_nights(r, T._nights(ci, co)):
            continue
        if T._price(db, h, r, ci, co)["total"] > pm.credit_limit - pm.balance:
            continue
        created = NOW - timedelta(days=rng.randint(1, 90), minutes=rng.randint(0, 1439))
        cancelled: str | None = None
        if rng.random() < 0.12:
            cancelled_at = (created + timedelta(hours=rng.randint(1, 200))).replace(microsecond=0)
            cancelled = min(cancelled_at, NOW - timedelta(hours=1)).isoformat()
        add_booking(db, g.guest_id, h.hotel_id, r.code, ci.isoformat(), co.isoformat(),
                    rng.randint(1, r.max_guests), pm.payment_method_id, created.replace(microsecond=0).isoformat(),
                    cancelled_at=cancelled, reason="Plans changed" if cancelled else "")
        made += 1
    return db


# ------------------------------------------------------------------------------------ output


def compact(obj, indent: int = 0, width: int = 200) -> str:
    """JSON with small objects on one line, so the small state reads like a table."""
    one = json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))
    if len(one) + indent <= width or not isinstance(obj, (dict, list)) or not obj:
        return one
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(k)}: {compact(v, indent + 1, width)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [f"{pad}{compact(v, indent + 1, width)}" for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def count_records(db: HotelDB) -> int:
    return (len(db.cities) + len(db.hotels) + sum(len(h.room_types) for h in db.hotels.values())
            + len(db.guests) + sum(len(g.payment_methods) for g in db.guests.values()) + len(db.quotes)
            + len(db.bookings) + len(db.payments) + len(db.refunds))


def main() -> None:
    out = HERE / "initial_states"
    out.mkdir(exist_ok=True)
    small = small_state()
    (out / "small.json").write_text(compact(small.model_dump(mode="json", exclude_defaults=False)) + "\n")
    large = large_state()
    (out / "large.json").write_text(json.dumps(large.model_dump(mode="json"), separators=(",", ":")) + "\n")
    print(f"small: {count_records(small)} records; large: {count_records(large)} records "
          f"({len(large.hotels)} hotels, {sum(len(h.room_types) for h in large.hotels.values())} room types, "
          f"{len(large.guests)} guests, {len(large.bookings)} bookings)")


if __name__ == "__main__":
    main()
