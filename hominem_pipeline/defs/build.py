"""Assemble the Definitions from a config: assets, jobs, the retrain sensor and the weekly schedule."""

from __future__ import annotations

from pathlib import Path

from dagster import (
    AssetSelection,
    Definitions,
    ExecutorDefinition,
    define_asset_job,
    in_process_executor,
    multiprocess_executor,
)

from hominem_pipeline.core.config.loader import find_project_root, load_config
from hominem_pipeline.core.pipeline.stages import STAGES
from hominem_pipeline.defs.assets import stage_assets
from hominem_pipeline.defs.live import live_gate_check
from hominem_pipeline.defs.partitions import daily_partitions
from hominem_pipeline.defs.resources import HominemResource
from hominem_pipeline.defs.schedules import build_weekly_schedule
from hominem_pipeline.defs.sensors import build_retrain_sensor
from hominem_pipeline.warnings_seen import silence_known

DAILY_JOB = "hominem_daily"
RETRAIN_JOB = "hominem_retrain"
IMPORT_JOB = "hominem_import"


CELERY_BROKER_ENV = "HOMINEM_CELERY_BROKER"


NO_BROKER = (
    "runtime.executor is celery, but no broker is set: set runtime.celery_broker (redis://host:6379/0) or "
    f"${CELERY_BROKER_ENV}"
)


def celery_broker(runtime) -> str | None:
    """The broker a celery executor uses: $HOMINEM_CELERY_BROKER, else runtime.celery_broker."""
    import os

    return os.environ.get(CELERY_BROKER_ENV) or runtime.celery_broker


def executor_for(runtime) -> ExecutorDefinition:
    """The executor `runtime.executor` names. One process by default: the models each step loads fit in
    memory, and a subprocess per step would only import torch again for each."""
    if runtime.executor == "multiprocess":
        return multiprocess_executor.configured({"max_concurrent": runtime.max_concurrent_steps})
    if runtime.executor == "celery":
        from dagster_celery import celery_executor

        broker = celery_broker(runtime)
        if not broker:
            raise ValueError(NO_BROKER)
        return celery_executor.configured({"broker": broker, "backend": broker})
    return in_process_executor


def build_definitions(config_path: str | None = None, root: Path | None = None) -> Definitions:
    silence_known()
    root = (root or find_project_root()).resolve()
    cfg = load_config(config_path, root=root)
    partitions = daily_partitions(cfg)
    assets = stage_assets(cfg, partitions)
    imported = AssetSelection.assets(*(s.name for s in STAGES if not s.daily))
    daily = define_asset_job(
        DAILY_JOB, selection=AssetSelection.all() - imported, description="The whole chain for one day."
    )
    import_job = define_asset_job(
        IMPORT_JOB, selection=imported, description="Human preferences imported for one day."
    )
    retrain = define_asset_job(
        RETRAIN_JOB,
        selection=AssetSelection.assets("human_feedback") | AssetSelection.assets("reward_model").downstream(),
        description="The day's feedback, then reward model, pairs, adapter, evaluation and health (labels already "
        "there).",
    )
    return Definitions(
        assets=assets,
        asset_checks=[live_gate_check(partitions)],
        jobs=[daily, retrain, import_job],
        sensors=[build_retrain_sensor(retrain, daily, cfg.retrain.sensor_interval_seconds, cfg.retrain.sensor)],
        schedules=[build_weekly_schedule(daily, cfg.retrain.weekly_cron, cfg.retrain.schedule)],
        resources={
            "hominem": HominemResource(
                root=str(root), config_path=str(Path(config_path).resolve()) if config_path else None
            )
        },
        executor=executor_for(cfg.runtime),
    )
