"""Each reply's score, the sameness of a set of replies, and the judgement of two models' replies to the same items.

- recall, facts: 1 when the reply says one of the item's answers as a whole word (any case), else 0;
- instructions: 1 when every instruction of the prompt is kept (IFEval's strict prompt-level accuracy; the loose and
  instruction-level accuracies are reported beside it);
- sameness, over the replies to varied messages: `openings` (the share of replies whose first three words no other
  reply shares), `stock_phrases` (the share without a stock phrase), `distinct_bigrams` (distinct word bigrams over
  all of them) and the mean length in words. The first two are per reply and paired as the others are; the third
  is a figure of the whole set, whose paired standard error is the jackknife's (each message left out in turn).

A model that answers everything with the same warm, generic reply opens alike, uses stock phrases and repeats its
bigrams: all three fall, whatever the reward model thinks of the replies.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from hominem_pipeline.core.evaluation.noise import NoiseRule, PairedCheck, paired_check, reported, summary_check
from hominem_pipeline.core.evaluation.reply_checks.instructions import followed
from hominem_pipeline.core.evaluation.reply_checks.sets import ReplyCheckSets, ReplyItem

STOCK_PHRASES = (
    "i'm sorry to hear",
    "i am sorry to hear",
    "i understand how",
    "i understand that",
    "it's important to",
    "it is important to",
    "it's okay to",
    "it's normal to",
    "you're not alone",
    "i'm here for you",
    "i'm here to help",
    "i hope this helps",
    "feel free to",
    "as an ai",
    "take care of yourself",
    "remember that",
    "don't hesitate to",
)
WHAT = {
    "recall": "recall of what the person said earlier",
    "facts": "general facts answered",
    "instructions": "instructions kept (IFEval strict)",
    "openings": "replies opening unlike any other",
    "stock_phrases": "replies without a stock phrase",
    "distinct_bigrams": "distinct bigrams of the replies",
}


def says(reply: str, answers: Sequence[str]) -> bool:
    """Whether `reply` contains one of `answers` as a whole word or phrase, in any case."""
    return any(re.search(rf"(?<!\w){re.escape(a)}(?!\w)", reply, flags=re.IGNORECASE) for a in answers)


def _words(reply: str) -> list[str]:
    return re.findall(r"[\w']+", reply.lower())


def opening_unlike_others(replies: Sequence[str]) -> np.ndarray:
    """1 for each reply whose first three words no other reply of the set opens with."""
    openings = [" ".join(_words(r)[:3]) for r in replies]
    counts = Counter(openings)
    return np.array([float(bool(o) and counts[o] == 1) for o in openings])


def without_stock_phrase(replies: Sequence[str]) -> np.ndarray:
    return np.array([float(not any(p in r.lower().replace("\u2019", "'") for p in STOCK_PHRASES)) for r in replies])


def distinct_bigrams(replies: Sequence[str]) -> float:
    """Distinct word bigrams over all word bigrams of the replies (distinct-2); 0 when there are none."""
    bigrams = [b for words in map(_words, replies) for b in zip(words, words[1:])]
    return len(set(bigrams)) / len(bigrams) if bigrams else 0.0


def jackknife_difference(candidate: Sequence[str], reference: Sequence[str]) -> tuple[float, float]:
    """distinct-2(candidate) - distinct-2(reference), and its jackknife standard error over the paired messages."""
    n = len(candidate)
    whole = distinct_bigrams(candidate) - distinct_bigrams(reference)
    if n < 2:
        return whole, math.inf
    leave_out = np.array(
        [
            distinct_bigrams(candidate[:i] + candidate[i + 1 :]) - distinct_bigrams(reference[:i] + reference[i + 1 :])
            for i in range(n)
        ]
    )
    return whole, float(math.sqrt((n - 1) / n * ((leave_out - leave_out.mean()) ** 2).sum()))


def item_scores(items: Sequence[ReplyItem], replies: Sequence[str]) -> dict[str, Any]:
    """Per-item scores of recall, facts or instructions (one check's items), and the instruction figures."""
    check = items[0].check
    if check in ("recall", "facts"):
        return {"scores": np.array([float(says(r, i.answers)) for i, r in zip(items, replies)])}
    verdicts = [followed(r, i.instructions) for i, r in zip(items, replies)]
    return {
        "scores": np.array([float(all(v["strict"])) for v in verdicts]),
        "loose": np.array([float(all(v["loose"])) for v in verdicts]),
        "instruction_strict": float(np.mean([x for v in verdicts for x in v["strict"]])),
        "instruction_loose": float(np.mean([x for v in verdicts for x in v["loose"]])),
    }


def sameness(replies: Sequence[str]) -> dict[str, float]:
    """The sameness figures of one model's replies to the varied messages."""
    return {
        "openings": float(opening_unlike_others(replies).mean()),
        "stock_phrases": float(without_stock_phrase(replies).mean()),
        "distinct_bigrams": distinct_bigrams(replies),
        "mean_words": float(np.mean([len(_words(r)) for r in replies])) if replies else 0.0,
    }


def _rule(health: Any, figure: str) -> NoiseRule | None:
    margin = health.reply_margins.get(figure)
    return None if margin is None else NoiseRule(margin, health.confidence, health.power)


def judge_replies(
    sets: ReplyCheckSets,
    candidate: dict[str, list[str]],
    reference: dict[str, list[str]],
    health: Any,
    reference_name: str,
) -> tuple[list[PairedCheck], dict[str, Any]]:
    """Both models' replies (by check, in the sets' order) judged: the paired checks of the figures that have a
    margin (`health.reply_margins`), and every figure of both sides (those without a margin are reported only)."""
    checks: list[PairedCheck] = []
    figures: dict[str, Any] = {}
    report = NoiseRule(0.0, health.confidence, health.power)  # for a figure reported, not checked
    for check, items in sets.items.items():
        if check == "sameness":
            checks += _judge_sameness(candidate[check], reference[check], health, reference_name, figures, report)
            continue
        mine, theirs = item_scores(items, candidate[check]), item_scores(items, reference[check])
        rule = _rule(health, check)
        result = paired_check(check, WHAT[check], mine["scores"], theirs["scores"], rule or report, reference_name)
        figures[check] = {"candidate": result.candidate, "reference": result.reference, "checked": rule is not None}
        if check == "instructions":
            figures[check] |= {
                "loose": float(mine["loose"].mean()),
                "loose_reference": float(theirs["loose"].mean()),
                "instruction_strict": mine["instruction_strict"],
                "instruction_loose": mine["instruction_loose"],
            }
        if check == "recall":
            figures[check]["by_kind"] = _by_kind(items, mine["scores"], theirs["scores"])
        checks.append(result if rule is not None else reported(result))
    return checks, figures


def _by_kind(items: Sequence[ReplyItem], mine: np.ndarray, theirs: np.ndarray) -> dict[str, list[float]]:
    kinds = sorted({i.kind for i in items})
    return {
        k: [float(mine[idx].mean()), float(theirs[idx].mean())]
        for k in kinds
        if len(idx := [n for n, i in enumerate(items) if i.kind == k])
    }


def _judge_sameness(
    mine: list[str], theirs: list[str], health: Any, reference_name: str, figures: dict[str, Any], report: NoiseRule
) -> list[PairedCheck]:
    figures["sameness"] = {"candidate": sameness(mine), "reference": sameness(theirs)}
    out = []
    for figure, per_reply in (("openings", opening_unlike_others), ("stock_phrases", without_stock_phrase)):
        rule = _rule(health, figure)
        result = paired_check(figure, WHAT[figure], per_reply(mine), per_reply(theirs), rule or report, reference_name)
        out.append(result if rule is not None else reported(result))
    difference, se = jackknife_difference(mine, theirs)
    rule = _rule(health, "distinct_bigrams")
    result = summary_check(
        "distinct_bigrams",
        WHAT["distinct_bigrams"],
        distinct_bigrams(mine),
        distinct_bigrams(theirs),
        difference,
        se,
        len(mine),
        rule or report,
        reference_name,
    )
    out.append(result if rule is not None else reported(result))
    return out
