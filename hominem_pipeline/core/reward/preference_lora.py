"""A reward backbone that learns from people's preferences: a LoRA on the backbone's top layers, trained
end to end with TRL's `RewardTrainer` (Bradley-Terry on a sequence-classification head, with a margin
from the choice's strength) on people's pairs, read in the reward model's own frame.

The reward model's heads read the backbone frozen. Here the backbone itself is pulled toward what people
prefer: the score of the exchange is a linear read of the state at its last token, and a pair asks
`score(chosen) - score(rejected) > margin`. TRL does the loss, the batching and the optimisation and
PEFT the adapter; what is written here is what they do not do: the exchange cut and framed as the heads
read it (`encoding.make_encoder`, so the prompt loses its start, never the reply), the backbone cut to
the depth the heads read, the LoRA on its top `layers` only (the lower ones then need no backward pass,
which is what makes training possible on a CPU), and a per-pair weight folded into the margin.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class PreferenceLoraSettings:
    """How the backbone learns from people's pairs.

    Args:
        rank: LoRA rank, >= 1.
        alpha: LoRA scaling numerator (the update is scaled by alpha / rank).
        layers: the top N layers of the kept depth that get a LoRA (1 to depth); the rest stay frozen.
        target_modules: the projections that get a LoRA in those layers (None: every linear layer in them).
        epochs: passes over the pairs.
        learning_rate: AdamW's peak learning rate (linear decay).
        batch_size: pairs per optimizer step.
        margin: the Bradley-Terry margin for a pair of strength 1 (a pair's `strength`, 0-1, scales it;
            0: no margin).
        seed: the LoRA's and the head's initialisation and the pairs' order.
    """

    rank: int = 8
    alpha: int = 16
    layers: int = 6
    target_modules: tuple[str, ...] | None = None
    epochs: float = 1.0
    learning_rate: float = 2e-4
    batch_size: int = 8
    margin: float = 0.0
    seed: int = 0


def _cut_model(base: Path | str, depth: int | None) -> tuple[Any, Any]:
    """The base as a one-output sequence classifier, cut to `depth` layers, and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from hominem_pipeline.core.reward.encoding import pad_id
    from hominem_pipeline.core.reward.network import keep_layers

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = pad_id(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    keep_layers(model.base_model, depth)
    return model, tokenizer


def _linear_names(model: Any) -> list[str]:
    """The names of the backbone's linear layers (q_proj, ..., down_proj; query, ..., dense), not the score head's."""
    head = {"score", "classifier"}
    return sorted(
        {
            name.rpartition(".")[2]
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and not head & set(name.split("."))
        }
    )


def _lora_layers(model: Any, layers: int) -> list[int] | None:
    """The indices of the top `layers` layers; None for all of them (then the projections outside the layer
    stack, such as an encoder's pooler, get a LoRA too)."""
    depth = model.config.num_hidden_layers
    if not 1 <= layers <= depth:
        raise ValueError(f"preference LoRA layers {layers}: use 1 to {depth} (the backbone's kept depth)")
    return None if layers == depth else list(range(depth - layers, depth))


def _rows(pairs: pd.DataFrame, read: Callable[[str, str], list[int]], settings: PreferenceLoraSettings) -> list[dict]:
    """TRL's tokenized preference rows: each reply read in the frame, its margin from the pair's strength."""
    strength = pairs["strength"].fillna(1.0) if "strength" in pairs else np.ones(len(pairs))
    return [
        {"chosen_ids": read(p, c), "rejected_ids": read(p, r), "margin": float(settings.margin * s)}
        for p, c, r, s in zip(pairs["prompt"], pairs["chosen"], pairs["rejected"], strength)
    ]


def _trainer_args(settings: PreferenceLoraSettings, device: Any) -> Any:
    """RewardConfig for `settings`, on the arguments every TRL trainer here shares (`trl_run_args`, on `device`)."""
    from trl import RewardConfig

    from hominem_pipeline.core.lm.trl_args import trl_run_args

    return RewardConfig(
        **trl_run_args(settings.seed, device),
        output_dir=tempfile.mkdtemp(prefix="hominem-reward-trainer-"),  # nothing is saved there (save_strategy no)
        per_device_train_batch_size=settings.batch_size,
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=0.05,
        max_length=None,  # the exchanges are cut to the reward model's max_length by `encode`
        logging_steps=5,
    )


def train_preference_lora(
    base: Path | str,
    pairs: pd.DataFrame,
    encode: Callable[[Any], Callable[[str, str], list[int]]],
    out: Path,
    *,
    depth: int | None,
    settings: PreferenceLoraSettings = PreferenceLoraSettings(),
    progress: Callable[[dict[str, float]], None] | None = None,
    device: Any = None,
) -> dict[str, float]:
    """Train the LoRA and the score head on people's pairs and save them in `out`, on `device` (None:
    `runtime.device`'s auto).

    Args:
        base: the backbone's HF folder.
        pairs: prompt, chosen, rejected, and optionally strength (0-1: how sure the person was; 1 when absent).
        encode: tokenizer -> ((prompt, reply) -> token ids), the frame the reward model reads.
        out: the folder for the adapter (PEFT's files: the LoRA and the score head).
        depth: the layers of the base kept (the reward model's `backbone.depth`; None: all).
        settings: the LoRA and the optimisation.
        progress: called with TRL's logged figures (loss, accuracy, margin, epoch) as training goes.

    Returns:
        TRL's last logged training figures (train_loss, ...).
    """
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import RewardTrainer

    if pairs.empty:
        raise ValueError("no people's pairs to train the preference LoRA on")
    torch.manual_seed(settings.seed)
    model, tokenizer = _cut_model(base, depth)
    lora = LoraConfig(
        task_type="SEQ_CLS",
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=0.0,
        target_modules=list(settings.target_modules or _linear_names(model)),
        layers_to_transform=_lora_layers(model, settings.layers),
    )
    from hominem_pipeline.core.lm.device import resolve_device

    args = _trainer_args(settings, device if device is not None else resolve_device("auto"))

    class Report(TrainerCallback):
        def on_log(self, _args, state, control, logs=None, **kwargs):
            if progress and logs:
                progress({"step": state.global_step, "steps": state.max_steps, **logs})

    trainer = RewardTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(_rows(pairs, encode(tokenizer), settings)),
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[Report()],
    )
    try:
        result = trainer.train()
    finally:
        shutil.rmtree(args.output_dir, ignore_errors=True)
    save_preference_lora(trainer.model, out)
    return dict(result.metrics)


def save_preference_lora(model: Any, out: Path) -> None:
    """The PEFT adapter (the LoRA and the score head it saves beside it) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)


def load_preference_lora(base: Path | str, adapter: Path, depth: int | None, *, merge: bool = True) -> tuple[Any, Any]:
    """The cut base with the trained LoRA (merged) and score head: a sequence classifier, in eval mode."""
    from peft import PeftModel

    model, tokenizer = _cut_model(base, depth)
    model = PeftModel.from_pretrained(model, adapter)
    if merge:
        model = model.merge_and_unload()
    return model.eval(), tokenizer


@torch.inference_mode()
def preference_scores(
    model: Any,
    tokenizer: Any,
    read: Callable[[str, str], list[int]],
    prompts: Sequence[str],
    replies: Sequence[str],
    batch_size: int = 16,
) -> np.ndarray:
    """The trained score of each (prompt, reply), read as in training."""
    from hominem_pipeline.core.reward.encoding import length_sorted_batches, pad_id

    encoded = [read(p, r) for p, r in zip(prompts, replies)]
    scores = np.zeros(len(encoded), dtype=np.float32)
    device = next(model.parameters()).device
    for idx, ids, mask in length_sorted_batches(encoded, batch_size, pad_id(tokenizer)):
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        scores[idx] = logits[:, 0].float().cpu().numpy()
    return scores
