"""The safety score grounded in people's harm judgements (ridge heads with a people's score).

The safety head first learns the judge's safety labels, as every head does. The judge is small and its
safety label does not know harm from help (on people's harm pairs it is near chance), so the head is then
re-weighed on the pairs people chose by harm (a `reward_model.people_pairs` file marked `harm`, such as HH-RLHF
harmless-base, and the pairs tagged harm_avoidance):

    safety = sigmoid( a * judge's safety logit  +  b * people's score  +  c ),   a, b >= 0

with (a, b) from a logistic fit of "the chosen reply is the safer" on those pairs, both gaps read out of fold
(the head fitted without the pair's fold, the people's score without its own), and c keeping the mean logit over
the labeled replies where the judge's labels put it (the safety gate's thresholds read that level).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hominem_pipeline.core.reward.combination import logistic_nonnegative
from hominem_pipeline.core.reward.ridge import ridge_design

if TYPE_CHECKING:
    from hominem_pipeline.core.reward.training.prepare import PreparedTraining

log = logging.getLogger(__name__)

MIN_HARM_PAIRS = 10  # fewer people's harm pairs: the safety head stays the judge's


def harm_gaps(prep: PreparedTraining, p: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Per people's harm pair the heads read: (the judge-fitted safety logit's gap, the people's score's gap),
    chosen minus rejected, both out of fold, (h, 2); and their weights. None without enough such pairs. `p`: the
    ridge heads' problem (`ridge_heads.RidgeProblem`: its people's pairs, their weights, the labels' fit and its
    folds)."""
    data = prep.data
    if prep.cfg.safety != "people" or not prep.people.use_people or p.fold_fits is None:
        return None
    harm = data.pair_harm[data.pair_human]
    if int(harm.sum()) < MIN_HARM_PAIRS:
        log.info(
            "reward model: %d people's harm pairs (%d needed); the safety head stays the judge's",
            harm.sum(),
            MIN_HARM_PAIRS,
        )
        return None
    col = len(prep.dimensions) + 2
    logits = np.zeros((len(p.hp), 2))
    for _, _, held_pairs, mean, std, _, coef in p.fold_fits:
        take = held_pairs & harm
        for side in (0, 1):
            if take.any():
                logits[take, side] = (ridge_design(p.fit.features, p.hp[take, side], mean, std) @ coef[:, col]).numpy()
    people = prep.people_column
    gaps = np.stack([logits[harm, 0] - logits[harm, 1], people[p.hp[harm, 0]] - people[p.hp[harm, 1]]], 1).astype(
        np.float64
    )
    return gaps, np.asarray(p.hw[harm], dtype=np.float64)


def ground_safety(prep: PreparedTraining, p: Any, coefs: list[torch.Tensor]) -> dict[str, float]:
    """Re-weigh each member's safety column of `coefs` ((F + 2, D + 3): the features, the people's score's row,
    the intercept) as the module says, in place. Returns the weights and the out-of-fold agreement with the harm
    pairs before and after, as metrics (none when the head stays the judge's)."""
    found = harm_gaps(prep, p)
    if found is None:
        return {}
    gaps, weights = found
    a, b = logistic_nonnegative(gaps, weights)
    col = len(prep.dimensions) + 2
    labeled_people = float(np.mean(prep.people_column[p.fit.rows]))
    for c in coefs:
        level = float(c[-1, col])  # the mean logit over the labeled replies (their standardised features average 0)
        c[:, col] *= a
        c[-2, col] = b
        c[-1, col] = level - b * labeled_people
    metrics = {
        "safety_judge_weight": float(a),
        "safety_people_weight": float(b),
        "safety_harm_pairs": len(gaps),
        "safety_harm_agreement_judge": float((gaps[:, 0] > 0).mean()),
        "safety_harm_agreement": float((gaps @ np.array([a, b]) > 0).mean()),
    }
    log.info(
        "reward model: the safety score is sigmoid(%.3g judge's safety logit + %.3g people's score + c), fitted on "
        "%d people's harm pairs out of fold (the safer reply higher: the judge's %.1f%%, grounded %.1f%%)",
        a,
        b,
        len(gaps),
        100 * metrics["safety_harm_agreement_judge"],
        100 * metrics["safety_harm_agreement"],
    )
    return metrics
