"""The people's score's kernel arithmetic (`reward.people`): Gaussian kernels, their Nystroem features, the
weighted least-squares solves of pairs' gaps, and the principal directions the states are cut to."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def solve(d: np.ndarray, w: np.ndarray, alpha: float, targets: np.ndarray | None = None) -> np.ndarray:
    """argmin_b sum_p w_p (d_p b - t_p)^2 + alpha |b|^2 (t_p = `targets`, 1 by default: the chosen reply a
    unit ahead; 0: the two equal), in whichever of the primal (features) or dual (pairs) forms is smaller."""
    return solve_each(d, w, [alpha], targets)[0]


def solve_each(
    d: np.ndarray, w: np.ndarray, alphas: Sequence[float], targets: np.ndarray | None = None
) -> list[np.ndarray]:
    """`solve` for each penalty in `alphas`, the Gram matrix formed once (each system positive definite: a
    Cholesky solve)."""
    from scipy.linalg import solve as solve_system

    a = d * np.sqrt(w)[:, None]
    y = np.sqrt(w) * (1.0 if targets is None else targets)

    def ridge(gram: np.ndarray, rhs: np.ndarray, alpha: float) -> np.ndarray:
        return solve_system(gram + alpha * np.eye(len(gram)), rhs, assume_a="pos", check_finite=False)

    if len(a) < a.shape[1]:
        gram = a @ a.T
        return [a.T @ ridge(gram, y, alpha) for alpha in alphas]
    gram, rhs = a.T @ a, a.T @ y
    return [ridge(gram, rhs, alpha) for alpha in alphas]


def principal(x: np.ndarray, top: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(singular values, right singular vectors as columns) of `x`, largest first (the `top` largest
    only, when given): the SVD's, from the eigendecomposition of the smaller Gram matrix (x'x or xx'),
    a few times faster than the SVD itself, and faster again when only the top ones are computed."""
    from scipy.linalg import eigh

    small = x.T @ x if x.shape[0] >= x.shape[1] else x @ x.T
    n = len(small)
    subset = None if top is None or top >= n else [n - top, n - 1]
    lam, vec = eigh(
        small, subset_by_index=subset, driver="evr" if subset else "evd", overwrite_a=True, check_finite=False
    )
    lam, vec = lam[::-1], vec[:, ::-1]
    sv = np.sqrt(np.clip(lam, 0.0, None))
    if x.shape[0] >= x.shape[1]:
        return sv, vec
    nonzero = sv > 1e-12 * max(sv[0], 1e-300)
    return sv[nonzero], (x.T @ vec[:, nonzero]) / sv[nonzero]


def nystroem_map(centres: np.ndarray, scale: float) -> np.ndarray:
    """The (landmarks, landmarks) matrix M of the Nystroem features phi(x) = k(x, L) M, for which
    phi(a) . phi(b) = k(a, L) K^-1 k(L, b) with K = k(L, L): M = C^-T for the Cholesky factor C of K
    (a tiny ridge on K's diagonal keeps duplicate or near-duplicate landmarks from making it singular;
    it shrinks only directions the kernel barely spans). A ridge on phi is the same fit under any such M."""
    from scipy.linalg import LinAlgError, cholesky, solve_triangular

    gram = kernel(centres, centres, scale)
    jitter = 1e-10 * len(gram)
    for _ in range(6):
        try:
            factor = cholesky(gram + jitter * np.eye(len(gram)), lower=True, check_finite=False)
            break
        except LinAlgError:
            jitter *= 100.0
    else:
        raise ValueError(
            "the people's score's kernel matrix is not positive definite even with a ridge; its "
            "landmarks' states hold NaN?"
        )
    return solve_triangular(factor, np.eye(len(gram)), lower=True, check_finite=False).T


def choose_landmarks(people: np.ndarray, others: np.ndarray, most: int, rng: np.random.Generator) -> np.ndarray:
    """The rows the kernel is expanded on: the people's pairs' rows (a sample of `most` when there are more),
    then, where room is left, a sample of the other pairs' rows (the invariance pairs' made texts)."""
    if len(people) >= most:
        return np.sort(rng.choice(people, most, replace=False))
    if len(others) > most - len(people):
        others = rng.choice(others, most - len(people), replace=False)
    return np.sort(np.concatenate([people, others]))


def pair_folds(groups: np.ndarray, folds: int, seed: int) -> np.ndarray:
    names = np.random.default_rng(seed).permutation(np.unique(groups))
    fold = {g: i % folds for i, g in enumerate(names)}
    return np.array([fold[g] for g in groups], dtype=np.int64)


def squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a_i - b_j|^2, (len(a), len(b))."""
    return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T, 0.0)


def kernel(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """exp(-|a_i - b_j|^2 / scale), (len(a), len(b))."""
    return np.exp(-squared_distances(a, b) / scale)


def expand(z: np.ndarray, landmarks: np.ndarray, scale: float, coef: np.ndarray, batch: int = 2048) -> np.ndarray:
    """sum_j coef_j k(z_i, landmark_j) for every row of z, a batch of rows at a time."""
    return np.concatenate(
        [np.zeros(0)] + [kernel(z[i : i + batch], landmarks, scale) @ coef for i in range(0, len(z), batch)]
    )


def as_stored(x: np.ndarray) -> np.ndarray:
    """The float32 values the model folder keeps, as float64: the fit computes with exactly what a
    loaded model reads."""
    return np.ascontiguousarray(x, dtype=np.float32).astype(np.float64)
