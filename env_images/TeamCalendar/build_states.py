"""Deterministically writes initial_states/small.json and initial_states/large.json.

Run once from anywhere:  python env_images/TeamCalendar/build_states.py
Not imported by the runtime. large.json = small.json's records plus seeded random people, rooms,
events and out-of-office blocks (random.Random(2026), no global random).
"""

from __future__ import annotations

import json
import random
from datetime import date, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOW = "2026-12-01T09:00:00"


def person(pid, name, team, title, tz, ws, we):
    email = name.lower().replace(" ", ".") + "@northwind.example"
    return {"person_id": pid, "name": name, "email": email, "team": team, "title": title,
            "timezone_label": tz, "work_start": ws, "work_end": we}


def room(rid, name, cap, floor, eq):
    return {"room_id": rid, "name": name, "capacity": cap, "floor": floor, "equipment": eq}


def event(eid, title, org, att, start, end, room_id=None, *, status="confirmed", agenda="",
          recurrence="none", series=None, reason=None):
    attendees = [{"person_id": org, "rsvp": "accepted", "comment": ""}]
    for a in att:
        pid, rsvp = (a, "needs_action") if isinstance(a, str) else a
        attendees.append({"person_id": pid, "rsvp": rsvp, "comment": ""})
    attendees[1:] = sorted(attendees[1:], key=lambda a: a["person_id"])
    return {"event_id": eid, "title": title, "organizer_id": org, "attendees": attendees,
            "start": start, "end": end, "room_id": room_id, "recurrence": recurrence, "series_id": series,
            "status": status, "agenda": agenda, "cancellation_reason": reason,
            "created_at": "2026-11-20T12:00:00"}


def small_state() -> dict:
    people = [
        person("P-001", "Lena Fischer", "Engineering", "Engineering Manager", "Europe/Berlin", "09:00", "17:30"),
        person("P-002", "Omar Haddad", "Engineering", "Backend Engineer", "Europe/Berlin", "09:00", "18:00"),
        person("P-003", "Priya Raman", "Engineering", "Frontend Engineer", "Asia/Kolkata", "07:00", "15:00"),
        person("P-004", "Dana Kim", "Design", "Product Designer", "Europe/Berlin", "10:00", "18:00"),
        person("P-005", "Marco Rossi", "Product", "Product Manager", "Europe/Rome", "08:30", "17:00"),
        person("P-006", "Sofia Almeida", "Sales", "Account Executive", "Europe/Lisbon", "10:00", "19:00"),
        person("P-007", "Jonas Berg", "Sales", "Sales Lead", "Europe/Berlin", "08:00", "16:30"),
        person("P-008", "Aisha Bello", "People Ops", "HR Partner", "Europe/London", "10:00", "18:00"),
        person("P-009", "Tom Novak", "Engineering", "Site Reliability Engineer", "Europe/Prague", "08:00", "16:00"),
        person("P-010", "Keiko Tanaka", "Design", "Design Lead", "Europe/Berlin", "09:00", "17:00"),
    ]
    rooms = [
        room("RM-101", "Harbor", 4, 1, ["whiteboard", "phone"]),
        room("RM-102", "Lagoon", 8, 1, ["video", "whiteboard"]),
        room("RM-201", "Summit", 12, 2, ["video", "projector", "phone"]),
        room("RM-202", "Fjord", 6, 2, ["video", "whiteboard"]),
        room("RM-301", "Atrium", 20, 3, ["video", "projector", "whiteboard", "phone"]),
        room("RM-302", "Nook", 2, 3, ["phone"]),
    ]
    A, D, T = "accepted", "declined", "tentative"
    everyone_but_aisha = [f"P-{i:03d}" for i in range(1, 11) if i != 8]
    events = [
        event("EV-0001", "Engineering standup", "P-001", [("P-002", A), ("P-003", A), ("P-009", A)],
              "2026-12-01T08:30:00", "2026-12-01T08:45:00", "RM-101"),
        event("EV-0002", "Engineering weekly sync", "P-001", [("P-002", A), ("P-003", A), ("P-009", T)],
              "2026-12-03T10:00:00", "2026-12-03T11:00:00", "RM-202", recurrence="weekly", series="SR-001",
              agenda="Sprint status, on-call handover"),
        event("EV-0003", "Engineering weekly sync", "P-001", [("P-002", A), ("P-003", A), ("P-009", T)],
              "2026-12-10T10:00:00", "2026-12-10T11:00:00", "RM-202", recurrence="weekly", series="SR-001",
              agenda="Sprint status, on-call handover"),
        event("EV-0004", "Design review", "P-010", [("P-004", A), ("P-005", T)],
              "2026-12-02T14:00:00", "2026-12-02T15:00:00", "RM-102", agenda="Checkout flow v2"),
        event("EV-0005", "Q1 roadmap planning", "P-005", [("P-001", A), "P-004", ("P-010", A), ("P-007", D)],
              "2026-12-04T13:00:00", "2026-12-04T15:00:00", "RM-201"),
        event("EV-0006", "Customer demo: Acme", "P-006", [("P-007", A), ("P-002", A)],
              "2026-12-02T11:00:00", "2026-12-02T12:00:00", "RM-202"),
        event("EV-0007", "1:1 Lena / Omar", "P-001", [("P-002", A)],
              "2026-12-02T16:00:00", "2026-12-02T16:30:00", "RM-302"),
        event("EV-0008", "Benefits info session", "P-008", everyone_but_aisha,
              "2026-12-08T15:00:00", "2026-12-08T16:00:00", "RM-301", agenda="2027 health plan and pension changes"),
        event("EV-0009", "Incident postmortem", "P-009", [("P-002", A), "P-001"],
              "2026-12-03T15:00:00", "2026-12-03T16:00:00", None),
        event("EV-0010", "Sales pipeline review", "P-007", [("P-006", A)],
              "2026-12-07T09:30:00", "2026-12-07T10:30:00", "RM-101"),
        event("EV-0011", "Offsite planning", "P-008", [("P-005", A), ("P-001", A)],
              "2026-12-09T11:00:00", "2026-12-09T12:00:00", "RM-102", status="cancelled",
              reason="Postponed to January"),
        event("EV-0012", "Frontend guild", "P-003", [("P-002", A), ("P-004", A)],
              "2026-12-10T13:00:00", "2026-12-10T14:00:00", "RM-202"),
        event("EV-0013", "Hiring debrief", "P-001", [("P-008", A), "P-009"],
              "2026-12-11T10:00:00", "2026-12-11T10:45:00", "RM-101"),
        event("EV-0014", "Pricing workshop", "P-005", [("P-006", A), ("P-007", T), "P-004"],
              "2026-12-14T10:00:00", "2026-12-14T12:00:00", "RM-201"),
        event("EV-0015", "Design critique", "P-010", [("P-004", A)],
              "2026-12-01T10:00:00", "2026-12-01T11:00:00", "RM-202"),
    ]
    ooo = [{"ooo_id": "OOO-0001", "person_id": "P-004", "start": "2026-12-09T00:00:00",
            "end": "2026-12-12T00:00:00", "note": "Conference in Copenhagen"}]
    return {
        "organisation": "Northwind Labs", "timezone": "Europe/Berlin", "now": NOW,
        "people": {p["person_id"]: p for p in people},
        "rooms": {r["room_id"]: r for r in rooms},
        "events": {e["event_id"]: e for e in events},
        "out_of_office": {o["ooo_id"]: o for o in ooo},
        "notices": {},
        "next_event_seq": 16, "next_series_seq": 2, "next_ooo_seq": 2, "next_notice_seq": 1,
    }


FIRST = ["Ana", "Ben", "Chen", "Dmitri", "Elif", "Farah", "Gus", "Hana", "Ivan", "Jia", "Kofi", "Lara", "Mateo",
         "Nadia", "Oskar", "Pia", "Quinn", "Rafael", "Sana", "Theo", "Uma", "Viktor", "Wen", "Ximena", "Yusuf", "Zoe"]
LAST = ["Andersen", "Brooks", "Costa", "Dubois", "Eriksen", "Ferreira", "Gallo", "Horvat", "Ito", "Jansen",
        "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Okafor", "Petrov", "Quist", "Ramos", "Schmidt", "Tanaka",
        "Ueda", "Varga", "Weber", "Yilmaz", "Zimmer"]
TEAMS = ["Engineering", "Design", "Product", "Sales", "People Ops", "Finance", "Marketing", "Support"]
TZS = [("Europe/Berlin", "09:00", "17:30"), ("Europe/London", "10:00", "18:00"), ("Europe/Lisbon", "10:00", "19:00"),
       ("Asia/Kolkata", "07:00", "15:00"), ("America/New_York", "14:00", "20:00"), ("Europe/Warsaw", "08:00", "16:30")]
ROOM_NAMES = ["Birch", "Cedar", "Delta", "Ember", "Falcon", "Glacier", "Heron", "Iris", "Juniper", "Kestrel", "Lotus",
              "Maple", "Nebula", "Orchid", "Pine", "Quartz", "Raven", "Sierra", "Tundra", "Umber", "Vale", "Willow",
              "Yarrow", "Zephyr", "Alder", "Basalt", "Coral", "Dune", "Estuary", "Flint", "Granite", "Hollow", "Indigo",
              "Jasper"]
TITLES = ["Sprint planning", "Retro", "1:1", "Customer call", "Budget review", "Architecture review", "Hiring sync",
          "Campaign kickoff", "Support escalation", "Quarterly business review", "Onboarding", "Design jam",
          "Release readiness", "Vendor meeting", "Team lunch", "Roadmap sync", "Security review", "Brown bag"]
EQUIP = ["video", "whiteboard", "projector", "phone"]


def large_state() -> dict:
    rng = random.Random(2026)
    s = small_state()
    used_names = {p["name"] for p in s["people"].values()}
    for i in range(11, 151):
        while True:
            name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
            if name not in used_names:
                used_names.add(name)
                break
        tz, ws, we = rng.choice(TZS)
        team = rng.choice(TEAMS)
        s["people"][f"P-{i:03d}"] = person(f"P-{i:03d}", name, team, f"{team} specialist", tz, ws, we)
    for i, nm in enumerate(ROOM_NAMES):
        floor = 4 + i // 6
        rid = f"RM-{floor}{(i % 6) + 1:02d}"
        cap = rng.choice([2, 4, 4, 6, 6, 8, 10, 12, 16, 24])
        eq = sorted(rng.sample(EQUIP, rng.randint(0, 4)), key=EQUIP.index)
        s["rooms"][rid] = room(rid, nm, cap, floor, eq)
    people = sorted(s["people"])
    rooms = sorted(s["rooms"].values(), key=lambda r: r["room_id"])
    days = [date(2026, 12, d) for d in range(1, 32) if date(2026, 12, d).weekday() < 5]
    booked: dict[str, list[tuple[datetime, datetime]]] = {r["room_id"]: [] for r in rooms}
    for e in s["events"].values():
        if e["room_id"] and e["status"] == "confirmed":
            booked[e["room_id"]].append((datetime.fromisoformat(e["start"]), datetime.fromisoformat(e["end"])))
    seq = s["next_event_seq"]
    while seq < 16 + 790:
        day = rng.choice(days)
        start = datetime(day.year, day.month, day.day, rng.randint(8, 17), rng.choice([0, 30]))
        if start < datetime.fromisoformat(NOW):
            continue
        end = start + timedelta(minutes=rng.choice([30, 30, 45, 60, 60, 90]))
        if end.hour >= 19:
            continue
        org = rng.choice(people[10:])
        att = rng.sample([p for p in people if p != org], rng.randint(1, 7))
        n = len(att) + 1
        room_id = None
        if rng.random() < 0.8:
            for r in rng.sample(rooms, len(rooms)):
                if r["capacity"] >= n and all(not (a < end and start < b) for a, b in booked[r["room_id"]]):
                    room_id = r["room_id"]
                    booked[room_id].append((start, end))
                    break
        rsvps = [(p, rng.choice(["accepted", "accepted", "needs_action", "tentative", "declined"])) for p in att]
        status = "cancelled" if rng.random() < 0.05 else "confirmed"
        if status == "cancelled" and room_id:
            booked[room_id].remove((start, end))
        eid = f"EV-{seq:04d}"
        s["events"][eid] = event(eid, rng.choice(TITLES), org, rsvps, start.isoformat(), end.isoformat(), room_id,
                                 status=status, reason="Cancelled by organizer" if status == "cancelled" else None)
        seq += 1
    s["next_event_seq"] = seq
    oseq = s["next_ooo_seq"]
    for pid in rng.sample(people[10:], 20):
        d = rng.choice(days)
        length = rng.randint(1, 5)
        oid = f"OOO-{oseq:04d}"
        s["out_of_office"][oid] = {"ooo_id": oid, "person_id": pid, "start": f"{d.isoformat()}T00:00:00",
                                   "end": f"{(d + timedelta(days=length)).isoformat()}T00:00:00",
                                   "note": rng.choice(["Vacation", "Sick leave", "Conference", "Training"])}
        oseq += 1
    s["next_ooo_seq"] = oseq
    return s


def main() -> None:
    out = HERE / "initial_states"
    out.mkdir(exist_ok=True)
    for name, st in (("small", small_state()), ("large", large_state())):
        (out / f"{name}.json").write_text(json.dumps(st, indent=1) + "\n", encoding="utf-8")
        n = sum(len(st[k]) for k in ("people", "rooms", "events", "out_of_office"))
        print(name, n, "records")


if __name__ == "__main__":
    main()
