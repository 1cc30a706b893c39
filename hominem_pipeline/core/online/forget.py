"""Forgetting a person: `hominem data forget --rater ID` and `DELETE /me/data`.

1. A tombstone goes to `<log_dir>/forgotten.jsonl` (fsynced before anything else): from then on every reader of
   the log (`log.read_events`) treats the person's events up to that moment as absent.
2. Their words are found everywhere under the data folder: each sentence of at least `MIN_PIECE` characters that
   they wrote (their messages and notes) and that nobody else wrote and no file of the project's `config/` holds.
3. What holds them is cleaned:
   - a built version of an asset (`data/<asset>/<day>/<version>/`) is removed, and the day is listed to be built
     again (`hominem run --day DAY`: the log changed, so the lineage builds new versions). The live adapter and its
     reward model are never removed under the service: they are listed, with what to do;
   - a JSONL file (the memory files in `data/sft/`, question files) loses the rows that hold their words or come
     from their turns; a JSON cache keyed by text (the teacher's fact readings) loses those entries; a teacher
     call cache (sqlite) loses the answers that quote them, and is vacuumed;
   - copies in MLflow's artifact store, quarantined rows and reply caches are removed;
   - the history index drops their rows (and a sqlite index is rebuilt and vacuumed);
   - last, the log files are rewritten without their events.
4. The data folder is scanned again: what still holds their words is listed (path and the command that removes
   it), so nothing is left silently. Running forget again finishes a forget that was interrupted.

The feature cache (`data/cache/reward_features/`) holds numbers keyed by digests, never text, and is not scanned;
nor are the student's weights (`data/models/`).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import logging
import re
import shutil
import sqlite3
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hominem_pipeline.core.common.files import atomic_path, write_text_atomic
from hominem_pipeline.core.online.log import TOMBSTONES, InteractionLog, forgotten, log_folder, read_events

log = logging.getLogger(__name__)

MIN_PIECE = 16  # characters: a shorter sentence ("thank you so much") is anyone's
NOT_SCANNED = ("models", "cache/reward_features")  # under the data folder: weights, and features keyed by digest
SKIP_SUFFIXES = (".safetensors", ".gguf", ".png", ".lock")
MAX_SCAN_BYTES = 512 * 1024 * 1024
OWN_FILES = (TOMBSTONES, "audit.jsonl", "history.sqlite")  # handled on their own (the audit's chain is never cut)
CACHES = ("cache", "replies", "replay", "quarantine")  # folder names whose files are copies, removed whole


@dataclass
class Forgotten:
    """What forgetting one person did."""

    rater: str
    time: str
    events: int = 0  # events taken out of the log
    rows: int = 0  # rows and entries taken out of memory files, caches and the history index
    removed: list[str] = field(default_factory=list)  # versions and files removed (relative to the data folder)
    rebuilt: dict[str, list[str]] = field(default_factory=dict)  # day -> the assets whose version there was removed
    left: list[str] = field(default_factory=list)  # what still holds their words: path, why, the command

    @property
    def rebuild(self) -> list[str]:
        """The commands that build the removed versions' days again, without them."""
        return [
            f"hominem run --date {day}  # {', '.join(sorted(set(assets)))}"
            for day, assets in sorted(self.rebuilt.items())
        ]


def their_words(events: Iterable[dict[str, Any]], rater: str, project_texts: str = "") -> list[str]:
    """The sentences `rater` wrote (their messages' and notes' lines and sentences of `MIN_PIECE` characters or more)
    that no other person's event holds and `project_texts` does not hold, longest first."""
    mine, others = set(), []
    for e in events:
        texts = [m.get("content", "") for m in e.get("messages", []) if m.get("role") != "assistant"]
        texts += [e.get("note") or ""]
        if e.get("rater") == rater:
            mine |= {p for t in texts for p in pieces(t)}
        else:
            others += texts + [e.get("reply") or ""]
    elsewhere = "\n".join(others) + "\n" + project_texts
    return sorted((p for p in mine if p not in elsewhere), key=len, reverse=True)


def pieces(text: str) -> list[str]:
    """The lines and sentences of `text` long enough to be someone's own words."""
    out = []
    for part in re.split(r"\n+|(?<=[.!?])\s+", text):
        part = part.strip()
        if len(part) >= MIN_PIECE:
            out.append(part)
    return out


def project_texts(root: Path) -> str:
    """The project's own text files under `config/` (seed prompts, fixtures): a sentence there is not a person's."""
    folder = Path(root) / "config"
    out = []
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path.suffix in (".yaml", ".yml", ".jsonl", ".json", ".txt", ".md") and path.stat().st_size < 20_000_000:
            out.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(out)


def file_text(path: Path) -> bytes:
    """What `path` holds as text, for a search: a parquet table's cells, a gzip's or zip's contents (numpy's
    fixed-width strings as UTF-8 too), the raw bytes of anything else."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception:  # noqa: BLE001 (not a readable table: searched as bytes)
            return path.read_bytes()
        columns = range(table.num_columns)
        cells = (json.dumps(table.column(i).to_pylist(), ensure_ascii=False, default=str) for i in columns)
        return "\n".join(cells).encode()
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return f.read()
    if path.suffix in (".zip", ".npz"):
        with zipfile.ZipFile(path) as z:
            raw = b"\n".join(z.read(n) for n in z.namelist())
        return raw + b"\n" + raw.decode("utf-32-le", errors="ignore").encode()
    return path.read_bytes()


def holders(data_dir: Path, words: list[str]) -> list[Path]:
    """The files under `data_dir` that hold any of `words`."""
    needles = [w.encode() for w in words]
    found = []
    if not needles:
        return found
    skipped = tuple(Path(data_dir) / s for s in NOT_SCANNED)
    for path in sorted(Path(data_dir).rglob("*")):
        if not path.is_file() or path.suffix in SKIP_SUFFIXES or path.stat().st_size > MAX_SCAN_BYTES:
            continue
        if any(path.is_relative_to(s) for s in skipped):
            continue
        try:
            text = file_text(path)
        except OSError:
            continue
        if any(n in text for n in needles):
            found.append(path)
    return found


def write_tombstone(folder: Path, rater: str, who: str) -> str:
    """Append the tombstone of `rater` beside the log folder `folder`, fsynced; returns its time."""
    import os

    now = dt.datetime.now(dt.timezone.utc).isoformat()
    path = Path(folder).parent / TOMBSTONES
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"rater": rater, "time": now, "by": who}) + "\n"
    with open(path, "ab") as f:
        f.write(line.encode())
        f.flush()
        os.fsync(f.fileno())
    return now


def forget(cfg: Any, rater: str, who: str, interaction_log: InteractionLog | None = None) -> Forgotten:
    """Forget `rater` everywhere under the data folder (see the module's docstring); `interaction_log`: the log a
    running service writes through (its own lock and open file are used), else one opened here."""
    folder = log_folder(cfg)
    events = [e for p in sorted(folder.glob("*.jsonl")) for e in read_events(p, honour_tombstones=False)]
    words = their_words(events, rater, project_texts(cfg.root))
    turns = {e["id"] for e in events if e.get("rater") == rater and e.get("kind") == "turn"}
    report = Forgotten(rater, write_tombstone(folder, rater, who))
    stones = {rater: dt.datetime.fromisoformat(report.time)}
    data_dir = Path(cfg.data_dir)
    live = _live_paths(data_dir)
    for path in holders(data_dir, words):
        _clean(data_dir, path, words, turns, live, report)
    report.events, dropped_rows = take_out(cfg, lambda e: forgotten(e, stones), interaction_log)
    report.rows += dropped_rows
    for path in holders(data_dir, words):
        why = f"still holds their words: {path.relative_to(data_dir)}; remove it: rm -r {path}"
        if why not in report.left and not any(str(path).startswith(str(data_dir / r)) for r in report.removed):
            report.left.append(why)
    return report


def _live_paths(data_dir: Path) -> set[Path]:
    """The live adapter's and reward model's folders: never removed while they serve."""
    from hominem_pipeline.core.online.live import LiveError, LiveState

    try:
        current = LiveState(data_dir).current()
    except LiveError:
        return set()
    return {(data_dir / p).resolve() for p in (current.adapter, current.reward_model) if p}


def _version_of(data_dir: Path, path: Path) -> Path | None:
    """The built version folder (`<asset>/<day>/<version>/`, with a manifest) that `path` lies in, if any."""
    parts = path.relative_to(data_dir).parts
    if len(parts) >= 4 and re.fullmatch(r"\d{4}-\d{2}-\d{2}", parts[1]):
        version = data_dir.joinpath(*parts[:3])
        if (version / "manifest.json").is_file():
            return version
    return None


def _clean(data_dir: Path, path: Path, words: list[str], turns: set[str], live: set[Path], report: Forgotten) -> None:
    """Clean one file that holds `words` (see the module's docstring)."""
    name = str(path.relative_to(data_dir))
    if not path.exists() or path.name.startswith(OWN_FILES) or log_folder_of(path) is not None:
        return  # removed with its version already; the log is rewritten last, the index after it; the audit stays
    if (version := _version_of(data_dir, path)) is not None:
        rel = str(version.relative_to(data_dir))
        if version.resolve() in live:
            report.left.append(
                f"{rel} is live and holds their words: make another version live (hominem live promote VERSION, "
                f"or hominem live rollback), then run forget again"
            )
            return
        shutil.rmtree(version)
        report.removed.append(rel)
        report.rebuilt.setdefault(version.parts[-2], []).append(version.parts[-3])
    elif path.suffix == ".jsonl":
        report.rows += _drop_rows(path, words, turns)
    elif path.suffix == ".json" and not any(p in CACHES for p in path.relative_to(data_dir).parts):
        report.rows += _drop_entries(path, words)
    elif _is_sqlite(path) and path.parent.name != "mlflow" and "dagster" not in path.relative_to(data_dir).parts:
        report.rows += _drop_sqlite_rows(path, words)
    elif "artifacts" in path.relative_to(data_dir).parts or any(p in CACHES for p in path.relative_to(data_dir).parts):
        path.unlink()
        report.removed.append(name)


def log_folder_of(path: Path) -> Path | None:
    """The interaction log's folder when `path` is one of its files (a `log/` folder of `<day>.jsonl` files)."""
    if path.parent.name == "log" and re.fullmatch(r"\d{4}-\d{2}-\d{2}\.jsonl", path.name):
        return path.parent
    return None


def _drop_rows(path: Path, words: list[str], turns: set[str]) -> int:
    """Rewrite a JSONL file without the rows that hold `words` or come from one of `turns`."""
    kept, out = [], 0
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        theirs = any(w in line or w in json.dumps(row, ensure_ascii=False) for w in words)
        if theirs or (isinstance(row, dict) and row.get("turn") in turns):
            out += 1
        else:
            kept.append(line)
    if out:
        write_text_atomic(path, "".join(kept), durable=True)
    return out


def _drop_entries(path: Path, words: list[str]) -> int:
    """Rewrite a JSON object (a cache keyed by text) or list without the entries that hold `words`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return 0

    def holds(*values: Any) -> bool:
        text = json.dumps(values, ensure_ascii=False)
        return any(w in text for w in words)

    if isinstance(data, dict):
        kept: Any = {k: v for k, v in data.items() if not holds(k, v)}
    elif isinstance(data, list):
        kept = [v for v in data if not holds(v)]
    else:
        return 0
    out = len(data) - len(kept)
    if out:
        with atomic_path(path, durable=True) as tmp:
            tmp.write_text(json.dumps(kept, ensure_ascii=False, indent=1), encoding="utf-8")
    return out


def _is_sqlite(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(16) == b"SQLite format 3\x00"


def _drop_sqlite_rows(path: Path, words: list[str]) -> int:
    """Delete the rows of a sqlite file of the project's (a teacher call cache) whose text holds `words`, then
    vacuum it so that no free page keeps them."""
    db = sqlite3.connect(path, isolation_level=None)
    out = 0
    try:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            rows = db.execute(f'SELECT rowid, * FROM "{table}"').fetchall()  # noqa: S608 (names from the file)
            gone = [r[0] for r in rows if any(w in str(v) for v in r[1:] for w in words)]
            for rowid in gone:
                db.execute(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,))  # noqa: S608
            out += len(gone)
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return out


def take_out(cfg: Any, gone: Any, interaction_log: InteractionLog | None = None) -> tuple[int, int]:
    """Take the events `gone` says out of the log's files (through `interaction_log`, a running service's, else one
    opened here), then index the log again without them (when there is an index); returns (events taken out of the
    log, rows that left the index). Forgetting a person and retention both end here."""
    from hominem_pipeline.core.online.history import SQLITE_FILE, HistoryIndex, index_url

    folder = log_folder(cfg)
    own = interaction_log or InteractionLog(folder, remember_days=0)
    try:
        events = own.drop(gone)
    finally:
        if interaction_log is None:
            own.close()
    url = index_url(cfg.history.url, cfg.data_dir)
    if url.startswith("sqlite") and not (Path(cfg.data_dir) / SQLITE_FILE).is_file():
        return events, 0
    with HistoryIndex(url) as index:
        return events, index.purge(folder)
