"""The heads (and an unfrozen backbone) trained by gradient (`head_fit: gradient`).

Per ensemble member, each batch minimises the bootstrap-weighted regression losses on the teacher's
labels plus a Bradley-Terry loss on the scalar over same-prompt teacher pairs and human pairs (and on
each tagged people's pair's own dimension), and optionally an auxiliary loss predicting the embedding
of the teacher's rationale. Training stops early when the validation loss (on prompts held out)
stops falling; the best epoch's state is kept.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.reward.encoding import pad_batch
from hominem_pipeline.core.reward.training.fit import HeadsFit
from hominem_pipeline.core.reward.training.prepare import PreparedTraining
from hominem_pipeline.core.reward.validation import _pct

log = logging.getLogger(__name__)


def regression_losses(prep: PreparedTraining, seqs: torch.Tensor, heads: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Per head: the bootstrap-weighted squared error over the batch's labeled sequences and members."""
    labeled = seqs < prep.data.labeled
    if not labeled.any():
        return {}
    rows, bw = seqs[labeled], prep.seq_boot[seqs[labeled]]  # bw: (b, M)
    out = {}
    for k in prep.loss_weights:
        err = (heads[k][labeled] - prep.data.targets[k][rows].unsqueeze(1)) ** 2
        if k == "vector":
            err = err.mean(-1)
        out[k] = (err * bw).sum() / bw.sum().clamp(min=1e-6)
    return out


def pair_loss(
    prep: PreparedTraining, seqs: np.ndarray, scalar: torch.Tensor, vector: torch.Tensor | None = None
) -> torch.Tensor | None:
    """Bradley-Terry: -log sigmoid(scale * (s_preferred - s_other)), per member, weighted. With `vector`
    (b, M, D): the same on each tagged people's pair's own dimension instead of the scalar."""
    data = prep.data
    which = data.pairs_within(seqs)
    if vector is not None:
        which = which[data.pair_dimension[which] >= 0]
        scalar = vector[..., torch.as_tensor(data.pair_dimension[which])] if len(which) else scalar
    else:
        which = which[data.pair_scalar[which]]  # a nudge's pair says nothing about the scalar
    if len(which) == 0:
        return None
    position = {s: i for i, s in enumerate(seqs.tolist())}
    first = torch.tensor([position[s] for s in data.pairs[which, 0]])
    second = torch.tensor([position[s] for s in data.pairs[which, 1]])
    weight = torch.tensor(data.pair_weight[which], dtype=torch.float32).unsqueeze(1)
    pw = weight * prep.seq_boot[torch.as_tensor(data.pairs[which, 0])]
    scale = prep.cfg.pair_loss.scale
    if vector is not None:  # (b, M, pairs) -> each pair's own dimension on its two rows: (pairs, M)
        columns = torch.arange(len(which))
        logits = scale * (scalar[first, :, columns] - scalar[second, :, columns])
    else:
        logits = scale * (scalar[first] - scalar[second])
    return (nn.functional.softplus(-logits) * pw).sum() / pw.sum().clamp(min=1e-6)


def _optimizer(prep: PreparedTraining) -> torch.optim.Optimizer:
    """AdamW over the heads (and the rationale head) and whatever of the backbone trains, each at its own rate."""
    net, cfg = prep.net, prep.cfg
    head_params = [p for n, p in net.named_parameters() if not n.startswith("backbone.")]
    if prep.rationale_head is not None:
        head_params += list(prep.rationale_head.parameters())
    backbone_params = [p for p in net.backbone.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        ([{"params": backbone_params, "lr": cfg.learning_rate}] if backbone_params else [])
        + [{"params": head_params, "lr": cfg.head_learning_rate}],
        weight_decay=cfg.weight_decay,
    )


def batch_losses(prep: PreparedTraining, batch: np.ndarray) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(the batch's total loss, each part of it)."""
    net, cfg, data = prep.net, prep.cfg, prep.data
    seqs = torch.as_tensor(batch)
    if prep.frozen is not None:
        pooled = prep.frozen[seqs]
    else:
        columns = None if prep.guards is None else prep.guards[seqs]
        pooled = net.features(*pad_batch([data.encoded[i] for i in batch], prep.pad), columns)
    heads = net.heads(pooled)
    parts = regression_losses(prep, seqs, heads)
    loss = sum((prep.loss_weights[k] * v for k, v in parts.items()), torch.zeros(()))
    bt = pair_loss(prep, batch, heads["scalar"])
    if bt is not None:
        parts["pair"] = bt
        loss = loss + cfg.pair_loss.weight * bt
    dim_bt = pair_loss(prep, batch, heads["scalar"], heads["vector"]) if cfg.dimension_pairs else None
    if dim_bt is not None:  # tagged people's pairs on their own dimension, as the scalar's pairs
        parts["dimension_pair"] = dim_bt
        loss = loss + cfg.pair_loss.weight * dim_bt
    if prep.rationale_head is not None:
        explained = prep.has_rationale[seqs]
        if explained.any():
            guess = prep.rationale_head(net.dropout(pooled[explained]))
            target = prep.rationale_targets[seqs[explained]]
            parts["rationale"] = (1 - nn.functional.cosine_similarity(guess, target, dim=-1)).mean()
            loss = loss + cfg.rationale_weight * parts["rationale"]
    return loss, parts


def train_epoch(prep: PreparedTraining, optimizer: torch.optim.Optimizer, epoch: int, progress: Progress) -> dict:
    """One pass over the training prompts' batches; the mean of each loss part per sequence."""
    prep.net.train()
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for batch in prep.data.batches(prep.train_groups, prep.cfg.batch_size, prep.rng):
        loss, parts = batch_losses(prep, batch)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], 1.0)
        optimizer.step()
        for k, v in parts.items():
            totals[k] = totals.get(k, 0.0) + v.item() * len(batch)
            counts[k] = counts.get(k, 0) + len(batch)
        progress.advance(1, epoch=epoch, loss=f"{loss.item():.4f}")
    return {("train_mse_" if k in prep.loss_weights else "train_loss_") + k: totals[k] / counts[k] for k in totals}


def fit_gradient_heads(prep: PreparedTraining, on_epoch: Callable[[int, dict[str, float]], None] | None) -> HeadsFit:
    """Train for at most `epochs` epochs with early stopping on the validation loss (see the module's
    docstring); the best epoch's state and figures are kept."""
    cfg = prep.cfg
    optimizer = _optimizer(prep)
    steps_per_epoch = len(prep.data.batches(prep.train_groups, cfg.batch_size, np.random.default_rng(0)))
    progress = Progress("reward model training", cfg.epochs * steps_per_epoch, log, unit="steps")
    best: HeadsFit | None = None
    best_loss, stale, history = math.inf, 0, []
    for epoch in range(1, cfg.epochs + 1):
        metrics = train_epoch(prep, optimizer, epoch, progress)
        full = prep.predict_held_out()
        metrics.update(prep.evaluate(full))
        history.append({"epoch": epoch, **metrics})
        log.info(
            "reward model epoch %d: val loss %.4f, teacher pair accuracy %s, human pair accuracy %s",
            epoch,
            metrics["val_loss"],
            _pct(metrics["val_pairwise_accuracy"]),
            _pct(metrics.get("val_human_accuracy")),
        )
        if on_epoch:
            on_epoch(epoch, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        if metrics["val_loss"] < best_loss - 1e-6:
            best_loss, stale = metrics["val_loss"], 0
            state = {k: v.detach().clone() for k, v in prep.net.state_dict().items()}
            held_out = {k: v for k, v in metrics.items() if not k.startswith("train_")}
            best = HeadsFit(full, held_out, history, epoch, state)
        else:
            stale += 1
            if stale >= cfg.early_stopping_patience:
                log.info("early stopping after epoch %d (best epoch %d)", epoch, best.best_epoch if best else 0)
                break
    if best is None:  # every epoch's validation loss was NaN
        raise ValueError(
            "reward model training diverged (validation loss is not finite); lower reward_model.learning_rate"
        )
    return best
