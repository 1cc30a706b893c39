"""The reference's log-probabilities: the base (adapter off, no dropout) scores each sequence once, kept by
its content in memory, in a file shared by the daily training and online updates, and in the files a project
ships for its people's pairs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hominem_pipeline.core.common.files import write_text_atomic
from hominem_pipeline.core.policy.sequences import sequence_logps


def sequence_key(seq: tuple[list[int], int]) -> str:
    """A sequence's identity for the reference cache: its tokens and where its reply starts."""
    ids, begin = seq
    return hashlib.blake2b(
        np.asarray(ids, dtype=np.int64).tobytes() + begin.to_bytes(4, "little"), digest_size=12
    ).hexdigest()


def reference_logps(
    model: Any, seqs: Sequence[tuple[list[int], int]], cache: dict[str, float], pad_id: int
) -> torch.Tensor:
    """The reference's (the base's: adapter off, no dropout) summed reply log-probability of each
    sequence, computed once per sequence and kept in `cache` by its content: the reference never
    changes, and a pair is drawn several times over a run (and, with a `reference_cache` file, again in
    later runs on the same base)."""
    keys = [sequence_key(s) for s in seqs]
    todo = [k for k, key in enumerate(keys) if key not in cache]
    if todo:
        with torch.no_grad(), model.disable_adapter():
            values, _ = sequence_logps(model, [seqs[k] for k in todo], pad_id)
        cache.update({keys[k]: v for k, v in zip(todo, values.tolist())})
    return torch.tensor([cache[key] for key in keys], dtype=torch.float32)


def load_reference_cache(path: Path | None, base: str) -> dict[str, float]:
    """The reference log-probabilities saved at `path` for the base with checksum `base` (empty when
    there are none, or they belong to another base)."""
    try:
        saved = json.loads(Path(path).read_text()) if path is not None else {}
    except (OSError, ValueError):
        saved = {}
    return dict(saved.get("logps", {})) if saved.get("base") == base else {}


def shipped_reference_file(folder: Path, base: str) -> Path:
    """Where a project ships the reference log-probabilities of its people's pairs for the base with checksum
    `base`."""
    return Path(folder) / f"{base[:16]}-reference.npz"


def load_shipped_reference(folder: Path | None, base: str) -> dict[str, float]:
    """The reference log-probabilities shipped in `folder` for this base (empty when there are none)."""
    path = None if folder is None else shipped_reference_file(folder, base)
    if path is None or not path.is_file():
        return {}
    with np.load(path) as saved:
        return dict(zip(saved["keys"].tolist(), saved["logps"].astype(np.float64).tolist()))


REFERENCE_CACHE = (
    "cache/reference_logps.json"  # under the data folder: shared by the daily dual training and online updates
)
REFERENCE_CACHE_MAX = 50_000  # sequences kept, the newest


def save_reference_cache(path: Path, base: str, cache: dict[str, float]) -> None:
    write_text_atomic(path, json.dumps({"base": base, "logps": dict(list(cache.items())[-REFERENCE_CACHE_MAX:])}))
