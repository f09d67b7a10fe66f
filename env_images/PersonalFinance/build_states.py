"""Writes initial_states/small.json and initial_states/large.json deterministically.

Run once from anywhere: ``python env_images/PersonalFinance/build_states.py``.  Uses only a seeded
``random.Random`` instance (never the global random module).  Not imported by the environment.
"""

from __future__ import annotations

import json
import random
from datetime import date, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOW = "2026-12-01T09:00:00"

CUSTOMERS = {
    "CU-001": {"customer_id": "CU-001", "name": "Sofia Marchetti", "email": "sofia.marchetti@example.org",
               "phone": "+49 151 2204 8831"},
    "CU-002": {"customer_id": "CU-002", "name": "Daniel Okafor", "email": "daniel.okafor@example.org",
               "phone": "+49 160 9917 4410"},
}

PAYEES = [
    ("Stadtwerke Energie", "DE44500105175407324931", "KD-558120", "utilities"),
    ("Hausverwaltung Adler", "DE02120300000000202051", "Whg 3B Lindenstr. 12", "housing"),
    ("Kita Sonnenschein", "DE27100777770209299700", "Mila Okafor", "childcare"),
    ("Allianz Versicherung", "DE89370400440532013000", "Police 77-401-2209", "insurance"),
    ("Telekom Mobilfunk", "DE75512108001245126199", "Kd-Nr 9934021", "utilities"),
    ("Marco Rossi", "IT60X0542811101000000123456", "", "other"),
]


def account(acc_id, name, typ, owners, iban, balance, limit=None, credit=None):
    return {"account_id": acc_id, "name": name, "type": typ, "owner_ids": owners, "currency": "EUR",
            "iban": iban, "balance": round(balance, 2), "credit_limit": credit,
            "daily_outgoing_limit": limit, "status": "open"}


def card(card_id, acc, holder, last4, kind, expires, status="active"):
    return {"card_id": card_id, "account_id": acc, "holder_id": holder, "last4": last4, "kind": kind,
            "status": status, "expires": expires}


def base_accounts():
    return {
        "ACC-1001": account("ACC-1001", "Joint Checking", "checking", ["CU-001", "CU-002"],
                            "DE12500105170648489890", 3482.16, limit=2500.0),
        "ACC-1002": account("ACC-1002", "Daniel's Checking", "checking", ["CU-002"],
                            "DE61500105172846310575", 1210.40, limit=1500.0),
        "ACC-2001": account("ACC-2001", "Rainy Day Savings", "savings", ["CU-001", "CU-002"],
                            "DE91500105179573120442", 12500.00, limit=5000.0),
        "ACC-2002": account("ACC-2002", "Holiday Savings", "savings", ["CU-001"],
                            "DE33500105176381045227", 2340.00, limit=5000.0),
        "ACC-3001": account("ACC-3001", "Household Visa", "credit_card", ["CU-001", "CU-002"],
                            None, -642.37, credit=3000.0),
    }


def base_cards():
    cs = [card("CARD-5001", "ACC-1001", "CU-001", "4821", "debit", "2028-05"),
          card("CARD-5002", "ACC-1001", "CU-002", "1937", "debit", "2027-11"),
          card("CARD-5003", "ACC-1002", "CU-002", "6604", "debit", "2029-02"),
          card("CARD-7001", "ACC-3001", "CU-001", "9012", "credit", "2028-09"),
          card("CARD-7002", "ACC-3001", "CU-002", "3358", "credit", "2027-06")]
    return {c["card_id"]: c for c in cs}


def tx(seq, d, acc, amount, merchant, category, kind, status="posted", card_id=None, **extra):
    t = {"transaction_id": f"TX-{seq:06d}", "account_id": acc, "date": d, "amount": round(amount, 2),
         "merchant": merchant, "category": category, "kind": kind, "status": status, "card_id": card_id,
         "memo": "", "transfer_id": None, "payment_id": None, "dispute_id": None}
    t.update(extra)
    return t


SMALL_TX = [
    ("2026-10-01", "ACC-1001", 3150.00, "Brightwave GmbH Salary", "income", "deposit", "posted", None),
    ("2026-10-01", "ACC-1002", 2480.00, "Nordhafen Logistics Salary", "income", "deposit", "posted", None),
    ("2026-10-01", "ACC-1001", -1350.00, "Hausverwaltung Adler", "housing", "payment", "posted", None),
    ("2026-10-01", "ACC-3001", -54.90, "Ristorante Da Luca", "dining", "card_purchase", "posted", "CARD-7001"),
    ("2026-10-02", "ACC-3001", -129.99, "Voltix Electronics", "shopping", "card_purchase", "posted", "CARD-7002"),
    ("2026-10-03", "ACC-1001", -86.42, "FreshMarkt", "groceries", "card_purchase", "posted", "CARD-5001"),
    ("2026-10-05", "ACC-1001", -64.10, "Stadtwerke Energie", "utilities", "direct_debit", "posted", None),
    ("2026-10-07", "ACC-3001", -12.99, "StreamFlix", "subscriptions", "card_purchase", "posted", "CARD-7001"),
    ("2026-10-09", "ACC-1002", -49.00, "MetroLine Tickets", "transport", "card_purchase", "posted", "CARD-5003"),
    ("2026-10-11", "ACC-1001", -112.35, "FreshMarkt", "groceries", "card_purchase", "posted", "CARD-5002"),
    ("2026-10-14", "ACC-3001", -38.50, "Kino Lumiere", "entertainment", "card_purchase", "posted", "CARD-7002"),
    ("2026-10-15", "ACC-1001", -89.90, "Allianz Versicherung", "insurance", "payment", "posted", None),
    ("2026-10-18", "ACC-1001", -310.00, "Kita Sonnenschein", "childcare", "direct_debit", "posted", None),
    ("2026-10-20", "ACC-3001", -74.80, "Cafe Morgenrot", "dining", "card_purchase", "posted", "CARD-7001"),
    ("2026-10-22", "ACC-1002", -58.20, "Shell Station 214", "transport", "card_purchase", "posted", "CARD-5003"),
    ("2026-10-25", "ACC-1001", -97.64, "BioLaden Gruen", "groceries", "card_purchase", "posted", "CARD-5001"),
    ("2026-10-28", "ACC-3001", -249.00, "Alpine Outfitters", "shopping", "card_purchase", "posted", "CARD-7002"),
    ("2026-10-31", "ACC-2001", 8.75, "Savings interest", "income", "interest", "posted", None),
    ("2026-10-31", "ACC-1001", -4.50, "Monthly account fee", "fees", "fee", "posted", None),
    ("2026-11-01", "ACC-1001", 3150.00, "Brightwave GmbH Salary", "income", "deposit", "posted", None),
    ("2026-11-01", "ACC-1002", 2480.00, "Nordhafen Logistics Salary", "income", "deposit", "posted", None),
    ("2026-11-01", "ACC-1001", -1350.00, "Hausverwaltung Adler", "housing", "payment", "posted", None),
    ("2026-11-03", "ACC-1001", -124.18, "FreshMarkt", "groceries", "card_purchase", "posted", "CARD-5001"),
    ("2026-11-04", "ACC-3001", -12.99, "StreamFlix", "subscriptions", "card_purchase", "posted", "CARD-7001"),
    ("2026-11-05", "ACC-1001", -71.35, "Stadtwerke Energie", "utilities", "direct_debit", "posted", None),
    ("2026-11-07", "ACC-3001", -62.40, "Trattoria Bella", "dining", "card_purchase", "posted", "CARD-7002"),
    ("2026-11-08", "ACC-3001", -62.40, "Trattoria Bella", "dining", "card_purchase", "posted", "CARD-7002"),
    ("2026-11-10", "ACC-1002", -49.00, "MetroLine Tickets", "transport", "card_purchase", "posted", "CARD-5003"),
    ("2026-11-13", "ACC-3001", -189.00, "Voltix Electronics", "shopping", "card_purchase", "posted", "CARD-7001"),
    ("2026-11-14", "ACC-1001", -95.27, "BioLaden Gruen", "groceries", "card_purchase", "posted", "CARD-5002"),
    ("2026-11-15", "ACC-1001", -89.90, "Allianz Versicherung", "insurance", "payment", "posted", None),
    ("2026-11-16", "ACC-3001", 49.99, "Alpine Outfitters", "shopping", "refund", "posted", "CARD-7002"),
    ("2026-11-18", "ACC-1001", -310.00, "Kita Sonnenschein", "childcare", "direct_debit", "posted", None),
    ("2026-11-19", "ACC-3001", -88.60, "Ristorante Da Luca", "dining", "card_purchase", "posted", "CARD-7001"),
    ("2026-11-21", "ACC-1002", -64.75, "Shell Station 214", "transport", "card_purchase", "posted", "CARD-5003"),
    ("2026-11-22", "ACC-3001", -23.40, "Kino Lumiere", "entertainment", "card_purchase", "posted", "CARD-7002"),
    ("2026-11-24", "ACC-1001", -143.92, "FreshMarkt", "groceries", "card_purchase", "posted", "CARD-5001"),
    ("2026-11-26", "ACC-3001", -319.00, "Nimbus Air", "travel", "card_purchase", "posted", "CARD-7001"),
    ("2026-11-27", "ACC-1002", -17.80, "Apotheke am Markt", "health", "card_purchase", "posted", "CARD-5003"),
    ("2026-11-28", "ACC-1001", -36.90, "Pizzeria Vesuvio", "dining", "card_purchase", "posted", "CARD-5002"),
    ("2026-11-29", "ACC-3001", -57.30, "Gamestation Online", "shopping", "card_purchase", "posted", "CARD-7002"),
    ("2026-11-30", "ACC-1001", -66.45, "FreshMarkt", "groceries", "card_purchase", "pending", "CARD-5001"),
    ("2026-11-30", "ACC-3001", -42.00, "Parkhaus Zentrum", "transport", "card_purchase", "pending", "CARD-7001"),
    ("2026-11-30", "ACC-2001", 9.02, "Savings interest", "income", "interest", "posted", None),
    ("2026-11-30", "ACC-1001", -4.50, "Monthly account fee", "fees", "fee", "posted", None),
]

BUDGETS = {"groceries": 600.0, "dining": 250.0, "entertainment": 100.0, "shopping": 300.0,
           "transport": 150.0, "subscriptions": 30.0}


def small_state() -> dict:
    txs = {}
    seq = 101
    for d, acc, amt, merch, cat, kind, status, card_id in SMALL_TX:
        t = tx(seq, d, acc, amt, merch, cat, kind, status, card_id)
        txs[t["transaction_id"]] = t
        seq += 1
    # an earlier own-account transfer (TR-0001) and an open dispute (DP-0001)
    for t in (tx(seq, "2026-11-02", "ACC-1001", -200.0, "Transfer to Holiday Savings", "transfers",
                 "transfer_out", memo="Holiday fund", transfer_id="TR-0001"),
              tx(seq + 1, "2026-11-02", "ACC-2002", 200.0, "Transfer from Joint Checking", "transfers",
                 "transfer_in", memo="Holiday fund", transfer_id="TR-0001")):
        txs[t["transaction_id"]] = t
    transfers = {"TR-0001": {"transfer_id": "TR-0001", "from_account_id": "ACC-1001",
                             "to_account_id": "ACC-2002", "amount": 200.0, "date": "2026-11-02",
                             "memo": "Holiday fund", "debit_transaction_id": f"TX-{seq:06d}",
                             "credit_transaction_id": f"TX-{seq + 1:06d}"}}
    seq += 2
    txs["TX-000117"]["dispute_id"] = "DP-0001"
    disputes = {"DP-0001": {"dispute_id": "DP-0001", "transaction_id": "TX-000117", "account_id": "ACC-3001",
                            "amount": 249.0, "merchant": "Alpine Outfitters", "reason_code": "incorrect_amount",
                            "details": "Charged 249.00 for a jacket priced 199.01", "status": "open",
                            "opened_at": "2026-11-10T16:20:00"}}
    payees = {}
    for i, (name, iban, ref, cat) in enumerate(PAYEES, 1):
        pid = f"PY-{i:04d}"
        payees[pid] = {"payee_id": pid, "name": name, "iban": iban, "reference": ref, "default_category": cat}
    scheduled = {
        "SP-0001": {"scheduled_payment_id": "SP-0001", "from_account_id": "ACC-1001", "payee_id": "PY-0002",
                    "amount": 1350.0, "frequency": "monthly", "start_date": "2026-01-01",
                    "next_date": "2027-01-01", "end_date": None, "memo": "Rent", "status": "active",
                    "skipped_dates": [], "created_at": "2025-12-20T10:00:00"},
        "SP-0002": {"scheduled_payment_id": "SP-0002", "from_account_id": "ACC-1001", "payee_id": "PY-0004",
                    "amount": 89.9, "frequency": "monthly", "start_date": "2026-01-15",
                    "next_date": "2026-12-15", "end_date": None, "memo": "Home insurance",
                    "status": "active", "skipped_dates": [], "created_at": "2025-12-20T10:05:00"},
    }
    return {
        "now": NOW, "household_name": "Marchetti-Okafor household", "customers": CUSTOMERS,
        "accounts": base_accounts(), "cards": base_cards(), "transactions": txs, "payees": payees,
        "transfers": transfers, "payments": {}, "scheduled_payments": scheduled,
        "budgets": {k: {"category": k, "monthly_limit": v} for k, v in BUDGETS.items()},
        "disputes": disputes, "dispute_window_days": 60, "next_tx_seq": seq, "next_transfer_seq": 2,
        "next_payment_seq": 1, "next_scheduled_seq": 3, "next_dispute_seq": 2, "next_payee_seq": 7,
        "next_card_seq": 8001,
    }


# ------------------------------------------------------------------------------------- large

MERCHANTS = [  # (merchant, category, min, max, weight)
    ("FreshMarkt", "groceries", 8, 70, 6), ("BioLaden Gruen", "groceries", 6, 45, 3),
    ("Discount Plus", "groceries", 5, 40, 4), ("Baeckerei Korn", "groceries", 2.5, 12, 6),
    ("Cafe Morgenrot", "dining", 3.5, 14, 6), ("Trattoria Bella", "dining", 25, 70, 1),
    ("Ristorante Da Luca", "dining", 30, 90, 1), ("Pizzeria Vesuvio", "dining", 12, 35, 2),
    ("MetroLine Tickets", "transport", 2.9, 3.4, 6), ("Shell Station 214", "transport", 35, 70, 1),
    ("Parkhaus Zentrum", "transport", 3, 12, 2), ("Kino Lumiere", "entertainment", 10, 26, 1),
    ("Gamestation Online", "entertainment", 5, 40, 1), ("Alpine Outfitters", "shopping", 30, 150, 0.3),
    ("Voltix Electronics", "shopping", 15, 200, 0.3), ("Buchhandlung Seiten", "shopping", 8, 30, 1),
    ("Apotheke am Markt", "health", 4, 25, 1.5), ("Dr. Hartmann Praxis", "health", 15, 60, 0.3),
    ("Nimbus Air", "travel", 80, 300, 0.1),
]
CARD_ACCOUNTS = [("CARD-5001", "ACC-1001"), ("CARD-5002", "ACC-1001"), ("CARD-5003", "ACC-1002"),
                 ("CARD-7001", "ACC-3001"), ("CARD-7002", "ACC-3001"), ("CARD-5004", "ACC-1003")]


def large_state() -> dict:
    rng = random.Random(20261201)
    st = small_state()
    st["accounts"]["ACC-1003"] = account("ACC-1003", "Sofia's Checking", "checking", ["CU-001"],
                                         "DE58500105172299481066", 0.0, limit=1500.0)
    st["accounts"]["ACC-2003"] = account("ACC-2003", "Car Fund", "savings", ["CU-001", "CU-002"],
                                         "DE07500105174410385512", 0.0, limit=5000.0)
    st["cards"]["CARD-5004"] = card("CARD-5004", "ACC-1003", "CU-001", "7745", "debit", "2029-07")
    extra_payees = [("Fitness Loft", "DE41500105171122334455", "Member 4471", "health"),
                    ("Stadt Bibliothek", "DE23500105170099887766", "", "entertainment"),
                    ("Autohaus Becker", "DE70500105176655443322", "Service 2026", "transport"),
                    ("Zahnarzt Dr. Mertens", "DE15500105173344556677", "Pat. 10332", "health"),
                    ("Musikschule Klang", "DE52500105178899001122", "Mila Okafor", "childcare"),
                    ("Hanna Okafor", "DE96500105175566778899", "", "other"),
                    ("Vereinsheim SV Linden", "DE38500105172233445566", "Mitglied 812", "entertainment"),
                    ("Rundfunkbeitrag", "DE66500105171212121212", "Beitragsnr 448812", "utilities")]
    for name, iban, ref, cat in extra_payees:
        pid = f"PY-{st['next_payee_seq']:04d}"
        st["next_payee_seq"] += 1
        st["payees"][pid] = {"payee_id": pid, "name": name, "iban": iban, "reference": ref,
                             "default_category": cat}
    for i, (acc, pid, amt, freq, start, nxt, memo) in enumerate([
            ("ACC-1003", "PY-0007", 39.0, "monthly", "2026-03-05", "2026-12-05", "Gym"),
            ("ACC-1001", "PY-0011", 65.0, "monthly", "2026-09-10", "2026-12-10", "Music lessons"),
            ("ACC-1002", "PY-0014", 18.36, "monthly", "2026-01-20", "2026-12-20", "Broadcast fee"),
            ("ACC-1001", "PY-0009", 420.0, "once", "2026-12-18", "2026-12-18", "Car service")], 3):
        sid = f"SP-{i:04d}"
        st["scheduled_payments"][sid] = {
            "scheduled_payment_id": sid, "from_account_id": acc, "payee_id": pid, "amount": amt,
            "frequency": freq, "start_date": start, "next_date": nxt, "end_date": None, "memo": memo,
            "status": "active", "skipped_dates": [], "created_at": "2026-01-02T12:00:00"}
    st["next_scheduled_seq"] = 7
    st["budgets"].update({"groceries": {"category": "groceries", "monthly_limit": 1400.0},
                          "dining": {"category": "dining", "monthly_limit": 700.0},
                          "health": {"category": "health", "monthly_limit": 120.0},
                          "travel": {"category": "travel", "monthly_limit": 400.0}})
    # regenerate transactions: June-November 2026
    txs: dict[str, dict] = {}
    seq = 1
    rows: list[tuple] = []
    d = date(2026, 6, 1)
    while d <= date(2026, 11, 30):
        if d.day == 1:
            rows += [(d, "ACC-1001", 3150.0, "Brightwave GmbH Salary", "income", "deposit", None),
                     (d, "ACC-1002", 2480.0, "Nordhafen Logistics Salary", "income", "deposit", None),
                     (d, "ACC-1003", 900.0, "Freelance Studio Marchetti", "income", "deposit", None),
                     (d, "ACC-1001", -1350.0, "Hausverwaltung Adler", "housing", "payment", None)]
        if d.day == 5:
            rows.append((d, "ACC-1001", -round(rng.uniform(58, 92), 2), "Stadtwerke Energie", "utilities",
                         "direct_debit", None))
        if d.day == 7:
            rows.append((d, "ACC-3001", -12.99, "StreamFlix", "subscriptions", "card_purchase", "CARD-7001"))
        if d.day == 12:
            rows.append((d, "ACC-3001", -10.99, "SoundWave Music", "subscriptions", "card_purchase", "CARD-7002"))
        if d.day == 15:
            rows.append((d, "ACC-1001", -89.9, "Allianz Versicherung", "insurance", "payment", None))
        if d.day == 18:
            rows.append((d, "ACC-1001", -310.0, "Kita Sonnenschein", "childcare", "direct_debit", None))
        if d.day == 28:
            rows.append((d, "ACC-2001", round(rng.uniform(8, 10), 2), "Savings interest", "income",
                         "interest", None))
            rows.append((d, "ACC-1001", -4.5, "Monthly account fee", "fees", "fee", None))
        for _ in range(rng.choice([4, 4, 5, 5, 6, 6])):
            merch, cat, lo, hi, _ = rng.choices(MERCHANTS, weights=[m[4] for m in MERCHANTS])[0]
            card_id, acc = CARD_ACCOUNTS[rng.randrange(len(CARD_ACCOUNTS))]
            amt = lo if lo == hi else round(rng.uniform(lo, hi), 2)
            rows.append((d, acc, -amt, merch, cat, "card_purchase", card_id))
            if rng.random() < 0.02:
                rows.append((d + timedelta(days=3), acc, round(amt * 0.5, 2), merch, cat, "refund", card_id))
        d += timedelta(days=1)
    # fixed, recognisable transactions used by large-state tasks
    rows.append((date(2026, 11, 18), "ACC-3001", -849.0, "Lumen Home Cinema", "shopping", "card_purchase",
                 "CARD-7001"))
    rows.append((date(2026, 11, 20), "ACC-1003", -133.7, "Velo Werkstatt Kurz", "shopping", "card_purchase",
                 "CARD-5004"))
    rows.sort(key=lambda r: (r[0], r[1], r[3], r[2]))
    for d, acc, amt, merch, cat, kind, card_id in rows:
        status = "pending" if d >= date(2026, 11, 29) and kind == "card_purchase" else "posted"
        t = tx(seq, d.isoformat(), acc, amt, merch, cat, kind, status, card_id)
        txs[t["transaction_id"]] = t
        seq += 1
    st["transactions"] = txs
    st["transfers"] = {}
    st["disputes"] = {}
    st["next_transfer_seq"] = 1
    st["next_dispute_seq"] = 1
    st["next_tx_seq"] = seq
    # current posted balances (history before June is not modelled, so they are set directly)
    for acc_id, bal in {"ACC-1001": 4120.55, "ACC-1002": 2875.10, "ACC-1003": 1460.30,
                        "ACC-2001": 12552.59, "ACC-2002": 2340.0, "ACC-2003": 4800.0}.items():
        st["accounts"][acc_id]["balance"] = bal
    # the card is paid off monthly, so the amount owed is November's posted card spending
    owed = round(sum(t["amount"] for t in txs.values() if t["account_id"] == "ACC-3001"
                     and t["status"] == "posted" and t["date"] >= "2026-11-01"), 2)
    st["accounts"]["ACC-3001"]["balance"] = owed
    st["accounts"]["ACC-3001"]["credit_limit"] = 6000.0
    return st


def main() -> None:
    out = HERE / "initial_states"
    out.mkdir(exist_ok=True)
    for name, st in (("small", small_state()), ("large", large_state())):
        (out / f"{name}.json").write_text(json.dumps(st, indent=1, ensure_ascii=False) + "\n")
        n = sum(len(v) for v in st.values() if isinstance(v, dict))
        print(f"{name}: {n} records, {len(st['transactions'])} transactions")


if __name__ == "__main__":
    main()
