"""Deciding on a sampled figure under its own noise: paired non-inferiority.

Every check the gate reads from a sample (a win rate on held-out prompts, the people's held-out pairs, recall in a
conversation, facts, instructions kept) compares the candidate with the model it would replace on the same items.
Each item gives both sides a score in [0, 1]; the figure is the mean score, the difference is the mean of the
per-item differences, and its standard error is that of a paired mean,

    d_i = candidate_i - reference_i,   D = mean(d),   SE = sd(d) / sqrt(n).

The rule is non-inferiority with the burden on the evidence of harm: the candidate is refused when it is worse
beyond the margin with one-sided confidence c, that is when the upper confidence bound of D lies below -margin,

    D + z_c * SE < -margin.

A sound candidate (true D >= 0) is then refused with probability at most 1 - c, whatever the sample's size. The
smallest drop a check of this size detects with probability `power` (one-sided, normal approximation) is

    margin + (z_c + z_power) * SE,

stated beside each figure, so that a check too small to see a drop says so instead of passing silently.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from statistics import NormalDist
from typing import Any

import numpy as np


@dataclass(frozen=True)
class NoiseRule:
    """How a sampled check decides: refuse when the candidate is worse beyond `margin` at one-sided `confidence`;
    `power`: the chance the stated smallest detectable drop is caught."""

    margin: float
    confidence: float
    power: float

    @property
    def z(self) -> float:
        return NormalDist().inv_cdf(self.confidence)

    def detectable_drop(self, standard_error: float) -> float:
        """The smallest true drop refused with probability `power` at this standard error."""
        return self.margin + (self.z + NormalDist().inv_cdf(self.power)) * standard_error

    def text(self) -> str:
        return f"refused when worse by more than {self.margin:g} at {self.confidence:.0%} one-sided confidence"


@dataclass(frozen=True)
class PairedCheck:
    """One sampled check's figures and verdict (see the module's docstring).

    `candidate` and `reference` are the two sides' mean scores over the same `items`; `reference_name` says which
    model the reference is (the base, the live adapter, or a fixed line such as a coin's 0.5)."""

    name: str
    what: str
    items: int
    candidate: float
    reference: float
    reference_name: str
    difference: float
    standard_error: float
    upper_bound: float  # D + z * SE
    margin: float
    confidence: float
    detectable_drop: float
    refused: bool
    checked: bool = True  # False: reported beside the checks, its rule not applied

    @staticmethod
    def rule_words() -> str:
        return "refused only when worse than the model it was compared with beyond its margin at its confidence"

    def line(self) -> str:
        """The check in one line: figure +- SE against the reference, the rule, and the verdict."""
        verdict = "refused" if self.refused else "passed" if self.checked else "not checked"
        return (
            f"{self.what} {self.candidate:.1%} against {self.reference_name}'s {self.reference:.1%} on {self.items} "
            f"items: {self.difference:+.1%} +- {self.standard_error:.1%} (upper bound {self.upper_bound:+.1%} at "
            f"{self.confidence:.0%}, margin {self.margin:.1%}; detects a drop of {self.detectable_drop:.1%}): "
            + verdict
        )

    def reason(self) -> str:
        """Why it refused, with how far beyond its noise."""
        return (
            f"{self.what} {self.candidate:.1%} against {self.reference_name}'s {self.reference:.1%} on {self.items} "
            f"items: {self.difference:+.1%} +- {self.standard_error:.1%}, worse beyond the margin {self.margin:.1%} "
            f"at {self.confidence:.0%} one-sided confidence (upper bound {self.upper_bound:+.1%}, "
            f"{-self.margin - self.upper_bound:.1%} beyond it)"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_check(
    name: str,
    what: str,
    candidate: Sequence[float] | np.ndarray,
    reference: Sequence[float] | np.ndarray,
    rule: NoiseRule,
    reference_name: str,
) -> PairedCheck:
    """The paired non-inferiority check of per-item scores `candidate` against `reference` (the same items, in
    order). With fewer than two items nothing can be said of the noise: the check passes with an infinite SE."""
    c = np.asarray(candidate, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if c.shape != r.shape or c.ndim != 1:
        raise ValueError(f"{name}: the two sides need one score per item each, got shapes {c.shape} and {r.shape}")
    n = len(c)
    d = c - r
    return summary_check(
        name,
        what,
        float(c.mean()) if n else math.nan,
        float(r.mean()) if n else math.nan,
        float(d.mean()) if n else 0.0,
        float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf,
        n,
        rule,
        reference_name,
    )


def summary_check(
    name: str,
    what: str,
    candidate: float,
    reference: float,
    difference: float,
    standard_error: float,
    items: int,
    rule: NoiseRule,
    reference_name: str,
) -> PairedCheck:
    """The rule applied to a difference whose paired standard error was found otherwise (a jackknife's, for a
    figure of a whole set rather than a mean over its items)."""
    upper = difference + rule.z * standard_error
    return PairedCheck(
        name=name,
        what=what,
        items=items,
        candidate=candidate,
        reference=reference,
        reference_name=reference_name,
        difference=difference,
        standard_error=standard_error,
        upper_bound=upper,
        margin=rule.margin,
        confidence=rule.confidence,
        # at least one item's disagreement: a sample whose sides agreed on every item cannot see a smaller drop
        detectable_drop=rule.detectable_drop(max(standard_error, 1.0 / max(items, 1))),
        refused=bool(items > 1 and upper < -rule.margin),
    )


def reported(check: PairedCheck) -> PairedCheck:
    """The check as a figure reported beside the others, its rule not applied."""
    return replace(check, refused=False, checked=False)
