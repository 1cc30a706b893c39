"""Two-sample drift statistics, each for one reason:

- **Kolmogorov-Smirnov** (`ks`): whether two samples differ at all, with a p-value that accounts for
  their sizes (a day of 20 choices is not a month of them); it alone fires on tiny shifts once the
  samples are large.
- **Wasserstein-1** (`wasserstein`), in standard deviations of the reference: how far the values
  moved, in units a person can read ("half a standard deviation lower"); with the KS p-value it makes
  an alarm both real and large enough to matter.
- **Population stability index** (`psi`, on the reference's deciles): the figure monitoring teams
  know (0.1 a shift, 0.25 a large one); reported, not decided on, because its thresholds ignore
  sample size.
- **Two proportions** (`proportion_shift`): whether a share (the choices where the chosen reply is
  higher on a dimension) differs between windows, as a z statistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PSI_FLOOR = 1e-4  # a bin's share is at least this, so an empty bin adds a large but finite term


def psi(reference: np.ndarray, recent: np.ndarray, bins: int = 10) -> float:
    """Population stability index sum((q - p) ln(q / p)) over the reference's quantile bins (p the
    reference's share of a bin, q the recent one's); 0: the same distribution."""
    reference, recent = _finite(reference), _finite(recent)
    if not len(reference) or not len(recent):
        return float("nan")
    edges = np.unique(np.quantile(reference, np.linspace(0, 1, bins + 1)[1:-1]))
    p = np.bincount(np.searchsorted(edges, reference, side="right"), minlength=len(edges) + 1) / len(reference)
    q = np.bincount(np.searchsorted(edges, recent, side="right"), minlength=len(edges) + 1) / len(recent)
    p, q = np.maximum(p, PSI_FLOOR), np.maximum(q, PSI_FLOOR)
    return float(np.sum((q - p) * np.log(q / p)))


@dataclass(frozen=True)
class KS:
    statistic: float  # the largest gap between the two empirical CDFs, 0-1
    p_value: float


def ks(reference: np.ndarray, recent: np.ndarray) -> KS:
    """Two-sample Kolmogorov-Smirnov test (exact for small samples, asymptotic for large ones)."""
    from scipy.stats import ks_2samp

    reference, recent = _finite(reference), _finite(recent)
    if not len(reference) or not len(recent):
        return KS(float("nan"), float("nan"))
    result = ks_2samp(reference, recent)
    return KS(float(result.statistic), float(result.pvalue))


def wasserstein(reference: np.ndarray, recent: np.ndarray) -> float:
    """Earth mover's distance between the two samples' distributions, in the values' own units."""
    from scipy.stats import wasserstein_distance

    reference, recent = _finite(reference), _finite(recent)
    if not len(reference) or not len(recent):
        return float("nan")
    return float(wasserstein_distance(reference, recent))


@dataclass(frozen=True)
class ProportionShift:
    before: float  # k1 / n1
    after: float  # k2 / n2
    shift: float  # after - before
    z: float  # shift over its pooled standard error (0 when both are 0 or 1 alike)


def proportion_shift(k1: float, n1: int, k2: float, n2: int) -> ProportionShift:
    """Two-proportion z statistic of k2/n2 against k1/n1 (pooled standard error)."""
    if n1 <= 0 or n2 <= 0:
        raise ValueError(f"proportion_shift needs both windows non-empty; got n1={n1}, n2={n2}")
    p1, p2 = k1 / n1, k2 / n2
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return ProportionShift(p1, p2, p2 - p1, 0.0 if se == 0 else (p2 - p1) / se)


def _finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64).ravel()
    return x[np.isfinite(x)]
