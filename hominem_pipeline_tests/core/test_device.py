"""One device policy (`runtime.device`): what it resolves to, how a wrong value is said, and that on
the CPU nothing changes (the GPU side: hominem_pipeline_tests/gpu, run by scripts/device_check.sh)."""

import numpy as np
import pytest
import torch

from hominem_pipeline.core.config import ConfigError
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.lm.device import describe_device, resolve_device
from hominem_pipeline_tests.conftest import REPO


def test_auto_is_cuda_only_where_torch_sees_a_gpu_and_cuda_without_one_names_the_fix(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu") and resolve_device(None) == resolve_device("auto")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert describe_device(torch.device("cpu")) == f"cpu ({torch.get_num_threads()} threads)"
    resolve_device.cache_clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    try:
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(
            ValueError,
            match=r"runtime.device is cuda, but torch sees no CUDA GPU here .* set runtime.device: auto or cpu",
        ):
            resolve_device("cuda")
    finally:
        resolve_device.cache_clear()
    with pytest.raises(ConfigError, match="runtime.device"):
        load_config(root=REPO, overrides={"runtime": {"device": "tpu"}})
    assert load_config(root=REPO).runtime.device == "auto"


def test_on_the_cpu_a_device_given_changes_no_score(tiny_student, tmp_path):
    """The reward model trained and loaded with the CPU named scores as without a device named."""
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
    from hominem_pipeline_tests.core.test_reward_model import DIMS, small_cfg, toy_labels

    cfg = small_cfg(guards=["reply_logp"], backbone={"path": None, "finetune": "frozen"}, head_fit="ridge")
    for name, device in (("none", None), ("cpu", torch.device("cpu"))):
        train_reward_model(
            toy_labels(),
            dimensions=DIMS,
            sources=RewardSources(tiny_student, device=device),
            cfg=cfg,
            out_dir=tmp_path / name,
            seed=0,
            data_digest="d",
            date="2026-11-20",
        )
    prompts, replies = ["How was it?"] * 2, ["It was a good day.", "zq xv"]
    plain = RewardModel.load(tmp_path / "none").raw_scores(prompts, replies)
    placed = RewardModel.load(tmp_path / "cpu", torch.device("cpu"))
    assert placed.device == torch.device("cpu")
    assert np.array_equal(placed.raw_scores(prompts, replies)["scalar"], plain["scalar"])
