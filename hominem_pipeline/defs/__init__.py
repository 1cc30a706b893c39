"""Dagster wiring: thin assets over `hominem_pipeline.core`, resources, partitions, sensors, schedules."""

from hominem_pipeline.defs.build import (
    DAILY_JOB,
    IMPORT_JOB,
    RETRAIN_JOB,
    build_definitions,
)

__all__ = ["DAILY_JOB", "IMPORT_JOB", "RETRAIN_JOB", "build_definitions"]
