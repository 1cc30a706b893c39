"""Daily partitions and the windows training stages read."""

from __future__ import annotations

import warnings

from dagster import BetaWarning, DailyPartitionsDefinition, TimeWindowPartitionMapping

from hominem_pipeline.core.config import HominemConfig


def daily_partitions(cfg: HominemConfig) -> DailyPartitionsDefinition:
    # end_offset=1 makes today's (still running) day a partition, so `hominem run` can target it.
    return DailyPartitionsDefinition(start_date=cfg.project.partitions_start.isoformat(), end_offset=1)


def trailing_days(days: int) -> TimeWindowPartitionMapping:
    """The `days` days up to and including the downstream partition's own date; days before the first
    partition are allowed (they are simply not there)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)  # allow_nonexistent_upstream_partitions is beta
        return TimeWindowPartitionMapping(start_offset=-(days - 1), end_offset=0, allow_nonexistent_upstream_partitions=True)
