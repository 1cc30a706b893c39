"""The contrast fixtures: the shipped file, its parser, and the reward_fixtures asset check."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hominem_pipeline.core.builds.reward_model import reward_dimension_fixtures, reward_fixtures, score_fixture_file
from hominem_pipeline.core.evaluation.fixtures import (
    EXTRA_TAGS,
    FIXTURES_JSON,
    FixtureReport,
    fixture_report,
    load_fixtures,
)
from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
from hominem_pipeline_tests.conftest import REPO
from hominem_pipeline_tests.core.test_reward_model import small_cfg

DIMENSIONS = [
    "empathy",
    "social_coherence",
    "agency_support",
    "epistemic_integrity",
    "harm_avoidance",
    "narrative_alignment",
    "curiosity",
]


def test_the_shipped_fixtures_cover_every_tag_and_half_prefer_the_shorter_reply():
    fixtures = load_fixtures(REPO / "config" / "fixtures" / "contrast.yaml", DIMENSIONS)
    assert len(fixtures) >= 120
    tags = {t: [f for f in fixtures if f.tag == t] for t in DIMENSIONS + list(EXTRA_TAGS)}
    assert all(len(group) >= 8 for group in tags.values()), {t: len(g) for t, g in tags.items()}
    shorter_better = sum(len(f.better.encode()) < len(f.worse.encode()) for f in fixtures)
    assert shorter_better >= len(fixtures) / 2  # "prefer the longer reply" is not a way through
    assert len({(f.prompt, f.better) for f in fixtures}) == len(fixtures)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- {tag: kindness, prompt: a, better: b, worse: c}", "unknown tag 'kindness'; use a dimension"),
        ("- {tag: empathy, prompt: a, better: b}", "entry 1: needs non-empty text for worse"),
        ("- {tag: empathy, prompt: a, better: b, worse: ' b '}", "the better and the worse reply are the same text"),
        ("- {tag: empathy, prompt: a, better: b, worse: c, note: d}", "unknown keys ['note']"),
        ("tag: empathy", "holds dict, not a list of fixtures"),
        ("- [unclosed", "is not readable YAML"),
    ],
)
def test_a_malformed_fixture_file_names_the_entry_and_the_fix(tmp_path, text, message):
    path = tmp_path / "fixtures.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match="fixtures.yaml") as info:
        load_fixtures(path, DIMENSIONS)
    assert message in str(info.value)


def test_the_report_counts_ties_as_wrong_and_lists_the_worst_first():
    fixtures = load_fixtures(REPO / "config" / "fixtures" / "contrast.yaml", DIMENSIONS)[:4]  # four empathy pairs
    report = fixture_report(fixtures, [0.5, 0.0, -0.2, 0.1])
    assert report.accuracy == 0.5 and report.by_tag == {"empathy": 0.5} and report.counts == {"empathy": 4}
    assert [x["gap"] for x in report.failures] == [-0.2, 0.0]
    assert report.metrics() == {"fixture_accuracy": 0.5, "fixture_accuracy_empathy": 0.5}


def test_each_tag_is_also_scored_by_its_own_dimension_alone():
    """Beside the scalar, each fixture whose tag is about a dimension is scored by that dimension's gap (truth
    by epistemic_integrity, relevance by narrative_alignment); fluency and trade-offs have none."""
    import numpy as np

    every = load_fixtures(REPO / "config" / "fixtures" / "contrast.yaml", DIMENSIONS)
    fixtures = [
        next(f for f in every if f.tag == t)
        for t in ("empathy", "curiosity", "truth", "relevance", "fluency", "tradeoff")
    ]
    vector = np.zeros((len(fixtures), len(DIMENSIONS)))
    vector[0, DIMENSIONS.index("empathy")] = -0.3  # empathy prefers the worse reply of the empathy pair
    vector[1, DIMENSIONS.index("curiosity")] = 0.2
    vector[2, DIMENSIONS.index("epistemic_integrity")] = 0.1
    vector[3, DIMENSIONS.index("empathy")] = 0.5  # relevance is scored by narrative_alignment, which ties here: wrong
    report = fixture_report(fixtures, [0.1] * 6, vector, DIMENSIONS)
    assert report.accuracy == 1.0 and report.dimensions.pairs == 4
    assert report.dimension_of == {
        "empathy": "empathy",
        "curiosity": "curiosity",
        "truth": "epistemic_integrity",
        "relevance": "narrative_alignment",
    }
    assert (
        report.dimensions.by_tag == {"curiosity": 1.0, "empathy": 0.0, "relevance": 0.0, "truth": 1.0}
        and report.dimensions.accuracy == 0.5
    )
    assert [(x["tag"], x["dimension"], x["gap"]) for x in report.dimensions.failures] == [
        ("empathy", "empathy", -0.3),
        ("relevance", "narrative_alignment", 0.0),
    ]
    assert (
        report.metrics()["fixture_dimension_accuracy"] == 0.5
        and report.metrics()["fixture_dimension_accuracy_truth"] == 1.0
    )
    again = FixtureReport.from_dict(json.loads(json.dumps(report.as_dict())))
    assert again.dimensions.by_tag == report.dimensions.by_tag and again.dimension_of == report.dimension_of


def _trained_on_fixtures(cfg, out, inverted: bool):
    fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)
    better, worse = [f.better for f in fixtures], [f.worse for f in fixtures]
    pairs = pd.DataFrame(
        {
            "prompt": [f.prompt for f in fixtures],
            "chosen": worse if inverted else better,
            "rejected": better if inverted else worse,
        }
    )
    rm_cfg = small_cfg(
        epochs=6, val_fraction=0.1, max_length=96, uncertainty={"method": "none", "members": 1, "mc_samples": 2}
    )
    train_reward_model(
        pd.DataFrame(),
        dimensions=cfg.dimension_names,
        sources=RewardSources(cfg.models.encoder.path),
        cfg=rm_cfg,
        out_dir=out,
        seed=0,
        data_digest="fixtures",
        date="2026-11-20",
        human_pairs=pairs,
    )
    metrics = score_fixture_file(cfg, out).metrics()
    return metrics, reward_fixtures(metrics, cfg, out)


def test_the_fixture_check_fails_on_a_model_trained_on_inverted_pairs_and_lists_them(tiny_cfg, tmp_path):
    metrics, outcome = _trained_on_fixtures(tiny_cfg, tmp_path / "inverted", inverted=True)
    assert metrics["fixture_accuracy"] < 0.5 and not outcome.passed
    assert (
        "below fixtures.min_accuracy 90%" in outcome.description
        and "tags below fixtures.min_tag_accuracy 75%" in outcome.description
    )
    report = json.loads((tmp_path / "inverted" / FIXTURES_JSON).read_text())
    assert len(report["failures"]) == round((1 - report["accuracy"]) * report["pairs"])
    worst = report["failures"][0]
    assert (
        outcome.metadata["failures"]
        .splitlines()[0]
        .startswith(f"[{worst['tag']}] {worst['prompt']} | better: {worst['better']} | worse: {worst['worse']}")
    )

    dims = reward_dimension_fixtures(
        metrics, tiny_cfg, tmp_path / "inverted"
    )  # untagged pairs leave the dimensions the judge's (none here)
    assert dims.metadata["dimension_accuracy"] == metrics["fixture_dimension_accuracy"]
    assert "contrast fixtures" in dims.description and "fixtures.min_dimension_accuracy 90%" in dims.description
    assert "truth: epistemic_integrity" in dims.metadata["dimension of each tag"]

    right, fair = _trained_on_fixtures(tiny_cfg, tmp_path / "right", inverted=False)
    assert right["fixture_accuracy"] > 0.5 > metrics["fixture_accuracy"]
    lenient = tiny_cfg.model_copy(
        update={"fixtures": tiny_cfg.fixtures.model_copy(update={"min_accuracy": 0.5, "min_tag_accuracy": 0.0})}
    )
    assert reward_fixtures(right, lenient, tmp_path / "right").passed


def test_without_a_fixture_file_the_check_passes_saying_so(tiny_cfg, tmp_path):
    off = tiny_cfg.model_copy(update={"fixtures": tiny_cfg.fixtures.model_copy(update={"file": None})})
    assert score_fixture_file(off, tmp_path) is None
    outcome = reward_fixtures({}, off, tmp_path)
    assert outcome.passed and "fixtures.file is null" in outcome.description
    outcome = reward_dimension_fixtures({}, off, tmp_path)
    assert outcome.passed and "fixtures.file is null" in outcome.description


def test_an_adapter_taught_the_better_replies_moves_the_student_toward_them(tiny_student, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from hominem_pipeline.core.evaluation.fixtures import adapter_moves, base_logp_cache
    from hominem_pipeline.core.lm.models import load_student
    from hominem_pipeline.core.policy.sequences import encode, reply_logps, sequence_logps

    fixtures = load_fixtures(REPO / "config" / "fixtures" / "contrast.yaml", DIMENSIONS)[:12]
    student, tokenizer = load_student(tiny_student)
    torch.manual_seed(0)
    add_fused_lm_head(student)  # for the training steps below (sequence_logps)
    model = get_peft_model(student, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear"))
    sequences = [encode(tokenizer, f.prompt, reply, 96) for f in fixtures for reply in (f.better, f.worse)]
    fused, fused_tokens = sequence_logps(model, sequences[:6], tokenizer.pad_token_id)
    plain, plain_tokens = reply_logps(
        model, sequences[:6], tokenizer.pad_token_id, batch_size=4
    )  # what the evaluation uses
    assert (
        torch.allclose(plain.float(), fused.detach().float(), atol=1e-3)
        and plain_tokens.tolist() == fused_tokens.tolist()
    )
    from hominem_pipeline.core.reward.guards import reply_token_logps

    replies_only, replies_tokens = reply_token_logps(
        model, sequences[:6], tokenizer.pad_token_id, batch_size=4
    )  # what the fixtures read
    assert torch.allclose(replies_only, plain, atol=1e-4) and replies_tokens.tolist() == plain_tokens.tolist()
    untouched, figures = adapter_moves(
        model, tokenizer, fixtures, batch_size=8, base_cache=base_logp_cache(tiny_student, tmp_path)
    )
    assert (
        figures["fixture_mean_move"] == 0.0 and untouched.accuracy == 0.0
    )  # LoRA starts as the base: no move, and no move is no win
    assert figures["fixture_base_prefers_better"] == figures["fixture_adapter_prefers_better"]

    optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(10):  # teach the pairs: the better reply up, the worse down
        logps, _ = sequence_logps(model, sequences, tokenizer.pad_token_id)
        (-(logps[0::2] - logps[1::2]).mean()).backward()
        optimiser.step()
        optimiser.zero_grad()
    model.eval()
    taught, figures = adapter_moves(model, tokenizer, fixtures, batch_size=8)
    assert taught.accuracy >= 0.9 and figures["fixture_mean_move"] > 0
    cache = base_logp_cache(tiny_student, tmp_path)  # the base's rows the first call kept, read by a new process
    assert len(cache) == 24
    again, cached = adapter_moves(model, tokenizer, fixtures, batch_size=8, base_cache=cache)
    assert cache.hits == 24 and cache.misses == 0 and again.accuracy == taught.accuracy
    assert cached == pytest.approx(figures, abs=1e-4)
    assert len(taught.failures) == round((1 - taught.accuracy) * 12)


def test_specificity_is_the_named_dimensions_move_beyond_the_mean_of_the_others():
    from hominem_pipeline.core.evaluation.fixtures import specificity

    gaps = np.array([[0.5, 0.1, 0.1], [0.2, 0.2, -0.4], [-0.3, 0.0, 0.0]])
    out = specificity(gaps, named=[0, 2, 0], direction=[1, -1, -1])
    # 0.5 - 0.1; -(-0.4 - 0.2); -(-0.3 - 0)
    assert out["items"] == 3 and out["mean"] == pytest.approx((0.4 + 0.6 + 0.3) / 3)
    assert out["beyond"] == 1.0 and out["se"] == pytest.approx(np.std([0.4, 0.6, 0.3], ddof=1) / np.sqrt(3))
    together = specificity(np.array([[0.5, 0.5, 0.5], [0.25, 0.25, 0.25]]), named=[0, 1])
    # every dimension moving alike is no specificity
    assert together["mean"] == pytest.approx(0.0) and together["beyond"] == 0.0
