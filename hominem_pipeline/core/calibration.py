"""Calibration of pairwise preferences: P(a preferred over b) = sigmoid((scalar_a - scalar_b) / T).

`fit_temperature` picks T by minimising the negative log-likelihood of the teacher's orderings on
validation pairs (temperature scaling). `calibration_report` gives ECE and MCE over 20 equal-width
bins and the Brier score, counting each pair in both orders (so the bins are symmetric around 0.5),
and `reliability_diagram` draws the bins before and after scaling.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

BINS = 20


def preference_probability(gap: np.ndarray | float, temperature: float) -> np.ndarray:
    """sigmoid(gap / T): the probability that the first response is preferred."""
    return 1.0 / (1.0 + np.exp(-np.asarray(gap, dtype=np.float64) / temperature))


def both_orders(prompt_ids: Sequence[str], teacher: np.ndarray, predicted: np.ndarray, min_gap: float) -> tuple[np.ndarray, np.ndarray]:
    """(predicted gap, 1 if the teacher prefers the first) for every same-prompt pair whose teacher gap
    is at least `min_gap`, in both orders."""
    gaps, outcomes = [], []
    ids = np.asarray(prompt_ids)
    for pid in np.unique(ids):
        rows = np.flatnonzero(ids == pid)
        for a in range(len(rows)):
            for b in range(a + 1, len(rows)):
                i, j = rows[a], rows[b]
                if abs(teacher[i] - teacher[j]) >= min_gap:
                    first = float(teacher[i] > teacher[j])
                    gaps += [predicted[i] - predicted[j], predicted[j] - predicted[i]]
                    outcomes += [first, 1.0 - first]
    return np.asarray(gaps, dtype=np.float64), np.asarray(outcomes, dtype=np.float64)


def _nll(gaps: np.ndarray, outcomes: np.ndarray, temperature: float) -> float:
    p = np.clip(preference_probability(gaps, temperature), 1e-12, 1 - 1e-12)
    return float(-(outcomes * np.log(p) + (1 - outcomes) * np.log(1 - p)).mean())


def fit_temperature(gaps: np.ndarray, outcomes: np.ndarray, lo: float = 1e-3, hi: float = 1e3) -> float:
    """The T minimising the pairs' negative log-likelihood: a log-spaced grid, then golden-section
    search around its best point (the NLL is unimodal in log T for a fixed set of gaps)."""
    if len(gaps) == 0:
        raise ValueError("no validation pairs to fit a temperature on; label more prompts or lower the pair gap")
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
        rows.append({"lo": float(edges[b]), "hi": float(edges[b + 1]), "count": int(mask.sum()), "confidence": conf, "accuracy": acc})
    return {"ece": float(ece), "mce": float(mce), "brier": float(((p - y) ** 2).mean()), "pairs": int(len(p)), "bins": rows}


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
