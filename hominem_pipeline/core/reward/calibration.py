"""Calibration of pairwise preferences: P(a preferred over b) = sigmoid((scalar_a - scalar_b) / T).

`fit_temperature` picks T by minimising the negative log-likelihood of the teacher's orderings on validation pairs
(temperature scaling), against Platt's smoothed targets so that a small set the model happens to order perfectly
does not drive T to zero (certainty it has not earned). `calibration_report` gives ECE and MCE over 20 equal-width
bins and the Brier score, counting each pair in both orders (so the bins are symmetric around 0.5), and
`reliability_diagram` draws the bins before and after scaling."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

BINS = 20


def preference_probability(gap: np.ndarray | float, temperature: float) -> np.ndarray:
    """sigmoid(gap / T): the probability that the first response is preferred."""
    return 0.5 * (1.0 + np.tanh(np.asarray(gap, dtype=np.float64) / (2.0 * temperature)))  # no overflow for large gaps


def same_prompt_pairs(prompt_ids: Sequence[str], values: np.ndarray, min_gap: float) -> np.ndarray:
    """Rows (preferred, other) of every same-prompt pair whose `values` differ by at least `min_gap`."""
    pairs = []
    ids = np.asarray(prompt_ids)
    for pid in np.unique(ids):
        rows = np.flatnonzero(ids == pid)
        for a in range(len(rows)):
            for b in range(a + 1, len(rows)):
                i, j = rows[a], rows[b]
                if abs(values[i] - values[j]) >= min_gap:
                    pairs.append((i, j) if values[i] > values[j] else (j, i))
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def both_orders(pairs: np.ndarray, predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(predicted gap, 1 if the first is the preferred one) for every (preferred, other) pair, in both
    orders: the bins are then symmetric around 0.5 and the report does not depend on pair order."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    gap = np.asarray(predicted, dtype=np.float64)[pairs[:, 0]] - np.asarray(predicted, dtype=np.float64)[pairs[:, 1]]
    return np.concatenate([gap, -gap]), np.concatenate([np.ones(len(gap)), np.zeros(len(gap))])


def ece_noise_floor(probabilities: np.ndarray, bins: int = BINS, draws: int = 400, seed: int = 0) -> float:
    """The ECE a perfectly calibrated model would still read on these pairs: each pair's outcome drawn
    from its own probability (`probabilities`: P(first preferred) of each pair once; the mirror is
    counted as `both_orders` does), the mean ECE over `draws`. Few pairs read a large ECE however good
    the model: about 0.12 on 54 pairs of an ~80% accurate model, 0.04 on 578 (docs/BENCHMARKS.md)."""
    p = np.asarray(probabilities, dtype=np.float64)
    if len(p) == 0:
        raise ValueError("no pairs: the ECE noise floor needs at least one pair's probability")
    rng = np.random.default_rng(seed)
    mirrored = np.concatenate([p, 1.0 - p])
    eces = []
    for _ in range(draws):
        y = (rng.random(len(p)) < p).astype(np.float64)
        eces.append(calibration_report(mirrored, np.concatenate([y, 1.0 - y]), bins)["ece"])
    return float(np.mean(eces))


def _nll(gaps: np.ndarray, targets: np.ndarray, temperature: float) -> float:
    p = np.clip(preference_probability(gaps, temperature), 1e-12, 1 - 1e-12)
    return float(-(targets * np.log(p) + (1 - targets) * np.log(1 - p)).mean())


def platt_targets(outcomes: np.ndarray) -> np.ndarray:
    """Platt's (1999) targets: (N+ + 1) / (N+ + 2) for a preferred outcome, 1 / (N- + 2) for the other,
    the Bayesian estimate with a uniform prior. With thousands of pairs they are 0 and 1 in effect; with
    a dozen, they cap the confidence a perfectly ordered set can claim."""
    y = np.asarray(outcomes, dtype=np.float64)
    positives = float((y > 0.5).sum())
    negatives = float(len(y) - positives)
    return np.where(y > 0.5, (positives + 1.0) / (positives + 2.0), 1.0 / (negatives + 2.0))


def fit_temperature(gaps: np.ndarray, outcomes: np.ndarray, lo: float = 1e-3, hi: float = 1e3) -> float:
    """The T minimising the pairs' negative log-likelihood against `platt_targets`: a log-spaced grid,
    then golden-section search around its best point (the NLL is unimodal in log T for a fixed set of
    gaps)."""
    if len(gaps) == 0:
        raise ValueError("no validation pairs to fit a temperature on; label more prompts or lower the pair gap")
    outcomes = platt_targets(outcomes)
    grid = np.geomspace(lo, hi, 121)
    k = int(np.argmin([_nll(gaps, outcomes, t) for t in grid]))
    a, b = np.log(grid[max(k - 1, 0)]), np.log(grid[min(k + 1, len(grid) - 1)])
    ratio = (np.sqrt(5) - 1) / 2
    for _ in range(60):
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        if _nll(gaps, outcomes, np.exp(c)) <= _nll(gaps, outcomes, np.exp(d)):
            b = d
        else:
            a = c
    return float(np.exp((a + b) / 2))


def calibration_report(probabilities: np.ndarray, outcomes: np.ndarray, bins: int = BINS) -> dict[str, Any]:
    """ECE (bin-weighted mean |accuracy - confidence|), MCE (the largest such gap), Brier score, and the bins."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(outcomes, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(p, edges[1:-1], right=False), 0, bins - 1)
    rows, ece, mce = [], 0.0, 0.0
    for b in range(bins):
        mask = which == b
        if not mask.any():
            continue
        conf, acc = float(p[mask].mean()), float(y[mask].mean())
        ece += mask.mean() * abs(acc - conf)
        mce = max(mce, abs(acc - conf))
        rows.append(
            {
                "lo": float(edges[b]),
                "hi": float(edges[b + 1]),
                "count": int(mask.sum()),
                "confidence": conf,
                "accuracy": acc,
            }
        )
    return {
        "ece": float(ece),
        "mce": float(mce),
        "brier": float(((p - y) ** 2).mean()),
        "pairs": int(len(p)),
        "bins": rows,
    }


def reliability_diagram(before: dict[str, Any], after: dict[str, Any], path: Path, title: str) -> None:
    """Accuracy against confidence per bin, before and after temperature scaling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 5.0))
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect calibration")
    for report, name, style in ((before, "before", "o-"), (after, "after", "s-")):
        xs = [b["confidence"] for b in report["bins"]]
        ys = [b["accuracy"] for b in report["bins"]]
        ax.plot(xs, ys, style, markersize=4, label=f"{name}: ECE {report['ece']:.3f}, Brier {report['brier']:.3f}")
    ax.set_xlabel("predicted P(first preferred)")
    ax.set_ylabel("share the teacher preferred first")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def reliability_grid(panels: dict[str, tuple[dict[str, Any], float, float | None]], path: Path, title: str) -> None:
    """One small reliability diagram per name (a reward dimension): its report after scaling, its T and
    its held-out ECE (None when it could not be held out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, max(1, len(panels)))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 3.0 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax, (name, (report, temperature, held_out)) in zip(axes.flat, panels.items()):
        ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1)
        ax.plot([b["confidence"] for b in report["bins"]], [b["accuracy"] for b in report["bins"]], "s-", markersize=3)
        held = "n/a" if held_out is None else f"{held_out:.3f}"
        ax.set_title(
            f"{name}: {report['pairs'] // 2} pairs, T {temperature:.3g}\nECE {report['ece']:.3f} in "
            f"sample, {held} held out",
            fontsize=8,
        )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=10)
    fig.supxlabel("predicted P(first better on the dimension)", fontsize=8)
    fig.supylabel("share the teacher rated first better", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def uncertainty_report(gap: np.ndarray, spread: np.ndarray, outcomes: np.ndarray, bins: int = 10) -> dict[str, Any]:
    """Whether a head's uncertainty means something on held-out pairs. `gap`: the head's score of the first reply
    minus the second's; `spread`: the pair's standard deviation, sqrt(sd_a^2 + sd_b^2) of the ensemble members'
    scores; `outcomes`: 1 where people preferred the first.

    - "ece", "bins": calibration of Phi(gap / spread), the probability the uncertainty itself implies that the
      first is better (counted in both orders, `calibration_report`).
    - "auroc": how well the certainty |gap| / spread ranks right orderings above wrong ones (0.5: it says
      nothing; 1: every wrong ordering is less certain than every right one); "auroc of the gap": the same
      for |gap| alone, so that what the spread adds shows.
    - "accuracy by certainty": the share ordered right in the least, middle and most certain thirds."""
    from scipy.special import ndtr
    from scipy.stats import rankdata

    gap, spread = np.asarray(gap, dtype=np.float64), np.asarray(spread, dtype=np.float64)
    y = np.asarray(outcomes, dtype=np.float64)
    if not len(gap) == len(spread) == len(y):
        raise ValueError(f"gap, spread and outcomes differ in length ({len(gap)}, {len(spread)}, {len(y)})")
    if len(gap) == 0:
        raise ValueError("no pairs: the uncertainty check needs held-out pairs")
    if not (spread > 0).all():
        raise ValueError(
            f"{int((spread <= 0).sum())} pairs have no spread: train with reward_model.uncertainty.method "
            "ensemble (or mc_dropout) to give each head an uncertainty"
        )
    z = gap / spread
    report = calibration_report(np.concatenate([ndtr(z), ndtr(-z)]), np.concatenate([y, 1.0 - y]), bins)
    right = (gap > 0) == (y > 0.5)
    certainty = np.abs(z)
    n_right, n_wrong = int(right.sum()), int((~right).sum())

    def auroc(score: np.ndarray) -> float | None:
        ranks = rankdata(score)
        return (
            float((ranks[right].sum() - n_right * (n_right + 1) / 2) / (n_right * n_wrong))
            if n_right and n_wrong
            else None
        )

    thirds = np.array_split(np.argsort(certainty, kind="stable"), 3)
    return {
        **report,
        "accuracy": float(right.mean()),
        "auroc": auroc(certainty),
        "auroc of the gap": auroc(np.abs(gap)),
        "accuracy by certainty": [float(right[t].mean()) if len(t) else None for t in thirds],
        "median z": float(np.median(certainty)),
    }
