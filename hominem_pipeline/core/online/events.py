"""What the interaction log holds: served turns and people's feedback on them.

A `Turn` is one reply the service wrote: the conversation it answered, the reply, which adapter and
reward model served it, and (when scored) its reward. Feedback refers to turns by id:

- `thumb`: up or down on one reply;
- `choice`: of two replies to the same conversation, which one is better and how clearly (slight,
  clear, strong), optionally why; a `repeat_of` choice asks an earlier pair again (order swapped) and
  measures the rater's consistency;
- `nudge`: one reply should have had more or less of a dimension ("more empathy");
- `emotion`: the design's emotion labels for a reply (valence -2..+2, arousal, predictive discrepancy,
  prospect- or reflection-heavy, high or low social broadcast).

Every event has `id` (a client may set it, as an idempotency key), `time` (UTC, set by the service)
and `rater` (a pseudonymous id derived from the caller's token).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SERVED, BASE = (
    "hominem",
    "hominem-base",
)  # the model names `hominem serve` answers as: the student with the live adapter, the base alone
STRENGTHS = {"slight": 0.5, "clear": 1.0, "strong": 1.5}  # a choice's weight as a training pair
EMOTION_TAGS = (
    "high_arousal",
    "low_arousal",
    "predictive_discrepancy",
    "prospect_heavy",
    "reflection_heavy",
    "high_social_broadcast",
    "low_social_broadcast",
)
MAX_TEXT = 20_000  # characters of a note
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,100}$"


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(
        pattern=ID_PATTERN,
        description="Unique id; posting an id the log already holds writes nothing and acknowledges it again.",
    )
    time: str = Field(description="When the service accepted it, UTC ISO 8601.")
    rater: str = Field(
        description="Pseudonymous id of whoever sent it (derived from the bearer token; `local` on loopback without "
        "tokens)."
    )


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class Turn(_Event):
    kind: Literal["turn"] = "turn"
    session: str | None = Field(default=None, description="The client's conversation id, if it sent one.")
    messages: list[Message] = Field(
        min_length=1, description="The conversation the reply answers, the user's last message last."
    )
    reply: str
    model: str = Field(description="The served model name the request asked for.")
    adapter: str | None = Field(
        description="The adapter that wrote the reply (its folder relative to the data folder); null: the base."
    )
    reward_model: str | None = Field(default=None, description="The reward model that scored it; null: not scored.")
    reward: dict[str, Any] | None = Field(
        default=None, description="The reply's scores: vector, scalar, reward_intensity, safety_score, uncertainty."
    )
    sampling: dict[str, Any] = Field(description="temperature, top_p, max_tokens and seed of the reply.")
    finish_reason: Literal["stop", "length", "cancelled"]
    completion_tokens: int = Field(ge=0)
    context: str = Field(description="Digest of `messages`: two turns with one context answer the same conversation.")

    @property
    def prompt(self) -> str:
        """The user's last message (what a single-turn preference pair calls the prompt)."""
        return next(m.content for m in reversed(self.messages) if m.role == "user")


def context_digest(messages: list[Message] | list[dict[str, Any]]) -> str:
    plain = [
        m.model_dump() if isinstance(m, BaseModel) else {"role": m["role"], "content": m["content"]} for m in messages
    ]
    return hashlib.sha256(json.dumps(plain, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]


def new_turn(rater: str, messages: list[dict[str, Any]], reply: str, **fields: Any) -> Turn:
    """A turn the service writes now: a new id (unless `fields` gives one), the time, the context digest of
    `messages`; `fields` the rest of Turn's (model, adapter, sampling, ...), where a reply finished and wrote no
    tokens unless they say otherwise."""
    import datetime as dt
    import uuid

    made = {
        "id": uuid.uuid4().hex,
        "time": dt.datetime.now(dt.timezone.utc).isoformat(),
        "adapter": None,
        "sampling": {},
        "finish_reason": "stop",
        "completion_tokens": 0,
    }
    return Turn(**(made | fields), rater=rater, messages=messages, reply=reply, context=context_digest(messages))


class _Feedback(_Event):
    note: str | None = Field(default=None, max_length=MAX_TEXT, description="Why, in the rater's words (optional).")


class Thumb(_Feedback):
    kind: Literal["thumb"]
    turn: str = Field(pattern=ID_PATTERN, description="The turn rated.")
    value: Literal["up", "down"]


class Choice(_Feedback):
    kind: Literal["choice"]
    chosen: str = Field(pattern=ID_PATTERN, description="The better turn.")
    rejected: str = Field(pattern=ID_PATTERN, description="The worse turn, a reply to the same conversation.")
    strength: Literal["slight", "clear", "strong"] = Field(
        description="How clearly chosen is better: slight | clear | strong."
    )
    repeat_of: str | None = Field(
        default=None, pattern=ID_PATTERN, description="The earlier choice this one asks again (consistency)."
    )
    asked: dict[str, Any] | None = Field(
        default=None,
        description="Set by the service, not the client: how it picked this pair when it asked this person "
        "(`GET /feedback/next`): by (information | random) and value (expected information, bits). Null: not "
        "asked, or asked before the service restarted.",
    )


class Nudge(_Feedback):
    kind: Literal["nudge"]
    turn: str = Field(pattern=ID_PATTERN)
    dimension: str = Field(description="A configured dimension, e.g. empathy.")
    direction: Literal["more", "less"]


class Emotion(_Feedback):
    kind: Literal["emotion"]
    turn: str = Field(pattern=ID_PATTERN)
    valence: int | None = Field(
        default=None, ge=-2, le=2, description="-2 (very negative) to +2 (very positive); null: not given."
    )
    tags: list[Literal[EMOTION_TAGS]] = Field(
        default_factory=list, description="Any of: " + ", ".join(EMOTION_TAGS) + "."
    )  # type: ignore[valid-type]


Feedback = Annotated[Union[Thumb, Choice, Nudge, Emotion], Field(discriminator="kind")]
Event = Annotated[Union[Turn, Thumb, Choice, Nudge, Emotion], Field(discriminator="kind")]
EVENT = TypeAdapter(Event)
FEEDBACK = TypeAdapter(Feedback)


def turns_of(feedback: Thumb | Choice | Nudge | Emotion) -> list[str]:
    """The turn ids a piece of feedback refers to."""
    return [feedback.chosen, feedback.rejected] if isinstance(feedback, Choice) else [feedback.turn]


_REDACTIONS = [
    ("[email]", re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")),
    ("[ip]", re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")),
]
_CARD = re.compile(r"(?<![\w])(?:\d[ -]?){12,18}\d(?![\w])")
_PHONE = re.compile(r"(?<![\w+])\+?\(?\d[\d ().-]{5,18}\d(?![\w])")
_DATE_OR_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}$|^\d{1,2}[:.]\d{2}$|^\d{1,3}(?:[.,]\d{3})+(?:\.\d+)?$")


def _phone(match: re.Match[str]) -> str:
    text = match.group(0)
    digits = sum(c.isdigit() for c in text)
    return "[phone]" if 7 <= digits <= 15 and not _DATE_OR_TIME.match(text.strip()) else text


def _card(match: re.Match[str]) -> str:
    """A card number passes the Luhn check; another long number (an order, an ISBN) is left to the phone pass."""
    digits = [int(c) for c in match.group(0) if c.isdigit()][::-1]
    total = sum(d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2) for i, d in enumerate(digits))
    return "[card]" if total % 10 == 0 else match.group(0)


def redact(text: str) -> str:
    """E-mail addresses, card numbers (13-19 digits passing the Luhn check), IPv4 addresses and phone numbers (7-15
    digits, not a date) replaced by [email], [card], [ip], [phone]. Names are not found: no offline NER model does it
    here (`benchmarks/redaction.py` measures these patterns against presidio and scrubadub)."""
    for label, pattern in _REDACTIONS:
        text = pattern.sub(label, text)
    text = _CARD.sub(_card, text)
    return _PHONE.sub(_phone, text)
