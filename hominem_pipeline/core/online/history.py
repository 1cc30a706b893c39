"""The preference history index: the interaction log in a database that answers
"choices of rater R", "turns of version V" and "pairs of domain D" in milliseconds over millions of events.

The log stays the durable source. The index is built from it incrementally: per log file, the bytes
already read are kept, and only whole lines after them are read, so an update costs what is new. Rows
are written once per event id (a second update, or two processes updating at once, write nothing
twice), and the index can be dropped and rebuilt from the log at any time (`hominem history rebuild`).

Embedded, it is a sqlite file (`data/history.sqlite`). A deployment points `history.url` (or the
`HOMINEM_HISTORY_URL` environment variable, which keeps a password out of the config) at Postgres, which
every process and host can share. The same SQLAlchemy tables and queries serve both.

A turn's version is the last part of the adapter that wrote it (`base` for the student alone); its
domain is the seed category its user message lies nearest (`attune.predictions.Domains`, given as
`domain_of`; without one, no domain). A pair is a choice between two replies; its domain is its chosen
turn's. Thumbs are indexed as feedback on their turn (the pairs they make are derived when training).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from hominem_pipeline.core.common.sql import insert_for
from hominem_pipeline.core.online import tally
from hominem_pipeline.core.online.log import forgotten, parse_line, tombstones

log = logging.getLogger(__name__)

URL_ENV = "HOMINEM_HISTORY_URL"
SQLITE_FILE = "history.sqlite"
BASE_VERSION = "base"
CHUNK = 20_000  # rows per insert statement batch

DomainOf = Callable[[list[str]], list[str]]

metadata = sa.MetaData()
log_files = sa.Table(
    "log_files",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("bytes", sa.BigInteger, nullable=False),
)
turns = sa.Table(
    "turns",
    metadata,
    sa.Column("id", sa.String(100), primary_key=True),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("rater", sa.String(100), nullable=False),
    sa.Column("session", sa.String(200)),
    sa.Column("context", sa.String(32), nullable=False),
    sa.Column("version", sa.String(200), nullable=False),
    sa.Column("adapter", sa.String(500)),
    sa.Column("reward_model", sa.String(500)),
    sa.Column("domain", sa.String(100)),
    sa.Column("scalar", sa.Float),
    sa.Column("prompt", sa.Text, nullable=False),
    sa.Column("reply", sa.Text),
    sa.Index("turns_version_time", "version", "time"),
)
feedback = sa.Table(
    "feedback",
    metadata,
    sa.Column("id", sa.String(100), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("rater", sa.String(100), nullable=False),
    sa.Column("turn", sa.String(100), nullable=False),  # a choice's chosen turn
    sa.Column("other", sa.String(100)),  # a choice's rejected turn
    sa.Column("value", sa.String(200)),  # up | down; slight | clear | strong; "more empathy"; valence and tags
    sa.Column("domain", sa.String(100)),
    sa.Index("feedback_rater_kind_time", "rater", "kind", "time"),
    sa.Index("feedback_domain_kind_time", "domain", "kind", "time"),
    sa.Index("feedback_turn", "turn"),
)


def index_url(url: str | None, data_dir: Path) -> str:
    """The index's database: $HOMINEM_HISTORY_URL, else `url` (history.url), else the sqlite file in the data
    folder."""
    return os.environ.get(URL_ENV) or url or f"sqlite:///{Path(data_dir) / SQLITE_FILE}"


def version_of(adapter: str | None) -> str:
    return BASE_VERSION if not adapter else Path(adapter).name


def _value(event: dict[str, Any]) -> str | None:
    kind = event["kind"]
    if kind == "thumb":
        return event["value"]
    if kind == "choice":
        return event["strength"]
    if kind == "nudge":
        return f"{event['direction']} {event['dimension']}"
    if kind == "emotion":
        return (
            " ".join(
                [
                    *([f"valence {event['valence']:+d}"] if event.get("valence") is not None else []),
                    *event.get("tags", []),
                ]
            )
            or None
        )
    return None


def _prompt(event: dict[str, Any]) -> str:
    return next((m["content"] for m in reversed(event["messages"]) if m["role"] == "user"), "")


def _new_lines(path: Path, start: int) -> tuple[list[dict[str, Any]], int]:
    """The events on whole lines after byte `start` of a log file, and the offset after the last one."""
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    end = data.rfind(b"\n") + 1  # a line still being written is left for the next update
    events = []
    for number, raw in enumerate(data[:end].splitlines(), 1):
        if not raw.strip():
            continue
        event = parse_line(raw)
        if event is None or "kind" not in event:
            log.warning(
                "%s: a line after byte %d (the %d-th read) is not an event, not indexed: %r",
                path,
                start,
                number,
                raw[:80],
            )
            continue
        events.append(event)
    return events, start + end


@dataclass
class Page:
    """A query's answer: how many rows match, and the newest `limit` of them."""

    total: int
    rows: list[dict[str, Any]]
    seconds: float


@dataclass
class UpdateStats:
    files: int = 0
    turns: int = 0
    feedback: int = 0
    bytes: int = 0
    seconds: float = 0.0


class HistoryIndex:
    """`HistoryIndex(url)`: opens (and creates) the index; `update(log_folder)` reads what is new."""

    def __init__(self, url: str):
        self.url = url
        self.engine = sa.create_engine(url, future=True)
        if self.engine.dialect.name == "sqlite":
            if self.engine.url.database not in (None, "", ":memory:"):
                Path(self.engine.url.database).parent.mkdir(
                    parents=True, exist_ok=True
                )  # a data folder nothing was written to yet
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        self.reindexed = (
            self._tables_changed()
        )  # an index written by an earlier release: its rows are read again from the log
        if self.reindexed:
            log.info("the history index at %s was written with other columns: indexing the log again", url)
            for tables in (metadata, tally.metadata):
                tables.drop_all(self.engine)
        metadata.create_all(self.engine)
        tally.metadata.create_all(self.engine)

    def _tables_changed(self) -> bool:
        """Some table of the index exists with other columns than this code writes."""
        inspector = sa.inspect(self.engine)
        for table in [*metadata.sorted_tables, *tally.metadata.sorted_tables]:
            if inspector.has_table(table.name) and {c["name"] for c in inspector.get_columns(table.name)} != {
                c.name for c in table.columns
            }:
                return True
        return False

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> HistoryIndex:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------------
    def _insert(self, conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        statement = insert_for(self.backend)(table).on_conflict_do_nothing(index_elements=[table.c.id])
        for i in range(0, len(rows), CHUNK):
            conn.execute(statement, rows[i : i + CHUNK])

    def add(
        self, events: Sequence[dict[str, Any]], domain_of: DomainOf | None = None, conn: sa.Connection | None = None
    ) -> tuple[int, int]:
        """Index events (any order, any mix of kinds; ids already indexed are left as they are); (turns, feedback)
        rows offered."""
        if conn is None:
            with self.engine.begin() as c:
                return self.add(events, domain_of, c)
        turn_events = [e for e in events if e["kind"] == "turn"]
        prompts = [_prompt(e) for e in turn_events]
        domains = domain_of(prompts) if domain_of is not None and prompts else [None] * len(prompts)
        turn_rows = [
            {
                "id": e["id"],
                "time": e["time"],
                "rater": e["rater"],
                "session": e.get("session"),
                "context": e["context"],
                "version": version_of(e.get("adapter")),
                "adapter": e.get("adapter"),
                "reward_model": e.get("reward_model"),
                "domain": d,
                "scalar": (e.get("reward") or {}).get("scalar"),
                "prompt": p,
                "reply": e.get("reply"),
            }
            for e, p, d in zip(turn_events, prompts, domains)
        ]
        domain_by_turn = {r["id"]: r["domain"] for r in turn_rows}
        rest = [e for e in events if e["kind"] != "turn"]
        anchor = {e["id"]: e["chosen"] if e["kind"] == "choice" else e["turn"] for e in rest}
        unknown = sorted({t for t in anchor.values() if t not in domain_by_turn})
        for i in range(0, len(unknown), 1000):  # feedback on turns indexed by an earlier update
            chunk = unknown[i : i + 1000]
            domain_by_turn.update(
                conn.execute(sa.select(turns.c.id, turns.c.domain).where(turns.c.id.in_(chunk))).all()
            )
        feedback_rows = [
            {
                "id": e["id"],
                "kind": e["kind"],
                "time": e["time"],
                "rater": e["rater"],
                "turn": anchor[e["id"]],
                "other": e.get("rejected"),
                "value": _value(e),
                "domain": domain_by_turn.get(anchor[e["id"]]),
            }
            for e in rest
        ]
        self._insert(conn, turns, turn_rows)
        self._insert(conn, feedback, feedback_rows)
        # what people gave, counted again for every conversation these events touch (core/online/tally.py)
        contexts = {r["context"] for r in turn_rows} | self._contexts_of(conn, {r["turn"] for r in feedback_rows})
        tally.add_conversations(conn, turn_rows, insert_for(self.backend))
        tally.recount(conn, turns, feedback, contexts, insert_for(self.backend))
        return len(turn_rows), len(feedback_rows)

    @staticmethod
    def _contexts_of(conn: sa.Connection, turn_ids: set[str]) -> set[str]:
        found: set[str] = set()
        ordered = sorted(turn_ids)
        for i in range(0, len(ordered), 1000):
            found.update(
                conn.execute(
                    sa.select(turns.c.context).where(turns.c.id.in_(ordered[i : i + 1000])).distinct()
                ).scalars()
            )
        return found

    def update(self, folder: Path, domain_of: DomainOf | None = None) -> UpdateStats:
        """Index what the log folder holds beyond what was read before (whole lines only). With `domain_of`,
        turns an update without one indexed (the retrain sensor's) get their domain too."""
        started = time.monotonic()
        stats = UpdateStats()
        with self.engine.begin() as conn:
            read = dict(conn.execute(sa.select(log_files.c.name, log_files.c.bytes)).all())
        stones = tombstones(Path(folder))  # a forgotten person's events are absent
        for path in sorted(Path(folder).glob("*.jsonl")):
            start = read.get(path.name, 0)
            size = path.stat().st_size
            if size == start:
                continue
            if size < start:  # the file was replaced: read it again (ids already indexed are skipped)
                log.warning("%s is shorter than the %d bytes indexed: reading it again", path, start)
                start = 0
            events, end = _new_lines(path, start)
            if stones:
                events = [e for e in events if not forgotten(e, stones)]
            with self.engine.begin() as conn:  # the rows and the new offset together
                t, f = self.add(events, domain_of, conn)
                _upsert_offset(conn, self.backend, path.name, end)
            stats.files += 1
            stats.turns += t
            stats.feedback += f
            stats.bytes += end - start
        if domain_of is not None:
            self._fill_domains(domain_of)
        stats.seconds = time.monotonic() - started
        return stats

    def _fill_domains(self, domain_of: DomainOf) -> None:
        """The domain of every turn indexed without one, and of the feedback anchored on it."""
        t, f = turns.c, feedback.c
        with self.engine.begin() as conn:
            missing = conn.execute(sa.select(t.id, t.prompt).where(t.domain.is_(None))).all()
            if not missing:
                return
            rows = [
                {"turn_id": turn_id, "found": d}
                for (turn_id, _), d in zip(missing, domain_of([p for _, p in missing]))
            ]
            conn.execute(
                sa.update(turns).where(t.id == sa.bindparam("turn_id")).values(domain=sa.bindparam("found")), rows
            )  # one executemany
            known = sa.select(t.domain).where(t.id == f.turn).scalar_subquery()
            conn.execute(sa.update(feedback).where(f.domain.is_(None)).values(domain=known))

    def rebuild(self, folder: Path, domain_of: DomainOf | None = None) -> UpdateStats:
        """Drop every row and index the whole log again."""
        for tables in (metadata, tally.metadata):
            tables.drop_all(self.engine)
            tables.create_all(self.engine)
        return self.update(folder, domain_of)

    def purge(self, folder: Path) -> int:
        """Index the log again after events were taken out of it (a person forgotten, days expired), and vacuum a
        sqlite index so that no free page keeps their rows; returns how many turns and feedback rows left."""
        with self.engine.begin() as conn:
            count = [sa.select(sa.func.count()).select_from(t) for t in (turns, feedback)]
            before = sum(conn.execute(c).scalar_one() for c in count)
        stats = self.rebuild(folder)
        if self.backend == "sqlite":
            with self.engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM")
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        return max(0, before - stats.turns - stats.feedback)

    # -- queries -------------------------------------------------------------------------------------
    def _page(
        self,
        where: sa.ColumnElement[bool],
        table: sa.Table,
        columns: Sequence[sa.ColumnElement[Any]],
        limit: int,
        joined: Callable[[Any], Any] = lambda q: q,
    ) -> Page:
        """How many rows of `table` match `where`, and the newest `limit` of them as `columns` (over
        `joined(select)`)."""
        started = time.monotonic()
        with self.engine.connect() as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(table).where(where)).scalar_one()
            rows = (
                conn.execute(
                    joined(sa.select(*columns).select_from(table))
                    .where(where)
                    .order_by(table.c.time.desc())
                    .limit(limit)
                )
                .mappings()
                .all()
            )
        return Page(int(total), [dict(r) for r in rows], time.monotonic() - started)

    def _choices(self, where: sa.ColumnElement[bool], limit: int, rater: bool) -> Page:
        """Choices with what they were about: the person's message and both replies (from their turns)."""
        f = feedback.c
        chosen, rejected = turns.alias("chosen_turn"), turns.alias("rejected_turn")
        columns = [
            f.id,
            f.time,
            *([f.rater] if rater else []),
            chosen.c.prompt.label("message"),
            chosen.c.reply.label("chosen"),
            rejected.c.reply.label("rejected"),
            f.value.label("strength"),
            f.domain,
            f.turn.label("chosen_turn"),
            f.other.label("rejected_turn"),
        ]
        return self._page(
            where,
            feedback,
            columns,
            limit,
            lambda q: q.outerjoin(chosen, chosen.c.id == f.turn).outerjoin(rejected, rejected.c.id == f.other),
        )

    def choices_of_rater(self, rater: str, limit: int = 100) -> Page:
        """The rater's choices, newest first."""
        f = feedback.c
        return self._choices((f.rater == rater) & (f.kind == "choice"), limit, rater=False)

    def turns_of_version(self, version: str, limit: int = 100, rater: str | None = None) -> Page:
        """Turns the adapter version wrote (`base`: the student alone), newest first; `rater`: theirs alone."""
        t = turns.c
        return self._page(
            (t.version == version) & (t.rater == rater if rater is not None else sa.true()),
            turns,
            [t.id, t.time, t.rater, t.session, t.domain, t.scalar, t.prompt.label("message"), t.reply],
            limit,
        )

    def pairs_of_domain(self, domain: str, limit: int = 100, rater: str | None = None) -> Page:
        """Choices whose conversation lies in the domain, newest first; `rater`: theirs alone."""
        f = feedback.c
        mine = f.rater == rater if rater is not None else sa.true()
        return self._choices((f.domain == domain) & (f.kind == "choice") & mine, limit, rater=True)

    def raters(self) -> list[str]:
        """Everyone who gave feedback, by how much they gave (most first)."""
        f = feedback.c
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(f.rater).group_by(f.rater).order_by(sa.func.count().desc())).scalars())

    def given(self) -> tally.Given:
        """What people have given: conversations, and pairs per part of the reward channel (core/online/tally.py)."""
        with self.engine.connect() as conn:
            return tally.given(conn)

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            out = {"turns": conn.execute(sa.select(sa.func.count()).select_from(turns)).scalar_one()}
            out |= dict(conn.execute(sa.select(feedback.c.kind, sa.func.count()).group_by(feedback.c.kind)).all())
        return out


def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=60000")
    cursor.close()


def _upsert_offset(conn: sa.Connection, backend: str, name: str, offset: int) -> None:
    statement = insert_for(backend)(log_files).values(name=name, bytes=offset)
    conn.execute(statement.on_conflict_do_update(index_elements=[log_files.c.name], set_={"bytes": offset}))
