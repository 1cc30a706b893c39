"""`hominem serve`, the chat and feedback service (`serving:`)."""

from __future__ import annotations

from pydantic import Field

from hominem_pipeline.core.config.base import _Frozen


class ServingConfig(_Frozen):
    host: str = Field(
        min_length=1,
        description="Address `hominem serve` binds; beyond loopback (127.0.0.1, ::1, localhost) it needs bearer "
        "tokens (tokens_file or tokens_env).",
    )
    port: int = Field(ge=0, le=65535, description="TCP port, 0-65535 (0: any free port, printed at start).")
    adapter: str | None = Field(
        description='What `hominem` (the served model) runs: "live" (the adapter data/live/current.json names, '
        'which passed the gate; the base until one has), "latest" (the newest lora_adapter built under '
        "this config, passed or not), an adapter folder, or null (the base alone)."
    )
    reward_model: str | None = Field(
        description='What scores replies: "adapter" (the one the served adapter was trained with, else the newest '
        'built), "latest", a folder, or null (no scores).'
    )
    live_poll_seconds: float = Field(
        ge=0.1,
        le=60.0,
        description="With adapter `live`: seconds between the server's checks of data/live/current.json, whose "
        "changes it hot-swaps to, 0.1-60.",
    )
    registry_poll_seconds: float = Field(
        ge=0.1,
        le=3600.0,
        description="With a registry alias as the adapter (models:/hominem-lora-adapter@champion): seconds between "
        "the server's questions to the tracking server, 0.1-3600.",
    )
    max_batch_size: int = Field(ge=1, le=256, description="Replies generated together in one batch, 1-256.")
    batch_wait_ms: float = Field(
        ge=0.0,
        le=1000.0,
        description="How long the first waiting request waits for others to join its batch, 0-1000 ms.",
    )
    max_queue: int = Field(
        ge=1,
        le=100_000,
        description="Requests waiting for the model beyond which a new one gets 503 with Retry-After.",
    )
    max_new_tokens: int = Field(
        ge=1, le=4096, description="Tokens a reply may have: the default and the most a request may ask for."
    )
    temperature: float = Field(
        ge=0.0, le=2.0, description="Sampling temperature when a request names none, 0-2 (0: greedy)."
    )
    top_p: float = Field(gt=0.0, le=1.0, description="Nucleus sampling mass when a request names none, (0, 1].")
    repetition_penalty: float = Field(ge=1.0, le=2.0, description="Repetition penalty of every reply, 1-2.")
    plain_start: bool = Field(description="A reply may not start with an emoji or symbol token.")
    recall_facts: bool = Field(
        description="Repeat what the person stated about themselves earlier in the conversation "
        "(core/online/facts.py's patterns), in their words, before their last message in the model's "
        "input (`hominem serve` and `hominem chat`); the log keeps what was said."
    )
    pair_pool: int = Field(
        ge=2,
        le=4,
        description="Replies written for a pair a person asks for (n=2) once they have a taste model "
        "(online.taste.min_choices choices): the two it ranks highest and lowest are shown (the pair it is surest "
        "they would choose between, so one that can show their taste), 2-4 (2: as sampled).",
    )
    max_body_bytes: int = Field(ge=1024, le=100_000_000, description="Largest request body accepted; larger gets 413.")
    log_dir: str = Field(
        min_length=1,
        description="Folder of the interaction log (log/<day>.jsonl, one file per UTC day) and the audit log "
        "(audit.jsonl); relative to project.data_dir.",
    )
    tokens_file: str | None = Field(
        description="File of bearer tokens, one `rater TOKEN` or `admin TOKEN` per line (keep it outside the "
        "repository); null: none."
    )
    tokens_env: str = Field(
        min_length=1,
        description="Environment variable with more tokens in the same form, separated by newlines or commas.",
    )
    redact: bool = Field(
        description="Replace e-mail addresses, phone numbers, card and IP numbers in logged text with [email], "
        "[phone], ... before it is written."
    )
    repeat_rate: float = Field(
        ge=0.0,
        le=1.0,
        description="Share of pairwise choices the page asks again (order swapped) to measure each rater's "
        "consistency, 0-1.",
    )
