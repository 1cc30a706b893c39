"""The replay buffer (design 000 3.7): past examples with a priority, and one sampler that mixes recent
and old, high-priority and random, at the configured ratios.

An item is one training example: a prompt, the reply to learn (and the one it beat, for a pair), its
reward vector, reward intensity and safety score, its time and where it came from (`teacher:<day>`,
`feedback:<day>`). Its priority (000 3.7.2) is

    priority = w_intensity * intensity + w_social * mean(social dimensions) + w_novelty * novelty

with every term in [0, 1]; an item whose safety score is below `unsafe_below` has its priority times
`unsafe_factor` (deprioritised, not dropped). Novelty is how unlike every earlier item's prompt this
prompt is: 1 minus the largest cosine similarity of their word-count vectors (hashed), so the first
time a subject comes up counts more than its tenth paraphrase.

`sample(n)` takes `recent_fraction` of the batch from the `recent_items` newest items and the rest from
the older ones (all from one side when the other is empty); within each side, `priority_fraction` is
drawn in proportion to priority and the rest uniformly, without repeats.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

HASH_DIM = 1 << 12  # buckets of the hashed word counts novelty compares
_WORD = re.compile(r"[^\W\d_]+")


@dataclass(frozen=True)
class ReplaySettings:
    recent_items: int = 200  # the newest items count as recent
    recent_fraction: float = 0.5  # share of a batch drawn from the recent items, 0-1
    priority_fraction: float = 0.7  # share drawn by priority (the rest uniformly), 0-1
    intensity_weight: float = 1.0
    social_weight: float = 0.5
    novelty_weight: float = 0.5
    social_dimensions: tuple[str, ...] = ("empathy", "social_coherence")
    unsafe_below: float = 0.5  # safety scores under this are deprioritised
    unsafe_factor: float = 0.1  # ... their priority times this

    def __post_init__(self) -> None:
        for name in ("recent_fraction", "priority_fraction", "unsafe_below", "unsafe_factor"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"replay {name} {value} is outside 0-1")
        if self.recent_items < 1:
            raise ValueError(f"replay recent_items {self.recent_items} must be at least 1")


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
    """Items as a DataFrame (columns: id, time, source, prompt, chosen, rejected, reward_intensity,
    safety_score, vector) in time order, with their priorities."""

    items: pd.DataFrame
    settings: ReplaySettings = field(default_factory=ReplaySettings)

    def __post_init__(self) -> None:
        missing = {"id", "time", "source", "prompt", "chosen", "reward_intensity", "safety_score", "vector"} - set(self.items.columns)
        if missing:
            raise ValueError(f"replay items lack column(s) {sorted(missing)}")
        self.items = self.items.sort_values("time", kind="stable").reset_index(drop=True)
        if "rejected" not in self.items:
            self.items["rejected"] = None
        self.items["priority"] = self.priorities()

    def priorities(self) -> np.ndarray:
        s, items = self.settings, self.items
        intensity = items["reward_intensity"].astype(float).clip(0, 1).to_numpy()
        social = np.array([np.mean([(float(v.get(d, 0.0)) + 1) / 2 for d in s.social_dimensions]) if isinstance(v, dict) else 0.0
                           for v in items["vector"]])  # the vector is in [-1, 1]
        new = novelty(list(items["prompt"]))
        p = s.intensity_weight * intensity + s.social_weight * social + s.novelty_weight * new
        unsafe = items["safety_score"].astype(float).to_numpy() < s.unsafe_below
        return np.where(unsafe, p * s.unsafe_factor, p) + 1e-6  # never exactly 0: every item stays reachable

    def sample(self, n: int, rng: np.random.Generator) -> pd.DataFrame:
        """`n` distinct items (all of them when there are fewer), mixed as the settings say."""
        total = len(self.items)
        if n >= total:
            return self.items.copy()
        s = self.settings
        recent = np.arange(max(0, total - s.recent_items), total)
        old = np.arange(0, max(0, total - s.recent_items))
        want_recent = min(len(recent), max(n - len(old), round(n * s.recent_fraction)))
        chosen = np.concatenate([self._draw(recent, want_recent, rng), self._draw(old, n - want_recent, rng)])
        return self.items.iloc[np.sort(chosen)].reset_index(drop=True)

    def _draw(self, pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        if n <= 0 or not len(pool):
            return np.zeros(0, dtype=np.int64)
        by_priority = min(len(pool), round(n * self.settings.priority_fraction))
        weights = self.items["priority"].to_numpy()[pool]
        first = rng.choice(pool, size=by_priority, replace=False, p=weights / weights.sum()) if by_priority else np.zeros(0, dtype=np.int64)
        rest = np.setdiff1d(pool, first)
        second = rng.choice(rest, size=min(len(rest), n - by_priority), replace=False) if n > by_priority else np.zeros(0, dtype=np.int64)
        return np.concatenate([first, second]).astype(np.int64)


def teacher_items(labels: pd.DataFrame, day: str) -> pd.DataFrame:
    """Replay items from a day of teacher labels (one per labeled reply)."""
    return pd.DataFrame({
        "id": [f"teacher:{day}:{i}" for i in range(len(labels))], "time": f"{day}T00:00:00+00:00", "source": f"teacher:{day}",
        "prompt": labels["prompt"].to_numpy(), "chosen": labels["response"].to_numpy(), "rejected": None,
        "reward_intensity": labels["reward_intensity"].to_numpy(), "safety_score": labels["safety_score"].to_numpy(), "vector": list(labels["vector"]),
    })
