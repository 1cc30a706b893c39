"""Closed-form (ridge) heads on frozen pooled features: the penalty chosen by cross-validation over
prompt folds, and out-of-fold predictions for the held-out figures.

People's preference pairs refine the scalar head: the judge's ridge solution is the prior, and the
pairs pull the scalar away from it wherever they say otherwise. For a pair, the feature difference
(chosen - rejected) should map to `PAIR_MARGIN` (before the scalar's tanh), weighted by the pair's
weight (`reward_model.pair_loss.human_weight` times its strength): the scalar's coefficients minimise
sum_p w_p (d_p b - PAIR_MARGIN)^2 + alpha |b - b_judge|^2. Where people have not spoken (directions
no pair's difference covers) the scalar stays the judge's; where they have, it follows them, more so
the more pairs there are. How strongly (a scale of the pairs' weights, `PAIR_PULLS`) is chosen by the
people's own out-of-fold pairs: few pairs that do not generalise pull little.

A people's pair tagged with a dimension (`core.common.tags`: a hand-written contrast pair about empathy, say)
pulls that dimension's head the same way (`pull_dimensions`), from the judge's solution toward ordering
the pair right on that dimension; untagged pairs pull the scalar only. Intensity and safety are the
judge's alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from hominem_pipeline.core.reward.network import RewardNet

log = logging.getLogger(__name__)

RIDGE_FOLDS = 5  # prompt folds for the penalty and for the held-out figures
PAIR_MARGIN = 1.0  # s_chosen - s_rejected a human pair asks for before the tanh: tanh(0.5) against tanh(-0.5)
PAIR_PULLS = (
    0.01,
    0.1,
    1.0,
    10.0,
)  # scales of the pairs' weights tried: the one people agree with most out of fold is kept
DIMENSION_PULLS = (
    0.1,
    1.0,
    10.0,
    100.0,
)  # the same for people's pairs tagged with a dimension, on that dimension's head


def feature_stats(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and spread of `features` per column (a constant column's spread kept at 1)."""
    std = features.std(0, unbiased=False)
    return features.mean(0), torch.where(std > 1e-6, std, torch.ones_like(std))


def standardise(net: RewardNet, features: torch.Tensor) -> None:
    """Set the heads' input standardisation to the mean and spread of `features`."""
    mean, std = feature_stats(features)
    net.feature_mean.copy_(mean)
    net.feature_std.copy_(std)


def ridge_design(features: torch.Tensor, rows: np.ndarray, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(n, F + 1) float64: the features of `rows` standardised by `mean` / `std`, then a column of ones (the
    intercept)."""
    x = ((features[torch.as_tensor(rows)] - mean) / std).double()
    return torch.cat([x, torch.ones(len(rows), 1, dtype=torch.float64)], 1)


def ridge_targets(targets: dict[str, torch.Tensor], rows: np.ndarray) -> torch.Tensor:
    """(n, D + 3) float64: the labels of `rows` before the heads' squashing (atanh for the vector and the
    scalar, logit for intensity and safety), clipped just inside the ranges."""
    idx = torch.as_tensor(rows)
    unit = lambda k: torch.logit(targets[k][idx].double().clamp(0.005, 0.995)).unsqueeze(1)  # noqa: E731
    return torch.cat(
        [
            torch.atanh(targets["vector"][idx].double().clamp(-0.995, 0.995)),
            torch.atanh(targets["scalar"][idx].double().clamp(-0.995, 0.995)).unsqueeze(1),
            unit("reward_intensity"),
            unit("safety_score"),
        ],
        1,
    )


def pair_rows(features: torch.Tensor, pairs: np.ndarray, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(p, F + 1) float64: per pair (chosen row, rejected row), the difference of their standardised
    features; the intercept column is 0 (an offset never orders two replies)."""
    return ridge_design(features, pairs[:, 0], mean, std) - ridge_design(features, pairs[:, 1], mean, std)


def ridge_solve(
    x: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor,
    alpha: float,
    pairs: torch.Tensor | None = None,
    pair_w: torch.Tensor | None = None,
    column: int | None = None,
) -> torch.Tensor:
    """(F + 1, outputs): argmin sum_i w_i |y_i - x_i B|^2 + alpha |B without its last (intercept) row|^2.
    With `pairs` (rows of `pair_rows`), output `column` (the scalar) is then moved to
    argmin_b sum_p pair_w_p (pairs_p b - PAIR_MARGIN)^2 + alpha |b - b_labels|^2 (its intercept, which
    no pair sees, stays the labels')."""
    coef = _ridge_from_gram(x.T @ (w.unsqueeze(1) * x), x.T @ (w.unsqueeze(1) * y), alpha)
    return coef if pairs is None or not len(pairs) else pull_toward_pairs(coef, pairs, pair_w, alpha, column)


def pull_toward_pairs(
    coef: torch.Tensor, pairs: torch.Tensor, pair_w: torch.Tensor, alpha: float, column: int
) -> torch.Tensor:
    """`coef` (the labels' solution, kept) with output `column` moved to
    argmin_b sum_p pair_w_p (pairs_p b - PAIR_MARGIN)^2 + alpha |b - coef[:, column]|^2."""
    out = coef.clone()
    gram = pairs.T @ (pair_w.unsqueeze(1) * pairs) + alpha * torch.eye(len(coef), dtype=torch.float64)
    out[:, column] = torch.linalg.solve(gram, pairs.T @ (pair_w * PAIR_MARGIN) + alpha * coef[:, column])
    return out


def _ridge_from_gram(gram: torch.Tensor, moment: torch.Tensor, alpha: float) -> torch.Tensor:
    """`ridge_solve` from X'WX and X'WY, so that several penalties share one pass over the rows."""
    penalty = torch.full((gram.shape[0],), float(alpha), dtype=torch.float64)
    penalty[-1] = 1e-9
    return torch.linalg.solve(gram + torch.diag(penalty), moment)


def _squash(pre: torch.Tensor, n_dims: int) -> torch.Tensor:
    """Ridge outputs (n, D + 3) through the heads' own squashing."""
    return torch.cat([torch.tanh(pre[:, : n_dims + 1]), torch.sigmoid(pre[:, n_dims + 1 :])], 1)


def prompt_folds(groups: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Fold of each row: its group's (prompt's) place in a seeded shuffle of the groups, modulo `folds`."""
    names = np.random.default_rng(seed).permutation(np.unique(groups))
    fold = {g: i % folds for i, g in enumerate(names)}
    return np.array([fold[g] for g in groups], dtype=np.int64)


def choose_ridge_alpha(
    x: torch.Tensor,
    y: torch.Tensor,
    groups: np.ndarray,
    alphas: Sequence[float],
    output_weights: torch.Tensor,
    seed: int,
    folds: int = RIDGE_FOLDS,
) -> tuple[float, dict[float, float]]:
    """The penalty with the least weighted squared error (in the labels' ranges) over `folds` folds of
    the prompts of `x` (one validation split of a few prompts picks it too noisily), and every penalty's error."""
    which = prompt_folds(groups, folds, seed)
    n_dims = y.shape[1] - 3
    truth = _squash(y, n_dims)
    errors = {float(a): 0.0 for a in alphas}
    for k in np.unique(which):
        fit, held = torch.as_tensor(which != k), torch.as_tensor(which == k)
        gram, moment = x[fit].T @ x[fit], x[fit].T @ y[fit]  # once per fold, for every penalty
        for alpha in alphas:
            err = (
                (_squash(x[held] @ _ridge_from_gram(gram, moment, alpha), n_dims) - truth[held]) ** 2
            ) * output_weights
            errors[float(alpha)] += float(err.sum()) / len(y)
    return min(errors, key=errors.__getitem__), errors


@dataclass(frozen=True)
class LabelFit:
    """The judge's labels as ridge fits them across folds of the prompts.

    Args:
        features: the frozen features of every sequence.
        targets: each head's targets, per sequence.
        rows: the labeled sequences.
        groups: their prompt groups (a fold holds whole prompts).
        alphas: the penalties tried by cross-validation.
        output_weights: each output's weight in the cross-validated error.
        seed: draws the folds.
        folds: how many.
    """

    features: torch.Tensor
    targets: dict[str, torch.Tensor]
    rows: np.ndarray
    groups: np.ndarray
    alphas: Sequence[float]
    output_weights: torch.Tensor
    seed: int
    folds: int = RIDGE_FOLDS


def ridge_out_of_fold(
    fit: LabelFit, human: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
) -> tuple[torch.Tensor, list[float], np.ndarray | None]:
    """(len(rows), D + 3) predictions in the labels' ranges, each row's from heads that never saw its
    prompt: fitted on the other folds' prompts, standardised on them, with the penalty chosen by
    cross-validation inside them. These are the held-out figures of ridge heads, over every prompt.
    Also each fold's penalty, and with `human` (pairs as (p, 2) rows of `features`, their weights and
    groups) each pair's two scalars, (p, 2), from heads fitted without that pair (each pair is in a fold)."""
    return ridge_out_of_fold_pulls(fit, human, (1.0,))[1.0]


def label_folds(fit: LabelFit, pair_groups: np.ndarray | None) -> list[tuple]:
    """Per fold k of the prompts (labeled rows' and people's pairs' groups together, so a pair and the
    replies of its prompt share a fold): (k, held rows, held pairs, mean, std, alpha, the labels'
    solution), everything fitted without fold k, the penalty chosen by cross-validation inside the rest.
    Computed once, they serve both the scalar's pulls and the dimensions' (`fold_fits` below)."""
    out = []
    features, groups = fit.features, fit.groups
    all_groups = groups if pair_groups is None else np.concatenate([groups, pair_groups])
    which_all = prompt_folds(all_groups, fit.folds, fit.seed)
    which, pair_fold = which_all[: len(groups)], which_all[len(groups) :]
    for k in np.unique(which_all):
        kept = fit.rows[which != k]
        if len(kept) < 2:
            raise ValueError(
                "head_fit ridge needs labeled replies of at least 2 prompts, got "
                f"{len(np.unique(groups))}; label more prompts"
            )
        mean, std = feature_stats(features[torch.as_tensor(kept)])
        x, y = ridge_design(features, kept, mean, std), ridge_targets(fit.targets, kept)
        seed = fit.seed + 1 + int(k)
        alpha, _ = choose_ridge_alpha(x, y, groups[which != k], fit.alphas, fit.output_weights, seed, fit.folds)
        coef = ridge_solve(x, y, torch.ones(len(kept), dtype=torch.float64), alpha)
        out.append((k, which == k, pair_fold == k, mean, std, alpha, coef))
    return out


def ridge_out_of_fold_pulls(
    fit: LabelFit,
    human: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    pulls: Sequence[float],
    fold_fits: list[tuple] | None = None,
) -> dict[float, tuple[torch.Tensor, list[float], np.ndarray | None]]:
    """`ridge_out_of_fold` for each scale of the pairs' weights in `pulls`, by scale: the labels' part of
    each fold (standardisation, penalty, solution; `label_folds`, or `fold_fits` made by it with the same
    arguments) is computed once and shared by every scale."""
    features, rows = fit.features, fit.rows
    n_dims = fit.targets["vector"].shape[1]
    results = {
        p: (
            torch.zeros(len(rows), n_dims + 3, dtype=torch.float64),
            [],
            None if human is None else np.zeros((len(human[0]), 2)),
        )
        for p in pulls
    }
    if fold_fits is None:
        fold_fits = label_folds(fit, None if human is None else human[2])
    for k, held_rows, held_pairs, mean, std, alpha, labels_coef in fold_fits:
        held = rows[held_rows]
        pairs = pair_w = None
        if human is not None:
            pairs, pair_w = (
                pair_rows(features, human[0][~held_pairs], mean, std),
                torch.as_tensor(human[1][~held_pairs], dtype=torch.float64),
            )
        for pull, (out, chosen, pair_scalars) in results.items():
            coef = (
                labels_coef
                if pairs is None or not len(pairs)
                else pull_toward_pairs(labels_coef, pairs, pair_w * pull, alpha, n_dims)
            )
            if len(held):
                out[torch.as_tensor(held_rows)] = _squash(ridge_design(features, held, mean, std) @ coef, n_dims)
            if human is not None and held_pairs.any():
                test = human[0][held_pairs]
                for side in (0, 1):
                    pair_scalars[held_pairs, side] = torch.tanh(
                        ridge_design(features, test[:, side], mean, std) @ coef[:, n_dims]
                    ).numpy()
            chosen.append(alpha)
    return results


def pull_dimensions(
    coef: torch.Tensor, pairs: torch.Tensor, pair_w: torch.Tensor, pair_dims: np.ndarray, alpha: float
) -> torch.Tensor:
    """`coef` with each dimension's column (0..D-1) moved toward the people's pairs tagged with it, as
    `pull_toward_pairs` moves the scalar's: argmin_b sum_p w_p (pairs_p b - PAIR_MARGIN)^2 + alpha |b - b_judge|^2
    over that dimension's pairs. A dimension no pair is tagged with stays the judge's."""
    out = coef
    for d in np.unique(pair_dims[pair_dims >= 0]):
        mine = torch.as_tensor(pair_dims == d)
        out = pull_toward_pairs(out, pairs[mine], pair_w[mine], alpha, int(d))
    return out


def with_column(coef: torch.Tensor) -> torch.Tensor:
    """`coef` (F + 1, outputs) with a zero row before the intercept: the solution over one more column
    (the people's score) that no output reads until a weight is set in that row."""
    return torch.cat([coef[:-1], torch.zeros(1, coef.shape[1], dtype=coef.dtype), coef[-1:]])


def dimension_pulls_out_of_fold(
    fit: LabelFit,
    human: tuple[np.ndarray, np.ndarray, np.ndarray],
    pair_dims: np.ndarray,
    pulls: Sequence[float],
    fold_fits: list[tuple] | None = None,
) -> dict[float, np.ndarray]:
    """For each scale in `pulls` (0: the judge's labels alone), each tagged people's pair's gap in its own
    dimension (chosen minus rejected, before the tanh: the sign is what counts), from heads fitted without
    its fold whose dimensions were pulled toward the other folds' tagged pairs at that scale of their
    weights. The folds are `ridge_out_of_fold_pulls`'s (the same `human` and seed give the same folds, and
    `fold_fits` can be shared between the two); untagged pairs' entries are NaN."""
    features = fit.features
    tagged = pair_dims >= 0
    results = {p: np.full(len(pair_dims), np.nan) for p in pulls}
    if fold_fits is None:
        fold_fits = label_folds(fit, human[2])
    for _, _, held_pairs, mean, std, alpha, labels_coef in fold_fits:
        test = np.flatnonzero(held_pairs & tagged)
        if not len(test):
            continue
        train = ~held_pairs & tagged
        diffs = pair_rows(features, human[0][test], mean, std)
        pairs, pair_w = (
            pair_rows(features, human[0][train], mean, std),
            torch.as_tensor(human[1][train], dtype=torch.float64),
        )
        for pull, gaps in results.items():
            coef = (
                labels_coef
                if pull == 0 or not train.any()
                else pull_dimensions(labels_coef, pairs, pair_w * pull, pair_dims[train], alpha)
            )
            gaps[test] = (diffs * coef[:, pair_dims[test]].T).sum(1).numpy()
    return results


def vectors_out_of_fold(
    features: torch.Tensor,
    rows: np.ndarray,
    human: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    pair_dims: np.ndarray | None,
    pull: float,
    fold_fits: list[tuple],
    n_dims: int,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The vector (in its range) of each labeled row, (len(rows), D), and of both replies of each people's
    pair, (p, 2, D), from heads fitted without its fold (`label_folds`), their dimensions pulled toward
    the other folds' tagged pairs at scale `pull` (0: the judge's alone), as the saved heads are."""
    vectors = np.zeros((len(rows), n_dims))
    pair_vectors = None if human is None else np.zeros((len(human[0]), 2, n_dims))
    for _, held_rows, held_pairs, mean, std, alpha, coef in fold_fits:
        if human is not None and pull and pair_dims is not None:
            train = ~held_pairs & (pair_dims >= 0)
            if train.any():
                coef = pull_dimensions(
                    coef,
                    pair_rows(features, human[0][train], mean, std),
                    torch.as_tensor(human[1][train], dtype=torch.float64) * pull,
                    pair_dims[train],
                    alpha,
                )
        if held_rows.any():
            vectors[held_rows] = torch.tanh(
                ridge_design(features, rows[held_rows], mean, std) @ coef[:, :n_dims]
            ).numpy()
        if human is not None and held_pairs.any():
            for side in (0, 1):
                pair_vectors[held_pairs, side] = torch.tanh(
                    ridge_design(features, human[0][held_pairs, side], mean, std) @ coef[:, :n_dims]
                ).numpy()
    return vectors, pair_vectors


def set_ridge_heads(net: RewardNet, coefs: Sequence[torch.Tensor]) -> None:
    """Load one (F + 1, D + 3) ridge solution per member into the heads."""
    d = net.n_dims
    with torch.no_grad():
        for m, coef in enumerate(coefs):
            weight, bias = coef[:-1].T.float(), coef[-1].float()
            net.vector_head.weight[m * d : (m + 1) * d] = weight[:d]
            net.vector_head.bias[m * d : (m + 1) * d] = bias[:d]
            for j, head in enumerate((net.scalar_head, net.intensity_head, net.safety_head)):
                head.weight[m] = weight[d + j]
                head.bias[m] = bias[d + j]


def choose_dimension_pull(
    fit: LabelFit,
    human: tuple[np.ndarray, np.ndarray, np.ndarray],
    pair_dims: np.ndarray,
    dimensions: list[str],
    fold_fits: list[tuple],
) -> tuple[float, dict[str, float]]:
    """How strongly the people's pairs tagged with a dimension pull that dimension's head from the judge's
    labels: the scale of their weights (`DIMENSION_PULLS`) whose out-of-fold tagged pairs are ordered
    right in their own dimension most often; ties go to the larger pull, since where the judge and the
    person disagree on a dimension the person wins. Also the figures: agreement per scale, the judge's
    alone (scale 0) and, at the chosen scale, per dimension."""
    trials = dimension_pulls_out_of_fold(fit, human, pair_dims, (0.0, *DIMENSION_PULLS), fold_fits)
    tagged = pair_dims >= 0
    right = {scale: gaps[tagged] > 0 for scale, gaps in trials.items()}
    accuracy = {scale: float(r.mean()) for scale, r in right.items()}
    pull = max(DIMENSION_PULLS, key=lambda scale: (accuracy[scale], scale))
    log.info(
        "reward model: people's pairs tagged with a dimension pull it at scale %g (out of fold, %d "
        "tagged pairs ordered right in their own "
        "dimension: judge alone %.1f%%, %s)",
        pull,
        int(tagged.sum()),
        100 * accuracy[0.0],
        ", ".join(f"{k:g}: {100 * v:.1f}%" for k, v in accuracy.items() if k),
    )
    metrics = {
        "dimension_pull": pull,
        "val_dimension_pairs": int(tagged.sum()),
        "val_dimension_accuracy": accuracy[pull],
        "val_dimension_accuracy_judge": accuracy[0.0],
        **{f"dimension_pull_{k:g}_accuracy": v for k, v in accuracy.items() if k},
    }
    for d in np.unique(pair_dims[tagged]):
        mine = pair_dims[tagged] == d
        metrics[f"val_dimension_accuracy_{dimensions[d]}"] = float(right[pull][mine].mean())
        metrics[f"val_dimension_accuracy_judge_{dimensions[d]}"] = float(right[0.0][mine].mean())
    return pull, metrics
