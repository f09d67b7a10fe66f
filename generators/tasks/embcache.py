"""On-disk cache of text embeddings for the tool graph, keyed by (encoder, model, text).

Encoding parameter texts is nearly all of a graph build (bench/bench_graph.py: 1,000 tools, ~99% of the
time on CPU), and a catalog mostly rebuilds unchanged, so :func:`~.graph.build_graph` with a cache folder
encodes only the texts it has not seen under that model: a rebuild of an unchanged catalog encodes none
and does not even load the model.

Layout: ``<folder>/<encoder>-<model label>-<sha256(encoder:model)[:8]>/shard-<sha256(keys)[:16]>.npz``,
each shard a NumPy archive of ``keys`` (``sha256(encoder:model + "\\0" + text)`` in hex) and ``vectors``
(float32, the encoder's raw rows).  The encoder is part of the key: two runtimes of one model (``st``,
``numpy``) agree only to rounding, and a graph built with one must not silently reuse the other's vectors.  A build adds one shard with what it encoded (written to a temporary name, then renamed: readers
never see half a file, concurrent builds never write the same file); past :data:`MAX_SHARDS` shards they
are merged into one.  An unreadable shard is skipped (its texts are encoded again).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["EmbeddingCache", "MAX_SHARDS"]

MAX_SHARDS = 16
"""Shards per model folder before they are merged into one."""


class EmbeddingCache:
    """Embeddings of one model under one encoder in ``folder`` (see the module docstring).

    Args:
        folder: the cache folder (created on first write).
        model: the model (the graph's ``model`` attribute: a model name or folder).
        encoder: the runtime that encodes with it (the graph's ``encoder`` attribute: ``st``, ``numpy``,
            ``custom``).
    """

    def __init__(self, folder: str | Path, model: str, encoder: str = "st") -> None:
        self.encoder = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(encoder))[:20] or "encoder"
        self.model = f"{encoder}:{model}"
        label = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(model).rstrip("/").rsplit("/", 1)[-1])[:60] or "model"
        self.path = Path(folder) / f"{self.encoder}-{label}-{hashlib.sha256(self.model.encode()).hexdigest()[:8]}"
        self.rows: dict[str, np.ndarray] | None = None

    def key(self, text: str) -> str:
        """The cache key of ``text`` under this encoder and model."""
        return hashlib.sha256(f"{self.model}\0{text}".encode()).hexdigest()

    def _shards(self) -> list[Path]:
        return sorted(self.path.glob("shard-*.npz")) if self.path.is_dir() else []

    def _load(self) -> dict[str, np.ndarray]:
        if self.rows is None:
            self.rows = {}
            for shard in self._shards():
                try:
                    with np.load(shard, allow_pickle=False) as data:
                        keys, vectors = data["keys"], data["vectors"]
                except (OSError, ValueError, KeyError, zipfile.BadZipFile):
                    continue  # removed by a concurrent merge, or damaged: encoded again
                for k, v in zip(keys.tolist(), vectors, strict=True):
                    self.rows[str(k)] = v
        return self.rows

    def get(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached rows of ``texts`` (those found)."""
        rows = self._load()
        found = {}
        for t in texts:
            v = rows.get(self.key(t))
            if v is not None:
                found[t] = v
        return found

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store ``vectors`` (one row per text) as a new shard; merge the shards past :data:`MAX_SHARDS`.

        Raises:
            OSError: the folder cannot be written.
        """
        if not len(texts):
            return
        keys = [self.key(t) for t in texts]
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(keys), -1)
        rows = self._load()
        rows.update(zip(keys, vectors, strict=True))
        self.path.mkdir(parents=True, exist_ok=True)
        self._write(keys, vectors)
        shards = self._shards()
        if len(shards) > MAX_SHARDS:
            merged = self._write(list(rows), np.stack(list(rows.values())))
            for s in shards:
                if s != merged:
                    s.unlink(missing_ok=True)

    def _write(self, keys: list[str], vectors: np.ndarray) -> Path:
        name = hashlib.sha256("".join(keys).encode()).hexdigest()[:16]
        target = self.path / f"shard-{name}.npz"
        fd, tmp = tempfile.mkstemp(prefix=".shard-", suffix=".npz", dir=self.path)
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, keys=np.asarray(keys), vectors=vectors)
        os.replace(tmp, target)
        return target
