"""Training LoRA adapters on the student. The base weights never change: only LoRA matrices train,
and the DPO reference is the same base with the adapter switched off."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.config import PolicyConfig

log = logging.getLogger(__name__)


def base_checksum(model: torch.nn.Module) -> str:
    """sha256 over every non-LoRA parameter, in name order: equal before and after training iff the base is
    untouched."""
    h = hashlib.sha256()
    for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if "lora_" in name:
            continue
        base_name = name.replace("base_model.model.", "").replace(".base_layer", "")
        h.update(base_name.encode())
        h.update(param.detach().to(torch.float32).cpu().numpy().tobytes())
    return h.hexdigest()


def lora_student(
    student_path: Path, cfg: PolicyConfig, init_adapter: Path | None = None, device: Any = None
) -> tuple[Any, Any, str]:
    """(the student in fp32 wrapped with a fresh LoRA adapter, or with `init_adapter` to train on from
    (an online update continues the live adapter, with its LoRA shape), its tokenizer, the base
    checksum): what every training mode starts from. Only the LoRA matrices require gradients. On
    `device` (None: `runtime.device`'s auto, `lm.device.resolve_device`), moved there once wrapped, so a fresh
    adapter starts from the same draws on every device."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hominem_pipeline.core.lm.models import quiet_hf_progress

    quiet_hf_progress()
    tokenizer = AutoTokenizer.from_pretrained(student_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(student_path, dtype=torch.float32)
    if device is None:
        from hominem_pipeline.core.lm.device import resolve_device

        device = resolve_device("auto")
    if init_adapter is not None:
        from peft import PeftModel

        adapter_config(init_adapter)
        model = PeftModel.from_pretrained(model, init_adapter, is_trainable=True).to(device)
        return model, tokenizer, base_checksum(model)
    lora = cfg.lora
    depth = model.config.num_hidden_layers
    if lora.layers is not None and lora.layers > depth:
        raise ValueError(
            f"policy.lora.layers is {lora.layers}, but the student {student_path} has {depth} decoder "
            f"layers; set it to 1-{depth}, or null for all"
        )
    layers = None if lora.layers is None else list(range(depth - lora.layers, depth))
    peft_config = PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        layers_to_transform=layers,
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, peft_config).to(device)
    return model, tokenizer, base_checksum(model)


def save_adapter(model: Any, tokenizer: Any, out_dir: Path, before: str) -> int:
    """Check that training left the base weights as they were (checksum `before`), then save the adapter
    (PEFT format) and the tokenizer; returns the number of trainable parameters."""
    if base_checksum(model) != before:
        raise RuntimeError("base weights changed during LoRA training; only adapter parameters may train")
    # PEFT reads the base's config from the folder an adapter names when it saves: the local student's, never a
    # hub id that an adapter trained on from a registered one names (`name_base` writes that after saving)
    local = getattr(model.get_base_model().config, "_name_or_path", None)
    for config in getattr(model, "peft_config", {}).values():
        config.base_model_name_or_path = local or config.base_model_name_or_path
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def trl_common_args(cfg: PolicyConfig, seed: int, device: Any) -> dict[str, Any]:
    """The TrainingArguments every policy trainer shares: `trl_run_args` on `device` (where `lora_student` put the
    model), with steps and learning rate from `cfg`."""
    from hominem_pipeline.core.lm.trl_args import trl_run_args

    return dict(
        **trl_run_args(seed, device),
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate,
        max_steps=cfg.max_steps,
        logging_steps=1,
    )


def per_process(batch_size: int) -> int:
    """A TRL trainer's per-device batch under `accelerate launch` (WORLD_SIZE processes): the configured
    batch shared out, so the batch a step learns from is the same size however many processes run it."""
    import os

    return max(1, batch_size // int(os.environ.get("WORLD_SIZE", "1")))


def collect_logs(
    history: list[dict[str, float]],
    progress: Progress,
    on_log: Callable[[int, dict[str, float]], None] | None,
    key: str = "loss",
):
    """A TrainerCallback that appends each logged step to `history`, forwards it to `on_log` and advances
    `progress`."""
    from transformers import TrainerCallback

    class _Collect(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and key in logs:
                record = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float))}
                history.append({"step": state.global_step, **record})
                if on_log:
                    on_log(state.global_step, record)
                progress.advance(state.global_step - progress.done, **{key: f"{record[key]:.4f}"})

    return _Collect()


@dataclass
class AdapterTraining:
    """What training an adapter returns, whatever the mode."""

    metrics: dict[
        str, float | int | None
    ]  # steps, train_seconds, seconds_per_step, final_loss, trainable_parameters, and the mode's own
    base_checksum: str  # of the base weights, checked unchanged after training
    history: list[dict[str, float]]  # one entry per logged step
    channel_contributions: dict[str, float]  # each loss channel's share of the signal (sft, reward)
    channels: dict[str, Any] = field(
        default_factory=dict
    )  # the mode's own accounting (rows per channel, gated examples, ...)

    @property
    def grad_norms(self) -> list[float]:
        return [h["grad_norm"] for h in self.history if "grad_norm" in h]


def run_trl(
    trainer: Any, tokenizer: Any, out_dir: Path, before: str, history: list[dict[str, float]]
) -> AdapterTraining:
    """Train a TRL trainer whose callbacks fill `history`, save the adapter (base checked unchanged) and
    return the figures every mode reports."""
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # our progress lines replace its printed dicts
    started = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - started
    if trainer.accelerator.is_main_process:  # under `accelerate launch` every process holds the adapter: one writes it
        trainable = save_adapter(trainer.model, tokenizer, out_dir, before)
    else:
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    trainer.accelerator.wait_for_everyone()
    metrics = {
        "steps": len(history),
        "train_seconds": seconds,
        "seconds_per_step": seconds / max(1, len(history)),
        "final_loss": history[-1].get("loss") if history else None,
        "trainable_parameters": trainable,
    }
    return AdapterTraining(metrics, before, history, {"sft": 0.0, "reward": 1.0})


def name_base(adapter_dir: Path, name: str) -> None:
    """Record the adapter's base in its `adapter_config.json` by `name` (the student's hub id, else its
    folder's name) instead of the absolute path PEFT writes: the folder loads on any machine, beside that
    machine's own copy of the base (METADATA's `base_checksum` says whether it is the same)."""
    import json

    config_file = Path(adapter_dir) / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = name
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def adapter_config(adapter_path: Path) -> dict[str, Any]:
    """The adapter's `adapter_config.json`, or a clear error when the folder is not a PEFT adapter."""
    import json

    config_file = Path(adapter_path) / "adapter_config.json"
    if not config_file.is_file():
        raise FileNotFoundError(
            f"{adapter_path} is not a PEFT adapter folder (no adapter_config.json); pass a "
            "data/lora_adapter/<date>/<version> folder"
        )
    return json.loads(config_file.read_text())


def adapter_reward_model(adapter_path: Path, data_dir: Path) -> Path | None:
    """The reward model folder an adapter's METADATA.json names (the one it was trained with), or None
    when the adapter has no METADATA (one trained outside the pipeline)."""
    from hominem_pipeline.core.policy.metadata import AdapterMetadata

    meta = AdapterMetadata.read(Path(adapter_path))
    return None if meta is None else meta.reward_model.path(data_dir)


def load_policy(student_path: Path, adapter_path: Path | None, device=None):
    """(model, tokenizer) for generation: the base alone, or base + adapter (PEFT, adapter switchable),
    on `device` (None: the CPU)."""
    from hominem_pipeline.core.lm.models import load_student

    if adapter_path is not None:
        adapter_config(adapter_path)
    model, tokenizer = load_student(student_path, device)
    if adapter_path is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_path)
        model.eval()
    return model, tokenizer


@contextlib.contextmanager
def merged(model: Any):
    """Inside, the PEFT `model`'s active adapter is added into the base weights (`merge_adapter`), and taken
    out again after (`unmerge_adapter`): the same outputs up to float rounding, at the base's speed (an
    unmerged LoRA runs its low-rank matmuls beside every projection at every decoding step).
    The base alone (`disable_adapter`) is not available inside."""
    model.base_model.merge_adapter()
    try:
        yield model
    finally:
        model.base_model.unmerge_adapter()
