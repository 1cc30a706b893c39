"""Each pair's reward intensity and safety score, as the dual-channel loss weighs and gates it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from hominem_pipeline.core.config import DualConfig

if TYPE_CHECKING:
    from hominem_pipeline.core.reward.model import RewardModel


@dataclass(frozen=True)
class PairLabels:
    intensity: np.ndarray  # per pair, after normalisation
    safety: np.ndarray
    raw_intensity_mean: float


def pair_labels(pairs: pd.DataFrame, cfg: DualConfig, reward_model: RewardModel | None = None) -> PairLabels:
    """Each pair's reward intensity and safety score from the configured sources: the teacher's label of
    the chosen reply, the reward model's score of it, or (intensity only) the constant 1; a pair's optional
    `weight` column (the nudges' weights of an online update) multiplies its intensity."""
    if pairs.empty:
        return PairLabels(np.zeros(0), np.zeros(0), 1.0)
    scored: dict[str, np.ndarray] = {}
    if "reward_model" in (cfg.intensity_source, cfg.safety_source):
        if reward_model is None:
            raise ValueError(
                "policy.dual takes intensity or safety from the reward model, but none was given; set "
                "the sources to teacher"
            )
        scored = reward_model.raw_scores(list(pairs["prompt"]), list(pairs["chosen"]))
    if cfg.intensity_source == "constant":
        intensity = np.ones(len(pairs))
    elif cfg.intensity_source == "teacher":
        intensity = pairs["chosen_reward_intensity"].to_numpy(dtype=np.float64)
    else:
        intensity = np.asarray(scored["reward_intensity"], dtype=np.float64)
    safety = (
        pairs["chosen_safety_score"].to_numpy(dtype=np.float64)
        if cfg.safety_source == "teacher"
        else np.asarray(scored["safety_score"], dtype=np.float64)
    )
    if "weight" in pairs:
        intensity = intensity * pairs["weight"].to_numpy(dtype=np.float64)
    intensity = np.clip(intensity, 0.0, None)
    mean = float(intensity.mean())
    if cfg.normalize_intensity and mean > 0:
        intensity = intensity / mean
    return PairLabels(intensity, np.clip(safety, 0.0, 1.0), mean)
