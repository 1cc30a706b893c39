"""The Reward Health Index (design: execution plan, Phase 10).

RHI = w1*DCS + w2*GVS + w3*MSS + w4*CDRS + w5*LRPS, every component in [0, 1]. Each component is
measured on what the run produced and reported with how it was measured; one that cannot be measured
(too little data) is reported as missing, and RHI is then the weighted mean of the measured ones,
flagged `partial`, never filled with a made-up number.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.common.stats import pearson, spearman
from hominem_pipeline.core.reward.encoding import pad_batch, pad_id
from hominem_pipeline.core.reward.model import RewardModel

COMPONENTS = ("dcs", "gvs", "mss", "cdrs", "lrps")


@dataclass(frozen=True)
class Component:
    name: str
    value: float | None  # None = missing
    how: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HealthReport:
    rhi: float | None
    partial: bool
    missing: list[str]
    components: dict[str, Component]
    deployable: bool
    reason: str
    win_rate: float | None = None  # the adapter's win rate over the base on the evaluation prompts
    threshold: float | None = None  # the RHI it was held to, and where that comes from
    threshold_name: str | None = None
    verdicts: dict[str, str | None] = field(
        default_factory=dict
    )  # component -> where it lies against the panel's healthy range (None: no range)
    below_range: list[str] = field(default_factory=list)  # the components below the panel's healthy range
    calibration: str | None = None  # the calibration file in force (None: the config's constants) and its digest
    calibration_digest: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "components": {k: asdict(v) for k, v in self.components.items()}}


def _clip01(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


# --- components -----------------------------------------------------------------------------------


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
        return Component("dcs", _clip01(raw), how, details)
    if not 0.0 < healthy <= 1.0:
        raise ValueError(
            f"references.dcs_healthy {healthy!r} is not a coherence in (0, 1]; write the calibration again with "
            "`benchmarks/health_panel.py calibrate`"
        )
    value = 1.0 - abs(raw - healthy) / max(healthy, 1.0 - healthy)
    return Component(
        "dcs",
        _clip01(value),
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
    updates dimension i and dimension j ask of the adapter (design 000 3.4.1: "reward dimensions produce
    non-contradictory updates"). Dimension d's update is its policy gradient over the replies,
    sum_n (r_d(y_n) - mean r_d) * grad log pi(y_n | x_n), w.r.t. the adapter's LoRA parameters; `vectors`:
    the reward model's (n, D) vectors of the replies. `chunk` replies go through the policy at a time."""
    import torch

    from hominem_pipeline.core.policy.sequences import encode, right_padded

    params = [p for name, p in policy.named_parameters() if "lora_" in name]
    if not params:
        raise ValueError("the policy has no LoRA parameters to measure the dimensions' updates on")
    was = [p.requires_grad for p in params]
    advantage = torch.as_tensor(vectors - vectors.mean(0, keepdims=True), dtype=torch.float32)
    dev = next(policy.parameters()).device
    pad = tokenizer.pad_token_id
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
                ids, mask = right_padded([s for s, _ in seqs], pad)
                logits = policy(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits[:, :-1].float()
                token_logps = logits.log_softmax(-1).gather(-1, ids[:, 1:, None].to(dev))[..., 0]
                keep = torch.zeros_like(token_logps)
                for j, (seq, begin) in enumerate(seqs):
                    keep[j, max(begin, 1) - 1 : len(seq) - 1] = 1.0
                logp = (token_logps * keep).sum(1)  # each reply's log-probability under the policy
                chunk_grads = _column_gradients(advantage[start : start + len(seqs)].to(dev) * logp[:, None], params)
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
) -> Component:
    """DCS where `health.dcs_on` says: on the policy (the student with the LoRA in the folder `adapter`,
    loaded here on `device`) or on the reward model's backbone (`adapter` unused), read against the
    calibration's healthy coherence (`references.dcs_healthy`, `coherence_of`) where it gives one."""
    from hominem_pipeline.core.evaluation.calibration import resolve

    healthy = resolve(cfg).references.get("dcs_healthy")
    if cfg.health.dcs_on == "policy":
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


def gradient_variance_stability(grad_norms: Sequence[float], gvi_max: float) -> Component:
    """GVS = 1 - GVI / GVI_max with GVI the coefficient of variation of the policy's gradient norms."""
    norms = np.asarray([g for g in grad_norms if g is not None and math.isfinite(g)], dtype=np.float64)
    if len(norms) < 2 or norms.mean() <= 0:
        return Component("gvs", None, "needs the gradient norms of at least 2 training steps")
    gvi = float(norms.std() / norms.mean())
    return Component(
        "gvs",
        _clip01(1.0 - gvi / gvi_max),
        f"coefficient of variation of {len(norms)} LoRA training gradient norms, against GVI_max={gvi_max}",
        {"gvi": gvi, "gvi_max_reference": gvi_max, "steps": int(len(norms))},
    )


def perturb(text: str, rng: random.Random) -> str:
    """A small perturbation: drop one word (keeps the text non-empty)."""
    words = text.split()
    if len(words) < 2:
        return text
    del words[rng.randrange(len(words))]
    return " ".join(words)


def manifold_stability(
    reward_model: RewardModel,
    prompts: Sequence[str],
    base_responses: Sequence[str],
    adapter_responses: Sequence[str],
    perturbations_per_response: int,
    seed: int,
    drift_max: float | None = None,
    curvature_max: float | None = None,
) -> Component:
    """MSS = 0.5(1 - RDM drift) + 0.5(1 - curvature variance), each term normalised by its reference
    (`drift_max`, `curvature_max`: the panel's, from its healthy days; None: the raw value) and clipped to [0, 1].

    RDM drift: the representational dissimilarity matrix (Euclidean distances between reward vectors
    of the evaluation responses) of the base and of the adapter; drift = (1 - Spearman rho) / 2.
    Curvature variance: the share of reward variance that small input perturbations (one word dropped)
    cause, var(perturbation change) / (var(perturbation change) + var(scalar across responses))."""
    keep = [i for i in range(len(prompts)) if base_responses[i].strip() and adapter_responses[i].strip()]
    if len(keep) < 3:
        return Component("mss", None, "needs at least 3 prompts where both base and adapter answered")
    p = [prompts[i] for i in keep]
    base = reward_model.raw_scores(p, [base_responses[i] for i in keep])
    adapted = reward_model.raw_scores(p, [adapter_responses[i] for i in keep])
    originals, perturbed = perturbations([adapter_responses[i] for i in keep], perturbations_per_response, seed)
    moved = reward_model.raw_scores([p[i] for i in originals], perturbed)["scalar"]
    return stability_of(
        base["vector"], adapted["vector"], adapted["scalar"], originals, moved, drift_max, curvature_max
    )


def perturbations(responses: Sequence[str], per_response: int, seed: int) -> tuple[list[int], list[str]]:
    """`per_response` perturbed copies of each response (`perturb`, drawn from `seed` in order): the index of
    each copy's response, and the copies."""
    rng = random.Random(seed)
    originals, perturbed = [], []
    for i, r in enumerate(responses):
        for _ in range(per_response):
            originals.append(i)
            perturbed.append(perturb(r, rng))
    return originals, perturbed


def stability_of(
    base_vectors: np.ndarray,
    adapter_vectors: np.ndarray,
    adapter_scalars: np.ndarray,
    originals: Sequence[int],
    perturbed_scalars: np.ndarray,
    drift_max: float | None = None,
    curvature_max: float | None = None,
) -> Component:
    """MSS from the reward model's outputs (`manifold_stability`): the vectors of the base's and the adapter's
    replies to the same prompts, the adapter's scalars, and the scalars of perturbed copies of its replies
    (`originals`: the reply each copy comes from)."""
    base_vectors, adapter_vectors = (
        np.asarray(base_vectors, dtype=np.float64),
        np.asarray(adapter_vectors, dtype=np.float64),
    )
    adapter_scalars = np.asarray(adapter_scalars, dtype=np.float64)

    def rdm(vectors: np.ndarray) -> np.ndarray:
        diff = vectors[:, None, :] - vectors[None, :, :]
        dist = np.sqrt((diff**2).sum(-1))
        return dist[np.triu_indices(len(vectors), k=1)]

    rho = spearman(rdm(base_vectors), rdm(adapter_vectors))
    moved = np.asarray(perturbed_scalars, dtype=np.float64) - adapter_scalars[np.asarray(originals, dtype=int)]
    spread = float(np.var(adapter_scalars))
    noise = float(np.var(moved))
    if rho is None or noise + spread <= 0:
        return Component("mss", None, "reward vectors or scalars did not vary across responses")
    drift = (1.0 - rho) / 2.0
    curvature_var = noise / (noise + spread)
    value = 0.5 * _clip01(1.0 - drift / (drift_max or 1.0)) + 0.5 * _clip01(
        1.0 - curvature_var / (curvature_max or 1.0)
    )
    return Component(
        "mss",
        _clip01(value),
        "RDM of reward vectors base vs adapter (Spearman) and reward change under one-word-drop perturbations"
        + (
            ""
            if drift_max is None and curvature_max is None
            else f", against drift {drift_max} and curvature variance {curvature_max}"
        ),
        {
            "rdm_spearman": rho,
            "rdm_drift": drift,
            "curvature_variance": curvature_var,
            "perturbations": len(moved),
            "rdm_drift_max": drift_max,
            "curvature_variance_max": curvature_max,
        },
    )


def _binary_entropy(p: float) -> float:
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return float(-(p * math.log2(p) + (1 - p) * math.log2(1 - p)))


def cross_domain_robustness(table: pd.DataFrame, dimensions: Sequence[str], against: str = "overall") -> Component:
    """CDRS = 1 - (C_contradiction + C_entropy + (1 - C_consistency)) / 3 across prompt categories.

    C_contradiction: share of (category, dimension) cells whose mean adapter-base delta has the
    opposite sign of that dimension's overall delta. C_entropy: mean binary entropy of each category's
    win rate (a coin-flip category is unsettled). C_consistency: 1 - 2 * std of the categories' win rates.

    `against="improvement"` reads them against the direction of improvement, so that an adapter worse than
    the base everywhere is not "robust": a cell contradicts when the adapter is worse than the base there,
    and C_consistency is the share of categories where the adapter wins at least half the prompts."""
    if table.empty or table["category"].nunique() < 2:
        return Component("cdrs", None, "needs evaluation prompts from at least 2 categories")

    def num(vector: dict, d: str) -> float:
        value = vector.get(d) if isinstance(vector, dict) else None
        return float("nan") if value is None else float(value)  # an unscored (empty) response is NaN

    deltas = pd.DataFrame(
        [
            {d: num(a, d) - num(b, d) for d in dimensions} | {"category": c}
            for a, b, c in zip(table["adapter_vector"], table["base_vector"], table["category"])
        ]
    )
    overall = deltas[list(dimensions)].mean()
    if (
        against == "improvement"
    ):  # a cell contradicts when the adapter is worse than the base there, whatever the overall sign
        overall = overall.abs().clip(lower=1.0)
    per_cat = deltas.groupby("category")[list(dimensions)].mean()
    cells = contradictions = 0
    for d in dimensions:
        if not np.isfinite(overall[d]) or abs(overall[d]) < 1e-6:
            continue
        for value in per_cat[d]:
            if np.isfinite(value) and abs(value) >= 1e-6:
                cells += 1
                contradictions += int(np.sign(value) != np.sign(overall[d]))
    c_contra = contradictions / cells if cells else 0.0
    win = table.groupby("category")["adapter_outcome"].mean()
    c_entropy = float(np.mean([_binary_entropy(w) for w in win]))
    if against == "improvement":
        c_consistency = float((win >= 0.5).mean())
    else:
        c_consistency = _clip01(1.0 - 2.0 * float(win.std(ddof=0)))
    value = 1.0 - (c_contra + c_entropy + (1.0 - c_consistency)) / 3.0
    return Component(
        "cdrs",
        _clip01(value),
        f"per-category reward deltas and win rates over {len(win)} categories of held-out prompts",
        {
            "c_contradiction": c_contra,
            "c_entropy": c_entropy,
            "c_consistency": c_consistency,
            "categories": int(len(win)),
        },
    )


def local_reward_predictivity(
    reward_model: RewardModel, prompts: Sequence[str], responses: Sequence[str]
) -> Component:
    """LRPS = max(0, corr(r_local, r_trajectory)): does the reward of a response's first half predict
    the reward of the whole response? Measured on the adapter's own replies (the trajectories it produces:
    a policy that degenerates midway breaks it; the base's replies would only dilute it)."""
    pairs = [(p, r) for p, r in zip(prompts, responses) if len(r.split()) >= 4]
    if len(pairs) < 3:
        return Component("lrps", None, "needs at least 3 responses of 4+ words")
    ps = [p for p, _ in pairs]
    local = reward_model.raw_scores(ps, [first_half(r) for _, r in pairs])["scalar"]
    full = reward_model.raw_scores(ps, [r for _, r in pairs])["scalar"]
    return predictivity_of(local, full)


def first_half(response: str) -> str:
    """The first half of a response's words: what LRPS scores as the local reward."""
    words = response.split()
    return " ".join(words[: len(words) // 2])


def predictivity_of(local: np.ndarray, full: np.ndarray) -> Component:
    """LRPS from the reward model's scalars on the responses' first halves and on the whole responses."""
    corr = pearson(np.asarray(local, dtype=np.float64), np.asarray(full, dtype=np.float64))
    if corr is None:
        return Component("lrps", None, "reward scalars did not vary across responses")
    return Component(
        "lrps",
        _clip01(max(0.0, corr)),
        f"Pearson correlation of reward on the first half vs the whole of {len(full)} evaluation responses",
        {"pearson": corr, "responses": len(full)},
    )


# --- aggregate ------------------------------------------------------------------------------------


def aggregate(components: dict[str, Component], cfg: Any, win_rate: float | None = None) -> HealthReport:
    """The weighted RHI and the deploy decision under `cfg`'s health settings and calibration
    (`calibration.resolve`): a full index at or above the threshold and, where the evaluation measured
    one, a win rate over the base at or above `health.min_win_rate` (the RHI says the reward signal is
    healthy, not that the adapter is better than what is live without it). Each component is judged
    against the panel's healthy range, and a refusal names those below it. A component below its floor on the
    panel (the calibration's `floors`: where that component alone tells apart the broken days the other checks
    let through) refuses on its own."""
    from hominem_pipeline.core.evaluation.calibration import resolve

    settings = resolve(cfg)
    weights = settings.weights
    measured = {k: c for k, c in components.items() if c.value is not None}
    missing = [k for k in COMPONENTS if k not in measured]
    total = sum(weights[k] for k in measured)
    rhi = sum(weights[k] * measured[k].value for k in measured) / total if total > 0 else None
    verdicts = {k: settings.verdict(k, c.value) for k, c in components.items()}
    low = [
        f"{k.upper()} {c.value:.3f} ({settings.healthy[k][0]:.2f}-{settings.healthy[k][1]:.2f})"
        for k, c in components.items()
        if settings.below(k, c.value)
    ]
    floored = [why for k, c in components.items() if (why := settings.floored(k, c.value))]
    threshold, name = settings.threshold, settings.threshold_name
    min_win_rate = cfg.health.min_win_rate
    if rhi is None:
        deployable, reason = False, "no component could be measured"
    elif missing:
        deployable, reason = False, f"partial index: {', '.join(missing)} not measured"
    elif rhi < threshold:
        deployable, reason = (
            False,
            f"RHI {rhi:.3f} below {settings.threshold_text}"
            + (f"; below the panel's healthy range: {', '.join(low)}" if low else "")
            + "".join(f"; {w}" for w in floored),
        )
    elif floored:
        deployable, reason = False, f"RHI {rhi:.3f} passes {settings.threshold_text}, but {'; '.join(floored)}"
    elif win_rate is not None and win_rate < min_win_rate:
        deployable, reason = (
            False,
            (
                f"RHI {rhi:.3f} passes, but the adapter beat the base on {win_rate:.1%} of the evaluation prompts, "
                f"below health.min_win_rate {min_win_rate:.0%}"
            ),
        )
    else:
        deployable, reason = True, f"RHI {rhi:.3f} at or above {settings.threshold_text}"
        if win_rate is not None:
            reason += f", win rate {win_rate:.1%} at or above {min_win_rate:.0%}"
    return HealthReport(
        rhi=rhi,
        partial=bool(missing),
        missing=missing,
        components=components,
        deployable=deployable,
        reason=reason,
        win_rate=win_rate,
        threshold=threshold,
        threshold_name=name,
        verdicts=verdicts,
        below_range=[k for k, c in components.items() if settings.below(k, c.value)],
        calibration=settings.source,
        calibration_digest=settings.digest,
    )


def compute_health(
    reward_model: RewardModel,
    evaluation: pd.DataFrame,
    grad_norms: Sequence[float],
    cfg: Any,
    seed: int,
    mode: str | None = None,
    adapter: Any | None = None,
    device: Any = None,
) -> HealthReport:
    """The RHI of an adapter from its evaluation table, its training gradient norms and the reward model,
    under `cfg`'s health settings and calibration; `mode`: the adapter's policy mode (per-mode constants);
    `adapter`: its folder, loaded on `device` for DCS on the policy (`health.dcs_on`)."""
    from hominem_pipeline.core.evaluation.calibration import resolve

    h = cfg.health
    settings = resolve(cfg)
    prompts = list(evaluation["prompt"])
    base = list(evaluation["base_response"])
    replies = list(evaluation["adapter_response"])
    answered = [i for i, r in enumerate(replies) if r.strip()]
    components = {
        "dcs": coherence(
            cfg, reward_model, [prompts[i] for i in answered], [replies[i] for i in answered], adapter, device
        ),
        "gvs": gradient_variance_stability(grad_norms, settings.reference("gvi_max", mode)),
        "mss": manifold_stability(
            reward_model,
            prompts,
            base,
            replies,
            h.perturbations_per_response,
            seed,
            settings.references.get("rdm_drift_max"),
            settings.references.get("curvature_variance_max"),
        ),
        "cdrs": cross_domain_robustness(evaluation, reward_model.dimensions, against="improvement"),
        "lrps": local_reward_predictivity(
            reward_model, [prompts[i] for i in answered], [replies[i] for i in answered]
        ),
    }
    outcomes = evaluation["adapter_outcome"].dropna() if "adapter_outcome" in evaluation else pd.Series(dtype=float)
    return aggregate(components, cfg, float(outcomes.mean()) if len(outcomes) else None)


def plot_health(report: HealthReport, path, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(COMPONENTS)
    values = [report.components[n].value for n in names]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar(
        [n.upper() for n in names],
        [v if v is not None else 0 for v in values],
        color=["#1c7ed6" if v is not None else "#adb5bd" for v in values],
    )
    for i, v in enumerate(values):
        ax.text(i, (v or 0) + 0.02, "missing" if v is None else f"{v:.2f}", ha="center", fontsize=8)
    ax.set_ylim(0, 1.1)
    rhi = "n/a" if report.rhi is None else f"{report.rhi:.3f}"
    ax.set_title(f"{title}  RHI {rhi}{' (partial)' if report.partial else ''}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
