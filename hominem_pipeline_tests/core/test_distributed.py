"""Training across processes: `accelerate launch --multi_gpu --num_processes 2` (torchrun; gloo on the CPU)
of the dual, DPO and RL trainers on the tiny student: the gradients averaged, one adapter written, the same
batches and the same losses as one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hominem_pipeline.core.config_loader import load_config
from hominem_pipeline.core.policy.dual import train_dual_adapter
from hominem_pipeline.core.policy.launch import RESULT, write_spec
from hominem_pipeline.core.policy.lora import load_policy
from hominem_pipeline_tests.conftest import REPO
from hominem_pipeline_tests.core.test_dual_trainer import TINY_POLICY, memory, pairs

ACCELERATE = str(Path(sys.executable).parent / "accelerate")


def launch(spec: Path, processes: int = 2) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([ACCELERATE, "launch", "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1", "--mixed_precision", "no",
                           "--dynamo_backend", "no", "--main_process_port", "0", "-m", "hominem_pipeline.core.policy.launch", str(spec)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((spec.parent / RESULT).read_text())


def test_dual_across_two_processes_learns_what_one_does(tiny_student, tmp_path):
    cfg = load_config(root=REPO, overrides={"policy": {**TINY_POLICY, "batch_size": 4, "mode": "dual",
                                                       "dual": {"sft_weight": 1.0, "memory_weight": None, "channels": {"monitor_every": 2}}}}).policy
    one = train_dual_adapter(pairs(8), memory(4), student_path=tiny_student, cfg=cfg, out_dir=tmp_path / "one", seed=0)
    spec = write_spec(tmp_path / "launch", mode="dual", student=tiny_student, policy=cfg, seed=0, out_dir=tmp_path / "two", pairs=pairs(8), memory=memory(4))
    two = launch(spec)
    assert two["metrics"]["processes"] == 2 and one.metrics["processes"] == 1
    assert two["base_checksum"] == one.base_checksum and two["channels"]["pair_rows"] == one.channels["pair_rows"]  # the same rows, shared out
    for a, b in zip(one.history, two["history"]):  # each step's loss: the mean of the two halves' is the whole batch's
        assert b["loss"] == pytest.approx(a["loss"], rel=0.02) and b["rewards/accuracies"] == a["rewards/accuracies"]
    assert "share/memory" in two["history"][0]  # the dominance monitor reads the averaged gradient
    model, tokenizer = load_policy(tiny_student, tmp_path / "two")  # one adapter, written once, that loads
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())
    out = model.generate(**tokenizer("Hello", return_tensors="pt"), max_new_tokens=3, do_sample=False)
    assert out.shape[1] > 1


def test_dpo_across_two_processes_writes_one_adapter(tiny_student, tmp_path):
    cfg = load_config(root=REPO, overrides={"policy": {**TINY_POLICY, "batch_size": 4, "mode": "dpo"}}).policy
    spec = write_spec(tmp_path / "launch", mode="dpo", student=tiny_student, policy=cfg, seed=0, out_dir=tmp_path / "adapter", pairs=pairs(8))
    result = launch(spec)
    assert len(result["history"]) == cfg.max_steps and (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    load_policy(tiny_student, tmp_path / "adapter")


def test_rl_across_two_processes_writes_one_adapter(tiny_student, tiny_encoder, tmp_path):
    import pandas as pd

    from hominem_pipeline.core.reward.training import train_reward_model
    from hominem_pipeline_tests.core.test_reward_model import DIMS, small_cfg, toy_labels
    from hominem_pipeline_tests.core.test_rl_trainer import policy_cfg

    train_reward_model(toy_labels(), dimensions=DIMS, backbone_path=tiny_encoder, cfg=small_cfg(epochs=1), out_dir=tmp_path / "rm", seed=0, data_digest="x", date="2026-11-22")
    prompts = pd.DataFrame({"prompt": ["Something sad happened to me.", "I lost my keys again.", "Can you help me plan a talk?", "My cat is ill."]})
    spec = write_spec(tmp_path / "launch", mode="rl", student=tiny_student, policy=policy_cfg(), seed=0, out_dir=tmp_path / "adapter", pairs=prompts,
                      reward_model=tmp_path / "rm")
    result = launch(spec)
    assert len(result["history"]) == 2 and (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    load_policy(tiny_student, tmp_path / "adapter")
