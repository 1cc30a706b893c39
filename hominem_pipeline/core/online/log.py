"""The interaction log: every served turn and every piece of feedback, one JSON object per line, a file
per UTC day (`<folder>/<YYYY-MM-DD>.jsonl`).

`InteractionLog.append` returns only after its lines are written and fsynced, so whatever the service
acknowledges survives a crash. Each event carries an `id`; an id the log already holds is not written
again, so a client that retries after losing a reply gets the same acknowledgement, not a second copy.
A line cut short by a crash (the process killed mid-write) was never acknowledged: opening the log
cuts it off, with a warning, so the next event starts on a line of its own. Readers skip any line that
is not a JSON object, with a warning naming the file and line, and never fail on one.

A person who asked to be forgotten (`core/online/forget.py`) has a tombstone in `<log_dir>/forgotten.jsonl`:
`read_events` leaves out their events up to it, so every reader of the log treats them as absent, and
`InteractionLog.drop` takes them out of the files. Writers and `drop` take the folder's lock (`.lock`), so a
file rewritten by another process is reopened before the next append.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from hominem_pipeline.core.common.files import atomic_path

log = logging.getLogger(__name__)

SUFFIX = ".jsonl"
TOMBSTONES = "forgotten.jsonl"  # beside the log folder: one line per person forgotten, {"rater", "time", ...}


def log_folder(cfg: Any) -> Path:
    """The interaction log's folder under a config (`<project.data_dir>/<serving.log_dir>/log`)."""
    return Path(cfg.data_dir) / cfg.serving.log_dir / "log"


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def event_day(event: dict[str, Any]) -> str:
    """The UTC day an event belongs to, from its `time` (ISO 8601)."""
    return dt.datetime.fromisoformat(event["time"]).astimezone(dt.timezone.utc).date().isoformat()


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """The event on one log line; None for a line that is not a JSON object with an id."""
    try:
        event = json.loads(raw)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "id" in event else None


def tombstones(folder: Path) -> dict[str, dt.datetime]:
    """{rater: the time they were forgotten} from the tombstones beside the log folder `folder` (the newest
    per rater); {} when nobody was."""
    path = Path(folder).parent / TOMBSTONES
    out: dict[str, dt.datetime] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            when = dt.datetime.fromisoformat(row["time"])
        except (ValueError, KeyError, TypeError):
            continue
        if row["rater"] not in out or out[row["rater"]] < when:
            out[row["rater"]] = when
    return out


def forgotten(event: dict[str, Any], stones: dict[str, dt.datetime]) -> bool:
    """Whether `event` is of a person forgotten after it was written (their tombstone is newer)."""
    when = stones.get(event.get("rater"))  # type: ignore[arg-type]
    if when is None:
        return False
    try:
        return dt.datetime.fromisoformat(event["time"]) <= when
    except (ValueError, KeyError, TypeError):
        return True


def read_events(path: Path, *, honour_tombstones: bool = True) -> Iterator[dict[str, Any]]:
    """The events of one log file in order; a line that is not a JSON object (a torn write, a stray edit)
    is skipped with a warning, and so is an event of a forgotten person (unless `honour_tombstones` is
    false: only forgetting reads those)."""
    stones = tombstones(Path(path).parent) if honour_tombstones else {}
    for event in _read_lines(path):
        if not (stones and forgotten(event, stones)):
            yield event


def _read_lines(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            event = parse_line(raw)
            if event is None:
                torn = not raw.endswith(b"\n")
                log.warning(
                    "%s line %d: %s, skipped (%d bytes: %r)",
                    path,
                    number,
                    "a torn last line (the writer stopped mid-line)" if torn else "not a JSON event",
                    len(raw),
                    raw[:80],
                )
                continue
            yield event


class InteractionLog:
    """Append-only, durable, de-duplicated by event id. Thread-safe."""

    def __init__(self, folder: Path, remember_days: int = 2):
        """`remember_days`: the ids of this many most recent days' files are loaded, so a retry of an
        event written then is recognised (retries come seconds later; older ids are not kept)."""
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file: Any = None
        self._file_day: str | None = None
        self._folder_lock: Any = None  # the folder's lock file, opened at the first write
        self._ids: set[str] = set()
        self.remembered: list[
            dict[str, Any]
        ] = []  # the events of those days, read once at start (the service's ledger loads them)
        for path in self.files()[-remember_days:]:
            self._cut_torn_tail(path)
            self.remembered += read_events(path)
        self._ids.update(e["id"] for e in self.remembered)

    def files(self) -> list[Path]:
        return sorted(self.folder.glob(f"*{SUFFIX}"))

    def days(self) -> list[str]:
        return [p.name.removesuffix(SUFFIX) for p in self.files()]

    def path(self, day: str) -> Path:
        return self.folder / f"{day}{SUFFIX}"

    def __contains__(self, event_id: str) -> bool:
        return event_id in self._ids

    @staticmethod
    def _cut_torn_tail(path: Path) -> None:
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            log.warning(
                "%s: cutting off a torn last line of %d bytes (never acknowledged): %r",
                path,
                len(data) - keep,
                data[keep:][:80],
            )
            with open(path, "r+b") as f:
                f.truncate(keep)
                os.fsync(f.fileno())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The folder's lock, across processes (a `drop` elsewhere rewrites files), inside this one's."""
        if self._folder_lock is None or self._folder_lock.closed:
            self._folder_lock = open(self.folder / ".lock", "a+b")  # noqa: SIM115 (kept open until close)
        fcntl.flock(self._folder_lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._folder_lock.fileno(), fcntl.LOCK_UN)

    def _replaced(self) -> bool:
        """Whether the open file was replaced since it was opened (another process dropped events from it)."""
        try:
            return os.fstat(self._file.fileno()).st_ino != os.stat(self.path(self._file_day)).st_ino
        except FileNotFoundError:
            return True

    def _open(self, day: str) -> Any:
        if self._file_day != day or (self._file is not None and self._replaced()):
            if self._file is not None:
                self._file.close()
            path = self.path(day)
            if path.exists():
                self._cut_torn_tail(path)
            self._file = open(path, "ab")
            self._file_day = day
        return self._file

    def append(self, events: Iterable[dict[str, Any]]) -> list[bool]:
        """Write the events (each a JSON object with `id` and `time`) and fsync before returning; per
        event, True when written, False when its id was already in the log (nothing written for it)."""
        events = list(events)
        written: list[bool] = []
        with self._lock:
            lines: dict[str, list[bytes]] = {}
            for event in events:
                if event["id"] in self._ids:
                    written.append(False)
                    continue
                lines.setdefault(event_day(event), []).append(
                    json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
                )
                self._ids.add(event["id"])
                written.append(True)
            try:
                with self._locked():
                    for day, chunk in lines.items():
                        f = self._open(day)
                        f.write(b"".join(chunk))
                        f.flush()
                        os.fsync(f.fileno())
            except BaseException:
                # Nothing of this call counts as written: a retry must be able to write it.
                for event, new in zip(events, written):
                    if new:
                        self._ids.discard(event["id"])
                raise
        return written

    def read(self, day: str) -> list[dict[str, Any]]:
        path = self.path(day)
        return list(read_events(path)) if path.exists() else []

    def drop(self, gone: Callable[[dict[str, Any]], bool]) -> int:
        """Rewrite every file without the events `gone` says (a forgotten person's), each file replaced whole and
        fsynced; returns how many events were taken out. Lines that are not events are kept as they are."""
        removed = 0
        with self._lock, self._locked():
            if self._file is not None:
                self._file.close()
                self._file, self._file_day = None, None
            for path in self.files():
                kept, out = [], 0
                with open(path, "rb") as f:
                    for raw in f:
                        event = parse_line(raw)
                        if event is not None and gone(event):
                            out += 1
                        else:
                            kept.append(raw)
                if out and not kept:
                    path.unlink()  # nothing of that day is left
                elif out:
                    with atomic_path(path, durable=True) as tmp:
                        tmp.write_bytes(b"".join(kept))
                removed += out
            self.remembered = [e for e in self.remembered if not gone(e)]
        return removed

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file, self._file_day = None, None
            if self._folder_lock is not None:
                self._folder_lock.close()
