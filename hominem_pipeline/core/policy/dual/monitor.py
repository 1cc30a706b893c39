"""Each channel's share of the gradient, rebalanced when one dominates, and the optimizer step that
applies the channels' gradients."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

MAX_GRAD_NORM = 1.0
CHANNELS = ("memory", "reward")


class ChannelMonitor:
    """The dominance monitor: on a measured step, each channel's share of the
    gradient, |g_c| / (|g_memory| + |g_reward|), of the channels' losses as weighted then. With `max_share`,
    a channel above it is scaled down to it (its loss weighted by a balance factor from then on, this
    step's gradient too): share' = max_share exactly on the step it was measured."""

    def __init__(self, max_share: float | None):
        self.max_share = max_share
        self.balance = {c: 1.0 for c in CHANNELS}
        self.shares: list[dict[str, float]] = []
        self.rebalanced = 0

    def measure(self, grads: dict[str, list[torch.Tensor]]) -> dict[str, float]:
        norms = {c: float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads[c]))) for c in CHANNELS}
        total = sum(norms.values())
        share = {c: norms[c] / total if total else 0.0 for c in CHANNELS}
        top = max(CHANNELS, key=share.get)
        other = next(c for c in CHANNELS if c != top)
        if self.max_share is not None and share[top] > self.max_share and norms[other] > 0:
            scale = self.max_share / (1 - self.max_share) * norms[other] / norms[top]
            self.balance[top] *= scale
            for g in grads[top]:
                g.mul_(scale)
            self.rebalanced += 1
            log.info(
                "dual training: the %s channel had %.0f%% of the gradient (max_share %.0f%%): its loss "
                "now weighs %.3g",
                top,
                100 * share[top],
                100 * self.max_share,
                self.balance[top],
            )
        self.shares.append(share)
        return share

    def summary(self) -> dict[str, Any]:
        """For the adapter's METADATA `channels`: the mean share over the measured steps, the steps measured
        and rebalanced, the balance factors at the end."""
        mean = {c: float(np.mean([s[c] for s in self.shares])) for c in CHANNELS} if self.shares else None
        return {
            "gradient_share": mean,
            "gradient_share_max": {c: float(max(s[c] for s in self.shares)) for c in CHANNELS}
            if self.shares
            else None,
            "measured_steps": len(self.shares),
            "rebalanced_steps": self.rebalanced,
            "max_share": self.max_share,
            "balance": dict(self.balance),
        }


def optimizer_step(
    params: list[torch.Tensor],
    optimizers: dict[str, torch.optim.Optimizer],
    grads: dict[str, list[torch.Tensor]] | None,
) -> float:
    """One step of each optimizer (`both`: on the summed gradient; a channel's: on its own), each gradient
    clipped to MAX_GRAD_NORM; `grads` None: the gradient backward() left in the parameters. Returns the norm
    of the summed gradient before clipping (what GVS reads)."""
    if grads is None:
        norm = float(torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM))
        optimizers["both"].step()
        optimizers["both"].zero_grad(set_to_none=True)
        return norm
    norm = float(torch.sqrt(sum(((a + b).float() ** 2).sum() for a, b in zip(grads["memory"], grads["reward"]))))
    for name, optimizer in optimizers.items():
        for p, *gs in zip(params, *(grads[c] for c in (CHANNELS if name == "both" else (name,)))):
            p.grad = sum(gs)
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return norm
