"""The scalar as a combination of the vector and the people's score (ridge heads, `reward_model.scalar:
combined`):

    scalar = tanh( sum_d c_d * v_d  +  w * people  +  b ),   every c_d >= 0, w >= 0

where v is the reward vector as it is read (each dimension in [-1, 1], the ensemble members' mean) and
`people` is the people's score (`reward.people`; 0 without one). So a reply at least as good as another
on every dimension and on the people's score never gets the lower scalar: the scalar cannot disagree with
a vector that agrees with itself. The weights are fitted by a Bradley-Terry (logistic) fit of the
people's pairs the model learns from (shipped, imported, feedback; each with its weight), each reply read
out of fold: which dimensions matter overall, and how much, is the person's call. The vector itself
already holds the judge's labels (each dimension is the judge's, pulled by tagged pairs). With fewer than
`MIN_PAIRS` people's pairs the judge's same-prompt pairs (ordered by its scalar) decide, and with too few
of those, a regression of the judge's scalar labels on the vector (non-negative least squares). `b` puts
the scalar's level where the judge's labels are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

MIN_PAIRS = 10  # pairs the logistic fit needs; fewer: the judge's labels decide the weights
PENALTY = 1e-3  # ridge penalty of the logistic fit (per unit of pair weight), keeps weights finite when pairs separate


@dataclass(frozen=True)
class ScalarCombination:
    """c (one weight per dimension), w (the people's score's weight) and b (the intercept)."""

    weights: np.ndarray
    people: float
    intercept: float

    def pre(self, vector: np.ndarray, people: np.ndarray | None) -> np.ndarray:
        """The scalar before its tanh, per row of `vector` (n, D) and `people` (n,) or None."""
        out = np.asarray(vector, dtype=np.float64) @ self.weights + self.intercept
        return out if people is None else out + self.people * np.asarray(people, dtype=np.float64)

    def __call__(self, vector: np.ndarray, people: np.ndarray | None) -> np.ndarray:
        return np.tanh(self.pre(vector, people))

    def as_tensor(self) -> torch.Tensor:
        """(D + 2,): c, then w, then b (`RewardNet.scalar_weights`)."""
        return torch.tensor([*self.weights, self.people, self.intercept], dtype=torch.float32)

    def describe(self, dimensions: list[str]) -> dict[str, object]:
        return {
            "weights": {d: float(c) for d, c in zip(dimensions, self.weights)},
            "people": float(self.people),
            "intercept": float(self.intercept),
        }


def logistic_nonnegative(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """argmax_beta >= 0 of sum_p w_p log sigmoid(x_p beta) - PENALTY * sum(w) / 2 |beta|^2 (L-BFGS-B)."""
    from scipy.optimize import minimize

    total = float(w.sum())

    def loss(beta: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ beta
        value = float((w * np.logaddexp(0.0, -z)).sum()) / total + PENALTY / 2 * float(beta @ beta)
        grad = -(x.T @ (w / (1.0 + np.exp(z)))) / total + PENALTY * beta
        return value, grad

    return minimize(loss, np.full(x.shape[1], 0.1), jac=True, method="L-BFGS-B", bounds=[(0.0, None)] * x.shape[1]).x


def _nnls_labels(vector: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """c >= 0 of the least-squares fit atanh(label) ~ v c + b (b free: both sides centred)."""
    from scipy.optimize import nnls

    y = np.arctanh(np.clip(labels, -0.995, 0.995))
    c, _ = nnls(vector - vector.mean(0), y - y.mean())
    return c


def fit_scalar_combination(
    vector: np.ndarray,
    people: np.ndarray | None,
    pairs: np.ndarray,
    pair_weights: np.ndarray,
    human: np.ndarray,
    labeled: np.ndarray,
    labels: np.ndarray,
) -> ScalarCombination:
    """The combination fitted on the pairs (people's where there are enough, else the judge's).

    Args:
        vector: every row's out-of-fold reward vector, (n, D).
        people: every row's people's score, (n,), or None.
        pairs: (p, 2) rows, the preferred first.
        pair_weights: each pair's weight.
        human: which pairs are people's (the others are the judge's).
        labeled: the rows with a judge's scalar.
        labels: the judge's scalar of those rows.
    """
    n_dims = vector.shape[1]
    with_people = people is not None
    keep = pair_weights > 0
    human = np.asarray(human, dtype=bool) & keep
    keep = human if human.sum() >= MIN_PAIRS else keep & ~human
    pairs, pair_weights = pairs[keep], np.asarray(pair_weights[keep], dtype=np.float64)
    if len(pairs) >= MIN_PAIRS:
        x = vector[pairs[:, 0]] - vector[pairs[:, 1]]
        if with_people:
            x = np.concatenate([x, (people[pairs[:, 0]] - people[pairs[:, 1]])[:, None]], 1)
        beta = logistic_nonnegative(x, pair_weights)
        weights, w = beta[:n_dims], float(beta[n_dims]) if with_people else 0.0
    elif len(labeled) >= 2:
        weights, w = _nnls_labels(vector[labeled], labels), 0.0
    else:
        weights, w = np.ones(n_dims), 0.0
    combo = ScalarCombination(np.asarray(weights, dtype=np.float64), w, 0.0)
    if len(labeled):  # the level of the judge's labels
        target = np.arctanh(np.clip(labels, -0.995, 0.995))
        combo = ScalarCombination(
            combo.weights,
            w,
            float((target - combo.pre(vector[labeled], None if people is None else people[labeled])).mean()),
        )
    return combo
