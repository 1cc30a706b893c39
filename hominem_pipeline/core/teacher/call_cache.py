"""A content-fingerprint cache of answered API calls, in one sqlite file under `data/`.

The key is the sha256 of everything that determines an answer (provider, model, endpoint, output mode,
system prompt, turns, sampling settings and sample index; never the key). Re-running a partition, or
another partition asking the same thing, is served from here without a call. Every answer is stored,
readable or not: a label that was not JSON is served again, so its re-ask (which quotes it) is the same
call and comes from here too, and a rebuild from this file alone gives the same rows without a call. A
call that failed (no answer after its retries) stores nothing: its row is missing from the partial
partition, and the next build of it asks again.

Two processes on one host may share the file: it runs in WAL mode with a busy timeout, and writes are
`INSERT OR IGNORE` (the first answer for a key wins; both were asked the same thing). Workers on several
hosts share a database instead (`DatabaseCallCache`, `teacher.client.cache_url`: Postgres), with the same
table and the same first-answer-wins insert; `open_call_cache` picks one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any


def call_key(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


class CallCache:
    def __init__(self, path: Path, *, busy_timeout_s: float = 60.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS calls ("
            " key TEXT PRIMARY KEY, provider TEXT NOT NULL, model TEXT NOT NULL, purpose TEXT NOT NULL,"
            " answer TEXT NOT NULL, created REAL NOT NULL)"
        )

    def get(self, key: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT answer FROM calls WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, answer: dict[str, Any], *, provider: str, model: str, purpose: str) -> None:
        self._db.execute(
            "INSERT OR IGNORE INTO calls (key, provider, model, purpose, answer, created) VALUES (?, ?, ?, ?, ?, ?)",
            (key, provider, model, purpose, json.dumps(answer), time.time()),
        )

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def summary(self) -> dict[str, int]:
        """Answers stored per provider/model/purpose."""
        rows = self._db.execute("SELECT provider, model, purpose, COUNT(*) FROM calls GROUP BY 1, 2, 3").fetchall()
        return {f"{p}/{m}/{u}": n for p, m, u, n in rows}

    def close(self) -> None:
        self._db.close()


CACHE_URL_ENV = "HOMINEM_CALL_CACHE_URL"


class DatabaseCallCache:
    """The cache in a database every worker host reaches (SQLAlchemy URL: Postgres in a deployment)."""

    def __init__(self, url: str):
        import sqlalchemy as sa

        self._sa = sa
        self.url = url
        self._engine = sa.create_engine(url, pool_pre_ping=True)
        metadata = sa.MetaData()
        self._calls = sa.Table(
            "calls",
            metadata,
            sa.Column("key", sa.String(64), primary_key=True),
            sa.Column("provider", sa.Text, nullable=False),
            sa.Column("model", sa.Text, nullable=False),
            sa.Column("purpose", sa.Text, nullable=False),
            sa.Column("answer", sa.Text, nullable=False),
            sa.Column("created", sa.Float, nullable=False),
        )
        metadata.create_all(self._engine)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._engine.connect() as conn:
            answer = conn.execute(self._sa.select(self._calls.c.answer).where(self._calls.c.key == key)).scalar()
        return json.loads(answer) if answer is not None else None

    def put(self, key: str, answer: dict[str, Any], *, provider: str, model: str, purpose: str) -> None:
        from hominem_pipeline.core.common.sql import insert_for

        insert = insert_for(self._engine.dialect.name)
        row = {
            "key": key,
            "provider": provider,
            "model": model,
            "purpose": purpose,
            "answer": json.dumps(answer),
            "created": time.time(),
        }
        with self._engine.begin() as conn:
            conn.execute(insert(self._calls).values(row).on_conflict_do_nothing(index_elements=["key"]))

    def __len__(self) -> int:
        with self._engine.connect() as conn:
            return int(conn.execute(self._sa.select(self._sa.func.count()).select_from(self._calls)).scalar_one())

    def summary(self) -> dict[str, int]:
        c = self._calls.c
        with self._engine.connect() as conn:
            rows = conn.execute(
                self._sa.select(c.provider, c.model, c.purpose, self._sa.func.count()).group_by(
                    c.provider, c.model, c.purpose
                )
            ).all()
        return {f"{p}/{m}/{u}": n for p, m, u, n in rows}

    def close(self) -> None:
        self._engine.dispose()


def open_call_cache(path: Path | None, url: str | None) -> CallCache | DatabaseCallCache | None:
    """The cache the settings name: $HOMINEM_CALL_CACHE_URL, else `url` (a shared database), else the sqlite
    file at `path`, else none."""
    url = os.environ.get(CACHE_URL_ENV) or url
    if url:
        return DatabaseCallCache(url)
    return CallCache(path) if path is not None else None
