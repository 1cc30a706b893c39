"""The audit log: one JSON line per action (who, when, what, on which version or day, the outcome), append-only,
fsynced before the action is acknowledged, and chained: each line carries the hash of the line before it (`prev`)
and its own (`hash`, SHA-256 of `prev` and the line's other fields), so `verify` finds a line removed, edited or
moved and names it.

The service (`serving/auth.py`) and the CLI (`hominem audit`, and every state-changing command) write the same file,
`<project.data_dir>/<serving.log_dir>/audit.jsonl`; an exclusive lock on it keeps two writers' chains one. Lines
written before the chain (no `hash`) are counted, not checked. Removing the last lines leaves an intact chain: keep
the hash `verify` prints somewhere else to notice that.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AUDIT_FILE = "audit.jsonl"
GENESIS = "0" * 64  # the `prev` of the first chained line


def audit_path(cfg: Any) -> Path:
    return cfg.data_dir / cfg.serving.log_dir / AUDIT_FILE


def _digest(prev: str, entry: dict[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k not in ("hash", "prev")}
    canonical = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((prev + "\n" + canonical).encode()).hexdigest()


def _last_hash(f: Any) -> str:
    """The `hash` of the file's last chained line (GENESIS when none), read backwards from its end."""
    f.seek(0, os.SEEK_END)
    end = f.tell()
    chunk, data = 4096, b""
    while end > 0:
        start = max(0, end - chunk)
        f.seek(start)
        data = f.read(end - start) + data
        end = start
        lines = data.splitlines()
        for line in reversed(lines[1:] if end > 0 else lines):
            try:
                found = json.loads(line).get("hash")
            except ValueError:
                continue
            if found:
                return found
    return GENESIS


class AuditLog:
    def __init__(self, path: Path):
        self.path = Path(path)

    def append(self, action: str, who: str, **details: Any) -> dict[str, Any]:
        """Write one line (under an exclusive lock, fsynced) and return it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        entry = {"time": dt.datetime.now(dt.timezone.utc).isoformat(), "action": action, "who": who, **details}
        with open(self.path, "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                entry["prev"] = _last_hash(f)
                entry["hash"] = _digest(entry["prev"], entry)
                f.seek(0, os.SEEK_END)
                f.write((json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode())
                f.flush()
                os.fsync(f.fileno())
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        return entry

    def entries(self) -> list[dict[str, Any]]:
        """Every line that parses, in order (a line that does not parse is left to `verify` to name)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def verify(self) -> Verdict:
        if not self.path.exists():
            return Verdict(0, 0, [], GENESIS)
        return verify_lines(self.path.read_text(encoding="utf-8").splitlines())


@dataclass(frozen=True)
class Verdict:
    lines: int
    unchained: int  # lines written before the chain, not checked
    problems: list[str]  # each names its line (1-based) and what is wrong
    last: str  # the last chained line's hash

    @property
    def intact(self) -> bool:
        return not self.problems


def verify_lines(lines: Iterable[str]) -> Verdict:
    """Check the chain line by line: a line whose `hash` does not match its fields was edited; a line whose `prev`
    is not the hash of the line before it follows a removed line, or was moved (named when its `prev` is the hash of
    another line)."""
    problems: list[str] = []
    seen: dict[str, int] = {}  # hash -> its line
    prev, count, unchained = GENESIS, 0, 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        count += 1
        try:
            entry = json.loads(line)
        except ValueError:
            problems.append(f"line {number}: not JSON (a damaged or hand-written line)")
            continue
        if "hash" not in entry:
            if seen:
                problems.append(f"line {number}: has no hash after the chain began (inserted by hand)")
            unchained += 1
            continue
        if _digest(entry.get("prev", ""), entry) != entry["hash"]:
            problems.append(f"line {number} ({entry.get('action')}, {entry.get('time')}): edited after it was written")
        if entry.get("prev") != prev:
            if entry.get("prev") in seen:
                problems.append(
                    f"line {number} ({entry.get('action')}, {entry.get('time')}): out of order (it followed line "
                    f"{seen[entry['prev']]})"
                )
            else:
                problems.append(
                    f"line {number} ({entry.get('action')}, {entry.get('time')}): the line before it was removed"
                )
        seen[entry["hash"]] = number
        prev = entry["hash"]
    return Verdict(count, unchained, problems, prev)
