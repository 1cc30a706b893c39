"""The reward manifold's failure shapes that block a release: a reward dimension that collapsed, or a single
dimension that dominates where it is not intended to.

- **Collapse**: a dimension whose reward vectors barely vary over the replies an adapter learns from says
  nothing about them; the adapter learns nothing from it, or learns a constant. Measured as each
  dimension's standard deviation over the replies against the same dimension's over the teacher's labels
  the reward model learned from (the spread it was taught, `RewardMetadata.label_spread`): a ratio under
  `health.manifold.min_spread_ratio` is a collapse.
- **Merging** (the dimensions collapse into one): each dimension still spreads, but they move together, so
  the seven scores say one thing seven times and nothing about their trade-offs. Measured as the mean
  Pearson correlation over the pairs of dimensions across the same replies; above
  `health.manifold.max_mean_correlation` the dimensions are merged. (DCS reads merged dimensions as
  perfectly coherent: their updates agree because they are the same update.)
- **Dominance**: the scalar orders a pair by the sum of its columns' contributions (c_d x gap_d,
  `reward.combination`: the seven dimensions and the people's score). A column *decides* a pair when its
  contribution outweighs all the others' together (|c_d gap_d| > sum over e != d of |c_e gap_e|): the
  pair goes its way whatever the others say. A column that decides more than
  `health.manifold.max_decided_share` of the pairs dominates, unless it is `intended` (by default the
  people's score: the scalar is grounded in people by design). Also reported: each column's share of the
  mean absolute contribution.

The figures (`ManifoldShape`) are measured once, on an adapter's training pairs, and kept in the adapter's
folder (`manifold.json`); the `reward_manifold` check on `lora_adapter` and the live gate both judge them
against the configured thresholds (`verdict`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from hominem_pipeline.core.reward.model import RewardModel

MANIFOLD = "manifold.json"  # in an adapter's folder: the figures of the reward signal it was trained on
MANIFOLD_PLOT = "manifold.png"
PEOPLE = "people"  # the people's score's column in the dominance figures


@dataclass(frozen=True)
class Verdict:
    collapsed: list[str]
    dominant: list[str]
    reasons: list[str]
    thresholds: dict[str, Any]
    merged: bool = False  # the dimensions move as one (mean correlation above the threshold)

    @property
    def blocked(self) -> bool:
        return bool(self.collapsed or self.dominant or self.merged)

    def summary(self) -> str:
        if self.blocked:
            return "; ".join(self.reasons)
        t = self.thresholds
        merged = (
            ""
            if t.get("mean_correlation") is None or t.get("max_mean_correlation") is None
            else f", the dimensions are distinct (mean correlation {t['mean_correlation']:.2f} <= "
            f"{t['max_mean_correlation']})"
        )
        return (
            f"no dimension collapsed (spread ratio >= {t['min_spread_ratio']}){merged} and none dominates "
            f"(decides <= {t['max_decided_share']:.0%} of pairs; intended: {', '.join(t['intended']) or 'none'})"
        )


@dataclass(frozen=True)
class ManifoldShape:
    """Collapse, merging and dominance figures of one reward model on one set of pairs (both replies of each)."""

    spread: dict[str, float]  # each dimension's std over the replies
    reference_spread: dict[str, float]  # ... over the teacher's labels
    spread_ratio: dict[str, float | None]  # spread / reference (None: the reference is flat)
    decided_share: dict[
        str, float
    ]  # per column (dimensions, then the people's score): the share of pairs it alone decides
    contribution_share: dict[str, float]  # per column: its share of the mean |c_d gap_d|
    pairs: int
    replies: int
    mean_correlation: float | None = (
        None  # the mean Pearson correlation over the pairs of dimensions across the replies (None: not measured)
    )
    correlation: dict[str, float] | None = (
        None  # per pair of dimensions ("a~b"): their correlation (pairs with a flat dimension left out)
    )

    def verdict(
        self,
        min_spread_ratio: float,
        max_decided_share: float,
        intended: Sequence[str] = (),
        max_mean_correlation: float | None = None,
    ) -> Verdict:
        collapsed = [
            d
            for d, r in self.spread_ratio.items()
            if (r is not None and r < min_spread_ratio) or (r is None and self.spread[d] <= 1e-9)
        ]
        dominant = [c for c, s in self.decided_share.items() if s > max_decided_share and c not in intended]
        reasons = [
            f"{d} collapsed: its spread over the {self.replies} replies is "
            + (
                f"{self.spread_ratio[d]:.2f} of the teacher's labels' (< "
                f"health.manifold.min_spread_ratio {min_spread_ratio})"
                if self.spread_ratio[d] is not None
                else "0, as flat as the teacher's labels'"
            )
            for d in collapsed
        ]
        reasons += [
            f"{c} dominates: it alone decides {self.decided_share[c]:.0%} of {self.pairs} pairs "
            f"(> health.manifold.max_decided_share {max_decided_share:.0%})"
            for c in dominant
        ]
        merged = (
            max_mean_correlation is not None
            and self.mean_correlation is not None
            and self.mean_correlation > max_mean_correlation
        )
        if merged:
            reasons.append(
                f"the dimensions are merged into one: they correlate {self.mean_correlation:.2f} on "
                f"average over the {self.replies} "
                f"replies (> health.manifold.max_mean_correlation {max_mean_correlation}), so they say one thing, not "
                f"{len(self.spread)}; the reward model learned no difference between them (retrain it on "
                "labels whose dimensions differ)"
            )
        return Verdict(
            collapsed,
            dominant,
            reasons,
            {
                "min_spread_ratio": float(min_spread_ratio),
                "max_decided_share": float(max_decided_share),
                "intended": list(intended),
                "mean_correlation": self.mean_correlation,
                "max_mean_correlation": max_mean_correlation,
            },
            merged,
        )

    def judged(self, cfg: Any) -> Verdict:
        """The verdict under `health.manifold` (`cfg`: its section)."""
        return self.verdict(cfg.min_spread_ratio, cfg.max_decided_share, cfg.intended, cfg.max_mean_correlation)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ManifoldShape:
        return cls(
            **{k: d[k] for k in cls.__dataclass_fields__ if k in d}
        )  # figures kept before merging was measured: None

    def write(self, folder: Path) -> Path:
        path = Path(folder) / MANIFOLD
        path.write_text(json.dumps(self.as_dict(), indent=1) + "\n")
        return path

    @classmethod
    def read(cls, folder: Path) -> ManifoldShape | None:
        """The figures kept in an adapter's folder; None for an adapter written without them."""
        path = Path(folder) / MANIFOLD
        return cls.from_dict(json.loads(path.read_text())) if path.is_file() else None

    def metrics(self) -> dict[str, float]:
        """The figures as flat metrics (no threshold: the check and the gate judge them under the config)."""
        ratios = [r for r in self.spread_ratio.values() if r is not None]
        merged = {} if self.mean_correlation is None else {"manifold_mean_correlation": self.mean_correlation}
        return {
            "manifold_min_spread_ratio": min(ratios) if ratios else 0.0,
            **merged,
            **{f"manifold_decided_{c}": s for c, s in self.decided_share.items()},
        }


def spread(
    vectors: np.ndarray, reference_std: np.ndarray, dimensions: Sequence[str]
) -> tuple[dict[str, float], dict[str, float | None]]:
    """Each dimension's std over `vectors` (n, D) and its ratio to `reference_std` (D,) (None where the reference is
    flat)."""
    vectors, reference_std = np.asarray(vectors, dtype=np.float64), np.asarray(reference_std, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[1] != len(dimensions) or reference_std.shape != (len(dimensions),):
        raise ValueError(
            f"vectors {vectors.shape} and the reference spread {reference_std.shape} need one column per "
            f"dimension ({len(dimensions)})"
        )
    if len(vectors) < 2:
        raise ValueError(f"a spread needs at least 2 replies, got {len(vectors)}")
    std = vectors.std(0)
    return (
        dict(zip(dimensions, map(float, std))),
        {d: (float(s / r) if r > 1e-9 else None) for d, s, r in zip(dimensions, std, reference_std)},
    )


def correlations(vectors: np.ndarray, dimensions: Sequence[str]) -> tuple[float | None, dict[str, float]]:
    """The mean Pearson correlation over the pairs of dimensions across `vectors` (n, D), and each pair's
    ("a~b"); a pair with a flat dimension has no correlation and is left out (None: no pair left)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    flat = vectors.std(0) <= 1e-12
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.corrcoef(vectors.T)
    pairs = {
        f"{dimensions[i]}~{dimensions[j]}": float(c[i, j])
        for i, j in zip(*np.triu_indices(len(dimensions), 1))
        if not (flat[i] or flat[j]) and np.isfinite(c[i, j])
    }
    return (float(np.mean(list(pairs.values()))) if pairs else None), pairs


def decided(
    gaps: np.ndarray, weights: np.ndarray, columns: Sequence[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """Per column: the share of pairs (rows of `gaps`, chosen minus rejected, (p, C)) it alone decides
    under the scalar's `weights` (C,), and its share of the mean absolute contribution."""
    gaps, weights = np.asarray(gaps, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    if gaps.ndim != 2 or gaps.shape[1] != len(columns) or weights.shape != (len(columns),):
        raise ValueError(
            f"gaps {gaps.shape} and weights {weights.shape} need one column per dimension ({len(columns)})"
        )
    if not len(gaps):
        raise ValueError("dominance needs at least one pair")
    contrib = np.abs(gaps * weights)
    outweighs = contrib > contrib.sum(1, keepdims=True) - contrib
    magnitude = contrib.mean(0)
    whole = magnitude.sum()
    return (
        {c: float(outweighs[:, j].mean()) for j, c in enumerate(columns)},
        {c: float(magnitude[j] / whole) if whole > 0 else 0.0 for j, c in enumerate(columns)},
    )


def manifold_shape(
    vectors: np.ndarray,
    reference_std: np.ndarray,
    dimensions: Sequence[str],
    gaps: np.ndarray,
    weights: np.ndarray,
    columns: Sequence[str] | None = None,
) -> ManifoldShape:
    """The manifold's shape: collapse, merging (the dimensions' correlation) and dominance.

    Args:
        vectors: the replies' reward vectors, (n, D).
        reference_std: each dimension's spread over the teacher's labels, which collapse is measured against.
        dimensions: the D dimensions.
        gaps: the pairs' gaps per column, (p, C), which dominance is measured over.
        weights: the scalar's weight of each column, (C,).
        columns: the C columns' names (default: the dimensions).
    """
    std, ratio = spread(vectors, reference_std, dimensions)
    share, contribution = decided(gaps, weights, list(dimensions) if columns is None else columns)
    mean_r, pairs = correlations(vectors, list(dimensions))
    return ManifoldShape(
        std,
        dict(zip(dimensions, map(float, np.asarray(reference_std, dtype=np.float64)))),
        ratio,
        share,
        contribution,
        int(len(gaps)),
        int(len(vectors)),
        mean_r,
        pairs,
    )


def reward_manifold(
    reward_model: RewardModel, prompts: Sequence[str], chosen: Sequence[str], rejected: Sequence[str]
) -> ManifoldShape:
    """The shape of `reward_model`'s signal on these pairs: its vectors of both replies (collapse, against
    the spread of the labels it learned from) and its scalar's columns on their gaps (dominance). A model
    whose scalar is a head of its own (no combination) has no columns to weigh: every pair is then decided
    by none."""
    meta = reward_model.metadata
    dims = list(reward_model.dimensions)
    if meta.label_spread is None:
        raise ValueError(
            "this reward model does not carry its labels' spread (written before it, or fewer than 2 labels); "
            "rebuild it: hominem run --select reward_model"
        )
    keep = [i for i in range(len(prompts)) if chosen[i].strip() and rejected[i].strip()]
    if not keep:
        raise ValueError("no pair with two non-empty replies to measure the reward manifold on")
    p = [prompts[i] for i in keep]
    a, b = [chosen[i] for i in keep], [rejected[i] for i in keep]
    va, vb = reward_model.raw_scores(p, a)["vector"], reward_model.raw_scores(p, b)["vector"]
    columns, gaps = dims, va - vb
    weights = np.zeros(len(dims))
    if meta.scalar is not None:
        weights = np.array([meta.scalar.weights[d] for d in dims])
        pa, pb = reward_model.people_column(p, a), reward_model.people_column(p, b)
        if pa is not None:
            columns, gaps, weights = (
                dims + [PEOPLE],
                np.column_stack([gaps, pa - pb]),
                np.append(weights, meta.scalar.people),
            )
    return manifold_shape(
        np.vstack([va, vb]), np.array([meta.label_spread[d] for d in dims]), dims, gaps, weights, columns
    )


def plot_manifold(shape: ManifoldShape, path: Path, title: str, verdict: Verdict | None = None) -> Path:
    """Two panels: each dimension's spread ratio, and each column's share of the pairs it alone decides;
    with a `verdict`, its thresholds drawn and what fails them in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    collapsed, dominant = (verdict.collapsed, verdict.dominant) if verdict else ([], [])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    dims = list(shape.spread_ratio)
    left.bar(
        dims,
        [shape.spread_ratio[d] or 0.0 for d in dims],
        color=["#e03131" if d in collapsed else "#1c7ed6" for d in dims],
    )
    merged = verdict is not None and verdict.merged
    left.set_title(
        "spread over the replies / over the teacher's labels"
        + (
            ""
            if shape.mean_correlation is None
            else f"\ndimensions' mean correlation {shape.mean_correlation:.2f}" + (" (merged)" if merged else "")
        ),
        fontsize=9,
        color="#e03131" if merged else "black",
    )
    cols = list(shape.decided_share)
    right.bar(
        cols, [shape.decided_share[c] for c in cols], color=["#e03131" if c in dominant else "#1c7ed6" for c in cols]
    )
    right.set_ylim(0, 1)
    right.set_title(f"share of {shape.pairs} pairs each column alone decides", fontsize=9)
    if verdict:
        left.axhline(verdict.thresholds["min_spread_ratio"], color="#495057", linestyle="--", label="collapse below")
        right.axhline(
            verdict.thresholds["max_decided_share"],
            color="#495057",
            linestyle="--",
            label="dominates above (unless intended)",
        )
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=45, labelsize=7)
        if verdict:
            ax.legend(fontsize=7)
    fig.suptitle(title + (f": {'BLOCKED' if verdict.blocked else 'passes'}" if verdict else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def keep_manifold(reward_model: RewardModel, pairs: Any, folder: Path, title: str) -> ManifoldShape:
    """Measure `reward_model`'s signal on the training `pairs` (prompt, chosen, rejected) and keep the figures
    and their plot in the adapter's `folder`, for the `reward_manifold` check and the gate to judge under
    `health.manifold` (the thresholds are not part of what an adapter is built from)."""
    shape = reward_manifold(reward_model, list(pairs["prompt"]), list(pairs["chosen"]), list(pairs["rejected"]))
    shape.write(folder)
    plot_manifold(shape, Path(folder) / MANIFOLD_PLOT, title)
    return shape
