"""The TrainingArguments every TRL trainer here shares, whatever it trains."""

from __future__ import annotations

from typing import Any

import torch


def trl_run_args(seed: int) -> dict[str, Any]:
    """No bf16 or activation checkpointing on a CPU (TRL turns both on by default; bf16 autocast is ~30x slower
    there), no saving, no reporting, no tqdm, no dataloader workers; `seed` for the weights and the data order."""
    on_gpu = torch.cuda.is_available()
    return dict(
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        activation_checkpointing=False,
        use_cpu=not on_gpu,
        save_strategy="no",
        report_to=[],
        seed=seed,
        data_seed=seed,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
