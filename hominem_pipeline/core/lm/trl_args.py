"""The TrainingArguments every TRL trainer here shares, whatever it trains."""

from __future__ import annotations

from typing import Any

import torch


def trl_run_args(seed: int, device: Any) -> dict[str, Any]:
    """Training on `device` (a torch device: `runtime.device` resolved, or a launched process's own): the CPU
    when it is the CPU (transformers otherwise takes any GPU it sees), bf16 mixed precision on a CUDA GPU that
    has it, fp32 elsewhere (TRL turns bf16 on by default: ~30x slower on a CPU, and the Apple GPU's autocast
    is partial); no activation checkpointing, no saving, no reporting, no tqdm, no dataloader workers; `seed`
    for the weights and the data order."""
    kind = torch.device(device).type
    return dict(
        bf16=kind == "cuda" and torch.cuda.is_bf16_supported(),
        activation_checkpointing=False,
        use_cpu=kind == "cpu",
        save_strategy="no",
        report_to=[],
        seed=seed,
        data_seed=seed,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
