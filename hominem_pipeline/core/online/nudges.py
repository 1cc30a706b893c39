"""Nudges as training signal for the policy: "more empathy" on a reply asks the next updates to move the
live adapter toward more of that dimension, "less" away from it.

**Pressure.** The nudges of the log's recent days give each dimension a signed pressure

    p_D = tanh(net_D / saturation),  net_D = sum over D's nudges of (+1 more, -1 less) * 0.5 ** (age_days /
    half_life_days)

so a few recent nudges press clearly (three "more empathy" today: p 0.76 at saturation 3), an old one
fades, and "more" and "less" cancel.

**What an online update does with it** (`online.nudges`):

1. *Weights.* Each replay pair weighs `exp(strength * sum_D p_D * gap_D)`, where `gap_D` is the chosen
   minus the rejected reply's D by the reward model (whose dimensions read their fixtures far better than
   the judge's labels do: docs/BENCHMARKS.md), the weights
   normalised to mean 1 and clipped to [1/max_factor, max_factor]: pairs whose chosen reply has more of a
   dimension people asked for count more, those with less count less. The weight multiplies the pair's
   loss, so the dual loss's reward-intensity term is scaled with it.
2. *Dimension pairs.* For each dimension under pressure, pairs of the teacher's candidates to one prompt
   (degenerate ones left out), scored by the reward model, that differ on it while the others hold: gaps
   in standard deviations of each dimension over the candidates (the dimensions span a small range), the
   pressed dimension's at least `min_gap` and the mean of the others' within `tolerance` (`hold` mean) or
   none of the others lower in the chosen reply by more than `tolerance` (`hold` each; each_first: those
   first, then the mean's). The one with
   more of it is chosen for "more", less for "less". They number `pair_share` of the batch, split among the
   dimensions by |p_D|, the largest gaps (less the others' drift) first, each weighing `pair_weight` on its
   reward intensity (the replay pairs' weights average 1). With `pair_rows` share they take replay items'
   places in the batch; with extra the batch stays whole and each is trained on once per update, beside
   each step's pair rows (`updates.training`). With `imitate`, each one's chosen reply is also a memory
   row of the update (imitated, as the memory files' rows are). `max_steps` sets the update's steps while
   nudges press.
3. *The student's own replies.* The candidates of one day's prompts give few pairs that qualify. With
   `samples`, the update also samples that many replies from the live adapter (as the server samples,
   `evaluation.max_new_tokens` long) to each of the newest `sample_prompts` conversations people nudged,
   and adds them, with the nudged reply, to the candidates (`nudged_conversations`, `sampled_candidates`).
   Pairs of its own replies move the student from where it is, and on the conversations where people
   asked.

A nudge is also a rating of its reply: the served-turn labelling (`labeling.served_turns`) picks nudged
replies first, so the teacher rates what people reacted to.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from hominem_pipeline.core.reward.model import RewardModel


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
        parts = [
            f"{'more' if p > 0 else 'less'} {d} ({p:+.2f}: {self.counts[d]['more']} more, "
            f"{self.counts[d]['less']} less)"
            for d, p in sorted(self.by_dimension.items(), key=lambda kv: -abs(kv[1]))
            if abs(p) > 1e-6
        ]
        return "; ".join(parts) or "no nudges"


def pressure(
    events: list[dict[str, Any]], dims: list[str], now: dt.datetime, half_life_days: float, saturation: float
) -> Pressure:
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
    return Pressure(
        {d: math.tanh(v / saturation) for d, v in net.items() if counts[d]["more"] + counts[d]["less"]},
        {d: c for d, c in counts.items() if c["more"] + c["less"]},
        tuple(ids),
    )


def nudged_conversations(events: list[dict[str, Any]], push: Pressure, limit: int) -> list[dict[str, Any]]:
    """The conversations of the turns the nudges counted in `push` are on, newest nudge first, one per
    conversation, at most `limit`: {"context", "prompt" (as a preference pair reads it), "reply" (the nudged one),
    "turn", "finished"}. A nudge whose turn is not among `events` is left out."""
    from hominem_pipeline.core.online.feedback import transcript

    counted = set(push.ids)
    turns = {str(e.get("id")): e for e in events if e.get("kind") == "turn"}
    nudges = [
        e for e in events if e.get("kind") == "nudge" and str(e.get("id")) in counted and str(e.get("turn")) in turns
    ]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for e in sorted(nudges, key=lambda e: str(e.get("time", "")), reverse=True):
        turn = turns[str(e["turn"])]
        try:
            messages = [(str(m["role"]), str(m["content"])) for m in turn["messages"]]
            context, reply = str(turn["context"]), str(turn["reply"])
        except (KeyError, TypeError):
            continue
        if context in seen or not messages:
            continue
        seen.add(context)
        out.append(
            {
                "context": context,
                "prompt": transcript(messages),
                "reply": reply,
                "turn": str(turn["id"]),
                "finished": turn.get("finish_reason", "stop") == "stop",
            }
        )
        if len(out) >= limit:
            break
    return out


def sampled_candidates(conversations: list[dict[str, Any]], k: int, sample: Any) -> pd.DataFrame:
    """Candidates for `dimension_pairs` from `conversations` (`nudged_conversations`): per conversation its
    nudged reply and `k` replies `sample(prompts, k)` returns ([[(text, finished)] * k] per prompt), empty
    replies and repeats left out. Columns: prompt_id (served:<context>), prompt, response, trajectory_id,
    finished; the reward model's scores are added by the caller."""
    columns = ["prompt_id", "prompt", "response", "trajectory_id", "finished"]
    if not conversations or k <= 0:
        return pd.DataFrame(columns=columns)
    drawn = sample([c["prompt"] for c in conversations], k)
    rows = []
    for c, replies in zip(conversations, drawn):
        seen: set[str] = set()
        for j, (text, finished) in enumerate([(c["reply"], c["finished"])] + list(replies)):
            if not text.strip() or text.strip() in seen:
                continue
            seen.add(text.strip())
            rows.append(
                {
                    "prompt_id": f"served:{c['context']}",
                    "prompt": c["prompt"],
                    "response": text,
                    "trajectory_id": c["turn"] if j == 0 else f"{c['turn']}~{j}",
                    "finished": bool(finished),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def _as_dict(v: Any) -> dict[str, float]:
    if isinstance(v, dict):
        return v
    if isinstance(v, str) and v:
        return json.loads(v)
    return {}


def scored_gaps(reward_model: RewardModel, items: pd.DataFrame) -> np.ndarray:
    """Per replay item, the reward model's vector of the chosen reply minus the rejected one's (n x its dimensions)."""
    if not len(items):
        return np.zeros((0, len(reward_model.dimensions)))
    prompts = list(items["prompt"])
    vec = np.asarray(
        reward_model.raw_scores(prompts + prompts, list(items["chosen"]) + list(items["rejected"]))["vector"],
        dtype=float,
    )
    return vec[: len(items)] - vec[len(items) :]


def pair_weights(item_gaps: np.ndarray, push: np.ndarray, strength: float, max_factor: float) -> np.ndarray:
    """exp(strength * gaps . push), normalised to mean 1 and clipped to [1/max_factor, max_factor]."""
    if not len(item_gaps):
        return np.ones(0)
    w = np.exp(strength * (item_gaps @ push))
    w = w / w.mean()
    return np.clip(w, 1.0 / max_factor, max_factor)


def _finished(row: pd.Series) -> bool:
    """A candidate's reply ended by itself (the teacher's candidates are kept only so; a sampled one may stop at the
    limit)."""
    value = row.get("finished", True)
    return True if value is None or (isinstance(value, float) and math.isnan(value)) else bool(value)


def dimension_pairs(
    labels: pd.DataFrame,
    dims: list[str],
    push: Pressure,
    n: int,
    min_gap: float,
    tolerance: float,
    time: str,
    hold: str = "mean",
) -> pd.DataFrame:
    """Up to `n` replay items (`source` nudge:<dimension>) from scored candidates, split among the pressed
    dimensions by |p_D|. Gaps are in standard deviations of each dimension over `labels`. The largest gaps less
    the others' mean drift first, each candidate in at most one pair per dimension.

    Args:
        labels: the candidates, the teacher's and the student's own: prompt_id, prompt, response, vector (the
            reward model's), reward_intensity, safety_score, optionally finished.
        dims: the dimensions.
        push: the nudges' pressure on each dimension.
        n: pairs at most.
        min_gap: a pair qualifies when the pressed dimension's gap (in the asked direction) is at least this.
        tolerance: how far the other dimensions may move (see `hold`).
        time: the items' time.
        hold: mean: the mean of the others' gaps is within `tolerance`; each: no other dimension is lower in the
            chosen reply by more than `tolerance`; each_first: the pairs that hold each first, then those that
            hold the mean.
    """
    from hominem_pipeline.core.online.replay import FINISHED, ITEM_COLUMNS

    pressed = {d: p for d, p in push.by_dimension.items() if abs(p) > 1e-6 and d in dims}
    if n <= 0 or not pressed or labels.empty:
        return pd.DataFrame(columns=ITEM_COLUMNS + FINISHED)
    total = sum(abs(p) for p in pressed.values())
    quota = {d: max(1, round(n * abs(p) / total)) for d, p in pressed.items()}
    frame = labels.assign(_v=[_as_dict(v) for v in labels["vector"]]).reset_index(drop=True)
    values = np.array([[float(v.get(x, 0.0)) for x in dims] for v in frame["_v"]])
    scale = values.std(axis=0)
    z = values / np.where(scale > 1e-9, scale, 1.0)
    rows: list[dict[str, Any]] = []
    for d, p in sorted(pressed.items(), key=lambda kv: -abs(kv[1])):
        found = _qualifying(frame, z, dims.index(d), 1.0 if p > 0 else -1.0, min_gap, tolerance, hold)
        used: set[int] = set()
        for _, _, a, b in sorted(found, key=lambda f: (f[0], -f[1])):
            if len(used) >= 2 * quota[d]:
                break
            if a in used or b in used:
                continue
            used |= {a, b}
            rows.append(_nudge_item(frame.loc[a], frame.loc[b], a, b, d, "more" if p > 0 else "less", time))
    return pd.DataFrame(rows, columns=ITEM_COLUMNS + FINISHED)[: max(n, 0)]


def _qualifying(
    frame: pd.DataFrame, z: np.ndarray, j: int, sign: float, min_gap: float, tolerance: float, hold: str
) -> list[tuple[int, float, int, int]]:
    """Every (priority, score, chosen, rejected) pair of candidates to one prompt whose gap on dimension `j` (in the
    asked direction, `sign`) is at least `min_gap` while the others hold as `hold` says."""
    others = [k for k in range(z.shape[1]) if k != j]
    found = []
    for _, group in frame.groupby("prompt_id"):
        idx = list(group.index)
        for a in idx:  # a: the reply to choose
            for b in idx:
                if a == b:
                    continue
                gap = sign * (z[a, j] - z[b, j])  # how much more of d (for "more"; less for "less") a has than b
                drift = z[a, others] - z[b, others]  # a against b on the others
                rest = float(drift.mean()) if others else 0.0
                each = not others or float(drift.min()) >= -tolerance
                mean = abs(rest) <= tolerance
                if gap >= min_gap and (mean if hold == "mean" else each if hold == "each" else each or mean):
                    found.append((0 if hold == "each_first" and each else 1, gap - abs(rest), a, b))
    return found


def _nudge_item(hi: pd.Series, lo: pd.Series, a: int, b: int, d: str, way: str, time: str) -> dict[str, Any]:
    """The replay item that prefers candidate `hi` (row `a`) to `lo` (row `b`) for a nudge `way` on `d`."""
    return {
        "id": f"nudge:{d}:{way}:{hi.get('trajectory_id', a)}:{lo.get('trajectory_id', b)}",
        "time": time,
        "source": f"nudge:{d}",
        "prompt": hi["prompt"],
        "chosen": hi["response"],
        "rejected": lo["response"],
        "reward_intensity": float(np.clip(hi.get("reward_intensity", 0.5), 0, 1)),
        "safety_score": float(np.clip(hi.get("safety_score", 1.0), 0, 1)),
        "vector": hi["_v"],
        "weight": 1.0,
        "chosen_finished": _finished(hi),
        "rejected_finished": _finished(lo),
    }
