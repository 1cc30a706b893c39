"""What the service remembers of the log: recent turns by id, and each rater's pairwise choices.

It checks that feedback refers to turns that exist (a choice: two different replies to the same
conversation; a repeat: an earlier choice of the same rater, about the same two replies), picks
earlier choices to ask again, and reports each rater's consistency: of the choices asked again, the
share where the same reply won.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from hominem_pipeline.core.online.events import (
    EVENT,
    Choice,
    Emotion,
    Nudge,
    Thumb,
    Turn,
)


class FeedbackError(ValueError):
    """Feedback that cannot be accepted; `field` names the part of the request that is wrong."""

    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(message)
        self.field, self.status = field, status


class Ledger:
    def __init__(self, dimensions: Iterable[str]):
        self.dimensions = list(dimensions)
        self.turns: dict[str, Turn] = {}
        self.choices: dict[str, Choice] = {}
        self.repeated: set[str] = set()  # choices already asked again
        self._choices_by: dict[str, list[str]] = {}  # choice ids by rater, in the order given

    def load(self, events: Iterable[dict[str, Any]]) -> int:
        """Remember logged events (unknown or malformed ones are skipped: the log outlives versions)."""
        n = 0
        for raw in events:
            try:
                self.add(EVENT.validate_python(raw))
                n += 1
            except ValidationError:
                continue
        return n

    def add(self, event: Turn | Thumb | Choice | Nudge | Emotion) -> None:
        if isinstance(event, Turn):
            self.turns[event.id] = event
        elif isinstance(event, Choice):
            if event.id not in self.choices:
                self._choices_by.setdefault(event.rater, []).append(event.id)
            self.choices[event.id] = event
            if event.repeat_of:
                self.repeated.add(event.repeat_of)

    def forget(self, rater: str) -> None:
        """Drop what `rater` gave from memory (they were forgotten: their feedback refers to nothing now)."""
        self.turns = {k: t for k, t in self.turns.items() if t.rater != rater}
        self.choices = {k: c for k, c in self.choices.items() if c.rater != rater}
        self._choices_by.pop(rater, None)
        self.repeated &= set(self.choices)

    def choices_by(self, rater: str) -> list[Choice]:
        """The rater's choices, in the order given (read from an index: no scan of everyone's)."""
        return [self.choices[i] for i in self._choices_by.get(rater, [])]

    def _turn(self, turn_id: str, field: str) -> Turn:
        turn = self.turns.get(turn_id)
        if turn is None:
            raise FeedbackError(
                field,
                f"{field} {turn_id!r} is not a turn this service wrote (recently); use the `turn` id a "
                "reply came with",
                404,
            )
        return turn

    def check(self, feedback: Thumb | Choice | Nudge | Emotion) -> None:
        """Raise FeedbackError when the feedback cannot be accepted as it is."""
        if isinstance(feedback, Choice):
            chosen, rejected = self._turn(feedback.chosen, "chosen"), self._turn(feedback.rejected, "rejected")
            if chosen.id == rejected.id:
                raise FeedbackError(
                    "rejected", f"chosen and rejected are the same turn {chosen.id!r}; a choice is between two replies"
                )
            if chosen.context != rejected.context:
                raise FeedbackError(
                    "rejected",
                    f"turns {chosen.id!r} and {rejected.id!r} answer different conversations; "
                    "a choice compares two replies to the same one",
                )
            if feedback.repeat_of is not None:
                earlier = self.choices.get(feedback.repeat_of)
                if earlier is None:
                    raise FeedbackError("repeat_of", f"repeat_of {feedback.repeat_of!r} is not an earlier choice", 404)
                if {earlier.chosen, earlier.rejected} != {chosen.id, rejected.id}:
                    raise FeedbackError(
                        "repeat_of",
                        f"choice {earlier.id!r} was between other replies; a repeat asks the same two again",
                    )
                if earlier.rater != feedback.rater:
                    raise FeedbackError(
                        "repeat_of",
                        f"choice {earlier.id!r} was another rater's; a repeat asks a rater their own choice again",
                    )
        else:
            self._turn(feedback.turn, "turn")
        if isinstance(feedback, Nudge) and feedback.dimension not in self.dimensions:
            raise FeedbackError(
                "dimension",
                f"dimension {feedback.dimension!r} is not configured; use one of: {', '.join(self.dimensions)}",
            )
        if isinstance(feedback, Emotion) and feedback.valence is None and not feedback.tags:
            raise FeedbackError("valence", "an emotion label needs a valence (-2..2) or at least one tag")

    def repeat_for(self, rater: str, rate: float, rng: random.Random) -> dict[str, Any] | None:
        """With probability `rate`, one of `rater`'s earlier choices not yet asked again, the two
        replies in swapped order (what the page shows as A and B); else None."""
        if rate <= 0 or rng.random() >= rate:
            return None
        open_choices = [
            c
            for c in self.choices_by(rater)
            if c.repeat_of is None
            and c.id not in self.repeated
            and c.chosen in self.turns
            and c.rejected in self.turns
        ]
        if not open_choices:
            return None
        earlier = rng.choice(open_choices)
        a, b = self.turns[earlier.rejected], self.turns[earlier.chosen]
        return {
            "repeat_of": earlier.id,
            "messages": [m.model_dump() for m in a.messages],
            "a": {"turn": a.id, "text": a.reply},
            "b": {"turn": b.id, "text": b.reply},
        }

    def consistency(self, rater: str | None = None) -> dict[str, dict[str, Any]]:
        """Per rater: choices made, how many were asked again, and the share answered the same way."""
        out: dict[str, dict[str, Any]] = {}
        for c in self.choices.values():
            if rater is not None and c.rater != rater:
                continue
            row = out.setdefault(c.rater, {"choices": 0, "repeats": 0, "consistent": 0, "consistency": None})
            if c.repeat_of is None:
                row["choices"] += 1
                continue
            earlier = self.choices.get(c.repeat_of)
            if earlier is None:
                continue
            row["repeats"] += 1
            row["consistent"] += int(earlier.chosen == c.chosen)
        for row in out.values():
            row["consistency"] = row["consistent"] / row["repeats"] if row["repeats"] else None
        return out
