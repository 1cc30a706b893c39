"""What every configuration model shares (`core.config` re-exports these)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ConfigError(ValueError):
    """A configuration file is missing, unreadable or invalid."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LoraConfig(_Frozen):
    r: int = Field(ge=1, le=1024, description="LoRA rank, 1-1024.")
    alpha: float = Field(gt=0.0, description="LoRA scaling numerator (the update is scaled by alpha / r).")
    dropout: float = Field(ge=0.0, lt=1.0, description="Dropout on the LoRA input, [0, 1).")
    target_modules: list[str] = Field(min_length=1, description="Module names LoRA wraps.")


class PolicyLoraConfig(LoraConfig):
    layers: int | None = Field(
        ge=1,
        le=1000,
        description="LoRA on the last N decoder layers only (backpropagation stops below them), 1 to the student's "
        "depth; null: every layer.",
    )
