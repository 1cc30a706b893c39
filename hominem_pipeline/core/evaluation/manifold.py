"""The reward manifold's two failure shapes that block a release (design: acceptance criteria of the
evaluation subsystem, "no reward dimension collapse; no single dimension dominates unless intended").

- **Collapse**: a dimension whose reward vectors barely vary over a day's replies says nothing about
  them; an adapter trained on it learns nothing from it, or learns a constant. Measured as each
  dimension's standard deviation over the replies against the same dimension's over the teacher's labels
  of the day (the spread the model was taught): a ratio under `min_spread_ratio` is a collapse.
- **Dominance**: the scalar orders a pair by the sum of the dimensions' contributions (c_d x gap_d,
  `reward.combination`). A dimension *decides* a pair when its contribution outweighs all the others'
  together (|c_d gap_d| > sum over e != d of |c_e gap_e|): the pair goes its way whatever the others
  say. A dimension that decides more than `max_decided_share` of the pairs dominates: the others no
  longer matter. Also reported: each dimension's share of the mean absolute contribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ManifoldShape:
    """Collapse and dominance of one reward model on one set of replies and pairs."""

    spread: dict[str, float]  # std of each dimension over the replies
    reference_spread: dict[str, float]  # ... over the teacher's labels
    spread_ratio: dict[str, float | None]  # spread / reference (None: the reference is flat too)
    collapsed: list[str]
    decided_share: dict[str, float]  # share of pairs each dimension alone decides
    contribution_share: dict[str, float]  # share of the mean |c_d gap_d|
    dominant: list[str]
    pairs: int
    replies: int
    thresholds: dict[str, float] = field(default_factory=dict)

    @property
    def blocked(self) -> bool:
        return bool(self.collapsed or self.dominant)

    def reasons(self) -> list[str]:
        out = [f"{d} collapsed: its spread over the replies is {self.spread_ratio[d]:.2f} of the teacher's labels' "
               f"(< {self.thresholds['min_spread_ratio']})" for d in self.collapsed]
        out += [f"{d} dominates: it alone decides {self.decided_share[d]:.0%} of {self.pairs} pairs "
                f"(> {self.thresholds['max_decided_share']:.0%})" for d in self.dominant]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "blocked": self.blocked, "reasons": self.reasons()}


def spread(vectors: np.ndarray, reference: np.ndarray, dimensions: Sequence[str], min_ratio: float) -> tuple[dict, dict, dict, list[str]]:
    """Each dimension's std over `vectors` (n, D) and over `reference` (m, D), their ratio, and the dimensions
    whose ratio is under `min_ratio` (a reference with no spread either counts only when the replies have none)."""
    vectors, reference = np.asarray(vectors, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[1] != len(dimensions) or reference.shape[1:] != (len(dimensions),):
        raise ValueError(f"vectors {vectors.shape} and reference {reference.shape} need one column per dimension ({len(dimensions)})")
    if len(vectors) < 2 or len(reference) < 2:
        raise ValueError(f"spread needs at least 2 replies and 2 labels, got {len(vectors)} and {len(reference)}")
    std, ref = vectors.std(0), reference.std(0)
    ratio = {d: (float(s / r) if r > 1e-9 else None) for d, s, r in zip(dimensions, std, ref)}
    collapsed = [d for d, s in zip(dimensions, std) if (ratio[d] is not None and ratio[d] < min_ratio) or (ratio[d] is None and s <= 1e-9)]
    return dict(zip(dimensions, map(float, std))), dict(zip(dimensions, map(float, ref))), ratio, collapsed


def decided(gaps: np.ndarray, weights: np.ndarray, dimensions: Sequence[str]) -> tuple[dict[str, float], dict[str, float]]:
    """Per dimension: the share of pairs (rows of `gaps`, chosen minus rejected, (p, D)) it alone decides
    under the scalar's `weights` (D,), and its share of the mean absolute contribution."""
    gaps, weights = np.asarray(gaps, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    if gaps.ndim != 2 or gaps.shape[1] != len(dimensions) or weights.shape != (len(dimensions),):
        raise ValueError(f"gaps {gaps.shape} and weights {weights.shape} need one column per dimension ({len(dimensions)})")
    if not len(gaps):
        raise ValueError("dominance needs at least one pair")
    contrib = np.abs(gaps * weights)
    outweighs = contrib > contrib.sum(1, keepdims=True) - contrib
    magnitude = contrib.mean(0)
    whole = magnitude.sum()
    return ({d: float(outweighs[:, j].mean()) for j, d in enumerate(dimensions)},
            {d: float(magnitude[j] / whole) if whole > 0 else 0.0 for j, d in enumerate(dimensions)})


def manifold_shape(vectors: np.ndarray, reference: np.ndarray, gaps: np.ndarray, weights: np.ndarray, dimensions: Sequence[str], *,
                   min_spread_ratio: float, max_decided_share: float, intended: Sequence[str] = ()) -> ManifoldShape:
    """Collapse of `vectors` (the replies' reward vectors) against `reference` (the teacher's labels), and
    dominance over the pairs' vector `gaps` under the scalar `weights`; a dimension in `intended` may dominate."""
    std, ref, ratio, collapsed = spread(vectors, reference, dimensions, min_spread_ratio)
    share, contribution = decided(gaps, weights, dimensions)
    dominant = [d for d in dimensions if share[d] > max_decided_share and d not in intended]
    return ManifoldShape(std, ref, ratio, collapsed, share, contribution, dominant, int(len(gaps)), int(len(vectors)),
                         {"min_spread_ratio": float(min_spread_ratio), "max_decided_share": float(max_decided_share)})
