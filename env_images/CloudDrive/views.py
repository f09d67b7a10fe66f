"""CloudDrive result models: what the tools return (listings, file views, shares, trash entries,
storage reports).  Sizes are megabytes rounded to 2 decimals."""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

from .state import FileVersion, Role


class FolderEntry(BaseModel):
    folder_id: str
    name: str
    created_at: datetime


class FileEntry(BaseModel):
    file_id: str
    name: str
    mime_type: str
    size_mb: float
    version: int = Field(description="Current version number")
    modified_at: datetime


class FolderListing(BaseModel):
    folder_id: str
    name: str
    path: str = Field(description="e.g. '/My Drive/Engineering' (the owner's drive)")
    owner_id: str
    parent_id: str | None
    subfolders: list[FolderEntry] = Field(description="Active subfolders by name")
    files: list[FileEntry] = Field(description="Active files by name")


class FileSummary(BaseModel):
    file_id: str
    name: str
    path: str
    owner_id: str
    mime_type: str
    size_mb: float
    version_count: int
    status: Literal["active", "trashed"]
    modified_at: datetime


class ShareView(BaseModel):
    share_id: str
    item_id: str
    item_name: str
    kind: Literal["user", "link"]
    grantee_id: str | None
    grantee_name: str | None
    grantee_email: str | None
    url: str | None
    role: Role
    expires_on: date | None
    state: Literal["active", "expired", "revoked"]
    inherited_from: str | None = Field(None, description="Folder id when the share is on a folder above the item")


class FileView(BaseModel):
    file_id: str
    name: str
    path: str
    owner_id: str
    owner_name: str
    folder_id: str
    mime_type: str
    size_mb: float = Field(description="Size of the current version")
    current_version: int
    versions: list[FileVersion] = Field(description="Oldest first; the last is current")
    storage_mb: float = Field(description="All kept versions together (what counts against the owner's quota)")
    status: Literal["active", "trashed"]
    created_at: datetime
    modified_at: datetime
    trashed_at: datetime | None


class ItemRef(BaseModel):
    item_id: str
    kind: Literal["file", "folder"]
    name: str
    path: str
    folder_id: str | None = Field(description="The folder the item is in")


class TrashEntry(BaseModel):
    item_id: str
    kind: Literal["file", "folder"]
    name: str
    original_path: str
    trashed_at: datetime
    size_mb: float = Field(description="Storage it holds, contents and all versions included")
    items_inside: int = Field(description="Files and folders trashed along with a folder")


class TrashResult(BaseModel):
    item_id: str
    kind: Literal["file", "folder"]
    name: str
    trashed_item_ids: list[str] = Field(description="The item and everything trashed along with it")
    size_mb: float
    note: str


class RestoreResult(BaseModel):
    item: ItemRef
    restored_item_ids: list[str]
    restored_to_original_folder: bool


class DeleteResult(BaseModel):
    deleted_file_ids: list[str]
    deleted_folder_ids: list[str]
    removed_share_ids: list[str]
    freed_mb: float
    used_mb_after: float
    available_mb_after: float


class StorageReport(BaseModel):
    user_id: str
    name: str
    plan: str
    quota_mb: int
    used_mb: float = Field(description="All versions of all owned files, trash included")
    available_mb: float
    percent_used: float = Field(description="One decimal")
    in_trash_mb: float
    older_versions_mb: float = Field(description="Non-current versions of active files")
    by_category: dict[str, float] = Field(description="documents, images, video, audio, archives, other (active files, all versions)")
    largest_files: list[FileSummary] = Field(description="Up to 5 active files, largest current size first")


class SharedItem(BaseModel):
    share_id: str
    item_id: str
    kind: Literal["file", "folder"]
    name: str
    owner_id: str
    owner_name: str
    role: Role
    expires_on: date | None
    state: Literal["active", "expired"]


