"""Every network the project runs, and the adapters' training, placed by `runtime.device` on a GPU: each
part puts its tensors there and gives the CPU's figures (up to float rounding).

HOMINEM_GPU_CHECK_DEVICE names the GPU: `cuda` (the default; skipped without one: scripts/device_check.sh
runs these on a lent GPU machine, which needs torch, transformers, peft and pytest there, nothing from the
project's other dependencies but pydantic and TRL, carried as wheels, and tokenizer folders, not models),
`mps` (the Apple GPU; on a machine without one, the emulated Apple GPU of `emulated_mps`: the CPU dry-run
`scripts/device_check.sh dry-run mps`), or `cpu` (`scripts/device_check.sh dry-run`, before spending GPU
time)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch

SETTING = os.environ.get("HOMINEM_GPU_CHECK_DEVICE", "cuda")  # what runtime.device says: cuda | mps | cpu
MPS_HERE = SETTING == "mps" and torch.backends.mps.is_available()
if SETTING == "mps" and not MPS_HERE:
    from hominem_pipeline_tests.gpu.emulated_mps import install

    GPU = install()
else:
    GPU = torch.device(SETTING)
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        SETTING == "cuda" and not torch.cuda.is_available(),
        reason="no CUDA GPU (scripts/device_check.sh runs these on one)",
    ),
]
PROMPTS = ["How was your day?", "I failed my driving test again.", "What is the capital of France?"]
REPLIES = ["Quiet, thanks for asking. And yours?", "That's rough. What happened?", "Paris."]


def sync() -> None:
    if GPU.type == "cuda":
        torch.cuda.synchronize()
    elif MPS_HERE:
        torch.mps.synchronize()


def timed(what: str, fn):
    sync()
    started = time.perf_counter()
    out = fn()
    sync()
    print(f"{what}: {time.perf_counter() - started:.3f} s")
    return out


def test_the_guard_columns_on_the_gpu_equal_the_cpus(tiny_student):
    from hominem_pipeline.core.reward.guards import GuardScorer

    cpu = GuardScorer(["reply_logp", "prompt_gain"], tiny_student)(PROMPTS, REPLIES)
    scorer = GuardScorer(["reply_logp", "prompt_gain"], tiny_student, device=GPU)
    placed = timed(f"guards, {GPU.type}", lambda: scorer(PROMPTS, REPLIES))
    assert next(scorer._model.parameters()).device.type == GPU.type and placed.device.type == "cpu"
    assert torch.allclose(placed, cpu, atol=1e-3)


def test_the_peoples_encoder_on_the_gpu_equals_the_cpus(tiny_encoder):
    from hominem_pipeline.core.reward.people import EncoderStates

    cpu = EncoderStates(tiny_encoder, 64)(PROMPTS, REPLIES)
    reader = EncoderStates(tiny_encoder, 64, device=GPU)
    placed = timed(f"people's encoder, {GPU.type}", lambda: reader(PROMPTS, REPLIES))
    assert next(reader._model.parameters()).device.type == GPU.type and torch.allclose(placed, cpu, atol=1e-4)


def test_the_reward_model_trains_its_frozen_pass_and_scores_on_the_gpu_as_on_the_cpu(tiny_student, tmp_path):
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
    from hominem_pipeline_tests.core.test_reward_model import DIMS, small_cfg, toy_labels

    cfg = small_cfg(guards=["reply_logp"], backbone={"path": None, "finetune": "frozen"}, head_fit="ridge")
    for name, device in (("cpu", None), ("placed", GPU)):
        timed(
            f"reward model training, {name}",
            lambda: (
                train_reward_model(
                    toy_labels(),
                    dimensions=DIMS,
                    sources=RewardSources(tiny_student, device=device),
                    cfg=cfg,
                    out_dir=tmp_path / name,
                    seed=0,
                    data_digest="d",
                    date="2026-11-20",
                ).metrics
            ),
        )
    cpu = RewardModel.load(tmp_path / "cpu").raw_scores(PROMPTS, REPLIES)
    model = RewardModel.load(tmp_path / "placed", GPU)
    placed = timed(f"reward model scoring, {GPU.type}", lambda: model.raw_scores(PROMPTS, REPLIES))
    assert model.device.type == GPU.type and next(model.net.parameters()).device.type == GPU.type
    assert np.allclose(placed["scalar"], cpu["scalar"], atol=1e-3) and np.allclose(
        placed["vector"], cpu["vector"], atol=1e-3
    )


def test_the_teacher_and_the_evaluation_generate_on_the_gpu(tiny_student, tiny_encoder, tmp_path):
    from hominem_pipeline.core.common.schema import Prompt
    from hominem_pipeline.core.config import CandidateStyle
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.evaluation.compare import greedy_replies
    from hominem_pipeline.core.policy.lora import load_policy
    from hominem_pipeline.core.teacher.local import LocalHFTeacher
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    cfg = load_config(project / "config" / "tiny.yaml", root=project, overrides={"runtime": {"device": SETTING}})
    teacher = LocalHFTeacher(tiny_student, cfg, batch_size=4)
    assert teacher.model.device.type == GPU.type
    prompts = [Prompt(prompt_id=f"p{i}", text=t, category="c", difficulty=1) for i, t in enumerate(PROMPTS)]
    sampled = timed(
        f"teacher sampling, {GPU.type}",
        lambda: teacher.sample(prompts, [CandidateStyle(name="s", temperature=0.8, top_p=0.9)], 8, seed=0),
    )
    assert len(sampled.items) == len(PROMPTS)
    labels = timed(f"teacher rating, {GPU.type}", lambda: teacher.rate(sampled.items))
    assert len(labels.items) == len(PROMPTS)
    model, tokenizer = load_policy(tiny_student, None, GPU)
    replies = timed(
        f"evaluation replies, {GPU.type}",
        lambda: greedy_replies(model, tokenizer, PROMPTS, cfg.evaluation, 0, "gpu check"),
    )
    assert next(model.parameters()).device.type == GPU.type and len(replies) == len(
        PROMPTS
    )  # greedy text can differ where the CPU's logits tie


def test_the_servers_engine_batches_on_the_gpu_as_on_the_cpu(tiny_student):
    """`hominem serve`'s engine on `runtime.device`: the model, the batch's cache, mask and positions on the
    GPU (rows joining and leaving), each row's sampling on the CPU; greedy replies as long as the CPU's."""
    from hominem_pipeline.serving.engine import Engine, EngineSettings, Request, Sampling

    def replies(device):
        engine = Engine(
            tiny_student,
            None,
            None,
            EngineSettings(max_batch_size=4, batch_wait_ms=0, max_queue=8, repetition_penalty=1.3),
            device=device,
        )
        try:
            rows = [
                Request(
                    engine.chat_text([{"role": "user", "content": p}]), Sampling(0.0, 1.0, 6 + 3 * i), adapter=False
                )
                for i, p in enumerate(PROMPTS)
            ]
            done = [f.result(timeout=120) for f in [engine.submit(r) for r in rows]]
            return engine, [r.ids for r in done]
        finally:
            engine.close()

    _, cpu = replies(None)
    engine, placed = timed(f"engine, {GPU.type}", lambda: replies(GPU))
    assert next(engine.model.parameters()).device.type == GPU.type
    assert (
        [len(r) for r in placed] == [len(r) for r in cpu] == [6, 9, 12]
    )  # rows of different lengths left the batch one by one


def test_the_dual_trainer_learns_peoples_pairs_on_the_gpu_as_on_the_cpu(tiny_student, tiny_encoder, tmp_path):
    """The daily adapter's trainer (`policy.dual`) on a GPU: the same fresh LoRA draws, the same losses
    step by step as the CPU's (up to float rounding), and the same implicit reward on people's pairs
    (the evaluation's first figure), measured on either device."""
    import pandas as pd

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.evaluation.people_pairs import implicit_reward
    from hominem_pipeline.core.policy.dual import DualStart, train_dual_adapter
    from hominem_pipeline.core.policy.lora import load_policy
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    cfg = load_config(
        project / "config" / "tiny.yaml", root=project, overrides={"policy": {"max_steps": 4, "batch_size": 4}}
    ).policy
    rejected = ["Whatever.", "Try harder.", "Somewhere in Europe, probably."]
    pairs = pd.DataFrame(
        {
            "prompt": PROMPTS,
            "chosen": REPLIES,
            "rejected": rejected,
            "chosen_reward_intensity": 1.0,
            "chosen_safety_score": 1.0,
        }
    )
    memory = pd.DataFrame({"prompt": ["What is my cat called?"], "response": ["Your cat is called Miso."]})
    runs = {}
    for name, device in (("cpu", torch.device("cpu")), (GPU.type, GPU)):
        runs[name] = timed(
            f"dual training, 4 steps, {name}",
            lambda: train_dual_adapter(
                pairs,
                memory,
                start=DualStart(tiny_student, device=device),
                cfg=cfg,
                out_dir=tmp_path / name,
                seed=0,
            ),
        )
    cpu, placed = ([h["loss"] for h in runs[n].history] for n in ("cpu", GPU.type))
    assert len(placed) == 4 and np.allclose(placed, cpu, rtol=1e-3, atol=1e-4), (cpu, placed)
    figures = {}
    for name, device in (("cpu", None), (GPU.type, GPU)):
        model, tokenizer = load_policy(tiny_student, tmp_path / GPU.type, device)
        figures[name], _ = implicit_reward(model, tokenizer, PROMPTS, REPLIES, rejected, 4)
    assert (
        figures[GPU.type].accuracy == figures["cpu"].accuracy
        and abs(figures[GPU.type].mean_margin - figures["cpu"].mean_margin) < 1e-3
    )


def test_the_dual_trainer_across_processes_takes_a_gpu_each(tiny_student, tmp_path):
    """`runtime.train_processes` on a GPU machine (`policy.launch.run_launched`): with two GPUs or more,
    two processes train over NCCL, one per GPU, and each step's loss is one process's (the halves' means
    weighted by their rows); with one GPU, two processes are refused with the fix named, and the same launch
    runs on the CPU (`runtime.device: cpu`) with this machine's torch and accelerate. The Apple GPU (`mps`) is
    one device, and torch.distributed has no backend for it: refused with the fix named."""
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.policy.dual import DualStart, train_dual_adapter
    from hominem_pipeline.core.policy.launch import LaunchSpec, run_launched, write_spec
    from hominem_pipeline.core.policy.lora import load_policy
    from hominem_pipeline_tests.conftest import REPO
    from hominem_pipeline_tests.core.test_dual_trainer import TINY_POLICY, memory, pairs

    cfg = load_config(
        root=REPO,
        overrides={
            "policy": {
                **TINY_POLICY,
                "batch_size": 4,
                "mode": "dual",
                "dual": {"sft_weight": 1.0, "memory_weight": None},
            }
        },
    ).policy
    data = pairs(8)
    gpus = torch.cuda.device_count() if GPU.type == "cuda" else 0
    device = "cuda" if gpus >= 2 else "cpu"
    one = timed(
        f"dual, one process, {GPU.type}",
        lambda: train_dual_adapter(
            data,
            memory(4),
            start=DualStart(tiny_student, device=GPU if device == "cuda" else torch.device("cpu")),
            cfg=cfg,
            out_dir=tmp_path / "one",
            seed=0,
        ),
    )
    spec = write_spec(
        tmp_path / "launch",
        LaunchSpec(mode="dual", student=tiny_student, policy=cfg, seed=0, out_dir=tmp_path / "two", device=device),
        pairs=data,
        memory=memory(4),
    )
    if gpus == 1:
        with pytest.raises(ValueError, match="train_processes is 2, but torch sees 1 GPU"):
            run_launched(spec, 2, device="auto")
    if SETTING == "mps":
        with pytest.raises(ValueError, match="the Apple GPU is one device"):
            run_launched(spec, 2, device="mps")
    two = timed(f"dual, two processes, {device}", lambda: run_launched(spec, 2, device=device))
    assert two.metrics["processes"] == 2 and two.base_checksum == one.base_checksum
    assert np.allclose([h["loss"] for h in two.history], [h["loss"] for h in one.history], rtol=1e-3, atol=1e-4)
    load_policy(tiny_student, tmp_path / "two")
