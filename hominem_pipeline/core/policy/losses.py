"""Per-example losses for adapter training: DPO, and the dual-channel loss with its safety gate.

Pure functions on per-example tensors (one value per example), so a trainer can weight, gate and log
each example; nothing here knows about models or batches of tokens.

    L_i = gate_weight_i * (w_sft * L_sft_i * [not inverted_i] + intensity_i * w_reward * L_reward_i)

with L_reward the sigmoid DPO loss of the pair (its roles swapped when the gate inverts it), and the
batch loss the mean of L_i over every example, gated or not (a skipped example adds 0 and gets no
gradient). A memory row (an instruction-response row with no pair) has L_i = w_memory * L_sft_i: its
own weight, since what it teaches (facts to keep) is not what a pair's chosen reply teaches. Anchored
(given the reference's NLL of the row and a margin m), its L_sft is max(0, nll - (ref_nll - m)): it
pulls only while the row is less than m nats per token likelier than under the base, so a row the base
already knows is held, not taught without end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch.nn import functional as F


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """-log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))) per example: TRL's `loss_type="sigmoid"`
    DPO loss (reverse KL, no label smoothing) before its batch mean. Inputs are summed log-probabilities
    of each response under the policy and the reference."""
    margin = (policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps)
    return -F.logsigmoid(beta * margin)


@dataclass(frozen=True)
class SafetyGate:
    """How `safety_score` (1 = safe to learn from) gates each example.

    At or above `pass_at` an example counts fully; below `unsafe_below` it is skipped (weight 0) or
    inverted (chosen and rejected swapped, so the model learns away from the unsafe reply, and no SFT
    on it); in between, `between` decides: down-weighted (by `factor`, or by the score itself), passed
    or skipped."""

    pass_at: float = 0.6
    unsafe_below: float = 0.3
    unsafe: Literal["skip", "invert"] = "skip"
    between: Literal["downweight", "pass", "skip"] = "downweight"
    downweight_by: Literal["factor", "score"] = "factor"
    factor: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.unsafe_below <= self.pass_at <= 1.0:
            raise ValueError(
                f"safety gate thresholds must satisfy 0 <= unsafe_below ({self.unsafe_below}) <= pass_at "
                f"({self.pass_at}) <= 1"
            )
        if not 0.0 <= self.factor <= 1.0:
            raise ValueError(f"safety gate factor {self.factor} must be in [0, 1]")

    @classmethod
    def from_config(cls, cfg) -> "SafetyGate":
        """The gate a `config.SafetyGateConfig` (policy.safety_gate) describes."""
        return cls(**cfg.model_dump())

    def __call__(self, safety: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight per example, inverted per example) for a tensor of safety scores."""
        safety = safety.detach().float()
        weight = torch.ones_like(safety)
        unsafe = safety < self.unsafe_below
        between = ~unsafe & (safety < self.pass_at)
        if self.between == "skip":
            weight[between] = 0.0
        elif self.between == "downweight":
            weight[between] = self.factor if self.downweight_by == "factor" else safety[between]
        inverted = unsafe if self.unsafe == "invert" else torch.zeros_like(unsafe)
        if self.unsafe == "skip":
            weight[unsafe] = 0.0
        return weight, inverted


@dataclass
class DualChannelLoss:
    total: torch.Tensor  # the batch loss to backpropagate
    per_example: torch.Tensor  # L_i
    sft: torch.Tensor  # the memory channel's share of `total` (chosen replies and memory rows)
    memory: torch.Tensor  # the memory rows' part of `sft`
    reward: torch.Tensor  # the reward channel's share of `total`
    skipped: int  # examples with weight 0
    downweighted: int  # examples with 0 < weight < 1
    inverted: int  # examples whose pair was swapped


@dataclass(frozen=True)
class DualLossInputs:
    """One batch's inputs to the dual-channel loss, one value per example (shape (n,)).

    Args:
        policy_chosen_logps: the policy's summed log-probability of each chosen reply.
        policy_rejected_logps: the same of each rejected reply.
        ref_chosen_logps: the reference's of each chosen reply.
        ref_rejected_logps: the reference's of each rejected reply.
        sft_nll: the SFT loss of each example's chosen reply (mean token negative log-likelihood).
        intensity: the reward intensity (teacher label, reward model or 1).
        safety: the safety score the gate reads.
        pair_mask: False marks memory rows, which have no pair: they get the SFT term alone, ungated (their
            log-probability, intensity and safety inputs are ignored); None: every example is a pair.
        memory_ref_nll: the reference's mean token NLL of each example (only memory rows' entries are read): a
            memory row's SFT term is then anchored, max(0, sft_nll - memory_ref_nll + memory_margin).
    """

    policy_chosen_logps: torch.Tensor
    policy_rejected_logps: torch.Tensor
    ref_chosen_logps: torch.Tensor
    ref_rejected_logps: torch.Tensor
    sft_nll: torch.Tensor
    intensity: torch.Tensor
    safety: torch.Tensor
    pair_mask: torch.Tensor | None = None
    memory_ref_nll: torch.Tensor | None = None

    def checked_pairs(self) -> torch.Tensor:
        """The pair mask (all True without one), after checking every input is one value per example."""
        n = self.policy_chosen_logps.shape[0]
        pairs = torch.ones(n, dtype=torch.bool) if self.pair_mask is None else self.pair_mask
        named = [
            ("policy_rejected_logps", self.policy_rejected_logps),
            ("ref_chosen_logps", self.ref_chosen_logps),
            ("ref_rejected_logps", self.ref_rejected_logps),
            ("sft_nll", self.sft_nll),
            ("intensity", self.intensity),
            ("safety", self.safety),
            ("pair_mask", pairs),
        ]
        if self.memory_ref_nll is not None:
            named.append(("memory_ref_nll", self.memory_ref_nll))
        for name, t in named:
            if t.shape != (n,):
                raise ValueError(
                    f"{name} has shape {tuple(t.shape)}; every input is one value per example, shape ({n},)"
                )
        return pairs.to(device=self.policy_chosen_logps.device, dtype=torch.bool)


@dataclass(frozen=True)
class DualLossWeights:
    """The dual-channel loss's weights: `beta` (DPO's), `w_sft` and `w_reward` (the channels'), `w_memory` (a memory
    row's SFT term; None: `w_sft`) and `memory_margin` (the anchored memory rows' margin)."""

    beta: float
    w_sft: float
    w_reward: float
    w_memory: float | None = None
    memory_margin: float = 0.0


def dual_channel_loss(x: DualLossInputs, weights: DualLossWeights, gate: SafetyGate) -> DualChannelLoss:
    """`w_sft * L_sft + intensity * w_reward * L_reward` per example, gated by safety (see the module). Returns the
    batch mean and its parts, so both channels can be logged."""
    pairs = x.checked_pairs()
    weight, inverted = gate(x.safety)
    weight = torch.where(pairs, weight, torch.ones_like(weight))
    inverted = inverted & pairs
    pc, pr, rc, rr, beta = (
        x.policy_chosen_logps,
        x.policy_rejected_logps,
        x.ref_chosen_logps,
        x.ref_rejected_logps,
        weights.beta,
    )
    reward = torch.where(inverted, dpo_loss(pr, pc, rr, rc, beta), dpo_loss(pc, pr, rc, rr, beta))
    weight = weight.to(reward.dtype)
    w_memory = weights.w_sft if weights.w_memory is None else weights.w_memory
    w_row = torch.where(pairs, weights.w_sft, w_memory).to(reward.dtype)
    sft_nll = x.sft_nll
    if x.memory_ref_nll is not None:
        anchored = F.relu(sft_nll - x.memory_ref_nll.detach().to(sft_nll.dtype) + weights.memory_margin)
        sft_nll = torch.where(pairs, sft_nll, anchored)
    sft_part = weight * w_row * sft_nll * (~inverted).to(reward.dtype)
    reward_part = weight * x.intensity.to(reward.dtype) * weights.w_reward * reward
    reward_part = torch.where(pairs, reward_part, torch.zeros_like(reward))
    per_example = sft_part + reward_part
    return DualChannelLoss(
        total=per_example.mean(),
        per_example=per_example,
        sft=sft_part.mean(),
        memory=torch.where(pairs, torch.zeros_like(sft_part), sft_part).mean(),
        reward=reward_part.mean(),
        skipped=int((weight == 0).sum()),
        downweighted=int(((weight > 0) & (weight < 1)).sum()),
        inverted=int(inverted.sum()),
    )


def gate_group_rewards(
    rewards: torch.Tensor, safety: torch.Tensor, gate: SafetyGate, group_size: int, min_gap: float = 0.1
) -> torch.Tensor:
    """The safety gate on sampled completions' rewards, for policy-gradient methods that learn from each
    completion's reward relative to the other completions of its prompt (GRPO, RLOO). `rewards` and
    `safety` hold consecutive groups of `group_size` completions of one prompt.

    A passed completion keeps its reward. A skipped one gets the mean reward of its group's passed
    completions (its advantage is then about 0: nothing is learned from it); a down-weighted one is pulled
    toward that mean by its weight; an inverted one gets the group's lowest reward minus the group's
    spread (at least `min_gap`), so it is always learned away from, however the reward model rated it."""
    if rewards.shape != safety.shape or rewards.dim() != 1:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and safety {tuple(safety.shape)} must be equal 1-d shapes, "
            "one value per completion"
        )
    if group_size < 1 or rewards.shape[0] % group_size:
        raise ValueError(f"{rewards.shape[0]} completions do not split into groups of {group_size}")
    weight, inverted = gate(safety)
    r, w, inv = rewards.float().view(-1, group_size), weight.view(-1, group_size), inverted.view(-1, group_size)
    passed = (w == 1) & ~inv
    mean_all = r.mean(1, keepdim=True)
    mean_passed = torch.where(passed, r, torch.zeros_like(r)).sum(1, keepdim=True) / passed.sum(1, keepdim=True).clamp(
        min=1
    )
    centre = torch.where(passed.any(1, keepdim=True), mean_passed, mean_all)
    out = centre + w * (r - centre)
    low, spread = (
        r.min(1, keepdim=True).values,
        (r.max(1, keepdim=True).values - r.min(1, keepdim=True).values).clamp(min=min_gap),
    )
    out = torch.where(inv, (low - spread).expand_as(r), out)
    return out.reshape(-1).to(rewards.dtype)
