"""The `human_feedback` stage: one day of the interaction log (`hominem serve`) as human preference
pairs and conversations."""

from __future__ import annotations

from pathlib import Path

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.stage import StageContext, StageOutput

PAIRS, CONVERSATIONS = "pairs.parquet", "conversations.parquet"
DIMENSION_PAIRS = "dimension_pairs.parquet"  # the nudges' pairs, about one dimension each (the reward model's alone)


def log_file(cfg: HominemConfig, partition: str) -> Path:
    from hominem_pipeline.core.online.log import log_folder

    return log_folder(cfg) / f"{partition}.jsonl"


def build_human_feedback(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.online.feedback import feedback_tables
    from hominem_pipeline.core.online.log import read_events

    path = log_file(ctx.cfg, ctx.partition)
    events = list(read_events(path)) if path.exists() else []
    tables = feedback_tables(events, path.name)
    tables.pairs.to_parquet(ctx.out_dir / PAIRS, index=False)
    tables.conversations.to_parquet(ctx.out_dir / CONVERSATIONS, index=False)
    tables.dimension_pairs.to_parquet(ctx.out_dir / DIMENSION_PAIRS, index=False)
    stats = tables.stats
    return StageOutput(
        metrics={k: v for k, v in stats.items() if isinstance(v, (int, float))},
        # `rows` (pairs) and `conversations` are what the retrain sensor counts
        metadata={
            "rows": stats["pairs"],
            "conversations": stats["conversations"],
            "turns": stats["turns"],
            "events": stats["events"],
            "log": str(path) if path.exists() else f"{path} (none yet: nobody talked to `hominem serve` that day)",
        },
        table=PAIRS,
    )


def log_digest(cfg: HominemConfig, partition: str) -> str | None:
    """The day's log file by content: each new event makes a new version (None: no log that day)."""
    from hominem_pipeline.core.pipeline.artifacts import file_sha256

    path = log_file(cfg, partition)
    return file_sha256(path) if path.exists() else None
