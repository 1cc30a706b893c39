"""Training LoRA adapters on the student. The base weights never change: only LoRA matrices train,
and the DPO reference is the same base with the adapter switched off."""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from hominem_pipeline.core.config import PolicyConfig
from hominem_pipeline.core.progress import Progress

log = logging.getLogger(__name__)


def base_checksum(model: torch.nn.Module) -> str:
    """sha256 over every non-LoRA parameter, in name order: equal before and after training iff the base is untouched."""
    h = hashlib.sha256()
    for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if "lora_" in name:
            continue
        base_name = name.replace("base_model.model.", "").replace(".base_layer", "")
        h.update(base_name.encode())
        h.update(param.detach().to(torch.float32).cpu().numpy().tobytes())
    return h.hexdigest()


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

    from hominem_pipeline.core.dual_trainer import encode

    class EndedRepliesDPOTrainer(DPOTrainer):
        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            dataset = super()._prepare_dataset(dataset, processing_class, args, dataset_name)
            if "chosen_finished" not in dataset.column_names:
                return dataset
            tokenizer = getattr(processing_class, "tokenizer", processing_class)
            tail = len(encode(tokenizer, "?", "A reply.", 64)[0]) - len(encode(tokenizer, "?", "A reply.", 64, end_of_turn=False)[0])

            def drop_end_of_turn(example):
                for side in ("chosen", "rejected"):
                    if not example[f"{side}_finished"] and tail:
                        example[f"{side}_ids"] = example[f"{side}_ids"][:-tail]
                return example

            return dataset.map(drop_end_of_turn)

    return EndedRepliesDPOTrainer


def lora_student(student_path: Path, cfg: PolicyConfig) -> tuple[Any, Any, str]:
    """(the student in fp32 wrapped with a fresh LoRA adapter, its tokenizer, the base checksum): what
    every training mode starts from. Only the LoRA matrices require gradients."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hominem_pipeline.core.models import quiet_hf_progress

    quiet_hf_progress()
    tokenizer = AutoTokenizer.from_pretrained(student_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(student_path, dtype=torch.float32)
    if torch.cuda.is_available():
        model = model.to("cuda")
    lora = cfg.lora
    peft_config = PeftLoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
    model = get_peft_model(model, peft_config)
    return model, tokenizer, base_checksum(model)


def save_adapter(model: Any, tokenizer: Any, out_dir: Path, before: str) -> int:
    """Check that training left the base weights as they were (checksum `before`), then save the adapter
    (PEFT format) and the tokenizer; returns the number of trainable parameters."""
    if base_checksum(model) != before:
        raise RuntimeError("base weights changed during LoRA training; only adapter parameters may train")
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def trl_common_args(cfg: PolicyConfig, seed: int) -> dict[str, Any]:
    """The TrainingArguments every TRL trainer here shares: steps and learning rate from `cfg`; no bf16
    or gradient checkpointing on a CPU (TRL turns both on by default; bf16 autocast is ~30x slower
    there), no saving, no reporting, no tqdm."""
    on_gpu = torch.cuda.is_available()
    return dict(
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate,
        max_steps=cfg.max_steps,
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        gradient_checkpointing=False,
        use_cpu=not on_gpu,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=seed,
        data_seed=seed,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def collect_logs(history: list[dict[str, float]], progress: Progress, on_log: Callable[[int, dict[str, float]], None] | None, key: str = "loss"):
    """A TrainerCallback that appends each logged step to `history`, forwards it to `on_log` and advances `progress`."""
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


def train_dpo_adapter(
    pairs: pd.DataFrame,
    *,
    student_path: Path,
    cfg: PolicyConfig,
    out_dir: Path,
    seed: int,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """LoRA DPO through TRL; saves the adapter (PEFT format) and the tokenizer to `out_dir`."""
    from trl import DPOConfig

    if pairs.empty:
        raise ValueError("DPO needs at least one preference pair; preference_pairs produced none")
    torch.manual_seed(seed)
    model, tokenizer, before = lora_student(student_path, cfg)
    history: list[dict[str, float]] = []
    progress = Progress("DPO training", cfg.max_steps, log, unit="steps")
    with tempfile.TemporaryDirectory(prefix="hominem-dpo-") as scratch:
        args = DPOConfig(
            output_dir=scratch,
            per_device_train_batch_size=cfg.batch_size,
            beta=cfg.beta,
            max_length=cfg.max_length,
            **trl_common_args(cfg, seed),
        )
        # A PeftModel: TRL's reference is the same model with the adapter disabled.
        trainer = dpo_trainer_class()(model=model, args=args, train_dataset=pairs_to_dpo_dataset(pairs), processing_class=tokenizer,
                             callbacks=[collect_logs(history, progress, on_log)])
        result = run_trl(trainer, tokenizer, out_dir, before, history)
    last = history[-1] if history else {}
    return {**result, "final_reward_accuracy": last.get("rewards/accuracies"), "final_reward_margin": last.get("rewards/margins")}


def run_trl(trainer: Any, tokenizer: Any, out_dir: Path, before: str, history: list[dict[str, float]]) -> dict[str, Any]:
    """Train a TRL trainer whose callbacks fill `history`, save the adapter (base checked unchanged) and
    return the figures every mode reports."""
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # our progress lines replace its printed dicts
    started = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - started
    trainable = save_adapter(trainer.model, tokenizer, out_dir, before)
    return {
        "steps": len(history),
        "train_seconds": seconds,
        "seconds_per_step": seconds / max(1, len(history)),
        "final_loss": history[-1].get("loss") if history else None,
        "trainable_parameters": trainable,
        "base_checksum": before,
        "grad_norms": [h["grad_norm"] for h in history if "grad_norm" in h],
        "history": history,
        "channel_contributions": {"sft": 0.0, "reward": 1.0},
    }


def adapter_config(adapter_path: Path) -> dict[str, Any]:
    """The adapter's `adapter_config.json`, or a clear error when the folder is not a PEFT adapter."""
    import json

    config_file = Path(adapter_path) / "adapter_config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{adapter_path} is not a PEFT adapter folder (no adapter_config.json); pass a data/lora_adapter/<date>/<version> folder")
    return json.loads(config_file.read_text())


def adapter_reward_model(adapter_path: Path, data_dir: Path) -> Path | None:
    """The reward model folder an adapter's METADATA.json names (the one it was trained with), or None
    when the adapter has no METADATA (one trained outside the pipeline)."""
    import json

    meta_file = Path(adapter_path) / "METADATA.json"
    if not meta_file.is_file():
        return None
    ref = json.loads(meta_file.read_text())["reward_model"]
    return Path(data_dir) / ref["asset"] / ref["partition"] / ref["version"]


def load_policy(student_path: Path, adapter_path: Path | None):
    """(model, tokenizer) for generation: the base alone, or base + adapter (PEFT, adapter switchable)."""
    from hominem_pipeline.core.models import load_student

    if adapter_path is not None:
        adapter_config(adapter_path)
    model, tokenizer = load_student(student_path)
    if adapter_path is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_path)
        model.eval()
    return model, tokenizer


def export_merged(adapter_path: Path, out_dir: Path, student_path: Path | None = None) -> dict[str, Any]:
    """Merge a LoRA adapter into its base and save a plain HF model (safetensors) with the tokenizer:
    what LM Studio, llama.cpp's `convert_hf_to_gguf.py` and any `from_pretrained` can load. The base is
    `student_path`, else the one the adapter names in its `adapter_config.json`."""
    import json

    adapter_path, out_dir = Path(adapter_path), Path(out_dir)
    base = Path(student_path or adapter_config(adapter_path)["base_model_name_or_path"])
    if not (base / "config.json").is_file():
        raise FileNotFoundError(f"the adapter's base model {base} is missing; pass the student folder with --base")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty; choose a new folder for the merged model")
    model, tokenizer = load_policy(base, adapter_path)
    merged = model.merge_and_unload()
    out_dir.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    info = {"base": str(base), "adapter": str(adapter_path), "format": "safetensors, fp32, LoRA merged"}
    (out_dir / "EXPORT.json").write_text(json.dumps(info, indent=2) + "\n")
    return info
