"""Writes initial_states/small.json and initial_states/large.json deterministically.

Run once from anywhere: ``python env_images/OnlineStore/build_states.py``.  Uses only a seeded
``random.Random`` instance (never the global random module).  Not imported by the environment.
Order totals here follow the same rule as ``tools.py``: subtotal - discount + shipping, plus VAT of
the destination country on that sum.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOW = "2026-12-01T09:00:00"
VAT = {"DE": 0.19, "AT": 0.20, "FR": 0.20, "NL": 0.21, "IT": 0.22, "BE": 0.21}
WAREHOUSES = {
    "WH-BER": {"warehouse_id": "WH-BER", "name": "Berlin Hub", "country": "DE"},
    "WH-VIE": {"warehouse_id": "WH-VIE", "name": "Vienna Depot", "country": "AT"},
    "WH-RTM": {"warehouse_id": "WH-RTM", "name": "Rotterdam Port", "country": "NL"},
}

# product_id, name, brand, category, description, final_sale, active, price(s), colours, sizes
PRODUCTS = [
    ("P-101", "Fjord Insulated Parka", "Kestrel & Pine", "outerwear",
     "Hooded winter parka with recycled down-alternative fill, windproof shell, rated to -20 C.",
     False, True, 189.00, ["Navy", "Olive"], ["S", "M", "L"]),
    ("P-102", "Drizzle Packable Rain Jacket", "Kestrel & Pine", "outerwear",
     "Lightweight waterproof jacket that packs into its own pocket; taped seams.",
     False, True, 79.00, ["Yellow", "Black"], ["S", "M", "L", "XL"]),
    ("P-103", "Merino Crew Sweater", "Hollin Knitwear", "knitwear",
     "Fine-gauge merino wool crew neck, machine washable.",
     False, True, 89.00, ["Grey", "Burgundy"], ["S", "M", "L"]),
    ("P-104", "Cable Knit Cardigan", "Hollin Knitwear", "knitwear",
     "Chunky cable knit cardigan in wool-cotton blend with horn buttons.",
     False, True, 99.00, ["Cream", "Navy"], ["S", "M", "L"]),
    ("P-105", "Trailhead Waterproof Boots", "Granite Trail", "footwear",
     "Leather hiking boots with waterproof membrane and lugged sole.",
     False, True, 149.00, ["Brown"], ["41", "42", "43", "44"]),
    ("P-106", "Cloudstep Running Shoes", "Granite Trail", "footwear",
     "Cushioned road running shoes with breathable mesh upper.",
     False, True, 119.00, ["Blue", "White"], ["40", "41", "42", "43"]),
    ("P-107", "Alpaca Wool Beanie", "Hollin Knitwear", "accessories",
     "Soft alpaca-blend beanie with fold-over cuff.",
     False, True, 29.00, ["Grey", "Red"], ["OS"]),
    ("P-108", "Leather Touchscreen Gloves", "Kestrel & Pine", "accessories",
     "Lambskin gloves with cashmere lining and touchscreen fingertips.",
     False, True, 39.00, ["Black", "Brown"], ["S", "M", "L"]),
    ("P-109", "Linen Duvet Cover Set", "Casa Lino", "home",
     "Stonewashed linen duvet cover with two pillowcases.",
     False, True, {"SINGLE": 69.00, "DOUBLE": 89.00, "KING": 109.00}, ["White", "Sage"], ["SINGLE", "DOUBLE", "KING"]),
    ("P-110", "Stoneware Mug Set", "Casa Lino", "home",
     "Set of four speckled stoneware mugs, 350 ml. Clearance: final sale.",
     True, True, 34.00, ["Speckled"], ["OS"]),
    ("P-111", "Aria Noise-Cancelling Headphones", "Soundvale", "electronics",
     "Over-ear wireless headphones with active noise cancelling and 30-hour battery.",
     False, True, 229.00, ["Black", "Silver"], ["OS"]),
    ("P-112", "Pocket Power Bank 10000", "Soundvale", "electronics",
     "Slim 10,000 mAh USB-C power bank.",
     False, False, 25.00, ["Black"], ["OS"]),
]

# variant_id -> (BER, VIE, RTM); variants not listed get (3, 2, 1)
STOCK = {
    "P-101-NAVY-S": (1, 0, 1), "P-101-NAVY-M": (1, 1, 0), "P-101-NAVY-L": (2, 0, 0),
    "P-101-OLIVE-S": (0, 1, 0), "P-101-OLIVE-M": (2, 1, 1), "P-101-OLIVE-L": (0, 0, 0),
    "P-102-YELLOW-S": (4, 0, 2), "P-102-YELLOW-M": (5, 2, 3), "P-102-YELLOW-XL": (0, 0, 0),
    "P-103-GREY-M": (6, 2, 2), "P-103-BURGUNDY-S": (0, 0, 0),
    "P-105-BROWN-41": (1, 1, 0), "P-105-BROWN-42": (1, 0, 0), "P-105-BROWN-43": (2, 1, 0), "P-105-BROWN-44": (0, 0, 0),
    "P-106-WHITE-42": (0, 0, 0), "P-106-BLUE-42": (0, 0, 2),
    "P-107-GREY-OS": (12, 4, 6), "P-107-RED-OS": (8, 2, 3),
    "P-110-SPECKLED-OS": (7, 0, 0), "P-111-BLACK-OS": (3, 0, 2), "P-111-SILVER-OS": (0, 1, 0),
    "P-112-BLACK-OS": (0, 0, 0),
}


def variant_id(pid: str, colour: str, size: str) -> str:
    return f"{pid}-{colour.upper()}-{size.upper()}"


def catalog(products):
    prods, variants = {}, {}
    for pid, name, brand, cat, desc, final, active, price, colours, sizes in products:
        prods[pid] = {"product_id": pid, "name": name, "brand": brand, "category": cat, "description": desc,
                      "final_sale": final, "active": active}
        for colour in colours:
            for size in sizes:
                vid = variant_id(pid, colour, size)
                st = STOCK.get(vid, (3, 2, 1))
                p = price[size] if isinstance(price, dict) else price
                variants[vid] = {"variant_id": vid, "product_id": pid, "colour": colour,
                                 "size": size.title() if size in ("SINGLE", "DOUBLE", "KING") else size,
                                 "price": p, "stock": {"WH-BER": st[0], "WH-VIE": st[1], "WH-RTM": st[2]}}
    return prods, variants


def address(aid, label, recipient, street, city, postal, country):
    return {"address_id": aid, "label": label, "recipient": recipient, "street": street, "city": city,
            "postal_code": postal, "country": country}


def card(pmid, brand, last4, expiry):
    return {"payment_method_id": pmid, "kind": "card", "brand": brand, "last4": last4, "expiry": expiry, "email": None}


def paypal(pmid, email):
    return {"payment_method_id": pmid, "kind": "paypal", "brand": "PayPal", "last4": None, "expiry": None, "email": email}


def customer(cid, name, email, addrs, pms, credit, created):
    return {"customer_id": cid, "name": name, "email": email, "addresses": {a["address_id"]: a for a in addrs},
            "payment_methods": {p["payment_method_id"]: p for p in pms}, "store_credit": credit,
            "created_at": created}


def small_customers():
    cs = [
        customer("C-1001", "Sofia Marchetti", "sofia.marchetti@example.org",
                 [address("AD-0001", "Home", "Sofia Marchetti", "Lindenstrasse 12", "Berlin", "10969", "DE"),
                  address("AD-0002", "Office", "Sofia Marchetti", "Friedrichstrasse 68", "Berlin", "10117", "DE")],
                 [card("PM-0001", "Visa", "9012", "2028-09"), paypal("PM-0002", "sofia.marchetti@example.org")],
                 0.0, "2024-03-11T18:20:00"),
        customer("C-1002", "Priya Raman", "priya.raman@example.in",
                 [address("AD-0003", "Home", "Priya Raman", "Keizersgracht 221", "Amsterdam", "1016 DV", "NL")],
                 [card("PM-0003", "Mastercard", "4417", "2027-03"), card("PM-0004", "Amex", "1005", "2026-10")],
                 15.0, "2025-01-05T10:02:00"),
        customer("C-1003", "Lukas Gruber", "lukas.gruber@example.at",
                 [address("AD-0004", "Home", "Lukas Gruber", "Praterstrasse 31", "Wien", "1020", "AT")],
                 [card("PM-0005", "Visa", "7781", "2029-01")], 0.0, "2025-06-19T21:45:00"),
        customer("C-1004", "Camille Durand", "camille.durand@example.fr",
                 [address("AD-0005", "Home", "Camille Durand", "12 rue des Martyrs", "Paris", "75009", "FR")],
                 [card("PM-0006", "Mastercard", "2290", "2027-12")], 0.0, "2026-11-29T14:10:00"),
        customer("C-1005", "Jonas Weber", "jonas.weber@example.de",
                 [address("AD-0006", "Home", "Jonas Weber", "Schanzenstrasse 5", "Hamburg", "20357", "DE")],
                 [card("PM-0007", "Visa", "3321", "2028-02")], 42.5, "2023-11-02T08:00:00"),
        customer("C-1006", "Giulia Bianchi", "giulia.bianchi@example.it",
                 [address("AD-0007", "Home", "Giulia Bianchi", "Via Torino 40", "Milano", "20123", "IT")],
                 [paypal("PM-0008", "giulia.bianchi@example.it")], 0.0, "2025-09-30T12:30:00"),
    ]
    return {c["customer_id"]: c for c in cs}


def cart(cid, lines, promo=None):
    return {"customer_id": cid, "lines": [{"variant_id": v, "quantity": q} for v, q in lines], "promo_code": promo}


PROMOS = [
    ("WELCOME10", "10% off your first order", "percent", 10.0, 0.0, None, True, "2027-12-31"),
    ("WINTER15", "15% off outerwear on carts from 100 EUR", "percent", 15.0, 100.0, "outerwear", False, "2026-12-31"),
    ("TAKE20", "20 EUR off carts from 150 EUR", "fixed", 20.0, 150.0, None, False, "2027-01-31"),
    ("SHIPFREE", "Free standard shipping on carts from 30 EUR", "free_shipping", 0.0, 30.0, None, False, "2026-12-24"),
    ("AUTUMN25", "25% off everything (autumn sale)", "percent", 25.0, 0.0, None, False, "2026-11-30"),
]

GIFT_CARDS = [
    ("GIFT-7Q2M-K9LD", 50.0, "2027-12-31", None, None),
    ("GIFT-H3XP-2WRN", 25.0, "2027-06-30", "C-1005", "2026-10-02T19:12:00"),
    ("GIFT-OLD1-5TZA", 30.0, "2026-06-30", None, None),
    ("GIFT-R8VC-M4QE", 100.0, "2027-06-30", None, None),
]


def order(oid, cid, status, lines, addr, pm, placed, *, speed="standard", shipped=None, delivered=None,
          cancelled=None, reason="", credit=0.0, promo=None, discounts=None, variants=None, allocs=None):
    """An order dict priced like tools.place_store_order (lines: [(variant_id, qty)])."""
    out_lines = []
    subtotal = 0.0
    for i, (vid, q) in enumerate(lines):
        v = variants[vid]
        subtotal += v["price"] * q
        out_lines.append({"variant_id": vid, "product_id": v["product_id"], "product_name": NAMES[v["product_id"]],
                          "colour": v["colour"], "size": v["size"], "unit_price": v["price"], "quantity": q,
                          "discount": (discounts or [0.0] * len(lines))[i], "returned_quantity": 0,
                          "allocations": (allocs or {}).get(vid, [])})
    subtotal = round(subtotal, 2)
    discount = round(sum(x["discount"] for x in out_lines), 2)
    goods = round(subtotal - discount, 2)
    shipping = 14.95 if speed == "express" else (0.0 if goods >= 60 else 4.95)
    rate = VAT[addr["country"]]
    tax = round((goods + shipping) * rate, 2)
    total = round(goods + shipping + tax, 2)
    charged = round(total - credit, 2)
    o = {"order_id": oid, "customer_id": cid, "status": status, "lines": out_lines, "shipping_address": dict(addr),
         "shipping_speed": speed, "promo_code": promo, "subtotal": subtotal, "discount": discount,
         "shipping": shipping, "vat_rate": rate, "tax": tax, "total": total, "paid_with_store_credit": credit,
         "charged_to_payment_method": charged, "payment_method_id": pm if charged > 0 else None,
         "refunded_to_payment_method": 0.0, "refunded_to_store_credit": 0.0, "placed_at": placed,
         "shipped_at": shipped, "delivered_at": delivered, "cancelled_at": cancelled, "cancel_reason": reason,
         "return_ids": []}
    if status == "cancelled":
        o["refunded_to_payment_method"] = charged
        o["refunded_to_store_credit"] = credit
    return o


NAMES = {p[0]: p[1] for p in PRODUCTS}


def small_orders(customers, variants):
    a = {aid: ad for c in customers.values() for aid, ad in c["addresses"].items()}
    os_ = [
        order("ORD-10001", "C-1001", "delivered", [("P-102-BLACK-M", 1), ("P-108-BLACK-M", 1)], a["AD-0001"], "PM-0001",
              "2026-11-16T20:04:00", shipped="2026-11-17T15:00:00", delivered="2026-11-20T11:32:00", variants=variants,
              allocs={"P-102-BLACK-M": [{"warehouse_id": "WH-BER", "quantity": 1}],
                      "P-108-BLACK-M": [{"warehouse_id": "WH-BER", "quantity": 1}]}),
        order("ORD-10002", "C-1001", "processing", [("P-101-NAVY-M", 1)], a["AD-0001"], "PM-0002",
              "2026-11-30T22:15:00", speed="express", variants=variants,
              allocs={"P-101-NAVY-M": [{"warehouse_id": "WH-BER", "quantity": 1}]}),
        order("ORD-10003", "C-1002", "delivered", [("P-111-BLACK-OS", 1), ("P-107-RED-OS", 1)], a["AD-0003"], "PM-0003",
              "2026-11-21T09:40:00", shipped="2026-11-22T10:00:00", delivered="2026-11-25T14:05:00", promo="TAKE20",
              discounts=[17.75, 2.25], variants=variants,
              allocs={"P-111-BLACK-OS": [{"warehouse_id": "WH-RTM", "quantity": 1}],
                      "P-107-RED-OS": [{"warehouse_id": "WH-RTM", "quantity": 1}]}),
        order("ORD-10004", "C-1002", "delivered", [("P-106-BLUE-41", 1)], a["AD-0003"], "PM-0003",
              "2026-10-15T19:00:00", shipped="2026-10-16T12:00:00", delivered="2026-10-20T10:15:00", variants=variants,
              allocs={"P-106-BLUE-41": [{"warehouse_id": "WH-RTM", "quantity": 1}]}),
        order("ORD-10005", "C-1003", "shipped", [("P-103-BURGUNDY-L", 1), ("P-107-GREY-OS", 1)], a["AD-0004"], "PM-0005",
              "2026-11-28T16:22:00", shipped="2026-11-29T09:10:00", variants=variants,
              allocs={"P-103-BURGUNDY-L": [{"warehouse_id": "WH-VIE", "quantity": 1}],
                      "P-107-GREY-OS": [{"warehouse_id": "WH-VIE", "quantity": 1}]}),
        order("ORD-10006", "C-1003", "delivered", [("P-110-SPECKLED-OS", 1), ("P-109-SAGE-KING", 1)], a["AD-0004"],
              "PM-0005", "2026-11-06T11:00:00", shipped="2026-11-07T08:00:00", delivered="2026-11-10T13:45:00",
              variants=variants,
              allocs={"P-110-SPECKLED-OS": [{"warehouse_id": "WH-BER", "quantity": 1}],
                      "P-109-SAGE-KING": [{"warehouse_id": "WH-VIE", "quantity": 1}]}),
        order("ORD-10007", "C-1005", "delivered", [("P-104-CREAM-M", 2)], a["AD-0006"], "PM-0007",
              "2026-11-18T07:55:00", shipped="2026-11-18T16:00:00", delivered="2026-11-22T12:20:00", credit=25.0,
              variants=variants, allocs={"P-104-CREAM-M": [{"warehouse_id": "WH-BER", "quantity": 2}]}),
        order("ORD-10008", "C-1005", "cancelled", [("P-111-SILVER-OS", 1)], a["AD-0006"], "PM-0007",
              "2026-11-04T13:00:00", cancelled="2026-11-05T08:30:00", reason="Found it cheaper elsewhere",
              variants=variants, allocs={"P-111-SILVER-OS": [{"warehouse_id": "WH-VIE", "quantity": 1}]}),
        order("ORD-10009", "C-1006", "processing", [("P-105-BROWN-41", 1), ("P-107-RED-OS", 1)], a["AD-0007"], "PM-0008",
              "2026-12-01T08:10:00", variants=variants,
              allocs={"P-105-BROWN-41": [{"warehouse_id": "WH-BER", "quantity": 1}],
                      "P-107-RED-OS": [{"warehouse_id": "WH-BER", "quantity": 1}]}),
    ]
    return {o["order_id"]: o for o in os_}


# review_id, product_id, customer_id, rating, title, body, created_at
REVIEWS = [
    ("P-101", "C-1005", 5, "Properly warm", "Wore it through a Hamburg January, never cold.", "2026-02-03T10:00:00"),
    ("P-101", "C-1003", 4, "Warm but bulky", "Great for Vienna winters, sleeves run a bit long.", "2026-01-15T18:00:00"),
    ("P-102", "C-1006", 3, "OK for light rain", "Fine for a drizzle, wets out in a downpour.", "2026-05-20T09:00:00"),
    ("P-105", "C-1003", 5, "Bombproof", "Dry feet after a full day in the Alps.", "2025-10-11T17:30:00"),
    ("P-105", "C-1005", 4, "Comfortable after break-in", "Took a week to soften up.", "2026-03-08T08:00:00"),
    ("P-105", "C-1001", 2, "Sizing runs small", "Had to return for a size up.", "2026-09-01T12:00:00"),
    ("P-106", "C-1002", 4, "Light and bouncy", "Good for 10k runs, wide toe box.", "2026-10-30T07:00:00"),
    ("P-111", "C-1005", 5, "Best ANC at the price", "Silences the train completely.", "2026-08-14T19:00:00"),
    ("P-111", "C-1006", 3, "Great sound, tight fit", "Clamps a bit after an hour.", "2026-07-02T21:00:00"),
    ("P-103", "C-1004", 4, "Soft merino", "No itch at all, washes well.", "2026-11-30T10:00:00"),
    ("P-104", "C-1005", 5, "Cosy", "Lovely thick knit, true to size.", "2026-11-27T16:00:00"),
    ("P-109", "C-1003", 4, "Nice linen", "Gets softer with every wash.", "2026-11-20T20:00:00"),
]


def reviews(rows, start=1):
    out = {}
    for i, (pid, cid, rating, title, body, at) in enumerate(rows, start):
        rid = f"RV-{i:04d}"
        out[rid] = {"review_id": rid, "product_id": pid, "customer_id": cid, "rating": rating, "title": title,
                    "body": body, "verified_purchase": True, "created_at": at}
    return out


def base_state(products):
    prods, variants = catalog(products)
    customers = small_customers()
    return {
        "now": NOW, "store_name": "Kestrel & Pine Outfitters", "currency": "EUR", "vat_rates": VAT,
        "standard_shipping": 4.95, "express_shipping": 14.95, "free_shipping_threshold": 60.0,
        "return_window_days": 30, "max_quantity_per_line": 10, "warehouses": WAREHOUSES,
        "products": prods, "variants": variants, "customers": customers,
        "carts": {
            "C-1001": cart("C-1001", [("P-103-GREY-M", 1), ("P-107-GREY-OS", 2)]),
            "C-1002": cart("C-1002", []),
            "C-1003": cart("C-1003", [("P-105-BROWN-43", 1)]),
            "C-1004": cart("C-1004", [("P-102-YELLOW-M", 1)]),
            "C-1005": cart("C-1005", []),
            "C-1006": cart("C-1006", [("P-109-WHITE-DOUBLE", 1), ("P-110-SPECKLED-OS", 1)]),
        },
        "promo_codes": {c: {"code": c, "description": d, "kind": k, "value": v, "min_subtotal": m, "category": cat,
                            "first_order_only": f, "valid_until": u} for c, d, k, v, m, cat, f, u in PROMOS},
        "gift_cards": {c: {"code": c, "amount": a, "valid_until": u, "redeemed_by": by, "redeemed_at": at}
                       for c, a, u, by, at in GIFT_CARDS},
        "orders": small_orders(customers, variants),
        "returns": {},
        "reviews": reviews(REVIEWS),
        "next_order_seq": 10, "next_return_seq": 1, "next_review_seq": len(REVIEWS) + 1, "next_address_seq": 8,
    }


def small_state() -> dict:
    return base_state(PRODUCTS)


# ------------------------------------------------------------------------------------- large

ADJ = ["Harbor", "Summit", "Meadow", "Nordic", "Coastal", "Urban", "Alpine", "Birch", "Canyon", "Glacier",
       "Juniper", "Lakeside"]
KINDS = [("outerwear", "Softshell Jacket", 119.0, ["S", "M", "L"]), ("outerwear", "Fleece Vest", 59.0, ["S", "M", "L"]),
         ("knitwear", "Wool Scarf", 35.0, ["OS"]), ("knitwear", "Lambswool Jumper", 75.0, ["S", "M", "L"]),
         ("footwear", "Canvas Sneakers", 65.0, ["40", "42", "44"]), ("footwear", "Wool Slippers", 45.0, ["40", "42", "44"]),
         ("accessories", "Canvas Tote", 24.0, ["OS"]), ("accessories", "Leather Belt", 49.0, ["S", "M", "L"]),
         ("home", "Waffle Bath Towel", 32.0, ["OS"]), ("home", "Wool Throw Blanket", 95.0, ["OS"]),
         ("electronics", "Bluetooth Speaker", 79.0, ["OS"]), ("electronics", "USB-C Charger 65W", 39.0, ["OS"])]
BRANDS = ["Kestrel & Pine", "Hollin Knitwear", "Granite Trail", "Casa Lino", "Soundvale", "Fernweh Goods"]
COLOURS = ["Black", "Grey", "Navy", "Olive", "Rust", "Sand"]
FIRST = ["Anna", "Ben", "Clara", "David", "Elif", "Felix", "Greta", "Hugo", "Ines", "Jan", "Kira", "Leon", "Mara",
         "Nils", "Olga", "Paul", "Rosa", "Sami", "Tara", "Uwe"]
LAST = ["Becker", "Costa", "Dubois", "Eriksen", "Fontaine", "Hansen", "Janssen", "Kovac", "Lindqvist", "Moreau",
        "Novak", "Peeters", "Ricci", "Schulz"]
CITIES = [("Berlin", "DE", "10{:03d}"), ("Munich", "DE", "80{:03d}"), ("Wien", "AT", "1{:03d}"),
          ("Graz", "AT", "8{:03d}"), ("Lyon", "FR", "69{:03d}"), ("Utrecht", "NL", "35{:02d} KL"),
          ("Torino", "IT", "10{:03d}"), ("Gent", "BE", "9{:03d}")]
STREETS = ["Hauptstrasse", "Bahnhofstrasse", "Marktplatz", "Rue Victor Hugo", "Via Roma", "Kerkstraat", "Gartenweg"]


def large_state() -> dict:
    rng = random.Random(1313)
    products = list(PRODUCTS)
    n = 201
    for i in range(60):
        cat, kind, base, sizes = KINDS[i % len(KINDS)]
        adj = ADJ[(i * 5 + i // len(KINDS)) % len(ADJ)]
        price = round(base + rng.choice([-10, -5, 0, 5, 10, 20]), 2)
        cols = rng.sample(COLOURS, 2 if len(sizes) > 1 else 3)
        products.append((f"P-{n}", f"{adj} {kind}", BRANDS[i % len(BRANDS)], cat,
                         f"{adj} {kind.lower()} from our {cat} range.", i % 17 == 16, i % 23 != 22, price, cols, sizes))
        NAMES[f"P-{n}"] = f"{adj} {kind}"
        n += 1
    st = base_state(products)
    for vid, v in st["variants"].items():
        if vid[:5] >= "P-201":
            v["stock"] = {w: rng.choice([0, 0, 1, 2, 3, 5, 8]) for w in ("WH-BER", "WH-VIE", "WH-RTM")}
    vids = [v for v in st["variants"] if v[:5] >= "P-201"]
    aseq, pmseq = 8, 9
    start = datetime(2026, 6, 1, 9, 0)
    oseq = 10
    rows = list(REVIEWS)
    for i in range(120):
        cid = f"C-{2001 + i}"
        name = f"{FIRST[i % len(FIRST)]} {LAST[(i * 3 + i // len(FIRST)) % len(LAST)]}"
        email = f"{name.lower().replace(' ', '.')}{i + 1}@example.net"
        addrs: list[dict[str, Any]] = []
        for label in (["Home", "Work"] if i % 3 == 0 else ["Home"]):
            city, cc, fmt = CITIES[(i + len(addrs)) % len(CITIES)]
            addrs.append(address(f"AD-{aseq:04d}", label, name, f"{STREETS[(i + aseq) % len(STREETS)]} {1 + i % 90}",
                                 city, fmt.format(rng.randrange(10, 99)), cc))
            aseq += 1
        pms = [card(f"PM-{pmseq:04d}", rng.choice(["Visa", "Mastercard"]), f"{rng.randrange(10000):04d}",
                    f"{rng.choice([2026, 2027, 2028, 2029])}-{rng.randrange(1, 13):02d}")]
        pmseq += 1
        if i % 4 == 0:
            pms.append(paypal(f"PM-{pmseq:04d}", email))
            pmseq += 1
        st["customers"][cid] = customer(cid, name, email, addrs, pms, rng.choice([0.0, 0.0, 0.0, 10.0, 25.0]),
                                        (start - timedelta(days=400 - i)).isoformat())
        st["carts"][cid] = cart(cid, [(rng.choice(vids), 1)] if i % 5 == 0 else [])
        for _ in range(1 + (i % 3 == 0)):
            placed = start + timedelta(days=rng.randrange(0, 170), hours=rng.randrange(0, 12))
            lines = [(v, rng.choice([1, 1, 2])) for v in dict.fromkeys(rng.sample(vids, rng.choice([1, 1, 2])))]
            delivered = placed + timedelta(days=4)
            status = "delivered" if delivered < datetime(2026, 11, 28) else "shipped"
            o = order(f"ORD-{10000 + oseq}", cid, status, lines, addrs[0], pms[0]["payment_method_id"],
                      placed.isoformat(), shipped=(placed + timedelta(days=1)).isoformat(),
                      delivered=delivered.isoformat() if status == "delivered" else None, variants=st["variants"],
                      allocs={v: [{"warehouse_id": "WH-BER", "quantity": q}] for v, q in lines})
            st["orders"][o["order_id"]] = o
            oseq += 1
            if status == "delivered" and rng.random() < 0.7:
                line = o["lines"][0]
                rows.append((line["product_id"], cid, rng.choice([2, 3, 4, 4, 5, 5]), "Review",
                             f"Bought the {line['colour'].lower()} one.", (delivered + timedelta(days=3)).isoformat()))
    st["reviews"] = reviews(rows)
    st["next_order_seq"] = oseq
    st["next_review_seq"] = len(rows) + 1
    st["next_address_seq"] = aseq
    return st


def main() -> None:
    out = HERE / "initial_states"
    out.mkdir(exist_ok=True)
    for name, st in (("small", small_state()), ("large", large_state())):
        (out / f"{name}.json").write_text(json.dumps(st, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
