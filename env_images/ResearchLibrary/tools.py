"""ResearchLibrary tools: paper search and look-up, the citation graph, researchers, reading lists
(create, add, remove, reorder, share), annotations and highlights with tags, interlibrary loans and
citation export (BibTeX-like and APA-like strings).

Every write raises :class:`ToolError` before it mutates anything; a write that succeeds always
changes the state. The clock is ``state.now`` (never the wall clock); ids come from counters.
Positions in a reading list are 1-based.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gym_envfactory import ToolError, tool

from .state import (
    Annotation,
    AnnotationKind,
    Delivery,
    LibraryDB,
    LoanRequest,
    LoanStatus,
    Paper,
    Permission,
    ReadingList,
    Researcher,
    Share,
)

MAX_LIST_PAPERS = 60
TAG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,29}$")
STOPWORDS = frozenset({"a", "an", "the", "on", "of", "for", "in", "to", "and", "with", "towards", "toward", "via"})

PaperId = Annotated[str, Field(description="Paper id, e.g. PAP-0007 (see search_papers)")]
ResearcherId = Annotated[str, Field(description="Researcher id, e.g. R-003 (see find_researcher)")]
ListId = Annotated[str, Field(description="Reading list id, e.g. RL-0002 (see list_reading_lists)")]
Access = Literal["owner", "edit", "read"]  # what a researcher may do with a reading list

# ----------------------------------------------------------------------------- result models


class PaperSummary(BaseModel):
    paper_id: str
    title: str
    authors: list[str]
    year: int
    venue: str = Field(description="Venue short name")
    doi: str
    cited_by_count: int = Field(description="How many library papers cite this one")
    held_locally: bool


class PaperDetail(BaseModel):
    paper_id: str
    title: str
    authors: list[str]
    year: int
    venue_id: str
    venue_name: str
    venue_kind: str
    abstract: str
    keywords: list[str]
    doi: str
    pages: int
    held_locally: bool
    reference_ids: list[str]
    cited_by_count: int


class ListEntry(BaseModel):
    position: int
    paper_id: str
    title: str
    year: int


class Collaborator(BaseModel):
    researcher_id: str
    name: str
    permission: Permission


class ReadingListView(BaseModel):
    list_id: str
    name: str
    owner_id: str
    owner_name: str
    description: str
    papers: list[ListEntry] = Field(description="In reading order, position 1 first")
    shares: list[Collaborator] = Field(description="Who the list is shared with, by researcher_id")
    your_access: Access


class ReadingListSummary(BaseModel):
    list_id: str
    name: str
    owner_id: str
    paper_count: int
    your_access: Access


class LoanOverview(BaseModel):
    researcher_id: str
    ill_limit: int
    open_requests: int = Field(description="Requests with status requested (these count against the limit)")
    loans: list[LoanRequest]


class CitationEntry(BaseModel):
    paper_id: str
    key: str = Field(description="BibTeX key (also given for APA)")
    citation: str


class CitationExport(BaseModel):
    style: Literal["bibtex", "apa"]
    count: int
    entries: list[CitationEntry]
    text: str = Field(description="All entries joined by a blank line")


# ----------------------------------------------------------------------------- helpers


def _paper(state: LibraryDB, paper_id: str) -> Paper:
    p = state.papers.get(paper_id)
    if p is None:
        raise ToolError(f"No paper {paper_id!r}; paper ids look like PAP-0007. Use search_papers to find one.",
                        code="not_found")
    return p


def _researcher(state: LibraryDB, researcher_id: str) -> Researcher:
    r = state.researchers.get(researcher_id)
    if r is None:
        raise ToolError(f"No researcher {researcher_id!r}; researcher ids look like R-003. Use find_researcher.",
                        code="not_found")
    return r


def _list(state: LibraryDB, list_id: str) -> ReadingList:
    rl = state.reading_lists.get(list_id)
    if rl is None:
        raise ToolError(f"No reading list {list_id!r}; ids look like RL-0002. Use list_reading_lists.",
                        code="not_found")
    return rl


def _annotation(state: LibraryDB, annotation_id: str) -> Annotation:
    a = state.annotations.get(annotation_id)
    if a is None:
        raise ToolError(f"No annotation {annotation_id!r}; ids look like AN-0004. Use list_annotations.",
                        code="not_found")
    return a


def _access(rl: ReadingList, researcher_id: str) -> Access | None:
    if rl.owner_id == researcher_id:
        return "owner"
    for s in rl.shares:
        if s.researcher_id == researcher_id:
            return s.permission
    return None


def _require_access(state: LibraryDB, rl: ReadingList, researcher_id: str, edit: bool) -> Access:
    r = _researcher(state, researcher_id)
    access = _access(rl, researcher_id)
    if access is None:
        raise ToolError(f"{r.name} ({researcher_id}) has no access to reading list {rl.list_id}; its owner "
                        f"({rl.owner_id}) can share it with share_reading_list", code="access_denied")
    if edit and access == "read":
        raise ToolError(f"{r.name} ({researcher_id}) can only read {rl.list_id}; ask the owner ({rl.owner_id}) "
                        "for edit permission", code="access_denied")
    return access


def _require_owner(state: LibraryDB, rl: ReadingList, owner_id: str) -> None:
    _researcher(state, owner_id)
    if rl.owner_id != owner_id:
        raise ToolError(f"Only the owner ({rl.owner_id}) can change who {rl.list_id} is shared with",
                        code="not_owner")


def _cited_by(state: LibraryDB, paper_id: str) -> list[Paper]:
    return [p for p in state.papers.values() if paper_id in p.references]


def _summary(state: LibraryDB, p: Paper) -> PaperSummary:
    v = state.venues.get(p.venue_id)
    return PaperSummary(paper_id=p.paper_id, title=p.title, authors=p.authors, year=p.year,
                        venue=v.short_name if v else p.venue_id, doi=p.doi,
                        cited_by_count=len(_cited_by(state, p.paper_id)), held_locally=p.held_locally)


def _by_recency(papers: list[Paper]) -> list[Paper]:
    return sorted(papers, key=lambda p: (-p.year, p.paper_id))


def _view(state: LibraryDB, rl: ReadingList, researcher_id: str) -> ReadingListView:
    owner = state.researchers.get(rl.owner_id)
    shares = [Collaborator(researcher_id=s.researcher_id, permission=s.permission,
                           name=state.researchers[s.researcher_id].name if s.researcher_id in state.researchers else s.researcher_id)
               for s in rl.shares]
    entries = [ListEntry(position=i, paper_id=pid, title=state.papers[pid].title, year=state.papers[pid].year)
               for i, pid in enumerate(rl.paper_ids, 1)]
    return ReadingListView(list_id=rl.list_id, name=rl.name, owner_id=rl.owner_id,
                           owner_name=owner.name if owner else rl.owner_id, description=rl.description, shares=shares,
                           papers=entries, your_access=_access(rl, researcher_id) or "read")


def _clean_tags(tags: list[str]) -> list[str]:
    out: set[str] = set()
    for t in tags:
        c = t.strip().lower().replace(" ", "-")
        if not TAG_RE.match(c):
            raise ToolError(f"Tag {t!r} is not valid: use 1-30 lower-case letters, digits or hyphens (e.g. 'methods')",
                            code="invalid_argument")
        out.add(c)
    return sorted(out)


def _can_read_full_text(state: LibraryDB, p: Paper, researcher_id: str) -> bool:
    return p.held_locally or any(
        ln.paper_id == p.paper_id and ln.researcher_id == researcher_id and ln.status == "delivered"
        for ln in state.interlibrary_loans.values())


def _split_name(full: str) -> tuple[str, list[str]]:
    parts = full.split()
    return parts[-1], parts[:-1]


def _cite_key(p: Paper) -> str:
    surname = re.sub(r"[^a-z0-9]", "", _split_name(p.authors[0])[0].lower()) if p.authors else "anon"
    words = [re.sub(r"[^a-z0-9]", "", w.lower()) for w in p.title.split()]
    word = next((w for w in words if w and w not in STOPWORDS), "paper")
    return f"{surname}{p.year}{word}"


def _bibtex(state: LibraryDB, p: Paper, key: str) -> str:
    v = state.venues[p.venue_id]
    names = " and ".join(f"{s}, {' '.join(g)}" if g else s for s, g in map(_split_name, p.authors))
    kind, where = ("article", "journal") if v.kind == "journal" else ("inproceedings", "booktitle")
    return (f"@{kind}{{{key},\n  author = {{{names}}},\n  title = {{{p.title}}},\n  {where} = {{{v.name}}},\n"
            f"  year = {{{p.year}}},\n  doi = {{{p.doi}}}\n}}")


def _apa(state: LibraryDB, p: Paper) -> str:
    v = state.venues[p.venue_id]
    names = [f"{s}, {' '.join(g_[0] + '.' for g_ in g)}" if g else s for s, g in map(_split_name, p.authors)]
    if len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]}, & {names[1]}"
    else:
        who = ", ".join(names[:-1]) + f", & {names[-1]}"
    title = p.title if p.title.endswith(("?", "!", ".")) else p.title + "."
    return f"{who} ({p.year}). {title} {v.name}. https://doi.org/{p.doi}"


# ----------------------------------------------------------------------------- read tools


@tool(read_only=True)
def search_papers(
    state: LibraryDB,
    *,
    query: Annotated[str, Field(description="Words that must all appear in the title, abstract or keywords (case-insensitive)")] = "",
    author: Annotated[str | None, Field(description="Part of an author's name, e.g. 'Okafor'")] = None,
    venue: Annotated[str | None, Field(description="Part of a venue's name or short name, e.g. 'SIGIR'")] = None,
    keyword: Annotated[str | None, Field(description="An exact keyword, e.g. 'dense retrieval'")] = None,
    year_from: Annotated[int | None, Field(description="Earliest publication year, inclusive")] = None,
    year_to: Annotated[int | None, Field(description="Latest publication year, inclusive")] = None,
    doi: Annotated[str | None, Field(description="An exact DOI, e.g. 10.5281/nlr.2021.014 (with or without https://doi.org/)")] = None,
    limit: Annotated[int, Field(ge=1, le=50)] = 20,
) -> list[PaperSummary]:
    """Search the library catalogue by words, author, venue, keyword, year range or DOI (all given
    criteria must match).

    Returns paper summaries (paper_id, title, authors, year, venue short name, DOI, how many library
    papers cite it, whether the full text is held locally), newest first, then by paper_id; an empty
    list means nothing matches.
    Errors: invalid_argument (no criterion at all, or year_from after year_to).
    """
    if not (query.strip() or author or venue or keyword or doi or year_from is not None or year_to is not None):
        raise ToolError("Give at least one criterion: query, author, venue, keyword, a year range or a DOI",
                        code="invalid_argument")
    if year_from is not None and year_to is not None and year_from > year_to:
        raise ToolError(f"year_from {year_from} is after year_to {year_to}", code="invalid_argument")
    words = query.lower().split()
    want_doi = doi.strip().lower().removeprefix("https://doi.org/") if doi else None
    out = []
    for p in state.papers.values():
        v = state.venues.get(p.venue_id)
        hay = " ".join([p.title, p.abstract, " ".join(p.keywords)]).lower()
        if words and not all(w in hay for w in words):
            continue
        if author and not any(author.strip().lower() in a.lower() for a in p.authors):
            continue
        if venue and not (v and (venue.strip().lower() in v.name.lower() or venue.strip().lower() in v.short_name.lower())):
            continue
        if keyword and keyword.strip().lower() not in (k.lower() for k in p.keywords):
            continue
        if (year_from is not None and p.year < year_from) or (year_to is not None and p.year > year_to):
            continue
        if want_doi and p.doi.lower() != want_doi:
            continue
        out.append(p)
    return [_summary(state, p) for p in _by_recency(out)[:limit]]


@tool(read_only=True)
def get_paper(state: LibraryDB, *, paper_id: PaperId) -> PaperDetail:
    """Get one paper's full record: title, authors, year, venue (id, name, journal/conference),
    abstract, keywords, DOI, page count, whether the full text is held locally, the ids of the library
    papers it cites and how many library papers cite it.
    Errors: not_found.
    """
    p = _paper(state, paper_id)
    v = state.venues[p.venue_id]
    return PaperDetail(paper_id=p.paper_id, title=p.title, authors=p.authors, year=p.year, venue_id=v.venue_id,
                       venue_name=v.name, venue_kind=v.kind, abstract=p.abstract, keywords=p.keywords, doi=p.doi,
                       pages=p.pages, held_locally=p.held_locally, reference_ids=p.references,
                       cited_by_count=len(_cited_by(state, p.paper_id)))


@tool(read_only=True)
def get_citations(
    state: LibraryDB,
    *,
    paper_id: PaperId,
    direction: Annotated[Literal["cited_by", "references"], Field(description="'cited_by': library papers citing this one; 'references': library papers it cites")] = "cited_by",
    year_from: Annotated[int | None, Field(description="Only papers published in or after this year")] = None,
) -> list[PaperSummary]:
    """Walk the citation graph one step from a paper: the library papers that cite it (cited_by) or
    that it cites (references), optionally only from year_from on.

    Returns paper summaries, newest first, then by paper_id; an empty list means none.
    Errors: not_found (unknown paper).
    """
    p = _paper(state, paper_id)
    found = _cited_by(state, paper_id) if direction == "cited_by" else [state.papers[r] for r in p.references if r in state.papers]
    found = [q for q in found if year_from is None or q.year >= year_from]
    return [_summary(state, q) for q in _by_recency(found)]


@tool(read_only=True)
def find_researcher(
    state: LibraryDB,
    *,
    query: Annotated[str, Field(description="Part of a name or email, case-insensitive; empty to list a department")] = "",
    department: Annotated[str | None, Field(description="Only researchers of this department, case-insensitive")] = None,
) -> list[Researcher]:
    """Look up library users (researchers) by part of their name or email, optionally in one department.

    Returns researchers (researcher_id, name, email, department, role, interlibrary loan limit),
    sorted by researcher_id.
    Errors: invalid_argument (neither query nor department given), not_found (nobody matches).
    """
    q = query.strip().lower()
    if not q and not department:
        raise ToolError("Give a name/email fragment in query, or a department", code="invalid_argument")
    out = [r for r in state.researchers.values()
           if (not q or q in r.name.lower() or q in r.email.lower())
           and (department is None or r.department.lower() == department.strip().lower())]
    if not out:
        depts = sorted({r.department for r in state.researchers.values()})
        raise ToolError(f"Nobody matches query={query!r} department={department!r}; departments are: "
                        f"{', '.join(depts)}", code="not_found")
    return sorted(out, key=lambda r: r.researcher_id)


@tool(read_only=True)
def list_reading_lists(state: LibraryDB, *, researcher_id: ResearcherId) -> list[ReadingListSummary]:
    """List the reading lists a researcher owns or that are shared with them.

    Returns summaries (list_id, name, owner, paper count, your_access owner/edit/read): owned lists
    first, then shared ones, each by list_id; an empty list means none.
    Errors: not_found (unknown researcher).
    """
    _researcher(state, researcher_id)
    out = []
    for rl in sorted(state.reading_lists.values(), key=lambda x: (x.owner_id != researcher_id, x.list_id)):
        access = _access(rl, researcher_id)
        if access is not None:
            out.append(ReadingListSummary(list_id=rl.list_id, name=rl.name, owner_id=rl.owner_id,
                                          paper_count=len(rl.paper_ids), your_access=access))
    return out


@tool(read_only=True)
def get_reading_list(state: LibraryDB, *, list_id: ListId, researcher_id: Annotated[str, Field(description="Who is asking: the owner or a collaborator it is shared with")]) -> ReadingListView:
    """Open a reading list: its name, owner, description, papers in reading order (1-based
    positions, with titles and years), collaborators with their permission, and the asker's access.
    Errors: not_found (list or researcher), access_denied (not shared with the asker).
    """
    rl = _list(state, list_id)
    _require_access(state, rl, researcher_id, edit=False)
    return _view(state, rl, researcher_id)


@tool(read_only=True)
def list_annotations(
    state: LibraryDB,
    *,
    researcher_id: Annotated[str, Field(description="Whose annotations (annotations are private to their author)")],
    paper_id: Annotated[str | None, Field(description="Only annotations on this paper")] = None,
    tag: Annotated[str | None, Field(description="Only annotations carrying this tag")] = None,
) -> list[Annotation]:
    """List a researcher's notes and highlights, optionally on one paper and/or with one tag.

    Returns annotations (annotation_id, paper_id, kind note/highlight, page, quote, text, tags),
    sorted by paper_id, page, annotation_id; an empty list means none.
    Errors: not_found (unknown researcher or paper).
    """
    _researcher(state, researcher_id)
    if paper_id is not None:
        _paper(state, paper_id)
    t = tag.strip().lower().replace(" ", "-") if tag else None
    out = [a for a in state.annotations.values() if a.researcher_id == researcher_id
           and (paper_id is None or a.paper_id == paper_id) and (t is None or t in a.tags)]
    return sorted(out, key=lambda a: (a.paper_id, a.page, a.annotation_id))


@tool(read_only=True)
def export_citations(
    state: LibraryDB,
    *,
    paper_ids: Annotated[list[str], Field(min_length=1, max_length=60, description="Papers to cite, in the order wanted")],
    style: Annotated[Literal["bibtex", "apa"], Field(description="'bibtex' entries or 'apa' reference-list lines")] = "bibtex",
) -> CitationExport:
    """Format citations for papers, in the order given (duplicates dropped).

    bibtex: one @article (journal) or @inproceedings (conference) entry per paper with author
    ('Surname, Given and ...'), title, journal/booktitle, year and doi; the key is the first
    author's surname, the year and the first significant title word (okafor2021sparse), with b, c...
    appended when keys repeat. apa: 'Surname, G., & Surname, G. (year). Title. Venue.
    https://doi.org/DOI'. Returns the entries and the whole text (entries joined by a blank line).
    Errors: not_found (an unknown paper id; nothing is exported).
    """
    ids: list[str] = []
    for pid in paper_ids:
        _paper(state, pid)
        if pid not in ids:
            ids.append(pid)
    entries = []
    used: dict[str, int] = {}
    for pid in ids:
        p = state.papers[pid]
        base = _cite_key(p)
        used[base] = used.get(base, 0) + 1
        key = base if used[base] == 1 else base + "abcdefghijklmnopqrstuvwxyz"[used[base] - 1]
        text = _bibtex(state, p, key) if style == "bibtex" else _apa(state, p)
        entries.append(CitationEntry(paper_id=pid, key=key, citation=text))
    return CitationExport(style=style, count=len(entries), entries=entries,
                          text="\n\n".join(e.citation for e in entries))


@tool(read_only=True)
def list_interlibrary_loans(
    state: LibraryDB,
    *,
    researcher_id: ResearcherId,
    status: Annotated[LoanStatus | None, Field(description="Only loans with this status")] = None,
) -> LoanOverview:
    """List a researcher's interlibrary loan requests with their limit and how many are open.

    Returns the researcher's ILL limit, the number of open (requested) loans and the loans
    (ill_id, paper_id, delivery pdf/print, status requested/delivered/cancelled, fee, needed_by),
    sorted by ill_id.
    Errors: not_found (unknown researcher).
    """
    r = _researcher(state, researcher_id)
    mine = sorted((ln for ln in state.interlibrary_loans.values() if ln.researcher_id == researcher_id),
                  key=lambda ln: ln.ill_id)
    open_n = sum(ln.status == "requested" for ln in mine)
    return LoanOverview(researcher_id=researcher_id, ill_limit=r.ill_limit, open_requests=open_n,
                        loans=[ln for ln in mine if status is None or ln.status == status])


# ----------------------------------------------------------------------------- write tools: reading lists


@tool
def create_reading_list(
    state: LibraryDB,
    *,
    owner_id: Annotated[str, Field(description="Researcher id of the owner")],
    name: Annotated[str, Field(description="List name, unique among the owner's lists")],
    description: Annotated[str, Field(description="Optional description")] = "",
    paper_ids: Annotated[list[str], Field(max_length=60, description="Papers to start with, in reading order")] = [],  # noqa: B006 - the schema default; never mutated
) -> ReadingListView:
    """Create a reading list owned by a researcher, optionally starting with some papers (duplicates
    dropped, order kept).

    Returns the new list (its id RL-xxxx) as get_reading_list shows it.
    Errors: invalid_argument (empty name), not_found (owner or a paper), duplicate_name (the owner
    already has a list with this name, case-insensitive).
    """
    if not name.strip():
        raise ToolError("The list name must not be empty", code="invalid_argument")
    _researcher(state, owner_id)
    ids: list[str] = []
    for pid in paper_ids:
        _paper(state, pid)
        if pid not in ids:
            ids.append(pid)
    for rl in state.reading_lists.values():
        if rl.owner_id == owner_id and rl.name.lower() == name.strip().lower():
            raise ToolError(f"{owner_id} already has a reading list named {rl.name!r} ({rl.list_id}); add papers "
                            "to it or choose another name", code="duplicate_name")
    lid = f"RL-{state.next_list_seq:04d}"
    state.next_list_seq += 1
    rl = ReadingList(list_id=lid, name=name.strip(), owner_id=owner_id, description=description, paper_ids=ids,
                     created_at=state.now)
    state.reading_lists[lid] = rl
    return _view(state, rl, owner_id)


@tool
def add_paper_to_reading_list(
    state: LibraryDB,
    *,
    list_id: ListId,
    requested_by: Annotated[str, Field(description="Researcher id of whoever asks: the owner or an edit collaborator")],
    paper_id: PaperId,
    position: Annotated[int | None, Field(ge=1, description="1-based position to insert at (default: the end)")] = None,
) -> ReadingListView:
    """Add a paper to a reading list, at the end or at a 1-based position (later papers move down).

    Returns the updated list.
    Errors: not_found (list, researcher or paper), access_denied (not shared with the asker, or
    read-only), already_in_list, invalid_argument (position beyond the end + 1), list_full (60 papers).
    """
    rl = _list(state, list_id)
    _require_access(state, rl, requested_by, edit=True)
    p = _paper(state, paper_id)
    if paper_id in rl.paper_ids:
        raise ToolError(f"{p.title!r} is already in {list_id} at position {rl.paper_ids.index(paper_id) + 1}; use "
                        "move_paper_in_reading_list to reorder", code="already_in_list")
    if len(rl.paper_ids) >= MAX_LIST_PAPERS:
        raise ToolError(f"{list_id} already holds {MAX_LIST_PAPERS} papers; remove one or start a new list",
                        code="list_full")
    if position is not None and position > len(rl.paper_ids) + 1:
        raise ToolError(f"{list_id} has {len(rl.paper_ids)} papers; position must be 1-{len(rl.paper_ids) + 1}",
                        code="invalid_argument")
    rl.paper_ids.insert((position or len(rl.paper_ids) + 1) - 1, paper_id)
    return _view(state, rl, requested_by)


@tool(destructive=True)
def remove_paper_from_reading_list(
    state: LibraryDB,
    *,
    list_id: ListId,
    requested_by: Annotated[str, Field(description="Researcher id of whoever asks: the owner or an edit collaborator")],
    paper_id: PaperId,
) -> ReadingListView:
    """Remove a paper from a reading list (later papers move up). Returns the updated list.
    Errors: not_found (list, researcher or paper), access_denied, not_in_list.
    """
    rl = _list(state, list_id)
    _require_access(state, rl, requested_by, edit=True)
    p = _paper(state, paper_id)
    if paper_id not in rl.paper_ids:
        raise ToolError(f"{p.title!r} ({paper_id}) is not in {list_id}", code="not_in_list")
    rl.paper_ids.remove(paper_id)
    return _view(state, rl, requested_by)


@tool
def move_paper_in_reading_list(
    state: LibraryDB,
    *,
    list_id: ListId,
    requested_by: Annotated[str, Field(description="Researcher id of whoever asks: the owner or an edit collaborator")],
    paper_id: PaperId,
    new_position: Annotated[int, Field(ge=1, description="1-based position the paper should end up at")],
) -> ReadingListView:
    """Reorder a reading list: move one paper to a new 1-based position (the others keep their order).

    Returns the updated list.
    Errors: not_found, access_denied, not_in_list, invalid_argument (position beyond the end),
    invalid_state (the paper is already at that position).
    """
    rl = _list(state, list_id)
    _require_access(state, rl, requested_by, edit=True)
    _paper(state, paper_id)
    if paper_id not in rl.paper_ids:
        raise ToolError(f"{paper_id} is not in {list_id}; add it with add_paper_to_reading_list", code="not_in_list")
    if new_position > len(rl.paper_ids):
        raise ToolError(f"{list_id} has {len(rl.paper_ids)} papers; new_position must be 1-{len(rl.paper_ids)}",
                        code="invalid_argument")
    if rl.paper_ids.index(paper_id) + 1 == new_position:
        raise ToolError(f"{paper_id} is already at position {new_position}", code="invalid_state")
    rl.paper_ids.remove(paper_id)
    rl.paper_ids.insert(new_position - 1, paper_id)
    return _view(state, rl, requested_by)


@tool
def share_reading_list(
    state: LibraryDB,
    *,
    list_id: ListId,
    owner_id: Annotated[str, Field(description="Researcher id of the list's owner (only the owner can share)")],
    researcher_id: Annotated[str, Field(description="Collaborator to share with")],
    permission: Annotated[Permission, Field(description="'read' (view only) or 'edit' (may add, remove and reorder papers)")] = "read",
) -> ReadingListView:
    """Share a reading list with a collaborator, or change an existing collaborator's permission.

    Returns the updated list with its collaborators.
    Errors: not_found (list or researcher), not_owner, invalid_argument (sharing with the owner),
    invalid_state (already shared with that permission).
    """
    rl = _list(state, list_id)
    _require_owner(state, rl, owner_id)
    r = _researcher(state, researcher_id)
    if researcher_id == rl.owner_id:
        raise ToolError("The owner always has full access; share with someone else", code="invalid_argument")
    current = next((s for s in rl.shares if s.researcher_id == researcher_id), None)
    if current is not None and current.permission == permission:
        raise ToolError(f"{list_id} is already shared with {r.name} ({researcher_id}) with {permission} permission",
                        code="invalid_state")
    if current is not None:
        current.permission = permission
    else:
        rl.shares.append(Share(researcher_id=researcher_id, permission=permission))
        rl.shares.sort(key=lambda s: s.researcher_id)
    return _view(state, rl, owner_id)


@tool(destructive=True)
def unshare_reading_list(
    state: LibraryDB,
    *,
    list_id: ListId,
    owner_id: Annotated[str, Field(description="Researcher id of the list's owner")],
    researcher_id: Annotated[str, Field(description="Collaborator whose access is revoked")],
) -> ReadingListView:
    """Stop sharing a reading list with one collaborator (owner only). Returns the updated list.
    Errors: not_found (list or researcher), not_owner, not_shared (the list is not shared with them).
    """
    rl = _list(state, list_id)
    _require_owner(state, rl, owner_id)
    r = _researcher(state, researcher_id)
    if all(s.researcher_id != researcher_id for s in rl.shares):
        raise ToolError(f"{list_id} is not shared with {r.name} ({researcher_id})", code="not_shared")
    rl.shares = [s for s in rl.shares if s.researcher_id != researcher_id]
    return _view(state, rl, owner_id)


# ----------------------------------------------------------------------------- write tools: annotations


@tool
def annotate_paper(
    state: LibraryDB,
    *,
    paper_id: PaperId,
    researcher_id: ResearcherId,
    kind: Annotated[AnnotationKind, Field(description="'note' (text) or 'highlight' (a quoted passage, optional text)")],
    page: Annotated[int, Field(ge=1, description="Page of the full text, 1-based")],
    text: Annotated[str, Field(description="The note; required for a note, optional comment on a highlight")] = "",
    quote: Annotated[str, Field(description="The highlighted passage; required for a highlight")] = "",
    tags: Annotated[list[str], Field(max_length=10, description="Tags, e.g. ['methods', 'to-cite']")] = [],  # noqa: B006 - the schema default; never mutated
) -> Annotation:
    """Add a private note or highlight to a page of a paper's full text, with optional tags (stored
    lower-case, spaces as hyphens, sorted). The researcher must be able to open the full text: held
    locally, or delivered to them by an interlibrary loan.

    Returns the annotation with its id (AN-xxxx).
    Errors: not_found (paper or researcher), invalid_argument (a note without text, a highlight
    without quote, a page beyond the paper's last page, a malformed tag), no_full_text (not held
    locally and no delivered interlibrary loan: request_interlibrary_loan first).
    """
    p = _paper(state, paper_id)
    _researcher(state, researcher_id)
    if kind == "note" and not text.strip():
        raise ToolError("A note needs text", code="invalid_argument")
    if kind == "highlight" and not quote.strip():
        raise ToolError("A highlight needs the quoted passage in quote", code="invalid_argument")
    if page > p.pages:
        raise ToolError(f"{paper_id} has {p.pages} pages; page {page} does not exist", code="invalid_argument")
    clean = _clean_tags(tags)
    if not _can_read_full_text(state, p, researcher_id):
        raise ToolError(f"The library does not hold the full text of {paper_id} and {researcher_id} has no delivered "
                        "interlibrary loan for it; request one with request_interlibrary_loan", code="no_full_text")
    aid = f"AN-{state.next_annotation_seq:04d}"
    state.next_annotation_seq += 1
    a = Annotation(annotation_id=aid, paper_id=paper_id, researcher_id=researcher_id, kind=kind, page=page,
                   quote=quote.strip(), text=text.strip(), tags=clean, created_at=state.now)
    state.annotations[aid] = a
    return a


@tool
def tag_annotation(
    state: LibraryDB,
    *,
    annotation_id: Annotated[str, Field(description="Annotation id, e.g. AN-0004")],
    researcher_id: Annotated[str, Field(description="The annotation's author")],
    add_tags: Annotated[list[str], Field(max_length=10, description="Tags to add")] = [],  # noqa: B006 - the schema default; never mutated
    remove_tags: Annotated[list[str], Field(max_length=10, description="Tags to remove")] = [],  # noqa: B006 - the schema default; never mutated
) -> Annotation:
    """Add and/or remove tags on one of your annotations (removals first). Returns the annotation.
    Errors: not_found, not_owner (someone else's annotation), invalid_argument (no tags given, a
    malformed tag), invalid_state (the tags would not change).
    """
    a = _annotation(state, annotation_id)
    _researcher(state, researcher_id)
    if a.researcher_id != researcher_id:
        raise ToolError(f"{annotation_id} belongs to {a.researcher_id}; only its author can change it",
                        code="not_owner")
    if not add_tags and not remove_tags:
        raise ToolError("Give add_tags and/or remove_tags", code="invalid_argument")
    new = sorted((set(a.tags) - set(_clean_tags(remove_tags))) | set(_clean_tags(add_tags)))
    if len(new) > 10:
        raise ToolError("An annotation carries at most 10 tags", code="invalid_argument")
    if new == a.tags:
        raise ToolError(f"{annotation_id} already has tags {a.tags}; nothing would change", code="invalid_state")
    a.tags = new
    return a


@tool(destructive=True)
def delete_annotation(
    state: LibraryDB,
    *,
    annotation_id: Annotated[str, Field(description="Annotation id, e.g. AN-0004")],
    researcher_id: Annotated[str, Field(description="The annotation's author")],
) -> Annotation:
    """Delete one of your notes or highlights for good. Returns the deleted annotation.
    Errors: not_found, not_owner (someone else's annotation).
    """
    a = _annotation(state, annotation_id)
    _researcher(state, researcher_id)
    if a.researcher_id != researcher_id:
        raise ToolError(f"{annotation_id} belongs to {a.researcher_id}; only its author can delete it",
                        code="not_owner")
    del state.annotations[annotation_id]
    return a


# ----------------------------------------------------------------------------- write tools: interlibrary loans


@tool
def request_interlibrary_loan(
    state: LibraryDB,
    *,
    paper_id: PaperId,
    researcher_id: ResearcherId,
    delivery: Annotated[Delivery, Field(description="'pdf' (free, by email) or 'print' (a paper copy; a fee, see the result)")] = "pdf",
    needed_by: Annotated[date | None, Field(description="Date the copy is needed by (ISO date), at least 3 days from today")] = None,
    note: Annotated[str, Field(description="Optional note to the ILL desk")] = "",
) -> LoanRequest:
    """Ask the interlibrary loan desk for the full text of a paper the library does not hold.

    Print delivery costs the library's print fee (6.50 EUR), charged to the researcher; pdf is free.
    The request counts against the researcher's ILL limit while it is open (status requested).
    Returns the request with its id (ILL-xxxx) and fee.
    Errors: not_found (paper or researcher), already_available (the library holds the full text, or
    the researcher already has it delivered), duplicate_request (an open request for this paper
    exists), limit_exceeded (open requests at the researcher's limit: wait or cancel one),
    invalid_date (needed_by less than 3 days from today).
    """
    p = _paper(state, paper_id)
    r = _researcher(state, researcher_id)
    if p.held_locally:
        raise ToolError(f"The library holds the full text of {paper_id}; no interlibrary loan is needed",
                        code="already_available")
    mine = [ln for ln in state.interlibrary_loans.values() if ln.researcher_id == researcher_id]
    for ln in mine:
        if ln.paper_id == paper_id and ln.status == "delivered":
            raise ToolError(f"{r.name} already received {paper_id} through {ln.ill_id}", code="already_available")
        if ln.paper_id == paper_id and ln.status == "requested":
            raise ToolError(f"{ln.ill_id} already requests {paper_id} for {r.name}", code="duplicate_request")
    open_n = sum(ln.status == "requested" for ln in mine)
    if open_n >= r.ill_limit:
        raise ToolError(f"{r.name} ({r.role}) already has {open_n} open requests, the limit is {r.ill_limit}; "
                        "cancel one with cancel_interlibrary_loan or wait for a delivery", code="limit_exceeded")
    earliest = state.now.date() + timedelta(days=state.ill_min_days)
    if needed_by is not None and needed_by < earliest:
        raise ToolError(f"Interlibrary loans take at least {state.ill_min_days} days; needed_by must be "
                        f"{earliest.isoformat()} or later", code="invalid_date")
    lid = f"ILL-{state.next_ill_seq:04d}"
    state.next_ill_seq += 1
    loan = LoanRequest(ill_id=lid, paper_id=paper_id, researcher_id=researcher_id, delivery=delivery,
                       fee=round(state.print_fee if delivery == "print" else 0.0, 2), needed_by=needed_by,
                       note=note, requested_at=state.now)
    state.interlibrary_loans[lid] = loan
    return loan


@tool(destructive=True)
def cancel_interlibrary_loan(
    state: LibraryDB,
    *,
    ill_id: Annotated[str, Field(description="Interlibrary loan id, e.g. ILL-0005")],
    researcher_id: Annotated[str, Field(description="The researcher who made the request")],
) -> LoanRequest:
    """Cancel an open interlibrary loan request (no fee is charged). Returns the cancelled request.
    Errors: not_found, not_owner (someone else's request), already_cancelled, invalid_state (already
    delivered).
    """
    ln = state.interlibrary_loans.get(ill_id)
    if ln is None:
        raise ToolError(f"No interlibrary loan {ill_id!r}; ids look like ILL-0005. Use list_interlibrary_loans.",
                        code="not_found")
    _researcher(state, researcher_id)
    if ln.researcher_id != researcher_id:
        raise ToolError(f"{ill_id} was requested by {ln.researcher_id}; only they can cancel it", code="not_owner")
    if ln.status == "cancelled":
        raise ToolError(f"{ill_id} is already cancelled", code="already_cancelled")
    if ln.status == "delivered":
        raise ToolError(f"{ill_id} was already delivered and cannot be cancelled", code="invalid_state")
    ln.status = "cancelled"
    ln.fee = 0.0
    return ln
