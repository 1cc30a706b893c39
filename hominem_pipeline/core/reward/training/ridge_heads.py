"""The heads solved in closed form on a frozen backbone's features (`head_fit: ridge`).

The penalty is chosen by cross-validation over the prompts. People's pairs pull the scalar (or, with
`scalar: combined`, decide the combination of the dimensions) and each tagged dimension; every pull is
chosen by how often people agree with the pairs scored out of fold, so no figure reads a pair its fit
saw. The held-out figures are out of fold too: every prompt's replies scored by heads fitted without
its fold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hominem_pipeline.core.reward.combination import ScalarCombination, fit_scalar_combination
from hominem_pipeline.core.reward.people import people_scalar_weight, with_people
from hominem_pipeline.core.reward.ridge import (
    PAIR_PULLS,
    RIDGE_FOLDS,
    LabelFit,
    choose_dimension_pull,
    choose_ridge_alpha,
    label_folds,
    pair_rows,
    pull_dimensions,
    ridge_design,
    ridge_out_of_fold_pulls,
    ridge_solve,
    ridge_targets,
    set_ridge_heads,
    standardise,
    vectors_out_of_fold,
    with_column,
)
from hominem_pipeline.core.reward.training.fit import HeadsFit
from hominem_pipeline.core.reward.training.prepare import HEAD_OUTPUTS, PreparedTraining
from hominem_pipeline.core.reward.training.safety import ground_safety
from hominem_pipeline.core.reward.validation import _pct

log = logging.getLogger(__name__)


@dataclass
class RidgeProblem:
    """The ridge fit's inputs, read off the prepared training once."""

    fit: LabelFit  # the labels' fit across prompt folds (the people's score joins the scalar after the heads' fit)
    hp: np.ndarray  # people's pairs (rows of the features), fitted by the scalar with the labels
    hw: np.ndarray  # their weights
    human: tuple[np.ndarray, np.ndarray, np.ndarray] | None  # (pairs, weights, their prompt groups)
    overall: np.ndarray  # which people's pairs are about the reply overall (not a nudge's, about one dimension)
    scalar_human: tuple[np.ndarray, np.ndarray, np.ndarray] | None  # the scalar's view: a nudge's pair weighs 0
    hp_dims: np.ndarray  # the dimension each people's pair is tagged with (-1: none)
    combined: bool  # the scalar is the combination of the dimensions (`scalar: combined`)
    fold_fits: Any = None  # the labels' fit of each prompt fold, shared by every pull


@dataclass
class ScalarPull:
    """How far people's pairs pull the scalar, and the out-of-fold predictions at that pull."""

    pull: float
    accuracy: dict[float, float]  # people's agreement with their pairs out of fold, per pull tried
    held_out: torch.Tensor  # every labeled reply's outputs out of fold
    fold_alphas: Any
    human_oof: np.ndarray  # people's pairs' scalars out of fold
    people_weights: dict[float, float] = field(default_factory=dict)  # the people's score's weight, per pull


def ridge_problem(prep: PreparedTraining) -> RidgeProblem:
    data, cfg, dims = prep.data, prep.cfg, prep.dimensions
    w = cfg.loss_weights
    hp = data.pairs[data.pair_human]
    hw = data.pair_weight[data.pair_human]
    human = (hp, hw, data.group_of[hp[:, 0]]) if len(hp) else None
    overall = data.pair_scalar[data.pair_human]
    labeled = np.arange(data.labeled)
    fit = LabelFit(
        features=prep.frozen[:, :-1] if prep.people.use_people else prep.frozen,
        targets=data.targets,
        rows=labeled,
        groups=data.group_of[labeled],
        alphas=cfg.ridge_alphas,
        output_weights=torch.tensor(
            [w.vector / len(dims)] * len(dims) + [w.scalar, w.intensity, w.safety], dtype=torch.float64
        ),
        seed=prep.seed,
        folds=RIDGE_FOLDS,
    )
    problem = RidgeProblem(
        fit=fit,
        hp=hp,
        hw=hw,
        human=human,
        overall=overall,
        scalar_human=(hp, hw * overall, human[2]) if human and overall.any() else None,
        hp_dims=data.pair_dimension[data.pair_human],
        combined=cfg.scalar == "combined",
    )
    if human or problem.combined:
        problem.fold_fits = label_folds(fit, human[2] if human else None)
    return problem


def scalar_pull(prep: PreparedTraining, p: RidgeProblem) -> ScalarPull:
    """How far people's pairs pull the scalar from the judge's: the scale of their weights whose out-of-fold
    pairs people agree with most (ties: the smaller pull, nearer the judge). With a people's score, each
    scale's scalar is read with the score at the weight fitted for it (people_scalar_weight): the final
    scalar's agreement decides, not the heads' alone. A combined scalar is no head of its own: nothing pulls."""
    if not (p.scalar_human and not p.combined):
        human = None if p.combined else p.scalar_human
        held_out, fold_alphas, human_oof = ridge_out_of_fold_pulls(p.fit, human, (1.0,), p.fold_fits)[1.0]
        return ScalarPull(1.0, {}, held_out, fold_alphas, human_oof)
    trials = ridge_out_of_fold_pulls(p.fit, p.scalar_human, PAIR_PULLS, p.fold_fits)
    accuracy, people_weights = {}, {}
    ov, column = p.overall, prep.people_column
    for scale, (_, _, oof) in trials.items():
        if prep.people.use_people:
            people_weights[scale] = people_scalar_weight(oof[ov], column, p.hp[ov], p.hw[ov])
            accuracy[scale] = float((with_people(oof[ov], column, p.hp[ov], people_weights[scale]) > 0).mean())
        else:
            accuracy[scale] = float((oof[ov, 0] > oof[ov, 1]).mean())
    pull = max(PAIR_PULLS, key=lambda scale: (accuracy[scale], -scale))
    log.info(
        "reward model ridge heads: people's pairs pull the scalar at scale %g (out-of-fold agreement with them %s)",
        pull,
        ", ".join(f"{k:g}: {v:.1%}" for k, v in accuracy.items()),
    )
    return ScalarPull(pull, accuracy, *trials[pull], people_weights=people_weights)


def _people_weight(prep: PreparedTraining, p: RidgeProblem, s: ScalarPull) -> float:
    """The people's score's weight beside the heads' scalar: a two-weight logistic fit of people's pairs, each
    read out of fold by both (the heads' scalar fitted without the pair's fold, the score without its own), so
    neither looks better than it is on a new reply (`scalar_pull`, per pull). 0 without a score; a combined
    scalar weighs it in its combination."""
    if not prep.people.use_people or p.combined:
        return 0.0
    weight = s.people_weights[s.pull]
    ov = p.overall
    log.info(
        "reward model: the people's score weighs %.3g in the scalar (out-of-fold agreement with "
        "people's pairs: heads alone %.1f%%, with the score %.1f%%)",
        weight,
        100 * float((s.human_oof[ov, 0] > s.human_oof[ov, 1]).mean()),
        100 * float((with_people(s.human_oof[ov], prep.people_column, p.hp[ov], weight) > 0).mean()),
    )
    return weight


def _solve(
    prep: PreparedTraining, p: RidgeProblem, s: ScalarPull, dim_pull: float, people_weight: float
) -> tuple[float, dict[float, float], dict[str, float]]:
    """Each member's heads solved on every prompt and pair, set in the network. Returns (the chosen penalty, the
    penalties' cross-validated errors, the safety score's grounding figures: `safety.ground_safety`)."""
    net, data, cfg, dims, boot = prep.net, prep.data, prep.cfg, prep.dimensions, prep.seq_boot
    labeled, features = p.fit.rows, p.fit.features
    standardise(net, prep.frozen[torch.as_tensor(labeled)])
    if prep.people.use_people:  # the score is read as it is (its own units), weighed in the scalar alone
        net.feature_mean[-1], net.feature_std[-1] = 0.0, 1.0
    mean, std = (
        (net.feature_mean[:-1], net.feature_std[:-1])
        if prep.people.use_people
        else (net.feature_mean, net.feature_std)
    )
    x, y = ridge_design(features, labeled, mean, std), ridge_targets(data.targets, labeled)
    alpha, errors = choose_ridge_alpha(x, y, data.group_of[labeled], cfg.ridge_alphas, p.fit.output_weights, prep.seed)
    hx = pair_rows(features, p.hp, mean, std) if p.human else None
    pull_scalar = p.scalar_human is not None and not p.combined
    pair_weight = torch.as_tensor(p.hw * p.overall * s.pull, dtype=torch.float64)
    rows = torch.as_tensor(labeled)
    coefs = [
        ridge_solve(
            x,
            y,
            boot[rows, m].double(),
            alpha,
            hx if pull_scalar else None,
            pair_weight * boot[torch.as_tensor(p.hp[:, 0]), m].double() if pull_scalar else None,
            len(dims),
        )
        for m in range(prep.members)
    ]
    if dim_pull:  # each tagged dimension pulled toward its people's pairs, from the labels' solution
        tagged = p.hp_dims >= 0
        tagged_weight = torch.as_tensor(data.pair_weight[data.pair_human][tagged] * dim_pull, dtype=torch.float64)
        coefs = [
            pull_dimensions(
                c,
                hx[torch.as_tensor(tagged)],
                tagged_weight * boot[torch.as_tensor(p.hp[tagged, 0]), m].double(),
                p.hp_dims[tagged],
                alpha,
            )
            for m, c in enumerate(coefs)
        ]
    coefs, safety = _with_people(prep, p, coefs, people_weight)
    set_ridge_heads(net, coefs)
    return alpha, errors, safety


def _with_people(
    prep: PreparedTraining, p: RidgeProblem, coefs: list[torch.Tensor], people_weight: float
) -> tuple[list[torch.Tensor], dict[str, float]]:
    """With a people's score: each member's solution with one more row before the intercept, the score's weight in
    the scalar (0 elsewhere), and the safety score grounded where people chose by harm (`safety.ground_safety`,
    whose figures come back too). Without one: `coefs` as they are."""
    if not prep.people.use_people:
        return coefs, {}
    coefs = [with_column(c) for c in coefs]
    for c in coefs:
        c[-2, len(prep.dimensions)] = people_weight
    return coefs, ground_safety(prep, p, coefs)


def _out_of_fold(prep: PreparedTraining, p: RidgeProblem, s: ScalarPull, dim_pull: float) -> dict[str, np.ndarray]:
    """Every labeled reply and every people's pair's replies as heads fitted without their fold score them."""
    full = prep.predict_held_out()
    d, labeled = len(prep.dimensions), p.fit.rows
    for j, k in enumerate(HEAD_OUTPUTS):
        full[k][labeled] = (s.held_out[:, :d] if k == "vector" else s.held_out[:, d + j - 1]).numpy()
    if p.scalar_human and not p.combined:
        full["scalar"][p.hp[:, 0]], full["scalar"][p.hp[:, 1]] = s.human_oof[:, 0], s.human_oof[:, 1]
    if p.fold_fits is not None:  # the vector as the saved heads pull it: labeled replies, people's pairs' replies
        dims = p.hp_dims if dim_pull else None
        vectors, pair_vectors = vectors_out_of_fold(p.fit.features, labeled, p.human, dims, dim_pull, p.fold_fits, d)
        full["vector"][labeled] = vectors
        if p.human:
            full["vector"][p.hp[:, 0]], full["vector"][p.hp[:, 1]] = pair_vectors[:, 0], pair_vectors[:, 1]
    return full


def _combine(prep: PreparedTraining, full: dict[str, np.ndarray]) -> tuple[ScalarCombination, dict[str, float]]:
    """The combined scalar (`reward.combination`) fitted on every pair's replies read out of fold (`full`'s
    vector, the people's score without the pair's fold), set in the network; `full`'s scalar becomes its
    out-of-fold value. Also its weights as metrics."""
    data, dims = prep.data, prep.dimensions
    labeled = np.arange(data.labeled)
    people = None if prep.people_column is None else prep.people_column[: len(data.encoded)]
    combination = fit_scalar_combination(
        full["vector"].astype(np.float64),
        people,
        data.pairs,
        data.pair_weight * data.pair_scalar,
        data.pair_human,
        labeled,
        data.targets["scalar"][torch.as_tensor(labeled)].numpy().astype(np.float64),
    )
    with torch.no_grad():
        prep.net.scalar_weights.copy_(combination.as_tensor())
    full["scalar"] = combination(full["vector"], people).astype(np.float32)
    log.info(
        "reward model: the scalar is tanh(%s + %.3g people's score %+.3g) (fitted out of fold on %d "
        "people's pairs and %d of the judge's)",
        " + ".join(f"{c:.3g} {d}" for d, c in zip(dims, combination.weights)),
        combination.people,
        combination.intercept,
        int((data.pair_human & data.pair_scalar).sum()),
        int((~data.pair_human).sum()),
    )
    return combination, {
        **{f"scalar_weight_{d}": float(c) for d, c in zip(dims, combination.weights)},
        "scalar_weight_people": combination.people,
    }


def fit_ridge_heads(prep: PreparedTraining, on_epoch: Callable[[int, dict[str, float]], None] | None) -> HeadsFit:
    """The heads solved in closed form (see the module's docstring), with their out-of-fold figures. Each
    penalty tried is one row of the history (and one `on_epoch` call)."""
    p = ridge_problem(prep)
    dim_pull, dimension_metrics = 0.0, {}
    if p.human and prep.cfg.dimension_pairs and (p.hp_dims >= 0).any():
        dim_pull, dimension_metrics = choose_dimension_pull(p.fit, p.human, p.hp_dims, prep.dimensions, p.fold_fits)
    s = scalar_pull(prep, p)
    people_weight = _people_weight(prep, p, s)
    alpha, errors, safety_metrics = _solve(prep, p, s, dim_pull, people_weight)
    history = []
    for step, (a, err) in enumerate(errors.items(), 1):
        # the sweep under its own key: MLflow shows a metric's last step, and `ridge_alpha` is the chosen one
        history.append({"epoch": step, "ridge_alpha_tried": a, "ridge_cv_error": err})
        if on_epoch:
            on_epoch(step, {"ridge_alpha_tried": a, "ridge_cv_error": err})
    log.info(
        "reward model ridge heads: penalty %g chosen by %d-fold cross-validation over the prompts (errors %s)",
        alpha,
        RIDGE_FOLDS,
        ", ".join(f"{a:g}: {e:.4f}" for a, e in errors.items()),
    )
    full = _out_of_fold(prep, p, s, dim_pull)
    combination, combination_metrics = None, {}
    if p.combined:  # the scalar from the vector and the people's score, both out of fold
        combination, combination_metrics = _combine(prep, full)
        people_weight = combination.people
    elif prep.people.use_people:  # the out-of-fold scalars with the score added as the saved heads add it
        scalar = full["scalar"].astype(np.float64).clip(-1 + 1e-6, 1 - 1e-6)
        added = np.arctanh(scalar) + people_weight * prep.people_column[: len(scalar)]
        full["scalar"] = np.tanh(added).astype(np.float32)
    metrics = {
        "ridge_alpha": alpha,
        "ridge_fold_alphas": s.fold_alphas,
        **prep.evaluate(full),
        **dimension_metrics,
        **combination_metrics,
        **_pull_metrics(prep, p, s, people_weight),
        **safety_metrics,
    }
    log.info(
        "reward model ridge heads: out of fold (%d prompt folds) they order %s of %d teacher pairs",
        RIDGE_FOLDS,
        _pct(metrics["val_pairwise_accuracy"]),
        metrics["val_pairs"],
    )
    state = {k: v.detach().clone() for k, v in prep.net.state_dict().items()}
    return HeadsFit(full, metrics, history, list(errors).index(alpha) + 1, state, combination, people_weight)


def _pull_metrics(prep: PreparedTraining, p: RidgeProblem, s: ScalarPull, people_weight: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if p.scalar_human and not p.combined:
        out = {"human_pull": s.pull, **{f"human_pull_{k:g}_accuracy": v for k, v in s.accuracy.items()}}
    if prep.people.use_people:
        score = prep.people_score
        out |= {
            "people_weight": people_weight,
            "people_pairs": score.pairs,
            "people_agreement": score.agreement,
            "people_alpha": score.alpha,
        }
    return out
