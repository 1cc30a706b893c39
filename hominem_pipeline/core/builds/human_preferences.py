"""The `human_preferences` stage: human preference pairs imported with `hominem data import-preferences`."""

from __future__ import annotations

import logging

import pandas as pd

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.stage import StageContext, StageOutput

log = logging.getLogger(__name__)


def build_human_preferences(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.human.preferences import (
        inbox_files,
        parse_preference_file,
    )

    files = inbox_files(ctx.cfg.data_dir, ctx.partition)
    if not files:
        raise ValueError(
            f"nothing imported for {ctx.partition}; import a file first: "
            f"hominem data import-preferences PATH --format hh-rlhf --date {ctx.partition}"
        )
    parsed = [(path, fmt, parse_preference_file(path, fmt, path.name)) for path, fmt, _ in files]
    pairs = pd.concat([p.pairs for _, _, p in parsed], ignore_index=True)
    before = len(pairs)
    pairs = pairs.drop_duplicates("pair_id", keep="first").reset_index(drop=True)
    quarantine = pd.concat([p.quarantine for _, _, p in parsed], ignore_index=True)
    pairs.to_parquet(ctx.out_dir / "pairs.parquet", index=False)
    return StageOutput(
        metrics={"pairs": len(pairs), "quarantined": len(quarantine), "duplicates_dropped": before - len(pairs), "files": len(files)},
        metadata={
            "rows": len(pairs),
            "files": {path.name: {"format": fmt, "pairs": len(p.pairs), "quarantined": len(p.quarantine)} for path, fmt, p in parsed},
            "quarantine_reasons": quarantine["reason"].value_counts().head(10).to_dict() if len(quarantine) else {},
        },
        table="pairs.parquet",
        quarantine=quarantine,
    )


def inbox_digest(cfg: HominemConfig, partition: str) -> list[list[str]]:
    from hominem_pipeline.core.human.preferences import inbox_files

    return [[path.name, fmt, sha] for path, fmt, sha in inbox_files(cfg.data_dir, partition)]
