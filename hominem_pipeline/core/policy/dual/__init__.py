"""The dual-channel trainer: one LoRA, two channels, one short training loop.

Each step takes a batch of preference rows (prompt, chosen, rejected, intensity, safety) and memory rows
(instruction, response) and minimises `losses.dual_channel_loss`: the memory channel is the next-token
loss of every chosen reply and memory row, the reward channel the DPO loss of every pair, weighted by
its reward intensity; the safety gate skips, down-weights or inverts each pair by its safety score. The
policy's chosen and rejected sequences go through the model in one forward pass, the memory rows in
another (they are short, and would be padded to the pairs' length); the reference
(the same model with the adapter switched off) scores the pairs without gradients, as TRL's DPO does,
with TRL's fused LM head and with dropout off (TRL's DPO default), so a step costs what TRL's DPO step
costs. With `memory_margin` set the reference also scores the memory rows, which are then anchored
to it (`losses.dual_channel_loss`). TRL's trainers take no per-example weights, hence this loop; its
optimizer, schedule and clipping are the Hugging Face Trainer's defaults (AdamW, linear decay,
gradient norm clipped at 1).

The parts: `reference` (the reference's log-probabilities and their caches), `samplers` (which rows make a
batch), `labels` (each pair's intensity and safety), `monitor` (each channel's share of the gradient, and
the optimizer step), `trainer` (the loop).
"""

from hominem_pipeline.core.policy.dual.labels import PairLabels, pair_labels
from hominem_pipeline.core.policy.dual.monitor import CHANNELS, MAX_GRAD_NORM, ChannelMonitor
from hominem_pipeline.core.policy.dual.reference import (
    REFERENCE_CACHE,
    load_reference_cache,
    load_shipped_reference,
    reference_logps,
    save_reference_cache,
    sequence_key,
    shipped_reference_file,
)
from hominem_pipeline.core.policy.dual.samplers import batch_rows, beside_sampler, mixed_sampler
from hominem_pipeline.core.policy.dual.trainer import DualBatching, DualStart, DualTrainer, train_dual_adapter

__all__ = [
    "CHANNELS",
    "MAX_GRAD_NORM",
    "REFERENCE_CACHE",
    "ChannelMonitor",
    "DualBatching",
    "DualStart",
    "DualTrainer",
    "PairLabels",
    "batch_rows",
    "beside_sampler",
    "load_reference_cache",
    "load_shipped_reference",
    "mixed_sampler",
    "pair_labels",
    "reference_logps",
    "save_reference_cache",
    "sequence_key",
    "shipped_reference_file",
    "train_dual_adapter",
]
