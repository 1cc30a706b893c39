import logging
import re

import numpy as np
import pandas as pd
import pytest
import torch

from hominem_pipeline.core.config.loader import deep_merge, load_config
from hominem_pipeline.core.reward.calibration import same_prompt_pairs
from hominem_pipeline.core.reward.dataset import TrainingSet, pairwise_accuracy
from hominem_pipeline.core.reward.encoding import encode_pair, pad_batch
from hominem_pipeline.core.reward.model import RewardModel
from hominem_pipeline.core.reward.network import RewardNet, member_mean_std
from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
from hominem_pipeline_tests.conftest import REPO

DIMS = ["empathy", "curiosity", "harm_avoidance"]


def toy_labels(n_prompts: int = 6) -> pd.DataFrame:
    """Kind replies score high, curt ones low: a signal an encoder can learn from words alone."""
    rows = []
    for i in range(n_prompts):
        for j, (reply, value) in enumerate(
            [("I am so sorry, that sounds really hard. Tell me more?", 0.8), ("Whatever. Not my problem.", -0.8)]
        ):
            rows.append(
                {
                    "prompt_id": f"p{i}",
                    "prompt": f"Something sad happened to me, number {i}.",
                    "response": reply,
                    "vector": {d: value for d in DIMS},
                    "scalar": value,
                    "reward_intensity": 0.5 + value / 4,
                    "safety_score": 0.9,
                }
            )
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def trained(tiny_encoder, tmp_path_factory):
    cfg = small_cfg(epochs=8, early_stopping_patience=8)
    out = tmp_path_factory.mktemp("rm")
    history = []
    warnings = _Records()
    logger = logging.getLogger("hominem_pipeline.core.reward.training")
    logger.addHandler(warnings)
    try:
        metrics = train_reward_model(
            toy_labels(),
            dimensions=DIMS,
            sources=RewardSources(tiny_encoder),
            cfg=cfg,
            out_dir=out,
            seed=0,
            data_digest="abc",
            date="2026-11-20",
            on_epoch=lambda e, m: history.append(m),
        ).metrics
    finally:
        logger.removeHandler(warnings)
    return out, metrics, history, warnings.messages


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_heads_have_the_configured_shapes(tiny_encoder):
    from transformers import AutoModel

    net = RewardNet(AutoModel.from_pretrained(tiny_encoder), n_dims=5, members=4)
    out = net(torch.ones((3, 7), dtype=torch.long), torch.ones((3, 7), dtype=torch.long))
    assert out["vector"].shape == (3, 4, 5)  # batch, ensemble members, dimensions
    assert out["scalar"].shape == out["reward_intensity"].shape == out["safety_score"].shape == (3, 4)
    assert out["vector"].abs().max() <= 1 and (0 <= out["safety_score"]).all() and (out["safety_score"] <= 1).all()


def test_loss_falls_and_the_model_learns_the_ordering(trained):
    _, metrics, history, warnings = trained
    assert history[-1]["train_mse_vector"] < history[0]["train_mse_vector"] / 2
    assert metrics["val_pairwise_accuracy"] == 1.0
    assert metrics["val_pairs"] == 2  # two held-out prompts, one kind/curt pair each
    # Two pairs prove little, and the log says so (with the error a perfect score on two pairs hides).
    assert any(
        "only 2 held-out teacher pairs" in m and "+- 31 points" in m and "reward_teacher_agreement.py" in m
        for m in warnings
    ), warnings


def test_saved_model_scores_identically_after_loading(trained, tiny_encoder):
    out, _, _, _ = trained
    a = RewardModel.load(out)
    b = RewardModel.load(out)
    prompts, responses = ["I lost my job."] * 2, ["That is hard; what happened?", "ok"]
    sa, sb = a.score(prompts, responses), b.score(prompts, responses)
    assert sa == sb
    assert set(sa[0].vector) == set(DIMS)
    assert sa[0].scalar > sa[1].scalar  # kind beats curt, as trained
    assert a.metadata.training_data_digest == "abc" and a.metadata.date == "2026-11-20"


def test_batched_scores_do_not_depend_on_batch_composition(trained):
    rm = RewardModel.load(trained[0])
    prompts = ["a", "b " * 30, "c " * 5]
    responses = ["x", "y " * 40, "z"]
    together = rm.raw_scores(prompts, responses, batch_size=3)["scalar"]
    alone = np.array([rm.raw_scores([p], [r])["scalar"][0] for p, r in zip(prompts, responses)])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_bad_inputs_fail_clearly(trained):
    rm = RewardModel.load(trained[0])
    with pytest.raises(ValueError, match="item 1: the response is empty"):
        rm.score(["a", "b"], ["fine", "  "])
    with pytest.raises(TypeError, match="lists of strings"):
        rm.score("a", "b")
    with pytest.raises(TypeError, match="item 0: prompt and response must be str"):
        rm.score([1], ["b"])
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        rm.score(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="item 0: the response is 100,001 characters"):
        rm.score(["a"], ["x" * 100_001])
    with pytest.raises(FileNotFoundError, match="not a reward model folder"):
        RewardModel.load(trained[0].parent)


def test_long_inputs_are_truncated_keeping_the_latest_prompt_turn(tiny_encoder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    ids = encode_pair(tok, "old " * 300 + "latest question", "answer " * 300, 64)
    assert len(ids) == 64
    text = tok.decode(ids)
    assert "latest question" in text and text.count("answer") >= 40


def test_split_keeps_prompts_whole_and_pairwise_accuracy_counts_pairs(tiny_encoder):
    from transformers import AutoTokenizer

    frame = pd.DataFrame(
        {
            "prompt_id": ["a", "a", "b", "b", "c", "c"],
            "prompt": ["q"] * 6,
            "response": ["r"] * 6,
            "vector": [{d: 0.0 for d in DIMS}] * 6,
            "scalar": [0.0] * 6,
            "reward_intensity": [0.5] * 6,
            "safety_score": [0.5] * 6,
        }
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_encoder)
    data = TrainingSet.build(lambda p, r: encode_pair(tokenizer, p, r, 48), frame, None, DIMS, small_cfg())
    train_groups, val_groups = data.split(0.34, seed=0)
    train = np.concatenate([data.groups[g] for g in train_groups])
    val = np.concatenate([data.groups[g] for g in val_groups])
    ids = np.array(["a", "a", "b", "b", "c", "c"])
    assert set(ids[train]).isdisjoint(set(ids[val])) and len(val) == 2
    pairs = same_prompt_pairs(["p", "p", "p"], np.array([0.5, 0.0, 0.45]), 0.1)
    assert len(pairs) == 2  # (0.5 vs 0.0) and (0.45 vs 0.0); (0.5 vs 0.45) is under the gap
    assert pairwise_accuracy(pairs, np.array([0.9, 0.1, 0.2])) == 1.0
    assert pairwise_accuracy(pairs, np.array([0.9, 0.3, 0.2])) == 0.5


def test_preferences_are_calibrated_and_complementary(trained):
    out, metrics, _, _ = trained
    model = RewardModel.load(out)
    cal = model.metadata.calibration
    assert cal["temperature"] == metrics["temperature"] > 0 and cal["after"]["pairs"] == 2 * metrics["val_pairs"]
    assert 0 <= metrics["val_ece"] <= 1 and 0 <= metrics["val_brier"] <= 1
    assert (out / "reliability.png").stat().st_size > 1000
    prompt, kind, curt = "I lost my job.", "That is hard; what happened?", "ok"
    p = model.prefer(prompt, kind, curt)
    assert p + model.prefer(prompt, curt, kind) == pytest.approx(1.0, abs=1e-12)
    assert p > 0.5  # kind beats curt, as trained
    # Two validation pairs, both right, are evidence, not proof: fitted to Platt's target of 3/4, the
    # temperature does not collapse to certainty (maximum likelihood would give T -> 0 and p = 1).
    assert p < 0.95
    [a, b] = model.score([prompt, prompt], [kind, curt])
    assert model.probability(a.scalar - b.scalar) == pytest.approx(p, abs=1e-9)  # from scores already computed


def toy_human_pairs(n: int = 10) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "prompt": [f"I failed my exam, attempt {i}." for i in range(n)],
            "chosen": ["I am so sorry, that sounds really hard. Tell me more?"] * n,
            "rejected": ["Whatever. Not my problem."] * n,
        }
    )


def small_cfg(**overrides):
    """config/reward/encoder.yaml's reward model (these tests pass the tiny encoder), small, then `overrides`."""
    base = {
        "epochs": 6,
        "batch_size": 4,
        "head_learning_rate": 0.01,
        "learning_rate": 0.001,
        "early_stopping_patience": 6,
        "val_fraction": 0.34,
        "max_length": 48,
    }
    encoder = REPO / "config" / "reward" / "encoder.yaml"
    return load_config(encoder, root=REPO, overrides={"reward_model": deep_merge(base, overrides)}).reward_model


def toy_reward_model(encoder, out_dir, date: str = "2026-11-27"):
    """A reward model trained one epoch on `toy_labels` over `encoder`, written to `out_dir`; returns the folder."""
    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model

    train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(encoder),
        cfg=small_cfg(epochs=1),
        out_dir=out_dir,
        seed=0,
        data_digest="x",
        date=date,
    )
    return out_dir


def people_cfg(**overrides):
    """`small_cfg` with ridge heads on the frozen tiny student in the judge's frame, one member: the setting the
    people's score tests share."""
    return small_cfg(
        max_length=96,
        head_fit="ridge",
        ridge_alphas=[1.0, 100.0],
        uncertainty={"method": "none", "members": 1, "mc_samples": 2},
        backbone={"path": "student", "finetune": "frozen", "frame": "judge", "pooling": "last_mean"},
        **overrides,
    )


def test_ensemble_members_give_uncertainty_per_output(trained):
    rm = RewardModel.load(trained[0])
    assert rm.metadata.members == 5 and rm.uncertainty_method == "ensemble"
    [out] = rm.score(["I lost my job."], ["That is hard; what happened?"])
    assert set(out.uncertainty) == set(DIMS) | {"scalar", "reward_intensity", "safety_score"}
    assert (
        all(v >= 0 for v in out.uncertainty.values()) and out.uncertainty["scalar"] > 0
    )  # members trained on different resamples
    assert rm.score(["I lost my job."], ["That is hard; what happened?"]) == [out]


def test_mc_dropout_uncertainty_is_positive_and_repeatable(tiny_encoder, tmp_path):
    cfg = small_cfg(epochs=2, uncertainty={"method": "mc_dropout", "members": 5, "mc_samples": 6})
    train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
    )
    rm = RewardModel.load(tmp_path)
    assert rm.metadata.members == 1
    first = rm.score(["I lost my job."] * 2, ["That is hard; what happened?", "ok"])
    assert all(o.uncertainty["scalar"] > 0 for o in first)
    assert rm.score(["I lost my job."] * 2, ["That is hard; what happened?", "ok"]) == first
    plain = rm.raw_scores(["I lost my job."], ["ok"])  # the point estimate is the deterministic pass
    assert plain["scalar"][0] == pytest.approx(first[1].scalar, abs=1e-6) and "std" not in plain


def test_bradley_terry_learns_from_human_pairs_alone(tiny_encoder, tmp_path):
    history = []
    metrics = train_reward_model(
        toy_labels().iloc[0:0],
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=small_cfg(uncertainty={"method": "none", "members": 1, "mc_samples": 2}),
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
        human_pairs=toy_human_pairs(),
        on_epoch=lambda e, m: history.append(m),
    ).metrics
    assert history[-1]["train_loss_pair"] < history[0]["train_loss_pair"]
    assert metrics["val_human_accuracy"] == 1.0 and metrics["val_human_pairs"] == 3 and metrics["val_pairs"] == 0
    rm = RewardModel.load(tmp_path)
    assert (
        rm.prefer(
            "My exam went badly.", "I am so sorry, that sounds really hard. Tell me more?", "Whatever. Not my problem."
        )
        > 0.5
    )
    [out] = rm.score(["x"], ["y"])
    assert set(out.uncertainty.values()) == {0.0}  # trained without an uncertainty method


def test_teacher_pairs_and_human_pairs_train_together(tiny_encoder, tmp_path):
    metrics = train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=small_cfg(),
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
        human_pairs=toy_human_pairs(),
    ).metrics
    assert metrics["val_pairs"] == 2 and metrics["val_human_pairs"] == 3
    assert metrics["val_pairwise_accuracy"] == 1.0 and metrics["val_human_accuracy"] == 1.0
    assert RewardModel.load(tmp_path).metadata.human_pairs == 10


def test_per_dimension_calibration_and_prefer_by_dimension(trained):
    out, metrics, _, _ = trained
    rm = RewardModel.load(out)
    dims = rm.metadata.calibration["dimensions"]
    assert set(dims) == set(DIMS) and all(
        d["temperature"] > 0 and d["pairs"] == 2 and 0 <= d["ece_noise_floor"] <= 1 for d in dims.values()
    )
    assert all(f"val_ece_dim_{d}" in metrics for d in DIMS)
    assert (out / "reliability_dimensions.png").stat().st_size > 1000
    kind, curt = "That is hard; what happened?", "ok"
    p = rm.prefer("I lost my job.", kind, curt, dimension="empathy")
    assert p + rm.prefer("I lost my job.", curt, kind, dimension="empathy") == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="unknown dimension 'humour'"):
        rm.prefer("I lost my job.", kind, curt, dimension="humour")


def test_decoder_backbone_with_lora_is_merged_and_pooled_at_the_last_token(tiny_student, tmp_path):
    cfg = small_cfg(
        epochs=2,
        backbone={
            "finetune": "lora",
            "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
        },
    )
    train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(tiny_student),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
    )
    rm = RewardModel.load(tmp_path)
    assert rm.metadata.backbone.model_dump() | {"source": None} == {
        "source": None,
        "kind": "decoder",
        "pooling": "last",
        "finetune": "lora",
        "depth": 2,
        "layers": None,
    }
    assert not any("lora" in k for k in rm.net.backbone.state_dict())  # merged: loading needs no PEFT
    a = rm.raw_scores(["hi", "hi"], ["short", "a much longer reply " * 5])["scalar"]
    b = np.array([rm.raw_scores(["hi"], [r])["scalar"][0] for r in ["short", "a much longer reply " * 5]])
    np.testing.assert_allclose(a, b, atol=1e-5)  # right padding does not move the pooled (last real) token


def test_frozen_backbone_trains_only_the_heads(tiny_encoder, tmp_path):
    from transformers import AutoModel

    cfg = small_cfg(epochs=2, backbone={"finetune": "frozen"})
    history = []
    train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
        on_epoch=lambda e, m: history.append(m),
    )
    before = AutoModel.from_pretrained(tiny_encoder).state_dict()
    after = RewardModel.load(tmp_path).net.backbone.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert history[-1]["train_mse_vector"] < history[0]["train_mse_vector"]


def length_labels(n_prompts: int = 6) -> pd.DataFrame:
    """The same sentence once or four times over: longer scores higher. Mean pooling all but averages the
    difference away; the length feature carries it."""
    rows = []
    for i in range(n_prompts):
        for reply, value in [("That sounds hard. " * 4, 0.6), ("That sounds hard. ", -0.6)]:
            rows.append(
                {
                    "prompt_id": f"p{i}",
                    "prompt": f"My week went badly, number {i}.",
                    "response": reply.strip(),
                    "vector": {d: value for d in DIMS},
                    "scalar": value,
                    "reward_intensity": 0.5,
                    "safety_score": 0.9,
                }
            )
    return pd.DataFrame(rows)


def test_length_feature_gives_the_heads_the_reply_length(tiny_encoder, tmp_path):
    from transformers import AutoModel

    net = RewardNet(AutoModel.from_pretrained(tiny_encoder), n_dims=3, length_feature=True)
    assert net.feature_size == net.backbone.config.hidden_size + 1 and net.scalar_head.in_features == net.feature_size
    ids = torch.ones((2, 6), dtype=torch.long)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    pooled = net.eval().pooled(ids, mask)
    torch.testing.assert_close(pooled[:, -1], torch.tensor([6.0, 2.0]).log())  # padding does not count

    cfg = small_cfg(
        epochs=12,
        early_stopping_patience=12,
        length_feature=True,
        backbone={"finetune": "frozen"},
        head_learning_rate=0.05,
    )
    train_reward_model(
        length_labels(),
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
    )
    rm = RewardModel.load(tmp_path)
    assert rm.metadata.length_feature is True and rm.net.length_feature
    prompts, replies = ["My week went badly, number 9."] * 2, ["That sounds hard. " * 4, "That sounds hard."]
    long_, short = rm.score(prompts, replies)
    assert long_.scalar > short.scalar
    assert (rm.net.scalar_head.weight[:, -1] > 0).all()  # every member learned "longer is better" from the feature
    assert RewardModel.load(tmp_path).score(prompts, replies) == [long_, short]


def test_rationale_auxiliary_target_is_learned(tiny_encoder, tmp_path):
    labels = toy_labels().assign(
        rationale=lambda f: np.where(f["scalar"] > 0, "Warm and curious about the person.", "Dismissive and cold.")
    )
    history = []
    train_reward_model(
        labels,
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=small_cfg(rationale_weight=1.0),
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
        on_epoch=lambda e, m: history.append(m),
    )
    assert history[-1]["train_loss_rationale"] < history[0]["train_loss_rationale"]
    assert RewardModel.load(tmp_path).metadata.losses["rationale_weight"] == 1.0


def test_pair_gaps_are_score_differences_and_prefer_is_symmetric(trained):
    rm = RewardModel.load(trained[0])
    prompts = ["I failed my driving test.", "My cat is ill.", "I got the job!"]
    a = ["That must sting. What happened?", "Oh no, I hope she recovers soon.", "Congratulations, you earned it!"]
    b = ["Try again.", "Cats get ill.", "Ok."]
    np.testing.assert_allclose(
        rm.pair_gaps(prompts, a, b),
        rm.raw_scores(prompts, a)["scalar"] - rm.raw_scores(prompts, b)["scalar"],
        atol=1e-6,
    )
    assert rm.prefer(prompts[0], a[0], b[0]) + rm.prefer(prompts[0], b[0], a[0]) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="got 3 prompts, 3 a and 2 b replies"):
        rm.pair_gaps(prompts, a, b[:2])


def test_backbone_setting_names_the_encoder_the_student_a_folder_or_a_hub_id(tiny_cfg, tmp_path):
    from hominem_pipeline.core.lm.models import (
        ModelNotAvailable,
        encoder_path,
        reward_backbone,
        student_path,
    )

    def with_path(value):
        return tiny_cfg.model_copy(
            update={
                "reward_model": tiny_cfg.reward_model.model_copy(
                    update={"backbone": tiny_cfg.reward_model.backbone.model_copy(update={"path": value})}
                )
            }
        )

    assert reward_backbone(tiny_cfg) == student_path(tiny_cfg)  # the default: the judge's own network
    assert reward_backbone(with_path(None)) == encoder_path(tiny_cfg)
    assert reward_backbone(with_path(str(encoder_path(tiny_cfg)))) == encoder_path(tiny_cfg)
    assert (
        reward_backbone(with_path("OpenAssistant/reward-model-deberta-v3-large-v2"))
        == "OpenAssistant/reward-model-deberta-v3-large-v2"
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotAvailable, match="has no config.json"):
        reward_backbone(with_path(str(tmp_path / "empty")))
    with pytest.raises(ModelNotAvailable, match="neither a folder"):
        reward_backbone(with_path("no/such/thing"))


def test_judge_frame_and_ridge_heads(tiny_student, tmp_path):
    """frame: judge reads the exchange as the local judge does; head_fit: ridge solves the heads in closed
    form on standardised frozen features of every prompt, the penalty chosen by cross-validation, and
    reports held-out figures on every prompt's pairs, each scored by heads fitted without it."""
    from sklearn.linear_model import Ridge

    cfg = small_cfg(
        max_length=96,
        head_fit="ridge",
        ridge_alphas=[0.1, 10.0],
        length_feature=True,
        uncertainty={"method": "none", "members": 1, "mc_samples": 2},
        backbone={"finetune": "frozen", "frame": "judge", "pooling": "last_mean"},
    )
    with pytest.raises(ValueError, match="needs the judge's system text"):
        train_reward_model(
            toy_labels(),
            dimensions=DIMS,
            sources=RewardSources(tiny_student),
            cfg=cfg,
            out_dir=tmp_path,
            seed=0,
            data_digest="x",
            date="2026-11-20",
        )
    history = []
    metrics = train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(tiny_student, judge_system="You are a fair judge."),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
        on_epoch=lambda e, m: history.append(m),
    ).metrics
    assert [h["ridge_alpha_tried"] for h in history] == [0.1, 10.0] and metrics["ridge_alpha"] in (0.1, 10.0)
    # out of fold over every prompt: each toy prompt gives one teacher pair (kind over curt)
    assert metrics["val_pairs"] == 6 and metrics["train_sequences"] == metrics["val_sequences"] == 12
    assert len(metrics["ridge_fold_alphas"]) == 5 and 0.0 <= metrics["val_pairwise_accuracy"] <= 1.0
    rm = RewardModel.load(tmp_path)
    assert rm.metadata.frame["kind"] == "judge" and rm.metadata.head_fit == "ridge"
    assert rm.net.feature_size == 2 * 32 + 1  # last token and mean of a 32-wide model, then the length
    # the frame's head, encoded once per batch when scoring: the tokens every framed input starts with
    [first, second] = rm.encode(["Is it hard?", "Why?"], ["Yes, a bit.", "Because."])
    n = len(rm.net.shared_prefix)
    assert n > 0 and rm.net.shared_prefix.tolist() == first[:n] == second[:n] and first[n:] != second[n:]

    text = rm.tokenizer.decode(rm.encode(["Is it hard?"], ["Yes, a bit."])[0])
    assert "You are a fair judge." in text and text.endswith(
        "Conversation to judge:\nUser: Is it hard?\nAssistant: Yes, a bit.\n"
    )
    [cut] = rm.encode(["start " + "filler " * 200 + "LAST QUESTION?"], ["FIRST WORDS " + "more " * 200])
    cut_text = rm.tokenizer.decode(cut)
    assert len(cut) <= 96 and "LAST QUESTION?\nAssistant: FIRST WORDS" in cut_text and cut_text.endswith("\n")

    # Each dimension's head is sklearn's ridge solution of atanh(its label) on the standardised features of
    # every labeled reply (one member: every row weighs 1), at the chosen penalty; the scalar is the
    # saved combination of the vector (reward.combination: no people's score here).
    labels = toy_labels()
    data = TrainingSet.build(rm._encode, labels, None, DIMS, cfg)
    with torch.inference_mode():
        z = ((rm.net.pooled(*pad_batch(data.encoded, 0)) - rm.net.feature_mean) / rm.net.feature_std).numpy()
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-4)  # standardised on all of them
    ref = Ridge(alpha=metrics["ridge_alpha"]).fit(z, np.arctanh(np.array([v[DIMS[0]] for v in labels["vector"]])))
    raw = rm.raw_scores(list(labels["prompt"]), list(labels["response"]))
    np.testing.assert_allclose(np.arctanh(raw["vector"][:, 0]), ref.predict(z), atol=1e-3)
    combo = rm.metadata.scalar
    assert combo is not None and combo.people == 0.0 and min(combo.weights.values()) >= 0.0
    expected = np.tanh(raw["vector"] @ np.array([combo.weights[d] for d in DIMS]) + combo.intercept)
    np.testing.assert_allclose(raw["scalar"], expected, atol=1e-5)
    assert (
        pairwise_accuracy(np.array([[2 * i, 2 * i + 1] for i in range(6)]), raw["scalar"]) == 1.0
    )  # kind over curt on every prompt
    np.testing.assert_array_equal(
        RewardModel.load(tmp_path).raw_scores(list(labels["prompt"]), list(labels["response"]))["scalar"],
        raw["scalar"],
    )


def test_judge_question_frame_ends_where_the_judge_rates(tiny_student, tmp_path):
    """frame: judge_question follows the exchange with the judge's overall question, in the words and
    chat turn the local judge asks it, so the last token is the one before the judge's rating; the
    saved frame keeps the question, and the stage reports the ECE a calibrated model would read."""
    from hominem_pipeline.core.lm.generation import chat_text
    from hominem_pipeline.core.teacher.base import rubric_suffix

    cfg = small_cfg(
        max_length=96,
        head_fit="ridge",
        ridge_alphas=[1.0],
        uncertainty={"method": "none", "members": 1, "mc_samples": 2},
        backbone={"finetune": "frozen", "frame": "judge_question", "pooling": "last_mean"},
    )
    with pytest.raises(ValueError, match="judge_question needs the judge's system text and its overall question"):
        train_reward_model(
            toy_labels(),
            dimensions=DIMS,
            sources=RewardSources(tiny_student, judge_system="You are a fair judge."),
            cfg=cfg,
            out_dir=tmp_path,
            seed=0,
            data_digest="x",
            date="2026-11-20",
        )
    metrics = train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(
            tiny_student, judge_system="You are a fair judge.", judge_question="Overall, how good is it?"
        ),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
    ).metrics
    assert 0.0 < metrics["val_ece_noise_floor"] < 1.0  # six pairs: a floor far above any ECE target
    rm = RewardModel.load(tmp_path)
    assert rm.metadata.frame["kind"] == "judge_question"
    tail = chat_text(rm.tokenizer, "\x00", "You are a fair judge.").split("\x00")[1]
    text = rm.tokenizer.decode(rm.encode(["Is it hard?"], ["Yes, a bit."])[0])
    assert text.endswith(
        "Conversation to judge:\nUser: Is it hard?\nAssistant: Yes, a bit.\n"
        + rubric_suffix("Overall, how good is it?", tail)
    )
    assert rubric_suffix("Overall, how good is it?", tail).endswith("Rating: ") and tail in text
    # a long exchange is cut so that the question stays whole
    [cut] = rm.encode(["start " + "filler " * 200 + "LAST QUESTION?"], ["FIRST WORDS " + "more " * 200])
    assert len(cut) <= 96 and rm.tokenizer.decode(cut).endswith(
        "Question: Overall, how good is it?" + tail + "Rating: "
    )


def test_ridge_held_out_scores_come_from_heads_that_never_saw_the_prompt():
    """ridge_out_of_fold: each row is predicted by a ridge fit on the other folds' prompts only,
    standardised on them, at the penalty chosen inside them."""
    from sklearn.linear_model import Ridge

    from hominem_pipeline.core.reward.ridge import LabelFit, prompt_folds, ridge_out_of_fold

    rng = np.random.default_rng(0)
    n, groups = 60, np.repeat(np.arange(15), 4)
    features = torch.tensor(rng.normal(size=(n, 6)) * [1, 2, 3, 1, 1, 5] + 3, dtype=torch.float32)
    scalar = np.tanh(features[:, 0].numpy() - 3 + rng.normal(0, 0.1, n))
    targets = {
        "vector": torch.tensor(np.stack([scalar, -scalar], 1), dtype=torch.float32),
        "scalar": torch.tensor(scalar, dtype=torch.float32),
        "reward_intensity": torch.full((n,), 0.5),
        "safety_score": torch.full((n,), 0.9),
    }
    weights = torch.ones(5, dtype=torch.float64)
    held, alphas, none = ridge_out_of_fold(
        LabelFit(features, targets, np.arange(n), groups, [0.1, 1.0, 100.0], weights, seed=3)
    )
    fold = prompt_folds(groups, 5, 3)
    assert none is None  # no human pairs
    assert held.shape == (n, 5) and len(alphas) == 5
    for k in range(5):
        fit = features.numpy()[fold != k].astype(np.float64)
        mean, std = fit.mean(0), fit.std(0)
        ref = Ridge(alpha=alphas[k]).fit((fit - mean) / std, np.arctanh(np.clip(scalar[fold != k], -0.995, 0.995)))
        expected = np.tanh(ref.predict((features.numpy()[fold == k] - mean) / std))
        np.testing.assert_allclose(held[fold == k, 2].numpy(), expected, atol=1e-4)
    assert np.corrcoef(held[:, 2].numpy(), scalar)[0, 1] > 0.9  # and they generalise: the signal is linear
    with pytest.raises(ValueError, match="at least 2 prompts"):
        ridge_out_of_fold(
            LabelFit(
                features[:4],
                {k: v[:4] for k, v in targets.items()},
                np.arange(4),
                np.zeros(4, np.int64),
                [1.0],
                weights,
                seed=0,
            )
        )


def test_peoples_pairs_pull_the_scalar_from_the_judges_fit_and_win_where_they_disagree():
    """The scalar starts from the labels' ridge solution and moves to fit the pairs (checked against least
    squares on the stacked rows); pairs that order replies against the judge's labels are followed, in
    and out of fold, and the other heads stay the judge's."""
    from hominem_pipeline.core.reward.ridge import (
        PAIR_MARGIN,
        LabelFit,
        feature_stats,
        pair_rows,
        ridge_design,
        ridge_out_of_fold,
        ridge_solve,
    )

    rng = np.random.default_rng(1)
    n_labeled, n_human = 80, 60
    features = torch.tensor(rng.normal(size=(n_labeled + 2 * n_human, 4)), dtype=torch.float32)
    judge = np.tanh(
        0.8 * features[:n_labeled, 0].numpy() + 0.2 * features[:n_labeled, 1].numpy()
    )  # the judge likes feature 0
    targets = {
        "vector": torch.tensor(np.stack([judge, judge], 1), dtype=torch.float32),
        "scalar": torch.tensor(judge, dtype=torch.float32),
        "reward_intensity": torch.full((n_labeled,), 0.5),
        "safety_score": torch.full((n_labeled,), 0.9),
    }
    # people prefer the reply with more of feature 1, even when it has less of feature 0
    a, b = n_labeled + 2 * np.arange(n_human), n_labeled + 2 * np.arange(n_human) + 1
    more_f1 = features[a, 1] > features[b, 1]
    pairs = np.stack([np.where(more_f1, a, b), np.where(more_f1, b, a)], 1)
    against_judge = (features[pairs[:, 0], 0] < features[pairs[:, 1], 0]).numpy()
    assert against_judge.sum() > 15
    labeled = np.arange(n_labeled)
    mean, std = feature_stats(features[:n_labeled])
    x, y = (
        ridge_design(features, labeled, mean, std),
        torch.atanh(targets["scalar"].double().clamp(-0.995, 0.995)).unsqueeze(1).repeat(1, 5),
    )
    w, pw = torch.ones(n_labeled, dtype=torch.float64), torch.full((n_human,), 2.0, dtype=torch.float64)
    d = pair_rows(features, pairs, mean, std)
    coef = ridge_solve(x, y, w, 1.0, d, pw, column=2)
    judge_coef = ridge_solve(x, y, w, 1.0)
    # least squares on the stacked rows: the pairs, then the pull towards the labels' solution (alpha = 1)
    rows = torch.cat([d * pw.sqrt().unsqueeze(1), torch.eye(5, dtype=torch.float64)])
    target = torch.cat([PAIR_MARGIN * pw.sqrt(), judge_coef[:, 2]])
    np.testing.assert_allclose(
        coef[:, 2].numpy(), torch.linalg.lstsq(rows, target.unsqueeze(1)).solution[:, 0].numpy(), atol=1e-8
    )
    assert coef[4, 2] == pytest.approx(float(judge_coef[4, 2]))  # the intercept, which no pair sees
    np.testing.assert_allclose(
        coef[:, 0].numpy(), ridge_solve(x, y, w, 1.0)[:, 0].numpy()
    )  # the other outputs are the labels' alone
    scores = (ridge_design(features, np.arange(len(features)), mean, std) @ coef[:, 2]).numpy()
    assert (scores[pairs[:, 0]] > scores[pairs[:, 1]])[
        against_judge
    ].mean() > 0.9  # the person wins where the judge disagrees
    judge_only = (ridge_design(features, np.arange(len(features)), mean, std) @ judge_coef[:, 2]).numpy()
    assert (judge_only[pairs[:, 0]] > judge_only[pairs[:, 1]])[against_judge].mean() < 0.3
    groups = np.repeat(np.arange(20), 4)
    _, _, held = ridge_out_of_fold(
        LabelFit(features, targets, labeled, groups, [1.0], torch.ones(5, dtype=torch.float64), seed=0),
        human=(pairs, pw.numpy(), 100 + np.arange(n_human)),
    )
    assert (
        held.shape == (n_human, 2) and (held[:, 0] > held[:, 1]).mean() > 0.85
    )  # held-out pairs: people's taste generalises


def test_ridge_training_chooses_how_far_peoples_pairs_pull_by_their_out_of_fold_agreement(tiny_student, tmp_path):
    """scalar: free: the scalar is its own head, pulled by people's pairs as far as their out-of-fold agreement
    says."""
    from hominem_pipeline.core.reward.ridge import PAIR_PULLS

    cfg = small_cfg(
        max_length=96,
        head_fit="ridge",
        scalar="free",
        ridge_alphas=[1.0, 100.0],
        uncertainty={"method": "none", "members": 1, "mc_samples": 2},
        backbone={"finetune": "frozen", "frame": "judge", "pooling": "last_mean"},
    )
    human = pd.DataFrame(
        {
            "prompt": [f"Question {i}?" for i in range(10)],
            "chosen": ["Here is a careful answer."] * 10,
            "rejected": ["no"] * 10,
            "weight": [1.5] * 10,
            "source": ["feedback:choice"] * 10,
        }
    )
    metrics = train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(tiny_student, judge_system="You are a fair judge."),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
        human_pairs=human,
    ).metrics
    assert metrics["human_pull"] in PAIR_PULLS and set(PAIR_PULLS) == {
        float(k.split("_")[2]) for k in metrics if k.startswith("human_pull_")
    }
    best = max(metrics[f"human_pull_{k:g}_accuracy"] for k in PAIR_PULLS)
    assert (
        metrics[f"human_pull_{metrics['human_pull']:g}_accuracy"] == best == metrics["val_human_accuracy"]
    )  # held out: the chosen pull's own figure
    assert metrics["val_human_pairs"] == 10 and metrics["train_sequences"] == 12 + 20


def test_a_shared_frame_prefix_runs_once_and_pools_as_the_whole_sequence(tiny_student):
    """A causal decoder reading the judge frame: at inference the frame's head runs once per batch and the
    rows continue from its KV cache; the pooled features equal those of whole-sequence passes."""
    from hominem_pipeline.core.reward.encoding import (
        frame_prefix,
        judge_frame,
        make_encoder,
        pad_id,
    )
    from hominem_pipeline.core.reward.network import load_backbone

    backbone, tok = load_backbone(tiny_student)
    frame = judge_frame(tok, "You are a fair judge.")
    net = RewardNet(backbone, len(DIMS), pooling="last_mean", length_feature=True).eval()
    encode = make_encoder(tok, frame, 96)
    ids, mask = pad_batch(
        [
            encode(p, r)
            for p, r in [("Hi", "Hello there, how are you today?"), ("I lost my job.", "That is hard."), ("?", "ok")]
        ],
        pad_id(tok),
    )
    with torch.inference_mode():
        whole = net.pooled(ids, mask)
        net.shared_prefix = frame_prefix(tok, frame, "decoder")
        rest, prefix = net.states(ids, mask)
        cached = net.pooled(ids, mask)
        assert net.states(ids[:, 1:], mask[:, 1:])[1] is None  # rows that do not start with it: whole passes
        n = len(net.shared_prefix)
        short, short_mask = pad_batch([ids[0].tolist(), ids[0, :n].tolist()], pad_id(tok))
        assert (
            net.states(short, short_mask)[1] is None
        )  # a row that ends with it: whole passes (its last token is in the prefix)
    assert (
        prefix.shape == (len(net.shared_prefix), backbone.config.hidden_size)
        and rest.shape[1] == ids.shape[1] - len(net.shared_prefix) > 0
    )
    torch.testing.assert_close(cached, whole, atol=1e-4, rtol=1e-4)
    assert net.states(ids, mask)[1] is None  # with gradients (training) every row runs whole
    assert frame_prefix(tok, frame, "encoder") is None and frame_prefix(tok, None, "decoder") is None


def test_depth_keeps_the_first_layers_and_the_cut_model_saves_as_one(tiny_student, tmp_path):
    """backbone.depth N: the heads read the state after the first N layers; the saved backbone has N layers,
    so it loads and scores as trained; a depth the backbone lacks is refused with its size."""
    from transformers import AutoModel

    cfg = small_cfg(
        max_length=96,
        head_fit="ridge",
        ridge_alphas=[1.0],
        uncertainty={"method": "none", "members": 1, "mc_samples": 2},
        backbone={"finetune": "frozen", "frame": "judge", "pooling": "last", "depth": 1},
    )
    labels = toy_labels()
    train_reward_model(
        labels,
        dimensions=DIMS,
        sources=RewardSources(tiny_student, judge_system="You are a fair judge."),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
    )
    rm = RewardModel.load(tmp_path)
    assert rm.metadata.backbone.depth == 1 and len(rm.net.backbone.layers) == 1

    full = AutoModel.from_pretrained(tiny_student).eval()
    [ids] = rm.encode(["Is it hard?"], ["Yes, a bit."])
    with torch.inference_mode():
        after_one = full(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[1]
        cut = rm.net.pooled(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))
    # the cut model's output is layer 1's state through the final norm
    torch.testing.assert_close(cut[0, :32], full.norm(after_one)[0, -1])  # then the length feature
    assert RewardModel.load(tmp_path).score(list(labels["prompt"]), list(labels["response"])) == rm.score(
        list(labels["prompt"]), list(labels["response"])
    )

    with pytest.raises(ValueError, match=r"depth 5 is more than the backbone's 2 layers; use at most 2"):
        train_reward_model(
            labels,
            dimensions=DIMS,
            sources=RewardSources(tiny_student),
            cfg=small_cfg(backbone={"finetune": "frozen", "depth": 5}),
            out_dir=tmp_path / "x",
            seed=0,
            data_digest="x",
            date="2026-11-20",
        )


def test_layers_pool_several_layers_side_by_side(tiny_encoder, tmp_path):
    """backbone.layers [1, 2]: the heads read the mean of each layer's states, side by side; the saved model
    loads and scores as trained; layers the backbone lacks are refused with its depth and the fix."""
    from transformers import AutoModel

    cfg = small_cfg(
        backbone={"finetune": "frozen", "layers": [1, 2]},
        uncertainty={"method": "none", "members": 1, "mc_samples": 2},
        length_feature=False,
    )
    labels = toy_labels()
    train_reward_model(
        labels,
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
    )
    rm = RewardModel.load(tmp_path)
    hidden = rm.net.backbone.config.hidden_size
    assert rm.metadata.backbone.layers == [1, 2] and rm.net.feature_size == 2 * hidden
    [ids] = rm.encode(["Is it hard?"], ["Yes, a bit."])
    with torch.inference_mode():
        states = (
            AutoModel.from_pretrained(tiny_encoder)
            .eval()(input_ids=torch.tensor([ids]), output_hidden_states=True)
            .hidden_states
        )
        pooled = rm.net.pooled(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))
    torch.testing.assert_close(pooled[0], torch.cat([states[1][0].mean(0), states[2][0].mean(0)]))
    assert RewardModel.load(tmp_path).score(list(labels["prompt"]), list(labels["response"])) == rm.score(
        list(labels["prompt"]), list(labels["response"])
    )

    for bad in ([0, 1], [3], [1, 1]):
        with pytest.raises(ValueError, match=re.escape(f"layers {bad}: name distinct layers from 1 to 2")):
            train_reward_model(
                labels,
                dimensions=DIMS,
                sources=RewardSources(tiny_encoder),
                cfg=small_cfg(backbone={"finetune": "frozen", "layers": bad}),
                out_dir=tmp_path / "x",
                seed=0,
                data_digest="x",
                date="2026-11-20",
            )


def test_several_layers_and_the_cached_frame_prefix_agree(tiny_student):
    """With layers set, a causal decoder's cached judge-frame head pools as whole-sequence passes do."""
    from hominem_pipeline.core.reward.encoding import (
        frame_prefix,
        judge_frame,
        make_encoder,
        pad_id,
    )
    from hominem_pipeline.core.reward.network import load_backbone

    backbone, tok = load_backbone(tiny_student)
    frame = judge_frame(tok, "You are a fair judge.")
    net = RewardNet(backbone, len(DIMS), pooling="last_mean", layers=[1, 2]).eval()
    encode = make_encoder(tok, frame, 96)
    ids, mask = pad_batch(
        [encode(p, r) for p, r in [("Hi", "Hello there, how are you today?"), ("I lost my job.", "That is hard.")]],
        pad_id(tok),
    )
    with torch.inference_mode():
        whole = net.pooled(ids, mask)
        net.shared_prefix = frame_prefix(tok, frame, "decoder")
        rest, prefix = net.states(ids, mask)
        assert prefix.shape == (
            len(net.shared_prefix),
            2 * backbone.config.hidden_size,
        )  # the prefix's states of layers 1 and 2, side by side
        assert rest.shape == (2, ids.shape[1] - len(net.shared_prefix), 2 * backbone.config.hidden_size)
        cached = net.pooled(ids, mask)
    assert whole.shape == (2, 2 * 2 * backbone.config.hidden_size)
    torch.testing.assert_close(cached, whole, atol=1e-4, rtol=1e-4)


def test_dcs_sums_gradients_over_chunks_and_can_stop_at_the_top_blocks(trained):
    from hominem_pipeline.core.evaluation.health import dimensional_coherence
    from hominem_pipeline.core.reward.network import layer_stack, top_parameters

    rm = RewardModel.load(trained[0])
    backbone = rm.net.backbone
    _, stack = layer_stack(backbone)
    top = {id(p) for p in top_parameters(backbone, 1)}
    assert {id(p) for p in stack[-1].parameters()} <= top
    assert not top & {id(p) for p in stack[0].parameters()}
    assert not top & {id(p) for n, p in backbone.named_parameters() if "embed" in n}
    assert len(top_parameters(backbone, None)) == len(list(backbone.parameters()))

    before = [p.requires_grad for p in backbone.parameters()]
    prompts = ["I lost my job.", "My friend is angry with me.", "I failed an exam."]
    replies = ["That is hard; what happened?", "Whatever.", "I am sorry, tell me more?"]
    for layers in (None, 1):
        whole = dimensional_coherence(rm, prompts, replies, layers, chunk=len(replies))
        pieces = dimensional_coherence(rm, prompts, replies, layers, chunk=1)
        assert pieces.details["mean_gda"] == pytest.approx(whole.details["mean_gda"], abs=1e-5)
        assert 0.0 <= whole.value <= 1.0
    assert [p.requires_grad for p in backbone.parameters()] == before  # the model is left as it was


def test_pooled_features_scored_by_the_heads_match_the_models_own_scores(trained):
    rm = RewardModel.load(trained[0])
    prompts, replies = ["I lost my job."] * 3, ["That is hard; what happened?", "ok", "Whatever. Not my problem."]
    assert np.allclose(
        rm.scalar_from_pooled(rm.pooled(prompts, replies)), rm.raw_scores(prompts, replies)["scalar"], atol=1e-5
    )


def test_guard_columns_are_the_students_reply_log_probabilities(tiny_student):
    """reply_logp is the mean log-probability of the reply's tokens given the prompt, as the full logits
    give it; prompt_gain subtracts the same without the prompt."""
    from hominem_pipeline.core.lm.models import load_student
    from hominem_pipeline.core.policy.sequences import encode, reply_logps
    from hominem_pipeline.core.reward.guards import GUARD_MAX_LENGTH, GuardScorer

    prompts, replies = (
        ["How was your weekend?", "Tell me about cats."],
        ["Quiet, thanks. And yours?", "Cats sleep a lot."],
    )
    columns = GuardScorer(["reply_logp", "prompt_gain"], tiny_student)(prompts, replies)
    model, tok = load_student(tiny_student)
    s, c = reply_logps(
        model, [encode(tok, p, r, GUARD_MAX_LENGTH) for p, r in zip(prompts, replies)], tok.pad_token_id, 2
    )
    s0, c0 = reply_logps(model, [encode(tok, "", r, GUARD_MAX_LENGTH) for r in replies], tok.pad_token_id, 2)
    assert columns.shape == (2, 2)
    assert torch.allclose(columns[:, 0].double(), s / c, atol=1e-4) and torch.allclose(
        columns[:, 1].double(), s / c - s0 / c0, atol=1e-4
    )
    assert GuardScorer(["prompt_gain"], tiny_student)(prompts, replies)[:, 0].tolist() == pytest.approx(
        columns[:, 1].tolist(), abs=1e-6
    )
    # an exchange scored before is not scored again, in any order and alongside new ones
    scorer, computed = GuardScorer(["reply_logp", "prompt_gain"], tiny_student), []
    compute = scorer._compute
    scorer._compute = lambda p, r: computed.append(list(r)) or compute(p, r)
    scorer(prompts, replies)
    again = scorer(prompts[::-1] + ["Hi"], replies[::-1] + ["Hello there."])
    assert computed == [replies, ["Hello there."]]
    assert torch.allclose(again[:2], columns.flip(0), atol=1e-5)


def test_a_guard_puts_gibberish_below_a_fluent_reply(tiny_student, tmp_path):
    """A student that has read plain sentences finds gibberish unlikely: a reward model whose heads read
    the guard columns learns from people's pairs that fluent beats gibberish, and orders an unseen pair so."""
    from hominem_pipeline.core.lm.models import load_student

    fluent = [
        "It was quiet, thanks.",
        "That sounds lovely.",
        "I am sorry to hear that.",
        "Thanks, that helps a lot.",
        "It was a good day.",
    ]
    model, tok = load_student(tiny_student)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = tok(fluent * 4, return_tensors="pt", padding=True)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    for _ in range(60):  # the tiny student learns how plain English goes
        loss = model(**batch, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    reader = tmp_path / "reader"
    model.save_pretrained(reader)
    tok.save_pretrained(reader)
    gibberish = ["zq xv blorp wug", "asd qwe zxc vbn", "mlk poi uyt rew", "gnap fleeb zib wump", "qqq zzz xxx vvv"]
    people = pd.DataFrame(
        {
            "prompt": ["How was it?", "Any news?", "How are you?", "What happened?", "Tell me."],
            "chosen": fluent,
            "rejected": gibberish,
        }
    )
    cfg = small_cfg(guards=["reply_logp"], backbone={"path": None, "finetune": "frozen"}, head_fit="ridge")
    out = tmp_path / "rm"
    train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(reader, guard_student=reader),
        cfg=cfg,
        out_dir=out,
        seed=0,
        data_digest="g",
        date="2026-11-20",
        human_pairs=people,
    )
    rm = RewardModel.load(out)
    assert rm.metadata.guards.names == ["reply_logp"] and rm.net.guards == 1
    logp = rm.guard_columns(["How is it going?"] * 2, ["It was a good day, thanks.", "wug zq blorp xv"])[:, 0]
    assert logp[0] > logp[1]  # the guard itself: the fluent reply is the likelier
    assert rm.prefer("How is it going?", "It was a good day, thanks.", "wug zq blorp xv") > 0.5


def test_the_peoples_score_learns_pairs_out_of_fold_and_saves_what_it_scores(tmp_path):
    """People prefer replies whose states lie near one place (a taste no linear score can express): the
    kernel score finds it, the values of a pair's replies come from a fit that never saw that pair's
    prompt, and a saved score reads what the fitted one does."""
    from hominem_pipeline.core.reward.people import PairSet, PeopleScore

    rng = np.random.default_rng(0)
    states = rng.normal(size=(400, 12))
    centre = rng.normal(size=12) * 0.1
    taste = lambda x: -((x - centre) ** 2).sum(1)  # noqa: E731
    pairs = np.array(
        [
            (a, b) if taste(states[[a]])[0] > taste(states[[b]])[0] else (b, a)
            for a, b in rng.permutation(400).reshape(200, 2)
        ]
    )
    score, values = PeopleScore.fit(
        states, PairSet(pairs, np.ones(200), np.arange(200)), seed=0, alphas=[0.1, 1.0, 1e6]
    )
    assert score.alpha < 1e6 and score.agreement > 0.8 and score.pairs == 200
    new = rng.normal(size=(100, 12))
    assert np.corrcoef(score(new), taste(new))[0, 1] > 0.8
    linear = np.linalg.lstsq(np.c_[states, np.ones(400)], taste(states), rcond=None)[
        0
    ]  # fitted on the taste itself, not on pairs
    assert np.corrcoef(np.c_[new, np.ones(100)] @ linear, taste(new))[0, 1] < 0.3  # a linear score cannot express it
    # out of fold: a pair's replies read by the fit without them differ from the full fit's reading
    assert not np.allclose(values[pairs.ravel()], score(states[pairs.ravel()]))
    assert (values[pairs[:, 0]] > values[pairs[:, 1]]).mean() == pytest.approx(score.agreement)
    score.save(tmp_path)
    loaded = PeopleScore.load(tmp_path, score.alpha, score.agreement, score.pairs)
    np.testing.assert_array_equal(loaded(new), score(new))
    others = np.setdiff1d(np.arange(400), pairs.ravel())
    np.testing.assert_array_equal(
        values[others], loaded(states[others])
    )  # what the heads read for any other text is the saved score's


def test_the_safety_score_is_grounded_in_the_pairs_people_chose_by_harm(tiny_student, tiny_encoder, tmp_path):
    """People's pairs from a file marked `harm` (the rejected reply the more harmful) re-weigh the safety score on
    the people's score, out of fold; its level stays the labels'. With `safety: judge` it is the judge's alone."""
    safe = ["I can't help with hurting anyone, but I can help you stay safe.", "Please don't; let's find a safe way."]
    harmful = ["Sure, here is how to hurt them badly.", "Do it, here are the steps to cause harm."]
    rows = [
        {
            "prompt": f"How do I get back at person {i}?",
            "chosen": safe[i % 2],
            "rejected": harmful[i % 2],
            "heads": True,
            "harm": True,
        }
        for i in range(24)
    ]
    people = {"encoder": "encoder", "max_length": 64}
    trained = {}
    for safety in ("people", "judge"):
        cfg = people_cfg(
            people_score=people,
            safety=safety,
        )
        sources = RewardSources(
            tiny_student, judge_system="J.", people_encoder=tiny_encoder, feature_cache=tmp_path / "c"
        )
        metrics = train_reward_model(
            toy_labels(),
            pd.DataFrame(rows),
            sources=sources,
            cfg=cfg,
            dimensions=DIMS,
            out_dir=tmp_path / safety,
            seed=0,
            data_digest="p",
            date="2026-11-20",
        ).metrics
        trained[safety] = (RewardModel.load(tmp_path / safety), metrics)
    grounded, metrics = trained["people"]
    assert metrics["safety_harm_pairs"] == 24 and metrics["safety_people_weight"] > 0
    assert metrics["safety_harm_agreement"] >= metrics["safety_harm_agreement_judge"]
    assert "safety_people_weight" not in trained["judge"][1]
    prompt = ["How do I get back at my neighbour?"] * 2
    replies = [
        "I can't help with hurting anyone, but I can help you stay safe.",
        "Sure, here is how to hurt them badly.",
    ]
    out = grounded.raw_scores(prompt, replies)["safety_score"]
    assert out[0] > out[1]  # the safer reply, as people chose
    labels = toy_labels()
    level = grounded.raw_scores(list(labels["prompt"]), list(labels["response"]))["safety_score"]
    judge = trained["judge"][0].raw_scores(list(labels["prompt"]), list(labels["response"]))["safety_score"]
    assert abs(np.log(level / (1 - level)).mean() - np.log(judge / (1 - judge)).mean()) < 0.05  # the labels' level


def test_invariance_pairs_join_the_peoples_score_without_counting_as_peoples_pairs(
    tiny_student, tiny_encoder, tmp_path, caplog
):
    """With `people_score.invariance` on, the score also learns degenerate replies made from people's chosen
    replies (below them) and rewrites (equal to them); its agreement and pair count are still people's own."""
    from hominem_pipeline.core.reward.invariance import DEGENERATE, invariance_pairs

    kind = ["Thank you, that is very kind of you and it helps a lot.", "That is kind, thank you so much for it."]
    rows = [
        {
            "prompt": f"Could you help me with thing {i}?",
            "chosen": kind[i % 2],
            "rejected": "Go away now.",
            "heads": i < 12,
        }
        for i in range(24)
    ]
    cfg = people_cfg(
        people_score={
            "encoder": "encoder",
            "max_length": 64,
            "invariance": {"sources": 8, "degenerate_weight": 1.0, "rewrite_weight": 1.0},
        },
    )
    sources = RewardSources(tiny_student, judge_system="J.", people_encoder=tiny_encoder, feature_cache=tmp_path / "c")
    with caplog.at_level(logging.INFO):
        metrics = train_reward_model(
            toy_labels(),
            pd.DataFrame(rows),
            sources=sources,
            cfg=cfg,
            dimensions=DIMS,
            out_dir=tmp_path / "rm",
            seed=0,
            data_digest="p",
            date="2026-11-20",
        ).metrics
    assert metrics["people_pairs"] == 24 and re.search(r"invariance pairs from \d+ chosen replies", caplog.text)
    rm = RewardModel.load(tmp_path / "rm")
    made = invariance_pairs([r["prompt"] for r in rows], [r["chosen"] for r in rows], range(24), 8)
    degenerate = [i for i, k in enumerate(made.kinds) if k in DEGENERATE]
    source = [(rows[made.pairs[i, 0]]["prompt"], rows[made.pairs[i, 0]]["chosen"]) for i in degenerate]
    sensible = rm.people_column([p for p, _ in source], [r for _, r in source])
    worse = rm.people_column(
        [made.texts[made.pairs[i, 1]][0] for i in degenerate], [made.texts[made.pairs[i, 1]][1] for i in degenerate]
    )
    assert (sensible > worse).mean() > 0.8  # what it was taught to rank below the sensible reply


def test_pairs_for_the_peoples_score_alone_move_the_scalar_through_it(tiny_student, tiny_encoder, tmp_path):
    """People's pairs marked for the people's score only are read by the encoder, not by the heads; the
    score joins the scalar with a weight fitted on the heads' pairs out of fold, and the saved model
    scores a new pair the way the pairs chose."""
    kind = [
        "Thank you, that is very kind of you.",
        "Thank you kindly, that helps.",
        "That is kind, thank you so much.",
    ]
    rude = ["Go away now.", "Leave me alone, go away.", "Go away, stop asking."]
    rows = [
        {
            "prompt": f"Could you help me with thing {i}?",
            "chosen": kind[i % 3],
            "rejected": rude[i % 3],
            "weight": 1.0,
            "heads": i < 12,
            "source": "shipped:test",
        }
        for i in range(48)
    ]
    cfg = people_cfg(
        people_score={"encoder": "encoder", "max_length": 64},
    )
    out = tmp_path / "rm"
    metrics = train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(
            tiny_student,
            judge_system="You are a fair judge.",
            people_encoder=tiny_encoder,
            feature_cache=tmp_path / "cache",
        ),
        cfg=cfg,
        out_dir=out,
        seed=0,
        data_digest="p",
        date="2026-11-20",
        human_pairs=pd.DataFrame(rows),
    ).metrics
    assert (
        metrics["val_human_pairs"] == 12
        and metrics["people_pairs"] == 48
        and metrics["people_weight"] > 0
        and metrics["people_agreement"] > 0.9
    )
    rm = RewardModel.load(out)
    assert rm.metadata.people.pairs == 48 and rm.net.guards == 1  # the score is the one column beside the backbone
    prompts, a, b = ["Can you help me move?"] * 2, "Thank you, that is kind.", "Go away, leave me alone."
    column = rm.people_column(prompts, [a, b])
    assert (
        column[0] > column[1] and rm.prefer(prompts[0], a, b) > 0.5
    )  # the score learned the pairs' taste, and the scalar reads it
    # what the heads read is the backbone's state and the score, and scoring through them is the model's own
    pooled = rm.pooled(prompts, [a, b])
    assert torch.allclose(pooled[:, -1], torch.from_numpy(column).float(), atol=1e-5)
    np.testing.assert_allclose(rm.scalar_from_pooled(pooled), rm.raw_scores(prompts, [a, b])["scalar"], atol=1e-5)
    # the encoder's states were kept by content: a second model reads them from the cache
    train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(
            tiny_student,
            judge_system="You are a fair judge.",
            people_encoder=tiny_encoder,
            feature_cache=tmp_path / "cache",
        ),
        cfg=cfg,
        out_dir=tmp_path / "again",
        seed=0,
        data_digest="p",
        date="2026-11-20",
        human_pairs=pd.DataFrame(rows),
    )
    np.testing.assert_allclose(RewardModel.load(tmp_path / "again").people_column(prompts, [a, b]), column, atol=1e-5)


def test_tagged_pairs_pull_their_dimension_and_win_where_the_judge_inverts_it():
    """The judge's labels invert one dimension (it likes less of what people prefer on it); people's pairs
    tagged with that dimension pull its head until it orders them their way, in and out of fold; the
    other dimensions, which no pair is tagged with, stay the judge's."""
    from hominem_pipeline.core.reward.ridge import (
        LabelFit,
        dimension_pulls_out_of_fold,
        feature_stats,
        pair_rows,
        pull_dimensions,
        ridge_design,
        ridge_solve,
    )

    rng = np.random.default_rng(2)
    n_labeled, n_human = 80, 60
    features = torch.tensor(rng.normal(size=(n_labeled + 2 * n_human, 4)), dtype=torch.float32)
    f0 = features[:n_labeled, 0].numpy()
    vector = np.stack([np.tanh(-0.8 * f0), np.tanh(0.8 * f0)], 1)  # dimension 0 inverted by the judge, dimension 1 not
    targets = {
        "vector": torch.tensor(vector, dtype=torch.float32),
        "scalar": torch.tensor(np.tanh(0.8 * f0), dtype=torch.float32),
        "reward_intensity": torch.full((n_labeled,), 0.5),
        "safety_score": torch.full((n_labeled,), 0.9),
    }
    a, b = n_labeled + 2 * np.arange(n_human), n_labeled + 2 * np.arange(n_human) + 1
    more_f0 = (features[a, 0] > features[b, 0]).numpy()
    pairs = np.stack(
        [np.where(more_f0, a, b), np.where(more_f0, b, a)], 1
    )  # people: more of feature 0 is better on dimension 0
    tags = np.where(
        np.arange(n_human) < 40, 0, -1
    )  # 40 pairs tagged with dimension 0, 20 untagged (the scalar's alone)
    labeled = np.arange(n_labeled)
    mean, std = feature_stats(features[:n_labeled])
    x = ridge_design(features, labeled, mean, std)
    y = torch.cat(
        [torch.atanh(targets["vector"].double().clamp(-0.995, 0.995)), torch.zeros(n_labeled, 3, dtype=torch.float64)],
        1,
    )
    judge = ridge_solve(x, y, torch.ones(n_labeled, dtype=torch.float64), 1.0)
    d = pair_rows(features, pairs, mean, std)
    pulled = pull_dimensions(judge, d, torch.full((n_human,), 10.0, dtype=torch.float64), tags, 1.0)
    gaps = lambda coef, j: (d @ coef[:, j]).numpy()  # noqa: E731
    assert (gaps(judge, 0) > 0).mean() < 0.1 and (
        gaps(pulled, 0) > 0
    ).mean() > 0.95  # the person wins on the tagged dimension
    np.testing.assert_allclose(
        pulled[:, 1:].numpy(), judge[:, 1:].numpy()
    )  # untouched: dimension 1 and every other output
    untagged_only = pull_dimensions(
        judge, d, torch.full((n_human,), 10.0, dtype=torch.float64), np.full(n_human, -1), 1.0
    )
    np.testing.assert_allclose(untagged_only.numpy(), judge.numpy())  # untagged pairs never move a dimension
    fit = LabelFit(
        features, targets, labeled, np.repeat(np.arange(20), 4), [1.0], torch.ones(5, dtype=torch.float64), 0, 5
    )
    held = dimension_pulls_out_of_fold(fit, (pairs, np.ones(n_human), 100 + np.arange(n_human)), tags, (0.0, 10.0))
    assert np.isnan(held[10.0][tags < 0]).all()
    assert (held[0.0][tags == 0] > 0).mean() < 0.1 and (
        held[10.0][tags == 0] > 0
    ).mean() > 0.9  # out of fold: it generalises


def test_training_follows_tagged_peoples_pairs_on_the_dimension_the_judge_inverts(tiny_student, tmp_path):
    """A toy day whose judge scores the curt reply higher on empathy (and lower on everything else), and
    people's pairs tagged empathy that prefer the kind reply: the trained model's empathy prefers the kind
    reply on a new prompt, its curiosity (no tagged pairs) stays the judge's, and the figures say so."""
    from hominem_pipeline.core.reward.ridge import DIMENSION_PULLS

    labels = toy_labels(8)
    kind = labels["response"].str.startswith("I am so sorry")
    labels["vector"] = [
        {"empathy": -0.8 if k else 0.8, "curiosity": 0.8 if k else -0.8, "harm_avoidance": 0.5} for k in kind
    ]
    cfg = small_cfg(
        max_length=96,
        head_fit="ridge",
        ridge_alphas=[1.0, 100.0],
        uncertainty={"method": "none", "members": 1, "mc_samples": 2},
        backbone={"finetune": "frozen", "frame": "judge", "pooling": "last_mean"},
    )
    n = 12
    human = pd.DataFrame(
        {
            "prompt": [f"My plans fell through, time {i}." for i in range(n)],
            "chosen": ["I am so sorry, that sounds really hard. Tell me more?"] * n,
            "rejected": ["Whatever. Not my problem."] * n,
            "tag": ["empathy"] * (n - 2) + [None, None],
        }
    )
    metrics = train_reward_model(
        labels,
        dimensions=DIMS,
        sources=RewardSources(tiny_student, judge_system="You are a fair judge."),
        cfg=cfg,
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
        human_pairs=human,
    ).metrics
    assert metrics["dimension_pull"] in DIMENSION_PULLS and metrics["val_dimension_pairs"] == n - 2
    assert metrics["val_dimension_accuracy_judge_empathy"] == 0.0 and metrics["val_dimension_accuracy_empathy"] == 1.0
    model = RewardModel.load(tmp_path)
    # empathy's temperature is fitted on the judge's pairs and the tagged people's pairs, read out of fold
    assert model.metadata.calibration["dimensions"]["empathy"]["people_pairs"] == n - 2
    assert model.metadata.calibration["dimensions"]["curiosity"]["people_pairs"] == 0
    prompt = "My bike was stolen today."
    assert (
        model.prefer(
            prompt, "I am so sorry, that sounds really hard. Tell me more?", "Whatever. Not my problem.", "empathy"
        )
        > 0.5
    )
    assert (
        model.prefer(
            prompt, "I am so sorry, that sounds really hard. Tell me more?", "Whatever. Not my problem.", "curiosity"
        )
        > 0.5
    )
    # the scalar is the vector's combination (no people's score here), each weight >= 0: kind on the two
    # dimensions that tell the replies apart, kind overall
    [kind_out, curt_out] = model.score(
        [prompt] * 2, ["I am so sorry, that sounds really hard. Tell me more?", "Whatever. Not my problem."]
    )
    weights = model.metadata.scalar.weights
    assert (
        min(weights.values()) >= 0.0
        and weights["empathy"] + weights["curiosity"] > 0.0
        and metrics["scalar_weight_empathy"] == weights["empathy"]
    )
    assert kind_out.scalar > curt_out.scalar


def test_nudge_pairs_pull_their_dimension_and_leave_the_scalar_alone(tiny_student, tmp_path):
    """People's pairs about one dimension alone (a nudge against a sibling reply: `scalar` false) pull that
    dimension's head as tagged pairs do, while the scalar is exactly the one fitted without them: they never
    say which reply is better overall. An untagged one is refused, naming the fix."""
    labels = toy_labels(8)
    kind = labels["response"].str.startswith("I am so sorry")
    labels["vector"] = [
        {"empathy": -0.8 if k else 0.8, "curiosity": 0.8 if k else -0.8, "harm_avoidance": 0.5} for k in kind
    ]
    cfg = small_cfg(
        max_length=96,
        head_fit="ridge",
        ridge_alphas=[1.0, 100.0],
        uncertainty={"method": "none", "members": 1, "mc_samples": 2},
        backbone={"finetune": "frozen", "frame": "judge", "pooling": "last_mean"},
        scalar="free",
    )
    n = 12
    nudges = pd.DataFrame(
        {
            "prompt": [f"My plans fell through, time {i}." for i in range(n)],
            "chosen": ["I am so sorry, that sounds really hard. Tell me more?"] * n,
            "rejected": ["Whatever. Not my problem."] * n,
            "tag": ["empathy"] * n,
            "scalar": [False] * n,
            "source": ["feedback:nudge"] * n,
            "weight": [0.5] * n,
        }
    )
    common = dict(
        dimensions=DIMS,
        sources=RewardSources(tiny_student, judge_system="You are a fair judge."),
        cfg=cfg,
        seed=0,
        data_digest="x",
        date="2026-11-20",
    )
    judge_only = train_reward_model(labels, out_dir=tmp_path / "judge", **common).metrics
    nudged = train_reward_model(labels, out_dir=tmp_path / "nudged", human_pairs=nudges, **common).metrics
    assert nudged["val_dimension_accuracy_judge_empathy"] == 0.0 and nudged["val_dimension_accuracy_empathy"] == 1.0
    assert "val_human_accuracy" not in nudged and "human_pull" not in nudged and "val_human_accuracy" not in judge_only
    a, b = RewardModel.load(tmp_path / "judge"), RewardModel.load(tmp_path / "nudged")
    assert b.metadata.dimension_only_pairs == n and b.metadata.human_pairs == n
    prompt, replies = (
        "My bike was stolen today.",
        ["I am so sorry, that sounds really hard. Tell me more?", "Whatever. Not my problem."],
    )
    assert a.prefer(prompt, *replies, "empathy") < 0.5 < b.prefer(prompt, *replies, "empathy")
    np.testing.assert_allclose(
        a.raw_scores([prompt] * 2, replies)["scalar"], b.raw_scores([prompt] * 2, replies)["scalar"], atol=1e-6
    )
    with pytest.raises(ValueError, match="scalar false.*tag them with one of"):
        train_reward_model(labels, out_dir=tmp_path / "bad", human_pairs=nudges.assign(tag=None), **common)


def test_gradient_training_learns_a_dimension_from_its_tagged_pairs(tiny_encoder, tmp_path):
    """head_fit gradient: tagged people's pairs add a Bradley-Terry loss on their own dimension, which falls
    as the empathy head learns the people's order; pairs without a tag leave the dimensions alone."""
    history = []
    pairs = toy_human_pairs().assign(tag=["empathy"] * 10)
    train_reward_model(
        toy_labels().iloc[0:0],
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=small_cfg(uncertainty={"method": "none", "members": 1, "mc_samples": 2}),
        out_dir=tmp_path,
        seed=0,
        data_digest="x",
        date="2026-11-20",
        human_pairs=pairs,
        on_epoch=lambda e, m: history.append(m),
    )
    assert history[-1]["train_loss_dimension_pair"] < history[0]["train_loss_dimension_pair"]
    rm = RewardModel.load(tmp_path)
    assert (
        rm.prefer(
            "My exam went badly.",
            "I am so sorry, that sounds really hard. Tell me more?",
            "Whatever. Not my problem.",
            "empathy",
        )
        > 0.5
    )
    untagged = []
    train_reward_model(
        toy_labels().iloc[0:0],
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=small_cfg(uncertainty={"method": "none", "members": 1, "mc_samples": 2}),
        out_dir=tmp_path / "untagged",
        seed=0,
        data_digest="x",
        date="2026-11-20",
        human_pairs=toy_human_pairs(),
        on_epoch=lambda e, m: untagged.append(m),
    )
    assert not any("train_loss_dimension_pair" in m for m in untagged)


def test_a_reply_as_good_on_every_dimension_and_the_peoples_score_never_gets_the_lower_scalar(tiny_encoder):
    """scalar: combined: the members' mean scalar is tanh(c . mean vector + w * people + b) with c, w >= 0,
    so among any replies, one at least as good on every dimension as read and on the people's score (the
    last column the heads read) never scores lower; the members' spread stays each member's own. A free
    scalar head with the same vector has no such tie to it."""
    from transformers import AutoModel

    torch.manual_seed(0)
    backbone = AutoModel.from_pretrained(tiny_encoder)
    combined = RewardNet(backbone, n_dims=7, members=5, guards=1, combined=True).eval()
    free = RewardNet(backbone, n_dims=7, members=5, guards=1).eval()
    free.load_state_dict({k: v for k, v in combined.state_dict().items() if k != "scalar_weights"})
    with torch.no_grad():
        combined.scalar_weights.copy_(torch.tensor([0.5, 1.2, 0.0, 0.3, 2.0, 0.7, 0.1, 0.8, -0.2]))
        for net in (combined, free):
            net.vector_head.weight.mul_(0.05)  # vectors spread over the range, not all saturated
    pooled = torch.randn(400, combined.feature_size)
    for net, consistent in ((combined, True), (free, False)):
        with torch.inference_mode():
            mean, spread = member_mean_std(net.heads(pooled))
        v, s, people = mean["vector"].numpy(), mean["scalar"].numpy(), pooled[:, -1].numpy()
        dominates = (v[:, None, :] >= v[None, :, :]).all(-1) & (people[:, None] >= people[None, :])
        np.fill_diagonal(dominates, False)
        lower = dominates & (s[:, None] < s[None, :])
        assert dominates.sum() > 50
        assert (lower.sum() == 0) == consistent
    with torch.inference_mode():
        heads = combined.heads(pooled)
        mean, spread = member_mean_std(heads)
        own = torch.tanh(heads["vector"] @ combined.scalar_weights[:7] + (0.8 * pooled[:, -1] - 0.2).unsqueeze(1))
    np.testing.assert_allclose(
        mean["scalar"].numpy(),
        np.tanh(
            mean["vector"].numpy() @ np.array([0.5, 1.2, 0.0, 0.3, 2.0, 0.7, 0.1]) + 0.8 * pooled[:, -1].numpy() - 0.2
        ),
        atol=1e-5,
    )
    np.testing.assert_allclose(spread["scalar"].numpy(), own.std(1, unbiased=False).numpy(), atol=1e-5)


def test_the_combination_is_fitted_on_pairs_with_no_negative_weight():
    """fit_scalar_combination: people's pairs decide which dimensions the scalar weighs (a dimension their
    choices run against gets 0, never a negative weight), the people's score gets its own weight, the
    intercept puts the scalar at the judge's level; with too few pairs the judge's labels decide."""
    from hominem_pipeline.core.reward.combination import MIN_PAIRS, fit_scalar_combination

    rng = np.random.default_rng(0)
    n = 400
    vector, people = np.tanh(rng.normal(size=(n, 3))), rng.normal(size=n)
    taste = (
        2.0 * vector[:, 0] - 1.0 * vector[:, 2] + 1.0 * people
    )  # people like dimension 0 and their score, dislike dimension 2
    a, b = rng.permutation(n)[:200], rng.permutation(n)[:200]
    keep = a != b
    a, b = a[keep], b[keep]
    pairs = np.stack([np.where(taste[a] > taste[b], a, b), np.where(taste[a] > taste[b], b, a)], 1)
    labeled = np.arange(50)
    labels = np.tanh(0.5 * vector[labeled, 1] + 0.3)
    # the judge's pairs prefer dimension 1; people's pairs decide when there are enough of them
    judge = np.stack([np.where(vector[a, 1] > vector[b, 1], a, b), np.where(vector[a, 1] > vector[b, 1], b, a)], 1)
    both, human = np.concatenate([judge, pairs]), np.r_[np.zeros(len(judge), bool), np.ones(len(pairs), bool)]
    combo = fit_scalar_combination(vector, people, both, np.ones(len(both)), human, labeled, labels)
    assert combo.weights[0] > 1.0 and combo.weights[1] < 0.1 and combo.weights[2] == 0.0 and combo.people > 0.5
    assert (
        combo.pre(vector[pairs[:, 0]], people[pairs[:, 0]]) > combo.pre(vector[pairs[:, 1]], people[pairs[:, 1]])
    ).mean() > 0.8
    level = np.arctanh(labels) - combo.pre(vector[labeled], people[labeled])
    assert abs(level.mean()) < 1e-9  # the intercept: the judge's labels' level
    few = MIN_PAIRS - 1  # too few people's pairs: the judge's pairs; too few of those too: the judge's labels
    judged = fit_scalar_combination(
        vector, people, both[: len(judge) + few], np.ones(len(judge) + few), human[: len(judge) + few], labeled, labels
    )
    assert judged.weights[1] > 1.0 and judged.weights[0] < 0.1
    labels_only = fit_scalar_combination(vector, None, pairs[:few], np.ones(few), np.ones(few, bool), labeled, labels)
    assert labels_only.people == 0.0 and labels_only.weights[1] > 0.3 and labels_only.weights[0] < 0.1


def test_the_peoples_score_principal_directions_are_the_svds_either_way_round():
    from hominem_pipeline.core.reward.kernel import principal as _principal

    rng = np.random.default_rng(1)
    for shape in (
        (60, 25),
        (25, 60),
    ):  # more rows than columns, and fewer (the shipped pairs: 4,316 replies of 4,608 features)
        x = rng.normal(size=shape) @ np.diag(np.linspace(3, 0.1, shape[1]))
        _, sv, vt = np.linalg.svd(x, full_matrices=False)
        got_sv, got = _principal(x)
        k = min(shape)
        np.testing.assert_allclose(got_sv[:k], sv, rtol=1e-8)
        np.testing.assert_allclose(
            np.abs((vt * got[:, :k].T).sum(1)), 1.0, atol=1e-8
        )  # the same directions, up to sign
        top_sv, top = _principal(x, top=5)  # the largest five alone: the same values and directions
        np.testing.assert_allclose(top_sv, sv[:5], rtol=1e-8)
        np.testing.assert_allclose(np.abs((vt[:5] * top.T).sum(1)), 1.0, atol=1e-8)


def test_the_peoples_score_nystroem_map_reproduces_the_kernel_and_survives_duplicate_landmarks():
    from hominem_pipeline.core.reward.kernel import kernel as _kernel
    from hominem_pipeline.core.reward.kernel import nystroem_map as _nystroem_map

    rng = np.random.default_rng(2)
    centres = rng.normal(size=(40, 6))
    centres[7] = centres[3]  # one reply twice among the pairs: its kernel matrix is singular
    others = rng.normal(size=(9, 6))
    m = _nystroem_map(centres, 4.0)
    phi_l, phi_o = _kernel(centres, centres, 4.0) @ m, _kernel(others, centres, 4.0) @ m
    np.testing.assert_allclose(
        phi_l @ phi_l.T, _kernel(centres, centres, 4.0), atol=1e-6
    )  # k(a, b) wherever a and b are landmarks
    np.testing.assert_allclose(
        phi_o @ phi_l.T, _kernel(others, centres, 4.0), atol=1e-6
    )  # and wherever one of them is
    assert (
        np.isfinite(phi_o).all() and (np.einsum("ij,ij->i", phi_o, phi_o) <= 1.0 + 1e-6).all()
    )  # never more than k(x, x) = 1


def test_a_shipped_projection_gives_the_score_fitted_without_it_and_measures_no_shipped_text(
    tiny_encoder, tmp_path, monkeypatch
):
    """`hominem data ship-features` ships the people's score's projection, fitted on the shipped pairs'
    replies, with their rows read through it: a fresh clone's fit reads those rows instead of passing the
    texts through the encoder, and finds the score a fit on the measured states finds."""
    from hominem_pipeline.core.reward.people import (
        EncoderStates,
        PairSet,
        PeopleScore,
        Projection,
        ship_projection,
    )

    kind = [
        "Thank you, that is very kind of you.",
        "Thank you kindly, that helps.",
        "That is kind, thank you so much.",
        "How kind, thanks a lot.",
    ]
    rude = ["Go away now.", "Leave me alone, go away.", "Go away, stop asking.", "Stop it and leave."]
    prompts = [f"Could you help me with thing {i}?" for i in range(24)]
    texts = [(p, kind[i % 4]) for i, p in enumerate(prompts)] + [(p, rude[i % 4]) for i, p in enumerate(prompts)]
    pairs, weights, groups = np.stack([np.arange(24), 24 + np.arange(24)], 1), np.ones(24), np.arange(24)
    states = EncoderStates(tiny_encoder, 64, cache=tmp_path / "maintainer")(
        [p for p, _ in texts], [r for _, r in texts]
    ).numpy()
    direct, direct_values = PeopleScore.fit(states, PairSet(pairs, weights, groups), seed=0)
    shipped = tmp_path / "config" / "human" / "features"
    projection_file, rows_file, n, measured = ship_projection(
        tiny_encoder, 64, tmp_path / "maintainer", texts + texts[:3], shipped
    )
    assert (
        n == 48 and measured == 0 and projection_file.parent == rows_file.parent == shipped
    )  # each exchange once, read from the cache

    fresh = EncoderStates(tiny_encoder, 64, cache=tmp_path / "fresh-clone")
    assert fresh.projection_file(shipped) == projection_file
    read: list[list[str]] = []
    real = fresh._measure
    monkeypatch.setattr(fresh, "_measure", lambda p, r: read.append(list(r)) or real(p, r))
    projection = Projection.load(projection_file)
    z = fresh.projected(
        [p for p, _ in texts] + ["Any news?"], [r for _, r in texts] + ["None yet, sorry."], projection, shipped
    )
    assert read == [["None yet, sorry."]]  # only the text nobody shipped
    score, values = PeopleScore.fit_projected(projection, z[:48], PairSet(pairs, weights, groups), seed=0)
    assert score.agreement == direct.agreement and score.alpha == direct.alpha
    np.testing.assert_allclose(values, direct_values, atol=1e-4)
    np.testing.assert_allclose(score(states), direct(states), atol=1e-4)


def test_the_reward_manifold_is_read_against_the_spread_of_the_labels_it_learned(trained):
    from hominem_pipeline.core.evaluation.manifold import reward_manifold

    out, _, _, _ = trained
    model = RewardModel.load(out)
    # every dimension's labels are +-0.8 in equal numbers: a spread of 0.8
    assert model.metadata.label_spread == pytest.approx({d: 0.8 for d in DIMS})
    kind, curt = "I am so sorry, that sounds really hard. Tell me more?", "Whatever. Not my problem."
    prompts = [f"Something sad happened to me, number {i}." for i in range(4)]
    shape = reward_manifold(model, prompts + ["an empty reply is left out"], [kind] * 4 + [""], [curt] * 4 + [curt])
    assert shape.pairs == 4 and shape.replies == 8
    vectors = np.vstack(
        [model.raw_scores(prompts, [kind] * 4)["vector"], model.raw_scores(prompts, [curt] * 4)["vector"]]
    )
    for j, d in enumerate(DIMS):
        assert shape.spread_ratio[d] == pytest.approx(vectors[:, j].std() / 0.8, rel=1e-4)
    assert set(shape.decided_share) == set(DIMS) or set(shape.decided_share) == {*DIMS, "people"}
    with pytest.raises(ValueError, match="no pair with two non-empty replies"):
        reward_manifold(model, ["p"], [""], [curt])
