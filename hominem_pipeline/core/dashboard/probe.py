"""The dashboard's Probe and Compare views: a reward model's scores of replies a person writes or two
adapters gave, their attribution and their rewrites."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hominem_pipeline.core.reward.model import RewardModel

TIE = 1e-6  # scalars closer than this are a tie: the same reply scored in two batches differs in the last digits
# occluded spans per reply in the Probe view: each is one more scoring of the reply, so a long reply gets longer spans
MAX_SPANS = 5


def probe_scores(reward_model: RewardModel, prompt: str, replies: list[str]) -> dict[str, Any]:
    """The Probe view's first part: each reply's vector, people's score and scalar, and P(the first preferred)."""
    if not prompt.strip() or not replies or any(not r.strip() for r in replies):
        raise ValueError("give a prompt and at least one non-empty reply")
    dims = list(reward_model.dimensions)
    raw = reward_model.raw_scores([prompt] * len(replies), replies)
    people = reward_model.people_column([prompt] * len(replies), replies)
    return {
        "prompt": prompt,
        "dimensions": dims,
        "replies": [
            {
                "reply": r,
                "scalar": float(raw["scalar"][i]),
                "vector": dict(zip(dims, map(float, raw["vector"][i]))),
                "people_score": None if people is None else float(people[i]),
            }
            for i, r in enumerate(replies)
        ],
        "p_first": [
            float(reward_model.probability(float(raw["scalar"][0] - raw["scalar"][j]))) for j in range(1, len(replies))
        ],
    }


def probe_attribution(reward_model: RewardModel, prompt: str, reply: str, words: int = 2) -> dict[str, Any]:
    """The Probe view's second part, per reply: occlusion (`probes.occlusion`) over at most MAX_SPANS spans of
    at least `words` words."""
    import math

    from hominem_pipeline.core.evaluation import probes

    if not reply.strip():
        raise ValueError("give a non-empty reply")
    words = max(int(words), math.ceil(len(reply.split()) / MAX_SPANS))
    return {
        "reply": reply,
        "words": words,
        "attribution": json.loads(probes.occlusion(reward_model, prompt, reply, words).to_json(orient="records")),
    }


def probe_rewrites(
    reward_model: RewardModel, prompt: str, reply: str, changes: list[str] | None = None, seed: int = 0
) -> dict[str, Any]:
    """The Probe view's third part: each meaning-preserving rewrite of the reply (and a frame around the message)
    among `changes` (default: all), what it reads, and how far each output moved from the reply's own scores."""
    import random

    import numpy as np

    from hominem_pipeline.core.evaluation import probes

    if not prompt.strip() or not reply.strip():
        raise ValueError("give a prompt and a non-empty reply")
    unknown = sorted(set(changes or ()) - set(probes.PERTURBATIONS))
    if unknown:
        raise ValueError(f"unknown changes {unknown}; choose from {', '.join(probes.PERTURBATIONS)}")
    dims = list(reward_model.dimensions)
    variants = [("original", prompt, reply)] + [
        (name, *probes.rewrite(name, prompt, reply, random.Random(f"{seed}:{name}")))
        for name in changes or probes.PERTURBATIONS
    ]
    raw = reward_model.raw_scores([v[1] for v in variants], [v[2] for v in variants])
    vec, scal = np.asarray(raw["vector"]), np.asarray(raw["scalar"])
    return {
        "counterfactuals": [
            {
                "change": name,
                "prompt": p2,
                "reply": r2,
                "scalar_moved": float(scal[k] - scal[0]),
                "moved": dict(zip(dims, map(float, vec[k] - vec[0]))),
            }
            for k, (name, p2, r2) in enumerate(variants)
            if k
        ]
    }


def score_side_by_side(
    reward_model: RewardModel, prompts: list[str], replies_a: list[str], replies_b: list[str]
) -> dict[str, Any]:
    """Two adapters' replies to the same prompts scored by one reward model, so that their scalars share a scale
    (each evaluation's own scalars come from its day's reward model): per prompt both scalars, P(b's reply
    preferred) and each dimension's change b - a; overall the mean change b - a of the scalar and of each dimension
    with its standard error over the prompts, and how many prompts b's reply wins."""
    import numpy as np

    if not prompts or not (len(prompts) == len(replies_a) == len(replies_b)):
        raise ValueError("give the same number (at least one) of prompts and of each adapter's replies")
    dims = list(reward_model.dimensions)
    raw = reward_model.raw_scores(list(prompts) * 2, list(replies_a) + list(replies_b))
    n = len(prompts)
    vec, scal = np.asarray(raw["vector"], dtype=float), np.asarray(raw["scalar"], dtype=float)
    dv, ds = vec[n:] - vec[:n], scal[n:] - scal[:n]

    def mean_se(x: np.ndarray) -> dict[str, float | None]:
        return {"mean": float(x.mean()), "se": float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else None}

    return {
        "dimensions": dims,
        "prompts": n,
        "scalar": mean_se(ds),
        "b_wins": int((ds > TIE).sum()),
        "delta": {d: mean_se(dv[:, k]) for k, d in enumerate(dims)},
        "replies": [
            {
                "prompt": p,
                "scalar_a": float(scal[i]),
                "scalar_b": float(scal[n + i]),
                "p_b": float(reward_model.probability(float(ds[i]))),
                "delta": dict(zip(dims, map(float, dv[i]))),
            }
            for i, p in enumerate(prompts)
        ],
    }
