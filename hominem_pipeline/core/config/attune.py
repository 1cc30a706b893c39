"""The attunement loop's configuration (`attunement:` in config/hominem.yaml; `core.config` re-exports it):
how predictions are checked against people's later choices, when a drift alarm fires, how errors are
clustered and how the next question is chosen."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from hominem_pipeline.core.config.base import _Frozen


class DriftConfig(_Frozen):
    recent_days: int = Field(
        ge=1, le=90, description="Days that make the recent window (ending on the partition), 1-90."
    )
    reference_days: int = Field(
        ge=1, le=365, description="Days before the recent window that make the reference window, 1-365."
    )
    min_choices: int = Field(
        ge=2, description="People's choices each window needs before preference drift is tested, >= 2."
    )
    z: float = Field(
        gt=0.0,
        description="Preference drift: a dimension's agreement with people's choices must differ between the "
        "windows by at least this many standard errors (two-proportion z), > 0.",
    )
    min_shift: float = Field(gt=0.0, le=1.0, description="... and by at least this share of choices, (0, 1].")
    served_p: float = Field(
        gt=0.0,
        lt=1.0,
        description="Served replies' vectors: a dimension drifts when the two-sample Kolmogorov-Smirnov p-value is "
        "below this, (0, 1) ...",
    )
    served_shift: float = Field(
        gt=0.0,
        description="... and its Wasserstein distance is at least this many reference standard deviations, > 0.",
    )
    min_served: int = Field(
        ge=2, description="Served replies each window needs before their vectors are compared, >= 2."
    )


class ClusterConfig(_Frozen):
    min_errors: int = Field(
        ge=2,
        description="People's pairs ordered against them (in the window) needed before errors are clustered, >= 2.",
    )
    max_clusters: int = Field(
        ge=1, le=50, description="Most clusters (the number is chosen by silhouette up to this), 1-50."
    )
    examples: int = Field(ge=1, le=20, description="Example pairs kept per cluster, 1-20.")
    match_similarity: float = Field(
        ge=-1.0,
        le=1.0,
        description="A cluster continues yesterday's when their centroids' cosine is at least this, -1 to 1.",
    )


class SelectionWeights(_Frozen):
    uncertainty: float = Field(ge=0.0, description="Weight of the calibrated uncertainty 1 - |2 P(A) - 1|, >= 0.")
    disagreement: float = Field(
        ge=0.0,
        description="Weight of the ensemble's disagreement: the chance its members' spread flips the order, >= 0.",
    )
    cluster: float = Field(
        ge=0.0, description="Weight of likeness to a growing error cluster (centroid cosine, >= 0 only), >= 0."
    )
    novelty: float = Field(
        ge=0.0, description="Weight of distance from what people answered already (1 - the largest cosine), >= 0."
    )


class SelectionConfig(_Frozen):
    method: Literal["bald", "epig", "design", "parts"] = Field(
        description="How a pair's worth is measured: bald (what one answer would tell of this person's preferences, "
        "from a Laplace posterior over the people's score's features: core/attune/posterior.py) | epig (what it "
        "would tell of their answers to the other pairs of the pool) | design (the share of the people's score's "
        "doubt over the pool's pairs it would settle, given the pairs answered: core/attune/design.py) | parts "
        "(the weighted mean of `weights`). bald, epig and design need a served reward model with a people's score; "
        "without one the parts are used."
    )
    rater_noise: float = Field(
        ge=0.0,
        lt=0.5,
        description="The chance a person answers against their own taste, assumed until their repeated pairs say "
        "otherwise (read with 5 pseudo-repeats at this rate), 0-0.5.",
    )
    random_share: float = Field(
        ge=0.0,
        le=1.0,
        description="Share of questions picked uniformly at random (marked so), so that the log stays an unbiased "
        "sample, 0-1.",
    )
    weights: SelectionWeights = Field(
        description="How the expected information of a pair is made of its parts (normalised by their sum)."
    )
    teacher_candidates: bool = Field(
        description="The teacher's newest candidates join the question pool beside the imported questions (false: "
        "the imported ones alone)."
    )
    pool_sample: int = Field(
        ge=1,
        description="Unanswered pairs scored per pick (a uniform sample of the pool; all when it is smaller), >= 1.",
    )
    retrain_boost: float = Field(
        ge=0.0,
        description="In the reward model's retrain, an answer to a question the service asked weighs 1 + this x the "
        "question's expected information when asked (0-1), >= 0; 0: every answer as given.",
    )


class AttunementConfig(_Frozen):
    window_days: int = Field(
        ge=1, le=365, description="Days of predictions the rolling calibration reads (ending on the partition), 1-365."
    )
    bins: int = Field(ge=2, le=50, description="Bins of the reliability curve and ECE, 2-50.")
    drift: DriftConfig = Field(
        description="When preferences or served replies have drifted (the `preference_drift` check; the retrain "
        "sensor counts it)."
    )
    clusters: ClusterConfig = Field(
        description="The pairs the model orders against people, clustered and followed from day to day."
    )
    selection: SelectionConfig = Field(
        description="Which pair the feedback page asks next, and which pairs a retrain weights up."
    )

    @model_validator(mode="after")
    def _weights(self) -> AttunementConfig:
        w = self.selection.weights
        if w.uncertainty + w.disagreement + w.cluster + w.novelty <= 0:
            raise ValueError(
                "attunement.selection.weights are all 0; give at least one a weight > 0 (or set random_share: 1)"
            )
        return self
