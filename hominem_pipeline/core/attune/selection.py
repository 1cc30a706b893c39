"""Information gain: which unanswered pair a
person is asked next.

A candidate pair's expected information is the weighted mean (`attunement.selection.weights`) of four
parts, each 0-1:

- **uncertainty**: 1 - |2 P(A) - 1|, the calibrated probability's distance from a coin toss reversed;
- **disagreement**: the chance the ensemble's spread flips the order, 2 Phi(-|gap| / spread) (0 for a
  model without an ensemble or dropout passes);
- **cluster**: likeness to a growing error cluster (the largest centroid cosine, in either order of
  the pair, 0 when negative);
- **novelty**: 1 - the largest cosine of the prompt's embedding to those of pairs already answered.

A configured share (`random_share`) is picked uniformly at random and marked so: the log stays an
unbiased sample, from which calibration can be read without the selection's bias.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

PARTS = ("uncertainty", "disagreement", "cluster", "novelty")


def disagreement(gap: np.ndarray, spread: np.ndarray) -> np.ndarray:
    from scipy.stats import norm

    gap, spread = np.abs(np.asarray(gap, dtype=np.float64)), np.asarray(spread, dtype=np.float64)
    out = np.zeros_like(gap)
    ok = spread > 0
    out[ok] = 2 * norm.cdf(-gap[ok] / spread[ok])
    return out


def information(
    p_a: np.ndarray,
    gap: np.ndarray,
    spread: np.ndarray,
    weights: Any,
    cluster: np.ndarray | None = None,
    novelty: np.ndarray | None = None,
) -> pd.DataFrame:
    """Each part and the weighted `value` per candidate; a part not measured (None) is 0 and left out of the
    weights."""
    p_a = np.asarray(p_a, dtype=np.float64)
    parts = {
        "uncertainty": 1 - np.abs(2 * p_a - 1),
        "disagreement": disagreement(gap, spread),
        "cluster": np.zeros(len(p_a)) if cluster is None else np.clip(cluster, 0, 1),
        "novelty": np.zeros(len(p_a)) if novelty is None else np.clip(novelty, 0, 1),
    }
    w = {k: float(getattr(weights, k)) for k in PARTS}
    if cluster is None:
        w["cluster"] = 0.0
    if novelty is None:
        w["novelty"] = 0.0
    total = sum(w.values()) or 1.0
    frame = pd.DataFrame(parts)
    frame["value"] = sum(w[k] * frame[k] for k in PARTS) / total
    frame.attrs["weights"] = {k: v / total for k, v in w.items()}
    return frame


@dataclass(frozen=True)
class Pick:
    index: int  # the row of the candidates
    by: str  # information | random
    value: float
    parts: dict[str, float]
    reason: str  # one line for the page


def pick(
    info: pd.DataFrame,
    random_share: float,
    rng: np.random.Generator,
    p_a: np.ndarray | None = None,
    cluster_names: list[str | None] | None = None,
) -> Pick:
    """The next question among the candidates scored by `information`: at random with probability
    `random_share`, else the most informative (ties to the first)."""
    if not len(info):
        raise ValueError("no candidate pair to ask about; the question pool is empty or every pair is answered")
    parts = lambda i: {k: float(info.at[i, k]) for k in PARTS}  # noqa: E731
    if rng.random() < random_share:
        i = int(rng.integers(len(info)))
        return Pick(
            i,
            "random",
            float(info.at[i, "value"]),
            parts(i),
            f"picked at random ({random_share:.0%} of questions are), so what people answer stays an unbiased sample",
        )
    i = int(np.argmax(info["value"].to_numpy()))
    w = info.attrs.get("weights", {k: 1.0 for k in PARTS})
    # the reason: the part by which it leads the other candidates most
    top = max(PARTS, key=lambda k: w.get(k, 0.0) * (float(info.at[i, k]) - float(info[k].mean())))
    reason = {
        "uncertainty": f"the reward model is unsure which you prefer (P(A) = {float(p_a[i]):.2f})"
        if p_a is not None
        else "the reward model is unsure",
        "disagreement": "the reward model's ensemble members disagree on it",
        "cluster": f"it is like pairs the model gets wrong ({cluster_names[i]})"
        if cluster_names and cluster_names[i]
        else "it is like pairs the model gets wrong",
        "novelty": "it is unlike anything people have answered so far",
    }[top]
    return Pick(i, "information", float(info.at[i, "value"]), parts(i), f"asked because {reason}")


def informative_reason(p_a: float, settles: float, method: str = "bald") -> str:
    """Why a pair was asked by expected information, in words: how unsure the model is of this person's choice,
    and how much of that doubt one answer would settle (the rest is how answers vary); by design, how much of the
    model's doubt over the pairs they could be asked."""
    lean, share = ("A", p_a) if p_a >= 0.5 else ("B", 1.0 - p_a)
    unsure = (
        f"the model cannot tell which you would choose (it gives {lean} {share:.0%})"
        if share < 0.65
        else f"the model leans to {lean} ({share:.0%}) but is unsure of it"
    )
    if method == "design":
        return (
            f"asked because {unsure}, and your answer would settle about {settles:.0%} of its doubt over the pairs "
            "you could be asked"
        )
    return f"asked because {unsure}, and your answer would settle about {settles:.0%} of that doubt"


def pick_informative(worth: Any, random_share: float, rng: np.random.Generator) -> Pick:
    """The next question among candidates whose worth `posterior.expected_information` gave: at random with
    probability `random_share`, else the one whose answer is expected to tell most (ties to the first). Its parts:
    the expected information (bits; by design, the share of the model's doubt over the candidates), the share of the
    doubt it would settle, and P(A) for this person."""
    if not len(worth.value):
        raise ValueError("no candidate pair to ask about; the question pool is empty or every pair is answered")

    def parts(i: int) -> dict[str, float]:
        return {
            "information": float(worth.value[i]),
            "settles": float(worth.settles[i]),
            "p_a": float(worth.predictive[i]),
        }

    if rng.random() < random_share:
        i = int(rng.integers(len(worth.value)))
        reason = (
            f"picked at random ({random_share:.0%} of questions are), so what people answer stays an unbiased sample"
        )
        return Pick(i, "random", float(worth.value[i]), parts(i), reason)
    i = int(np.argmax(worth.value))
    reason = informative_reason(float(worth.predictive[i]), float(worth.settles[i]), worth.method)
    return Pick(i, "information", float(worth.value[i]), parts(i), reason)
