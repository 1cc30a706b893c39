"""The gate's checks of an online update by the person whose taste it trained on (`core/online/gate.py`): their taste
model's choice between both sides' replies, and their choices the update never trained on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.evaluation.noise import NoiseRule, paired_check, reported

MIN_CHOICES = 8  # held-out choices a person needs before they decide (fewer: their figures are reported)


def _rule(cfg: HominemConfig) -> NoiseRule:
    margin = cfg.health.taste_margin
    return NoiseRule(0.0 if margin is None else margin, cfg.health.confidence, cfg.health.power)


def taste_checks(
    verdict: Any,
    prompts: Sequence[str],
    live: Sequence[str],
    candidate: Sequence[str],
    reward_model: Any,
    tastes: dict[str, Any],
    cfg: HominemConfig,
    live_version: str | None,
) -> None:
    """Each person's taste model judges both sides' replies to the held-out prompts (those both answered): per prompt
    the chance it gives of the person preferring the candidate's reply, against a coin's 0.5 by the paired rule
    (`health.taste_margin`; null: reported). Adds to `verdict` (the gate's figures and reasons)."""
    from hominem_pipeline.core.attune.personal import reply_features

    both = [i for i in range(len(prompts)) if live[i].strip() and candidate[i].strip()]
    if not both:
        return
    asked = [prompts[i] for i in both]
    _, theirs = reply_features(reward_model, asked, [live[i] for i in both])
    _, mine = reply_features(reward_model, asked, [candidate[i] for i in both])
    for rater, model in sorted(tastes.items()):
        p = model.probability(mine, theirs)
        what = f"{rater}'s taste (their taste model's choice of its reply)"
        check = paired_check(
            f"taste:{rater}", what, p, np.full(len(p), 0.5), _rule(cfg), f"{live_version or 'the base'} (a tie)"
        )
        verdict.add(check if cfg.health.taste_margin is not None else reported(check), "health.taste_margin")


def choices_check(
    verdict: Any,
    model: Any,
    adapters: tuple[str, str | None],
    tokenizer: Any,
    base_logps: Any,
    choices: pd.DataFrame,
    rater: str,
    cfg: HominemConfig,
    live_version: str | None,
) -> None:
    """A person's choices the update never trained on (`online.taste.held_out`): does the candidate's implicit reward
    order them as they chose, against the live adapter's (the base's: a tie)? `adapters`: the candidate's and the
    live adapter's names in `model` (None: the base). Paired by choice, under `checks['choices:<rater>']`, decided
    by `health.taste_margin` (null, or fewer than `MIN_CHOICES` choices: reported)."""
    from hominem_pipeline.core.evaluation.compare import people_figures
    from hominem_pipeline.core.evaluation.people_pairs import pair_scores

    def margins(name: str | None) -> np.ndarray:
        if name is None:
            return np.zeros(len(choices))
        model.set_adapter(name)
        figures = people_figures(model, tokenizer, choices, cfg.evaluation.batch_size, base_logps)
        return np.array([figures["people_margins"][str(i)] for i in choices["pair_id"]], dtype=np.float64)

    candidate, live = margins(adapters[0]), margins(adapters[1])
    what = f"{rater}'s choices it never trained on (the implicit reward's order of them)"
    check = paired_check(
        f"choices:{rater}", what, pair_scores(candidate), pair_scores(live), _rule(cfg), live_version or "the base"
    )
    decides = cfg.health.taste_margin is not None and len(choices) >= MIN_CHOICES
    verdict.add(check if decides else reported(check), "health.taste_margin")
