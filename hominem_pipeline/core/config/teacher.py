"""Who samples and rates the replies (`teacher:`), what the offline judge is asked (`labeling:`) and the checks on
its output (`verifier:`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from hominem_pipeline.core.config.base import _Frozen


class CandidateStyle(_Frozen):
    name: str = Field(min_length=1, description="Style name, unique.")
    temperature: float = Field(
        gt=0.0,
        le=2.0,
        description="Sampling temperature, (0, 2] (the Anthropic API from version 2026-10-21 ignores it).",
    )
    top_p: float = Field(gt=0.0, le=1.0, description="Nucleus sampling mass, (0, 1].")
    system: str | None = Field(default=None, description="System prompt of this style; null: none.")
    weak: bool = Field(
        default=False,
        description="A deliberately weaker style (terse, careless), drawn for `weak_share` of the candidates.",
    )


Provider = Literal["local", "anthropic", "openai", "openai_compatible"]
DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


class TeacherAPIConfig(_Frozen):
    """What an API teacher is asked, and of whom (these settings change the answers, so they are part of
    the data's version)."""

    model: str | None = Field(
        description="Model the API serves, e.g. claude-sonnet-4-6, gpt-4o-mini, or the name a local server shows."
    )
    base_url: str | None = Field(
        description="API base URL; null: the provider's own (e.g. http://localhost:1234/v1 for LM Studio)."
    )
    api_key_env: str | None = Field(
        description="Environment variable holding the key; null: ANTHROPIC_API_KEY / OPENAI_API_KEY "
        "(openai_compatible needs none)."
    )
    structured_output: Literal["auto", "tool", "json_schema", "prompt"] = Field(
        description="How a label comes back: tool (Anthropic tool use), json_schema (OpenAI response_format), "
        "prompt (schema in the prompt, any server), auto (by provider)."
    )
    rating_max_tokens: int = Field(ge=64, le=8192, description="Tokens an API judge may write per rating, 64-8192.")

    def resolved_structured_output(self, provider: str) -> str:
        if self.structured_output != "auto":
            return self.structured_output
        return {"anthropic": "tool", "openai": "json_schema"}.get(provider, "prompt")


class TeacherClientConfig(_Frozen):
    """How API calls are made: these never change an answer, only how fast and how safely it arrives."""

    concurrency: int = Field(ge=1, le=1024, description="API calls in flight at once, 1-1024.")
    requests_per_minute: float | None = Field(gt=0, description="Request rate limit; null: none.")
    tokens_per_minute: float | None = Field(gt=0, description="Input + output token rate limit; null: none.")
    timeout_seconds: float = Field(gt=0, le=3600, description="Seconds before a call times out.")
    max_retries: int = Field(ge=0, le=20, description="Retries on 429, 5xx, timeouts and dropped connections, 0-20.")
    backoff_seconds: float = Field(gt=0, le=600, description="First retry's wait; it doubles, with jitter.")
    max_backoff_seconds: float = Field(gt=0, le=3600, description="Longest wait between retries.")
    max_retry_after_seconds: float = Field(
        gt=0, le=3600, description="A server asking to wait longer than this fails the call instead."
    )
    stream: bool = Field(description="Stream candidate replies (doubles the client's CPU per call).")
    cache_path: str | None = Field(description="SQLite file of answered calls by content fingerprint; null: no cache.")
    cache_url: str | None = Field(
        description="Instead of cache_path: a database every worker host shares "
        "(postgresql+psycopg2://user@host/db); $HOMINEM_CALL_CACHE_URL, when set, is used instead; "
        "null: cache_path."
    )


class ModelPrice(_Frozen):
    input: float = Field(ge=0.0, description="USD per million input tokens.")
    output: float = Field(ge=0.0, description="USD per million output tokens.")


class TeacherConfig(_Frozen):
    provider: Provider = Field(
        description="local (the HF chat model at models.student, offline) | anthropic | openai | openai_compatible "
        "(any server speaking OpenAI Chat Completions at api.base_url)."
    )
    candidates_per_prompt: int = Field(ge=2, le=16, description="Replies sampled per prompt, 2-16.")
    max_new_tokens: int = Field(ge=1, le=4096, description="Tokens per sampled reply.")
    batch_size: int = Field(ge=1, le=512, description="Local teacher: prompts generated together (left-padded).")
    weak_share: float = Field(
        ge=0.0, le=1.0, description="Share of each prompt's candidates drawn from the weak styles, 0-1."
    )
    styles: list[CandidateStyle] = Field(
        min_length=1,
        description="Candidate styles: strong ones take the first candidates, weak ones the rest, each group "
        "cycling in order.",
    )
    api: TeacherAPIConfig = Field(description="What an API teacher is asked (part of the data's version).")
    client: TeacherClientConfig = Field(
        description="How API calls are made (never changes an answer, so not part of the version)."
    )
    prices: dict[str, ModelPrice] = Field(
        description="Model -> USD per million tokens, for the cost figures (a model missing here gets none, with a "
        "warning)."
    )

    @model_validator(mode="after")
    def _check(self) -> TeacherConfig:
        names = [s.name for s in self.styles]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"styles: duplicate names {dupes}")
        n_weak = round(self.candidates_per_prompt * self.weak_share)
        if n_weak and not any(s.weak for s in self.styles):
            raise ValueError(
                f"weak_share {self.weak_share} asks for {n_weak} weak candidates per prompt, but no "
                "style has `weak: true`"
            )
        if n_weak < self.candidates_per_prompt and all(s.weak for s in self.styles):
            raise ValueError(
                f"weak_share {self.weak_share} leaves strong candidates, but every style has `weak: true`"
            )
        if self.provider != "local" and not self.api.model:
            raise ValueError(f"provider {self.provider!r} needs `teacher.api.model` (the model name the API serves)")
        if self.provider == "openai_compatible" and not self.api.base_url:
            raise ValueError(
                "provider 'openai_compatible' needs `teacher.api.base_url`, e.g. "
                "http://localhost:1234/v1 for LM Studio"
            )
        if self.api.structured_output == "tool" and self.provider not in ("anthropic",):
            raise ValueError(
                f"structured_output 'tool' is the Anthropic tool-use mode; for {self.provider!r} use "
                "json_schema or prompt"
            )
        if self.api.structured_output == "json_schema" and self.provider == "anthropic":
            raise ValueError("for provider 'anthropic' use structured_output 'tool' (or 'prompt')")
        return self

    def key_env(self) -> str | None:
        """The environment variable holding the API key (None: the provider needs no key)."""
        return self.api.api_key_env or DEFAULT_KEY_ENV.get(self.provider)

    def candidate_styles(self) -> list[CandidateStyle]:
        """The style of each candidate of a prompt: strong styles first, then `weak_share` of the
        candidates from the weak styles, each group cycling through its styles in order."""
        n_weak = round(self.candidates_per_prompt * self.weak_share)
        strong = [s for s in self.styles if not s.weak]
        weak = [s for s in self.styles if s.weak]
        n_strong = self.candidates_per_prompt - n_weak
        return [strong[i % len(strong)] for i in range(n_strong)] + [weak[i % len(weak)] for i in range(n_weak)]


class LabelingConfig(_Frozen):
    judge_system: str = Field(min_length=1, description="Offline judge's system text.")
    scalar_question: str = Field(min_length=1, description="Offline judge's overall question (the scalar).")
    intensity_question: str = Field(min_length=1, description="Offline judge's question for reward_intensity.")
    safety_question: str = Field(min_length=1, description="Offline judge's question for safety_score.")
    rationale: Literal["scores", "written"] = Field(
        description="The offline judge's rationale: scores (read off its own rubric answers: overall, best and worst "
        "dimension) or written (the judge writes a sentence, rationale_instruction; a pass of "
        "generation per candidate)."
    )
    rationale_instruction: str = Field(
        min_length=1,
        description="What the offline judge is asked for its one-sentence rationale (rationale: written).",
    )
    rationale_max_new_tokens: int = Field(ge=1, le=512, description="Tokens of the offline judge's rationale, 1-512.")
    max_context_tokens: int = Field(
        ge=32, le=8192, description="Prompt + reply tokens shown to the offline judge (the reply is cut from the end)."
    )
    api_judge_system: str = Field(
        min_length=1, description="API judges' instructions; the dimensions and ranges are appended."
    )
    served_turns: int = Field(
        ge=0,
        le=10_000,
        description="The day's teacher_labels also rate this many of the replies `hominem serve` wrote the day "
        "before (its interaction log): those people gave feedback on first, then the newest; each row "
        "keeps its turn id. 0: none.",
    )
    redact_served: bool = Field(
        description="Served turns a teacher away from this machine reads (anthropic, openai, or a base_url beyond "
        "loopback) are redacted first: e-mails, phone, card and IP numbers are replaced by placeholders (false: "
        "sent as the log holds them). A teacher on this machine reads them as logged."
    )


class VerifierConfig(_Frozen):
    max_failure_rate: float = Field(
        ge=0.0,
        le=1.0,
        description="Share of quarantined rows (failed a blocking check) above which the teacher_labels check and "
        "`hominem data validate` fail, 0-1.",
    )
    min_reply_logp: float | None = Field(
        le=0.0,
        description="A candidate the student finds less likely than this per reply token (mean log-probability in "
        "nats, <= 0; word salad, a string of emoji), or one with no words or one word over and over, is "
        "flagged degenerate: a warning of the teacher_labels check and `hominem data validate`, and "
        "never the chosen reply of a preference pair. null: no flag.",
    )
