"""The reward model's configuration (`reward_model:` in config/hominem.yaml; `core.config` re-exports it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from hominem_pipeline.core.config.base import LoraConfig, _Frozen


class RewardLossWeights(_Frozen):
    vector: float = Field(ge=0.0, description="Weight of the reward vector's regression loss, >= 0.")
    scalar: float = Field(ge=0.0, description="Weight of the scalar's regression loss, >= 0.")
    intensity: float = Field(ge=0.0, description="Weight of reward_intensity's regression loss, >= 0.")
    safety: float = Field(ge=0.0, description="Weight of safety_score's regression loss, >= 0.")


class RewardLoraConfig(LoraConfig):
    target_modules: list[str] | None = Field(
        description="Module names LoRA wraps; null: PEFT's default projections for the backbone's type."
    )


class RewardBackboneConfig(_Frozen):
    path: str | None = Field(
        description='null: models.encoder (MiniLM); "student": models.student; or an HF folder / hub id.'
    )
    kind: Literal["auto", "encoder", "decoder"] = Field(
        description="auto | encoder | decoder (auto: decoders are the *ForCausalLM checkpoints)."
    )
    pooling: Literal["auto", "mean", "last", "last_mean"] = Field(
        description="auto (mean for encoders, the last real token for decoders) | mean | last | last_mean (both, "
        "side by side)."
    )
    finetune: Literal["full", "lora", "frozen"] = Field(
        description="full | lora (merged into the saved backbone) | frozen (heads only)."
    )
    frame: Literal["pair", "judge", "judge_question"] = Field(
        description="pair: [CLS] prompt [SEP] reply [SEP] | judge: the exchange as the local judge reads it (its "
        "chat template and system text) | judge_question: the same, then the judge's overall question "
        'up to "Rating: ".'
    )
    depth: int | None = Field(
        ge=1,
        le=1000,
        description="Keep the first N transformer layers, 1 to the backbone's depth; the heads read the state after "
        "layer N; null: all.",
    )
    layers: list[int] | None = Field(
        min_length=1,
        description="Pool the states after these layers (1 = the first block's output, within depth) side by side; "
        "null: the last one alone.",
    )
    lora: RewardLoraConfig = Field(description="LoRA on the backbone when finetune is lora.")


class PairLossConfig(_Frozen):
    weight: float = Field(ge=0.0, description="Weight of the Bradley-Terry loss on the scalar head, >= 0.")
    scale: float = Field(
        gt=0.0, le=100.0, description="Logit = scale * (s_preferred - s_other); the scalar lives in [-1, 1]."
    )
    teacher_weight: float = Field(ge=0.0, description="Weight per same-prompt teacher pair (scalar gap >= 0.1), >= 0.")
    human_weight: float = Field(ge=0.0, description="Weight per human_preferences pair, >= 0.")


class UncertaintyConfig(_Frozen):
    method: Literal["ensemble", "mc_dropout", "none"] = Field(
        description="ensemble (heads on the shared backbone, each on its own bootstrap of the prompts) | mc_dropout "
        "(passes with dropout on) | none."
    )
    members: int = Field(ge=1, le=64, description="Ensemble heads, 1-64.")
    mc_samples: int = Field(ge=2, le=256, description="mc_dropout: forward passes per score, 2-256.")


class PeoplePairsConfig(_Frozen):
    file: str = Field(
        min_length=1, description="A file of preference pairs people gave, relative to the project root."
    )
    format: Literal["hh-rlhf", "jsonl", "parquet"] = Field(
        description="The file's format, as `hominem data import-preferences --format` reads it."
    )
    heads: int | None = Field(
        default=None,
        ge=0,
        description="The heads (which read each text through the backbone and the student's guards) learn from the "
        "first N pairs of the file, the people's score from all of them; null: the heads from all.",
    )
    held_out: int = Field(
        default=0,
        ge=0,
        description="No adapter learns from the file's last N pairs: they are the people's held-out pairs every "
        "adapter is judged on (its implicit reward, which never reads the reward model; the reward "
        "model learns from them); 0: none.",
    )
    harm: bool = Field(
        default=False,
        description="People chose by harm here (the rejected reply is the more harmful one, as in HH-RLHF "
        "harmless-base): with the pairs tagged harm_avoidance, these ground the safety score.",
    )


class InvarianceConfig(_Frozen):
    sources: int = Field(
        ge=0,
        le=100_000,
        description="People's chosen replies the invariance pairs are made from (each gives a word salad, a spam "
        "and a cheer reply it must beat, and a typo, typos, lower case and a framed message it must equal), "
        "0-100000; 0: none.",
    )
    degenerate_weight: float = Field(
        ge=0.0, le=100.0, description="Weight of a degenerate pair, as a people's pair of weight 1 weighs, 0-100."
    )
    rewrite_weight: float = Field(
        ge=0.0,
        le=100.0,
        description="Weight of an equal (rewritten) pair, as a people's pair of weight 1 weighs, 0-100.",
    )


class PeopleScoreConfig(_Frozen):
    encoder: str | None = Field(
        description="The frozen sentence encoder the people's score reads: encoder (models.encoder, MiniLM) | an HF "
        "encoder folder relative to the project | null (no people's score)."
    )
    max_length: int = Field(
        ge=16,
        le=512,
        description="Tokens of [CLS] prompt [SEP] reply [SEP] the encoder reads (the prompt cut from the left "
        "first), 16-512.",
    )
    invariance: InvarianceConfig = Field(
        description="Pairs that teach the score what must not move it and what it must never prefer."
    )


class RewardModelConfig(_Frozen):
    window_days: int = Field(
        ge=1,
        le=3650,
        description="Trains on teacher_labels (and human_preferences) of this many days up to its own partition.",
    )
    backbone: RewardBackboneConfig = Field(description="The network that reads the exchange.")
    max_length: int = Field(
        ge=16, le=4096, description="Tokens of prompt + reply (the prompt is cut from the left first)."
    )
    epochs: int = Field(ge=1, le=1000, description="Gradient training: epochs at most.")
    batch_size: int = Field(ge=1, le=4096, description="Gradient training: examples per step.")
    learning_rate: float = Field(gt=0.0, lt=1.0, description="Gradient training: the backbone's learning rate.")
    head_learning_rate: float = Field(gt=0.0, lt=1.0, description="Gradient training: the heads' learning rate.")
    weight_decay: float = Field(ge=0.0, lt=1.0, description="Gradient training: AdamW weight decay.")
    val_fraction: float = Field(
        gt=0.0,
        lt=1.0,
        description="Gradient training: share of prompts held out for early stopping and the reported metrics.",
    )
    early_stopping_patience: int = Field(
        ge=1, le=1000, description="Gradient training: epochs without validation improvement before stopping."
    )
    loss_weights: RewardLossWeights = Field(description="Per-head regression on the teacher's labels.")
    pair_loss: PairLossConfig = Field(
        description="Bradley-Terry on the scalar over same-prompt teacher pairs and imported human pairs."
    )
    rationale_weight: float = Field(
        ge=0.0, description="> 0: an auxiliary head predicts the embedding of the teacher's rationale; 0: off."
    )
    uncertainty: UncertaintyConfig = Field(description="How each score's uncertainty is estimated.")
    human_preferences: bool = Field(
        description="Also train on the human pairs of the window: imported (human_preferences) and people's "
        "feedback to `hominem serve` (human_feedback)."
    )
    people_pairs: list[PeoplePairsConfig] = Field(
        description="Files of people's pairs every reward model learns from, beside the window's imports and "
        "feedback; []: none."
    )
    dimension_pairs: bool = Field(
        description="People's pairs tagged with a dimension (a `tag` naming it, or truth / relevance: "
        "core/common/tags.py) also supervise that dimension's head, so it orders them as the person did "
        "where the judge's labels disagree; false: every people's pair supervises the scalar alone."
    )
    safety: Literal["people", "judge"] = Field(
        description="people (ridge heads with a people's score): the safety score is re-weighed on people's harm "
        "pairs (people_pairs files marked harm, pairs tagged harm_avoidance) as sigmoid(a * the judge's safety "
        "logit + b * people's score + c), a, b >= 0 (core/reward/training/safety.py) | judge: the judge's "
        "safety labels alone."
    )
    scalar: Literal["combined", "free"] = Field(
        description="combined (ridge heads): the scalar is tanh(sum_d c_d * dimension_d + w * people's score + b) "
        "with every c_d, w >= 0, fitted on people's pairs out of fold (the judge's when there are too "
        "few) (core/reward/combination.py), so a reply at least as good on every dimension and on the "
        "people's score never scores lower | free: its own head, pulled by people's pairs. Gradient "
        "heads always learn their own."
    )
    min_human_agreement: float = Field(
        ge=0,
        le=1,
        description="The asset check human_agreement warns when people agree with the model's out-of-fold order of "
        "their pairs less often than this (0 to 1; 0.5 is chance).",
    )
    dropout: float = Field(ge=0.0, lt=1.0, description="Dropout before the heads, [0, 1).")
    length_feature: bool = Field(
        description="The heads also read log(tokens of prompt + reply) (LLM judges weigh length; mean pooling "
        "averages it away)."
    )
    guards: list[Literal["reply_logp", "prompt_gain"]] = Field(
        description="Columns from the student the heads also read (reply_logp: its mean log-probability per reply "
        "token given the prompt; prompt_gain: that minus the same without the prompt); []: none."
    )
    people_score: PeopleScoreConfig = Field(
        description="A linear model of every people's pair on a small frozen encoder, read by the heads as one more "
        "column (core/reward/people.py)."
    )
    head_fit: Literal["gradient", "ridge"] = Field(
        description="gradient: heads (and an unfrozen backbone) trained on the losses | ridge (frozen backbones): "
        "heads solved in closed form, the penalty by cross-validation over prompts."
    )
    ridge_alphas: list[float] = Field(description="Ridge penalties tried by cross-validation, each > 0.")

    @model_validator(mode="after")
    def _check(self) -> RewardModelConfig:
        if self.head_fit == "ridge" and self.backbone.finetune != "frozen":
            raise ValueError(
                "head_fit ridge solves the heads on fixed features: set reward_model.backbone.finetune "
                f"to frozen (it is {self.backbone.finetune!r}), or use head_fit gradient"
            )
        if not self.ridge_alphas or min(self.ridge_alphas) <= 0:
            raise ValueError(f"ridge_alphas {self.ridge_alphas}: give one or more penalties above 0")
        if len(set(self.guards)) != len(self.guards):
            raise ValueError(f"reward_model.guards {self.guards}: name each guard once")
        if self.people_score.encoder is not None and self.head_fit != "ridge":
            raise ValueError(
                "reward_model.people_score is combined with ridge heads (head_fit: ridge); with "
                "head_fit gradient set people_score.encoder: null"
            )
        return self
