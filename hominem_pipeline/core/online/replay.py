"""The replay buffer: past examples with a priority, and one sampler that mixes recent
and old, high-priority and random, at the configured ratios.

An item is one preference pair: a prompt, the reply to learn and the one it beat, the chosen reply's reward vector,
reward intensity and safety score, its time, its weight and where it came from (`teacher:<day>`, `feedback:choice`,
`feedback:thumbs`, `feedback:emotion`, `nudge:<dimension>`). Its priority is

    priority = w_intensity * intensity + w_social * mean(social dimensions) + w_novelty * novelty

with every term in [0, 1]; an item whose safety score is below `unsafe_below` has its priority times
`unsafe_factor` (deprioritised, not dropped). Novelty is how unlike every earlier item's prompt this
prompt is: 1 minus the largest cosine similarity of their word-count vectors (hashed), so the first
time a subject comes up counts more than its tenth paraphrase.

Online updates draw one batch of items (`sample`); the daily `dual` training with `policy.dual.sampler:
replay` draws every step's pairs from the window's teacher pairs (`batches`), today's being the recent.

`sample(n)` takes `recent_fraction` of the batch from the `recent_items` newest items (with `recent:
newest_time`, from every item of the newest time instead: the daily training's newest day of pairs) and
the rest from the older ones (all from one side when the other is empty); within each side, `priority_fraction` is
drawn in proportion to priority and the rest uniformly, without repeats.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.config import ReplayConfig

HASH_DIM = 1 << 12  # buckets of the hashed word counts novelty compares
_WORD = re.compile(r"[^\W\d_]+")


def _word_vector(text: str) -> np.ndarray:
    v = np.zeros(HASH_DIM, dtype=np.float32)
    for word in _WORD.findall(text.lower()):
        v[zlib.crc32(word.encode()) % HASH_DIM] += 1.0
    norm = np.linalg.norm(v)
    return v / norm if norm else v


def novelty(prompts: Sequence[str]) -> np.ndarray:
    """Per prompt, in order: 1 - the largest cosine similarity to any earlier prompt (1 for the first)."""
    vectors = np.stack([_word_vector(p) for p in prompts]) if len(prompts) else np.zeros((0, HASH_DIM), np.float32)
    out = np.ones(len(prompts))
    for i in range(1, len(prompts)):
        out[i] = 1.0 - float(np.clip((vectors[:i] @ vectors[i]).max(), 0.0, 1.0))
    return out


@dataclass
class ReplayBuffer:
    """Items as a DataFrame (ITEM_COLUMNS) in time order, with their priorities."""

    items: pd.DataFrame
    settings: ReplayConfig  # the config's replay section
    # which items are recent: count (the newest settings.recent_items) | newest_time (all of the newest time)
    recent: str = "count"

    def __post_init__(self) -> None:
        missing = set(ITEM_COLUMNS) - set(self.items.columns)
        if missing:
            raise ValueError(f"replay items lack column(s) {sorted(missing)}")
        self.items = (
            self.items.assign(row=np.arange(len(self.items))).sort_values("time", kind="stable").reset_index(drop=True)
        )
        self.items["priority"] = self.priorities()

    def priorities(self) -> np.ndarray:
        s, items = self.settings, self.items
        intensity = items["reward_intensity"].astype(float).clip(0, 1).to_numpy()
        social = np.array(
            [
                np.mean([(float(v.get(d, 0.0)) + 1) / 2 for d in s.social_dimensions]) if isinstance(v, dict) else 0.0
                for v in items["vector"]
            ]
        )  # the vector is in [-1, 1]
        new = novelty(list(items["prompt"]))
        p = s.intensity_weight * intensity + s.social_weight * social + s.novelty_weight * new
        unsafe = items["safety_score"].astype(float).to_numpy() < s.unsafe_below
        return np.where(unsafe, p * s.unsafe_factor, p) + 1e-6  # never exactly 0: every item stays reachable

    def sample(self, n: int, rng: np.random.Generator) -> pd.DataFrame:
        """`n` distinct items (all of them when there are fewer), mixed as the settings say."""
        return self.items.iloc[self.draw(n, rng)].reset_index(drop=True)

    def batches(self, seed: int) -> Callable[[int], np.ndarray]:
        """A batch sampler for training on a table whose row i is item i as given (before the time
        sort): each call draws `n` items and returns their rows. Items recur across batches by priority."""
        rng = np.random.default_rng(seed)
        rows = self.items["row"].to_numpy()
        return lambda n: rows[self.draw(n, rng)]

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The positions (in `items`, ascending) of `n` distinct items (all when there are fewer): the
        settings' share from the recent items, the rest from the older ones, by priority and at random."""
        total = len(self.items)
        if n >= total:
            return np.arange(total)
        s = self.settings
        if self.recent == "newest_time":  # every item as new as the newest (the newest day of the teacher's pairs)
            times = self.items["time"].to_numpy()
            split = int(np.searchsorted(times, times[-1], side="left"))
        else:
            split = max(0, total - s.recent_items)
        recent, old = np.arange(split, total), np.arange(0, split)
        want_recent = min(len(recent), max(n - len(old), round(n * s.recent_fraction)))
        return np.sort(np.concatenate([self._draw(recent, want_recent, rng), self._draw(old, n - want_recent, rng)]))

    def _draw(self, pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        if n <= 0 or not len(pool):
            return np.zeros(0, dtype=np.int64)
        by_priority = min(len(pool), round(n * self.settings.priority_fraction))
        weights = self.items["priority"].to_numpy()[pool]
        first = (
            rng.choice(pool, size=by_priority, replace=False, p=weights / weights.sum())
            if by_priority
            else np.zeros(0, dtype=np.int64)
        )
        rest = np.setdiff1d(pool, first)
        second = (
            rng.choice(rest, size=min(len(rest), n - by_priority), replace=False)
            if n > by_priority
            else np.zeros(0, dtype=np.int64)
        )
        return np.concatenate([first, second]).astype(np.int64)


ITEM_COLUMNS = [
    "id",
    "time",
    "source",
    "prompt",
    "chosen",
    "rejected",
    "reward_intensity",
    "safety_score",
    "vector",
    "weight",
]
FINISHED = [
    "chosen_finished",
    "rejected_finished",
]  # False: the reply was cut at a token budget (trained without its end-of-turn)


def teacher_pair_items(pairs: pd.DataFrame, labels: pd.DataFrame, day: str) -> pd.DataFrame:
    """Replay items from a day of the teacher's preference pairs: intensity and safety are the chosen
    reply's labels, its vector (for social salience) looked up in that day's `labels` by trajectory."""
    vectors = dict(zip(labels["trajectory_id"], labels["vector"])) if len(labels) else {}
    return pd.DataFrame(
        {
            "id": [f"teacher:{day}:{p}" for p in pairs["pair_id"]],
            "time": f"{day}T00:00:00+00:00",
            "source": f"teacher:{day}",
            "prompt": pairs["prompt"].to_numpy(),
            "chosen": pairs["chosen"].to_numpy(),
            "rejected": pairs["rejected"].to_numpy(),
            "reward_intensity": pairs["chosen_reward_intensity"].to_numpy(dtype=float),
            "safety_score": pairs["chosen_safety_score"].to_numpy(dtype=float),
            "vector": [vectors.get(t, {}) for t in pairs["chosen_trajectory_id"]],
            "weight": 1.0,
            **{f: pairs[f].fillna(True).astype(bool).to_numpy() if f in pairs else True for f in FINISHED},
        },
        columns=ITEM_COLUMNS + FINISHED,
    )


def teacher_replay_items(store: Any, refs: Sequence[Any]) -> pd.DataFrame:
    """The teacher's preference pairs of `refs` (preference_pairs versions in an ArtifactStore), in their
    order and each version's row order, as replay items; the chosen replies take their vectors from the
    teacher_labels each version was built from."""
    frames = []
    for ref in refs:
        labels_ref = store.upstream(ref, "teacher_labels")
        labels = (
            pd.read_parquet(labels_ref.file("labels.parquet"), columns=["trajectory_id", "vector"])
            if labels_ref
            else pd.DataFrame(columns=["trajectory_id", "vector"])
        )
        frames.append(teacher_pair_items(pd.read_parquet(ref.file("pairs.parquet")), labels, ref.partition))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=ITEM_COLUMNS + FINISHED)


def feedback_pair_items(
    pairs: pd.DataFrame, times: dict[str, str], scores: dict[str, np.ndarray], max_weight: float
) -> pd.DataFrame:
    """Replay items from people's pairs (`online.feedback.feedback_tables`): the intensity is how strongly
    the person chose (its weight over `max_weight`, the strongest); safety and vector are the reward
    model's `scores` of the chosen reply, its safety 0 where the person reacted to it with distress
    (`chosen_distress`: the emotion-derived safety the dual loss's safety gate reads); the time is the
    chosen reply's turn's (`times`, by turn id)."""
    return pd.DataFrame(
        {
            "id": [f"feedback:{p}" for p in pairs["pair_id"]],
            "time": [times[t] for t in pairs["chosen_turn"]],
            "source": ["feedback:" + str(s).removeprefix("feedback:") for s in pairs["source"]],
            "prompt": pairs["prompt"].to_numpy(),
            "chosen": pairs["chosen"].to_numpy(),
            "rejected": pairs["rejected"].to_numpy(),
            "reward_intensity": np.clip(pairs["weight"].to_numpy(dtype=float) / max_weight, 0.0, 1.0),
            "safety_score": np.where(
                pairs["chosen_distress"].fillna(False).astype(bool).to_numpy()
                if "chosen_distress" in pairs
                else False,
                0.0,
                np.asarray(scores["safety_score"], dtype=float),
            ),
            "vector": list(scores["vector"]),
            "weight": pairs["weight"].to_numpy(dtype=float),
            "chosen_finished": True,
            "rejected_finished": True,
        },
        columns=ITEM_COLUMNS + FINISHED,
    )
