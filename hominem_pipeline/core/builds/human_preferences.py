"""The `human_preferences` stage: human preference pairs imported with `hominem data import-preferences`."""

from __future__ import annotations

import logging

import pandas as pd

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.stage import StageContext, StageOutput

log = logging.getLogger(__name__)


def build_human_preferences(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.human.preferences import inbox_files

    files = inbox_files(ctx.cfg.data_dir, ctx.partition)
    if not files:
        raise ValueError(
            f"nothing imported for {ctx.partition}; import a file first: "
            f"hominem data import-preferences PATH --format hh-rlhf --date {ctx.partition}"
        )
    parsed = [(path, fmt, _parse_or_quarantine(path, fmt)) for path, fmt, _ in files]
    pairs = pd.concat([p.pairs for _, _, p in parsed], ignore_index=True)
    before = len(pairs)
    pairs = pairs.drop_duplicates("pair_id", keep="first").reset_index(drop=True)
    quarantine = pd.concat([p.quarantine for _, _, p in parsed], ignore_index=True)
    pairs.to_parquet(ctx.out_dir / "pairs.parquet", index=False)
    return StageOutput(
        metrics={
            "pairs": len(pairs),
            "quarantined": len(quarantine),
            "duplicates_dropped": before - len(pairs),
            "files": len(files),
        },
        metadata={
            "rows": len(pairs),
            "files": {
                path.name: {"format": fmt, "pairs": len(p.pairs), "quarantined": len(p.quarantine)}
                for path, fmt, p in parsed
            },
            "quarantine_reasons": quarantine["reason"].value_counts().head(10).to_dict() if len(quarantine) else {},
        },
        table="pairs.parquet",
        quarantine=quarantine,
    )


def _parse_or_quarantine(path, fmt: str):
    """A file of the inbox parsed; one that cannot be read at all (put there before imports were checked,
    or damaged since) becomes one quarantined row saying why, so it does not block the day's other files."""
    from hominem_pipeline.core.human.preferences import (
        HUMAN_PAIR_COLUMNS,
        QUARANTINE_COLUMNS,
        ParsedFile,
        PreferenceImportError,
        parse_preference_file,
    )

    try:
        return parse_preference_file(path, fmt, path.name)
    except PreferenceImportError as exc:
        log.warning("%s", exc)
        return ParsedFile(
            pd.DataFrame(columns=HUMAN_PAIR_COLUMNS),
            pd.DataFrame(
                [{"source_file": path.name, "source_row": -1, "reason": f"unreadable file: {exc}", "raw": ""}],
                columns=QUARANTINE_COLUMNS,
            ),
        )


def inbox_digest(cfg: HominemConfig, partition: str) -> list[list[str]]:
    from hominem_pipeline.core.human.preferences import inbox_files

    return [[path.name, fmt, sha] for path, fmt, sha in inbox_files(cfg.data_dir, partition)]
