"""The service's contract: every request body, response and stream chunk, as pydantic models (as vLLM's
protocol.py). Routes declare them, so /docs shows each one; the OpenAI ones mirror OpenAI's fields, with
`turn` (the reply's id in the interaction log) added."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hominem_pipeline.core.online.events import ID_PATTERN, MAX_TEXT

MAX_MESSAGE = 100_000  # characters of one message


class ChatMessage(BaseModel):
    """An OpenAI chat message; `content` may be text or a list of text parts."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[dict[str, Any]]

    @field_validator("content")
    @classmethod
    def _text(cls, value: str | list[dict[str, Any]]) -> str:
        if isinstance(value, list):
            kinds = {p.get("type") for p in value}
            if kinds - {"text"}:
                raise ValueError(f"only text parts are supported, got {sorted(k for k in kinds if k != 'text')}")
            value = "".join(str(p.get("text", "")) for p in value)
        if len(value) > MAX_MESSAGE:
            raise ValueError(f"a message of {len(value):,} characters is longer than the {MAX_MESSAGE:,} accepted")
        return value

    def plain(self) -> dict[str, str]:
        return {"role": "system" if self.role == "developer" else self.role, "content": self.content}  # type: ignore[dict-item]


def _check_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    if not messages:
        raise ValueError("messages is empty; send at least one user message")
    if messages[-1].role != "user":
        raise ValueError(f"the last message is the {messages[-1].role}'s; the service answers a user message")
    if not str(messages[-1].content).strip():
        raise ValueError("the last user message is empty; there is nothing to answer")
    return messages


def _prompt_or_messages(body: Any) -> None:
    """`prompt` (one user message) or `messages`, exactly one; `messages` filled from `prompt`."""
    if (body.messages is None) == (body.prompt is None):
        raise ValueError("send either `prompt` (one user message) or `messages` (a conversation), not both or neither")
    if body.prompt is not None:
        body.messages = [ChatMessage(role="user", content=body.prompt)]
    _check_messages(body.messages or [])


class ChatCompletionRequest(BaseModel):
    """OpenAI Chat Completions (the fields the service uses; others a client may send are ignored)."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(
        description="`hominem` (the served adapter) or `hominem-base` (the adapter off); GET /v1/models lists them."
    )
    messages: list[ChatMessage]
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=8)
    seed: int | None = None
    stop: str | list[str] | None = None
    user: str | None = Field(default=None, max_length=200, description="Kept in the log as the session id.")

    _messages = field_validator("messages")(_check_messages)

    @model_validator(mode="after")
    def _no_stop(self) -> ChatCompletionRequest:
        if self.stop:
            raise ValueError(
                "stop sequences are not supported; leave `stop` out (replies end at the end of turn or max_tokens)"
            )
        return self


class GenerateRequest(BaseModel):
    """One turn from the page or a script: replies, each with its turn id and (with a reward model) scores."""

    model_config = ConfigDict(extra="forbid")

    messages: list[ChatMessage] | None = Field(
        default=None, description="The conversation, the user's last message last."
    )
    prompt: str | None = Field(default=None, description="A single user message (instead of messages).")
    n: int = Field(default=1, ge=1, le=4, description="Replies to write (2: a pair to choose between).")
    adapter: bool = Field(default=True, description="false: the base model alone.")
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    score: bool = Field(default=True, description="Score each reply with the reward model (when one is served).")
    session: str | None = Field(
        default=None, max_length=200, description="The client's conversation id, kept in the log."
    )

    @model_validator(mode="after")
    def _one_input(self) -> GenerateRequest:
        _prompt_or_messages(self)
        return self


class RewardItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=MAX_MESSAGE)
    response: str = Field(min_length=1, max_length=MAX_MESSAGE)


class RewardRequest(BaseModel):
    """Score replies: either one `prompt` + `response`, or `items` of them."""

    model_config = ConfigDict(extra="forbid")

    prompt: str | None = Field(default=None, min_length=1, max_length=MAX_MESSAGE)
    response: str | None = Field(default=None, min_length=1, max_length=MAX_MESSAGE)
    items: list[RewardItem] | None = Field(default=None, min_length=1, max_length=256)

    @model_validator(mode="after")
    def _shape(self) -> RewardRequest:
        single = self.prompt is not None or self.response is not None
        if single == (self.items is not None):
            raise ValueError("send `prompt` and `response`, or `items` (a list of them), not both")
        if single and (self.prompt is None or self.response is None):
            raise ValueError("`prompt` and `response` go together")
        return self

    def pairs(self) -> list[RewardItem]:
        return (
            self.items
            if self.items is not None
            else [RewardItem(prompt=self.prompt or "", response=self.response or "")]
        )


class FeedbackRequest(BaseModel):
    """Feedback as a client sends it; `kind` says which fields apply (see core/online/events.py)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="Your id for this event; sending it again writes nothing new."
    )
    kind: Literal["thumb", "choice", "nudge", "emotion"]
    turn: str | None = None
    value: Literal["up", "down"] | None = None
    chosen: str | None = None
    rejected: str | None = None
    strength: Literal["slight", "clear", "strong"] | None = None
    repeat_of: str | None = None
    dimension: str | None = None
    direction: Literal["more", "less"] | None = None
    valence: int | None = Field(default=None, ge=-2, le=2)
    tags: list[str] | None = None
    note: str | None = Field(default=None, max_length=MAX_TEXT)


class TurnRequest(BaseModel):
    """A reply written elsewhere (another model, a person), recorded as a turn so it can be rated."""

    model_config = ConfigDict(extra="forbid")

    messages: list[ChatMessage] | None = Field(
        default=None, description="The conversation the reply answers, the user's last message last."
    )
    prompt: str | None = Field(default=None, description="A single user message (instead of messages).")
    reply: str = Field(min_length=1, max_length=MAX_MESSAGE, description="The reply.")
    author: str = Field(
        default="external",
        pattern=r"^[A-Za-z0-9_.:/-]{1,100}$",
        description="Who wrote it (kept as the turn's model), e.g. gpt-4o or me.",
    )
    session: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _one_input(self) -> TurnRequest:
        _prompt_or_messages(self)
        if not self.reply.strip():
            raise ValueError("the reply is blank; there is nothing to rate")
        return self


class LiveRequest(BaseModel):
    """An admin's change of the live adapter: `version` (promote: required; rollback: optional, `base`
    for the base) and why."""

    model_config = ConfigDict(extra="forbid")

    version: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    reason: str | None = Field(default=None, max_length=2000)


class ProbeRequest(BaseModel):
    prompt: str = Field(min_length=1, max_length=8000, description="The person's message.")
    replies: list[str] = Field(min_length=1, max_length=4, description="One to four replies to score.")


class ReplyRequest(BaseModel):
    prompt: str = Field(min_length=1, max_length=8000, description="The person's message.")
    reply: str = Field(min_length=1, max_length=8000, description="The reply to explain or rewrite.")
    words: int = Field(
        default=2,
        ge=1,
        le=20,
        description="Words left out together per occluded span (more for a long reply: at most five spans).",
    )
    changes: list[str] | None = Field(
        default=None,
        description="The rewrites to make (typos, paraphrase, insertion, reorder, polite_frame, rude_frame); "
        "default: all.",
    )


# -- responses -------------------------------------------------------------------------------------------------


class _Response(BaseModel):
    """A response; routes send only the fields the handler set (`response_model_exclude_unset`)."""


class _View(_Response):
    """A read-only view over the project's files: the fields below, and any further figures the view adds."""

    model_config = ConfigDict(extra="allow")


class ModelCard(_Response):
    id: str = Field(description="`hominem` (the served adapter) or `hominem-base` (the adapter off).")
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    adapter: str | None = Field(description="The adapter the model answers with (None: the base alone).")


class ModelList(_Response):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class AssistantMessage(_Response):
    role: Literal["assistant"] = "assistant"
    content: str


class Usage(_Response):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatChoice(_Response):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: None = None
    turn: str = Field(description="The reply's turn id in the interaction log (what /feedback refers to).")


class ChatCompletionResponse(_Response):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class Delta(_Response):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(_Response):
    index: int
    delta: Delta
    finish_reason: Literal["stop", "length"] | None = None
    turn: str | None = Field(default=None, description="On a choice's last chunk: its turn id in the log.")


class ChatCompletionChunk(_Response):
    """One server-sent event of a streamed completion (`data: {...}`)."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None

    def event(self) -> str:
        return f"data: {self.model_dump_json(exclude_unset=True)}\n\n"


class GeneratedReply(_Response):
    turn: str = Field(description="The reply's turn id in the interaction log.")
    text: str
    finish_reason: Literal["stop", "length"]
    completion_tokens: int
    reward: dict[str, Any] | None = Field(description="The reward model's scores of the reply (None: not scored).")


class GenerateResponse(_Response):
    adapter: str | None = Field(description="The adapter that wrote the replies (None: the base).")
    reward_model: str | None
    replies: list[GeneratedReply]


class TurnResponse(_Response):
    turn: str = Field(description="The recorded turn's id.")


class RewardResponse(_Response):
    reward_model: str | None
    scores: list[dict[str, Any]] = Field(
        description="Per reply: vector, scalar, reward_intensity, safety_score and their uncertainty."
    )


class FeedbackResponse(_Response):
    id: str = Field(description="The event's id (yours, or one the service made).")
    written: bool = Field(description="False when the log held this id already: nothing new was written.")


class RepeatResponse(_Response):
    repeat: dict[str, Any] | None = Field(description="An earlier choice of yours to make again, A and B swapped.")


class QuestionResponse(_Response):
    question: dict[str, Any] | None = Field(
        description="id, messages, source and the two sides `a` and `b` (each a turn to answer with a choice)."
    )
    reason: str
    by: str | None = None
    value: float | None = None
    parts: dict[str, Any] | None = None
    p_a: float | None = None
    pool: int | None = None
    answered: int | None = None


class MyData(_Response):
    rater: str = Field(description="Your pseudonymous id.")
    exported_at: str
    pair_schema: str = Field(description="The JSON Schema each pair follows.")
    pairs: list[dict[str, Any]] = Field(description="The preference pairs your feedback makes.")
    turns: list[dict[str, Any]] = Field(description="The turns you were served or recorded, as the log holds them.")
    feedback: list[dict[str, Any]] = Field(description="Your thumbs, choices, nudges and emotion labels.")


class Leaning(_Response):
    feature: str = Field(description="What the taste model reads of a reply (a reward dimension, its length, ...).")
    words: str = Field(description="The leaning in plain words.")
    weight: float = Field(description="Its weight (per spread of the feature over your replies); + prefers more.")
    sd: float = Field(description="The weight's posterior standard deviation.")
    sure: float = Field(description="How sure the model is of the leaning's side, 0.5-1.")


class TasteExample(_Response):
    message: str = Field(description="A message you never taught on (a held-out prompt or memory question).")
    before: str = Field(description="The reply of the adapter live before your online updates.")
    after: str = Field(description="The live adapter's reply: the one that moved most toward your taste.")
    before_version: str | None = Field(description="That adapter's version (null: the base).")
    after_version: str | None = Field(description="The live adapter's version.")


class TasteUpdate(_Response):
    version: str = Field(description="The newest online update trained on your taste.")
    time: str | None = Field(description="When the gate decided it (UTC).")
    live: bool = Field(description="Whether it is the adapter you talk to now.")
    learned: bool = Field(description="Whether your own checks found it closer to your taste than the one before.")
    cost: list[str] = Field(
        description="What else the gate found it would cost (the student's facts, recall, instructions, sameness, "
        "its health): why a taste it learned was refused. Empty when nothing."
    )
    checks: list[dict[str, Any]] = Field(
        description="Your checks as the gate measured them (taste:<you>, choices:<you>): estimate, standard error, "
        "rule."
    )
    said: str = Field(description="All of that in one sentence.")


class MyTaste(_Response):
    rater: str = Field(description="Your pseudonymous id.")
    choices: int = Field(description="Your preference pairs the model was fitted on.")
    said: str = Field(description="What it learned, in plain words, with how sure it is.")
    leanings: list[Leaning] = Field(description="The features that lead your taste, the surest first.")
    features: list[str] = Field(description="What it reads of each reply.")
    example: TasteExample | None = Field(
        default=None, description="One reply before and after your online updates (null while none is live)."
    )
    update: TasteUpdate | None = Field(
        default=None, description="What the gate said of the newest update trained on your taste (null: none yet)."
    )


class HistoryPage(_Response):
    total: int = Field(description="How many rows match.")
    rows: list[dict[str, Any]] = Field(description="The newest `limit` of them.")
    seconds: float = Field(description="How long the index took to answer.")


class Forgot(_Response):
    rater: str = Field(description="Your pseudonymous id, now forgotten.")
    forgotten_at: str = Field(description="The tombstone's time: your events up to it are absent to every reader.")
    events: int = Field(description="Your events taken out of the interaction log.")
    removed: list[str] = Field(description="Built versions and files removed because they held your words.")
    rebuild: list[str] = Field(description="The commands that build the removed versions' days again, without you.")
    left: list[str] = Field(description="What still holds your words, why, and how to remove it; [] when none.")


class ConsistencyResponse(_Response):
    rater: str
    choices: int
    repeats: int
    consistent: int
    consistency: float | None


class RatersResponse(_Response):
    raters: dict[str, Any]


class AuditResponse(_Response):
    entries: list[dict[str, Any]]


class LiveStatus(_Response):
    live: dict[str, Any]
    serving: str | None = Field(description="The adapter this service answers with now.")
    candidates: list[dict[str, Any]]
    history: list[dict[str, Any]]
    updates: dict[str, Any] | None


class UpdateStarted(_Response):
    started: bool
    updates: dict[str, Any] | None


class LiveChange(_Response):
    live: str
    serving: str | None = None
    frozen: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None


class Health(_Response):
    status: Literal["ok"]
    adapter: str | None
    reward_model: str | None
    waiting: int
    running: int
    batches: int
    largest_batch: int
    uptime_seconds: float
    auth: str


class PageConfig(_Response):
    dimensions: list[str]
    emotion_tags: list[str]
    strengths: list[str]
    token_required: bool
    adapter: str | None
    reward_model: str | None


class Timeline(_View):
    days: list[str]
    series: dict[str, Any]
    versions: Any
    events: list[dict[str, Any]]
    builds: list[dict[str, Any]]


class CalibrationView(_View):
    curves: list[dict[str, Any]]


class DriftView(_View):
    day: str | None
    drift: dict[str, Any] | None
    clusters: list[dict[str, Any]]


class HealthView(_View):
    day: str | None
    rhi: float | None
    components: list[dict[str, Any]]


class Options(_View):
    reward_models: list[dict[str, Any]]
    adapters: list[dict[str, Any]]


class Comparison(_View):
    kind: str
    a: str
    b: str
    metrics: dict[str, Any]


class SideBySide(_View):
    """Two adapters' replies scored by the served reward model on one scale."""

    a: str
    b: str
    start: int
    total: int
    reward_model: str | None
    prompts: int
    scalar: dict[str, Any]
    b_wins: int
    delta: dict[str, Any]
    replies: list[dict[str, Any]]


class ProbeScores(_View):
    prompt: str
    dimensions: list[str]
    replies: list[dict[str, Any]]
    p_first: list[float]


class Attribution(_View):
    reply: str
    words: int
    attribution: list[dict[str, Any]]


class Rewrites(_View):
    counterfactuals: list[dict[str, Any]]
