"""One training at a time per data folder: the daily run (the reward model, the day's adapter) and an online update of
the live adapter share the machine, and each would take far longer beside the other (two torch processes on the same
cores slow each other many times over)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

TRAINING_LOCK = ".training.lock"
HOLDER = ".training.holder"  # who holds the lock, for the words of whoever waits


class TrainingBusy(RuntimeError):
    """Another training of the data folder holds its lock."""


@contextmanager
def training(data_dir: Path, who: str, wait: float | None = None) -> Iterator[None]:
    """Hold `data_dir`'s training lock as `who` while the block runs.

    Args:
        data_dir: the project's data folder.
        who: what trains, in words ("the daily run's lora_adapter 2026-12-06", "online update online-1a2b").
        wait: seconds to wait for the one training now (None: as long as it takes, saying so every minute; 0: not
            at all). When it runs out, TrainingBusy names who holds the lock.
    """
    from filelock import FileLock, Timeout

    data_dir.mkdir(parents=True, exist_ok=True)
    lock, holder = FileLock(str(data_dir / TRAINING_LOCK)), data_dir / HOLDER
    started = time.monotonic()
    while True:
        try:
            lock.acquire(timeout=60 if wait is None else wait)
            break
        except Timeout:
            other = holder.read_text().strip() if holder.is_file() else "another training"
            if wait is not None:
                raise TrainingBusy(f"{other} is training in {data_dir}") from None
            log.info("%s waits for %s to finish (%.0f s so far)", who, other, time.monotonic() - started)
    try:
        holder.write_text(who + "\n")
        yield
    finally:
        holder.unlink(missing_ok=True)
        lock.release()
