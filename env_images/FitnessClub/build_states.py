"""Write initial_states/small.json and initial_states/large.json (deterministic; not imported by the runtime).

    python env_images/FitnessClub/build_states.py

The small state is spelled out below.  The large state is the small state plus generated locations,
studios, instructors, two weeks of classes, members and bookings from ``random.Random(SEED)``.  Bookings
go through ``place``, which keeps rosters, waitlists and members' credit counts consistent.
"""

from __future__ import annotations

import json
import random
import sys
from datetime import date, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from FitnessClub.state import (  # noqa: E402
    AvailabilityWindow,
    BookingStatus,
    Charge,
    ChargeKind,
    CheckIn,
    ClassBooking,
    ClassCategory,
    ClassSession,
    ClassStatus,
    FitnessDB,
    Instructor,
    Location,
    Member,
    Plan,
    PTSession,
    Studio,
)

SEED = 20261201
NOW = datetime(2026, 12, 1, 9, 0, 0)  # a Tuesday


def d(s: str) -> date:
    return date.fromisoformat(s)


def dt(s: str) -> datetime:
    return datetime.fromisoformat(s)


def windows(days, start, end):
    return [AvailabilityWindow(weekday=w, start=start, end=end) for w in days]


PLANS = [
    Plan(plan_id="PLAN-FLEX", name="Flex", monthly_fee=19.9, class_credits=4, guest_passes=0, all_locations=False,
         pt_discount_percent=0.0, max_freeze_days=0),
    Plan(plan_id="PLAN-BASIC", name="Basic", monthly_fee=34.9, class_credits=8, guest_passes=0, all_locations=False,
         pt_discount_percent=0.0, max_freeze_days=30),
    Plan(plan_id="PLAN-PLUS", name="Plus", monthly_fee=54.9, class_credits=16, guest_passes=2, all_locations=True,
         pt_discount_percent=10.0, max_freeze_days=60),
    Plan(plan_id="PLAN-UNL", name="Unlimited", monthly_fee=79.9, class_credits=None, guest_passes=4,
         all_locations=True, pt_discount_percent=20.0, max_freeze_days=90),
]

# (class_id, name, category, studio, instructor, start, minutes, capacity, credits, waitlist cap, status)
SMALL_CLASSES: list[tuple[str, str, ClassCategory, str, str, str, int, int, int, int, ClassStatus]] = [
    ("CL-101", "Sunrise Ride", "cycling", "ST-11", "IN-01", "2026-12-01T07:00", 45, 20, 1, 5, "scheduled"),
    ("CL-102", "Vinyasa Flow", "yoga", "ST-21", "IN-03", "2026-12-01T09:30", 60, 16, 1, 5, "scheduled"),
    ("CL-103", "Power Strength", "strength", "ST-13", "IN-02", "2026-12-01T12:30", 50, 12, 1, 5, "scheduled"),
    ("CL-104", "Reformer Pilates", "pilates", "ST-31", "IN-05", "2026-12-01T18:00", 50, 4, 2, 4, "scheduled"),
    ("CL-105", "Boxing Basics", "boxing", "ST-13", "IN-02", "2026-12-01T19:00", 60, 14, 1, 5, "scheduled"),
    ("CL-106", "Sunrise Ride", "cycling", "ST-11", "IN-01", "2026-12-02T07:00", 45, 20, 1, 5, "scheduled"),
    ("CL-107", "Aqua Fit", "swim", "ST-22", "IN-04", "2026-12-02T08:00", 45, 12, 1, 5, "scheduled"),
    ("CL-108", "HIIT Express", "hiit", "ST-13", "IN-01", "2026-12-02T18:00", 30, 14, 1, 5, "scheduled"),
    ("CL-109", "Yin Yoga", "yoga", "ST-21", "IN-03", "2026-12-02T18:30", 60, 16, 1, 5, "scheduled"),
    ("CL-110", "Vinyasa Flow", "yoga", "ST-21", "IN-03", "2026-12-03T09:30", 60, 16, 1, 5, "scheduled"),
    ("CL-111", "Reformer Pilates", "pilates", "ST-31", "IN-05", "2026-12-03T12:00", 50, 4, 2, 4, "scheduled"),
    ("CL-112", "Power Strength", "strength", "ST-13", "IN-02", "2026-12-03T12:30", 50, 12, 1, 5, "scheduled"),
    ("CL-113", "Dance Cardio", "dance", "ST-12", "IN-06", "2026-12-03T19:00", 55, 18, 1, 5, "scheduled"),
    ("CL-114", "Sunrise Ride", "cycling", "ST-11", "IN-01", "2026-12-04T07:00", 45, 20, 1, 5, "scheduled"),
    ("CL-115", "Reformer Pilates", "pilates", "ST-31", "IN-05", "2026-12-04T17:30", 50, 4, 2, 2, "scheduled"),
    ("CL-116", "Kettlebell Strength", "strength", "ST-21", "IN-04", "2026-12-04T18:00", 45, 16, 1, 5, "scheduled"),
    ("CL-117", "Weekend Ride", "cycling", "ST-11", "IN-01", "2026-12-05T10:00", 60, 20, 1, 5, "scheduled"),
    ("CL-118", "Slow Flow Yoga", "yoga", "ST-21", "IN-03", "2026-12-05T10:00", 75, 16, 1, 5, "scheduled"),
    ("CL-119", "Boxing Bootcamp", "boxing", "ST-13", "IN-02", "2026-12-05T11:00", 60, 14, 1, 5, "scheduled"),
    ("CL-120", "Aqua Fit", "swim", "ST-22", "IN-04", "2026-12-06T10:00", 45, 12, 1, 5, "scheduled"),
    ("CL-121", "Dance Cardio", "dance", "ST-12", "IN-06", "2026-12-06T11:00", 55, 18, 1, 5, "cancelled"),
    ("CL-122", "Sunrise Ride", "cycling", "ST-11", "IN-01", "2026-12-07T07:00", 45, 20, 1, 5, "scheduled"),
    ("CL-123", "Reformer Pilates", "pilates", "ST-31", "IN-05", "2026-12-07T12:00", 50, 4, 2, 4, "scheduled"),
    ("CL-124", "Vinyasa Flow", "yoga", "ST-21", "IN-03", "2026-12-07T18:30", 60, 16, 1, 5, "scheduled"),
    ("CL-125", "Vinyasa Flow", "yoga", "ST-21", "IN-03", "2026-12-08T09:30", 60, 16, 1, 5, "scheduled"),
    ("CL-126", "Power Strength", "strength", "ST-13", "IN-02", "2026-12-08T12:30", 50, 12, 1, 5, "scheduled"),
]


def member(mid, name, email, phone, home, plan, cycle_start, cycle_end, *, joined="2025-03-01", credits=0,
           passes=0, status="active", freeze=None, freeze_used=0, reason=""):
    fs, fe = (d(freeze[0]), d(freeze[1])) if freeze else (None, None)
    return Member(member_id=mid, name=name, email=email, phone=phone, home_location_id=home, plan_id=plan,
                  status=status, joined_on=d(joined), cycle_start=d(cycle_start), cycle_end=d(cycle_end),
                  credits_used=credits, guest_passes_used=passes, freeze_start=fs, freeze_end=fe,
                  freeze_reason=reason, freeze_days_used=freeze_used)


def place(db: FitnessDB, mid: str, cid: str, status: BookingStatus = "booked", *, guest: str | None = None,
          created: str = "2026-11-28T12:00") -> str:
    """Add a booking (place, waitlist entry or past attendance) and count its credits or guest pass."""
    m, c = db.members[mid], db.classes[cid]
    plan = db.plans[m.plan_id]
    credits = 0 if guest or plan.class_credits is None else c.credits
    bid = f"BKG-{db.next_booking_seq:04d}"
    db.next_booking_seq += 1
    db.bookings[bid] = ClassBooking(booking_id=bid, member_id=mid, class_id=cid, guest_name=guest, status=status,
                                    credits_used=credits, created_at=dt(created))
    m.credits_used += credits
    m.guest_passes_used += 1 if guest else 0
    if status in ("booked", "attended"):
        c.roster.append(bid)
    elif status == "waitlisted":
        c.waitlist.append(bid)
    return bid


def overlaps(a: ClassSession, b: ClassSession) -> bool:
    return a.start < b.start + timedelta(minutes=b.duration_min) and b.start < a.start + timedelta(minutes=a.duration_min)


def charge(db: FitnessDB, mid: str, kind: ChargeKind, amount: float, desc: str, at: str, ref: str | None = None) -> str:
    cid = f"CH-{db.next_charge_seq:04d}"
    db.next_charge_seq += 1
    db.charges[cid] = Charge(charge_id=cid, member_id=mid, kind=kind, amount=amount, description=desc,
                             created_at=dt(at), booking_id=ref)
    m = db.members[mid]
    m.charge_ids.append(cid)
    m.balance_due = round(m.balance_due + amount, 2)
    return cid


def pt(db: FitnessDB, mid: str, iid: str, start: str, booked_at: str) -> str:
    m, ins = db.members[mid], db.instructors[iid]
    price = round(ins.pt_rate * (1 - db.plans[m.plan_id].pt_discount_percent / 100), 2)
    sid = f"PT-{db.next_pt_seq:04d}"
    db.next_pt_seq += 1
    cid = charge(db, mid, "personal_training", price, f"Personal training with {ins.name} {start.replace('T', ' ')}",
                 booked_at, sid)
    db.pt_sessions[sid] = PTSession(session_id=sid, member_id=mid, instructor_id=iid, location_id=ins.location_id,
                                    start=dt(start), price=price, charge_id=cid)
    return sid


def small_state() -> FitnessDB:
    locations = [
        Location(location_id="LOC-KRZ", name="PulseWorks Kreuzberg", city="Berlin", address="Oranienstrasse 140",
                 opens="06:00", closes="23:00"),
        Location(location_id="LOC-PBG", name="PulseWorks Prenzlauer Berg", city="Berlin", address="Kastanienallee 77",
                 opens="06:30", closes="22:00"),
        Location(location_id="LOC-MIT", name="PulseWorks Mitte Studio", city="Berlin", address="Torstrasse 201",
                 opens="10:00", closes="21:00"),
    ]
    studios = [
        Studio(studio_id="ST-11", location_id="LOC-KRZ", name="Ride Room", capacity=20),
        Studio(studio_id="ST-12", location_id="LOC-KRZ", name="Mind & Body", capacity=18),
        Studio(studio_id="ST-13", location_id="LOC-KRZ", name="Strength Floor", capacity=14),
        Studio(studio_id="ST-21", location_id="LOC-PBG", name="Studio One", capacity=16),
        Studio(studio_id="ST-22", location_id="LOC-PBG", name="Pool", capacity=12),
        Studio(studio_id="ST-31", location_id="LOC-MIT", name="Reformer Room", capacity=8),
    ]
    instructors = [
        Instructor(instructor_id="IN-01", name="Jana Vogel", location_id="LOC-KRZ", specialties=["cycling", "hiit"],
                   pt_rate=60.0, pt_availability=windows([0, 2, 4], "07:00", "10:00")),
        Instructor(instructor_id="IN-02", name="Mateo Alvarez", location_id="LOC-KRZ",
                   specialties=["strength", "boxing"], pt_rate=70.0,
                   pt_availability=windows([1, 3], "12:00", "16:00") + windows([5], "09:00", "12:00")),
        Instructor(instructor_id="IN-03", name="Hannah Lindqvist", location_id="LOC-PBG",
                   specialties=["yoga", "pilates"], pt_rate=65.0, pt_availability=windows([1, 3], "10:00", "14:00")),
        Instructor(instructor_id="IN-04", name="Kwame Mensah", location_id="LOC-PBG",
                   specialties=["hiit", "strength", "swim"], pt_rate=75.0,
                   pt_availability=windows([2, 4], "16:00", "20:00")),
        Instructor(instructor_id="IN-05", name="Yuki Sato", location_id="LOC-MIT", specialties=["pilates", "yoga"],
                   pt_rate=90.0, pt_availability=windows([0, 1, 2, 3, 4], "11:00", "14:00")),
        Instructor(instructor_id="IN-06", name="Lea Brandt", location_id="LOC-KRZ", specialties=["dance", "yoga"],
                   pt_rate=55.0),
    ]
    members = [
        member("M-001", "Sofia Marchetti", "sofia.marchetti@example.org", "+49 151 2204 8831", "LOC-KRZ",
               "PLAN-BASIC", "2026-11-15", "2026-12-15", joined="2024-09-15", credits=3),
        member("M-002", "Omar Haddad", "omar.haddad@example.com", "+49 160 5521 0932", "LOC-KRZ", "PLAN-PLUS",
               "2026-11-20", "2026-12-20", joined="2025-01-20", credits=5),
        member("M-003", "Lukas Becker", "lukas.becker@example.de", "+49 170 8830 4412", "LOC-PBG", "PLAN-UNL",
               "2026-12-01", "2027-01-01", joined="2023-06-01"),
        member("M-004", "Amira Nasser", "amira.nasser@example.com", "+49 152 7719 2260", "LOC-MIT", "PLAN-BASIC",
               "2026-11-10", "2026-12-10", joined="2025-08-10", credits=4),
        member("M-005", "Jonas Weber", "jonas.weber@example.de", "+49 176 3340 9187", "LOC-PBG", "PLAN-FLEX",
               "2026-11-25", "2026-12-25", joined="2026-05-25"),
        member("M-006", "Clara Schmidt", "clara.schmidt@example.de", "+49 157 6612 0044", "LOC-KRZ", "PLAN-PLUS",
               "2026-11-08", "2026-12-08", joined="2024-02-08", credits=2, freeze=("2026-11-20", "2026-12-10"),
               freeze_used=21, reason="Ski trip"),
        member("M-007", "Felix Hoffmann", "felix.hoffmann@example.de", "+49 171 2290 5518", "LOC-KRZ", "PLAN-PLUS",
               "2026-11-12", "2026-12-12", joined="2025-11-12", credits=3),
        member("M-008", "Nina Kowalski", "nina.kowalski@example.pl", "+49 159 0081 3376", "LOC-PBG", "PLAN-UNL",
               "2026-11-18", "2026-12-18", joined="2022-11-18", passes=0),
        member("M-009", "Tariq Aziz", "tariq.aziz@example.com", "+49 162 4471 8805", "LOC-MIT", "PLAN-PLUS",
               "2026-11-03", "2026-12-03", joined="2024-05-03", status="cancelled"),
        member("M-010", "Elena Petrova", "elena.petrova@example.com", "+49 155 9032 6617", "LOC-KRZ", "PLAN-PLUS",
               "2026-11-05", "2026-12-05", joined="2025-04-05", credits=6, passes=2),
        member("M-011", "Paul Richter", "paul.richter@example.de", "+49 173 5506 2281", "LOC-MIT", "PLAN-PLUS",
               "2026-11-22", "2026-12-22", joined="2026-01-22", credits=2),
        member("M-012", "Maya Lindgren", "maya.lindgren@example.se", "+49 156 7783 0419", "LOC-KRZ", "PLAN-UNL",
               "2026-11-28", "2026-12-28", joined="2023-10-28"),
    ]
    loc_of = {s.studio_id: s.location_id for s in studios}
    classes = [ClassSession(class_id=cid, name=n, category=cat, studio_id=st, location_id=loc_of[st],
                            instructor_id=ins, start=dt(start), duration_min=mins, capacity=cap, credits=cr,
                            waitlist_capacity=wl, status=status)
               for cid, n, cat, st, ins, start, mins, cap, cr, wl, status in SMALL_CLASSES]
    db = FitnessDB(club_name="PulseWorks Fitness", now=NOW, locations={x.location_id: x for x in locations},
                   studios={x.studio_id: x for x in studios}, instructors={x.instructor_id: x for x in instructors},
                   plans={p.plan_id: p for p in PLANS}, classes={c.class_id: c for c in classes},
                   members={m.member_id: m for m in members})
    # Tuesday's full Reformer class: four places, two waiting
    place(db, "M-004", "CL-104", created="2026-11-24T08:10")           # BKG-0001
    place(db, "M-002", "CL-104", created="2026-11-24T12:40")           # BKG-0002
    place(db, "M-008", "CL-104", created="2026-11-25T19:05")           # BKG-0003
    place(db, "M-011", "CL-104", created="2026-11-26T07:30")           # BKG-0004
    place(db, "M-010", "CL-104", "waitlisted", created="2026-11-27T21:15")  # BKG-0005
    place(db, "M-012", "CL-104", "waitlisted", created="2026-11-29T10:00")  # BKG-0006
    place(db, "M-001", "CL-105", created="2026-11-26T18:00")           # BKG-0007
    place(db, "M-008", "CL-102", created="2026-11-27T09:00")           # BKG-0008
    place(db, "M-008", "CL-102", guest="Marta Nowak", created="2026-11-27T09:01")  # BKG-0009
    # Friday's Reformer class: full, and its two-place waitlist is full too
    place(db, "M-011", "CL-115", created="2026-11-27T08:00")           # BKG-0010
    place(db, "M-003", "CL-115", created="2026-11-27T08:05")           # BKG-0011
    place(db, "M-008", "CL-115", created="2026-11-27T09:30")           # BKG-0012
    place(db, "M-012", "CL-115", created="2026-11-28T11:00")           # BKG-0013
    place(db, "M-002", "CL-115", "waitlisted", created="2026-11-29T20:00")  # BKG-0014
    place(db, "M-010", "CL-115", "waitlisted", created="2026-11-30T07:45")  # BKG-0015
    place(db, "M-001", "CL-117", created="2026-11-29T16:20")           # BKG-0016
    place(db, "M-007", "CL-117", created="2026-11-29T17:00")           # BKG-0017
    place(db, "M-005", "CL-110", created="2026-11-30T06:40")           # BKG-0018
    place(db, "M-003", "CL-109", created="2026-11-30T12:00")           # BKG-0019
    place(db, "M-003", "CL-120", created="2026-11-30T12:02")           # BKG-0020 (not CL-116: it overlaps CL-115)
    place(db, "M-002", "CL-112", created="2026-11-30T13:10")           # BKG-0021
    place(db, "M-004", "CL-111", created="2026-11-30T15:00")           # BKG-0022
    place(db, "M-001", "CL-101", "attended", created="2026-11-30T20:00")  # BKG-0023
    db.checkins["CI-0001"] = CheckIn(checkin_id="CI-0001", member_id="M-001", location_id="LOC-KRZ",
                                     at=dt("2026-12-01T06:50"), booking_ids=["BKG-0023"])
    db.next_checkin_seq = 2
    # Felix owes 42.50 (two late cancellations and a training session, part paid)
    charge(db, "M-007", "late_cancel_fee", 7.5, "Late cancellation: Boxing Basics 2026-11-10 19:00", "2026-11-10T10:00")
    charge(db, "M-007", "late_cancel_fee", 7.5, "Late cancellation: Sunrise Ride 2026-11-18 07:00", "2026-11-18T06:00")
    charge(db, "M-007", "personal_training", 63.0, "Personal training with Mateo Alvarez 2026-11-24 13:00",
           "2026-11-20T12:00")
    charge(db, "M-007", "payment", -35.5, "Payment with card on file", "2026-11-25T18:30")
    pt(db, "M-012", "IN-02", "2026-12-03T14:00", "2026-11-28T10:30")   # PT-0001, paid below
    charge(db, "M-012", "payment", -56.0, "Payment with card on file", "2026-11-28T10:31")
    pt(db, "M-003", "IN-03", "2026-12-01T11:00", "2026-11-30T08:00")   # PT-0002, due
    return db


# ----------------------------------------------------------------------------- large state

EXTRA_LOCATIONS = [
    ("LOC-FHN", "PulseWorks Friedrichshain", "Berlin", "Warschauer Strasse 33", "06:00", "23:00"),
    ("LOC-CHB", "PulseWorks Charlottenburg", "Berlin", "Kantstrasse 98", "06:30", "22:00"),
    ("LOC-NKN", "PulseWorks Neukoelln", "Berlin", "Weserstrasse 52", "07:00", "22:00"),
    ("LOC-HAM", "PulseWorks Hamburg Altona", "Hamburg", "Grosse Bergstrasse 160", "06:00", "22:30"),
    ("LOC-LEJ", "PulseWorks Leipzig Zentrum", "Leipzig", "Karl-Liebknecht-Strasse 12", "06:30", "22:00"),
]
STUDIO_KINDS: list[tuple[str, int, list[ClassCategory]]] = [("Ride Room", 22, ["cycling"]), ("Studio One", 18, ["yoga", "pilates", "dance"]),
                ("Strength Floor", 16, ["strength", "hiit", "boxing"])]
CLASS_NAMES: dict[ClassCategory, list[str]] = {"cycling": ["Sunrise Ride", "Rhythm Ride", "Climb & Sprint"], "yoga": ["Vinyasa Flow", "Yin Yoga"],
               "pilates": ["Mat Pilates", "Core Pilates"], "dance": ["Dance Cardio", "Latin Groove"],
               "strength": ["Power Strength", "Kettlebell Strength"], "hiit": ["HIIT Express", "Tabata 40"],
               "boxing": ["Boxing Basics", "Boxing Bootcamp"]}
FIRST = ["Anna", "Ben", "Carla", "David", "Eva", "Finn", "Greta", "Hugo", "Ida", "Jan", "Katrin", "Leon", "Mila",
         "Nico", "Olga", "Pia", "Rafael", "Sara", "Timo", "Ula", "Viktor", "Wiebke", "Yasmin", "Zeynep", "Moritz",
         "Lina", "Emil", "Frieda", "Oskar", "Hanna"]
LAST = ["Adler", "Bauer", "Conrad", "Dietrich", "Engel", "Franke", "Graf", "Hartmann", "Jung", "Keller", "Lorenz",
        "Maier", "Neumann", "Otto", "Peters", "Quandt", "Roth", "Schulz", "Thiel", "Ulrich", "Vogt", "Winter",
        "Yilmaz", "Ziegler"]


def large_state() -> FitnessDB:
    rng = random.Random(SEED)
    db = small_state()
    for lid, name, city, addr, opens, closes in EXTRA_LOCATIONS:
        db.locations[lid] = Location(location_id=lid, name=name, city=city, address=addr, opens=opens, closes=closes)
    studio_seq, ins_seq = 41, 7
    studios_by_loc: dict[str, list[tuple[str, list[ClassCategory]]]] = {}
    for lid, *_ in EXTRA_LOCATIONS:
        for sname, cap, cats in STUDIO_KINDS:
            sid = f"ST-{studio_seq}"
            studio_seq += 1
            db.studios[sid] = Studio(studio_id=sid, location_id=lid, name=sname, capacity=cap)
            studios_by_loc.setdefault(lid, []).append((sid, cats))
        for _ in range(3):
            iid = f"IN-{ins_seq:02d}"
            ins_seq += 1
            specs = rng.sample(["cycling", "yoga", "pilates", "dance", "strength", "hiit", "boxing"], 2)
            name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
            days = sorted(rng.sample(range(7), 3))
            hour = rng.choice([7, 10, 14, 16])
            db.instructors[iid] = Instructor(instructor_id=iid, name=name, location_id=lid, specialties=specs,
                                             pt_rate=float(rng.choice([55, 60, 65, 70, 75, 80])),
                                             pt_availability=windows(days, f"{hour:02d}:00", f"{hour + 3:02d}:00"))
    # two weeks of classes at the new locations: five a day
    seq = 201
    for day in range(14):
        base = date(2026, 12, 1) + timedelta(days=day)
        for lid, *_ in EXTRA_LOCATIONS:
            coaches = [i for i in db.instructors.values() if i.location_id == lid]
            for hour in (7, 9, 12, 18, 19):
                sid, cats = rng.choice(studios_by_loc[lid])
                cat = rng.choice(cats)
                start = datetime(base.year, base.month, base.day, hour, rng.choice([0, 15, 30]))
                minutes = rng.choice([45, 50, 60])
                free = [i for i in coaches if all(  # a coach never teaches two classes at once
                    c.instructor_id != i.instructor_id or c.start + timedelta(minutes=c.duration_min) <= start
                    or start + timedelta(minutes=minutes) <= c.start for c in db.classes.values())]
                coach = rng.choice([i for i in free if cat in i.specialties] or free)
                cid = f"CL-{seq}"
                seq += 1
                db.classes[cid] = ClassSession(
                    class_id=cid, name=rng.choice(CLASS_NAMES[cat]), category=cat, studio_id=sid, location_id=lid,
                    instructor_id=coach.instructor_id, start=start, duration_min=minutes,
                    capacity=db.studios[sid].capacity, credits=1, waitlist_capacity=5)
    # members at every location
    homes = list(db.locations)
    plans = ["PLAN-FLEX", "PLAN-BASIC", "PLAN-PLUS", "PLAN-PLUS", "PLAN-UNL"]
    used_emails = {m.email for m in db.members.values()}
    for n in range(13, 13 + 240):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        email = f"{first}.{last}{n}@example.net".lower()
        if email in used_emails:
            continue
        used_emails.add(email)
        cycle_start = date(2026, 11, 1) + timedelta(days=rng.randrange(30))
        end = (cycle_start.replace(day=1) + timedelta(days=32)).replace(day=cycle_start.day)
        db.members[f"M-{n:03d}"] = member(
            f"M-{n:03d}", f"{first} {last}", email, f"+49 15{rng.randrange(10)} {rng.randrange(1000, 9999)} "
            f"{rng.randrange(1000, 9999)}", rng.choice(homes), rng.choice(plans), cycle_start.isoformat(),
            end.isoformat(), joined=(cycle_start - timedelta(days=30 * rng.randrange(1, 40))).isoformat(),
            credits=rng.randrange(0, 3))
    # bookings: members book upcoming classes they are allowed to take
    future = [c for c in db.classes.values() if int(c.class_id[3:]) >= 201 and c.start > NOW
              and c.start <= NOW + timedelta(days=db.booking_window_days)]
    generated = [m for m in db.members.values() if int(m.member_id[2:]) >= 13]
    for _ in range(330):
        m = rng.choice(generated)
        plan = db.plans[m.plan_id]
        options = [c for c in future if plan.all_locations or c.location_id == m.home_location_id]
        if not options:
            continue
        c = rng.choice(options)
        if any(db.bookings[b].member_id == m.member_id for b in c.roster + c.waitlist):
            continue
        if any(b.member_id == m.member_id and b.status != "cancelled" and not b.guest_name  # never double-booked
               and overlaps(db.classes[b.class_id], c) for b in db.bookings.values()):
            continue
        left = None if plan.class_credits is None else plan.class_credits - m.credits_used
        if left is not None and left < c.credits:
            continue
        if len(c.roster) < c.capacity:
            place(db, m.member_id, c.class_id, created="2026-11-29T12:00")
        elif len(c.waitlist) < c.waitlist_capacity:
            place(db, m.member_id, c.class_id, "waitlisted", created="2026-11-30T12:00")
    # some late fees owed
    for m in rng.sample(generated, 30):
        charge(db, m.member_id, "late_cancel_fee", 7.5, "Late cancellation", "2026-11-20T08:00")
    return db


# ----------------------------------------------------------------------------- output


def compact(obj, indent: int = 0, width: int = 200) -> str:
    one = json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))
    if len(one) + indent <= width or not isinstance(obj, (dict, list)) or not obj:
        return one
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(k)}: {compact(v, indent + 1, width)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [f"{pad}{compact(v, indent + 1, width)}" for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def count_records(db: FitnessDB) -> int:
    return (len(db.locations) + len(db.studios) + len(db.instructors) + len(db.plans) + len(db.classes)
            + len(db.members) + len(db.bookings) + len(db.pt_sessions) + len(db.charges) + len(db.checkins))


def main() -> None:
    out = HERE / "initial_states"
    out.mkdir(exist_ok=True)
    small = small_state()
    (out / "small.json").write_text(compact(small.model_dump(mode="json")) + "\n")
    large = large_state()
    (out / "large.json").write_text(json.dumps(large.model_dump(mode="json"), separators=(",", ":")) + "\n")
    print(f"small: {count_records(small)} records; large: {count_records(large)} records "
          f"({len(large.locations)} locations, {len(large.classes)} classes, {len(large.members)} members, "
          f"{len(large.bookings)} bookings)")


if __name__ == "__main__":
    main()
