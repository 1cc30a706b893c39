"""Invariance pairs: degenerate replies the people's score must rank below the sensible one, rewrites it must
score the same, and a fit that reads them."""

from __future__ import annotations

import numpy as np
import pytest

from hominem_pipeline.core.evaluation.degenerate import CHEER, SPAM_TAGS
from hominem_pipeline.core.evaluation.probes import POLITE, RUDE
from hominem_pipeline.core.reward.invariance import (
    DEGENERATE,
    REWRITES,
    TRAIN_CHEER,
    TRAIN_FRAMES,
    TRAIN_SPAM,
    invariance_pairs,
)
from hominem_pipeline.core.reward.people import PairSet, PeopleScore

PROMPTS = ["I failed my driving test again.", "Any tips for a long flight?", "ok"]
REPLIES = [
    "That's rough. What happened on the test, and when can you take it again?",
    "Drink plenty of water and walk the aisle every hour or two.",
    "ok",
]


def test_each_source_reply_gives_degenerate_pairs_to_beat_and_rewrites_to_equal():
    made = invariance_pairs(PROMPTS, REPLIES, rows=[0, 1, 0], sources=10, seed=0)
    assert set(made.pairs[:, 0]) == {0, 1}  # each source once; rows beyond those given are not read
    for source in (0, 1):
        kinds = [k for (s, _), k in zip(made.pairs, made.kinds) if s == source]
        assert kinds[:3] == list(DEGENERATE) and kinds[-1] == "frame"  # a rewrite that changes nothing: no pair
        assert set(kinds[3:-1]) <= set(REWRITES) and "lower_case" in kinds
    for (source, new), target, kind in zip(made.pairs, made.targets, made.kinds):
        prompt, reply = made.texts[new]
        assert target == (1.0 if kind in DEGENERATE else 0.0)
        assert (prompt, reply) != (PROMPTS[source], REPLIES[source])
        if kind == "frame":
            assert PROMPTS[source] in prompt and reply == REPLIES[source]
        elif kind == "lower_case":
            assert reply == REPLIES[source].lower()
        elif kind == "cheer":
            assert reply in TRAIN_CHEER
    again = invariance_pairs(PROMPTS, REPLIES, rows=[0, 1, 0], sources=10, seed=0)
    assert again.texts == made.texts  # the same pairs under the same seed
    assert len(set(invariance_pairs(PROMPTS, REPLIES, rows=[0, 1, 2], sources=1, seed=0).pairs[:, 0])) == 1


def test_what_the_training_writes_is_not_what_the_robustness_figures_measure_with():
    assert not set(TRAIN_CHEER) & set(CHEER)
    assert not set(TRAIN_SPAM) & set(SPAM_TAGS)
    assert not {f.replace("{prompt}", "").strip() for f in TRAIN_FRAMES} & {
        f.replace("{prompt}", "").strip() for f in (POLITE, RUDE)
    }


def test_equal_pairs_make_the_score_blind_to_a_direction_people_never_judged():
    """People prefer replies high on feature 0; in their pairs feature 1 rises with it (a nuisance, as a
    reply's style can). Equal pairs that move feature 1 alone teach the score to ignore it; people's
    agreement is counted on their own pairs only."""
    rng = np.random.default_rng(0)
    n = 240
    taste = rng.normal(size=n)
    states = np.c_[taste, taste + 0.3 * rng.normal(size=n), rng.normal(size=(n, 6))]
    pairs = np.array([(a, b) if taste[a] > taste[b] else (b, a) for a, b in rng.permutation(n).reshape(-1, 2)])
    people = PairSet(pairs, np.ones(len(pairs)), np.arange(len(pairs)))
    shifted = states.copy()
    shifted[:, 1] += rng.choice([-1.5, 1.5], size=n)
    both = np.r_[states, shifted]
    equal = np.stack([np.arange(n), n + np.arange(n)], 1)
    taught = PairSet(
        np.r_[pairs, equal],
        np.r_[np.ones(len(pairs)), np.full(n, 3.0)],
        np.r_[np.arange(len(pairs)), [np.flatnonzero((pairs == i).any(1))[0] for i in range(n)]],
        np.r_[np.ones(len(pairs)), np.zeros(n)],
        np.r_[np.ones(len(pairs), dtype=bool), np.zeros(n, dtype=bool)],
    )
    plain, _ = PeopleScore.fit(both, people, seed=0, alphas=[0.1, 1.0])
    blind, values = PeopleScore.fit(both, taught, seed=0, alphas=[0.1, 1.0])
    assert blind.pairs == plain.pairs == len(pairs) and values.shape == (2 * n,)
    moved = lambda score: np.abs(score(shifted) - score(states)).mean()  # noqa: E731
    assert moved(blind) < 0.5 * moved(plain)
    assert blind.agreement > 0.8
    with pytest.raises(ValueError, match="at least 10 people's pairs"):
        PeopleScore.fit(both, PairSet(equal, np.ones(n), np.arange(n), np.zeros(n), np.zeros(n, dtype=bool)), 0)


def test_the_invariance_texts_ship_with_the_projection_and_a_fresh_clone_reads_them(tiny_encoder, tmp_path):
    """`hominem data ship-features` ships the rows of the texts the invariance pairs make from the shipped
    pairs (read through the shipped projection): a fresh clone's people's score reads them and runs the
    encoder on none of them."""
    from hominem_pipeline.core.reward.feature_cache import text_key
    from hominem_pipeline.core.reward.people import EncoderStates, Projection, ship_invariance_rows, ship_projection

    prompts = [f"Could you help me with thing {i}?" for i in range(12)]
    chosen = [
        (p, f"Sure, here is how to do thing {i}: start small and check each step.") for i, p in enumerate(prompts)
    ]
    shipped = tmp_path / "config" / "human" / "features"
    projection_file, _, _, _ = ship_projection(tiny_encoder, 64, tmp_path / "maintainer", chosen, shipped)
    path, rows, measured = ship_invariance_rows(
        tiny_encoder, 64, tmp_path / "maintainer", projection_file, chosen, 5, shipped
    )
    made = invariance_pairs([p for p, _ in chosen], [r for _, r in chosen], range(12), 5)
    assert path.parent == shipped and rows == len(made.texts) == measured and len(set(made.pairs[:, 0])) == 5

    fresh = EncoderStates(tiny_encoder, 64, cache=tmp_path / "fresh-clone")
    read: list[str] = []
    real = fresh._measure
    fresh._measure = lambda p, r: read.extend(r) or real(p, r)
    z = fresh.projected(
        [p for p, _ in made.texts], [r for _, r in made.texts], Projection.load(projection_file), shipped
    )
    assert read == [] and z.shape == (len(made.texts), Projection.load(projection_file).basis.shape[1])
    with np.load(path, allow_pickle=False) as saved:
        assert set(saved["keys"].tolist()) == {text_key(p, r) for p, r in made.texts}
