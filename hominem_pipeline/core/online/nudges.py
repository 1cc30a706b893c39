"""Nudges as training signal for the policy: "more empathy" on a reply asks the next updates to move the
live adapter toward more of that dimension, "less" away from it.

**Pressure.** The nudges of the log's recent days give each dimension a signed pressure

    p_D = tanh(net_D / saturation),  net_D = sum over D's nudges of (+1 more, -1 less) * 0.5 ** (age_days / half_life_days)

so a few recent nudges press clearly (three "more empathy" today: p 0.76 at saturation 3), an old one
fades, and "more" and "less" cancel.

**What an online update does with it** (`online.nudges`):

1. *Weights.* Each replay pair weighs `exp(strength * sum_D p_D * gap_D)`, where `gap_D` is the chosen
   minus the rejected reply's D (their label vectors in [-1, 1]; 0 where either is unknown), the weights
   normalised to mean 1 and clipped to [1/max_factor, max_factor]: pairs whose chosen reply has more of a
   dimension people asked for count more, those with less count less. The weight multiplies the pair's
   loss, so the dual loss's reward-intensity term is scaled with it.
2. *Dimension pairs.* For each dimension under pressure, pairs of the teacher's candidates to one prompt
   that differ on it by at least `min_gap` while the mean of their other dimensions differs by at most
   `tolerance` (the others hold): the one with more of it chosen for "more", less for "less". They take
   `pair_share` of the batch, split among the dimensions by |p_D|, the largest differences first.

A nudge is also a rating of its reply: the served-turn labelling (`labeling.served_turns`) picks nudged
replies first, so the teacher rates what people reacted to.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Pressure:
    """Per dimension, the signed pressure of the recent nudges (-1..1), and what was counted."""

    by_dimension: dict[str, float] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # dimension -> {"more": n, "less": n}
    ids: tuple[str, ...] = ()  # the nudge events counted

    @property
    def active(self) -> bool:
        return any(abs(p) > 1e-6 for p in self.by_dimension.values())

    def vector(self, dims: list[str]) -> np.ndarray:
        return np.array([self.by_dimension.get(d, 0.0) for d in dims])

    def describe(self) -> str:
        parts = [f"{'more' if p > 0 else 'less'} {d} ({p:+.2f}: {self.counts[d]['more']} more, {self.counts[d]['less']} less)"
                 for d, p in sorted(self.by_dimension.items(), key=lambda kv: -abs(kv[1])) if abs(p) > 1e-6]
        return "; ".join(parts) or "no nudges"


def pressure(events: list[dict[str, Any]], dims: list[str], now: dt.datetime, half_life_days: float, saturation: float) -> Pressure:
    """The nudges among `events` (the log's raw events) as a `Pressure` on `dims` at time `now`; a nudge
    on a dimension that is not configured is left out."""
    net = dict.fromkeys(dims, 0.0)
    counts = {d: {"more": 0, "less": 0} for d in dims}
    ids = []
    for e in events:
        if e.get("kind") != "nudge" or e.get("dimension") not in net or e.get("direction") not in ("more", "less"):
            continue
        try:
            age = max(0.0, (now - dt.datetime.fromisoformat(str(e["time"]))).total_seconds() / 86400)
        except (KeyError, ValueError, TypeError):
            continue
        sign = 1.0 if e["direction"] == "more" else -1.0
        net[e["dimension"]] += sign * 0.5 ** (age / half_life_days)
        counts[e["dimension"]][e["direction"]] += 1
        ids.append(str(e.get("id")))
    return Pressure({d: math.tanh(v / saturation) for d, v in net.items() if counts[d]["more"] + counts[d]["less"]},
                    {d: c for d, c in counts.items() if c["more"] + c["less"]}, tuple(ids))


def _as_dict(v: Any) -> dict[str, float]:
    if isinstance(v, dict):
        return v
    if isinstance(v, str) and v:
        return json.loads(v)
    return {}


def gaps(items: pd.DataFrame, dims: list[str]) -> np.ndarray:
    """Per replay item, the chosen minus the rejected reply's vector on `dims` (items' `vector` and
    `rejected_vector`); a row whose rejected vector is unknown is 0 (no evidence either way)."""
    out = np.zeros((len(items), len(dims)))
    if "rejected_vector" not in items:
        return out
    for i, (chosen, rejected) in enumerate(zip(items["vector"], items["rejected_vector"])):
        c, r = _as_dict(chosen), _as_dict(rejected)
        if c and r:
            out[i] = [float(c.get(d, 0.0)) - float(r.get(d, 0.0)) for d in dims]
    return out


def pair_weights(item_gaps: np.ndarray, push: np.ndarray, strength: float, max_factor: float) -> np.ndarray:
    """exp(strength * gaps . push), normalised to mean 1 and clipped to [1/max_factor, max_factor]."""
    if not len(item_gaps):
        return np.ones(0)
    w = np.exp(strength * (item_gaps @ push))
    w = w / w.mean()
    return np.clip(w, 1.0 / max_factor, max_factor)


def dimension_pairs(labels: pd.DataFrame, dims: list[str], push: Pressure, n: int, min_gap: float, tolerance: float, time: str) -> pd.DataFrame:
    """Up to `n` replay items (`source` nudge:<dimension>) from the teacher's labelled candidates
    (`labels`: prompt_id, prompt, response, vector, reward_intensity, safety_score), `n` split among the
    pressed dimensions by |p_D|: two candidates to one prompt that differ on D by at least `min_gap`, the
    mean of their other dimensions within `tolerance`; chosen the one with more D for "more", less for
    "less"; the largest differences first, each candidate in at most one pair per dimension."""
    from hominem_pipeline.core.online.replay import FINISHED, ITEM_COLUMNS

    pressed = {d: p for d, p in push.by_dimension.items() if abs(p) > 1e-6 and d in dims}
    if n <= 0 or not pressed or labels.empty:
        return pd.DataFrame(columns=ITEM_COLUMNS + FINISHED + ["rejected_vector"])
    total = sum(abs(p) for p in pressed.values())
    quota = {d: max(1, round(n * abs(p) / total)) for d, p in pressed.items()}
    rows = []
    vectors = [_as_dict(v) for v in labels["vector"]]
    frame = labels.assign(_v=vectors).reset_index(drop=True)
    for d, p in sorted(pressed.items(), key=lambda kv: -abs(kv[1])):
        j = dims.index(d)
        others = [k for k in range(len(dims)) if k != j]
        found = []
        for _, group in frame.groupby("prompt_id"):
            if len(group) < 2:
                continue
            mat = np.array([[float(v.get(x, 0.0)) for x in dims] for v in group["_v"]])
            for a in range(len(group)):
                for b in range(len(group)):
                    gap = mat[a, j] - mat[b, j]  # a has more of d than b
                    hold = abs(float(mat[a, others].mean() - mat[b, others].mean())) if others else 0.0
                    if gap >= min_gap and hold <= tolerance:
                        hi, lo = (group.iloc[a], group.iloc[b]) if p > 0 else (group.iloc[b], group.iloc[a])
                        found.append((gap, hi, lo))
        used: set[str] = set()
        for gap, hi, lo in sorted(found, key=lambda f: -f[0]):
            if len([r for r in rows if r["source"] == f"nudge:{d}"]) >= quota[d]:
                break
            if hi["response"] in used or lo["response"] in used:
                continue
            used |= {hi["response"], lo["response"]}
            rows.append({"id": f"nudge:{d}:{'more' if p > 0 else 'less'}:{hi.get('trajectory_id', hi['response'][:20])}:{lo.get('trajectory_id', lo['response'][:20])}",
                         "time": time, "source": f"nudge:{d}", "prompt": hi["prompt"], "chosen": hi["response"], "rejected": lo["response"],
                         "reward_intensity": float(np.clip(hi.get("reward_intensity", 0.5), 0, 1)), "safety_score": float(np.clip(hi.get("safety_score", 1.0), 0, 1)),
                         "vector": hi["_v"], "rejected_vector": lo["_v"], "weight": 1.0, "chosen_finished": True, "rejected_finished": True})
    return pd.DataFrame(rows, columns=ITEM_COLUMNS + FINISHED + ["rejected_vector"])[: max(n, 0)]
