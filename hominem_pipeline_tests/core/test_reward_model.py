import numpy as np
import pandas as pd
import pytest
import torch

from hominem_pipeline.core.config import load_config
from hominem_pipeline.core.reward_model import RewardModel, RewardNet, encode_pair, pairwise_accuracy, split_by_prompt, train_reward_model
from hominem_pipeline_tests.conftest import REPO

DIMS = ["empathy", "curiosity", "harm_avoidance"]


def toy_labels(n_prompts: int = 6) -> pd.DataFrame:
    """Kind replies score high, curt ones low: a signal an encoder can learn from words alone."""
    rows = []
    for i in range(n_prompts):
        for j, (reply, value) in enumerate([("I am so sorry, that sounds really hard. Tell me more?", 0.8), ("Whatever. Not my problem.", -0.8)]):
            rows.append({
                "prompt_id": f"p{i}", "prompt": f"Something sad happened to me, number {i}.", "response": reply,
                "vector": {d: value for d in DIMS}, "scalar": value, "reward_intensity": 0.5 + value / 4, "safety_score": 0.9,
            })
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def trained(tiny_encoder, tmp_path_factory):
    cfg = load_config(root=REPO, overrides={"reward_model": {"epochs": 8, "batch_size": 4, "head_learning_rate": 0.01, "learning_rate": 0.001, "early_stopping_patience": 8, "val_fraction": 0.34, "max_length": 48}}).reward_model
    out = tmp_path_factory.mktemp("rm")
    history = []
    metrics = train_reward_model(toy_labels(), dimensions=DIMS, encoder_path=tiny_encoder, cfg=cfg, out_dir=out, seed=0, data_digest="abc", date="2026-11-20", on_epoch=lambda e, m: history.append(m))
    return out, metrics, history


def test_heads_have_the_configured_shapes(tiny_encoder):
    from transformers import AutoModel

    net = RewardNet(AutoModel.from_pretrained(tiny_encoder), n_dims=5)
    out = net(torch.ones((3, 7), dtype=torch.long), torch.ones((3, 7), dtype=torch.long))
    assert out["vector"].shape == (3, 5)
    assert out["scalar"].shape == out["reward_intensity"].shape == out["safety_score"].shape == (3,)
    assert out["vector"].abs().max() <= 1 and (0 <= out["safety_score"]).all() and (out["safety_score"] <= 1).all()


def test_loss_falls_and_the_model_learns_the_ordering(trained):
    _, metrics, history = trained
    assert history[-1]["train_mse_vector"] < history[0]["train_mse_vector"] / 2
    assert metrics["val_pairwise_accuracy"] == 1.0
    assert metrics["val_pairs"] == 2  # two held-out prompts, one kind/curt pair each


def test_saved_model_scores_identically_after_loading(trained, tiny_encoder):
    out, _, _ = trained
    a = RewardModel.load(out)
    b = RewardModel.load(out)
    prompts, responses = ["I lost my job."] * 2, ["That is hard; what happened?", "ok"]
    sa, sb = a.score(prompts, responses), b.score(prompts, responses)
    assert sa == sb
    assert set(sa[0].vector) == set(DIMS)
    assert sa[0].scalar > sa[1].scalar  # kind beats curt, as trained
    assert a.metadata["training_data_digest"] == "abc" and a.metadata["date"] == "2026-11-20"


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
    with pytest.raises(FileNotFoundError, match="not a reward model folder"):
        RewardModel.load(trained[0].parent)


def test_long_inputs_are_truncated_keeping_the_latest_prompt_turn(tiny_encoder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    ids = encode_pair(tok, "old " * 300 + "latest question", "answer " * 300, 64)
    assert len(ids) == 64
    text = tok.decode(ids)
    assert "latest question" in text and text.count("answer") >= 40


def test_split_keeps_prompts_whole_and_pairwise_accuracy_counts_pairs():
    train, val = split_by_prompt(["a", "a", "b", "b", "c", "c"], 0.34, seed=0)
    ids = np.array(["a", "a", "b", "b", "c", "c"])
    assert set(ids[train]).isdisjoint(set(ids[val])) and len(val) == 2
    acc, n = pairwise_accuracy(["p", "p", "p"], np.array([0.5, 0.0, 0.45]), np.array([0.9, 0.1, 0.2]))
    assert n == 2 and acc == 1.0  # (0.5 vs 0.0) and (0.0 vs 0.45); (0.5 vs 0.45) is under the gap


def test_preferences_are_calibrated_and_complementary(trained):
    out, metrics, _ = trained
    model = RewardModel.load(out)
    cal = model.metadata["calibration"]
    assert cal["temperature"] == metrics["temperature"] > 0 and cal["after"]["pairs"] == 2 * metrics["val_pairs"]
    assert metrics["val_ece"] <= metrics["val_ece_uncalibrated"] + 1e-9 and 0 <= metrics["val_brier"] <= 1
    assert (out / "reliability.png").stat().st_size > 1000
    prompt, kind, curt = "I lost my job.", "That is hard; what happened?", "ok"
    p = model.prefer(prompt, kind, curt)
    assert p + model.prefer(prompt, curt, kind) == pytest.approx(1.0, abs=1e-12)
    assert p > 0.5  # kind beats curt, as trained
