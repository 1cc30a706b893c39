"""CDRS (whether the adapter's gains hold across the prompts' domains) and LRPS (whether the reward of a reply's
first half predicts the whole's)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from hominem_pipeline.core.common.stats import pearson
from hominem_pipeline.core.evaluation.health.components import Component, clip01
from hominem_pipeline.core.reward.model import RewardModel


def _binary_entropy(p: float) -> float:
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return float(-(p * math.log2(p) + (1 - p) * math.log2(1 - p)))


CDRS_DRAWS = 200  # bootstrap resamples of the held-out prompts for CDRS's standard error


def cross_domain_robustness(
    table: pd.DataFrame, dimensions: Sequence[str], against: str = "overall", draws: int = CDRS_DRAWS
) -> Component:
    """CDRS = 1 - (C_contradiction + C_entropy + (1 - C_consistency)) / 3 across prompt categories.

    C_contradiction: share of (category, dimension) cells whose mean adapter-base delta has the
    opposite sign of that dimension's overall delta. C_entropy: mean binary entropy of each category's
    win rate (a coin-flip category is unsettled). C_consistency: 1 - 2 * std of the categories' win rates.

    `against="improvement"` reads them against the direction of improvement, so that an adapter worse than
    the base everywhere is not "robust": a cell contradicts when the adapter is worse than the base there,
    and C_consistency is the share of categories where the adapter wins at least half the prompts.

    Its noise: the standard deviation of CDRS over `draws` resamples of the prompts, drawn with replacement within
    each category (a category's win rate on 2 prompts can only be 0, 0.5 or 1), in `details["standard_error"]`."""
    if table.empty or table["category"].nunique() < 2:
        return Component("cdrs", None, "needs evaluation prompts from at least 2 categories")
    deltas = np.array(
        [[_num(a, d) - _num(b, d) for d in dimensions] for a, b in zip(table["adapter_vector"], table["base_vector"])],
        dtype=float,
    ).reshape(len(table), len(dimensions))
    category, names = pd.factorize(table["category"])
    outcome = table["adapter_outcome"].to_numpy(dtype=float)
    value, details = _cdrs(deltas, category, len(names), outcome, against)
    if draws:
        rng = np.random.default_rng(0)
        groups = [np.flatnonzero(category == c) for c in range(len(names))]
        again = []
        for _ in range(draws):
            rows = np.concatenate([rng.choice(g, len(g)) for g in groups])
            again.append(_cdrs(deltas[rows], category[rows], len(names), outcome[rows], against)[0])
        details["standard_error"] = float(np.std(again, ddof=1))
    return Component(
        "cdrs",
        clip01(value),
        f"per-category reward deltas and win rates over {details['categories']} categories of held-out prompts"
        + (f" (+- {details['standard_error']:.3f}, a bootstrap over the prompts)" if draws else ""),
        details,
    )


def _num(vector: dict, d: str) -> float:
    value = vector.get(d) if isinstance(vector, dict) else None
    return float("nan") if value is None else float(value)  # an unscored (empty) response is NaN


def _group_means(values: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """The mean of `values` (rows, or rows x columns) within each of `groups` groups, NaN left out; NaN where a
    group has no value."""
    values = values.reshape(len(values), -1)
    seen = np.isfinite(values)
    sums = np.zeros((groups, values.shape[1]))
    counts = np.zeros((groups, values.shape[1]))
    np.add.at(sums, group, np.where(seen, values, 0.0))
    np.add.at(counts, group, seen)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts


def _cdrs(
    deltas: np.ndarray, category: np.ndarray, categories: int, outcome: np.ndarray, against: str
) -> tuple[float, dict]:
    """CDRS from the adapter-minus-base `deltas` (prompts x dimensions), each prompt's `category` (0 to
    `categories` - 1) and the adapter's `outcome` against the base on it (1 win, 0.5 tie, 0 loss)."""
    overall = _group_means(deltas, np.zeros(len(deltas), dtype=int), 1)[0]
    if against == "improvement":  # a cell contradicts when the adapter is worse than the base there, whatever the sign
        overall = np.maximum(np.abs(overall), 1.0)
    per_cat = _group_means(deltas, category, categories)
    settled = np.isfinite(overall) & (np.abs(overall) >= 1e-6)
    cells = np.isfinite(per_cat) & (np.abs(per_cat) >= 1e-6) & settled
    contradictions = int((cells & (np.sign(per_cat) != np.sign(overall))).sum())
    c_contra = contradictions / int(cells.sum()) if cells.any() else 0.0
    win = _group_means(outcome, category, categories)[:, 0]
    win = win[np.isfinite(win)]
    c_entropy = float(np.mean([_binary_entropy(w) for w in win]))
    if against == "improvement":
        c_consistency = float((win >= 0.5).mean())
    else:
        c_consistency = clip01(1.0 - 2.0 * float(win.std()))
    value = 1.0 - (c_contra + c_entropy + (1.0 - c_consistency)) / 3.0
    return clip01(value), {
        "c_contradiction": c_contra,
        "c_entropy": c_entropy,
        "c_consistency": c_consistency,
        "categories": int(len(win)),
    }


def local_reward_predictivity(
    reward_model: RewardModel, prompts: Sequence[str], responses: Sequence[str]
) -> Component:
    """LRPS = max(0, corr(r_local, r_trajectory)): does the reward of a response's first half predict
    the reward of the whole response? Measured on the adapter's own replies (the trajectories it produces:
    a policy that degenerates midway breaks it; the base's replies would only dilute it)."""
    pairs = [(p, r) for p, r in zip(prompts, responses) if len(r.split()) >= 4]
    if len(pairs) < 3:
        return Component("lrps", None, "needs at least 3 responses of 4+ words")
    ps = [p for p, _ in pairs]
    local = reward_model.raw_scores(ps, [first_half(r) for _, r in pairs])["scalar"]
    full = reward_model.raw_scores(ps, [r for _, r in pairs])["scalar"]
    return predictivity_of(local, full)


def first_half(response: str) -> str:
    """The first half of a response's words: what LRPS scores as the local reward."""
    words = response.split()
    return " ".join(words[: len(words) // 2])


def predictivity_of(local: np.ndarray, full: np.ndarray) -> Component:
    """LRPS from the reward model's scalars on the responses' first halves and on the whole responses."""
    corr = pearson(np.asarray(local, dtype=np.float64), np.asarray(full, dtype=np.float64))
    if corr is None:
        return Component("lrps", None, "reward scalars did not vary across responses")
    return Component(
        "lrps",
        clip01(max(0.0, corr)),
        f"Pearson correlation of reward on the first half vs the whole of {len(full)} evaluation responses",
        {"pearson": corr, "responses": len(full)},
    )
