"""Expected information of a question, from a posterior over what people prefer.

The model of an answer: a person prefers reply a over reply b with probability

    p(a | w) = eps + (1 - 2 eps) sigmoid(w . (z_a - z_b))

where z is a reply's features (the people's score's projected encoder states, `PeopleScore.project`), w the
weights to learn, and eps the rater's own noise: the chance they answer against their own taste. eps comes from
the consistency the page measures on repeated pairs (`noise_from_consistency`): a rater who flips with chance
eps answers a repeat the same way with chance (1 - eps)^2 + eps^2.

`LaplacePosterior.fit` finds the most probable w under a Gaussian prior and approximates the posterior around it
by a Gaussian whose precision is the prior's plus the answers' Fisher information (a Laplace approximation; for a
noisy rater each answer adds less). From it:

- `bald`: the mutual information between a pair's answer and w (Houlsby et al. 2011), the entropy of the
  predictive minus the expected entropy of an answer. The predictive uses the probit approximation of the
  logistic; the expected entropy is integrated over the latent's Gaussian by Gauss-Hermite quadrature.
- `epig`: the expected information about the answers to a target set of pairs (Bickford Smith et al. 2023),
  from posterior samples: how much asking this pair would settle predictions on the pairs people bring.

A rater whose answers are noisy makes every answer carry less, and pairs whose predictive is a coin toss only
because of that noise carry none: the picker does not chase noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hominem_pipeline.core.reward.calibration import preference_probability

PRIOR_LOGIT_SD = 2.0  # the prior's standard deviation of a typical pair's logit (a pair of median feature distance)
NEWTON_STEPS = 25
HERMITE_NODES = 16
LN2 = float(np.log(2.0))


def noise_from_consistency(consistency: float | None, default: float = 0.1) -> float:
    """The rater's flip rate eps from the share of repeated pairs answered the same way: consistency =
    (1 - eps)^2 + eps^2, so eps = (1 - sqrt(2 consistency - 1)) / 2. None (no repeats yet): `default`.
    A consistency at or below 0.5 (answers at random) gives eps 0.5 - 1e-3."""
    if consistency is None:
        return float(default)
    if not 0.0 <= consistency <= 1.0:
        raise ValueError(f"consistency {consistency!r} is not a share; it is between 0 and 1")
    return float(min((1.0 - np.sqrt(max(2.0 * consistency - 1.0, 0.0))) / 2.0, 0.5 - 1e-3))


def rater_noise(consistent: int, repeats: int, default: float, prior_repeats: float = 5.0) -> float:
    """A rater's flip rate from their repeated pairs (`consistent` of `repeats` answered the same way), shrunk
    toward `default`: counted with `prior_repeats` pseudo-repeats at the consistency `default` gives, so two or
    three repeats do not decide it alone."""
    if repeats < 0 or not 0 <= consistent <= max(repeats, 0):
        raise ValueError(f"{consistent} consistent of {repeats} repeats is not a count of repeats")
    expected = (1.0 - default) ** 2 + default**2
    return noise_from_consistency((consistent + prior_repeats * expected) / (repeats + prior_repeats))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return preference_probability(x, 1.0)


def _entropy_bits(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return -(p * np.log(p) + (1 - p) * np.log(1 - p)) / LN2


def answer_probability(logit: np.ndarray, noise: float) -> np.ndarray:
    """p(a) = eps + (1 - 2 eps) sigmoid(logit)."""
    return noise + (1.0 - 2.0 * noise) * _sigmoid(np.asarray(logit, dtype=np.float64))


@dataclass
class LaplacePosterior:
    """A Gaussian posterior over the preference weights: `mean` (d,) and the Cholesky factor `chol` of its
    precision (lower, d x d); `noise` the rater's flip rate the answers were read with."""

    mean: np.ndarray
    chol: np.ndarray
    noise: float
    prior_precision: float

    @classmethod
    def prior(cls, width: int, prior_precision: float, noise: float) -> LaplacePosterior:
        return cls(np.zeros(width), np.sqrt(prior_precision) * np.eye(width), noise, prior_precision)

    @staticmethod
    def prior_precision_for(diffs: np.ndarray, logit_sd: float = PRIOR_LOGIT_SD) -> float:
        """The prior precision at which a pair of median squared feature distance has a logit of standard
        deviation `logit_sd` a priori (w ~ N(0, I / precision): Var(w . d) = |d|^2 / precision)."""
        sq = np.einsum("ij,ij->i", diffs, diffs)
        median = float(np.median(sq)) if len(sq) else 1.0
        return max(median, 1e-12) / logit_sd**2

    @classmethod
    def fit(
        cls,
        diffs: np.ndarray,
        outcomes: np.ndarray,
        prior_precision: float,
        noise: float,
        start: np.ndarray | None = None,
    ) -> LaplacePosterior:
        """The posterior after the answers: `diffs` (n, d) the pairs' z_a - z_b, `outcomes` (n,) 1 where a was
        chosen. Fisher scoring with step halving from `start` (e.g. the last posterior's mean), then the
        precision prior + sum_i I_i d_i d_i^T at the mode."""
        d = np.asarray(diffs, dtype=np.float64)
        y = np.asarray(outcomes, dtype=np.float64)
        if d.ndim != 2 or len(d) != len(y):
            raise ValueError(f"diffs {d.shape} and outcomes {y.shape} do not describe the same pairs")
        if not 0.0 <= noise < 0.5:
            raise ValueError(f"noise {noise!r}: a rater's flip rate is at least 0 and below 0.5")
        if prior_precision <= 0:
            raise ValueError(f"prior_precision {prior_precision!r} must be positive")
        w = np.zeros(d.shape[1]) if start is None else np.asarray(start, dtype=np.float64).copy()
        scale = 1.0 - 2.0 * noise

        def objective(w: np.ndarray) -> float:
            p = np.clip(answer_probability(d @ w, noise), 1e-12, 1 - 1e-12)
            return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).sum() + 0.5 * prior_precision * w @ w)

        def curvature(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            s = _sigmoid(d @ w)
            p = np.clip(noise + scale * s, 1e-12, 1 - 1e-12)
            slope = scale * s * (1 - s)  # dp / dlogit
            grad = d.T @ ((p - y) * slope / (p * (1 - p))) + prior_precision * w
            info = slope**2 / (p * (1 - p))  # each answer's Fisher information about its logit
            return grad, prior_precision * np.eye(len(w)) + (d * info[:, None]).T @ d

        current = objective(w)
        for _ in range(NEWTON_STEPS if len(d) else 0):
            grad, precision = curvature(w)
            step = np.linalg.solve(precision, grad)
            t = 1.0
            while t > 1e-4:
                trial = w - t * step
                value = objective(trial)
                if value <= current:
                    break
                t /= 2
            else:
                break
            done = current - value < 1e-9 * max(1.0, abs(current))
            w, current = trial, value
            if done:
                break
        _, precision = curvature(w)
        return cls(w, np.linalg.cholesky(precision), float(noise), float(prior_precision))

    def latent(self, diffs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The logit's posterior mean and variance for each pair: w . d and d^T Sigma d (Sigma = L^-T L^-1 for the
        precision's Cholesky factor L, so the variance is |L^-1 d|^2: one product with L^-1, in float32 for a large
        pool)."""
        d = np.asarray(diffs, dtype=np.float64)
        half = d.astype(np.float32) @ self._inverse_chol.T
        return d @ self.mean, np.einsum("ij,ij->i", half, half).astype(np.float64)

    @cached_property
    def _inverse_chol(self) -> np.ndarray:
        from scipy.linalg import solve_triangular

        return solve_triangular(self.chol, np.eye(len(self.chol)), lower=True).astype(np.float32)

    def predictive(self, diffs: np.ndarray) -> np.ndarray:
        """P(a chosen) with the posterior integrated out (the probit approximation of the logistic)."""
        return _predictive(*self.latent(diffs), self.noise)

    def samples(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """`count` draws of w (count, d)."""
        from scipy.linalg import solve_triangular

        eps = rng.standard_normal((len(self.mean), count))
        return (self.mean[:, None] + solve_triangular(self.chol.T, eps, lower=False)).T


def bald(posterior: LaplacePosterior, diffs: np.ndarray) -> np.ndarray:
    """The expected information (bits) an answer to each pair gives about the weights: H[p(answer)] -
    E_w H[p(answer | w)]."""
    return _bald(*posterior.latent(diffs), posterior.noise)


def _predictive(mu: np.ndarray, var: np.ndarray, noise: float) -> np.ndarray:
    return answer_probability(mu / np.sqrt(1.0 + np.pi * var / 8.0), noise)


def _bald(mu: np.ndarray, var: np.ndarray, noise: float, predictive: np.ndarray | None = None) -> np.ndarray:
    nodes, weights = np.polynomial.hermite_e.hermegauss(HERMITE_NODES)  # for N(0, 1): sum w_k g(x_k) / sqrt(2 pi)
    logits = mu[:, None] + np.sqrt(var)[:, None] * nodes[None, :]
    expected = _entropy_bits(answer_probability(logits, noise)) @ weights / np.sqrt(2.0 * np.pi)
    predictive = _predictive(mu, var, noise) if predictive is None else predictive
    return np.clip(_entropy_bits(predictive) - expected, 0.0, None)


def epig(
    posterior: LaplacePosterior,
    diffs: np.ndarray,
    targets: np.ndarray,
    rng: np.random.Generator,
    draws: int = 64,
) -> np.ndarray:
    """The expected information (bits) an answer to each pair gives about the answers to `targets` (pairs of
    the kind people bring), averaged over the targets, from `draws` posterior samples: for each candidate
    and target, I(y; y*) = sum over the four joint answers of p(y, y*) log p(y, y*) / (p(y) p(y*))."""
    w = posterior.samples(draws, rng)  # (K, d)
    pool = answer_probability(np.asarray(diffs, dtype=np.float64) @ w.T, posterior.noise)  # (N, K)
    target = answer_probability(np.asarray(targets, dtype=np.float64) @ w.T, posterior.noise)  # (M, K)
    total = np.zeros(len(pool))
    p_pool, p_target = pool.mean(1), target.mean(1)
    for a_pool, m_pool in ((pool, p_pool), (1 - pool, 1 - p_pool)):
        for a_target, m_target in ((target, p_target), (1 - target, 1 - p_target)):
            joint = np.clip(a_pool @ a_target.T / draws, 1e-12, None)  # (N, M)
            total += (joint * np.log(joint / np.clip(np.outer(m_pool, m_target), 1e-12, None))).mean(1)
    return np.clip(total / LN2, 0.0, None)


@dataclass(frozen=True)
class Expected:
    """What asking each candidate pair is worth: `value` the expected information (bits) by `method`,
    `predictive` P(a chosen), and `settles` the share of the answer's doubt that is about the model rather than
    the rater's noise (value / H(predictive), 0-1): how much one answer would settle."""

    method: str
    value: np.ndarray
    predictive: np.ndarray
    settles: np.ndarray


METHODS = ("bald", "epig")  # and design: `with_design`


def expected_information(
    posterior: LaplacePosterior,
    diffs: np.ndarray,
    method: str = "bald",
    targets: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
) -> Expected:
    """Each candidate's worth by `method` (bald, or epig about `targets`)."""
    if method not in METHODS:
        raise ValueError(f"method {method!r} is not one of {', '.join(METHODS)}")
    mu, var = posterior.latent(diffs)
    predictive = _predictive(mu, var, posterior.noise)
    about_model = _bald(mu, var, posterior.noise, predictive)
    if method == "bald":
        value = about_model
    elif targets is None or not len(targets):
        raise ValueError("epig needs target pairs (the pairs people bring); none were given")
    else:
        value = epig(posterior, diffs, targets, rng or np.random.default_rng(0))
    settles = np.clip(about_model / np.maximum(_entropy_bits(predictive), 1e-12), 0.0, 1.0)
    return Expected(method, value, predictive, settles)


def with_design(
    worth: Expected, candidates_a: np.ndarray, candidates_b: np.ndarray, asked_a: np.ndarray, asked_b: np.ndarray
) -> Expected:
    """`worth` (the posterior's, for P(A)) valued by design instead (`core.attune.design`): `value` and `settles` the
    share of the people's score's doubt over the candidates one answer would remove, given the pairs answered."""
    from hominem_pipeline.core.attune.design import design_worth

    share = design_worth(candidates_a, candidates_b, asked_a, asked_b)
    return Expected("design", share, worth.predictive, share)
