"""Training across processes: `accelerate launch --multi_gpu --num_processes 2` (torchrun; gloo on the CPU)
of the dual, DPO and RL trainers on the tiny student: the gradients averaged, one adapter written, the same
batches and the same losses as one process."""

from __future__ import annotations

from pathlib import Path

import pytest

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.policy.dual import DualStart, train_dual_adapter
from hominem_pipeline.core.policy.launch import LaunchSpec, run_launched, write_spec
from hominem_pipeline.core.policy.lora import load_policy
from hominem_pipeline_tests.conftest import REPO
from hominem_pipeline_tests.core.test_dual_trainer import TINY_POLICY, memory, pairs


def launch(spec: Path, processes: int = 2):
    return run_launched(spec, processes, device="cpu")


def test_dual_across_two_processes_learns_what_one_does(tiny_student, tmp_path):
    cfg = load_config(
        root=REPO,
        overrides={
            "policy": {
                **TINY_POLICY,
                "batch_size": 4,
                "mode": "dual",
                "dual": {"sft_weight": 1.0, "memory_weight": None, "channels": {"monitor_every": 2}},
            }
        },
    ).policy
    one = train_dual_adapter(
        pairs(8), memory(4), start=DualStart(tiny_student), cfg=cfg, out_dir=tmp_path / "one", seed=0
    )
    spec = write_spec(
        tmp_path / "launch",
        LaunchSpec(mode="dual", student=tiny_student, policy=cfg, seed=0, out_dir=tmp_path / "two"),
        pairs=pairs(8),
        memory=memory(4),
    )
    two = launch(spec)
    assert two.metrics["processes"] == 2 and one.metrics["processes"] == 1
    assert (
        two.base_checksum == one.base_checksum and two.channels["pair_rows"] == one.channels["pair_rows"]
    )  # the same rows, shared out
    for a, b in zip(
        one.history, two.history
    ):  # each step's loss: the halves' means, weighted by their rows, are the whole batch's
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4) and b["rewards/accuracies"] == a["rewards/accuracies"]
    assert "share/memory" in two.history[0]  # the dominance monitor reads the averaged gradient
    model, tokenizer = load_policy(tiny_student, tmp_path / "two")  # one adapter, written once, that loads
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())
    out = model.generate(**tokenizer("Hello", return_tensors="pt"), max_new_tokens=3, do_sample=False)
    assert out.shape[1] > 1


def test_dpo_across_two_processes_writes_one_adapter(tiny_student, tmp_path):
    cfg = load_config(root=REPO, overrides={"policy": {**TINY_POLICY, "batch_size": 4, "mode": "dpo"}}).policy
    spec = write_spec(
        tmp_path / "launch",
        LaunchSpec(mode="dpo", student=tiny_student, policy=cfg, seed=0, out_dir=tmp_path / "adapter"),
        pairs=pairs(8),
    )
    result = launch(spec)
    assert len(result.history) == cfg.max_steps and (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    load_policy(tiny_student, tmp_path / "adapter")


def test_rl_across_two_processes_writes_one_adapter(tiny_student, tiny_encoder, tmp_path):
    import pandas as pd

    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
    from hominem_pipeline_tests.core.test_reward_model import DIMS, small_cfg, toy_labels
    from hominem_pipeline_tests.core.test_rl_trainer import policy_cfg

    train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(tiny_encoder),
        cfg=small_cfg(epochs=1),
        out_dir=tmp_path / "rm",
        seed=0,
        data_digest="x",
        date="2026-11-22",
    )
    prompts = pd.DataFrame(
        {
            "prompt": [
                "Something sad happened to me.",
                "I lost my keys again.",
                "Can you help me plan a talk?",
                "My cat is ill.",
            ]
        }
    )
    spec = write_spec(
        tmp_path / "launch",
        LaunchSpec(
            mode="rl",
            student=tiny_student,
            policy=policy_cfg(),
            seed=0,
            out_dir=tmp_path / "adapter",
            reward_model=tmp_path / "rm",
        ),
        pairs=prompts,
    )
    result = launch(spec)
    assert len(result.history) == 2 and (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    load_policy(tiny_student, tmp_path / "adapter")


def test_a_failed_launch_says_what_the_processes_printed(tiny_student, tmp_path):
    """`run_launched` (how the daily stage trains under `runtime.train_processes`): a launch that fails
    raises with the processes' last lines, which name the cause; one process is not a launch."""
    cfg = load_config(root=REPO, overrides={"policy": {**TINY_POLICY, "mode": "dual"}}).policy
    spec = write_spec(
        tmp_path / "launch",
        LaunchSpec(
            mode="dual", student=tmp_path / "no-such-student", policy=cfg, seed=0, out_dir=tmp_path / "adapter"
        ),
        pairs=pairs(4),
    )
    with pytest.raises(RuntimeError, match=r"(?s)training in 2 processes failed.*no-such-student"):
        run_launched(spec, 2, device="cpu")
    assert not (tmp_path / "adapter").exists()
    with pytest.raises(ValueError, match="2 or more processes"):
        run_launched(spec, 1)
