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
        what = f"{rater}'s held-out choices, {name}"
        figures = people_figures(model, tokenizer, choices, cfg.evaluation.batch_size, base_logps, what)
        return np.array([figures["people_margins"][str(i)] for i in choices["pair_id"]], dtype=np.float64)

    candidate, live = margins(adapters[0]), margins(adapters[1])
    what = f"{rater}'s choices it never trained on (the implicit reward's order of them)"
    check = paired_check(
        f"choices:{rater}", what, pair_scores(candidate), pair_scores(live), _rule(cfg), live_version or "the base"
    )
    decides = cfg.health.taste_margin is not None and len(choices) >= MIN_CHOICES
    verdict.add(check if decides else reported(check), "health.taste_margin")


def taste_verdict(history: Sequence[dict[str, Any]], rater: str, live_version: str | None) -> dict[str, Any] | None:
    """What the gate said of the newest update trained on `rater`'s taste (the live history's promote or refuse entry
    whose gate judged their checks), in the person's words: whether it learned their taste, whether it went live, and,
    when it was refused for what else it measured (the student's facts, recall, instructions, sameness, its health),
    what it would have cost. None when no update was trained on their taste."""
    own = (f"taste:{rater}", f"choices:{rater}")
    judged = (e for e in reversed(history) if e.get("action") in ("promote", "refuse") and e.get("gate"))
    entry = next((e for e in judged if any(n in e["gate"].get("checks", {}) for n in own)), None)
    if entry is None:
        return None
    gate, version = entry["gate"], entry["version"]
    checks = gate.get("checks", {})
    mine = [checks[n] for n in own if n in checks]
    refused_mine = [c for c in mine if c["refused"]]
    learned = any(c["candidate"] > c["reference"] for c in mine) and not refused_mine
    others = [c for n, c in checks.items() if n not in own and c["refused"]]
    # a sampled check's reason starts with its `what` (noise.PairedCheck.reason); the rest are the gate's other rules
    sampled = tuple(c["what"] for c in refused_mine + others)
    cost = [f"{c['what']} {c['candidate']:.0%} against {c['reference']:.0%}" for c in others]
    cost += [r for r in gate.get("reasons", []) if not r.startswith(sampled)]
    words = "; ".join(_own_words(c) for c in mine)
    if entry["action"] == "promote":
        now = "it is live" if version == live_version else "it was live, and has been rolled back since"
        said = f"update {version} {'learned' if learned else 'had not yet learned'} your taste ({words}); {now}"
    elif learned:
        said = f"update {version} learned your taste ({words}) but was refused: it cost what the student knew"
        said += f" ({'; '.join(cost)})" if cost else ""
    else:
        said = f"update {version} was refused: it did not learn your taste ({words})"
        said += f"; and it cost what the student knew ({'; '.join(cost)})" if cost else ""
    return {
        "version": version,
        "time": entry.get("time"),
        "live": entry["action"] == "promote" and version == live_version,
        "learned": learned,
        "cost": cost,
        "checks": mine,
        "said": said,
    }


def _own_words(check: dict[str, Any]) -> str:
    if check["name"].startswith("taste:"):
        return f"your taste model picks its reply over the one before {check['candidate']:.0%} of the time"
    return (
        f"it orders {check['candidate']:.0%} of the choices you made that it never trained on as you did, "
        f"against {check['reference']:.0%} before"
    )
