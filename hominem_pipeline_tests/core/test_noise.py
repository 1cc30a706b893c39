"""The paired non-inferiority rule every sampled check of the gate decides by (core/evaluation/noise.py)."""

import numpy as np
import pytest

from hominem_pipeline.core.evaluation.noise import NoiseRule, paired_check

RULE = NoiseRule(margin=0.0, confidence=0.95, power=0.8)


def simulate(p_candidate: float, p_reference: float, n: int, runs: int, seed: int = 0) -> tuple[float, float]:
    """The share of `runs` samples of `n` paired yes/no items the rule refuses, and the mean stated detectable drop;
    the two sides agree on an item 60% of the time, as a candidate close to the model it replaces does."""
    rng = np.random.default_rng(seed)
    refused, drops = 0, []
    for _ in range(runs):
        shared = rng.random(n) < 0.6
        ref = (rng.random(n) < p_reference).astype(float)
        cand = np.where(shared, ref, (rng.random(n) < p_candidate).astype(float))
        check = paired_check("recall", "recall", cand, ref, RULE, "the base")
        refused += check.refused
        drops.append(check.detectable_drop)
    return refused / runs, float(np.mean(drops))


def test_a_sound_candidate_is_refused_at_most_one_minus_the_confidence_and_a_drop_it_can_see_is_caught():
    false_refusals, drop = simulate(0.5, 0.5, n=120, runs=600)
    assert false_refusals <= 0.05 + 0.02  # 1 - confidence, with the simulation's own noise
    # a candidate worse on the items the sides disagree on, by the drop the rule says it detects: caught about as
    # often as `power` says (the disagreeing 40% carry the whole drop)
    p_worse = 0.5 - drop / 0.4
    caught, _ = simulate(p_worse, 0.5, n=120, runs=600, seed=1)
    assert 0.7 <= caught <= 0.92


def test_the_check_states_its_figures_and_rule_and_says_why_it_refused():
    worse = paired_check("facts", "facts answered", [0.0] * 30 + [1.0] * 10, [1.0] * 40, RULE, "the base")
    assert worse.refused and worse.items == 40 and worse.candidate == 0.25 and worse.reference == 1.0
    assert worse.difference == pytest.approx(-0.75)
    assert worse.standard_error == pytest.approx(np.std([-1.0] * 30 + [0.0] * 10, ddof=1) / np.sqrt(40))
    assert worse.upper_bound == pytest.approx(-0.75 + RULE.z * worse.standard_error)
    assert "facts answered 25.0% against the base's 100.0% on 40 items" in worse.reason()
    assert "95% one-sided confidence" in worse.reason()
    same = paired_check("facts", "facts answered", [1.0, 0.0] * 20, [1.0, 0.0] * 20, RULE, "the base")
    assert not same.refused and same.standard_error == 0.0 and same.line().endswith("passed")
    # a margin lets a small, sure drop through
    small = paired_check("x", "x", [0.9] * 50, [1.0] * 50, NoiseRule(0.15, 0.95, 0.8), "the base")
    assert not small.refused
    one = paired_check("x", "x", [0.0], [1.0], RULE, "the base")
    assert not one.refused and one.standard_error == float("inf")  # one item says nothing of the noise
    with pytest.raises(ValueError, match="one score per item"):
        paired_check("x", "x", [1.0, 0.0], [1.0], RULE, "the base")
