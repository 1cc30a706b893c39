"""What people have given, counted per channel, kept beside the preference history index.

The retrain sensor asks "how many conversations, and how many preference pairs, have people given?"
(the memory and the reward channel). The answer is counted from the log through
the history index, by the rules `human_feedback` turns a day of the log into training data
(`core/online/feedback.py`), so that what the sensor counts is what a retrain reads:

- a **choice** is one pair per two replies chosen between, however often it was asked (a repeat with A
  and B swapped, a client's retry with the same id); a pair answered both ways is not counted (the rater
  could not tell, and `human_feedback` drops it);
- **thumbs** make a pair of two replies to one conversation, one net up and one net down, unless a
  choice already orders them;
- **emotion** labels make a pair of two replies to one conversation with a different (latest) valence,
  unless a choice or thumbs already order them;
- a **nudge** ("more empathy") makes a pair about that dimension with each other reply to the
  conversation that the rater did not nudge the same way;
- **conversations** (the memory channel): the client's session ids; a turn without one, the messages it answers
  (its context: two replies to one message are one conversation).

Two tables hold the result, one row per counted thing, so a count costs one indexed scan. When events
are indexed, every conversation context they touch is counted again from the index's rows of that
context (its turns and their feedback), so an update costs what is new, and a thumb that turns a pair
around, or a repeat answered the other way, changes the count at once.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

CHANNELS = ("choice", "thumbs", "emotion", "nudge")  # the reward channel's parts
CHUNK = 500  # contexts counted again per query

metadata = sa.MetaData()
tally_pairs = sa.Table(
    "tally_pairs",
    metadata,
    sa.Column("id", sa.String(300), primary_key=True),  # channel, the two turns (and a nudge's dimension)
    sa.Column("context", sa.String(32), nullable=False),
    sa.Column("channel", sa.String(16), nullable=False),
    sa.Index("tally_pairs_context", "context"),
    sa.Index("tally_pairs_channel", "channel"),
)
tally_conversations = sa.Table(
    "tally_conversations",
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),  # the session id, or `context:` and the turn's context
)


@dataclass(frozen=True)
class Given:
    """What people have given: conversations (the memory channel) and pairs per part of the reward channel."""

    conversations: int
    choice: int = 0
    thumbs: int = 0
    emotion: int = 0
    nudge: int = 0

    @property
    def pairs(self) -> int:
        return self.choice + self.thumbs + self.emotion + self.nudge


def _key(a: str, b: str) -> str:
    return "|".join(sorted((a, b)))


VALENCE = re.compile(r"valence ([+-]?\d+)")


def context_pairs(turn_ids: Iterable[str], feedback: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(id, channel) of every pair one conversation context makes (the module's rules), from its turns' ids
    and the feedback rows on them (`kind`, `turn`, `other`, `value`, `rater`), oldest first."""
    ids = set(turn_ids)
    out: list[tuple[str, str]] = []
    chosen: dict[str, set[str]] = defaultdict(set)
    for f in feedback:
        if f["kind"] == "choice" and f["other"] in ids and f["turn"] in ids:
            chosen[_key(f["turn"], f["other"])].add(f["turn"])
    compared = {k for k, c in chosen.items() if len(c) == 1}
    out += [(f"choice:{k}", "choice") for k in sorted(compared)]

    net: dict[str, int] = defaultdict(int)
    for f in feedback:
        if f["kind"] == "thumb" and f["turn"] in ids:
            net[f["turn"]] += 1 if f["value"] == "up" else -1
    up, down = sorted(t for t, n in net.items() if n > 0), sorted(t for t, n in net.items() if n < 0)
    for a, b in itertools.product(up, down):
        if (k := _key(a, b)) not in compared:
            compared.add(k)
            out.append((f"thumbs:{k}", "thumbs"))

    valence: dict[str, int] = {}
    for f in feedback:
        if f["kind"] == "emotion" and f["turn"] in ids and (m := VALENCE.search(f["value"] or "")):
            valence[f["turn"]] = int(m.group(1))  # the latest label of the turn
    for a, b in itertools.combinations(sorted(valence), 2):
        if valence[a] != valence[b] and (k := _key(a, b)) not in compared:
            out.append((f"emotion:{k}", "emotion"))

    latest: dict[tuple[str, str, str], str] = {}
    for f in feedback:
        if f["kind"] == "nudge" and f["turn"] in ids and f["value"]:
            direction, _, dimension = f["value"].partition(" ")
            latest[(f["rater"], f["turn"], dimension)] = direction
    seen: set[str] = set()
    for (rater, turn, dimension), direction in latest.items():
        for other in sorted(ids - {turn}):
            key = f"{dimension}:{_key(turn, other)}"
            if latest.get((rater, other, dimension)) == direction or key in seen:
                continue
            seen.add(key)
            out.append((f"nudge:{key}", "nudge"))
    return out


def recount(conn: sa.Connection, turns: sa.Table, feedback: sa.Table, contexts: set[str], insert: Any) -> None:
    """Count the pairs of `contexts` again from the index's rows (`insert`: the dialect's INSERT with
    ON CONFLICT, `core/sql.insert_for`)."""
    t, f = turns.c, feedback.c
    ordered = sorted(contexts)
    for i in range(0, len(ordered), CHUNK):
        chunk = ordered[i : i + CHUNK]
        members: dict[str, list[str]] = defaultdict(list)
        for turn_id, context in conn.execute(sa.select(t.id, t.context).where(t.context.in_(chunk))):
            members[context].append(turn_id)
        context_of = {turn_id: c for c, ids in members.items() for turn_id in ids}
        rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
        turn_ids = list(context_of)
        for j in range(0, len(turn_ids), 1000):
            select = (
                sa.select(f.kind, f.turn, f.other, f.value, f.rater)
                .where(f.turn.in_(turn_ids[j : j + 1000]))
                .order_by(f.time, f.id)
            )
            for r in conn.execute(select).mappings():
                rows[context_of[r["turn"]]].append(dict(r))
        pairs = [
            {"id": pid, "context": c, "channel": channel}
            for c, ids in members.items()
            for pid, channel in context_pairs(ids, rows[c])
        ]
        conn.execute(sa.delete(tally_pairs).where(tally_pairs.c.context.in_(chunk)))
        if pairs:
            conn.execute(insert(tally_pairs).on_conflict_do_nothing(index_elements=[tally_pairs.c.id]), pairs)


def add_conversations(conn: sa.Connection, turn_rows: list[dict[str, Any]], insert: Any) -> None:
    ids = [{"id": r["session"] or f"context:{r['context']}"} for r in turn_rows]
    if ids:
        conn.execute(
            insert(tally_conversations).on_conflict_do_nothing(index_elements=[tally_conversations.c.id]), ids
        )


def given(conn: sa.Connection) -> Given:
    """The counts as they stand."""
    by_channel = dict(
        conn.execute(sa.select(tally_pairs.c.channel, sa.func.count()).group_by(tally_pairs.c.channel)).all()
    )
    conversations = conn.execute(sa.select(sa.func.count()).select_from(tally_conversations)).scalar_one()
    return Given(conversations=int(conversations), **{c: int(by_channel.get(c, 0)) for c in CHANNELS})
