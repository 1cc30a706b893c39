"""Artifacts any machine can load: a saved reward model names the folders it reads (frozen backbone, the
guards' student, the people's encoder) by name and digest, never by absolute path, and finds them in
another project's data/models."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from hominem_pipeline.core.reward.model import RewardModel
from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
from hominem_pipeline_tests.core.test_reward_model import DIMS, small_cfg, toy_labels

PROMPTS = ["Can you help me move?", "I failed my exam."]
REPLIES = ["Thank you, that is kind.", "That sounds hard. What happened?"]


def test_a_reward_model_loads_in_another_project_that_holds_the_same_models(
    tiny_student, tiny_encoder, tmp_path, monkeypatch
):
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv(
        "HOMINEM_MODEL_PLACES", str(tmp_path / "places.json")
    )  # this machine's list: only what this test records
    for project in (first, second):  # each project holds its own copies of the models, as `hominem setup` makes them
        shutil.copytree(tiny_student, project / "data" / "models" / "student")
        shutil.copytree(tiny_encoder, project / "data" / "models" / "encoder")
    rows = [
        {
            "prompt": f"Could you help me with thing {i}?",
            "chosen": "Thank you, that is very kind of you.",
            "rejected": "Go away now.",
            "weight": 1.0,
            "heads": i < 12,
            "source": "shipped:test",
        }
        for i in range(48)
    ]
    cfg = small_cfg(
        max_length=96,
        head_fit="ridge",
        ridge_alphas=[1.0],
        uncertainty={"method": "none", "members": 1, "mc_samples": 2},
        guards=["reply_logp"],
        backbone={"path": "student", "finetune": "frozen", "frame": "judge", "pooling": "last_mean"},
        people_score={"encoder": "encoder", "max_length": 64},
    )
    model = first / "data" / "reward_model"
    monkeypatch.setenv("HOMINEM_HOME", str(first))
    train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(
            first / "data" / "models" / "student",
            judge_system="You are a fair judge.",
            people_encoder=first / "data" / "models" / "encoder",
            guard_student=first / "data" / "models" / "student",
        ),
        cfg=cfg,
        out_dir=model,
        seed=0,
        data_digest="p",
        date="2026-11-20",
        human_pairs=pd.DataFrame(rows),
    )
    here = RewardModel.load(model).raw_scores(PROMPTS, REPLIES)
    for text in [p for p in model.rglob("*") if p.suffix in (".json", ".md", ".txt")]:
        assert str(tmp_path) not in text.read_text(), text  # no absolute path: names and digests

    assert (tmp_path / "places.json").is_file()  # where it was built, it loads from any folder: the machine remembers
    moved = shutil.copytree(model, second / "downloaded" / "reward_model")  # what MLflow hands another machine
    shutil.rmtree(first)  # no access to the first project at all
    monkeypatch.setenv("HOMINEM_MODEL_PLACES", str(tmp_path / "other-machine.json"))
    monkeypatch.setenv("HOMINEM_HOME", str(second))
    there = RewardModel.load(moved)
    for key in ("scalar", "vector"):
        np.testing.assert_allclose(there.raw_scores(PROMPTS, REPLIES)[key], here[key], atol=1e-5)

    shutil.rmtree(second / "data" / "models" / "encoder")
    shutil.copytree(
        tiny_student, second / "data" / "models" / "encoder"
    )  # a folder of that name with other weights is not it
    with pytest.raises(
        FileNotFoundError, match=r"people's score reads the encoder 'encoder' \(sha256 .*hominem setup"
    ):
        RewardModel.load(moved).raw_scores(
            PROMPTS, REPLIES
        )  # the encoder is read when the people's score is first needed
    elsewhere = tmp_path / "shared-models"
    shutil.copytree(
        tiny_encoder, elsewhere / "minilm"
    )  # another name, the same weights: found by digest through $HOMINEM_MODELS
    monkeypatch.setenv("HOMINEM_MODELS", str(elsewhere))
    np.testing.assert_allclose(
        RewardModel.load(moved).raw_scores(PROMPTS, REPLIES)["scalar"], here["scalar"], atol=1e-5
    )


def test_an_adapter_that_names_its_base_by_hub_id_is_trained_on_and_saved_offline(tiny_student, tmp_path, recwarn):
    """An update trains on from an adapter whose config names the hub id: PEFT reads the base's config from
    the local student when it saves, never from the hub (it would try to download it)."""
    import json

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.policy.lora import lora_student, name_base, save_adapter
    from hominem_pipeline_tests.conftest import REPO
    from hominem_pipeline_tests.core.test_dual_trainer import TINY_POLICY

    cfg = load_config(root=REPO, overrides={"policy": TINY_POLICY}).policy
    model, tokenizer, before = lora_student(tiny_student, cfg, device="cpu")
    save_adapter(model, tokenizer, tmp_path / "first", before)
    name_base(tmp_path / "first", "someone/not-on-this-machine")
    model, tokenizer, before = lora_student(tiny_student, cfg, tmp_path / "first", device="cpu")
    save_adapter(model, tokenizer, tmp_path / "second", before)
    assert not [w for w in recwarn if "Could not find a config file" in str(w.message)]
    assert json.loads((tmp_path / "second" / "adapter_config.json").read_text())["base_model_name_or_path"] == str(
        tiny_student
    )
