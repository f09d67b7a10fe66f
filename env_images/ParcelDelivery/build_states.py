"""Writes initial_states/small.json and initial_states/large.json deterministically.

Run once from anywhere: ``python env_images/ParcelDelivery/build_states.py``.  Uses only a seeded
``random.Random`` instance (never the global random module).  Not imported by the environment.
The large state is the small one plus generated customers, addresses, lockers, shipments, pickups
and claims (about 1,000 records), so every id of the small state means the same thing in both.
"""

from __future__ import annotations

import json
import math
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOW = datetime(2026, 12, 1, 9, 0)
HUB = "HUB-KS"

# city: (depot id, postal region, pickup capacity per window)
CITIES = {
    "Leipzig": ("D-LEJ", 0, 3), "Dresden": ("D-DRS", 0, 3), "Berlin": ("D-BER", 1, 3),
    "Hamburg": ("D-HAM", 2, 1), "Hannover": ("D-HAJ", 3, 3), "Dortmund": ("D-DTM", 4, 3),
    "Cologne": ("D-CGN", 5, 3), "Frankfurt": ("D-FRA", 6, 3), "Stuttgart": ("D-STR", 7, 3),
    "Munich": ("D-MUC", 8, 3), "Nuremberg": ("D-NUE", 9, 3),
}
BASE = {"economy": 4.90, "express": 9.90, "overnight": 19.90}
PER_KG = {"economy": 0.35, "express": 0.60, "overnight": 0.95}
ZONE_ADD = {1: 0.0, 2: 1.50, 3: 3.00}


def depots():
    out = {d: {"depot_id": d, "city": c, "postal_region": r, "is_hub": False, "pickup_capacity": cap}
           for c, (d, r, cap) in CITIES.items()}
    out[HUB] = {"depot_id": HUB, "city": "Kassel", "postal_region": 3, "is_hub": True, "pickup_capacity": 0}
    return out


def zone(c1, c2):
    diff = abs(CITIES[c1][1] - CITIES[c2][1])
    return 1 if diff == 0 else 2 if diff <= 3 else 3


def route(c1, c2):
    a, b = CITIES[c1][0], CITIES[c2][0]
    if a == b:
        return [a]
    return [a, b] if CITIES[c1][1] == CITIES[c2][1] else [a, HUB, b]


def add_days(start, days):
    d = start
    while days > 0:
        d += timedelta(days=1)
        if d.weekday() != 6:
            days -= 1
    return d


def parcel(w, length, wi, h):
    billable = max(1, math.ceil(max(w, length * wi * h / 5000) - 1e-9))
    return {"weight_kg": w, "length_cm": length, "width_cm": wi, "height_cm": h, "billable_kg": billable}


def address(aid, cid, label, recipient, street, postcode, city):
    return {"address_id": aid, "customer_id": cid, "label": label, "recipient": recipient, "street": street,
            "postcode": postcode, "city": city}


def customer(cid, name, email, phone, balance, kind="private"):
    return {"customer_id": cid, "name": name, "email": email, "phone": phone, "balance": balance, "kind": kind}


def locker(lid, name, city, street, side, free):
    return {"locker_id": lid, "name": name, "city": city, "street": street, "max_side_cm": side,
            "free_compartments": free}


def iso(dt):
    return dt.isoformat()


def shipment(sid, cid, addrs, frm, to, service, parcels, created, status, pos=0, declared=0.0,
             last_scan=None, delivered=None, pickup_id=None, locker_id=None):
    """A shipment with tracking events consistent with its status and route position."""
    c1, c2 = addrs[frm]["city"], addrs[to]["city"]
    z = zone(c1, c2)
    r = route(c1, c2)
    postage = round(sum(BASE[service] + ZONE_ADD[z] + PER_KG[service] * p["billable_kg"] for p in parcels), 2)
    fee = round(max(declared - 50, 0) * 0.02, 2)
    transit = {"economy": z + 2, "express": z, "overnight": 1}[service]
    estimated = add_days(created.date(), transit)
    events = [{"at": iso(created), "depot_id": r[0], "status": "label_created",
               "description": "Label created; awaiting hand-in or pickup"}]
    t = created + timedelta(hours=8)
    if status != "label_created":
        events.append({"at": iso(t), "depot_id": r[0], "status": "picked_up",
                       "description": f"Picked up by courier in {c1}"})
        last = len(r) - 1 if status in ("at_final_depot", "out_for_delivery", "delivered") else pos
        for i in range(1, last + 1):
            t = last_scan if (last_scan and i == last) else t + timedelta(hours=14)
            st = "at_final_depot" if i == len(r) - 1 else "in_transit"
            events.append({"at": iso(t), "depot_id": r[i], "status": st,
                           "description": f"Arrived at {'hub Kassel' if r[i] == HUB else 'depot ' + r[i]}"})
        if status in ("out_for_delivery", "delivered"):
            t = (delivered or t + timedelta(hours=10)) - timedelta(hours=4)
            events.append({"at": iso(t), "depot_id": r[-1], "status": "out_for_delivery",
                           "description": "Out for delivery"})
        if status == "delivered":
            events.append({"at": iso(delivered), "depot_id": r[-1], "status": "delivered",
                           "description": "Delivered to the recipient"})
        if status == "lost":
            events.append({"at": iso(last_scan), "depot_id": r[pos], "status": "lost",
                           "description": "Parcel could not be located; declared lost"})
        if status in ("at_final_depot", "out_for_delivery", "delivered"):
            pos = len(r) - 1
    return {"shipment_id": sid, "customer_id": cid, "from_address_id": frm, "to_address_id": to,
            "locker_id": locker_id, "service": service, "zone": z, "parcels": parcels,
            "declared_value": declared, "coverage": max(50.0, declared), "amount_paid": round(postage + fee, 2),
            "status": status, "route": r, "route_position": pos, "estimated_delivery": estimated.isoformat(),
            "requested_delivery": None, "delivered_at": iso(delivered) if delivered else None,
            "pickup_id": pickup_id, "quote_id": None, "events": events, "created_at": iso(created)}


def small_state():
    customers = {c["customer_id"]: c for c in [
        customer("C-1001", "Sofia Marchetti", "sofia.marchetti@example.org", "+49 151 2204 8831", 38.50),
        customer("C-1002", "Priya Raman", "priya.raman@northwind.example", "+49 40 5550 1203", 120.00, "business"),
        customer("C-1003", "Jonas Weber", "jonas.weber@example.net", "+49 176 3381 0096", 6.20),
        customer("C-1004", "Amara Nwosu", "amara.nwosu@example.com", "+49 89 4410 7725", 75.00),
    ]}
    addrs = {a["address_id"]: a for a in [
        address("A-0001", "C-1001", "home", "Sofia Marchetti", "Kastanienallee 31", "10435", "Berlin"),
        address("A-0002", "C-1001", "Grandma", "Elena Marchetti", "Leopoldstr. 88", "80802", "Munich"),
        address("A-0003", "C-1001", "Tom", "Tom Becker", "Karl-Liebknecht-Str. 14", "04107", "Leipzig"),
        address("A-0004", "C-1001", "work", "Sofia Marchetti c/o Atelier Nord", "Torstr. 140", "10119", "Berlin"),
        address("A-0005", "C-1002", "office", "Northwind Traders, Priya Raman", "Am Sandtorkai 50", "20457", "Hamburg"),
        address("A-0006", "C-1002", "Frankfurt branch", "Northwind Traders Frankfurt", "Mainzer Landstr. 27", "60329",
                "Frankfurt"),
        address("A-0007", "C-1002", "Kessler", "Kessler Maschinenbau GmbH", "Heilbronner Str. 190", "70191",
                "Stuttgart"),
        address("A-0008", "C-1002", "home", "Priya Raman", "Eppendorfer Weg 211", "20253", "Hamburg"),
        address("A-0009", "C-1003", "home", "Jonas Weber", "Gohliser Str. 5", "04155", "Leipzig"),
        address("A-0010", "C-1003", "Lisa", "Lisa Weber", "Koenigsbruecker Str. 60", "01099", "Dresden"),
        address("A-0011", "C-1004", "home", "Amara Nwosu", "Schellingstr. 45", "80799", "Munich"),
        address("A-0012", "C-1004", "Chidi", "Chidi Nwosu", "Venloer Str. 301", "50823", "Cologne"),
    ]}
    lockers = {lk["locker_id"]: lk for lk in [
        locker("LK-001", "Leipzig Hauptbahnhof", "Leipzig", "Willy-Brandt-Platz 7", 60, 2),
        locker("LK-011", "Dresden Neustadt", "Dresden", "Antonstr. 2", 45, 2),
        locker("LK-101", "Kastanienallee", "Berlin", "Kastanienallee 12", 50, 1),
        locker("LK-102", "Alexanderplatz", "Berlin", "Alexanderplatz 3", 60, 4),
        locker("LK-201", "Hamburg Jungfernstieg", "Hamburg", "Jungfernstieg 16", 60, 3),
        locker("LK-501", "Koeln Ehrenfeld", "Cologne", "Venloer Str. 250", 60, 2),
        locker("LK-601", "Frankfurt Hauptwache", "Frankfurt", "Zeil 20", 60, 3),
        locker("LK-602", "Frankfurt Westend", "Frankfurt", "Bockenheimer Landstr. 51", 40, 2),
        locker("LK-701", "Stuttgart Nordbahnhof", "Stuttgart", "Nordbahnhofstr. 40", 50, 1),
        locker("LK-801", "Leopoldstrasse", "Munich", "Leopoldstr. 70", 60, 3),
        locker("LK-802", "Muenchner Freiheit", "Munich", "Muenchner Freiheit 1", 40, 0),
    ]}
    d = datetime
    ships = [
        shipment("SH-10001", "C-1001", addrs, "A-0001", "A-0002", "express", [parcel(2.4, 40, 30, 20)],
                 d(2026, 11, 30, 10, 15), "in_transit", pos=1, last_scan=d(2026, 12, 1, 5, 40)),
        shipment("SH-10002", "C-1001", addrs, "A-0001", "A-0003", "economy", [parcel(1.1, 30, 20, 10)],
                 d(2026, 11, 27, 16, 5), "at_final_depot", last_scan=d(2026, 12, 1, 6, 10)),
        shipment("SH-10003", "C-1001", addrs, "A-0001", "A-0002", "express", [parcel(3.0, 35, 25, 25)],
                 d(2026, 11, 20, 11, 0), "delivered", declared=180.0, delivered=d(2026, 11, 24, 13, 20)),
        shipment("SH-10004", "C-1002", addrs, "A-0005", "A-0007", "economy",
                 [parcel(8.5, 60, 40, 30), parcel(6.0, 50, 40, 30)], d(2026, 11, 30, 15, 30), "label_created",
                 declared=400.0),
        shipment("SH-10005", "C-1002", addrs, "A-0005", "A-0006", "express", [parcel(1.8, 30, 25, 15)],
                 d(2026, 11, 30, 15, 45), "label_created", pickup_id="PU-0001"),
        shipment("SH-10006", "C-1002", addrs, "A-0005", "A-0006", "economy", [parcel(4.2, 45, 35, 25)],
                 d(2026, 11, 17, 9, 30), "in_transit", pos=1, declared=250.0, last_scan=d(2026, 11, 19, 2, 15)),
        shipment("SH-10007", "C-1003", addrs, "A-0009", "A-0010", "economy", [parcel(0.9, 25, 20, 8)],
                 d(2026, 11, 30, 12, 0), "picked_up"),
        shipment("SH-10008", "C-1004", addrs, "A-0011", "A-0012", "economy", [parcel(5.5, 50, 35, 30)],
                 d(2026, 11, 4, 10, 0), "delivered", delivered=d(2026, 11, 10, 14, 0)),
        shipment("SH-10009", "C-1004", addrs, "A-0011", "A-0012", "express", [parcel(2.0, 30, 30, 20)],
                 d(2026, 11, 12, 9, 0), "lost", pos=1, declared=120.0, last_scan=d(2026, 11, 26, 8, 0)),
        shipment("SH-10010", "C-1001", addrs, "A-0004", "A-0002", "economy", [parcel(1.5, 30, 20, 15)],
                 d(2026, 11, 30, 17, 20), "label_created"),
    ]
    pickups = {"PU-0001": {"pickup_id": "PU-0001", "customer_id": "C-1002", "address_id": "A-0005",
                           "depot_id": "D-HAM", "date": "2026-12-03", "window": "12-16",
                           "shipment_ids": ["SH-10005"], "status": "scheduled"}}
    claims = {"CL-0001": {"claim_id": "CL-0001", "shipment_id": "SH-10008", "customer_id": "C-1004",
                          "kind": "damaged", "amount_claimed": 35.0, "description": "Lamp shade crushed",
                          "status": "approved", "filed_at": "2026-11-12T18:30:00"}}
    return {
        "carrier": "Kranich Paket", "now": iso(NOW), "timezone": "Europe/Berlin",
        "customers": customers, "addresses": addrs, "depots": depots(), "lockers": lockers, "quotes": {},
        "shipments": {s["shipment_id"]: s for s in ships}, "pickups": pickups, "claims": claims, "ledger": {},
        "next_address_seq": 13, "next_quote_seq": 1, "next_shipment_seq": 10011, "next_pickup_seq": 2,
        "next_claim_seq": 2, "next_ledger_seq": 1,
    }


FIRST = ["Anna", "Ben", "Clara", "David", "Eva", "Felix", "Greta", "Hannes", "Ines", "Jakob", "Katrin", "Lukas",
         "Maja", "Niklas", "Olga", "Paul", "Rosa", "Samir", "Tilda", "Umut", "Vera", "Wim", "Yara", "Zoe"]
LAST = ["Albrecht", "Brandt", "Celik", "Dietrich", "Engel", "Fuchs", "Graf", "Hahn", "Igel", "Jung", "Kraus",
        "Lorenz", "Moser", "Neumann", "Otto", "Pohl", "Quast", "Roth", "Sommer", "Thiel", "Vogt", "Winter"]
STREETS = ["Hauptstr.", "Bahnhofstr.", "Gartenweg", "Schulstr.", "Ringstr.", "Lindenallee", "Bergstr.",
           "Marktplatz", "Wiesenweg", "Kirchgasse", "Parkstr.", "Muehlenweg"]


def large_state():
    rng = random.Random(20261201)
    st = small_state()
    cities = list(CITIES)
    aseq, sseq, pseq, cseq = 13, 10011, 2, 2
    gen_customers = []
    for i in range(60):
        cid = f"C-{1005 + i}"
        first, last = FIRST[i % len(FIRST)], LAST[(i * 7) % len(LAST)]
        st["customers"][cid] = customer(cid, f"{first} {last}", f"{first.lower()}.{last.lower()}{i}@example.de",
                                        f"+49 1{rng.randint(50, 79)} {rng.randint(1000, 9999)} {rng.randint(1000, 9999)}",
                                        round(rng.uniform(0, 200), 2), "business" if i % 9 == 0 else "private")
        own = []
        for k in range(4):
            city = cities[rng.randrange(len(cities))]
            aid = f"A-{aseq:04d}"
            aseq += 1
            recipient = f"{first} {last}" if k == 0 else f"{FIRST[rng.randrange(len(FIRST))]} {LAST[rng.randrange(len(LAST))]}"
            postcode = f"{CITIES[city][1]}{rng.randint(1000, 9999)}"
            st["addresses"][aid] = address(aid, cid, "home" if k == 0 else f"contact {k}", recipient,
                                           f"{STREETS[rng.randrange(len(STREETS))]} {rng.randint(1, 120)}", postcode, city)
            own.append(aid)
        gen_customers.append((cid, own))
    for city in cities:
        depot = CITIES[city][0]
        for k in range(5):
            lid = f"LK-{CITIES[city][1]}{ord(depot[2]) % 10}{k + 3}"
            st["lockers"][lid] = locker(lid, f"{city} Station {k + 1}", city, f"{STREETS[k]} {10 + k}",
                                        rng.choice([40, 50, 60]), rng.randint(0, 6))
    statuses = ["delivered"] * 8 + ["in_transit"] * 3 + ["label_created", "picked_up", "at_final_depot",
                                                          "out_for_delivery", "cancelled"]
    for n in range(520):
        cid, own = gen_customers[n % len(gen_customers)]
        frm, to = own[0], own[1 + rng.randrange(3)]
        if st["addresses"][frm]["city"] == st["addresses"][to]["city"]:
            to = own[1 + (own.index(to)) % 3]
        created = NOW - timedelta(days=rng.randint(1, 60), hours=rng.randint(0, 9))
        status = rng.choice(statuses)
        service = rng.choice(["economy", "economy", "express", "overnight"])
        if service == "overnight" and zone(st["addresses"][frm]["city"], st["addresses"][to]["city"]) == 3:
            service = "express"
        parcels = [parcel(round(rng.uniform(0.3, 18), 1), rng.randint(20, 80), rng.randint(15, 50), rng.randint(5, 40))
                   for _ in range(1 if rng.random() < 0.8 else 2)]
        sid = f"SH-{sseq}"
        sseq += 1
        r = route(st["addresses"][frm]["city"], st["addresses"][to]["city"])
        kw: dict[str, Any] = {}
        if status == "delivered":
            created = NOW - timedelta(days=rng.randint(4, 60), hours=rng.randint(0, 9))
            kw["delivered"] = min(created + timedelta(days=rng.randint(2, 5), hours=5), NOW - timedelta(hours=20))
        if status == "in_transit":
            if len(r) == 1:
                status = "picked_up"
            else:
                kw["pos"] = 1 if len(r) > 2 else 0
                if kw["pos"] == 0:
                    status = "picked_up"
                kw["last_scan"] = NOW - timedelta(hours=rng.randint(3, 30))
        if status in ("at_final_depot", "out_for_delivery"):
            created = NOW - timedelta(days=rng.randint(2, 4))
        if status in ("label_created", "picked_up", "in_transit"):
            created = NOW - timedelta(days=1, hours=rng.randint(0, 9))
            if "last_scan" in kw:
                kw["last_scan"] = NOW - timedelta(hours=rng.randint(1, 10))
        real_status = "label_created" if status == "cancelled" else status
        s = shipment(sid, cid, st["addresses"], frm, to, service, parcels, created, real_status,
                     declared=rng.choice([0.0, 0.0, 0.0, 100.0, 300.0]), **kw)
        if status == "cancelled":
            s["status"] = "cancelled"
            s["events"].append({"at": iso(created + timedelta(hours=2)), "depot_id": s["route"][0],
                                "status": "cancelled", "description": "Shipment cancelled by the sender; label refunded"})
        st["shipments"][sid] = s
    # pickups for some labelled shipments, claims on some delivered ones
    for s in list(st["shipments"].values())[10:]:
        if s["status"] == "label_created" and s["pickup_id"] is None and pseq < 70:
            pid = f"PU-{pseq:04d}"
            pseq += 1
            a = st["addresses"][s["from_address_id"]]
            day = NOW.date() + timedelta(days=1 + rng.randrange(5))
            if day.weekday() == 6:
                day += timedelta(days=1)
            st["pickups"][pid] = {"pickup_id": pid, "customer_id": s["customer_id"], "address_id": a["address_id"],
                                  "depot_id": CITIES[a["city"]][0], "date": day.isoformat(),
                                  "window": rng.choice(["08-12", "12-16", "16-20"]), "shipment_ids": [s["shipment_id"]],
                                  "status": "scheduled"}
            s["pickup_id"] = pid
        elif s["status"] == "delivered" and rng.random() < 0.08:
            cl = f"CL-{cseq:04d}"
            cseq += 1
            st["claims"][cl] = {"claim_id": cl, "shipment_id": s["shipment_id"], "customer_id": s["customer_id"],
                                "kind": "damaged", "amount_claimed": round(rng.uniform(5, s["coverage"]), 2),
                                "description": "Contents damaged in transit",
                                "status": rng.choice(["submitted", "approved", "rejected", "paid"]),
                                "filed_at": s["delivered_at"]}
    # over-capacity guard: never more scheduled pickups in a window than the depot takes
    seen: dict[tuple, int] = {}
    for p in list(st["pickups"].values()):
        key = (p["depot_id"], p["date"], p["window"])
        seen[key] = seen.get(key, 0) + 1
        cap = next(c[2] for c in CITIES.values() if c[0] == p["depot_id"])
        if seen[key] > cap:
            p["status"] = "cancelled"
            for sid in p["shipment_ids"]:
                st["shipments"][sid]["pickup_id"] = None
    st["next_address_seq"], st["next_shipment_seq"] = aseq, sseq
    st["next_pickup_seq"], st["next_claim_seq"] = pseq, cseq
    return st


def main():
    out = HERE / "initial_states"
    out.mkdir(exist_ok=True)
    for name, state in (("small", small_state()), ("large", large_state())):
        (out / f"{name}.json").write_text(json.dumps(state, indent=1, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()
