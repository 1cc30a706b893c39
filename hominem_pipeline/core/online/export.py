"""What one person gave, theirs to take: every turn they were served or recorded, every piece of feedback they gave,
and the preference pairs those make, in the project's pair format (`config/schemas/preference-pair.json`: the
format `hominem data import-preferences --format jsonl` reads back). `GET /me/data` answers it for the caller;
`hominem data export --rater ID` writes it for anyone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FEEDBACK_KINDS = ("choice", "thumb", "nudge", "emotion")
PAIR_SCHEMA = "https://hominem.dev/schemas/preference-pair.json"
PAIR_FIELDS = ("prompt", "chosen", "rejected", "tag", "strength", "note", "source", "weight", "rater", "pair_id")


def log_events(folder: Path) -> list[dict[str, Any]]:
    """Every event of the interaction log under `folder` (`<log_dir>/log`), oldest day first."""
    from hominem_pipeline.core.online.log import read_events

    return [e for path in sorted(Path(folder).glob("*.jsonl")) for e in read_events(path)]


def rater_data(events: Iterable[dict[str, Any]], rater: str) -> dict[str, Any]:
    """Everything `rater` gave: their turns, their feedback, and the pairs these make (as `human_feedback` makes
    them: a choice, thumbs on two replies to one message, ...), each pair in the project's pair format. A pair
    the service asked (a question) is theirs too: its replies are the pool's, not another person's."""
    from hominem_pipeline.core.online.feedback import feedback_tables

    events = list(events)
    theirs = [e for e in events if e.get("rater") == rater]
    feedback = [e for e in theirs if e.get("kind") in FEEDBACK_KINDS]
    referenced = {e.get(k) for e in feedback for k in ("turn", "chosen", "rejected")} - {None}
    turns = [e for e in events if e.get("kind") == "turn" and (e.get("rater") == rater or e.get("id") in referenced)]
    pairs = feedback_tables(turns + feedback).pairs if feedback else None
    rows = [] if pairs is None else pairs.to_dict(orient="records")
    return {
        "rater": rater,
        "exported_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "pair_schema": PAIR_SCHEMA,
        "pairs": [{k: _plain(r.get(k)) for k in PAIR_FIELDS if _plain(r.get(k)) is not None} for r in rows],
        "turns": [e for e in turns if e.get("rater") == rater],
        "feedback": feedback,
    }


def _plain(value: Any) -> Any:
    """A table cell as JSON: NaN and missing as None, numpy numbers as Python's."""
    if value is None:
        return None
    try:
        if value != value:  # NaN
            return None
    except (TypeError, ValueError):
        pass
    return value.item() if hasattr(value, "item") else value


def pair_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of one preference pair: what an export's pairs are, and what
    `hominem data import-preferences --format jsonl` reads (prompt, chosen, rejected; the rest optional)."""
    text = {"type": "string", "minLength": 1}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": PAIR_SCHEMA,
        "title": "Preference pair",
        "description": "One person's preference between two replies to the same conversation.",
        "type": "object",
        "required": ["prompt", "chosen", "rejected"],
        "properties": {
            "prompt": {**text, "description": "the conversation: one message, or a transcript of several"},
            "chosen": {**text, "description": "the reply preferred"},
            "rejected": {**text, "description": "the other reply"},
            "tag": {**text, "description": "what the pair is about: a dimension, or a quality like truth"},
            "strength": {"enum": ["slight", "clear", "strong"], "description": "how clearly chosen is better"},
            "note": {"type": "string", "description": "why, in the person's words"},
            "source": {**text, "description": "where the pair came from (feedback:choice, feedback:thumbs, ...)"},
            "weight": {"type": "number", "minimum": 0, "description": "how much the pair counts in training"},
            "rater": {**text, "description": "the person's pseudonymous id"},
            "pair_id": {**text, "description": "the pair's id in the project"},
        },
    }
