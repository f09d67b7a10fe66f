"""Proof that what is published is what was validated: a digest of a package folder's files.

EnvGen takes :func:`package_digest` before validation and checks it again right before publication;
the importer takes it before each sandboxed stage and checks it after the stage and at publication.
Code that rewrote its own files while it ran is never published.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["package_digest"]


def package_digest(folder: str | Path) -> str:
    """SHA-256 (64 hex digits) of every file under ``folder`` except ``__pycache__``: each file's
    relative POSIX path and its bytes, in sorted path order.  A symlink counts as its target's path
    text, so replacing a file by a link changes the digest.  Raises ``OSError``."""
    root = Path(folder)
    h = hashlib.sha256()
    for p in sorted(root.rglob("*"), key=lambda x: x.relative_to(root).as_posix()):
        rel = p.relative_to(root)
        if "__pycache__" in rel.parts or (p.is_dir() and not p.is_symlink()):
            continue
        data = f"link:{p.readlink()}".encode() if p.is_symlink() else p.read_bytes()
        h.update(rel.as_posix().encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()
