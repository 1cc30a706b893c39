"""When to retrain: data-volume thresholds for the memory (SFT) and reward (preference) channels.

The design's cadence (execution plan, Phase 7): retrain when the memory channel has 500 new
conversations, or the reward channel 200 new preference pairs, or both reach 50% of those.
`count_training_data` is the one place that counts: what people said to `hominem serve`
(`human_feedback`: conversations and their preference pairs) and the human pairs they imported.
"""

from __future__ import annotations

from dataclasses import dataclass

from hominem_pipeline.core.config import RetrainConfig
from hominem_pipeline.core.lineage import Lineage


@dataclass(frozen=True)
class DataCounts:
    conversations: int  # memory channel: conversation turns available for SFT
    preference_pairs: int  # reward channel

    def since(self, earlier: DataCounts) -> DataCounts:
        return DataCounts(
            conversations=max(0, self.conversations - earlier.conversations),
            preference_pairs=max(0, self.preference_pairs - earlier.preference_pairs),
        )


@dataclass(frozen=True)
class RetrainDecision:
    retrain: bool
    reason: str


def should_retrain(new: DataCounts, cfg: RetrainConfig) -> RetrainDecision:
    mem, rew = new.conversations, new.preference_pairs
    if mem >= cfg.memory_conversations:
        return RetrainDecision(True, f"memory channel: {mem} new conversations >= {cfg.memory_conversations}")
    if rew >= cfg.reward_pairs:
        return RetrainDecision(True, f"reward channel: {rew} new preference pairs >= {cfg.reward_pairs}")
    mem_min = cfg.combined_fraction * cfg.memory_conversations
    rew_min = cfg.combined_fraction * cfg.reward_pairs
    if mem >= mem_min and rew >= rew_min:
        return RetrainDecision(True, f"both channels at {cfg.combined_fraction:.0%}: {mem} conversations, {rew} pairs")
    return RetrainDecision(
        False,
        f"not yet: {mem}/{cfg.memory_conversations} conversations, {rew}/{cfg.reward_pairs} preference pairs",
    )


def _rows(lineage: Lineage, asset: str, key: str = "rows") -> int:
    """A metadata count (`rows` by default) summed over the versions this config implies, every day that has one."""
    total = 0
    for partition in lineage.store.partitions(asset):
        if (ref := lineage.expected(asset, partition)) is not None:
            total += int(ref.manifest.get("metadata", {}).get(key, 0))
    return total


def count_training_data(lineage: Lineage) -> DataCounts:
    """Everything people have given so far, under one config: the conversations held with the
    service, and the preference pairs from their feedback and imports (the teacher's own output does
    not count: it arrives every day by itself)."""
    return DataCounts(
        conversations=_rows(lineage, "human_feedback", "conversations"),
        preference_pairs=_rows(lineage, "human_feedback") + _rows(lineage, "human_preferences"),
    )


def drift_to_act_on(lineage: Lineage, acted: str | None) -> tuple[str, str] | None:
    """(version, reason) of the newest `attunement` day under this config when it reports drift
    (`preference_drift`: people's preferences or the served replies moved) and is not `acted`, the
    version a retrain was already started for; None otherwise."""
    days = [d for d in lineage.store.partitions("attunement") if lineage.expected("attunement", d) is not None]
    if not days:
        return None
    ref = lineage.expected("attunement", days[-1])
    drifted = ref.manifest.get("metadata", {}).get("drifted")
    if not isinstance(drifted, list) or not drifted or ref.version == acted:
        return None
    return ref.version, f"drift on {days[-1]}: " + "; ".join(drifted[:3])
