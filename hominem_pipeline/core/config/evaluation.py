"""The adapter's evaluation (`evaluation:`), the contrast fixtures (`fixtures:`), the probing suite (`probes:`) and the
Reward Health Index with its deploy gate (`health:`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from hominem_pipeline.core.config.base import _Frozen

REPLY_CHECKS = ("recall", "facts", "instructions", "sameness")
# the sampled figures the reply checks decide on (sameness gives three)
REPLY_FIGURES = ("recall", "facts", "instructions", "openings", "stock_phrases", "distinct_bigrams")


class ReplyChecksConfig(_Frozen):
    recall: str | None = Field(
        description="Conversations in which the person states a name, a place, a pet or a number and asks it back one "
        "or two turns later (JSON lines: id, kind, messages, answers); served as serving.recall_facts serves them. "
        "null: off."
    )
    facts: str | None = Field(
        description="General questions the memory files do not hold (JSON lines: id, question, answers). null: off."
    )
    instructions: str | None = Field(
        description="Prompts with checkable instructions, IFEval's ids and arguments (JSON lines: id, prompt, "
        "instruction_id_list, kwargs). null: off."
    )
    sameness: str | None = Field(
        description="Varied messages whose replies' sameness is measured (JSON lines: id, message). null: off."
    )
    max_items: int | None = Field(ge=2, description="The first N items of each set, >= 2; null: all.")
    max_new_tokens: dict[Literal["recall", "facts", "instructions", "sameness"], int] = Field(
        description="Tokens per reply of each check, 1-1024."
    )

    @model_validator(mode="after")
    def _tokens_for_each(self) -> ReplyChecksConfig:
        missing = [c for c in REPLY_CHECKS if getattr(self, c) and c not in self.max_new_tokens]
        bad = {k: v for k, v in self.max_new_tokens.items() if not 1 <= v <= 1024}
        if missing or bad:
            raise ValueError(
                f"evaluation.reply_checks.max_new_tokens needs 1-1024 tokens for each check that is on: missing "
                f"{missing}, out of range {bad}"
            )
        return self


class EvaluationConfig(_Frozen):
    max_new_tokens: int = Field(ge=1, le=4096, description="Tokens per evaluation reply.")
    batch_size: int = Field(
        ge=1, le=512, description="Replies decoded together (lm.greedy), and replies or pairs scored together."
    )
    repetition_penalty: float = Field(ge=1.0, le=2.0, description="Repetition penalty of the greedy decoding, 1-2.")
    plain_start: bool = Field(description="A reply may not start with an emoji or symbol token.")
    memory_probe: bool = Field(
        description="Also ask base and adapter the memory files' fact questions: what the adapter kept, lost and "
        "gained."
    )
    reply_checks: ReplyChecksConfig = Field(
        description="The student's own replies judged by measures nothing in the project trains on (recall, facts, "
        "instructions, sameness): base against adapter in the evaluation, candidate against live in the gate."
    )


class FixturesConfig(_Frozen):
    file: str | None = Field(
        description="Hand-written contrast pairs (YAML: tag, prompt, better, worse), relative to the project root; "
        "null: no fixture figures or checks."
    )
    min_accuracy: float = Field(
        ge=0.0,
        le=1.0,
        description="The asset check reward_fixtures warns when the reward model's scalar prefers the better reply "
        "less often than this (0 to 1).",
    )
    min_tag_accuracy: float = Field(
        ge=0.0, le=1.0, description="... or less often than this within any one tag (0 to 1)."
    )
    min_dimension_accuracy: float = Field(
        ge=0.0,
        le=1.0,
        description="The asset check reward_dimension_fixtures warns when, on the fixtures whose tag is about one "
        "dimension, that dimension alone prefers the better reply less often than this (0 to 1).",
    )
    min_dimension_tag_accuracy: float = Field(
        ge=0.0, le=1.0, description="... or less often than this within any one such tag (0 to 1)."
    )


class ProbesConfig(_Frozen):
    tradeoffs: str | None = Field(
        description="Trade-off scenarios (YAML: id, trade, prompt, a, b, a_higher, b_higher, prefer), relative to "
        "the project root; null: none."
    )
    counterfactuals: str | None = Field(
        description="Counterfactual queries (YAML: id, change, dimension, direction, prompt, reply, changed), "
        "relative to the project root; null: none."
    )
    adversarial_pairs: int = Field(
        ge=0,
        description="Contrast fixtures (fixtures.file) rewritten by each perturbation, drawn by project.seed (the "
        "same every day); 0: no adversarial probe.",
    )
    attribution_examples: int = Field(
        ge=0, description="Counterfactual replies explained by occlusion (an HTML page each), 0: none."
    )
    attribution_words: int = Field(ge=1, le=20, description="Words left out together per occluded span, 1-20.")
    map_replies: int = Field(
        ge=0,
        description="The day's teacher candidates on the manifold map (PCA), beside the day's people's pairs; 0: no "
        "map.",
    )
    collision_replies: int = Field(
        ge=0,
        description="Of them, the replies the dimensions' reward gradients are compared on (reward collisions); 0 "
        "or 1: none.",
    )
    max_flip_rate: float = Field(
        ge=0.0,
        le=1.0,
        description="The probe_consistency check warns when a perturbation flips more than this share of pairs, 0-1.",
    )


class HealthWeights(_Frozen):
    dcs: float = Field(ge=0.0, le=1.0, description="Weight of dimensional coherence, 0-1.")
    gvs: float = Field(ge=0.0, le=1.0, description="Weight of gradient variance stability, 0-1.")
    mss: float = Field(ge=0.0, le=1.0, description="Weight of manifold stability, 0-1.")
    cdrs: float = Field(ge=0.0, le=1.0, description="Weight of cross-domain robustness, 0-1.")
    lrps: float = Field(ge=0.0, le=1.0, description="Weight of local reward predictivity, 0-1.")

    @model_validator(mode="after")
    def _sum_to_one(self) -> HealthWeights:
        total = self.dcs + self.gvs + self.mss + self.cdrs + self.lrps
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"the five RHI weights must sum to 1, they sum to {total:.4f}")
        return self


class ManifoldConfig(_Frozen):
    min_spread_ratio: float = Field(
        ge=0.0,
        le=1.0,
        description="A dimension collapses when its spread over an adapter's training replies is under this share "
        "of its spread over the teacher's labels, 0-1.",
    )
    max_decided_share: float = Field(
        gt=0.0,
        le=1.0,
        description="A column of the scalar (a dimension or the people's score) dominates when it alone decides "
        "more than this share of the pairs, (0, 1].",
    )
    intended: list[str] = Field(
        description="Columns that may dominate (dimension names, or `people` for the people's score)."
    )
    max_mean_correlation: float | None = Field(
        ge=0.0,
        le=1.0,
        description="The dimensions are merged into one when their mean pairwise correlation over an adapter's "
        "training replies is above this, 0-1; null: not checked.",
    )


class HealthConfig(_Frozen):
    calibration: str | None = Field(
        description="The panel's calibration file (normalising constants, weights, threshold, each component's "
        "healthy range; "
        "benchmarks/health_panel.py calibrate writes it), relative to the project root; null: weights, "
        "gvi_max_reference and deploy_threshold below, and no healthy ranges."
    )
    weights: HealthWeights | None = Field(
        description="Weights of the five RHI components; they sum to 1. null: the calibration's."
    )
    gvi_max_reference: float | None = Field(
        gt=0.0,
        description="Gradient-norm coefficient of variation that maps GVS to 0, > 0; null: the calibration's (one "
        "per policy mode).",
    )
    perturbations_per_response: int = Field(
        ge=1, le=100, description="Word-drop perturbations per evaluation reply for manifold stability, 1-100."
    )
    dcs_on: Literal["policy", "reward_model"] = Field(
        description="Where DCS compares the dimensions' gradients: policy (the updates each dimension asks of the "
        "adapter's LoRA) or reward_model (its backbone's last dcs_layers blocks)."
    )
    dcs_layers: int | None = Field(
        ge=1,
        description="DCS compares the dimensions' gradients w.r.t. the reward backbone's last N blocks (and final "
        "norm); null: every parameter.",
    )
    deploy_threshold: float | None = Field(
        ge=0.0,
        le=1.0,
        description="RHI an adapter needs before it may go live, 0-1 (set, the calibration's per-component floors "
        "are not applied); null: the calibration's threshold and floors.",
    )
    confidence: float = Field(
        ge=0.5,
        le=0.999,
        description="One-sided confidence of every sampled check's rule (core/evaluation/noise.py): a candidate is "
        "refused when its figure, less the replaced model's on the same items, is below -margin at this confidence; "
        "a sound candidate fails one check at most 1 - confidence of the time, 0.5-0.999.",
    )
    power: float = Field(
        ge=0.5,
        le=0.99,
        description="The chance at which each check states the smallest drop it detects at its size, 0.5-0.99.",
    )
    win_rate_margin: float | None = Field(
        ge=0.0,
        le=0.5,
        description="How far below 50% the reward model's win rate over the replaced model (greedy replies to the "
        "held-out prompts, a tie half) may fall before the rule refuses, 0-0.5; null: reported with its +-, not "
        "checked.",
    )
    reply_margins: dict[
        Literal["recall", "facts", "instructions", "openings", "stock_phrases", "distinct_bigrams"], float | None
    ] = Field(
        description="How far each figure of the reply checks may fall below the replaced model's before the rule "
        "refuses, 0-1 (recall, facts, instructions: shares of items; openings: share of replies opening unlike any "
        "other; stock_phrases: share without a stock phrase; distinct_bigrams: the replies' distinct bigrams); null "
        "or absent: reported, not checked."
    )
    people_margin: float | None = Field(
        ge=0.0,
        le=1.0,
        description="How far the implicit reward's accuracy on the people's held-out pairs may fall below the "
        "replaced model's before the rule refuses, 0-1; null: not checked.",
    )
    taste_margin: float | None = Field(
        ge=0.0,
        le=0.5,
        description="An online update trained on a person's taste pairs: how far below a coin's 0.5 the chance "
        "their taste model gives of them preferring its reply over the live adapter's (greedy replies to the "
        "held-out prompts) may fall before the rule refuses, 0-0.5; null: reported, not checked.",
    )
    manifold: ManifoldConfig = Field(
        description="Collapse, merging and dominance of the reward signal an adapter was trained on: any blocks its "
        "promotion (check reward_manifold, the live gate)."
    )

    @model_validator(mode="after")
    def _margins_are_shares(self) -> HealthConfig:
        bad = {k: v for k, v in self.reply_margins.items() if v is not None and not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"health.reply_margins are shares, 0-1 (null: not checked); got {bad}")
        return self

    @model_validator(mode="after")
    def _uncalibrated_needs_values(self) -> HealthConfig:
        if self.calibration is None:
            unset = [k for k in ("weights", "gvi_max_reference", "deploy_threshold") if getattr(self, k) is None]
            if unset:
                raise ValueError(
                    f"health.calibration is null, so health.{', health.'.join(unset)} must be set (or "
                    "name a calibration file)"
                )
        return self
