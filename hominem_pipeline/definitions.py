"""The Dagster entry point (`dagster dev -m hominem_pipeline.definitions`, workspace.yaml).

`HOMINEM_CONFIG` names a config overlay (the CLI's `--config` sets it); without it the project's
`config/hominem.yaml` is used as is.
"""

from __future__ import annotations

import os

from dagster import JobDefinition

from hominem_pipeline.defs import DAILY_JOB, IMPORT_JOB, build_definitions

defs = build_definitions(os.environ.get("HOMINEM_CONFIG") or None)


def daily_job() -> JobDefinition:
    """Module-level accessor so `reconstructable(daily_job)` can rebuild the job in any process."""
    return defs.resolve_job_def(DAILY_JOB)


def import_job() -> JobDefinition:
    """Module-level accessor for `reconstructable(import_job)` (hominem data import-preferences)."""
    return defs.resolve_job_def(IMPORT_JOB)
