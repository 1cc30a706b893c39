"""DCS, dimensional coherence: how the reward dimensions' gradients agree, on the reward model's backbone or on the
policy's LoRA."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hominem_pipeline.core.evaluation.health.components import Component, clip01
from hominem_pipeline.core.reward.encoding import pad_batch, pad_id
from hominem_pipeline.core.reward.model import RewardModel


def gradient_agreement(
    reward_model: RewardModel,
    prompts: Sequence[str],
    responses: Sequence[str],
    layers: int | None = None,
    chunk: int = 32,
) -> np.ndarray:
    """GDA(i, j) for every pair of dimensions, (D, D): the cosine between the gradients (w.r.t. the reward
    model backbone's parameters: those of its last `layers` transformer blocks and final norm, or with
    None every parameter) of the mean of dimension i and of dimension j over the responses. The responses
    go through the backbone `chunk` at a time and their gradients are summed, so memory does not grow
    with them."""
    import torch

    from hominem_pipeline.core.reward.network import top_parameters

    net = reward_model.net
    every = list(net.backbone.parameters())
    params = top_parameters(net.backbone, layers)
    encoded = reward_model.encode(prompts, responses)
    guards = reward_model.guard_columns(prompts, responses)
    net.eval()
    was = [p.requires_grad for p in every]
    for p in every:
        p.requires_grad_(False)  # gradients stop at the lowest block measured
    for p in params:
        p.requires_grad_(True)
    grads: list[torch.Tensor] | None = None
    dev = next(net.parameters()).device
    try:
        with torch.enable_grad():
            for start in range(0, len(encoded), chunk):
                ids, mask = pad_batch(encoded[start : start + chunk], pad_id(reward_model.tokenizer))
                rows = None if guards is None else guards[start : start + chunk].to(dev)
                vectors = net(ids.to(dev), mask.to(dev), rows)["vector"].mean(1)  # (n, D): the ensemble members' mean
                chunk_grads = _column_gradients(vectors / len(encoded), params)
                grads = chunk_grads if grads is None else [a + b for a, b in zip(grads, chunk_grads)]
    finally:
        for p, w in zip(every, was):
            p.requires_grad_(w)
    return _cosines(grads)


def _column_gradients(outputs: Any, params: list[Any]) -> list[Any]:
    """The gradient of each column of `outputs` (n, D), summed over its rows, w.r.t. `params`: D flat vectors."""
    import torch

    n = outputs.shape[1]
    grads = []
    for d in range(n):
        g = torch.autograd.grad(outputs[:, d].sum(), params, retain_graph=d < n - 1, allow_unused=True)
        grads.append(torch.cat([x.reshape(-1) for x in g if x is not None]))
    return grads


def _reply_logp(head: Any, states: Any, seq: list[int], begin: int) -> Any:
    """The summed log-probability of `seq`'s reply tokens (from `begin`) given the last hidden states of its
    positions, through the LM head on the reply's positions alone."""
    import torch

    first = max(begin, 1)
    if first >= len(seq):
        return states.sum() * 0.0
    logits = head(states[first - 1 : len(seq) - 1]).float()
    target = torch.tensor(seq[first:], device=states.device).unsqueeze(1)
    return logits.log_softmax(-1).gather(-1, target)[:, 0].sum()


def _weighted_gradients(hidden: Any, per_reply: Any, weights: Any, params: list[Any]) -> list[Any]:
    """For each column d of `weights` (n, D): the gradient w.r.t. `params` of sum_n weights[n, d] * logp_n, taken
    back from the last hidden states `hidden` (n, T, H) with `per_reply` (d logp_n / d hidden, row n): D flat
    vectors."""
    import torch

    n = weights.shape[1]
    grads = []
    for d in range(n):
        g = torch.autograd.grad(
            hidden,
            params,
            grad_outputs=weights[:, d, None, None] * per_reply,
            retain_graph=d < n - 1,
            allow_unused=True,
        )
        grads.append(torch.cat([x.reshape(-1) for x in g if x is not None]))
    return grads


def _cosines(grads: list[Any]) -> np.ndarray:
    """The (D, D) cosines between D flat gradients."""
    import torch

    G = torch.stack(grads)
    G = G / G.norm(dim=1, keepdim=True).clamp(min=1e-12)
    return (G @ G.T).detach().cpu().numpy()


def dimensional_coherence(
    reward_model: RewardModel,
    prompts: Sequence[str],
    responses: Sequence[str],
    layers: int | None = None,
    chunk: int = 32,
    healthy: float | None = None,
) -> Component:
    """DCS = 2/(N(N-1)) * sum_{i<j} max(0, GDA(i, j)) (`gradient_agreement`), read against `healthy`
    (`coherence_of`).

    The design writes 1/(N(N-1)), which caps DCS at 0.5 for perfectly agreeing dimensions; normalising
    by the number of pairs keeps the component in [0, 1] like the other four."""
    if len(responses) < 2:
        return Component("dcs", None, "needs at least 2 scored responses")
    how = (
        "cosine of per-dimension reward gradients w.r.t. the reward model's backbone "
        f"({'every parameter' if layers is None else f'its last {layers} blocks'}) on the adapter's "
        "evaluation responses"
    )
    return coherence_of(gradient_agreement(reward_model, prompts, responses, layers, chunk), how, healthy)


def coherence_of(agreement: np.ndarray, how: str, healthy: float | None = None) -> Component:
    """DCS of a (D, D) gradient agreement matrix (`gradient_agreement` or `policy_gradient_agreement`).

    `healthy`: the coherence healthy days have (the calibration's `references.dcs_healthy`). Dimensions
    can fail on either side of it: fighting (their updates point apart, coherence falls) or merged into
    one (every dimension asks for the same update, coherence 1). DCS is then 1 - |coherence - healthy| /
    max(healthy, 1 - healthy): 1 at the healthy coherence, 0 at the farthest end. With None (or 1.0)
    it is the coherence itself, the design's reading, where more agreement is always better."""
    agreement = np.asarray(agreement, dtype=np.float64)
    n = agreement.shape[0]
    if n < 2:
        return Component("dcs", None, "needs at least 2 reward dimensions")
    upper = agreement[np.triu_indices(n, k=1)]
    raw = dcs_of(agreement)
    details = {
        "coherence": raw,
        "mean_gda": float(upper.mean()),
        "min_gda": float(upper.min()),
        "pairs": int(len(upper)),
        "gda": np.round(agreement, 5).tolist(),
    }
    if healthy is None:
        return Component("dcs", clip01(raw), how, details)
    if not 0.0 < healthy <= 1.0:
        raise ValueError(
            f"references.dcs_healthy {healthy!r} is not a coherence in (0, 1]; write the calibration again with "
            "`benchmarks/health_panel.py calibrate`"
        )
    value = 1.0 - abs(raw - healthy) / max(healthy, 1.0 - healthy)
    return Component(
        "dcs",
        clip01(value),
        f"{how}, against the healthy days' coherence {healthy:g}",
        {**details, "dcs_healthy": healthy},
    )


def policy_gradient_agreement(
    policy: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    replies: Sequence[str],
    vectors: np.ndarray,
    max_length: int = 128,
    chunk: int = 8,
) -> np.ndarray:
    """GDA(i, j) for every pair of dimensions measured on the policy, (D, D): the cosine between the
    updates dimension i and dimension j ask of the adapter (dimensions that agree never ask for contradictory
    updates). Dimension d's update is its policy gradient over the replies,
    sum_n (r_d(y_n) - mean r_d) * grad log pi(y_n | x_n), w.r.t. the adapter's LoRA parameters.

    Args:
        policy: the student with the adapter's LoRA.
        tokenizer: the student's tokenizer.
        prompts: the replies' prompts.
        replies: the replies.
        vectors: the reward model's (n, D) vectors of the replies.
        max_length: tokens of prompt + reply read.
        chunk: replies that go through the policy at a time.
    """
    import torch

    from hominem_pipeline.core.policy.sequences import encode, right_padded

    params = [p for name, p in policy.named_parameters() if "lora_" in name]
    if not params:
        raise ValueError("the policy has no LoRA parameters to measure the dimensions' updates on")
    was = [p.requires_grad for p in params]
    advantage = torch.as_tensor(vectors - vectors.mean(0, keepdims=True), dtype=torch.float32)
    dev = next(policy.parameters()).device
    body, head = policy.get_decoder(), policy.get_output_embeddings()
    grads: list[torch.Tensor] | None = None
    try:
        for p in params:
            p.requires_grad_(True)
        with torch.enable_grad():
            for start in range(0, len(replies), chunk):
                seqs = [
                    encode(tokenizer, prompts[i], replies[i], max_length)
                    for i in range(start, min(start + chunk, len(replies)))
                ]
                ids, mask = right_padded([s for s, _ in seqs], tokenizer.pad_token_id)
                hidden = body(input_ids=ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state
                # Each reply's log-probability reads its own row of the last hidden states alone, so the gradient
                # of their sum w.r.t. those states holds every reply's own, and each dimension's update is that
                # gradient weighted by the dimension's advantages, taken back through the LoRA layers: the LM
                # head (49k outputs a token) is differentiated once, not once per dimension.
                states = hidden.detach().requires_grad_(True)
                logp = torch.stack([_reply_logp(head, states[j], seq, begin) for j, (seq, begin) in enumerate(seqs)])
                (per_reply,) = torch.autograd.grad(logp.sum(), states)
                weights = advantage[start : start + len(seqs)].to(dev)
                chunk_grads = _weighted_gradients(hidden, per_reply, weights, params)
                grads = chunk_grads if grads is None else [x + y for x, y in zip(grads, chunk_grads)]
    finally:
        for p, w in zip(params, was):
            p.requires_grad_(w)
    return _cosines(grads)


def policy_coherence(
    policy: Any,
    tokenizer: Any,
    reward_model: RewardModel,
    prompts: Sequence[str],
    replies: Sequence[str],
    max_length: int = 128,
    healthy: float | None = None,
) -> Component:
    """DCS on the policy (`policy_gradient_agreement`): the cosines between the updates each dimension of
    `reward_model` asks of the adapter's LoRA on its own replies."""
    if len(replies) < 2:
        return Component("dcs", None, "needs at least 2 answered replies")
    vectors = reward_model.raw_scores(list(prompts), list(replies))["vector"]
    cos = policy_gradient_agreement(policy, tokenizer, prompts, replies, vectors, max_length)
    return coherence_of(
        cos,
        "cosine of the updates each reward dimension asks of the adapter's LoRA (policy gradient) on "
        f"{len(replies)} of its replies",
        healthy,
    )


def coherence(
    cfg: Any,
    reward_model: RewardModel,
    prompts: Sequence[str],
    replies: Sequence[str],
    adapter: Any | None,
    device: Any = None,
    policy: tuple[Any, Any] | None = None,
) -> Component:
    """DCS where `health.dcs_on` says: on the policy (the student with the LoRA in the folder `adapter`,
    loaded here on `device`, or `policy`: that model already loaded with its adapter active, and its tokenizer)
    or on the reward model's backbone (`adapter` and `policy` unused), read against the calibration's healthy
    coherence (`references.dcs_healthy`, `coherence_of`) where it gives one."""
    from hominem_pipeline.core.evaluation.calibration import resolve

    healthy = resolve(cfg).references.get("dcs_healthy")
    if cfg.health.dcs_on == "policy":
        if policy is not None:
            return policy_coherence(*policy, reward_model, prompts, replies, cfg.policy.max_length, healthy)
        if adapter is None:
            raise ValueError(
                "health.dcs_on is policy: the adapter's model is needed to measure DCS on it; pass its folder, "
                "or set health.dcs_on: reward_model"
            )
        from hominem_pipeline.core.lm.models import student_path
        from hominem_pipeline.core.policy.lora import load_policy

        policy, tokenizer = load_policy(student_path(cfg), adapter, device)
        return policy_coherence(policy, tokenizer, reward_model, prompts, replies, cfg.policy.max_length, healthy)
    return dimensional_coherence(reward_model, prompts, replies, cfg.health.dcs_layers, healthy=healthy)


def dcs_of(agreement: np.ndarray) -> float:
    """DCS of a GDA matrix: the mean over pairs of dimensions of max(0, GDA)."""
    n = agreement.shape[0]
    upper = agreement[np.triu_indices(n, k=1)]
    return float(np.maximum(upper, 0.0).sum() * 2.0 / (n * (n - 1)))
