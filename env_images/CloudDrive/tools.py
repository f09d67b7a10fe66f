"""CloudDrive tools: user look-up, folder listings, file search and details, uploads and file
versions, sharing with users or by link, moving and renaming, the trash and storage reports.

Sizes are megabytes rounded to 2 decimals.  Every write names the acting user (``user_id``) and is
checked against that user's access: the owner may do anything with an item; an editor share (on the
item or on a folder above it, in force today) allows uploads, new versions, version restores, new
folders and renames; viewers and commenters may only read.  Moving, trashing, restoring, deleting
and managing shares are the owner's.  Names are unique (case-insensitively) among the active items
of one folder.  Every check runs before any change: a failed call changes nothing.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Annotated, Literal

from pydantic import Field

from gym_envfactory import ToolError, tool

from .state import DriveDB, DriveFile, FileVersion, Folder, Role, Share, User
from .views import (
    DeleteResult,
    FileEntry,
    FileSummary,
    FileView,
    FolderEntry,
    FolderListing,
    ItemRef,
    RestoreResult,
    SharedItem,
    ShareView,
    StorageReport,
    TrashEntry,
    TrashResult,
)

MIME_RE = re.compile(r"^[a-z]+/[a-z0-9][a-z0-9.+-]*$")
MAX_NAME = 120
ROLE_RANK = {"viewer": 1, "commenter": 2, "editor": 3, "owner": 4}

# ----------------------------------------------------------------------------- helpers


def _mb(x: float) -> float:
    """Megabytes rounded to 2 decimals; ``+ 0.0`` turns a -0.0 (a quota filled exactly) into 0.0."""
    return round(x + 0.0, 2)


def _user(state: DriveDB, user_id: str) -> User:
    u = state.users.get(user_id)
    if u is None:
        raise ToolError(f"No user {user_id!r}; user ids look like U-003. Use find_drive_user to look someone up.",
                        code="not_found")
    return u


def _folder(state: DriveDB, folder_id: str) -> Folder:
    f = state.folders.get(folder_id)
    if f is None:
        raise ToolError(f"No folder {folder_id!r}; folder ids look like FO-0008 (file ids start with FI-).",
                        code="not_found")
    return f


def _file(state: DriveDB, file_id: str) -> DriveFile:
    f = state.files.get(file_id)
    if f is None:
        raise ToolError(f"No file {file_id!r}; file ids look like FI-0012 (folder ids start with FO-). "
                        "Use search_drive_files or list_folder to find it.", code="not_found")
    return f


def _item(state: DriveDB, item_id: str) -> Folder | DriveFile:
    it = state.files.get(item_id) or state.folders.get(item_id)
    if it is None:
        raise ToolError(f"No file or folder {item_id!r}; ids look like FI-0012 (files) or FO-0008 (folders).",
                        code="not_found")
    return it


def _item_id(it: Folder | DriveFile) -> str:
    return it.file_id if isinstance(it, DriveFile) else it.folder_id


def _kind(it: Folder | DriveFile) -> Literal["file", "folder"]:
    return "file" if isinstance(it, DriveFile) else "folder"


def _share(state: DriveDB, share_id: str) -> Share:
    s = state.shares.get(share_id)
    if s is None:
        raise ToolError(f"No share {share_id!r}; share ids look like SH-0004. Use list_item_shares to find it.",
                        code="not_found")
    return s


def _in_force(state: DriveDB, s: Share) -> bool:
    return s.status == "active" and (s.expires_on is None or s.expires_on >= state.now.date())


def _share_state(state: DriveDB, s: Share) -> Literal["active", "expired", "revoked"]:
    if s.status == "revoked":
        return "revoked"
    return "active" if _in_force(state, s) else "expired"


def _chain(state: DriveDB, folder_id: str | None) -> list[Folder]:
    """The folder and its ancestors, innermost first."""
    out: list[Folder] = []
    while folder_id is not None and folder_id in state.folders and len(out) < 64:
        f = state.folders[folder_id]
        out.append(f)
        folder_id = f.parent_id
    return out


def _path(state: DriveDB, it: Folder | DriveFile) -> str:
    folder_id = it.folder_id if isinstance(it, DriveFile) else it.parent_id
    names = [f.name for f in reversed(_chain(state, folder_id))] + [it.name]
    return "/" + "/".join(names)


def _role(state: DriveDB, user_id: str, it: Folder | DriveFile) -> str | None:
    """'owner', the best role of the user's shares in force on the item or a folder above it, or None."""
    if it.owner_id == user_id:
        return "owner"
    ids = {_item_id(it)} | {f.folder_id for f in _chain(state, it.folder_id if isinstance(it, DriveFile) else it.parent_id)}
    best: str | None = None
    for s in state.shares.values():
        if s.kind == "user" and s.grantee_id == user_id and s.item_id in ids and _in_force(state, s):
            if best is None or ROLE_RANK[s.role] > ROLE_RANK[best]:
                best = s.role
    return best


def _require(state: DriveDB, user_id: str, it: Folder | DriveFile, need: Literal["editor", "owner"], what: str) -> None:
    _user(state, user_id)
    role = _role(state, user_id, it)
    if role is None or ROLE_RANK[role] < ROLE_RANK[need]:
        owner = state.users[it.owner_id]
        who = "the owner" if need == "owner" else "the owner or an editor"
        raise ToolError(
            f"{user_id} has {'no access' if role is None else role + ' access'} to {_item_id(it)} '{it.name}'; "
            f"only {who} can {what} (owner: {owner.name}, {owner.user_id})",
            code="permission_denied",
        )


def _require_active(it: Folder | DriveFile) -> None:
    if it.status == "trashed":
        raise ToolError(f"{_item_id(it)} '{it.name}' is in the trash; restore it with restore_from_trash first",
                        code="item_trashed")


def _check_name(name: str) -> str:
    n = name.strip()
    if not n or n in (".", "..") or "/" in n or "\\" in n or len(n) > MAX_NAME:
        raise ToolError(f"Invalid name {name!r}: 1-{MAX_NAME} characters, no '/' or '\\', not '.' or '..'",
                        code="invalid_name")
    return n


def _conflict(state: DriveDB, folder_id: str, name: str, exclude: str | None = None) -> None:
    low = name.lower()
    for f in state.folders.values():
        if f.parent_id == folder_id and f.status == "active" and f.folder_id != exclude and f.name.lower() == low:
            raise ToolError(f"The folder already holds a folder named '{f.name}' ({f.folder_id}); pick another name",
                            code="name_conflict")
    for x in state.files.values():
        if x.folder_id == folder_id and x.status == "active" and x.file_id != exclude and x.name.lower() == low:
            raise ToolError(f"The folder already holds a file named '{x.name}' ({x.file_id}); pick another name, "
                            "or upload a new version of that file with upload_file_version", code="name_conflict")


def _storage(f: DriveFile) -> float:
    return _mb(sum(v.size_mb for v in f.versions))


def _used(state: DriveDB, user_id: str) -> float:
    return _mb(sum(_storage(f) for f in state.files.values() if f.owner_id == user_id))


def _check_quota(state: DriveDB, owner_id: str, add_mb: float) -> None:
    u = state.users[owner_id]
    used = _used(state, owner_id)
    if used + add_mb > u.quota_mb + 1e-9:
        raise ToolError(
            f"Not enough storage: {u.name} ({owner_id}) uses {used:.2f} of {u.quota_mb} MB, "
            f"{_mb(u.quota_mb - used):.2f} MB free, {add_mb:.2f} MB needed. Trashed files still count: "
            "delete them permanently (delete_permanently / empty_trash) to free space",
            code="quota_exceeded",
        )


def _check_size(state: DriveDB, size_mb: float) -> float:
    if size_mb > state.max_file_mb:
        raise ToolError(f"{size_mb} MB is over the {state.max_file_mb:.0f} MB single-file limit", code="file_too_large")
    size = _mb(size_mb)
    if size < 0.01:
        raise ToolError(f"size_mb {size_mb} rounds to {size:.2f} MB; sizes are kept to 0.01 MB, the smallest "
                        "upload is 0.01 MB", code="invalid_argument")
    return size


def _under(state: DriveDB, folder_id: str) -> tuple[list[Folder], list[DriveFile]]:
    """Every folder and file beneath ``folder_id`` (any status), depth first by id."""
    folders: list[Folder] = []
    files: list[DriveFile] = []
    todo = [folder_id]
    while todo:
        cur = todo.pop(0)
        for f in sorted(state.folders.values(), key=lambda x: x.folder_id):
            if f.parent_id == cur:
                folders.append(f)
                todo.append(f.folder_id)
        files.extend(x for x in sorted(state.files.values(), key=lambda x: x.file_id) if x.folder_id == cur)
    return folders, files


def _group(state: DriveDB, it: Folder | DriveFile) -> list[Folder | DriveFile]:
    """A trash entry and the records trashed along with it."""
    out: list[Folder | DriveFile] = [it]
    if isinstance(it, Folder):
        out.extend(f for f in sorted(state.folders.values(), key=lambda x: x.folder_id) if f.trashed_with == it.folder_id)
        out.extend(f for f in sorted(state.files.values(), key=lambda x: x.file_id) if f.trashed_with == it.folder_id)
    return out


def _group_size(group: list[Folder | DriveFile]) -> float:
    return _mb(sum(_storage(x) for x in group if isinstance(x, DriveFile)))


def _trash_entry(state: DriveDB, user_id: str, item_id: str) -> Folder | DriveFile:
    it = _item(state, item_id)
    _require(state, user_id, it, "owner", "restore or delete it")
    if it.status != "trashed":
        raise ToolError(f"{item_id} '{it.name}' is not in the trash (use trash_item first)", code="not_in_trash")
    if it.trashed_with is not None:
        raise ToolError(f"{item_id} was trashed together with folder {it.trashed_with}; restore or delete that folder",
                        code="invalid_state")
    return it


def _entry(f: DriveFile) -> FileEntry:
    return FileEntry(file_id=f.file_id, name=f.name, mime_type=f.mime_type, size_mb=f.size_mb,
                     version=f.versions[-1].version, modified_at=f.modified_at)


def _summary(state: DriveDB, f: DriveFile) -> FileSummary:
    return FileSummary(file_id=f.file_id, name=f.name, path=_path(state, f), owner_id=f.owner_id, mime_type=f.mime_type,
                       size_mb=f.size_mb, version_count=len(f.versions), status=f.status, modified_at=f.modified_at)


def _file_view(state: DriveDB, f: DriveFile) -> FileView:
    return FileView(file_id=f.file_id, name=f.name, path=_path(state, f), owner_id=f.owner_id,
                    owner_name=state.users[f.owner_id].name, folder_id=f.folder_id, mime_type=f.mime_type,
                    size_mb=f.size_mb, current_version=f.versions[-1].version, versions=f.versions,
                    storage_mb=_storage(f), status=f.status, created_at=f.created_at, modified_at=f.modified_at,
                    trashed_at=f.trashed_at)


def _share_view(state: DriveDB, s: Share, inherited_from: str | None = None) -> ShareView:
    it = state.files.get(s.item_id) or state.folders.get(s.item_id)
    g = state.users.get(s.grantee_id) if s.grantee_id else None
    return ShareView(share_id=s.share_id, item_id=s.item_id, item_name=it.name if it else s.item_id, kind=s.kind,
                     grantee_id=s.grantee_id, grantee_name=g.name if g else None, grantee_email=g.email if g else None,
                     url=s.url, role=s.role, expires_on=s.expires_on, state=_share_state(state, s),
                     inherited_from=inherited_from)


def _ref(state: DriveDB, it: Folder | DriveFile) -> ItemRef:
    return ItemRef(item_id=_item_id(it), kind=_kind(it), name=it.name, path=_path(state, it),
                   folder_id=it.folder_id if isinstance(it, DriveFile) else it.parent_id)


def _future_date(state: DriveDB, d: date | None) -> None:
    if d is not None and d <= state.now.date():
        raise ToolError(f"expires_on {d.isoformat()} must be after today ({state.now.date().isoformat()})",
                        code="invalid_date")


def _category(mime: str) -> str:
    top = mime.split("/", 1)[0]
    if top in ("image", "video", "audio"):
        return {"image": "images", "video": "video", "audio": "audio"}[top]
    if mime in ("application/zip", "application/x-tar", "application/gzip", "application/x-7z-compressed"):
        return "archives"
    if top == "text" or mime in ("application/pdf", "application/json") or mime.startswith("application/vnd."):
        return "documents"
    return "other"


# ----------------------------------------------------------------------------- read tools


@tool(read_only=True)
def find_drive_user(
    state: DriveDB,
    *,
    query: Annotated[str, Field(description="Part of a name or email address, case-insensitive")],
) -> list[User]:
    """Look up drive users by (part of) their name or email address.

    Returns the matching users (user_id, name, email, plan, quota_mb, root_folder_id = their
    'My Drive' folder), sorted by user_id. Use the user_id as user_id/owner_id elsewhere.
    Errors: invalid_argument (empty query), not_found (nobody matches).
    """
    q = query.strip().lower()
    if not q:
        raise ToolError("Give part of a name or an email address in query", code="invalid_argument")
    out = [u for u in state.users.values() if q in u.name.lower() or q in u.email.lower()]
    if not out:
        raise ToolError(f"No drive user matches {query!r}", code="not_found")
    return sorted(out, key=lambda u: u.user_id)


@tool(read_only=True)
def list_folder(
    state: DriveDB,
    *,
    folder_id: Annotated[str | None, Field(description="Folder id, e.g. FO-0008")] = None,
    owner_id: Annotated[str | None, Field(description="Instead of folder_id: list this user's 'My Drive' root")] = None,
) -> FolderListing:
    """List what is in a folder: its active subfolders and files (by name), with the folder's path.

    Give folder_id, or owner_id for that user's top-level 'My Drive'. Files show id, name, mime type,
    size in MB (current version), current version number and last modification.
    Errors: invalid_argument (neither or both given), not_found, item_trashed (the folder is in the
    trash; see list_trash).
    """
    if (folder_id is None) == (owner_id is None):
        raise ToolError("Give exactly one of folder_id or owner_id", code="invalid_argument")
    fo = _folder(state, folder_id) if folder_id is not None else _folder(state, _user(state, owner_id or "").root_folder_id)
    _require_active(fo)
    subs = sorted((f for f in state.folders.values() if f.parent_id == fo.folder_id and f.status == "active"),
                  key=lambda f: (f.name.lower(), f.folder_id))
    files = sorted((f for f in state.files.values() if f.folder_id == fo.folder_id and f.status == "active"),
                   key=lambda f: (f.name.lower(), f.file_id))
    return FolderListing(folder_id=fo.folder_id, name=fo.name, path=_path(state, fo), owner_id=fo.owner_id,
                         parent_id=fo.parent_id,
                         subfolders=[FolderEntry(folder_id=f.folder_id, name=f.name, created_at=f.created_at) for f in subs],
                         files=[_entry(f) for f in files])


@tool(read_only=True)
def search_drive_files(
    state: DriveDB,
    *,
    name_contains: Annotated[str, Field(description="Case-insensitive fragment of the file name")] = "",
    owner_id: Annotated[str | None, Field(description="Only files owned by this user")] = None,
    mime_prefix: Annotated[str | None, Field(description="Mime type or its start, e.g. 'video/' or 'application/pdf'")] = None,
    min_size_mb: Annotated[float | None, Field(ge=0, description="Only files whose current version is at least this big")] = None,
    include_trashed: Annotated[bool, Field(description="Also return files in the trash")] = False,
    limit: Annotated[int, Field(ge=1, le=100)] = 25,
) -> list[FileSummary]:
    """Search files across the drive by name fragment, owner, mime type and size.

    Returns file summaries (file_id, name, full path, owner, mime type, current size in MB, number of
    versions, status, last modification) sorted by owner then path; an empty list means no match.
    Errors: invalid_argument (no name_contains, owner_id or mime_prefix given), not_found (unknown owner).
    """
    frag = name_contains.strip().lower()
    if not frag and owner_id is None and not mime_prefix:
        raise ToolError("Give at least one of name_contains, owner_id or mime_prefix", code="invalid_argument")
    if owner_id is not None:
        _user(state, owner_id)
    out = [
        _summary(state, f) for f in state.files.values()
        if (include_trashed or f.status == "active") and (not frag or frag in f.name.lower())
        and (owner_id is None or f.owner_id == owner_id)
        and (not mime_prefix or f.mime_type.startswith(mime_prefix.strip().lower()))
        and (min_size_mb is None or f.size_mb >= min_size_mb)
    ]
    out.sort(key=lambda s: (s.owner_id, s.path.lower(), s.file_id))
    return out[:limit]


@tool(read_only=True)
def get_file_details(
    state: DriveDB,
    *,
    file_id: Annotated[str, Field(description="File id, e.g. FI-0012")],
) -> FileView:
    """Get one file: name, path, owner, mime type, current size and version, the full version history
    (version number, size, upload time, uploader, note), total storage of all versions and status.
    Errors: not_found.
    """
    return _file_view(state, _file(state, file_id))


@tool(read_only=True)
def list_item_shares(
    state: DriveDB,
    *,
    item_id: Annotated[str, Field(description="File (FI-...) or folder (FO-...) id")],
    include_revoked: bool = False,
) -> list[ShareView]:
    """List who can reach a file or folder through shares: shares on the item itself, then shares
    on the folders above it (``inherited_from`` = that folder). Each share shows share_id, kind
    (user or link), grantee name and email or the link url, role, expiry and state
    (active, expired, revoked). Revoked shares only with include_revoked. An empty list means private.
    Errors: not_found.
    """
    it = _item(state, item_id)
    out: list[ShareView] = []
    chain = [(_item_id(it), None)] + [
        (f.folder_id, f.folder_id) for f in _chain(state, it.folder_id if isinstance(it, DriveFile) else it.parent_id)
    ]
    for target, via in chain:
        for s in sorted(state.shares.values(), key=lambda x: x.share_id):
            if s.item_id == target and (include_revoked or s.status != "revoked"):
                out.append(_share_view(state, s, via))
    return out


@tool(read_only=True)
def list_trash(
    state: DriveDB,
    *,
    user_id: Annotated[str, Field(description="Whose trash, e.g. U-005")],
) -> list[TrashEntry]:
    """List a user's trash: each trashed file or folder (a folder's contents are counted inside it)
    with its original path, when it was trashed and the storage it still holds. Oldest first; an
    empty list means the trash is empty. Errors: not_found.
    """
    _user(state, user_id)
    items: list[Folder | DriveFile] = [*state.folders.values(), *state.files.values()]
    entries = [x for x in items if x.owner_id == user_id and x.status == "trashed" and x.trashed_with is None]
    out = []
    for it in entries:
        group = _group(state, it)
        out.append(TrashEntry(item_id=_item_id(it), kind=_kind(it), name=it.name, original_path=_path(state, it),
                              trashed_at=it.trashed_at or state.now, size_mb=_group_size(group),
                              items_inside=len(group) - 1))
    return sorted(out, key=lambda e: (e.trashed_at, e.item_id))


@tool(read_only=True)
def get_storage_report(
    state: DriveDB,
    *,
    user_id: Annotated[str, Field(description="User id, e.g. U-005")],
) -> StorageReport:
    """Storage usage of one user in MB: quota, used (every kept version of every owned file, trash
    included), available, percent used, how much sits in the trash and in older versions, usage by
    category (documents, images, video, audio, archives, other) and the five largest active files (by current size).
    Errors: not_found.
    """
    u = _user(state, user_id)
    owned = [f for f in state.files.values() if f.owner_id == user_id]
    used = _used(state, user_id)
    cats: dict[str, float] = {}
    for f in owned:
        if f.status == "active":
            c = _category(f.mime_type)
            cats[c] = _mb(cats.get(c, 0.0) + _storage(f))
    active = sorted((f for f in owned if f.status == "active"), key=lambda f: (-f.size_mb, f.file_id))
    return StorageReport(
        user_id=u.user_id, name=u.name, plan=u.plan, quota_mb=u.quota_mb, used_mb=used,
        available_mb=_mb(u.quota_mb - used), percent_used=round(100.0 * used / u.quota_mb, 1),
        in_trash_mb=_mb(sum(_storage(f) for f in owned if f.status == "trashed")),
        older_versions_mb=_mb(sum(_storage(f) - f.size_mb for f in owned if f.status == "active")),
        by_category=dict(sorted(cats.items())), largest_files=[_summary(state, f) for f in active[:5]],
    )


@tool(read_only=True)
def list_shared_with_me(
    state: DriveDB,
    *,
    user_id: Annotated[str, Field(description="The user the items are shared with, e.g. U-001")],
    include_expired: bool = False,
) -> list[SharedItem]:
    """List the active files and folders other users have shared with this user, with the owner,
    role and expiry of each share (expired shares only with include_expired), by share id.
    Errors: not_found.
    """
    _user(state, user_id)
    out = []
    for s in sorted(state.shares.values(), key=lambda x: x.share_id):
        if s.kind != "user" or s.grantee_id != user_id or s.status == "revoked":
            continue
        st = _share_state(state, s)
        it = state.files.get(s.item_id) or state.folders.get(s.item_id)
        if it is None or it.status != "active" or (st == "expired" and not include_expired):
            continue
        out.append(SharedItem(share_id=s.share_id, item_id=s.item_id, kind=_kind(it), name=it.name,
                              owner_id=it.owner_id, owner_name=state.users[it.owner_id].name, role=s.role,
                              expires_on=s.expires_on, state="active" if st == "active" else "expired"))
    return out


# ----------------------------------------------------------------------------- write tools: content


UserId = Annotated[str, Field(description="The acting user, e.g. U-001")]


@tool()
def create_drive_folder(
    state: DriveDB,
    *,
    user_id: UserId,
    parent_folder_id: Annotated[str, Field(description="Where to create it, e.g. FO-0008 (a 'My Drive' root works)")],
    name: Annotated[str, Field(description="Folder name, unique in the parent")],
) -> ItemRef:
    """Create a folder inside another one (owner or editor of the parent). The new folder belongs to
    the parent's owner. Returns the new folder's id, name and path.
    Errors: not_found, permission_denied, item_trashed (parent in the trash), invalid_name,
    name_conflict (an active file or folder of that name is already there).
    """
    parent = _folder(state, parent_folder_id)
    _require(state, user_id, parent, "editor", "add to this folder")
    _require_active(parent)
    n = _check_name(name)
    _conflict(state, parent.folder_id, n)
    fid = f"FO-{state.next_folder_seq:04d}"
    state.next_folder_seq += 1
    state.folders[fid] = Folder(folder_id=fid, name=n, owner_id=parent.owner_id, parent_id=parent.folder_id,
                                created_at=state.now)
    return _ref(state, state.folders[fid])


@tool()
def upload_file(
    state: DriveDB,
    *,
    user_id: UserId,
    folder_id: Annotated[str, Field(description="Destination folder, e.g. FO-0019")],
    name: Annotated[str, Field(description="File name with extension, unique in the folder")],
    mime_type: Annotated[str, Field(description="e.g. application/pdf, image/jpeg, video/mp4, text/csv")],
    size_mb: Annotated[float, Field(gt=0, description="Size in megabytes")],
) -> FileView:
    """Upload a new file (version 1) into a folder (owner or editor of the folder). The file belongs
    to the folder's owner and counts against that owner's quota. Returns the new file with its id.
    Errors: not_found, permission_denied, item_trashed, invalid_name, invalid_argument (mime type not
    like 'type/subtype', or a size under 0.01 MB once rounded to 0.01 MB), name_conflict (use upload_file_version for a new version of an existing file),
    file_too_large, quota_exceeded.
    """
    fo = _folder(state, folder_id)
    _require(state, user_id, fo, "editor", "upload into this folder")
    _require_active(fo)
    n = _check_name(name)
    mime = mime_type.strip().lower()
    if not MIME_RE.match(mime):
        raise ToolError(f"mime_type {mime_type!r} is not like 'type/subtype' (e.g. application/pdf)",
                        code="invalid_argument")
    _conflict(state, fo.folder_id, n)
    size = _check_size(state, size_mb)
    _check_quota(state, fo.owner_id, size)
    fid = f"FI-{state.next_file_seq:04d}"
    state.next_file_seq += 1
    state.files[fid] = DriveFile(
        file_id=fid, name=n, owner_id=fo.owner_id, folder_id=fo.folder_id, mime_type=mime, size_mb=size,
        versions=[FileVersion(version=1, size_mb=size, uploaded_at=state.now, uploaded_by=user_id)],
        created_at=state.now, modified_at=state.now,
    )
    return _file_view(state, state.files[fid])


@tool()
def upload_file_version(
    state: DriveDB,
    *,
    user_id: UserId,
    file_id: Annotated[str, Field(description="File id, e.g. FI-0001")],
    size_mb: Annotated[float, Field(gt=0, description="Size of the new version in megabytes")],
    note: Annotated[str, Field(description="Optional change note kept with the version")] = "",
) -> FileView:
    """Upload a new version of an existing file (owner or editor); it becomes the current version and
    older versions are kept (they still count against the owner's quota). Returns the file.
    Errors: not_found, permission_denied, item_trashed, invalid_argument (a size under 0.01 MB once
    rounded to 0.01 MB), file_too_large, quota_exceeded.
    """
    f = _file(state, file_id)
    _require(state, user_id, f, "editor", "upload a new version")
    _require_active(f)
    size = _check_size(state, size_mb)
    _check_quota(state, f.owner_id, size)
    f.versions.append(FileVersion(version=f.versions[-1].version + 1, size_mb=size, uploaded_at=state.now,
                                  uploaded_by=user_id, note=note))
    f.size_mb = size
    f.modified_at = state.now
    return _file_view(state, f)


@tool()
def restore_file_version(
    state: DriveDB,
    *,
    user_id: UserId,
    file_id: Annotated[str, Field(description="File id, e.g. FI-0001")],
    version: Annotated[int, Field(ge=1, description="The older version number to bring back")],
) -> FileView:
    """Make an older version current again (owner or editor): its content is copied into a new
    version at the end of the history (nothing is deleted), so it counts once more against the quota.
    Returns the file. Errors: not_found (file or version), permission_denied, item_trashed,
    already_current (that version is the current one), quota_exceeded.
    """
    f = _file(state, file_id)
    _require(state, user_id, f, "editor", "restore a version")
    _require_active(f)
    old = next((v for v in f.versions if v.version == version), None)
    if old is None:
        raise ToolError(f"{file_id} has versions {', '.join(str(v.version) for v in f.versions)}; no version {version}",
                        code="not_found")
    if old is f.versions[-1]:
        raise ToolError(f"Version {version} is already the current version of {file_id}", code="already_current")
    _check_quota(state, f.owner_id, old.size_mb)
    f.versions.append(FileVersion(version=f.versions[-1].version + 1, size_mb=old.size_mb, uploaded_at=state.now,
                                  uploaded_by=user_id, note=f"Restored from version {version}"))
    f.size_mb = old.size_mb
    f.modified_at = state.now
    return _file_view(state, f)


@tool()
def rename_item(
    state: DriveDB,
    *,
    user_id: UserId,
    item_id: Annotated[str, Field(description="File (FI-...) or folder (FO-...) id")],
    new_name: str,
) -> ItemRef:
    """Rename a file or folder in place (owner or editor). Returns the item with its new path.
    Errors: not_found, permission_denied, item_trashed, invalid_name, invalid_argument (a 'My Drive'
    root), no_change (same name), name_conflict.
    """
    it = _item(state, item_id)
    _require(state, user_id, it, "editor", "rename it")
    _require_active(it)
    if isinstance(it, Folder) and it.parent_id is None:
        raise ToolError("A user's 'My Drive' root cannot be renamed", code="invalid_argument")
    n = _check_name(new_name)
    if n == it.name:
        raise ToolError(f"{item_id} is already named '{n}'", code="no_change")
    _conflict(state, it.folder_id if isinstance(it, DriveFile) else it.parent_id or "", n, exclude=item_id)
    it.name = n
    if isinstance(it, DriveFile):
        it.modified_at = state.now
    return _ref(state, it)


@tool()
def move_item(
    state: DriveDB,
    *,
    user_id: UserId,
    item_id: Annotated[str, Field(description="File (FI-...) or folder (FO-...) id")],
    destination_folder_id: Annotated[str, Field(description="Folder to move it into (in the same owner's drive)")],
    new_name: Annotated[str | None, Field(description="Optional new name, e.g. to avoid a name conflict")] = None,
) -> ItemRef:
    """Move a file or folder into another folder of the same owner's drive, optionally renaming it
    (owner only; a folder moves with its contents). Returns the item with its new path.
    Errors: not_found, permission_denied, item_trashed (item or destination), invalid_move (a 'My Drive'
    root, another owner's folder, a folder into itself or its own subfolder), invalid_name,
    no_change (already there under that name), name_conflict.
    """
    it = _item(state, item_id)
    _require(state, user_id, it, "owner", "move it")
    _require_active(it)
    dest = _folder(state, destination_folder_id)
    _require_active(dest)
    if isinstance(it, Folder) and it.parent_id is None:
        raise ToolError("A user's 'My Drive' root cannot be moved", code="invalid_move")
    if dest.owner_id != it.owner_id:
        raise ToolError(f"{destination_folder_id} '{dest.name}' is in {state.users[dest.owner_id].name}'s drive; "
                        "items can only move within their owner's drive", code="invalid_move")
    if isinstance(it, Folder) and any(f.folder_id == it.folder_id for f in _chain(state, dest.folder_id)):
        raise ToolError(f"Cannot move folder {item_id} into itself or one of its subfolders", code="invalid_move")
    n = _check_name(new_name) if new_name is not None else it.name
    current = it.folder_id if isinstance(it, DriveFile) else it.parent_id
    if current == dest.folder_id and n == it.name:
        raise ToolError(f"{item_id} '{it.name}' is already in {destination_folder_id}", code="no_change")
    _conflict(state, dest.folder_id, n, exclude=item_id)
    it.name = n
    if isinstance(it, DriveFile):
        it.folder_id = dest.folder_id
        it.modified_at = state.now
    else:
        it.parent_id = dest.folder_id
    return _ref(state, it)


# ----------------------------------------------------------------------------- write tools: sharing


@tool()
def share_item(
    state: DriveDB,
    *,
    user_id: UserId,
    item_id: Annotated[str, Field(description="File (FI-...) or folder (FO-...) id; a folder share covers its contents")],
    grantee_email: Annotated[str, Field(description="Email address of the drive user to share with")],
    role: Role,
    expires_on: Annotated[date | None, Field(description="Last day of access (after today); omit for no expiry")] = None,
) -> ShareView:
    """Share a file or folder with another drive user as viewer, commenter or editor (owner only),
    optionally until a date. Returns the new share with its share_id.
    Errors: not_found (item, or no user with that email), permission_denied, item_trashed,
    invalid_argument (sharing with the owner), invalid_date (expiry not after today),
    already_shared (the user already has a share on this item: change it with update_share).
    """
    it = _item(state, item_id)
    _require(state, user_id, it, "owner", "share it")
    _require_active(it)
    email = grantee_email.strip().lower()
    g = next((u for u in state.users.values() if u.email.lower() == email), None)
    if g is None:
        raise ToolError(f"No drive user with email {grantee_email!r}; use find_drive_user to check the address",
                        code="not_found")
    if g.user_id == it.owner_id:
        raise ToolError(f"{g.name} owns {item_id}; no share is needed", code="invalid_argument")
    _future_date(state, expires_on)
    for s in state.shares.values():
        if s.item_id == item_id and s.kind == "user" and s.grantee_id == g.user_id and s.status == "active":
            raise ToolError(f"{g.name} already has share {s.share_id} ({s.role}, {_share_state(state, s)}) on {item_id}; "
                            "change it with update_share", code="already_shared")
    sid = f"SH-{state.next_share_seq:04d}"
    state.next_share_seq += 1
    state.shares[sid] = Share(share_id=sid, item_id=item_id, kind="user", grantee_id=g.user_id, role=role,
                              expires_on=expires_on, created_by=user_id, created_at=state.now)
    return _share_view(state, state.shares[sid])


@tool()
def create_share_link(
    state: DriveDB,
    *,
    user_id: UserId,
    item_id: Annotated[str, Field(description="File (FI-...) or folder (FO-...) id")],
    role: Annotated[Literal["viewer", "commenter"], Field(description="Links never grant edit access")] = "viewer",
    expires_on: Annotated[date | None, Field(description="Last day the link works (after today); omit for no expiry")] = None,
) -> ShareView:
    """Create a link anyone can open (owner only), as viewer or commenter, optionally until a date.
    One link per item. Returns the share with its share_id and url.
    Errors: not_found, permission_denied, item_trashed, invalid_date, already_shared (the item already
    has a link, possibly expired: extend it with update_share or revoke it first).
    """
    it = _item(state, item_id)
    _require(state, user_id, it, "owner", "create a link")
    _require_active(it)
    _future_date(state, expires_on)
    for s in state.shares.values():
        if s.item_id == item_id and s.kind == "link" and s.status == "active":
            raise ToolError(f"{item_id} already has link share {s.share_id} ({s.role}, {_share_state(state, s)}): {s.url}",
                            code="already_shared")
    sid = f"SH-{state.next_share_seq:04d}"
    state.next_share_seq += 1
    state.shares[sid] = Share(share_id=sid, item_id=item_id, kind="link", url=f"{state.link_base}{sid.lower()}",
                              role=role, expires_on=expires_on, created_by=user_id, created_at=state.now)
    return _share_view(state, state.shares[sid])


@tool(idempotent=True)
def update_share(
    state: DriveDB,
    *,
    user_id: UserId,
    share_id: Annotated[str, Field(description="Share id, e.g. SH-0004")],
    role: Annotated[Role | None, Field(description="New role (links: viewer or commenter)")] = None,
    expires_on: Annotated[date | None, Field(description="New last day of access (after today)")] = None,
    remove_expiry: Annotated[bool, Field(description="Make the share permanent")] = False,
) -> ShareView:
    """Change a share's role and/or expiry (item owner only); an expired share given a new date is in
    force again. Returns the updated share.
    Errors: not_found, permission_denied, invalid_state (share revoked: create a new one),
    item_trashed (the shared item is in the trash: restore it first; revoke_share still works),
    invalid_argument (edit role on a link, or both expires_on and remove_expiry), invalid_date,
    no_change (nothing would change).
    """
    s = _share(state, share_id)
    it = _item(state, s.item_id)
    _require(state, user_id, it, "owner", "change its shares")
    if s.status == "revoked":
        raise ToolError(f"Share {share_id} was revoked; create a new share instead", code="invalid_state")
    _require_active(it)
    if role == "editor" and s.kind == "link":
        raise ToolError("Links can only be viewer or commenter; share with the person as editor instead",
                        code="invalid_argument")
    if expires_on is not None and remove_expiry:
        raise ToolError("Give either expires_on or remove_expiry, not both", code="invalid_argument")
    _future_date(state, expires_on)
    new_role = role or s.role
    new_exp = None if remove_expiry else (expires_on if expires_on is not None else s.expires_on)
    if new_role == s.role and new_exp == s.expires_on:
        raise ToolError(f"Share {share_id} is already {s.role} with expiry {s.expires_on or 'none'}", code="no_change")
    s.role = new_role
    s.expires_on = new_exp
    return _share_view(state, s)


@tool(destructive=True)
def revoke_share(
    state: DriveDB,
    *,
    user_id: UserId,
    share_id: Annotated[str, Field(description="Share id, e.g. SH-0004")],
) -> ShareView:
    """Revoke a share (item owner only): the person or link loses access at once; the record stays
    with state 'revoked'. Errors: not_found, permission_denied, already_revoked.
    """
    s = _share(state, share_id)
    _require(state, user_id, _item(state, s.item_id), "owner", "change its shares")
    if s.status == "revoked":
        raise ToolError(f"Share {share_id} is already revoked", code="already_revoked")
    s.status = "revoked"
    s.revoked_at = state.now
    return _share_view(state, s)


# ----------------------------------------------------------------------------- write tools: trash


@tool(destructive=True)
def trash_item(
    state: DriveDB,
    *,
    user_id: UserId,
    item_id: Annotated[str, Field(description="File (FI-...) or folder (FO-...) id")],
) -> TrashResult:
    """Move a file or folder to its owner's trash (owner only); a folder takes its active contents
    along. Trashed items keep using storage until deleted permanently. Returns what was trashed.
    Errors: not_found, permission_denied, invalid_argument (a 'My Drive' root), already_trashed.
    """
    it = _item(state, item_id)
    _require(state, user_id, it, "owner", "trash it")
    if isinstance(it, Folder) and it.parent_id is None:
        raise ToolError("A user's 'My Drive' root cannot be trashed", code="invalid_argument")
    if it.status == "trashed":
        raise ToolError(f"{item_id} '{it.name}' is already in the trash", code="already_trashed")
    it.status = "trashed"
    it.trashed_at = state.now
    ids = [item_id]
    if isinstance(it, Folder):
        folders, files = _under(state, it.folder_id)
        beneath: list[Folder | DriveFile] = [*folders, *files]
        for x in beneath:
            if x.status == "active":
                x.status = "trashed"
                x.trashed_at = state.now
                x.trashed_with = item_id
                ids.append(_item_id(x))
    return TrashResult(item_id=item_id, kind=_kind(it), name=it.name, trashed_item_ids=ids,
                       size_mb=_group_size(_group(state, it)),
                       note="Still counts against storage until deleted permanently or the trash is emptied")


@tool()
def restore_from_trash(
    state: DriveDB,
    *,
    user_id: UserId,
    item_id: Annotated[str, Field(description="A trash entry's item_id (see list_trash)")],
) -> RestoreResult:
    """Restore a trashed file or folder (owner only) with everything trashed along with it, into its
    original folder, or into the owner's 'My Drive' when that folder is itself in the trash.
    Returns the restored item, its path and all restored ids.
    Errors: not_found, permission_denied, not_in_trash, invalid_state (it was trashed as part of a
    folder: restore the folder), name_conflict (an active item of that name is in the destination:
    rename that one first).
    """
    it = _trash_entry(state, user_id, item_id)
    parent_id = it.folder_id if isinstance(it, DriveFile) else it.parent_id
    parent = state.folders.get(parent_id or "")
    original = parent is not None and parent.status == "active"
    dest = parent_id if original else state.users[it.owner_id].root_folder_id
    _conflict(state, dest or "", it.name, exclude=item_id)
    group = _group(state, it)
    for x in group:
        x.status = "active"
        x.trashed_at = None
        x.trashed_with = None
    if isinstance(it, DriveFile):
        it.folder_id = dest or it.folder_id
    else:
        it.parent_id = dest
    return RestoreResult(item=_ref(state, it), restored_item_ids=[_item_id(x) for x in group],
                         restored_to_original_folder=original)


def _purge(state: DriveDB, entries: list[Folder | DriveFile], owner_id: str) -> DeleteResult:
    files: list[str] = []
    folders: list[str] = []
    freed = 0.0
    for e in entries:
        for x in _group(state, e):
            if isinstance(x, DriveFile):
                files.append(x.file_id)
                freed += _storage(x)
            else:
                folders.append(x.folder_id)
    gone = set(files) | set(folders)
    shares = sorted(s.share_id for s in state.shares.values() if s.item_id in gone)
    for sid in shares:
        del state.shares[sid]
    for fid in files:
        del state.files[fid]
    for fid in folders:
        del state.folders[fid]
    used = _used(state, owner_id)
    return DeleteResult(deleted_file_ids=sorted(files), deleted_folder_ids=sorted(folders), removed_share_ids=shares,
                        freed_mb=_mb(freed), used_mb_after=used,
                        available_mb_after=_mb(state.users[owner_id].quota_mb - used))


@tool(destructive=True)
def delete_permanently(
    state: DriveDB,
    *,
    user_id: UserId,
    item_id: Annotated[str, Field(description="A trash entry's item_id (see list_trash)")],
) -> DeleteResult:
    """Delete one trashed file or folder for good (owner only), with everything trashed along with it
    and all its versions and shares. This frees its storage. Cannot be undone.
    Returns the deleted ids, the MB freed and the owner's usage afterwards.
    Errors: not_found, permission_denied, not_in_trash (trash it first), invalid_state (it was
    trashed as part of a folder: delete the folder).
    """
    it = _trash_entry(state, user_id, item_id)
    return _purge(state, [it], it.owner_id)


@tool(destructive=True)
def empty_trash(
    state: DriveDB,
    *,
    user_id: Annotated[str, Field(description="Whose trash to empty (that user acts), e.g. U-005")],
) -> DeleteResult:
    """Permanently delete everything in a user's trash (the user acts for themselves), freeing the
    storage it held. Cannot be undone. Returns the deleted ids, the MB freed and usage afterwards.
    Errors: not_found, trash_empty.
    """
    _user(state, user_id)
    items: list[Folder | DriveFile] = [*sorted(state.folders.values(), key=lambda f: f.folder_id),
                                       *sorted(state.files.values(), key=lambda f: f.file_id)]
    entries = [x for x in items if x.owner_id == user_id and x.status == "trashed" and x.trashed_with is None]
    if not entries:
        raise ToolError(f"The trash of {user_id} is already empty", code="trash_empty")
    return _purge(state, entries, user_id)
