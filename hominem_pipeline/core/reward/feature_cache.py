"""What a frozen network computes for a text, kept on disk by content, so a text it has read before is
not read again: the reward model's pooled backbone state of each exchange and the guard columns
(`reward_model.guards`) the student measures for it.

The reward model is trained every day on the window's teacher labels and on the same shipped people's
pairs (config/human/), and with a frozen backbone and frozen guards every one of those texts gives the
same features each day; they dominate the stage's time. A cache is one folder per network and setting
(`namespace`: the network's folder digest and whatever else decides the features), holding shards of
(key, row) written whole (a temp file renamed), so a crash leaves whole shards only; a key is the
digest of the exact input (token ids, or prompt and reply). Any entry can be recomputed: deleting the
folder costs time, nothing else. Rows beyond `max_rows` drop the oldest shards.

A project can also ship rows (`SHIPPED_FEATURES`, read-only, `<namespace digest>-<file>.npz`): the guard
columns and pooled states of the texts it ships (people's pairs, contrast fixtures) under the shipped
networks, so that a fresh clone's first run does not compute them (`hominem data ship-features`). A namespace whose
network or settings differ has another digest and finds none of them.

A cached row equals the computed one up to the last bits: the padding of the batch a text was read in
changes float rounding, not the figures.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hominem_pipeline.core.common.files import atomic_path

log = logging.getLogger(__name__)

FEATURE_CACHE = "cache/reward_features"  # under project.data_dir
SHIPPED_FEATURES = "config/human/features"  # under the project root: rows shipped with the project
MAX_ROWS = 100_000  # per namespace (a 1,155-wide row is 4.6 kB: 460 MB at most)
COMPACT_AT = 24  # shards in a namespace beyond which they are merged into one


def text_key(*parts: str) -> str:
    """The key of a text input (prompt and reply, ...)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:32]


def ids_key(ids: Sequence[int]) -> str:
    """The key of a tokenised input."""
    return hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()[:32]


class FeatureCache:
    """Rows of `width` float32 features by key, in `<folder>/<namespace digest>/`."""

    def __init__(
        self, folder: Path, namespace: Any, width: int, max_rows: int = MAX_ROWS, shipped: Path | None = None
    ):
        """`shipped`: a folder of rows shipped with the project (`SHIPPED_FEATURES`), read beside `folder`
        and never written."""
        from hominem_pipeline.core.pipeline.artifacts import fingerprint

        self.folder = Path(folder) / fingerprint(namespace, 16)
        self.width, self.max_rows = width, max_rows
        self._rows: dict[str, np.ndarray] = {}
        self._shards: list[Path] = []
        self.hits = self.misses = 0
        self._shipped: dict[str, np.ndarray] = {}
        for path in self.shipped_files(shipped) if shipped is not None else ():
            self._shipped.update(self._read_shipped(path))
        for shard in sorted(self.folder.glob("shard-*.npz")):  # names start with the time: oldest first
            try:
                with np.load(shard, allow_pickle=False) as saved:
                    keys, rows = saved["keys"], saved["rows"]
            except (OSError, ValueError, KeyError) as exc:  # written whole, so only a foreign file gets here
                log.warning("feature cache shard %s is unreadable (%s); it is ignored", shard, exc)
                continue
            if rows.ndim != 2 or rows.shape[1] != width or len(keys) != len(rows):
                log.warning("feature cache shard %s holds rows of another width; it is ignored", shard)
                continue
            self._rows.update(zip(keys.tolist(), rows))
            self._shards.append(shard)

    def shipped_files(self, folder: Path) -> list[Path]:
        """This namespace's files in a folder of shipped rows: `<namespace digest>.npz`, or one per part,
        `<digest>-<part>.npz`."""
        folder = Path(folder)
        return sorted([*folder.glob(f"{self.folder.name}.npz"), *folder.glob(f"{self.folder.name}-*.npz")])

    def _read_shipped(self, path: Path) -> dict[str, np.ndarray]:
        try:
            with np.load(path, allow_pickle=False) as saved:
                keys, rows = saved["keys"], saved["rows"]
        except (OSError, ValueError, KeyError) as exc:
            log.warning("shipped features %s are unreadable (%s); they are measured instead", path, exc)
            return {}
        if rows.ndim != 2 or rows.shape[1] != self.width or len(keys) != len(rows):
            log.warning(
                "shipped features %s hold rows of width %s, not %d; they are measured instead",
                path,
                rows.shape[1:],
                self.width,
            )
            return {}
        return dict(zip(keys.tolist(), rows))

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def shipped(self) -> int:
        """How many rows the project shipped for this namespace."""
        return len(self._shipped)

    def get(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The rows held for `keys`, written here or shipped (those held by neither are missing from the answer)."""
        found = {
            k: self._rows[k] if k in self._rows else self._shipped[k]
            for k in keys
            if k in self._rows or k in self._shipped
        }
        self.hits += len(found)
        self.misses += len(keys) - len(found)
        return found

    def ship(self, keys: Sequence[str], folder: Path, part: str | None = None) -> Path:
        """Write the rows of `keys` (every one held) as this namespace's shipped rows in `folder` (`part`:
        as one of several files, e.g. one per pairs file, so that changing one rewrites that one)."""
        found = self.get(list(dict.fromkeys(keys)))
        missing = [k for k in keys if k not in found]
        if missing:
            raise KeyError(
                f"{len(missing)} of {len(keys)} keys have no row in {self.folder} (first {missing[0]}); "
                "compute them before shipping"
            )
        Path(folder).mkdir(parents=True, exist_ok=True)
        order = sorted(found)
        return _write_rows(
            Path(folder) / f"{self.folder.name}{'' if part is None else '-' + part}.npz",
            order,
            np.stack([found[k] for k in order]),
            compressed=True,
        )

    def add(self, keys: Sequence[str], rows: np.ndarray) -> None:
        """Keep `rows` (n, width) under `keys`; the new ones are written as one shard."""
        rows = np.asarray(rows, dtype=np.float32).reshape(len(keys), self.width)
        new = {k: r for k, r in zip(keys, rows) if k not in self._rows and k not in self._shipped}
        if not new:
            return
        self._rows.update(new)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._shards.append(self._write(list(new), np.stack(list(new.values()))))
            if len(self._rows) > self.max_rows:
                self._evict()
            elif len(self._shards) > COMPACT_AT:
                self._compact()
        except OSError as exc:  # a cache: the rows serve this process, and a later one computes them again
            log.warning(
                "could not write the feature cache %s (%s); %d rows kept in memory only", self.folder, exc, len(new)
            )

    def _write(self, keys: list[str], rows: np.ndarray) -> Path:
        return _write_rows(self.folder / f"shard-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.npz", keys, rows)

    def _evict(self) -> None:
        """Drop the oldest shards until the rows fit in `max_rows` (the newest shard always stays)."""
        while len(self._rows) > self.max_rows and len(self._shards) > 1:
            oldest = self._shards.pop(0)
            with np.load(oldest, allow_pickle=False) as saved:
                gone = saved["keys"].tolist()
            oldest.unlink(missing_ok=True)
            for key in gone:
                self._rows.pop(key, None)

    def _compact(self) -> None:
        """Merge every shard into one (written before the old ones are removed)."""
        merged = self._write(list(self._rows), np.stack(list(self._rows.values())))
        for shard in self._shards:
            shard.unlink(missing_ok=True)
        self._shards = [merged]


def _write_rows(path: Path, keys: Sequence[str], rows: np.ndarray, compressed: bool = False) -> Path:
    """(keys, rows) as one .npz written whole (a temp file renamed): a failed write leaves no torn file."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        (np.savez_compressed if compressed else np.savez)(
            fh, keys=np.array(list(keys), dtype="<U32"), rows=np.asarray(rows, dtype=np.float32)
        )
    return path


def cached_rows(cache: FeatureCache | None, keys: Sequence[str], compute, width: int):
    """(n, width) float32 rows for `keys`: those `cache` holds read, the rest computed by
    `compute(indices)` (a float array of their rows, in that order) and added to it."""
    import torch

    out = np.zeros((len(keys), width), dtype=np.float32)
    held = cache.get(keys) if cache is not None else {}
    todo = [i for i, k in enumerate(keys) if k not in held]
    for i, k in enumerate(keys):
        if k in held:
            out[i] = held[k]
    if todo:
        rows = compute(todo)
        rows = rows.detach().cpu().numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
        out[todo] = rows
        if cache is not None:
            cache.add([keys[i] for i in todo], rows)
    return torch.from_numpy(out)
