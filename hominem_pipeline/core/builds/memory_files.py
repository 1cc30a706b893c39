"""The memory files (`policy.dual.memory_files`) the dual adapter trains on and the memory probe asks."""

from __future__ import annotations

from pathlib import Path

from hominem_pipeline.core.config import HominemConfig


def memory_paths(cfg: HominemConfig) -> list[Path]:
    return [cfg.path(p) for p in cfg.policy.dual.memory_files]


def memory_files_digest(cfg: HominemConfig, partition: str) -> list[list[str]]:
    """The memory files' digests (`policy.dual.memory_files` and data/sft/): new or edited rows retrain a
    dual adapter and re-run the memory probe."""
    from hominem_pipeline.core.evaluation.memory import memory_digest

    return memory_digest(memory_paths(cfg))
