"""A day of the interaction log as training data: conversations, and human preference pairs.

- **Pairs** (the reward channel), in the columns of imported human pairs plus `weight` (and `asked_value`,
  `asked_by`: a question's expected information when the service asked it of this person, `GET /feedback/next`,
  and whether it was picked by information or at random):
  - a `choice` is a pair, weighted by its strength (slight 0.5, clear 1, strong 1.5); a choice asked
    again (`repeat_of`) and answered the same way stays one pair at the larger weight, one answered the
    other way drops both (the rater could not tell) and is counted as inconsistent;
  - of two replies to the same conversation, one thumbed up and one down, the up one is preferred
    (weight `THUMB_WEIGHT`), unless a choice already compares them;
  - of two replies to the same conversation labelled with different valence (the emotion labels), the
    warmer reaction is preferred, weighted by the gap and the reaction's arousal (`emotion_weight`),
    unless a choice or thumbs already compare them. A pair's `chosen_distress` says the person reacted
    to its chosen reply with distress (`distressing`): online updates give it safety 0.
- **Dimension pairs** (the reward model's dimensions, `dimension_pairs`): a nudge says the person wants more
  (or less) of a dimension than the nudged reply has. Against another reply to the same conversation
  (the page's two replies, a regenerated one), which the person did not nudge the same way, it orders the
  two on that dimension alone: after "more empathy" on r, its sibling s has more empathy than r ("less":
  r has more than s). Such a pair is tagged with the dimension and `scalar` false: it pulls that
  dimension's head of the reward model, never the scalar (it does not say s is the better reply), and
  no policy reads it (the online updates read nudges as pressure, `nudges.py`). Weight `NUDGE_PAIR_WEIGHT`.
  A nudge on a reply with no sibling makes no pair.
- **Conversations** (the memory channel): one row per served turn with its feedback gathered: thumbs,
  nudges, emotion labels (and their emotion vector, `emotion_vector`), and how often it was chosen or rejected.

The prompt of a pair is the user's message when the conversation is one message long, else the
conversation as a transcript ("\\n\\nHuman: ... \\n\\nAssistant:"), as imported HH-RLHF pairs have it.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pydantic import ValidationError

from hominem_pipeline.core.online.events import (
    EVENT,
    STRENGTHS,
    Choice,
    Emotion,
    Message,
    Nudge,
    Thumb,
    Turn,
)

log = logging.getLogger(__name__)

THUMB_WEIGHT = STRENGTHS["slight"]  # an up and a down are absolute judgements: a weaker pair than a choice
NUDGE_PAIR_WEIGHT = STRENGTHS[
    "slight"
]  # a nudge is about one reply: its order against a sibling is inferred, a weak pair
PAIR_COLUMNS = [
    "pair_id",
    "prompt_id",
    "prompt",
    "chosen",
    "rejected",
    "source",
    "source_file",
    "source_row",
    "weight",
    "strength",
    "rater",
    "chosen_turn",
    "rejected_turn",
    "note",
    "asked_value",
    "asked_by",
    "chosen_distress",
]
CONVERSATION_COLUMNS = [
    "turn",
    "session",
    "context",
    "time",
    "rater",
    "prompt",
    "messages",
    "reply",
    "model",
    "adapter",
    "reward_model",
    "scalar",
    "finish_reason",
    "thumbs_up",
    "thumbs_down",
    "nudges",
    "valence",
    "emotion_tags",
    "emotion",
    "chosen",
    "rejected",
]
DIMENSION_PAIR_COLUMNS = [*PAIR_COLUMNS, "tag", "scalar"]
ROLES = {"user": "Human", "assistant": "Assistant", "system": "System"}


@dataclass(frozen=True)
class FeedbackTables:
    pairs: pd.DataFrame
    conversations: pd.DataFrame
    stats: dict[str, Any]
    dimension_pairs: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=DIMENSION_PAIR_COLUMNS)
    )  # nudges' pairs (above)


EMOTION_AXES = ("valence", "arousal", "discrepancy", "prospect", "reflection", "social_broadcast")


def emotion_vector(valence: int | None, tags: Sequence[str]) -> dict[str, float]:
    """A reply's emotion labels as an emotion vector, each axis in [-1, 1] (0: not
    said): valence / 2; arousal +1 high, -1 low; predictive discrepancy 1; prospect- or reflection-heavy
    1; social broadcast +1 high, -1 low."""
    t = set(tags)
    return {
        "valence": 0.0 if valence is None else valence / 2,
        "arousal": float(("high_arousal" in t) - ("low_arousal" in t)),
        "discrepancy": float("predictive_discrepancy" in t),
        "prospect": float("prospect_heavy" in t),
        "reflection": float("reflection_heavy" in t),
        "social_broadcast": float(("high_social_broadcast" in t) - ("low_social_broadcast" in t)),
    }


def distressing(label: Emotion) -> bool:
    """A reaction of distress: the most negative valence, or a negative one with high arousal. Such a reply's
    safety score is lowered where it is the chosen reply of a pair (online updates' safety gate)."""
    return distress(label.valence, label.tags)


def distress(valence: int | None, tags: Sequence[str]) -> bool:
    """`distressing` on a reaction's valence and tags."""
    return valence is not None and not pd.isna(valence) and (valence <= -2 or (valence < 0 and "high_arousal" in tags))


def emotion_weight(warmer: Emotion, colder: Emotion) -> float:
    """An emotion pair's weight: each step of valence between the two reactions a quarter of a clear
    choice's (-2 against +2 weighs as much as a clear choice), half as much again when either reaction was
    high-arousal (the strength of the reaction), at most a strong choice's."""
    gap = (warmer.valence - colder.valence) / 4 * STRENGTHS["clear"]
    aroused = "high_arousal" in warmer.tags or "high_arousal" in colder.tags
    return min(STRENGTHS["strong"], gap * (1.5 if aroused else 1.0))


def transcript(messages: Sequence[tuple[str, str]]) -> str:
    """(role, content) messages as a preference pair's prompt reads: the message alone, or the HH-style transcript."""
    if len(messages) == 1:
        return messages[0][1]
    return "".join(f"\n\n{ROLES[role]}: {content}" for role, content in messages) + "\n\nAssistant:"


def pair_prompt(messages: list[Message]) -> str:
    return transcript([(m.role, m.content) for m in messages])


@dataclass
class _Parsed:
    """One day's events parsed, with where each came from."""

    events: list[Turn | Thumb | Choice | Nudge | Emotion]
    rows_of: dict[str, int]  # event id -> its line in the day's file
    skipped: int  # events that are not turns or feedback of this version
    source_file: str
    turns: dict[str, Turn] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.turns = {e.id: e for e in self.events if isinstance(e, Turn)}

    def pair(self, pair_id: str, chosen: Turn, rejected: Turn, source: str, weight: float, event: Any) -> dict:
        """A pair row from two turns, credited to the feedback `event` that made it."""
        strength = event.strength if isinstance(event, Choice) else None
        note = event.note if isinstance(event, Choice) else None
        row = self.rows_of[event.id]
        out = _pair(pair_id, chosen, rejected, source, weight, strength, event.rater, note, self.source_file, row)
        asked = event.asked if isinstance(event, Choice) else None
        if asked:  # how the service picked it for this person (the turns' sampling is the first asker's)
            out |= {"asked_value": float(asked["value"]), "asked_by": str(asked["by"])}
        return out


def _parse(events: list[dict[str, Any]], source_file: str) -> _Parsed:
    parsed: list[Turn | Thumb | Choice | Nudge | Emotion] = []
    rows_of: dict[str, int] = {}
    skipped = 0
    for row, raw in enumerate(events):
        try:
            parsed.append(EVENT.validate_python(raw))
            rows_of[parsed[-1].id] = row
        except ValidationError:
            skipped += 1
    return _Parsed(parsed, rows_of, skipped, source_file)


def _kept_choices(choices: list[Choice]) -> tuple[dict[str, Choice], int, int]:
    """The choices a pair is made of: a repeat answered the same way keeps the pair once, at the larger strength;
    a flipped one drops both. Returns (kept by id, consistent repeats, inconsistent ones)."""
    by_id = {c.id: c for c in choices}
    kept: dict[str, Choice] = {c.id: c for c in choices if c.repeat_of is None}
    consistent = inconsistent = 0
    for repeat in (c for c in choices if c.repeat_of is not None):
        first = by_id.get(repeat.repeat_of)
        if first is None or first.id not in kept:
            continue
        if first.chosen == repeat.chosen:
            consistent += 1
            if STRENGTHS[repeat.strength] > STRENGTHS[first.strength]:
                kept[first.id] = first.model_copy(update={"strength": repeat.strength})
        else:
            inconsistent += 1
            del kept[first.id]
    return kept, consistent, inconsistent


def _choice_pairs(day: _Parsed, kept: dict[str, Choice], compared: set[frozenset[str]]) -> tuple[list[dict], int]:
    """A pair per kept choice whose two turns are known; (pairs, choices on unknown turns)."""
    turns, pairs, missing = day.turns, [], 0
    for choice in kept.values():
        chosen, rejected = turns.get(choice.chosen), turns.get(choice.rejected)
        if chosen is None or rejected is None:
            missing += 1
            continue
        compared.add(frozenset((chosen.id, rejected.id)))
        pairs.append(day.pair(choice.id, chosen, rejected, "feedback:choice", STRENGTHS[choice.strength], choice))
    return pairs, missing


def _by_context(turns: dict[str, Turn], ids: Any) -> dict[str, list[Turn]]:
    """The turns `ids` grouped by the messages they answer."""
    grouped: dict[str, list[Turn]] = defaultdict(list)
    for turn_id in ids:
        grouped[turns[turn_id].context].append(turns[turn_id])
    return grouped


def _thumb_pairs(day: _Parsed, compared: set[frozenset[str]]) -> list[dict[str, Any]]:
    """One reply with more thumbs up and another to the same message with more down, not chosen between: a pair."""
    turns = day.turns
    thumbs: dict[str, list[Thumb]] = defaultdict(list)
    for e in day.events:
        if isinstance(e, Thumb) and e.turn in turns:
            thumbs[e.turn].append(e)
    net = {turn: sum(1 if t.value == "up" else -1 for t in ts) for turn, ts in thumbs.items()}
    pairs = []
    for context_turns in _by_context(turns, [t for t, score in net.items() if score != 0]).values():
        for a, b in itertools.combinations(context_turns, 2):
            if net[a.id] * net[b.id] >= 0 or frozenset((a.id, b.id)) in compared:
                continue  # both up, both down, or already chosen between
            up, down = (a, b) if net[a.id] > 0 else (b, a)
            compared.add(frozenset((up.id, down.id)))
            pairs.append(
                day.pair(f"thumbs-{up.id}-{down.id}", up, down, "feedback:thumbs", THUMB_WEIGHT, thumbs[up.id][-1])
            )
    return pairs


def _emotion_pairs(day: _Parsed, compared: set[frozenset[str]]) -> tuple[list[dict[str, Any]], dict[str, Emotion]]:
    """Two replies to one message whose reactions differ in valence, not compared otherwise: a pair weighted by
    the gap (`emotion_weight`). Also each turn's latest reaction."""
    turns = day.turns
    labelled = {e.turn: e for e in day.events if isinstance(e, Emotion) and e.turn in turns and e.valence is not None}
    pairs = []
    for context_turns in _by_context(turns, labelled).values():
        for a, b in itertools.combinations(context_turns, 2):
            va, vb = labelled[a.id].valence, labelled[b.id].valence
            if va == vb or frozenset((a.id, b.id)) in compared:
                continue
            hi, lo = (a, b) if va > vb else (b, a)
            weight = emotion_weight(labelled[hi.id], labelled[lo.id])
            pairs.append(day.pair(f"emotion-{hi.id}-{lo.id}", hi, lo, "feedback:emotion", weight, labelled[hi.id]))
    return pairs, labelled


def feedback_tables(events: list[dict[str, Any]], source_file: str = "") -> FeedbackTables:
    """Parse one day's events (unknown or malformed ones are counted and skipped) into pairs and
    conversations. Feedback on a turn of an earlier day is kept when the turn is among `events`."""
    day = _parse(events, source_file)
    turns = day.turns
    choices = [e for e in day.events if isinstance(e, Choice)]
    kept, consistent, inconsistent = _kept_choices(choices)
    compared: set[frozenset[str]] = set()
    pairs, missing_turns = _choice_pairs(day, kept, compared)
    pairs += _thumb_pairs(day, compared)
    emotion, labelled = _emotion_pairs(day, compared)
    pairs += emotion
    distress = {t for t, e in labelled.items() if distressing(e)}
    for p in pairs:
        p["chosen_distress"] = p["chosen_turn"] in distress
    conversations = _conversations(day.events, turns)
    dimension_pairs, lone_nudges = _nudge_pairs(day.events, turns, source_file, day.rows_of)
    # a conversation: the client's session, else the messages a turn answers (two replies to one message are one)
    sessions = conversations["session"].fillna("context:" + conversations["context"]) if len(conversations) else None
    stats = {
        "turns": len(turns),
        "conversations": int(sessions.nunique()) if sessions is not None else 0,
        "pairs": len(pairs),
        "choices": len(choices),
        "repeats": consistent + inconsistent,
        "repeats_consistent": consistent,
        "repeats_inconsistent": inconsistent,
        "thumb_pairs": sum(p["source"] == "feedback:thumbs" for p in pairs),
        "emotion_pairs": sum(p["source"] == "feedback:emotion" for p in pairs),
        "distressing_replies": len(distress),
        "nudge_pairs": len(dimension_pairs),
        "nudges_without_sibling": lone_nudges,
        "feedback_on_unknown_turns": missing_turns,
        "events_skipped": day.skipped,
        "raters": len({e.rater for e in day.events if not isinstance(e, Turn)}),
        "events": dict(Counter(type(e).__name__.lower() for e in day.events)),
    }
    if day.skipped:
        where = source_file or "the log"
        log.warning("%s: %d event(s) that are not turns or feedback of this version were skipped", where, day.skipped)
    return FeedbackTables(
        pd.DataFrame(pairs, columns=PAIR_COLUMNS),
        conversations,
        stats,
        pd.DataFrame(dimension_pairs, columns=DIMENSION_PAIR_COLUMNS),
    )


def liked_replies(conversations: pd.DataFrame) -> tuple[list[dict[str, Any]], set[str]]:
    """The replies people liked as memory rows (explicit feedback as SFT targets): each
    turn with more thumbs up than down, finished (`stop`), not empty and not marked distressing, as
    `{"prompt", "response", "turn", "time", "source": "thumbs_up"}` (the prompt as a pair's: the message,
    or the conversation as a transcript), from `feedback_tables`' conversations. Also every turn id among
    them, liked or not (`facts.write_liked`)."""
    rows = []
    for c in conversations.itertuples():
        if (
            c.thumbs_up > c.thumbs_down
            and c.finish_reason == "stop"
            and str(c.reply).strip()
            and not distress(c.valence, list(c.emotion_tags))
        ):
            rows.append(
                {
                    "prompt": transcript([(m["role"], m["content"]) for m in c.messages]),
                    "response": c.reply,
                    "turn": c.turn,
                    "time": c.time,
                    "source": "thumbs_up",
                }
            )
    return rows, set(conversations["turn"])


def _nudge_pairs(
    parsed: list[Any], turns: dict[str, Turn], source_file: str, rows_of: dict[str, int]
) -> tuple[list[dict[str, Any]], int]:
    """The nudges' dimension pairs (module docstring), and how many nudges had no sibling reply. A person's
    latest nudge on a reply and dimension counts."""
    latest: dict[tuple[str, str, str], Nudge] = {}
    for e in parsed:
        if isinstance(e, Nudge) and e.turn in turns:
            latest[(e.rater, e.turn, e.dimension)] = e
    siblings: dict[str, list[Turn]] = defaultdict(list)
    for t in turns.values():
        siblings[t.context].append(t)
    out: list[dict[str, Any]] = []
    seen: set[tuple[frozenset[str], str]] = set()
    lone = 0
    for (rater, turn_id, dimension), nudge in latest.items():
        nudged = turns[turn_id]
        others = [s for s in siblings[nudged.context] if s.id != turn_id]
        lone += not others
        for other in others:
            same_way = latest.get((rater, other.id, dimension))
            key = (frozenset((turn_id, other.id)), dimension)
            if (same_way is not None and same_way.direction == nudge.direction) or key in seen:
                continue  # both asked the same way: no order between them; or ordered already
            seen.add(key)
            more, less = (other, nudged) if nudge.direction == "more" else (nudged, other)
            out.append(
                _pair(
                    f"nudge-{nudge.id}-{other.id}",
                    more,
                    less,
                    "feedback:nudge",
                    NUDGE_PAIR_WEIGHT,
                    None,
                    rater,
                    None,
                    source_file,
                    rows_of[nudge.id],
                )
                | {"chosen_distress": False, "tag": dimension, "scalar": False}
            )
    return out, lone


def _pair(
    pair_id: str,
    chosen: Turn,
    rejected: Turn,
    source: str,
    weight: float,
    strength: str | None,
    rater: str,
    note: str | None,
    source_file: str,
    source_row: int,
) -> dict[str, Any]:
    # a question the service asked (GET /feedback/next) records its expected information when asked
    sampling = chosen.sampling if chosen.model == "question" and isinstance(chosen.sampling, dict) else {}
    asked = sampling.get("value")
    return {
        "pair_id": pair_id,
        "prompt_id": chosen.context,
        "prompt": pair_prompt(chosen.messages),
        "chosen": chosen.reply,
        "rejected": rejected.reply,
        "source": source,
        "source_file": source_file,
        "source_row": source_row,
        "weight": weight,
        "strength": strength,
        "rater": rater,
        "chosen_turn": chosen.id,
        "rejected_turn": rejected.id,
        "note": note,
        "asked_value": None if asked is None else float(asked),
        "asked_by": sampling.get("by"),
    }


def _conversations(parsed: list[Any], turns: dict[str, Turn]) -> pd.DataFrame:
    gathered: dict[str, dict[str, Any]] = {
        t.id: {
            "turn": t.id,
            "session": t.session,
            "context": t.context,
            "time": t.time,
            "rater": t.rater,
            "prompt": t.prompt,
            "messages": [m.model_dump() for m in t.messages],
            "reply": t.reply,
            "model": t.model,
            "adapter": t.adapter,
            "reward_model": t.reward_model,
            "scalar": (t.reward or {}).get("scalar"),
            "finish_reason": t.finish_reason,
            "thumbs_up": 0,
            "thumbs_down": 0,
            "nudges": [],
            "valence": None,
            "emotion_tags": [],
            "emotion": None,
            "chosen": 0,
            "rejected": 0,
        }
        for t in turns.values()
    }
    for e in parsed:
        if isinstance(e, Thumb) and e.turn in gathered:
            gathered[e.turn]["thumbs_up" if e.value == "up" else "thumbs_down"] += 1
        elif isinstance(e, Nudge) and e.turn in gathered:
            gathered[e.turn]["nudges"].append(f"{e.direction} {e.dimension}")
        elif isinstance(e, Emotion) and e.turn in gathered:
            row = gathered[e.turn]
            row["valence"] = e.valence if e.valence is not None else row["valence"]
            row["emotion_tags"] = sorted(set(row["emotion_tags"]) | set(e.tags))
            row["emotion"] = json.dumps(emotion_vector(row["valence"], row["emotion_tags"]))
        elif isinstance(e, Choice):
            for turn_id, side in ((e.chosen, "chosen"), (e.rejected, "rejected")):
                if turn_id in gathered:
                    gathered[turn_id][side] += 1
    return pd.DataFrame(list(gathered.values()), columns=CONVERSATION_COLUMNS)


def served_trajectories(events: list[dict[str, Any]], limit: int) -> list[Any]:
    """Up to `limit` replies the student served (turns of the served models, finished, not empty) as
    trajectories the teacher rates beside its own candidates: first those people gave feedback on (a
    thumb, a choice, a nudge or an emotion), then the newest. Each keeps its turn id (`trajectory_id`
    `turn-<id>`); a conversation is one prompt (`prompt_id` `served-<context>`), with the pair's prompt."""
    from hominem_pipeline.core.common.schema import Trajectory
    from hominem_pipeline.core.online.events import BASE, SERVED, turns_of

    if limit <= 0:
        return []
    parsed = []
    for raw in events:
        try:
            parsed.append(EVENT.validate_python(raw))
        except ValidationError:
            continue
    turns = [
        e
        for e in parsed
        if isinstance(e, Turn) and e.model in (SERVED, BASE) and e.finish_reason != "cancelled" and e.reply.strip()
    ]
    rated = {t for e in parsed if not isinstance(e, Turn) for t in turns_of(e)}
    newest = sorted(turns, key=lambda t: t.time, reverse=True)
    picked = sorted(newest, key=lambda t: t.id not in rated)[:limit]  # stable: the rated first, each part newest first
    index: dict[str, int] = defaultdict(int)
    out = []
    for t in sorted(picked, key=lambda t: t.time):
        out.append(
            Trajectory(
                trajectory_id=f"turn-{t.id}",
                prompt_id=f"served-{t.context}",
                prompt=pair_prompt(t.messages),
                category="served",
                difficulty=0,
                candidate_index=index[t.context],
                style=f"served:{t.model}",
                temperature=float(t.sampling.get("temperature") or 0.0),
                top_p=float(t.sampling.get("top_p") or 1.0),
                response=t.reply,
                new_tokens=t.completion_tokens,
                finished=t.finish_reason == "stop",
            )
        )
        index[t.context] += 1
    return out
