"""How preference pairs are built (`preferences:`) and how the student's LoRA adapter trains (`policy:`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from hominem_pipeline.core.config.base import PolicyLoraConfig, _Frozen


class PreferencesConfig(_Frozen):
    dimension_weights: dict[str, float] = Field(
        description="Weight of each dimension in the aggregate that ranks candidates, each > 0."
    )
    strategy: Literal["margin", "best_vs_worst", "per_dimension"] = Field(
        description="margin (every same-prompt pair with an aggregate gap >= min_margin) | best_vs_worst (one pair "
        "per prompt) | per_dimension (the chosen reply wins one dimension without losing on "
        "guard_dimension)."
    )
    rank_by: Literal["teacher", "reward_model"] = Field(
        description="Whose vectors rank a prompt's candidates: teacher (its labels) | reward_model (the reward "
        "model's scores)."
    )
    guard_dimension: str | None = Field(
        description="per_dimension: the chosen reply may not be worse on this dimension; null: no guard."
    )
    min_margin: float = Field(
        ge=0.0, le=2.0, description="Pairs whose aggregate gap is below this are dropped as near-ties, 0-2."
    )
    min_scalar_margin: float | None = Field(
        ge=0.0,
        le=2.0,
        description="Also drop pairs whose overall-score gap is below this, 0-2; null: the overall score is not "
        "consulted.",
    )
    max_pairs_per_prompt: int = Field(ge=1, le=1000, description="Largest-margin pairs kept per prompt.")
    against_student: bool = Field(
        description="Also pair each prompt's best candidate against the base student's own reply (needs rank_by: "
        "reward_model)."
    )

    @model_validator(mode="after")
    def _student_needs_reward_model(self) -> PreferencesConfig:
        if self.against_student and self.rank_by != "reward_model":
            raise ValueError(
                "preferences.against_student needs preferences.rank_by: reward_model (the student's replies carry no "
                f"teacher label to rank them by, and rank_by is {self.rank_by!r}); set rank_by: "
                "reward_model or against_student: false"
            )
        return self

    @field_validator("dimension_weights")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: w for k, w in v.items() if not w > 0}
        if bad:
            raise ValueError(f"weights must be > 0, got {bad}")
        return v


class SafetyGateConfig(_Frozen):
    """See `losses.SafetyGate`: how each example's safety_score gates what is learned from it."""

    pass_at: float = Field(ge=0.0, le=1.0, description="safety_score at or above which an example counts fully, 0-1.")
    unsafe_below: float = Field(
        ge=0.0, le=1.0, description="safety_score below which an example is unsafe, 0-1, at most pass_at."
    )
    unsafe: Literal["skip", "invert"] = Field(
        description="What happens to unsafe examples: skip | invert (learned away from)."
    )
    between: Literal["downweight", "pass", "skip"] = Field(
        description="Examples between the two: downweight | pass | skip."
    )
    downweight_by: Literal["factor", "score"] = Field(
        description="factor (times `factor`) | score (times the safety_score)."
    )
    factor: float = Field(ge=0.0, le=1.0, description="Down-weighting factor, 0-1.")

    @model_validator(mode="after")
    def _ordered(self) -> SafetyGateConfig:
        if self.unsafe_below > self.pass_at:
            raise ValueError(
                f"policy.safety_gate: unsafe_below ({self.unsafe_below}) must not exceed pass_at ({self.pass_at})"
            )
        return self


class PeopleStartConfig(_Frozen):
    """How `hominem data ship-features` trains the people's start (`policy.people_start`)."""

    max_steps: int = Field(
        ge=1,
        description="Optimizer steps over the people's training pairs (400 at batch 4: about one pass over them), "
        ">= 1.",
    )
    learning_rate: float = Field(gt=0.0, description="AdamW peak learning rate (linear decay over max_steps), > 0.")


class ChannelsConfig(_Frozen):
    """The dual loss's two channels as the optimizer sees them: the memory channel (the next-token loss of
    chosen replies and memory rows) and the reward channel (the DPO loss)."""

    memory_lr_factor: float = Field(
        gt=0.0,
        le=100.0,
        description="The memory channel's learning rate as a factor of the one in force (policy's, online's, times "
        "the slow loop's), > 0.",
    )
    reward_lr_factor: float = Field(
        gt=0.0,
        le=100.0,
        description="The reward channel's, the same way. Both 1: one AdamW on the channels' summed gradient; else "
        "each channel has its own AdamW (its own moments) at its rate: two backward passes a step.",
    )
    monitor_every: int = Field(
        ge=0,
        description="Every k-th step (the first, then k later, ...) each channel's share of the gradient, |g_c| / "
        "(|g_memory| + |g_reward|), is measured (a second backward pass), >= 0; 0: never.",
    )
    max_share: float | None = Field(
        gt=0.5,
        le=1.0,
        description="A channel whose measured share exceeds this is scaled down to it from that step on (its loss "
        "weighted by a balance factor), 0.5-1; null: reported, never rebalanced.",
    )

    @property
    def split(self) -> bool:
        """Each channel has its own optimizer."""
        return self.memory_lr_factor != 1.0 or self.reward_lr_factor != 1.0

    def trains_differently(self) -> bool:
        """Settings that change what is learned (monitoring alone does not)."""
        return self.split or self.max_share is not None


class DualConfig(_Frozen):
    """The dual-channel loss: w_sft * L_sft + intensity * w_reward * L_reward per example."""

    sft_weight: float = Field(
        ge=0.0, description="w_sft >= 0: weight of the memory channel (next-token loss of the chosen replies)."
    )
    reward_weight: float = Field(
        ge=0.0, description="w_reward >= 0: weight of the reward channel (DPO loss of the pair, times its intensity)."
    )
    memory_weight: float | None = Field(
        ge=0.0, description="w_sft of memory-file rows (facts to keep), >= 0; null: sft_weight."
    )
    intensity_source: Literal["teacher", "reward_model", "constant"] = Field(
        description="teacher (the chosen reply's label) | reward_model (scored at the start) | constant (1)."
    )
    safety_source: Literal["teacher", "reward_model"] = Field(
        description="Whose safety_score gates a pair: teacher | reward_model."
    )
    normalize_intensity: bool = Field(
        description="Divide intensities by their mean over the training pairs (they redistribute learning; "
        "reward_weight sets its strength)."
    )
    memory_files: list[str] = Field(
        description="Instruction-response JSONL files or folders of them; a row with a `fact` is also a "
        "memory-probe question."
    )
    mixing: Literal["fixed", "availability"] = Field(
        description="fixed (memory_fraction of each batch) | availability (the memory rows' share of all rows, at "
        "most memory_fraction)."
    )
    memory_fraction: float = Field(
        ge=0.0, le=1.0, description="Memory rows' share of a batch (fixed) or its upper bound (availability), 0-1."
    )
    memory_rows: Literal["share", "extra"] = Field(
        description="share (memory rows take pair rows' places in batch_size) | extra (added to batch_size pair rows)."
    )
    memory_margin: float | None = Field(
        ge=0.0,
        description="null: memory rows are taught every step; m >= 0: a row pulls only while its loss is above the "
        "base's minus m nats/token.",
    )
    memory_stop: bool = Field(
        description="Memory rows also train the end-of-turn after their reply (false: the reply only)."
    )
    sampler: Literal["uniform", "replay"] = Field(
        description="uniform (every pair once per pass, reshuffled) | replay (each batch's pairs drawn by the "
        "replay section's sampler: recent and old, by priority and at random)."
    )
    people_share: float = Field(
        ge=0.0,
        le=1.0,
        description="Share of each batch's pair rows drawn from people's own pairs (the shipped ones but the "
        "held-out, the window's imported pairs and page choices), each once per pass; the rest are the "
        "ranked candidates' pairs, 0-1; 0: those alone.",
    )
    channels: ChannelsConfig = Field(
        description="Per-channel learning rates and the dominance monitor (each channel's share of the gradient, "
        "rebalanced above max_share)."
    )
    people_start: PeopleStartConfig | None = Field(
        description="The daily adapter starts from the people's start shipped in config/human/features (an adapter "
        "trained once on the people's training pairs, these settings; `policy.people_start`) where it "
        "was built for this student, LoRA shape and pairs; null: from a fresh LoRA."
    )

    @model_validator(mode="after")
    def _some_channel(self) -> DualConfig:
        if self.sft_weight == 0 and self.reward_weight == 0 and not self.memory_weight:
            raise ValueError(
                "policy.dual: sft_weight, reward_weight and memory_weight are all 0 or unset, so "
                "nothing would be learned; set one above 0"
            )
        return self


class RLConfig(_Frozen):
    """Policy-gradient on the reward model (TRL's GRPO or RLOO)."""

    algorithm: Literal["grpo", "rloo"] = Field(description="grpo | rloo (TRL).")
    reward: Literal["scalar", "vector"] = Field(
        description="scalar | vector (the reward vector weighted by preferences.dimension_weights)."
    )
    num_generations: int = Field(
        ge=2, le=64, description="Completions sampled per prompt, compared within their group, 2-64."
    )
    max_new_tokens: int = Field(ge=1, le=4096, description="Tokens per sampled completion.")
    temperature: float = Field(gt=0.0, le=5.0, description="Sampling temperature, (0, 5].")
    kl_beta: float = Field(ge=0.0, le=10.0, description="KL penalty to the base (the adapter switched off), 0-10.")


class PolicyConfig(_Frozen):
    mode: Literal["dpo", "dual", "rl"] = Field(
        description="dual (the dual-channel loss, safety-gated) | dpo (TRL's DPO) | rl (GRPO / RLOO on the reward "
        "model, safety-gated)."
    )
    seed: int = Field(
        ge=0, description="0: the stage's own seed; another value retrains on the same pairs with other random draws."
    )
    window_days: int = Field(
        ge=1, le=3650, description="Trains on preference_pairs of this many days up to its own partition."
    )
    lora: PolicyLoraConfig = Field(description="LoRA adapter on the student.")
    beta: float = Field(gt=0.0, le=10.0, description="DPO temperature (dpo, and dual's reward channel), > 0.")
    learning_rate: float = Field(gt=0.0, lt=1.0, description="AdamW learning rate of the adapter.")
    max_steps: int = Field(ge=1, le=1_000_000, description="Optimizer steps.")
    batch_size: int = Field(
        ge=1, le=4096, description="Rows per step (dual: preference and memory rows together; rl: prompts)."
    )
    gradient_accumulation_steps: int = Field(ge=1, le=4096, description="Batches accumulated per optimizer step.")
    max_length: int = Field(ge=16, le=32768, description="Prompt + reply tokens per example.")
    safety_gate: SafetyGateConfig = Field(description="How each example's safety_score gates what is learned from it.")
    dual: DualConfig = Field(
        description="The dual-channel loss: w_sft * L_sft + intensity * w_reward * L_dpo per example."
    )
    rl: RLConfig = Field(description="Policy-gradient on the reward model.")
