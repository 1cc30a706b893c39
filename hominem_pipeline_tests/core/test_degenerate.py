"""Degenerate replies and one typo: what a reward model must never prefer, and what must not move it."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np

from hominem_pipeline.core.evaluation.degenerate import (
    CHEER,
    SPAM_TAGS,
    cheer,
    degenerate_report,
    one_typo,
    spam,
    typo_shifts,
    word_salad,
)

REPLY = "That's rough. What happened on the test, and when can you take it again?"


class Scorer:
    """A toy scorer: the scalar a function of the reply alone."""

    def __init__(self, score):
        self.score = score

    def raw_scores(self, prompts, replies):
        return {"scalar": np.array([self.score(r) for r in replies], dtype=float)}


def test_each_degenerate_reply_is_made_from_the_sensible_one_as_described():
    rng = random.Random(0)
    salad = word_salad(REPLY, rng)
    assert salad != REPLY and Counter(salad.split()) == Counter(REPLY.split())
    spammed = spam(REPLY, rng)
    assert spammed.startswith("That's rough. ") and sum(t in spammed.split() for t in SPAM_TAGS) == 8
    assert "What happened" not in spammed
    assert cheer(REPLY, rng) in CHEER
    assert word_salad("Hello", random.Random(1)) != "Hello" and sorted(
        word_salad("Hello", random.Random(1))
    ) == sorted("Hello")


def test_one_typo_swaps_two_letters_in_exactly_one_word():
    for seed in range(20):
        typed = one_typo(REPLY, random.Random(seed))
        changed = [(a, b) for a, b in zip(REPLY.split(" "), typed.split(" ")) if a != b]
        assert len(changed) == 1 and sorted(changed[0][0]) == sorted(changed[0][1])
    assert one_typo("Yes, ok.", random.Random(0)) == "Yes, ok."  # no word of four letters


def test_the_report_says_how_often_the_sensible_reply_wins_and_where_it_lost_most():
    prompts = ["I failed my driving test again.", "How do I boil an egg?"]
    sensible = [REPLY, "Put it in boiling water for six minutes, then in cold water."]
    fair = degenerate_report(Scorer(lambda r: 1.0 if r in sensible else 0.0), prompts, sensible)
    assert list(fair["kind"]) == ["word_salad", "spam", "cheer"]
    assert (fair["sensible_higher"] == 1.0).all() and (fair["messages"] == 2).all()
    fooled = degenerate_report(Scorer(lambda r: r.count("#") + r.count("!")), prompts, sensible).set_index("kind")
    assert fooled.loc["spam", "sensible_higher"] == 0.0 and fooled.loc["cheer", "sensible_higher"] == 0.0
    assert fooled.loc["spam", "worst"]["gap"] < 0 and fooled.loc["spam", "worst"]["reply"].startswith(
        ("That's rough.", "Put it in")
    )


def test_typo_shifts_measure_how_far_one_typo_moves_the_scalar():
    prompts, replies = ["a", "b", "c"], [REPLY, "Sounds lovely, enjoy the trip.", "Yes."]
    steady = typo_shifts(Scorer(len), prompts, replies)  # a typo keeps the length
    assert steady["replies"] == 2 and steady["max_shift"] == 0.0 and steady["over_0_1"] == 0.0
    jumpy = typo_shifts(Scorer(lambda r: 1.0 if r in replies else 0.5), prompts, replies)
    assert jumpy["mean_shift"] == 0.5 and jumpy["over_0_1"] == 1.0 and jumpy["worst"]["prompt"] in ("a", "b")
