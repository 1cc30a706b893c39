"""Asking by design (`attunement.selection.method: design`): the pair whose answer most lowers the people's score's
doubt over the pairs a person could be asked.

The people's score is a kernel ridge fit on pairs' differences (`core.reward.people`). Read as a Gaussian process,
the prior covariance of two pairs' gaps is the kernel read on their differences,

    c(p, q) = (k(p_a, q_a) - k(p_a, q_b) - k(p_b, q_a) + k(p_b, q_b)) / penalty,

each answer a gap seen with unit noise. Its posterior covariance depends on which pairs were answered, not on the
answers, so a pick cannot chase a rater's noise. Each candidate's worth is the share of the summed posterior variance
over the targets (the candidates themselves: the pairs the person could be asked) that its answer would remove:

    sum_t c'(t, x)^2 / (1 + c'(x, x)) / sum_t c'(t, t)

(transductive experimental design). The kernel's width is the median squared distance between the rows (the
people's score's choice at its middle width), read on at most MEDIAN_ROWS of them; the penalty is the middle of the
ones it tries. The kernel is formed anew each pick, so its cost grows with the pairs answered.
"""

from __future__ import annotations

import numpy as np

DESIGN_PENALTY = 1.0  # the ridge penalty the prior covariance is read at (the people's score tries 0.1-10)
MEDIAN_ROWS = 512  # rows the kernel's width (their median squared distance) is read on, at most


def design_worth(
    candidates_a: np.ndarray, candidates_b: np.ndarray, asked_a: np.ndarray, asked_b: np.ndarray
) -> np.ndarray:
    """Each candidate pair's worth (0-1): the share of the candidates' summed posterior variance, given the pairs
    already answered (rows `asked_a`, `asked_b`: the two replies of each, in either order), that its answer would
    remove. Rows are the people's score's features (`RewardModel.people_features`)."""
    from scipy.linalg import cho_factor, cho_solve

    from hominem_pipeline.core.reward.kernel import squared_distances

    n, width = np.shape(candidates_a)
    if not n:
        return np.zeros(0)
    qa, qb = (np.asarray(rows, np.float32).reshape(-1, width) for rows in (asked_a, asked_b))
    m = len(qa)
    # the kernel in float32: twice as fast, ample here
    rows = np.concatenate([np.asarray(candidates_a, np.float32), np.asarray(candidates_b, np.float32), qa, qb])
    distances = squared_distances(rows, rows)
    some = np.random.default_rng(0).permutation(len(rows))[:MEDIAN_ROWS]  # the median read on a fixed subset
    scale = float(np.median(distances[np.ix_(some, some)][np.triu_indices(len(some), 1)])) if len(rows) > 1 else 1.0
    k = np.exp(-distances / np.float32(scale if scale > 0 else 1.0))
    a_rows, b_rows = np.r_[0:n, 2 * n : 2 * n + m], np.r_[n : 2 * n, 2 * n + m : 2 * n + 2 * m]
    # every pair's (candidates, then asked) prior covariance with every other's
    pair = (
        k[np.ix_(a_rows, a_rows)] - k[np.ix_(a_rows, b_rows)] - k[np.ix_(b_rows, a_rows)] + k[np.ix_(b_rows, b_rows)]
    )
    pair = pair.astype(np.float64) / DESIGN_PENALTY
    cov = pair[:n, :n]
    if m:
        cross = pair[n:, :n]  # (asked, candidates)
        asked = pair[n:, n:] + np.eye(m)  # each answer seen with unit noise
        cov = cov - cross.T @ cho_solve(cho_factor(asked, lower=True, check_finite=False), cross, check_finite=False)
    own = np.clip(np.diag(cov), 0.0, None)
    total = float(own.sum())
    if total <= 0:
        return np.zeros(n)
    return np.clip((cov**2).sum(0) / (1.0 + own) / total, 0.0, 1.0)
