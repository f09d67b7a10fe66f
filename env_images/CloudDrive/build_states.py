"""Deterministically writes initial_states/small.json and initial_states/large.json.

Run once from anywhere:  python env_images/CloudDrive/build_states.py
Not imported by the runtime.  large.json = small.json's records (same ids) plus seeded random users,
folders, files and shares (random.Random(2026), no global random); its counters continue after them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOW = "2026-12-01T09:00:00"
QUOTA = {"free": 2048, "standard": 10240, "premium": 30720}

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


def user(uid, name, email, plan, root):
    return {"user_id": uid, "name": name, "email": email, "plan": plan, "quota_mb": QUOTA[plan],
            "root_folder_id": root}


def folder(fid, name, owner, parent, created, status="active", trashed_at=None, trashed_with=None):
    return {"folder_id": fid, "name": name, "owner_id": owner, "parent_id": parent, "status": status,
            "created_at": created, "trashed_at": trashed_at, "trashed_with": trashed_with}


def file(fid, name, owner, folder_id, mime, versions, status="active", trashed_at=None, trashed_with=None):
    """versions: [(size_mb, uploaded_at, uploaded_by, note)], oldest first."""
    vs = [{"version": i + 1, "size_mb": round(s, 2), "uploaded_at": at, "uploaded_by": by, "note": note}
          for i, (s, at, by, note) in enumerate(versions)]
    return {"file_id": fid, "name": name, "owner_id": owner, "folder_id": folder_id, "mime_type": mime,
            "size_mb": vs[-1]["size_mb"], "versions": vs, "status": status, "created_at": vs[0]["uploaded_at"],
            "modified_at": vs[-1]["uploaded_at"], "trashed_at": trashed_at, "trashed_with": trashed_with}


def share(sid, item, by, created, role, *, grantee=None, expires=None, status="active"):
    return {"share_id": sid, "item_id": item, "kind": "user" if grantee else "link", "grantee_id": grantee,
            "url": None if grantee else f"https://nimbus.example/s/{sid.lower()}", "role": role,
            "expires_on": expires, "status": status, "created_by": by, "created_at": created, "revoked_at": None}


def v(size, at, by, note=""):
    return (size, at, by, note)


def small() -> dict:
    users = [
        user("U-001", "Lena Fischer", "lena.fischer@northwind.example", "premium", "FO-0001"),
        user("U-002", "Omar Haddad", "omar.haddad@northwind.example", "premium", "FO-0002"),
        user("U-003", "Dana Kim", "dana.kim@northwind.example", "premium", "FO-0003"),
        user("U-004", "Marco Rossi", "marco.rossi@northwind.example", "premium", "FO-0004"),
        user("U-005", "Keiko Tanaka", "keiko.tanaka@northwind.example", "standard", "FO-0005"),
        user("U-006", "Sofia Marchetti", "sofia.marchetti@example.org", "free", "FO-0006"),
        user("U-007", "Daniel Okafor", "daniel.okafor@example.org", "free", "FO-0007"),
        user("U-008", "Tom Novak", "tom.novak@northwind.example", "standard", "FO-0021"),
    ]
    t0 = "2025-03-01T10:00:00"
    folders = [folder(f"FO-000{i}", "My Drive", f"U-00{i}", None, t0) for i in range(1, 8)]
    folders += [
        folder("FO-0008", "Engineering", "U-001", "FO-0001", "2025-04-02T09:00:00"),
        folder("FO-0009", "Incident reports", "U-001", "FO-0008", "2025-06-10T11:00:00"),
        folder("FO-0010", "Hiring", "U-001", "FO-0001", "2026-02-01T09:30:00"),
        folder("FO-0011", "Archive", "U-001", "FO-0001", "2025-04-02T09:05:00"),
        folder("FO-0012", "Demos", "U-002", "FO-0002", "2026-05-12T14:00:00"),
        folder("FO-0013", "Old prototypes", "U-002", "FO-0002", "2025-08-20T10:00:00", "trashed",
               "2026-11-27T17:40:00"),
        folder("FO-0014", "Design system", "U-003", "FO-0003", "2025-05-05T09:00:00"),
        folder("FO-0015", "Roadmap", "U-004", "FO-0004", "2026-09-01T08:00:00"),
        folder("FO-0016", "Renders", "U-005", "FO-0005", "2026-03-03T13:00:00"),
        folder("FO-0017", "Design review", "U-005", "FO-0005", "2026-10-20T10:00:00"),
        folder("FO-0018", "Household", "U-006", "FO-0006", "2025-11-11T20:00:00"),
        folder("FO-0019", "Receipts", "U-006", "FO-0018", "2025-11-11T20:05:00"),
        folder("FO-0020", "Photos", "U-007", "FO-0007", "2025-07-01T18:00:00"),
        folder("FO-0021", "My Drive", "U-008", None, "2026-11-30T12:00:00"),
    ]
    files = [
        file("FI-0001", "postmortem_2026-11-30.docx", "U-001", "FO-0009", DOCX,
             [v(0.42, "2026-11-30T16:00:00", "U-001"), v(0.61, "2026-12-01T08:15:00", "U-002", "Added timeline")]),
        file("FI-0002", "oncall_runbook.md", "U-001", "FO-0008", "text/markdown",
             [v(0.2, "2026-01-15T10:00:00", "U-001"), v(0.25, "2026-06-02T12:00:00", "U-002", "New paging rules"),
              v(0.3, "2026-11-03T09:10:00", "U-001", "Escalation matrix")]),
        file("FI-0003", "architecture_overview.pdf", "U-001", "FO-0008", "application/pdf",
             [v(4.8, "2026-07-07T15:00:00", "U-001")]),
        file("FI-0004", "candidate_scorecard.xlsx", "U-001", "FO-0010", XLSX, [v(0.12, "2026-11-24T17:00:00", "U-001")]),
        file("FI-0005", "interview_recording.mp4", "U-001", "FO-0010", "video/mp4",
             [v(1250.0, "2026-11-24T16:30:00", "U-001")]),
        file("FI-0006", "q3_report.pdf", "U-001", "FO-0011", "application/pdf", [v(2.2, "2026-10-05T11:00:00", "U-001")]),
        file("FI-0007", "standup_notes.txt", "U-001", "FO-0001", "text/plain", [v(0.05, "2026-12-01T08:45:00", "U-001")]),
        file("FI-0008", "old_diagram.png", "U-001", "FO-0011", "image/png", [v(3.5, "2025-09-09T09:00:00", "U-001")],
             "trashed", "2026-11-20T10:00:00"),
        file("FI-0009", "acme_demo_script.docx", "U-002", "FO-0012", DOCX,
             [v(0.2, "2026-11-25T10:00:00", "U-002"), v(0.3, "2026-11-30T18:20:00", "U-002", "Pricing section")]),
        file("FI-0010", "acme_demo_recording.mp4", "U-002", "FO-0012", "video/mp4", [v(860.0, "2026-11-26T15:00:00", "U-002")]),
        file("FI-0011", "proto_v1.zip", "U-002", "FO-0013", "application/zip", [v(420.0, "2025-08-20T10:30:00", "U-002")],
             "trashed", "2026-11-27T17:40:00", "FO-0013"),
        file("FI-0012", "proto_v2.zip", "U-002", "FO-0013", "application/zip", [v(510.0, "2025-10-02T16:00:00", "U-002")],
             "trashed", "2026-11-27T17:40:00", "FO-0013"),
        file("FI-0013", "tokens.json", "U-003", "FO-0014", "application/json",
             [v(0.08, "2026-04-01T10:00:00", "U-003"), v(0.1, "2026-11-18T14:00:00", "U-003", "Dark mode colours")]),
        file("FI-0014", "component_library.fig", "U-003", "FO-0014", "application/octet-stream",
             [v(95.0, "2026-11-28T12:00:00", "U-003")]),
        file("FI-0015", "q1_roadmap.pptx", "U-004", "FO-0015", PPTX,
             [v(9.0, "2026-11-02T09:00:00", "U-004"), v(11.2, "2026-11-16T09:00:00", "U-003", "Design milestones"),
              v(12.5, "2026-11-27T16:00:00", "U-004", "Pricing slide")]),
        file("FI-0016", "pricing_model.xlsx", "U-004", "FO-0015", XLSX, [v(0.9, "2026-11-20T10:00:00", "U-004")]),
        file("FI-0017", "lobby_render_4k.png", "U-005", "FO-0016", "image/png", [v(64.0, "2026-10-01T10:00:00", "U-005")]),
        file("FI-0018", "flythrough_final.mp4", "U-005", "FO-0016", "video/mp4", [v(9800.0, "2026-11-28T18:00:00", "U-005")]),
        file("FI-0019", "design_review_deck.pdf", "U-005", "FO-0017", "application/pdf",
             [v(15.0, "2026-11-27T10:00:00", "U-005"), v(18.0, "2026-11-30T11:00:00", "U-005", "Feedback from Dana")]),
        file("FI-0020", "flythrough_draft.mp4", "U-005", "FO-0016", "video/mp4", [v(210.0, "2026-11-10T10:00:00", "U-005")],
             "trashed", "2026-11-29T09:00:00"),
        file("FI-0021", "lease_agreement.pdf", "U-006", "FO-0018", "application/pdf", [v(3.1, "2025-11-11T20:10:00", "U-006")]),
        file("FI-0022", "kita_contract.pdf", "U-006", "FO-0018", "application/pdf", [v(1.4, "2026-08-15T19:00:00", "U-007")]),
        file("FI-0023", "receipt_da_luca.pdf", "U-006", "FO-0019", "application/pdf",
             [v(0.2, "2026-11-26T21:00:00", "U-006")]),
        file("FI-0024", "holiday_photos.zip", "U-006", "FO-0006", "application/zip", [v(1780.0, "2026-09-01T20:00:00", "U-006")]),
        file("FI-0025", "tax_return_2019.pdf", "U-006", "FO-0018", "application/pdf", [v(5.0, "2025-11-11T20:20:00", "U-006")],
             "trashed", "2026-11-15T21:00:00"),
        file("FI-0026", "mila_birthday.mp4", "U-007", "FO-0020", "video/mp4", [v(640.0, "2026-06-14T19:00:00", "U-007")]),
        file("FI-0027", "mila_birthday_01.jpg", "U-007", "FO-0020", "image/jpeg", [v(4.2, "2026-06-14T19:05:00", "U-007")]),
        file("FI-0028", "mila_birthday_02.jpg", "U-007", "FO-0020", "image/jpeg", [v(3.9, "2026-06-14T19:05:00", "U-007")]),
    ]
    shares = [
        share("SH-0001", "FO-0008", "U-001", "2025-04-02T09:10:00", "editor", grantee="U-002"),
        share("SH-0002", "FI-0003", "U-001", "2026-10-01T10:00:00", "viewer", expires="2026-11-15"),
        share("SH-0003", "FI-0004", "U-001", "2026-11-24T17:05:00", "commenter", grantee="U-004", expires="2026-12-12"),
        share("SH-0004", "FI-0015", "U-004", "2026-11-02T09:05:00", "viewer", grantee="U-001"),
        share("SH-0005", "FI-0015", "U-004", "2026-11-02T09:06:00", "editor", grantee="U-003"),
        share("SH-0006", "FO-0016", "U-005", "2026-03-03T13:10:00", "viewer", grantee="U-003"),
        share("SH-0007", "FI-0009", "U-002", "2026-11-30T18:30:00", "commenter"),
        share("SH-0008", "FO-0018", "U-006", "2025-11-11T20:30:00", "editor", grantee="U-007"),
    ]
    return {
        "service": "Nimbus Drive", "now": NOW, "link_base": "https://nimbus.example/s/", "max_file_mb": 10240.0,
        "users": {u["user_id"]: u for u in users}, "folders": {f["folder_id"]: f for f in folders},
        "files": {f["file_id"]: f for f in files}, "shares": {s["share_id"]: s for s in shares},
        "next_folder_seq": 22, "next_file_seq": 29, "next_share_seq": 9,
    }


FIRST = ["Aiko", "Bruno", "Chloe", "Diego", "Elif", "Farid", "Greta", "Hugo", "Ingrid", "Jamal", "Kaja", "Luca",
         "Mira", "Nils", "Olga", "Pavel", "Rosa", "Samir", "Tara", "Uwe", "Vera", "Wen", "Yusuf", "Zoe"]
LAST = ["Andersen", "Becker", "Costa", "Dubois", "Eriksen", "Ferreira", "Gruber", "Horvat", "Ivanova", "Jensen",
        "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Ortiz", "Petrov", "Quinn", "Richter", "Santos", "Weber"]
FOLDERS = ["Projects", "Clients", "Reports", "Photos", "Contracts", "Invoices", "Drafts", "Presentations", "Research",
           "Templates", "Meeting notes", "Travel", "Budget", "Marketing", "Archive"]
KINDS = [("pdf", "application/pdf", 0.1, 25.0, ["report", "contract", "invoice", "brief", "scan", "proposal"]),
         ("docx", DOCX, 0.05, 3.0, ["notes", "draft", "minutes", "letter", "plan"]),
         ("xlsx", XLSX, 0.05, 4.0, ["budget", "forecast", "timesheet", "inventory"]),
         ("pptx", PPTX, 2.0, 60.0, ["pitch", "review", "kickoff", "training"]),
         ("jpg", "image/jpeg", 1.0, 8.0, ["photo", "site_visit", "whiteboard", "team"]),
         ("png", "image/png", 0.2, 12.0, ["screenshot", "diagram", "logo", "mockup"]),
         ("mp4", "video/mp4", 50.0, 900.0, ["recording", "walkthrough", "webinar", "demo"]),
         ("csv", "text/csv", 0.01, 6.0, ["export", "survey", "contacts", "metrics"]),
         ("zip", "application/zip", 5.0, 400.0, ["backup", "assets", "archive", "dataset"]),
         ("mp3", "audio/mpeg", 3.0, 15.0, ["interview", "podcast", "voice_memo"]),
         ("txt", "text/plain", 0.01, 0.2, ["todo", "readme", "log"])]


def large() -> dict:
    st = small()
    rng = random.Random(2026)
    uid_n, fo_n, fi_n, sh_n = 9, st["next_folder_seq"], st["next_file_seq"], st["next_share_seq"]
    new_users = []
    for i in range(40):
        name = f"{FIRST[i % len(FIRST)]} {LAST[(i * 7) % len(LAST)]}"
        plan = rng.choice(["free", "standard", "standard", "premium"])
        uid, root = f"U-{uid_n:03d}", f"FO-{fo_n:04d}"
        uid_n += 1
        fo_n += 1
        st["users"][uid] = user(uid, name, f"{name.lower().replace(' ', '.')}{i}@example.net", plan, root)
        st["folders"][root] = folder(root, "My Drive", uid, None, "2025-01-10T09:00:00")
        new_users.append(uid)
        homes = [root]
        for name_ in rng.sample(FOLDERS, 5):
            fid = f"FO-{fo_n:04d}"
            fo_n += 1
            st["folders"][fid] = folder(fid, name_, uid, rng.choice(homes), f"2025-{rng.randint(2, 12):02d}-15T10:00:00")
            homes.append(fid)
        budget = QUOTA[plan] * rng.uniform(0.2, 0.9)
        used_names: set[tuple[str, str]] = set()
        for _ in range(17):
            ext, mime, lo, hi, stems = rng.choice(KINDS)
            home = rng.choice(homes)
            nm = f"{rng.choice(stems)}_{rng.randint(1, 99):02d}.{ext}"
            if (home, nm) in used_names:
                continue
            used_names.add((home, nm))
            size = round(rng.uniform(lo, hi), 2)
            if size > budget:
                continue
            budget -= size
            fid = f"FI-{fi_n:04d}"
            fi_n += 1
            month = rng.randint(1, 11)
            vers = [v(size, f"2026-{month:02d}-{rng.randint(1, 28):02d}T{rng.randint(8, 19):02d}:00:00", uid)]
            if rng.random() < 0.2 and size * 2 < budget:
                size2 = round(size * rng.uniform(0.9, 1.2), 2)
                budget -= size2
                vers.append(v(size2, f"2026-{month:02d}-28T18:00:00", uid, "Updated"))
            trashed = rng.random() < 0.08
            st["files"][fid] = file(fid, nm, uid, home, mime, vers, "trashed" if trashed else "active",
                                    "2026-11-20T12:00:00" if trashed else None)
    everyone = list(st["users"])
    for fid in sorted(st["files"])[28:]:
        f = st["files"][fid]
        if f["status"] != "active" or rng.random() > 0.15:
            continue
        sid = f"SH-{sh_n:04d}"
        sh_n += 1
        if rng.random() < 0.3:
            st["shares"][sid] = share(sid, fid, f["owner_id"], "2026-10-01T10:00:00", "viewer")
        else:
            g = rng.choice([u for u in everyone if u != f["owner_id"]])
            exp = rng.choice([None, None, "2026-12-31", "2026-11-30"])
            st["shares"][sid] = share(sid, fid, f["owner_id"], "2026-10-01T10:00:00",
                                      rng.choice(["viewer", "commenter", "editor"]), grantee=g, expires=exp)
    st["next_folder_seq"], st["next_file_seq"], st["next_share_seq"] = fo_n, fi_n, sh_n
    return st


def main() -> None:
    out = HERE / "initial_states"
    out.mkdir(exist_ok=True)
    for name, st in (("small", small()), ("large", large())):
        (out / f"{name}.json").write_text(json.dumps(st, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
