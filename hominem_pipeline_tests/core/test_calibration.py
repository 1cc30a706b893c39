import numpy as np
import pytest

from hominem_pipeline.core.reward.calibration import (
    both_orders,
    calibration_report,
    fit_temperature,
    preference_probability,
    reliability_diagram,
    same_prompt_pairs,
    uncertainty_report,
)


def overconfident(n: int = 4000, seed: int = 0):
    """Gaps whose true preference probability is sigmoid(gap / 4): a model using T = 1 is far too sure."""
    rng = np.random.default_rng(seed)
    gaps = rng.normal(0.0, 3.0, n)
    outcomes = (rng.random(n) < preference_probability(gaps, 4.0)).astype(float)
    return gaps, outcomes


def test_temperature_scaling_recovers_the_temperature_and_lowers_ece(tmp_path):
    gaps, outcomes = overconfident()
    temperature = fit_temperature(gaps, outcomes)
    assert temperature == pytest.approx(4.0, rel=0.15)
    before = calibration_report(preference_probability(gaps, 1.0), outcomes)
    after = calibration_report(preference_probability(gaps, temperature), outcomes)
    assert before["ece"] > 0.08 and after["ece"] < 0.03 and after["ece"] < before["ece"] / 3
    assert after["brier"] < before["brier"] and after["mce"] < before["mce"]
    assert sum(b["count"] for b in after["bins"]) == len(gaps) and len(after["bins"]) <= 20
    reliability_diagram(before, after, tmp_path / "r.png", "toy")
    assert (tmp_path / "r.png").stat().st_size > 1000


def test_report_on_known_bins():
    report = calibration_report(np.array([0.9, 0.9, 0.1, 0.1]), np.array([1.0, 0.0, 0.0, 0.0]))
    # bin of 0.9: accuracy 0.5 (gap 0.4); bin of 0.1: accuracy 0 (gap 0.1); each half the pairs
    assert report["ece"] == pytest.approx(0.25) and report["mce"] == pytest.approx(0.4)
    assert report["brier"] == pytest.approx((0.01 + 0.81 + 0.01 + 0.01) / 4)


def test_pairs_are_counted_in_both_orders_above_the_gap():
    pairs = same_prompt_pairs(["p", "p", "p", "q"], np.array([0.9, 0.1, 0.85, 0.0]), min_gap=0.1)
    assert pairs.tolist() == [[0, 1], [2, 1]]  # (preferred, other)
    gaps, outcomes = both_orders(pairs, np.array([0.5, -0.5, 0.4, 0.0]))
    # pairs (0,1) and (1,2) pass the gap; (0,2) is a near tie; q has one row
    assert sorted(zip(gaps.round(3), outcomes)) == sorted([(1.0, 1.0), (-1.0, 0.0), (-0.9, 0.0), (0.9, 1.0)])
    with pytest.raises(ValueError, match="no validation pairs"):
        fit_temperature(np.array([]), np.array([]))


def test_a_small_perfectly_ordered_set_does_not_claim_certainty():
    # Eight pairs, every one ordered right: the unsmoothed likelihood is best at T -> 0 (P = 1 for all).
    gaps, outcomes = both_orders(
        np.arange(16).reshape(8, 2), np.repeat(np.linspace(0.01, 0.08, 8), 2) * np.tile([1, 0], 8)
    )
    temperature = fit_temperature(gaps, outcomes)
    probs = preference_probability(gaps, temperature)
    assert temperature > 1e-3 * 10
    assert probs[outcomes == 1].max() < 1.0 and probs[outcomes == 1].mean() == pytest.approx(9 / 10, abs=0.06)


def test_ece_noise_floor_is_what_a_calibrated_model_reads_on_few_pairs():
    """A perfectly calibrated model's ECE on few pairs is mostly sampling noise: the floor falls with the
    pair count, is 0 for certain pairs, and matches the ECE such a model reads on average."""
    from hominem_pipeline.core.reward.calibration import ece_noise_floor

    rng = np.random.default_rng(1)
    p_small = preference_probability(np.abs(rng.normal(0.0, 2.0, 54)), 1.0)
    p_large = preference_probability(np.abs(rng.normal(0.0, 2.0, 2000)), 1.0)
    small, large = ece_noise_floor(p_small), ece_noise_floor(p_large)
    assert 0.08 < small < 0.2 and large < 0.03  # 54 pairs: no model can read 0.05; 2,000 pairs: it can
    assert ece_noise_floor(np.ones(10)) == 0.0  # outcomes certain: no noise
    assert ece_noise_floor(p_small, seed=3) == pytest.approx(small, rel=0.1)
    # what a calibrated model reads: outcomes drawn from its own probabilities, in both orders
    reads = []
    for _ in range(300):
        y = (rng.random(54) < p_small).astype(float)
        reads.append(calibration_report(np.concatenate([p_small, 1 - p_small]), np.concatenate([y, 1 - y]))["ece"])
    assert np.mean(reads) == pytest.approx(small, rel=0.1)
    with pytest.raises(ValueError, match="no pairs"):
        ece_noise_floor(np.array([]))


def test_uncertainty_that_matches_the_errors_is_calibrated_and_ranks_them():
    """Outcomes drawn from Phi(gap / spread): the spread is the right uncertainty, so Phi(z) is calibrated and the
    more certain pairs are right more often. A spread four times too small is overconfident."""
    from scipy.special import ndtr

    rng = np.random.default_rng(0)
    n = 6000
    gap, spread = rng.normal(0.0, 1.0, n), rng.uniform(0.2, 2.0, n)
    outcomes = (rng.random(n) < ndtr(gap / spread)).astype(float)
    honest = uncertainty_report(gap, spread, outcomes)
    assert honest["ece"] < 0.03
    assert honest["auroc"] > 0.7
    low, mid, high = honest["accuracy by certainty"]
    assert low < mid < high
    assert uncertainty_report(gap, spread / 4, outcomes)["ece"] > 3 * honest["ece"]
    shuffled = uncertainty_report(gap, rng.permutation(spread), outcomes)
    assert shuffled["auroc"] < honest["auroc"]


def test_uncertainty_report_names_a_model_without_spread():
    with pytest.raises(ValueError, match="uncertainty.method ensemble"):
        uncertainty_report(np.ones(3), np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match="differ in length"):
        uncertainty_report(np.ones(3), np.ones(2), np.ones(3))
