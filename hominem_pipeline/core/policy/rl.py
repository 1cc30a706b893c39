"""RL on the reward model: the student samples several replies per prompt, the reward model scores them,
and TRL's GRPO or RLOO moves the LoRA adapter toward the replies that score above their group.

The reward is the reward model's scalar, or its reward vector weighted by `preferences.dimension_weights`;
the safety gate (`losses.gate_group_rewards`) then acts on it per completion, by the reward model's
safety score. The KL penalty's reference is the base: the same model with the adapter switched off."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.common.schema import SCALAR_RANGE
from hominem_pipeline.core.config import PolicyConfig
from hominem_pipeline.core.policy.losses import SafetyGate, gate_group_rewards

if TYPE_CHECKING:
    from hominem_pipeline.core.policy.lora import AdapterTraining
    from hominem_pipeline.core.reward.model import RewardModel

log = logging.getLogger(__name__)


class GatedReward:
    """The reward function TRL calls with a generation batch (consecutive groups of `group_size`
    completions per prompt): reward model scores, the configured reward, the safety gate. Keeps the
    running counts of gated completions for the adapter's metadata."""

    __name__ = "reward_model"  # TRL logs each reward function under its name

    def __init__(
        self, reward_model: RewardModel, cfg: PolicyConfig, group_size: int, weights: Mapping[str, float] | None = None
    ):
        self.reward_model = reward_model
        self.reward = cfg.rl.reward
        self.gate = SafetyGate.from_config(cfg.safety_gate)
        self.group_size = group_size
        dims = reward_model.dimensions
        w = np.array([(weights or {}).get(d, 1.0) for d in dims], dtype=np.float64)
        self.weights = w / w.sum()
        self.counts = {"completions": 0, "empty": 0, "skipped": 0, "downweighted": 0, "inverted": 0}

    def raw(self, prompts: Sequence[str], replies: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(reward, safety) per reply; an empty reply (not scored, as in evaluation) gets the lowest
        scalar and counts as safe."""
        from hominem_pipeline.core.reward.model import score_side

        scores = score_side(self.reward_model, prompts, replies)
        empty = np.isnan(scores["scalar"])
        reward = scores["scalar"] if self.reward == "scalar" else scores["vector"] @ self.weights
        self.counts["empty"] += int(empty.sum())
        return np.where(empty, SCALAR_RANGE[0], reward), np.where(empty, 1.0, scores["safety_score"])

    def __call__(self, prompts: list, completions: list, **_: Any) -> list[float]:
        texts = [_text(p) for p in prompts]
        replies = [_text(c) for c in completions]
        reward, safety = self.raw(texts, replies)
        weight, inverted = self.gate(torch.tensor(safety))
        self.counts["completions"] += len(replies)
        self.counts["skipped"] += int((weight == 0).sum())
        self.counts["downweighted"] += int(((weight > 0) & (weight < 1)).sum())
        self.counts["inverted"] += int(inverted.sum())
        gated = gate_group_rewards(torch.tensor(reward), torch.tensor(safety), self.gate, self.group_size)
        return [float(x) for x in gated]


def _text(item: Any) -> str:
    """A conversational prompt or completion (list of messages) or plain text, as the last message's text."""
    if isinstance(item, list):
        return str(item[-1]["content"]) if item else ""
    return str(item)


def train_rl_adapter(
    prompts: Sequence[str],
    *,
    reward_model: RewardModel,
    student_path: Path,
    cfg: PolicyConfig,
    out_dir: Path,
    seed: int,
    dimension_weights: Mapping[str, float] | None = None,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
    device: Any = None,
) -> AdapterTraining:
    """GRPO or RLOO (cfg.rl.algorithm) on `prompts` with the reward model's gated reward, on `device` (None:
    `runtime.device`'s auto); saves the adapter (PEFT format) and the tokenizer to `out_dir`. Each step samples
    `rl.num_generations` completions for each of `batch_size` prompts."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    from hominem_pipeline.core.policy.lora import (
        collect_logs,
        lora_student,
        per_process,
        run_trl,
        trl_common_args,
    )

    prompts = list(dict.fromkeys(p for p in prompts if p.strip()))
    if not prompts:
        raise ValueError("RL needs at least one prompt; the preference pairs of the window name none")
    rl = cfg.rl
    torch.manual_seed(seed)
    model, tokenizer, before = lora_student(student_path, cfg, device=device)
    reward = GatedReward(reward_model, cfg, rl.num_generations, dimension_weights)
    history: list[dict[str, float]] = []
    progress = Progress(f"RL training ({rl.algorithm})", cfg.max_steps, log, unit="steps")
    config_cls, trainer_cls = (GRPOConfig, GRPOTrainer) if rl.algorithm == "grpo" else (RLOOConfig, RLOOTrainer)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in prompts])
    with tempfile.TemporaryDirectory(prefix="hominem-rl-") as scratch:
        args = config_cls(
            output_dir=scratch,
            per_device_train_batch_size=per_process(cfg.batch_size) * rl.num_generations,
            num_generations=rl.num_generations,
            max_completion_length=rl.max_new_tokens,
            temperature=rl.temperature,
            beta=rl.kl_beta,
            **trl_common_args(cfg, seed, model.device),
        )
        trainer = trainer_cls(
            model=model,
            reward_funcs=[reward],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[collect_logs(history, progress, on_log, key="reward")],
        )
        result = run_trl(trainer, tokenizer, out_dir, before, history)
    result.metrics.update(
        final_reward=history[-1].get("reward") if history else None,
        first_reward=history[0].get("reward") if history else None,
    )
    result.channels = {"prompts": len(prompts), "algorithm": rl.algorithm, "reward": rl.reward, "gated": reward.counts}
    return result
