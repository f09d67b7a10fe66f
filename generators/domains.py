"""An environment's domain from its own words, when nobody gave one (issue 27 part 5; docs/authoring.md,
"Importing a tool server").

The paper's seven domains (:data:`gym_envfactory.environment.manifest.DOMAINS`) each get a small table of
keywords; :func:`infer_domain` counts the distinct keywords among the words of an environment's tool
names, state field names and description, those of its name three times, and returns the domain with the
most (ties: the order of ``DOMAINS``), ``utilities`` when no keyword is there.  The importer uses it when neither ``--domain`` nor
a mapping gives the domain.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from gym_envfactory.environment.manifest import DOMAINS

__all__ = ["DOMAIN_KEYWORDS", "infer_domain", "domain_words", "state_words", "environment_texts"]

#: Keywords per domain (singular, lower case; a word matches its plural too).
DOMAIN_KEYWORDS: dict[str, frozenset[str]] = {
    "commerce": frozenset({"order", "cart", "product", "store", "shop", "checkout", "shipment", "parcel", "delivery",
                           "inventory", "sku", "variant", "coupon", "promo", "refund", "seller", "merchant", "customer",
                           "warehouse", "courier", "listing", "purchase", "wishlist", "catalogue", "locker"}),
    "finance": frozenset({"bank", "account", "payment", "transaction", "card", "loan", "balance", "budget", "invoice",
                          "payee", "transfer", "credit", "debit", "stock", "portfolio", "tax", "expense", "wallet",
                          "deposit", "withdraw", "withdrawal", "mortgage", "currency", "ledger", "dispute", "statement"}),
    "travel": frozenset({"hotel", "flight", "trip", "stay", "room", "reservation", "airline", "airport", "itinerary",
                         "destination", "rental", "train", "inn", "guest", "checkin", "checkout", "passenger", "seat",
                         "boarding", "tour", "visa", "luggage", "baggage", "hostel", "night"}),
    "office": frozenset({"calendar", "event", "meeting", "email", "mail", "document", "file", "folder", "project",
                         "ticket", "team", "employee", "attendee", "agenda", "desk", "drive", "spreadsheet", "memo",
                         "workspace", "share", "issue", "sprint", "invite", "organizer", "colleague", "helpdesk"}),
    "lifestyle": frozenset({"fitness", "gym", "workout", "recipe", "restaurant", "food", "music", "playlist", "movie",
                            "health", "clinic", "doctor", "patient", "appointment", "pet", "membership", "trainer",
                            "diet", "meal", "hobby", "dating", "theme", "profile", "wellness", "yoga", "sport"}),
    "research": frozenset({"paper", "library", "citation", "author", "journal", "dataset", "experiment", "article",
                           "publication", "study", "lab", "reading", "interlibrary", "doi", "venue", "abstract",
                           "thesis", "grant", "reviewer", "manuscript", "annotation", "archive", "book", "loan"}),
    "utilities": frozenset({"weather", "forecast", "unit", "convert", "conversion", "timer", "calculator", "clock",
                            "reminder", "setting", "device", "audit", "log", "alarm", "translate", "counter", "todo",
                            "note", "password", "backup", "battery", "network"}),
}


def domain_words(text: str) -> list[str]:
    """The lower-case words of ``text``: ``snake_case``, ``camelCase`` and ``CamelCase`` split, plurals
    reduced (``bookings`` → ``booking``, ``categories`` → ``category``)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text)
    out = []
    for w in re.findall(r"[a-z]+", spaced.lower()):
        if w.endswith("ies") and len(w) > 4:
            w = w[:-3] + "y"
        elif w.endswith("s") and not w.endswith("ss") and len(w) > 3:
            w = w[:-1]
        out.append(w)
    return out


def state_words(state: Any, depth: int = 3) -> list[str]:
    """Field names of a state (JSON object) down to ``depth`` levels, first record of each collection
    only (collection keys that are ids are skipped: their records' fields are what names the domain)."""
    out: list[str] = []
    if depth <= 0:
        return out
    if isinstance(state, Mapping):
        values = list(state.items())
        idish = values and all(re.search(r"\d", str(k)) for k, _ in values)
        for k, v in values[:1] if idish else values:
            if not idish:
                out.append(str(k))
            out += state_words(v, depth - 1)
    elif isinstance(state, list) and state:
        out += state_words(state[0], depth - 1)
    return out


def infer_domain(texts: Iterable[str], *, name: str = "") -> str:
    """The domain (one of ``DOMAINS``) whose keywords occur most among the distinct words of ``texts`` (an
    environment's description, tool names, state field names) and of ``name`` (the environment's name,
    whose keywords count three times); ``utilities`` when none occurs."""
    counts: Counter[str] = Counter()
    seen = set(w for text in texts for w in domain_words(text))
    for domain, keys in DOMAIN_KEYWORDS.items():
        counts[domain] = len(seen & keys) + 3 * len(set(domain_words(name)) & keys)
    best = max(counts.values())
    if not best:
        return "utilities"
    return next(d for d in DOMAINS if counts.get(d) == best)


def environment_texts(name: str, description: str, tools: Iterable[str], states: Mapping[str, Any]) -> list[str]:
    """What :func:`infer_domain` reads of an environment besides its name: the name, its description, tool
    names and the field names of its initial states (``{state name: dict or JSON text}``)."""
    texts = [name, description, *map(str, tools)]
    for state in states.values():
        if isinstance(state, str | bytes):
            try:
                state = json.loads(state)
            except ValueError:
                continue
        texts += state_words(state)
    return texts
