import numpy as np
import pandas as pd
import pytest

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.evaluation.calibration import resolve
from hominem_pipeline.core.evaluation.health import (
    Component,
    aggregate,
    cross_domain_robustness,
    gradient_variance_stability,
    perturb,
)
from hominem_pipeline_tests.conftest import REPO

CONFIG = load_config(root=REPO)
CFG = CONFIG.health


def test_gvs_is_one_minus_coefficient_of_variation_over_reference():
    comp = gradient_variance_stability([1.0, 3.0], gvi_max=1.0)
    assert comp.details["gvi"] == pytest.approx(0.5)  # std 1 / mean 2
    assert comp.value == pytest.approx(0.5)
    assert gradient_variance_stability([1.0], 1.0).value is None
    assert gradient_variance_stability([1.0, 100.0], 0.5).value == 0.0  # clipped


def test_rhi_uses_the_calibrations_weights_and_reports_missing_components():
    values = dict(zip(("dcs", "gvs", "mss", "cdrs", "lrps"), (0.8, 0.6, 1.0, 0.5, 0.4)))
    full = {n: Component(n, v, "test") for n, v in values.items()}
    weights = resolve(CONFIG).weights
    report = aggregate(full, CONFIG)
    assert report.rhi == pytest.approx(sum(weights[n] * v for n, v in values.items()))
    assert not report.partial and report.deployable is (report.rhi >= resolve(CONFIG).threshold)
    design = load_config(
        root=REPO,
        overrides={
            "health": {
                "calibration": None,
                "gvi_max_reference": 1.0,
                "deploy_threshold": 0.7,  # no calibration
                "weights": {"dcs": 0.25, "gvs": 0.15, "mss": 0.25, "cdrs": 0.20, "lrps": 0.15},
            }
        },
    )
    assert aggregate(full, design).rhi == pytest.approx(0.25 * 0.8 + 0.15 * 0.6 + 0.25 * 1.0 + 0.20 * 0.5 + 0.15 * 0.4)

    partial = dict(full, mss=Component("mss", None, "not measured"))
    report = aggregate(partial, design)
    assert report.partial and report.missing == ["mss"] and not report.deployable
    assert report.rhi == pytest.approx((0.25 * 0.8 + 0.15 * 0.6 + 0.20 * 0.5 + 0.15 * 0.4) / 0.75)
    assert "mss" in report.reason


def test_a_healthy_index_does_not_deploy_an_adapter_that_loses_to_the_base_beyond_the_noise():
    """With `health.win_rate_margin` set, the win rate is judged by the paired rule: 8 losses in 18 prompts (44%) is
    within the noise of a coin and passes; 3 in 18 (17%) is worse beyond it and refuses, the reason giving the
    figure, its +- and the rule. By default (null) it is reported with its +- and decides nothing."""
    healthy = {n: Component(n, 0.9, "test") for n in ("dcs", "gvs", "mss", "cdrs", "lrps")}
    close = [1.0] * 8 + [0.0] * 10
    checked = load_config(root=REPO, overrides={"health": {"win_rate_margin": 0.0}})
    report = aggregate(healthy, checked, close)
    assert report.deployable and report.win_rate == pytest.approx(8 / 18)
    se = np.std(np.array(close) - 0.5, ddof=1) / np.sqrt(18)
    assert report.win_check["standard_error"] == pytest.approx(se)
    assert report.win_check["detectable_drop"] > 0.25  # 18 prompts cannot see a drop of 25 points
    assert "+-" in report.reason and "passed" in report.reason
    losing = aggregate(healthy, checked, [1.0] * 3 + [0.0] * 15)
    assert not losing.deployable and losing.win_rate == pytest.approx(3 / 18)
    assert "16.7%" in losing.reason and "+-" in losing.reason and "health.win_rate_margin" in losing.reason
    assert aggregate(healthy, checked).deployable  # no evaluation outcomes: the index alone decides
    assert CONFIG.health.win_rate_margin is None
    off = aggregate(healthy, CONFIG, [0.0] * 18)
    assert off.deployable and off.win_rate == 0.0 and "not checked" in off.reason
    assert off.win_check["checked"] is False and off.win_check["refused"] is False and off.win_check["items"] == 18


def test_cdrs_penalises_categories_that_disagree_and_read_against_improvement_an_adapter_losing_everywhere():
    dims = ["empathy"]

    def table(outcomes_and_deltas):
        return pd.DataFrame(
            [
                {
                    "category": c,
                    "adapter_outcome": o,
                    "base_vector": {"empathy": 0.0},
                    "adapter_vector": {"empathy": d},
                }
                for c, o, d in outcomes_and_deltas
            ]
        )

    agree = cross_domain_robustness(table([("a", 1.0, 0.2), ("a", 1.0, 0.1), ("b", 1.0, 0.3), ("b", 1.0, 0.2)]), dims)
    assert agree.value == pytest.approx(1.0)
    split = cross_domain_robustness(
        table([("a", 1.0, 0.5), ("a", 1.0, 0.5), ("b", 0.0, -0.1), ("b", 0.0, -0.1)]), dims
    )
    # category b contradicts the overall (positive) delta: C_contra 0.5; win rates 1 and 0: entropy 0, consistency 0
    assert split.details["c_contradiction"] == pytest.approx(0.5)
    assert split.value == pytest.approx(1 - (0.5 + 0.0 + 1.0) / 3)
    # its noise: prompts resampled within their categories; two prompts per category that agree leave none
    assert split.details["standard_error"] == 0.0 and "+- 0.000" in split.how
    mixed = cross_domain_robustness(
        table(
            [("a", 1.0, 0.5), ("a", 0.0, 0.4), ("b", 0.0, -0.1), ("b", 1.0, 0.2), ("c", 1.0, 0.3), ("c", 0.0, -0.2)]
        ),
        dims,
    )
    assert mixed.details["standard_error"] > 0.05
    assert cross_domain_robustness(table([("a", 1.0, 0.1)]), dims).value is None

    # read against improvement (the index's reading): an adapter worse than the base everywhere is consistent, not
    # robust
    losing = table([("a", 0.0, -0.2), ("a", 0.0, -0.1), ("b", 0.0, -0.3), ("b", 0.0, -0.2)])
    assert cross_domain_robustness(losing, dims).value == pytest.approx(1.0)
    directed = cross_domain_robustness(losing, dims, against="improvement")
    assert directed.details["c_contradiction"] == 1.0 and directed.details["c_consistency"] == 0.0
    assert directed.value == pytest.approx(1 - (1.0 + 0.0 + 1.0) / 3)
    assert cross_domain_robustness(
        table([("a", 1.0, 0.2), ("a", 1.0, 0.1), ("b", 1.0, 0.3), ("b", 1.0, 0.2)]), dims, against="improvement"
    ).value == pytest.approx(1.0)


def test_dcs_against_the_healthy_coherence_falls_when_dimensions_fight_and_when_they_merge():
    import numpy as np

    from hominem_pipeline.core.evaluation.health import coherence_of

    def agreement(c):  # three dimensions whose every pair of updates has cosine c
        return np.full((3, 3), c) + (1 - c) * np.eye(3)

    assert coherence_of(agreement(0.5), "test").value == pytest.approx(
        0.5
    )  # no reference: the coherence, the design's reading
    assert coherence_of(agreement(1.0), "test").value == pytest.approx(1.0)
    healthy = {c: coherence_of(agreement(c), "test", healthy=0.5) for c in (0.5, 0.6, 1.0, 0.0, -0.5)}
    assert healthy[0.5].value == pytest.approx(1.0) and healthy[0.6].value == pytest.approx(0.8)
    assert healthy[1.0].value == pytest.approx(0.0)  # merged: every dimension asks for the same update
    assert healthy[0.0].value == pytest.approx(0.0) and healthy[-0.5].value == pytest.approx(
        0.0
    )  # fighting (GDA below 0 counts as 0)
    assert (
        healthy[1.0].details["coherence"] == pytest.approx(1.0) and "healthy days' coherence 0.5" in healthy[1.0].how
    )
    assert coherence_of(agreement(0.8), "test", healthy=0.8).value == pytest.approx(1.0)
    assert coherence_of(agreement(0.0), "test", healthy=0.8).value == pytest.approx(0.0)
    with pytest.raises(ValueError, match="references.dcs_healthy 1.5 is not a coherence"):
        coherence_of(agreement(0.5), "test", healthy=1.5)


def test_perturbation_drops_exactly_one_word():
    import random

    out = perturb("one two three four", random.Random(0))
    assert len(out.split()) == 3 and set(out.split()) < {"one", "two", "three", "four"}
    assert perturb("single", random.Random(0)) == "single"


def test_dimensions_updates_of_the_policy_agree_when_they_score_alike_and_oppose_when_inverted(tiny_student):
    import numpy as np
    from peft import LoraConfig, get_peft_model

    from hominem_pipeline.core.evaluation.health import dcs_of, policy_gradient_agreement
    from hominem_pipeline.core.lm.models import load_student

    base, tokenizer = load_student(tiny_student)
    policy = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    prompts = ["How are you?", "Tell me a story.", "What is two plus two?", "I feel sad today."]
    replies = ["I am well, thank you.", "Once upon a time a fox.", "Four.", "I am sorry to hear that."]
    first = np.array([0.9, 0.1, -0.4, 0.7])
    vectors = np.stack(
        [first, 2 * first + 0.3, -first, np.array([0.1, 0.8, 0.2, -0.6])], 1
    )  # same, same up to scale, inverted, other
    cos = policy_gradient_agreement(policy, tokenizer, prompts, replies, vectors, chunk=3)
    assert cos.shape == (4, 4) and np.allclose(np.diag(cos), 1.0, atol=1e-5)
    assert cos[0, 1] == pytest.approx(1.0, abs=1e-4) and cos[0, 2] == pytest.approx(
        -1.0, abs=1e-4
    )  # an update and its reverse
    assert abs(cos[0, 3]) < 0.99
    assert 0.0 <= dcs_of(cos) <= 1.0
    assert all(not p.requires_grad for n, p in policy.named_parameters() if "lora_" not in n)  # the base stays frozen


def test_dcs_on_the_policy_is_measured_on_the_adapters_lora_and_needs_it(tiny_cfg, tiny_student, tmp_path):
    from peft import LoraConfig, get_peft_model

    from hominem_pipeline.core.evaluation.health import coherence
    from hominem_pipeline.core.lm.models import load_student

    assert tiny_cfg.health.dcs_on == "policy"
    with pytest.raises(ValueError, match="dcs_on is policy: the adapter's model is needed"):
        coherence(tiny_cfg, None, ["a", "b"], ["x", "y"], None)

    class Scores:  # the reward model's vectors of the replies: two dimensions that agree, one that opposes them
        dimensions = ("a", "b", "c")

        def raw_scores(self, prompts, replies):
            import numpy as np

            first = np.linspace(-1.0, 1.0, len(replies))
            return {"vector": np.stack([first, 2 * first, -first], 1)}

    base, _ = load_student(tiny_student)
    policy = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    policy.save_pretrained(tmp_path / "adapter")  # an adapter folder, as the RHI stage and the fast loop pass it
    dcs = coherence(
        tiny_cfg,
        Scores(),
        ["How are you?", "Tell me a story.", "What is two plus two?"],
        ["Well.", "A fox.", "Four."],
        tmp_path / "adapter",
    )
    assert dcs.details["coherence"] == pytest.approx(
        1 / 3, abs=1e-3
    )  # of three pairs of dimensions, one agrees and two oppose
    healthy = resolve(tiny_cfg).references.get(
        "dcs_healthy"
    )  # read against the healthy days' coherence where the calibration gives it
    assert dcs.value == pytest.approx(
        1 / 3 if healthy is None else 1 - abs(1 / 3 - healthy) / max(healthy, 1 - healthy), abs=1e-3
    )
    assert "adapter's LoRA" in dcs.how and dcs.details["min_gda"] == pytest.approx(-1.0, abs=1e-3)

    # the live gate passes the candidate it has loaded beside the live adapter (the candidate active): the same
    # coherence, with nothing loaded again and the live adapter's LoRA left out of the updates
    import torch

    from hominem_pipeline.core.online.gate import CANDIDATE, side_by_side_model

    torch.manual_seed(1)
    other, tokenizer = load_student(tiny_student)
    get_peft_model(
        other, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    ).save_pretrained(tmp_path / "live")
    both = side_by_side_model(load_student(tiny_student)[0], tmp_path / "adapter", tmp_path / "live")
    both.set_adapter(CANDIDATE)
    loaded = coherence(
        tiny_cfg,
        Scores(),
        ["How are you?", "Tell me a story.", "What is two plus two?"],
        ["Well.", "A fox.", "Four."],
        None,
        policy=(both, tokenizer),
    )
    assert np.allclose(loaded.details["gda"], dcs.details["gda"], atol=1e-5)
    assert loaded.value == pytest.approx(dcs.value, abs=1e-6)
