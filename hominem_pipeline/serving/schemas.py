"""Request bodies of the service (responses are plain JSON, shown in the OpenAPI docs by example)."""

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
