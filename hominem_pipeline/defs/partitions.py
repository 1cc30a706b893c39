"""Daily partitions and the windows training stages read."""

from __future__ import annotations

import datetime as dt
import os
import warnings

from dagster import BetaWarning, DailyPartitionsDefinition, TimeWindowPartitionMapping

from hominem_pipeline.core.config import HominemConfig

# a day the definitions must offer (`hominem run --date` sets it, child processes inherit it)
REACH_ENV = "HOMINEM_PARTITIONS_FROM"


def first_partition(cfg: HominemConfig) -> dt.date:
    """project.partitions_start, else the project's first day: the earliest day anything is built for or
    the service logged (today before any), reaching back to $HOMINEM_PARTITIONS_FROM."""
    if cfg.project.partitions_start is not None:
        return cfg.project.partitions_start
    days = [dt.datetime.now(dt.timezone.utc).date()]
    if reach := os.environ.get(REACH_ENV):
        days.append(dt.date.fromisoformat(reach))
    data = cfg.data_dir
    if data.is_dir():
        from hominem_pipeline.core.online.log import log_folder
        from hominem_pipeline.core.pipeline.stages import STAGES

        folders = [data / s.name for s in STAGES] + [log_folder(cfg)]
        for folder in folders:
            for entry in folder.iterdir() if folder.is_dir() else ():
                try:
                    days.append(dt.date.fromisoformat(entry.name.removesuffix(".jsonl")))
                except ValueError:
                    continue
    return min(days)


def daily_partitions(cfg: HominemConfig) -> DailyPartitionsDefinition:
    # end_offset=1 makes today's (still running) day a partition, so `hominem run` can target it.
    return DailyPartitionsDefinition(start_date=first_partition(cfg).isoformat(), end_offset=1)


def trailing_days(days: int) -> TimeWindowPartitionMapping:
    """The `days` days up to and including the downstream partition's own date; days before the first
    partition are allowed (they are simply not there)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)  # allow_nonexistent_upstream_partitions is beta
        return TimeWindowPartitionMapping(
            start_offset=-(days - 1), end_offset=0, allow_nonexistent_upstream_partitions=True
        )
