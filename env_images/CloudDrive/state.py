"""CloudDrive database: users with storage quotas, folders, files with their version history,
shares (with a user or by link) and the trash.

Storage model: sizes are megabytes (``float``, rounded to 2 decimals).  A user's storage used is the
sum of the sizes of *every kept version* of every file they own, trashed files included: trashing
frees nothing, only a permanent delete (or emptying the trash) gives the space back.  A file belongs
to the owner of the drive it lives in, so an editor uploading into someone else's shared folder uses
the folder owner's quota.

Trash model: ``status = "trashed"`` with ``trashed_at``.  Trashing a folder also trashes everything
still active beneath it; those records carry ``trashed_with = <the folder id>`` and come back (or go
away for good) together with it.  Only records with ``trashed_with = None`` are trash entries.

Shares: ``kind = "user"`` gives one user (``grantee_id``) a role on a file or folder (a folder share
reaches everything beneath it); ``kind = "link"`` makes an item reachable by anyone holding ``url``.
A share is in force while ``status == "active"`` and ``expires_on`` (inclusive) is not before today.

The clock ``now`` is fixed and every id comes from a counter in the state (``FO-0021``, ``FI-0029``,
``SH-0009``).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

Role = Literal["viewer", "commenter", "editor"]
ItemStatus = Literal["active", "trashed"]


class User(BaseModel):
    user_id: str = Field(description="User id, e.g. U-003")
    name: str
    email: str
    plan: Literal["free", "standard", "premium"]
    quota_mb: int = Field(description="Storage quota in megabytes")
    root_folder_id: str = Field(description="The user's 'My Drive' folder")


class Folder(BaseModel):
    folder_id: str = Field(description="Folder id, e.g. FO-0008")
    name: str
    owner_id: str
    parent_id: str | None = Field(description="Parent folder; None only for a user's 'My Drive' root")
    status: ItemStatus = "active"
    created_at: datetime
    trashed_at: datetime | None = None
    trashed_with: str | None = Field(default=None, description="The folder whose trashing took this one along")


class FileVersion(BaseModel):
    version: int = Field(description="1, 2, 3, ... in upload order; the last one is the current content")
    size_mb: float
    uploaded_at: datetime
    uploaded_by: str
    note: str = ""


class DriveFile(BaseModel):
    file_id: str = Field(description="File id, e.g. FI-0012")
    name: str
    owner_id: str
    folder_id: str
    mime_type: str
    size_mb: float = Field(description="Size of the current (last) version")
    versions: list[FileVersion]
    status: ItemStatus = "active"
    created_at: datetime
    modified_at: datetime
    trashed_at: datetime | None = None
    trashed_with: str | None = Field(default=None, description="The folder whose trashing took this file along")


class Share(BaseModel):
    share_id: str = Field(description="Share id, e.g. SH-0004")
    item_id: str = Field(description="A file (FI-...) or folder (FO-...) id")
    kind: Literal["user", "link"]
    grantee_id: str | None = Field(default=None, description="The user given access (kind 'user' only)")
    url: str | None = Field(default=None, description="The share link (kind 'link' only)")
    role: Role
    expires_on: date | None = Field(default=None, description="Last day the share is in force; None = no expiry")
    status: Literal["active", "revoked"] = "active"
    created_by: str
    created_at: datetime
    revoked_at: datetime | None = None


class DriveDB(BaseModel):
    service: str = "Nimbus Drive"
    now: datetime
    link_base: str = "https://nimbus.example/s/"
    max_file_mb: float = Field(default=10240.0, description="Largest single upload, in megabytes")
    users: dict[str, User] = Field(default_factory=dict)
    folders: dict[str, Folder] = Field(default_factory=dict)
    files: dict[str, DriveFile] = Field(default_factory=dict)
    shares: dict[str, Share] = Field(default_factory=dict)
    next_folder_seq: int = 1
    next_file_seq: int = 1
    next_share_seq: int = 1
