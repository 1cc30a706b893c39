"""GVS (the spread of the training's gradient norms) and MSS (how far small rewrites of a reply move its reward
vector)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np

from hominem_pipeline.core.common.stats import spearman
from hominem_pipeline.core.evaluation.health.components import Component, clip01
from hominem_pipeline.core.reward.model import RewardModel


def gradient_variance_stability(grad_norms: Sequence[float], gvi_max: float) -> Component:
    """GVS = 1 - GVI / GVI_max with GVI the coefficient of variation of the policy's gradient norms."""
    norms = np.asarray([g for g in grad_norms if g is not None and math.isfinite(g)], dtype=np.float64)
    if len(norms) < 2 or norms.mean() <= 0:
        return Component("gvs", None, "needs the gradient norms of at least 2 training steps")
    gvi = float(norms.std() / norms.mean())
    return Component(
        "gvs",
        clip01(1.0 - gvi / gvi_max),
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
    value = 0.5 * clip01(1.0 - drift / (drift_max or 1.0)) + 0.5 * clip01(1.0 - curvature_var / (curvature_max or 1.0))
    return Component(
        "mss",
        clip01(value),
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
