"""One device policy (`runtime.device`): what it resolves to, how a wrong value is said, where the trainers
train, and that on the CPU nothing changes (the GPU side: hominem_pipeline_tests/gpu, run by
scripts/device_check.sh on a CUDA GPU, and here on the emulated Apple GPU)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from hominem_pipeline.core.config import ConfigError
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.lm import device as device_policy
from hominem_pipeline.core.lm.device import cpu_threads_each, describe_device, resolve_device
from hominem_pipeline.core.lm.trl_args import trl_run_args
from hominem_pipeline_tests.conftest import REPO

MPS = torch.device("mps")
MPS_HERE = torch.backends.mps.is_available()


@pytest.fixture
def apple_gpu(monkeypatch):
    """torch seeing an Apple GPU and no CUDA one, as on a Mac with Apple silicon."""
    resolve_device.cache_clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_policy, "mps_available", lambda: True)
    yield
    resolve_device.cache_clear()


def test_processes_sharing_the_cpu_get_an_even_share_of_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert [cpu_threads_each(n) for n in (1, 2, 3, 4)] == [3, 1, 1, 1]
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # a platform without affinity: every core
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert [cpu_threads_each(n) for n in (1, 2, 16)] == [8, 4, 1]


def test_auto_is_cuda_only_where_torch_sees_a_gpu_and_cuda_without_one_names_the_fix(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu") and resolve_device(None) == resolve_device("auto")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "mps" if MPS_HERE else "cpu")
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


def test_auto_takes_the_apple_gpu_where_torch_sees_one_and_mps_without_one_names_the_fix(apple_gpu, monkeypatch):
    assert resolve_device("auto") == MPS == resolve_device("mps") and describe_device(MPS) == "mps (Apple GPU)"
    resolve_device.cache_clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto").type == "cuda"  # a CUDA GPU first, where both are seen
    resolve_device.cache_clear()
    monkeypatch.setattr(device_policy, "mps_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"runtime.device is mps, but torch sees no Apple GPU here .* auto or cpu"):
        resolve_device("mps")
    assert load_config(root=REPO, overrides={"runtime": {"device": "mps"}}).runtime.device == "mps"
    with pytest.raises(ConfigError, match=r"train_processes is 2 with runtime.device: mps.*train_processes: 1"):
        load_config(root=REPO, overrides={"runtime": {"device": "mps", "train_processes": 2}})


def test_the_trainers_train_where_the_setting_says_in_fp32_off_cuda(tmp_path, monkeypatch):
    """TRL's arguments: the CPU forced for the CPU (else transformers takes any GPU it sees), bf16 only on a CUDA
    GPU that has it; with them transformers trains on the Apple GPU where torch sees one. A launch of several
    processes on the Apple GPU is refused before it starts."""
    from accelerate.state import PartialState
    from transformers import TrainingArguments

    from hominem_pipeline.core.policy.launch import run_launched

    cpu = trl_run_args(0, torch.device("cpu"))
    assert cpu["use_cpu"] and not cpu["bf16"] and not cpu["activation_checkpointing"]
    mps = trl_run_args(0, MPS)
    assert not mps["use_cpu"] and not mps["bf16"] and mps["seed"] == mps["data_seed"] == 0
    import transformers.training_args as training_args

    monkeypatch.setattr(training_args, "is_torch_mps_available", lambda *a, **k: True)
    PartialState._reset_state()  # accelerate keeps one state per process: this one's, then the CPU's again
    try:
        assert TrainingArguments(output_dir=str(tmp_path), **mps).device == MPS
        PartialState._reset_state()
        assert TrainingArguments(output_dir=str(tmp_path), **cpu).device == torch.device("cpu")
    finally:
        PartialState._reset_state()
    with pytest.raises(ValueError, match="Apple GPU is one device .* runtime.train_processes: 1"):
        run_launched(tmp_path / "spec.json", 2, device="mps")


def test_every_gpu_check_passes_on_the_emulated_apple_gpu():
    """`scripts/device_check.sh dry-run mps`, in CI: the networks, the trainers and the server's engine on a GPU
    without float64 (hominem_pipeline_tests/gpu/emulated_mps.py), each giving the CPU's figures."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "gpu", "hominem_pipeline_tests/gpu", "-p", "no:cacheprovider"]
        + ["-o", "addopts=", "-q"],
        cwd=REPO,
        env={**os.environ, "HOMINEM_GPU_CHECK_DEVICE": "mps"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0 and "7 passed" in run.stdout, run.stdout[-4000:] + run.stderr[-2000:]
