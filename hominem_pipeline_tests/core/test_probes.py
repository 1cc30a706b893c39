"""The probing suite on toy scorers whose right answers are known."""

import random

import numpy as np
import pytest

from hominem_pipeline.core.evaluation import probes
from hominem_pipeline.core.evaluation.probes import (
    Counterfactual,
    TradeOff,
    adversarial,
    attribution_html,
    collisions,
    counterfactual_results,
    flipped,
    occlusion,
    pca,
    regressions,
    tradeoff_results,
)
from hominem_pipeline_tests.conftest import REPO

DIMS = ["empathy", "epistemic_integrity", "harm_avoidance"]


class Words:
    """A scorer that counts words: empathy the kind ones, honesty minus the false ones, harm minus the dangerous
    ones; the scalar their sum. `exact`: whole words as written (a typo hides them), else letters in any order."""

    dimensions = DIMS
    LISTS = {
        "empathy": ({"sorry", "thanks", "glad"}, 1.0),
        "epistemic_integrity": ({"sydney", "60"}, -1.0),
        "harm_avoidance": ({"ammonia"}, -1.0),
    }

    def __init__(self, exact: bool):
        self.exact = exact

    def _has(self, word: str, vocabulary: set[str]) -> bool:
        w = word.lower().strip(".,!?")
        return w in vocabulary if self.exact else "".join(sorted(w)) in {"".join(sorted(v)) for v in vocabulary}

    def raw_scores(self, prompts, replies):
        vec = np.array(
            [
                [sign * sum(self._has(w, words) for w in r.split()) for d, (words, sign) in self.LISTS.items()]
                for r in replies
            ],
            dtype=float,
        )
        return {"vector": vec, "scalar": vec.sum(1)}


class Length:
    """A scorer that reads only how long the reply is: no rewrite that keeps the letters moves it."""

    dimensions = DIMS

    def raw_scores(self, prompts, replies):
        n = np.array([sum(c.isalpha() for c in r) for r in replies], dtype=float)
        return {"vector": np.column_stack([n, n, n]), "scalar": n}


def test_a_typo_flips_nothing_on_a_robust_scorer_and_flips_a_brittle_one():
    prompts, better, worse = ["Hi"] * 3, ["thanks", "thanks", "thanks"], ["no", "ok", "hm"]
    brittle = adversarial(Words(exact=True), prompts, better, worse, seed=0, perturbations=["typos"]).iloc[0]
    assert (
        brittle["pairs"] == 3 and brittle["flip_rate"] == 1.0 and brittle["mean_shift"] == pytest.approx(0.5)
    )  # better 1 -> 0, worse unchanged
    robust = adversarial(Words(exact=False), prompts, better, worse, seed=0, perturbations=["typos"]).iloc[0]
    assert robust["flip_rate"] == 0.0 and robust["mean_shift"] == 0.0
    length = adversarial(Length(), ["Hi"], ["I am sorry. That is hard."], ["Go away."], seed=0)
    assert set(length["perturbation"]) == set(probes.PERTURBATIONS)
    row = length.set_index("perturbation")
    # typos, reordering and a frame around the message keep every letter: nothing moves; an insertion adds letters to
    # both
    assert (
        row.loc["typos", "mean_shift"]
        == row.loc["reorder", "mean_shift"]
        == row.loc["polite_frame", "mean_shift"]
        == 0.0
    )
    assert row.loc["insertion", "mean_shift"] > 0 and row.loc["insertion", "flip_rate"] == 0.0
    with pytest.raises(ValueError, match="unknown perturbations \\['shout'\\]"):
        adversarial(Length(), ["Hi"], ["a"], ["b"], seed=0, perturbations=["shout"])


def test_rewrites_keep_the_meaning_and_are_seeded():
    text = "I am so sorry, that is really hard. Do not give up. Maybe try again?"
    assert probes.paraphrase(text) == "I'm so sorry, that's truly difficult. Don't give up. Perhaps attempt again?"
    assert probes.reorder(text) == "Maybe try again? Do not give up. I am so sorry, that is really hard."
    assert probes.typos(text, random.Random(1)) == probes.typos(text, random.Random(1)) != text
    assert sorted(probes.typos(text, random.Random(1))) == sorted(text)  # letters swapped, none lost
    inserted = probes.insertion(text, random.Random(0))
    assert inserted.startswith("I am so sorry, that is really hard. ") and any(
        s in inserted for s in probes.INSERTIONS
    )


def test_trade_offs_report_the_choice_the_sides_and_a_flip_between_versions():
    scenarios = [
        TradeOff("kind", "empathy_vs_honesty", "My cat died.", "I am so sorry.", "Cats die.", ("empathy",), (), "a"),
        TradeOff(
            "fact",
            "empathy_vs_honesty",
            "Capital?",
            "Glad you asked, thanks! Sydney.",
            "Canberra.",
            ("empathy",),
            ("epistemic_integrity",),
            "b",
        ),
    ]
    table = tradeoff_results(Words(exact=True), scenarios)
    assert list(table["choice"]) == ["a", "a"] and list(table["as_expected"]) == [
        True,
        False,
    ]  # the kind but false reply wins the second: a miss
    assert list(table["dimensions_as_expected"]) == [True, True]
    assert table.loc[1, "gap_empathy"] == 2.0 and table.loc[1, "gap_epistemic_integrity"] == -1.0
    before = table.assign(choice=["a", "b"], as_expected=[True, True])
    assert flipped(table, before) == ["fact"] and regressions(table, before) == ["fact"] and flipped(table, None) == []


def test_counterfactuals_move_the_named_dimension_and_hold_the_others():
    items = [
        Counterfactual("moon", "fact_wrong", "epistemic_integrity", -1, "Capital?", "Canberra.", "Sydney."),
        Counterfactual(
            "feel",
            "feeling_acknowledged",
            "empathy",
            1,
            "I lost my job.",
            "Update your CV.",
            "I am so sorry. Update your CV.",
        ),
        Counterfactual("miss", "harmful_step", "harm_avoidance", -1, "Mould?", "Use vinegar.", "Use vinegar, thanks."),
    ]
    table = counterfactual_results(Words(exact=True), items).set_index("id")
    assert table.loc["moon", "right_way"] and table.loc["moon", "largest"] and table.loc["moon", "moved"] == -1.0
    assert table.loc["feel", "right_way"] and table.loc["feel", "others_mean_abs"] == 0.0
    assert (
        not table.loc["miss", "right_way"] and not table.loc["miss", "largest"]
    )  # the change moved empathy, not harm


def test_occlusion_attributes_each_output_to_the_words_that_raise_it():
    table = occlusion(Words(exact=True), "My cat died.", "I am so sorry about Sydney.", words=1)
    by_word = dict(zip(table["text"], table["empathy"]))
    assert by_word["sorry"] == 1.0 and all(v == 0.0 for w, v in by_word.items() if w != "sorry")
    assert (
        dict(zip(table["text"], table["epistemic_integrity"]))["Sydney."] == -1.0
    )  # leaving the false fact out raises honesty
    assert list(table["text"]) == ["I", "am", "so", "sorry", "about", "Sydney."]
    pairs = occlusion(Length(), "Hi", "one two three four five", words=2)
    assert list(pairs["text"]) == ["one two", "three four", "five"]
    page = attribution_html("My cat died.", "I am so sorry about Sydney.", table, DIMS)
    assert (
        'title="empathy +1.0000">sorry</span>' in page and 'title="epistemic_integrity -1.0000">Sydney.</span>' in page
    )
    alone = occlusion(
        Words(exact=True), "My cat died.", "sorry", words=2
    )  # the whole reply is one span: without it, nothing (0)
    assert list(alone["text"]) == ["sorry"] and alone.loc[0, "empathy"] == 1.0
    with pytest.raises(ValueError, match="non-empty reply"):
        occlusion(Length(), "Hi", "  ")


def test_pca_finds_a_planted_direction_and_collisions_list_opposed_gradients():
    rng = np.random.default_rng(0)
    t = rng.normal(size=200)
    vectors = np.column_stack([t, 2 * t, -t]) + rng.normal(0, 0.01, (200, 3))
    coords, explained = pca(vectors)
    assert coords.shape == (200, 2) and explained[0] > 0.99
    corr = probes.correlations(vectors, DIMS)
    assert corr.loc["empathy", "epistemic_integrity"] > 0.99 and corr.loc["empathy", "harm_avoidance"] < -0.99
    agreement = np.array([[1.0, 0.3, -0.6], [0.3, 1.0, -0.1], [-0.6, -0.1, 1.0]])
    assert collisions(agreement, DIMS) == [
        {"a": "empathy", "b": "harm_avoidance", "gda": -0.6},
        {"a": "epistemic_integrity", "b": "harm_avoidance", "gda": -0.1},
    ]


def test_the_shipped_probe_files_load_and_bad_entries_are_named(tmp_path):
    from hominem_pipeline.core.config.loader import load_config

    cfg = load_config(REPO / "config" / "hominem.yaml", root=REPO)
    scenarios = probes.load_tradeoffs(REPO / "config" / "probes" / "tradeoffs.yaml", cfg.dimension_names)
    assert {s.trade for s in scenarios} == set(probes.TRADES) and all(s.prefer in "ab" for s in scenarios)
    items = probes.load_counterfactuals(REPO / "config" / "probes" / "counterfactuals.yaml", cfg.dimension_names)
    assert {c.change for c in items} == {"fact_wrong", "feeling_acknowledged", "harmful_step"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {id: x, trade: empathy_vs_honesty, prompt: p, a: a, b: b, a_higher: [kindness], prefer: a}\n")
    with pytest.raises(ValueError, match="entry 1: a_higher is \\['kindness'\\]; give one or more of the dimensions"):
        probes.load_tradeoffs(bad, cfg.dimension_names)
    bad.write_text("- {id: x, change: c, dimension: empathy, direction: sideways, prompt: p, reply: a, changed: b}\n")
    with pytest.raises(ValueError, match="direction is 'sideways'; write up or down"):
        probes.load_counterfactuals(bad, cfg.dimension_names)
