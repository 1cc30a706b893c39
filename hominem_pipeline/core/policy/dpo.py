"""DPO on the preference pairs with TRL's DPOTrainer (LoRA on the student; the reference is the base
with the adapter switched off)."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.config import PolicyConfig
from hominem_pipeline.core.policy.lora import (
    AdapterTraining,
    collect_logs,
    lora_student,
    per_process,
    run_trl,
    trl_common_args,
)
from hominem_pipeline.core.policy.sequences import encode

log = logging.getLogger(__name__)


def pairs_to_dpo_dataset(pairs: pd.DataFrame):
    """Conversational DPO rows; TRL applies the student's chat template. Each row also says whether its
    replies ended (`chosen_finished`, `rejected_finished`; True where the pairs do not say)."""
    from datasets import Dataset

    return Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": row.prompt}],
                "chosen": [{"role": "assistant", "content": row.chosen}],
                "rejected": [{"role": "assistant", "content": row.rejected}],
                "chosen_finished": bool(getattr(row, "chosen_finished", True)),
                "rejected_finished": bool(getattr(row, "rejected_finished", True)),
            }
            for row in pairs.itertuples()
        ]
    )


def dpo_trainer_class():
    """TRL's DPOTrainer, except that a reply cut at the teacher's token budget keeps no end-of-turn (TRL
    ends every reply with the template's): it was not ended there, so DPO must not teach a stop there."""
    from trl import DPOTrainer

    class EndedRepliesDPOTrainer(DPOTrainer):
        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            dataset = super()._prepare_dataset(dataset, processing_class, args, dataset_name)
            if "chosen_finished" not in dataset.column_names:
                return dataset
            tokenizer = getattr(processing_class, "tokenizer", processing_class)
            tail = len(encode(tokenizer, "?", "A reply.", 64)[0]) - len(
                encode(tokenizer, "?", "A reply.", 64, end_of_turn=False)[0]
            )

            def drop_end_of_turn(example):
                for side in ("chosen", "rejected"):
                    if not example[f"{side}_finished"] and tail:
                        example[f"{side}_ids"] = example[f"{side}_ids"][:-tail]
                return example

            return dataset.map(drop_end_of_turn)

    return EndedRepliesDPOTrainer


def train_dpo_adapter(
    pairs: pd.DataFrame,
    *,
    student_path: Path,
    cfg: PolicyConfig,
    out_dir: Path,
    seed: int,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
    device: Any = None,
) -> AdapterTraining:
    """LoRA DPO through TRL on `device` (None: `runtime.device`'s auto); saves the adapter (PEFT format) and the
    tokenizer to `out_dir`."""
    from trl import DPOConfig

    if pairs.empty:
        raise ValueError("DPO needs at least one preference pair; preference_pairs produced none")
    torch.manual_seed(seed)
    model, tokenizer, before = lora_student(student_path, cfg, device=device)
    history: list[dict[str, float]] = []
    progress = Progress("DPO training", cfg.max_steps, log, unit="steps")
    with tempfile.TemporaryDirectory(prefix="hominem-dpo-") as scratch:
        args = DPOConfig(
            output_dir=scratch,
            per_device_train_batch_size=per_process(cfg.batch_size),
            beta=cfg.beta,
            max_length=cfg.max_length,
            **trl_common_args(cfg, seed, model.device),
        )
        # A PeftModel: TRL's reference is the same model with the adapter disabled.
        trainer = dpo_trainer_class()(
            model=model,
            args=args,
            train_dataset=pairs_to_dpo_dataset(pairs),
            processing_class=tokenizer,
            callbacks=[collect_logs(history, progress, on_log)],
        )
        result = run_trl(trainer, tokenizer, out_dir, before, history)
    last = history[-1] if history else {}
    result.metrics.update(
        final_reward_accuracy=last.get("rewards/accuracies"), final_reward_margin=last.get("rewards/margins")
    )
    return result
