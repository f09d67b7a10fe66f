"""The ResearchLibrary database: researchers, venues, papers with their citation graph, reading
lists shared between researchers, annotations and highlights, and interlibrary loan (ILL) requests.

The clock ``now`` is fixed and every id comes from a counter in the state. A paper's ``references``
are the ids of the library's papers it cites; who cites a paper is derived from them (never stored).
Money (ILL print fees) is EUR, a float rounded to 2 decimals.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

Role = Literal["faculty", "postdoc", "phd", "staff"]
VenueKind = Literal["journal", "conference"]
Permission = Literal["read", "edit"]
AnnotationKind = Literal["note", "highlight"]
Delivery = Literal["pdf", "print"]
LoanStatus = Literal["requested", "delivered", "cancelled"]


class Researcher(BaseModel):
    researcher_id: str = Field(description="Researcher id, e.g. R-003")
    name: str
    email: str
    department: str
    role: Role
    ill_limit: int = Field(description="How many interlibrary loan requests may be open (status requested) at once")


class Venue(BaseModel):
    venue_id: str = Field(description="Venue id, e.g. V-02")
    name: str
    short_name: str
    kind: VenueKind


class Paper(BaseModel):
    paper_id: str = Field(description="Paper id, e.g. PAP-0007")
    title: str
    authors: list[str] = Field(description="Author names in byline order, 'Given Surname'")
    venue_id: str
    year: int
    abstract: str
    keywords: list[str] = Field(default_factory=list)
    doi: str
    pages: int = Field(description="Number of pages of the full text")
    references: list[str] = Field(default_factory=list, description="Ids of library papers this paper cites")
    held_locally: bool = Field(description="The library holds the full text; otherwise it needs an interlibrary loan")


class Share(BaseModel):
    researcher_id: str
    permission: Permission


class ReadingList(BaseModel):
    list_id: str = Field(description="Reading list id, e.g. RL-0003")
    name: str
    owner_id: str
    description: str = ""
    paper_ids: list[str] = Field(default_factory=list, description="Papers in reading order (position 1 first)")
    shares: list[Share] = Field(default_factory=list, description="Collaborators, sorted by researcher_id")
    created_at: datetime


class Annotation(BaseModel):
    annotation_id: str = Field(description="Annotation id, e.g. AN-0004")
    paper_id: str
    researcher_id: str
    kind: AnnotationKind
    page: int
    quote: str = Field("", description="The highlighted passage (highlights only)")
    text: str = Field("", description="The researcher's note")
    tags: list[str] = Field(default_factory=list, description="Lower-case tags, sorted")
    created_at: datetime


class LoanRequest(BaseModel):
    ill_id: str = Field(description="Interlibrary loan id, e.g. ILL-0005")
    paper_id: str
    researcher_id: str
    delivery: Delivery
    status: LoanStatus = "requested"
    fee: float = Field(description="EUR charged to the researcher (print delivery only)")
    needed_by: date | None = None
    note: str = ""
    requested_at: datetime


class LibraryDB(BaseModel):
    """Root model: the library's catalogue and its users' data plus the fixed clock and id counters."""

    library_name: str = "Northwind Labs Research Library"
    now: datetime
    researchers: dict[str, Researcher] = Field(default_factory=dict)
    venues: dict[str, Venue] = Field(default_factory=dict)
    papers: dict[str, Paper] = Field(default_factory=dict)
    reading_lists: dict[str, ReadingList] = Field(default_factory=dict)
    annotations: dict[str, Annotation] = Field(default_factory=dict)
    interlibrary_loans: dict[str, LoanRequest] = Field(default_factory=dict)
    print_fee: float = Field(6.5, description="EUR per printed interlibrary loan")
    ill_min_days: int = Field(3, description="A needed_by date must be at least this many days after today")
    next_list_seq: int = 1
    next_annotation_seq: int = 1
    next_ill_seq: int = 1
