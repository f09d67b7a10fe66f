"""Deterministically writes initial_states/small.json and initial_states/large.json.

Run once from anywhere:  python env_images/ResearchLibrary/build_states.py
Not imported by the runtime. large.json = small.json's records plus seeded random researchers,
venues, papers (with citations to earlier papers), reading lists, annotations and interlibrary
loans (random.Random(2026), no global random).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOW = "2026-12-01T09:00:00"
CREATED = "2026-11-20T12:00:00"
ILL_LIMIT = {"faculty": 6, "postdoc": 4, "phd": 3, "staff": 2}


def researcher(rid, name, dept, role):
    email = name.lower().replace(" ", ".") + "@northwind.example"
    return {"researcher_id": rid, "name": name, "email": email, "department": dept, "role": role,
            "ill_limit": ILL_LIMIT[role]}


def venue(vid, name, short, kind):
    return {"venue_id": vid, "name": name, "short_name": short, "kind": kind}


def paper(seq, title, authors, venue_id, short, year, abstract, keywords, pages, refs, held):
    return {"paper_id": f"PAP-{seq:04d}", "title": title, "authors": authors, "venue_id": venue_id, "year": year,
            "abstract": abstract, "keywords": keywords, "doi": f"10.4711/{short.lower()}.{year}.{seq:03d}",
            "pages": pages, "references": [f"PAP-{r:04d}" for r in refs], "held_locally": held}


def reading_list(lid, name, owner, desc, papers, shares):
    return {"list_id": lid, "name": name, "owner_id": owner, "description": desc,
            "paper_ids": [f"PAP-{p:04d}" for p in papers],
            "shares": [{"researcher_id": r, "permission": p} for r, p in sorted(shares)], "created_at": CREATED}


def annotation(aid, pap, rid, kind, page, quote="", text="", tags=()):
    return {"annotation_id": aid, "paper_id": f"PAP-{pap:04d}", "researcher_id": rid, "kind": kind, "page": page,
            "quote": quote, "text": text, "tags": sorted(tags), "created_at": CREATED}


def loan(lid, pap, rid, delivery, status, needed_by=None, fee=None):
    if fee is None:
        fee = 6.5 if delivery == "print" and status != "cancelled" else 0.0
    return {"ill_id": lid, "paper_id": f"PAP-{pap:04d}", "researcher_id": rid, "delivery": delivery,
            "status": status, "fee": fee, "needed_by": needed_by, "note": "", "requested_at": "2026-11-24T10:00:00"}


VENUES = [
    venue("V-01", "Journal of Information Retrieval Research", "JIRR", "journal"),
    venue("V-02", "Conference on Neural Language Systems", "NLS", "conference"),
    venue("V-03", "Transactions on Human-Centred Computing", "THCC", "journal"),
    venue("V-04", "Symposium on Data-Centric Machine Learning", "DCML", "conference"),
    venue("V-05", "Journal of Computational Ecology", "JCE", "journal"),
    venue("V-06", "Workshop on Reproducible Research Software", "RRS", "conference"),
]
SHORT = {v["venue_id"]: v["short_name"] for v in VENUES}

# seq, title, authors, venue, year, keywords, pages, references, held locally, abstract
PAPERS = [
    (1, "Sparse Lexical Signals for Long Document Retrieval", ["Kofi Okafor", "Maja Lindqvist"], "V-01", 2019,
     ["sparse retrieval", "long documents", "bm25"], 18, [], True,
     "We revisit term-weighting for documents longer than ten thousand words and show that passage-level BM25 with proximity features remains a strong baseline."),
    (2, "Dense Passage Encoders Without Labelled Data", ["Hana Sato", "Kofi Okafor", "Lucas Moreau"], "V-02", 2020,
     ["dense retrieval", "self-supervision"], 12, [1], True,
     "A contrastive pre-training recipe lets dense passage encoders match supervised retrievers without any labelled query-passage pairs."),
    (3, "A Hybrid Index for Sparse and Dense Retrieval", ["Maja Lindqvist", "Diego Alvarez"], "V-01", 2021,
     ["dense retrieval", "sparse retrieval", "indexing"], 22, [1, 2], True,
     "One inverted index serves both lexical and vector scores, halving query latency at equal recall on five collections."),
    (4, "Measuring Faithfulness in Retrieval-Augmented Generation", ["Amara Nwosu", "Hana Sato"], "V-02", 2022,
     ["retrieval-augmented generation", "evaluation", "faithfulness"], 10, [2, 3], False,
     "We propose a claim-level faithfulness score for generated answers and validate it against expert judgements."),
    (5, "When Do Rerankers Help? An Empirical Study", ["Lucas Moreau", "Ravi Iyer", "Maja Lindqvist"], "V-01", 2022,
     ["reranking", "evaluation"], 26, [1, 2, 3], True,
     "Across 31 test collections, cross-encoder rerankers help most for long, ambiguous queries and least for navigational ones."),
    (6, "Benchmark Contamination in Language Model Evaluation", ["Ravi Iyer", "Amara Nwosu"], "V-04", 2023,
     ["evaluation", "contamination", "benchmarks"], 9, [4], False,
     "We estimate how often public test sets leak into pre-training corpora and how much contamination inflates reported scores."),
    (7, "Curating Training Data with Influence Estimates", ["Sofia Brandt", "Ravi Iyer"], "V-04", 2021,
     ["data curation", "influence functions"], 11, [], True,
     "Cheap influence estimates identify harmful training examples; removing them improves robustness on shifted test data."),
    (8, "Deduplication at Scale for Pretraining Corpora", ["Sofia Brandt", "Tomasz Wojcik"], "V-04", 2022,
     ["data curation", "deduplication"], 8, [7], True,
     "Near-duplicate detection over a trillion tokens with locality-sensitive hashing, and its effect on memorisation."),
    (9, "Long-Context Retrieval with Memory Tokens", ["Hana Sato", "Diego Alvarez"], "V-02", 2024,
     ["long documents", "dense retrieval", "memory"], 14, [1, 3, 4], False,
     "Compressing long documents into learned memory tokens makes dense retrieval over book-length texts practical."),
    (10, "Retrieval-Augmented Generation for Scientific Question Answering", ["Amara Nwosu", "Lucas Moreau", "Kofi Okafor"], "V-01", 2024,
     ["retrieval-augmented generation", "scientific qa"], 20, [3, 4, 5], True,
     "A retrieval-augmented reader answers questions over full-text papers and cites the passages it used."),
    (11, "Annotation Interfaces for Close Reading", ["Elin Strand", "Mateo Ruiz"], "V-03", 2018,
     ["annotation", "reading", "interfaces"], 24, [], True,
     "A design space of digital annotation tools, built from interviews with forty humanities and science scholars."),
    (12, "Shared Reading Lists in Graduate Seminars", ["Mateo Ruiz", "Elin Strand", "Grace Liu"], "V-03", 2020,
     ["reading", "collaboration", "education"], 16, [11], True,
     "A semester-long deployment of collaborative reading lists in six graduate seminars and what students did with them."),
    (13, "Highlighting Behaviour and Recall: A Field Study", ["Grace Liu", "Elin Strand"], "V-03", 2023,
     ["annotation", "memory", "field study"], 19, [11, 12], False,
     "Readers who highlight sparingly recall more a week later than readers who highlight heavily."),
    (14, "Citation Recommendation from Reading Histories", ["Grace Liu", "Kofi Okafor"], "V-01", 2023,
     ["citation recommendation", "reading", "dense retrieval"], 15, [2, 12], True,
     "Recommending what to cite from what a researcher has read and annotated outperforms text-only recommenders."),
    (15, "Tracking Songbird Migration with Weather Radar", ["Ines Duarte", "Pieter Jansen"], "V-05", 2017,
     ["migration", "radar", "birds"], 13, [], True,
     "Operational weather radar data quantify nightly songbird migration intensity across a continent."),
    (16, "Stopover Duration Models for Migratory Warblers", ["Pieter Jansen", "Ines Duarte", "Noor Rahman"], "V-05", 2020,
     ["migration", "birds", "survival models"], 17, [15], True,
     "Survival models fitted to ring recoveries estimate how long warblers rest at stopover sites."),
    (17, "Light Pollution and Nocturnal Flight Paths", ["Noor Rahman", "Ines Duarte"], "V-05", 2022,
     ["migration", "light pollution", "birds"], 12, [15, 16], False,
     "Radar tracks show migrating birds bending their flight paths towards brightly lit cities."),
    (18, "Neural Species Distribution Models at Continental Scale", ["Noor Rahman", "Sofia Brandt"], "V-04", 2024,
     ["species distribution", "birds", "deep learning"], 10, [16, 17], False,
     "A neural model trained on citizen-science records predicts weekly bird distributions at one-kilometre resolution."),
    (19, "Reproducible Pipelines for Ecological Field Data", ["Pieter Jansen", "Tomasz Wojcik"], "V-06", 2021,
     ["reproducibility", "pipelines", "field data"], 6, [], True,
     "Containerised workflows that take raw field sheets to published figures, with provenance for every step."),
    (20, "Software Citation Practices in Computational Ecology", ["Tomasz Wojcik", "Ines Duarte"], "V-06", 2023,
     ["reproducibility", "software citation"], 7, [19], False,
     "Only a third of ecology papers that rely on research software cite it in a way that identifies the version used."),
    (21, "Query Expansion with Small Language Models", ["Diego Alvarez", "Kofi Okafor"], "V-02", 2023,
     ["query expansion", "sparse retrieval"], 9, [1, 5], True,
     "A 300-million-parameter model writes expansion terms that lift BM25 recall as much as models a hundred times larger."),
    (22, "Evaluating Citation Accuracy of Generated Answers", ["Amara Nwosu", "Grace Liu"], "V-02", 2025,
     ["evaluation", "citations", "retrieval-augmented generation"], 11, [4, 10, 14], False,
     "Generated answers often cite passages that do not support the claim next to them; we measure how often and why."),
    (23, "Active Learning for Relevance Judgements", ["Lucas Moreau", "Sofia Brandt"], "V-01", 2018,
     ["relevance", "active learning", "evaluation"], 21, [], True,
     "Choosing which documents assessors judge next cuts the cost of building a test collection by half."),
    (24, "Cost-Aware Evaluation of Search Systems", ["Ravi Iyer", "Lucas Moreau"], "V-01", 2025,
     ["evaluation", "cost", "reranking"], 16, [5, 23], False,
     "Effectiveness per unit of compute: an evaluation protocol that ranks retrieval pipelines by what they cost to run."),
]

RESEARCHERS = [
    researcher("R-001", "Lena Fischer", "Computer Science", "faculty"),
    researcher("R-002", "Omar Haddad", "Computer Science", "postdoc"),
    researcher("R-003", "Priya Raman", "Computer Science", "phd"),
    researcher("R-004", "Daniel Okafor", "Ecology", "phd"),
    researcher("R-005", "Keiko Tanaka", "Design Research", "faculty"),
    researcher("R-006", "Tom Novak", "Computer Science", "phd"),
    researcher("R-007", "Ines Duarte", "Ecology", "faculty"),
    researcher("R-008", "Arjun Mehta", "Design Research", "staff"),
]

LISTS = [
    reading_list("RL-0001", "Retrieval reading group", "R-001", "Weekly reading group on retrieval", [1, 2, 3, 5],
                 [("R-002", "edit"), ("R-003", "read")]),
    reading_list("RL-0002", "Thesis: RAG evaluation", "R-003", "Chapter 2 related work", [4, 10, 6], []),
    reading_list("RL-0003", "Migration ecology core", "R-007", "Start here for new lab members", [15, 16, 19],
                 [("R-004", "edit")]),
    reading_list("RL-0004", "Annotation studies", "R-005", "", [11, 12], [("R-008", "read")]),
    reading_list("RL-0005", "Data curation", "R-002", "Papers for the data team", [7, 8], [("R-001", "read")]),
]

ANNOTATIONS = [
    annotation("AN-0001", 3, "R-003", "highlight", 4, quote="the hybrid index halves query latency at equal recall",
               tags=["results"]),
    annotation("AN-0002", 3, "R-003", "note", 9, text="Compare against the BM25 baseline in chapter 3",
               tags=["thesis", "to-cite"]),
    annotation("AN-0003", 5, "R-003", "note", 2, text="Rerankers help most on long queries", tags=["to-cite"]),
    annotation("AN-0004", 16, "R-004", "highlight", 7, quote="median stopover lasted 4.2 days", tags=["data"]),
    annotation("AN-0005", 11, "R-005", "note", 12, text="Good taxonomy of annotation types", tags=["methods"]),
    annotation("AN-0006", 1, "R-001", "note", 3, text="Classic baseline for the reading group"),
    annotation("AN-0007", 10, "R-003", "highlight", 5, quote="answers cite on average 2.7 passages",
               text="Use in related work", tags=["thesis"]),
]

LOANS = [
    loan("ILL-0001", 4, "R-003", "pdf", "delivered"),
    loan("ILL-0002", 6, "R-003", "pdf", "requested"),
    loan("ILL-0003", 9, "R-003", "print", "requested", needed_by="2026-12-10"),
    loan("ILL-0004", 13, "R-003", "pdf", "requested"),
    loan("ILL-0005", 17, "R-004", "pdf", "requested"),
    loan("ILL-0006", 20, "R-007", "print", "cancelled"),
    loan("ILL-0007", 18, "R-004", "pdf", "delivered"),
]


def small_state() -> dict:
    papers = [paper(s, t, a, v, SHORT[v], y, abstract, kw, pg, refs, held)
              for s, t, a, v, y, kw, pg, refs, held, abstract in PAPERS]
    return {
        "library_name": "Northwind Labs Research Library",
        "now": NOW,
        "researchers": {r["researcher_id"]: r for r in RESEARCHERS},
        "venues": {v["venue_id"]: v for v in VENUES},
        "papers": {p["paper_id"]: p for p in papers},
        "reading_lists": {rl["list_id"]: rl for rl in LISTS},
        "annotations": {a["annotation_id"]: a for a in ANNOTATIONS},
        "interlibrary_loans": {ln["ill_id"]: ln for ln in LOANS},
        "print_fee": 6.5,
        "ill_min_days": 3,
        "next_list_seq": len(LISTS) + 1,
        "next_annotation_seq": len(ANNOTATIONS) + 1,
        "next_ill_seq": len(LOANS) + 1,
    }


# ----------------------------------------------------------------------------- large state

GIVEN = ["Ada", "Bruno", "Chiara", "Dmitri", "Esther", "Farid", "Greta", "Hugo", "Ingrid", "Jamal", "Kira", "Leon",
         "Mina", "Nils", "Olga", "Pablo", "Qiu", "Rosa", "Samir", "Tara", "Umar", "Vera", "Wen", "Yara", "Zeno"]
SURNAMES = ["Achterberg", "Bianchi", "Castillo", "Dubois", "Eriksen", "Fontaine", "Gallagher", "Hoffmann", "Ivanova",
            "Jovanovic", "Kowalski", "Lambert", "Marsh", "Nakamura", "Oyelaran", "Petrov", "Quist", "Rinaldi",
            "Sandoval", "Thorsen", "Ueda", "Varga", "Whitfield", "Xu", "Yilmaz", "Zielinski"]
DEPTS = ["Computer Science", "Ecology", "Design Research", "Physics", "Economics", "Linguistics"]
EXTRA_VENUES = [
    ("Annual Meeting on Computational Linguistics", "ACLM", "conference"),
    ("Journal of Applied Physics Methods", "JAPM", "journal"),
    ("Review of Experimental Economics", "REE", "journal"),
    ("Conference on Interactive Systems", "CIS", "conference"),
    ("Journal of Field Ornithology Methods", "JFOM", "journal"),
    ("Symposium on Efficient Inference", "SEI", "conference"),
]
TOPICS = {
    "V-01": ["retrieval", "ranking", "test collections", "query logs", "relevance"],
    "V-02": ["language models", "retrieval", "summarisation", "question answering", "tokenisation"],
    "V-03": ["reading", "annotation", "collaboration", "interfaces", "accessibility"],
    "V-04": ["data curation", "benchmarks", "label noise", "synthetic data", "data valuation"],
    "V-05": ["migration", "birds", "population models", "habitat", "remote sensing"],
    "V-06": ["reproducibility", "workflows", "software citation", "provenance", "containers"],
    "V-07": ["parsing", "morphology", "translation", "dialects", "corpora"],
    "V-08": ["spectroscopy", "calibration", "detectors", "thin films", "noise"],
    "V-09": ["auctions", "field experiments", "incentives", "labour markets", "trust"],
    "V-10": ["visualisation", "interaction", "usability", "prototyping", "crowdsourcing"],
    "V-11": ["ringing", "nest monitoring", "telemetry", "census methods", "moult"],
    "V-12": ["quantisation", "sparsity", "caching", "distillation", "hardware"],
}
OPENERS = ["Revisiting", "Scaling", "Understanding", "Rethinking", "Benchmarking", "Learning", "Measuring",
           "Robust", "Efficient", "Interpretable"]
LINKS = ["for", "in", "under", "beyond", "with"]
QUOTES = ["the effect held across all sites", "errors concentrate in the tail", "we release the code and data",
          "the baseline is surprisingly strong", "results vary by season", "costs fall by a third"]
NOTES = ["Check the appendix", "Good related work section", "Method to replicate", "Disagree with the framing",
         "Cite in the introduction", "Compare with our numbers"]
TAGS = ["methods", "results", "to-cite", "data", "thesis", "related-work", "critique", "replicate"]


def large_state() -> dict:
    rng = random.Random(2026)
    s = small_state()
    for i, (name, short, kind) in enumerate(EXTRA_VENUES, 7):
        vid = f"V-{i:02d}"
        s["venues"][vid] = venue(vid, name, short, kind)
    names: set[str] = {r["name"] for r in RESEARCHERS}
    for i in range(9, 61):
        while True:
            name = f"{rng.choice(GIVEN)} {rng.choice(SURNAMES)}"
            if name not in names:
                names.add(name)
                break
        rid = f"R-{i:03d}"
        s["researchers"][rid] = researcher(rid, name, rng.choice(DEPTS),
                                           rng.choices(["faculty", "postdoc", "phd", "staff"], [3, 3, 5, 1])[0])
    author_pool = sorted({f"{g} {n}" for g in GIVEN for n in SURNAMES})
    author_pool = rng.sample(author_pool, 140)
    titles: set[str] = {p["title"] for p in s["papers"].values()}
    for seq in range(25, 581):
        vid = f"V-{rng.randint(1, 12):02d}"
        while True:
            a, b = rng.sample(TOPICS[vid], 2)
            title = f"{rng.choice(OPENERS)} {a.title()} {rng.choice(LINKS)} {b.title()}"
            if title not in titles:
                titles.add(title)
                break
        year = rng.randint(2012, 2026)
        earlier = [p for p in s["papers"].values() if p["year"] <= year]
        refs = sorted(int(p["paper_id"][4:]) for p in rng.sample(earlier, min(len(earlier), rng.randint(0, 6))))
        authors = rng.sample(author_pool, rng.randint(1, 4))
        abstract = f"We study {a} in the context of {b}, with experiments on {rng.randint(2, 40)} datasets."
        p = paper(seq, title, authors, vid, s["venues"][vid]["short_name"], year, abstract, [a, b],
                  rng.randint(6, 32), refs, rng.random() < 0.7)
        s["papers"][p["paper_id"]] = p
    rids = sorted(s["researchers"])
    pids = sorted(s["papers"])
    for seq in range(6, 66):
        owner = rng.choice(rids)
        others = rng.sample([r for r in rids if r != owner], rng.randint(0, 3))
        topic = rng.choice(sorted({t for ts in TOPICS.values() for t in ts}))
        s["reading_lists"][f"RL-{seq:04d}"] = reading_list(
            f"RL-{seq:04d}", f"{topic.capitalize()} reading {seq}", owner, "",
            [int(p[4:]) for p in rng.sample(pids, rng.randint(2, 12))],
            [(r, rng.choice(["read", "edit"])) for r in others])
    for seq in range(8, 228):
        pid = rng.choice([p for p in pids if s["papers"][p]["held_locally"]])
        kind = rng.choice(["note", "highlight"])
        ann = annotation(f"AN-{seq:04d}", int(pid[4:]), rng.choice(rids), kind,
                         rng.randint(1, s["papers"][pid]["pages"]),
                         quote=rng.choice(QUOTES) if kind == "highlight" else "",
                         text=rng.choice(NOTES) if kind == "note" else "",
                         tags=rng.sample(TAGS, rng.randint(0, 2)))
        s["annotations"][ann["annotation_id"]] = ann
    not_held = [p for p in pids if not s["papers"][p]["held_locally"]]
    seen: set[tuple[str, str]] = {(ln["researcher_id"], ln["paper_id"]) for ln in LOANS}
    open_count = {r: 0 for r in rids}
    for ln in LOANS:
        open_count[ln["researcher_id"]] += ln["status"] == "requested"
    seq = 8
    while seq < 108:
        rid, pid = rng.choice(rids), rng.choice(not_held)
        if (rid, pid) in seen:
            continue
        status = rng.choices(["requested", "delivered", "cancelled"], [2, 3, 1])[0]
        if status == "requested" and open_count[rid] >= s["researchers"][rid]["ill_limit"]:
            status = "delivered"
        open_count[rid] += status == "requested"
        seen.add((rid, pid))
        needed = f"2026-12-{rng.randint(8, 28):02d}" if rng.random() < 0.4 else None
        ln = loan(f"ILL-{seq:04d}", int(pid[4:]), rid, rng.choice(["pdf", "pdf", "print"]), status, needed)
        s["interlibrary_loans"][ln["ill_id"]] = ln
        seq += 1
    s["next_list_seq"] = 66
    s["next_annotation_seq"] = 228
    s["next_ill_seq"] = seq
    return s


def main() -> None:
    out = HERE / "initial_states"
    out.mkdir(exist_ok=True)
    for name, state in (("small", small_state()), ("large", large_state())):
        (out / f"{name}.json").write_text(json.dumps(state, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
