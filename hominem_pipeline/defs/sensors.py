"""`data_threshold_retrain_sensor`: retrain when enough new feedback has arrived since the last retrain
(counted from the interaction log, `core/pipeline/retrain.py`), or when the day's attunement reports drift."""

# No `from __future__ import annotations`: Dagster reads the context/resource annotations at runtime.

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from hominem_pipeline.core.pipeline.retrain import read_state, record_run, retrain_tick
from hominem_pipeline.defs.resources import HominemResource

RUN_KEY_TAG = "dagster/run_key"  # the tag Dagster gives a run a sensor's request started


def sensor_tick(cursor, hominem_cfg, jobs: dict | None = None):
    """(run request or None, new cursor, reason): `core.pipeline.retrain.retrain_tick` as Dagster's request, for the
    job its decision names (`jobs`: retrain/daily -> job name; None: the request names no job)."""
    tick = retrain_tick(cursor, hominem_cfg)
    if tick.request is None:
        return None, tick.cursor, tick.reason
    r = tick.request
    return (
        RunRequest(run_key=r.run_key, partition_key=r.partition, tags=r.tags, job_name=(jobs or {}).get(r.job)),
        tick.cursor,
        tick.reason,
    )


def _follow_last_run(context: SensorEvaluationContext, cfg) -> None:
    """Write the id and status of the run the last request started into the sensor's state file."""
    state = read_state(cfg.data_dir) or {}
    key = (state.get("last_request") or {}).get("run_key")
    if not key:
        return
    runs = context.instance.get_runs(filters=RunsFilter(tags={RUN_KEY_TAG: key}), limit=1)
    if runs:
        run = runs[0]
        ended = run.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
        record_run(cfg, {"run_id": run.run_id, "job": run.job_name, "status": run.status.value, "ended": ended})


def build_retrain_sensor(retrain_job, daily_job, interval_seconds: int, running: bool):
    jobs = {"retrain": retrain_job.name, "daily": daily_job.name}

    @sensor(
        name="data_threshold_retrain_sensor",
        jobs=[retrain_job, daily_job],
        minimum_interval_seconds=interval_seconds,
        default_status=DefaultSensorStatus.RUNNING if running else DefaultSensorStatus.STOPPED,
        description="Retrains when the conversations or preference pairs people gave through `hominem serve` "
        "(counted from the interaction log) "
        "cross retrain.reward_pairs / retrain.memory_conversations since the last retrain, or when the "
        "day's attunement reports that "
        "people's preferences or the served replies drifted: the day's feedback, the reward model and "
        "everything after it, through "
        "the live gate (the whole chain when the day has no labels yet). retrain.sensor switches its default off.",
    )
    def data_threshold_retrain_sensor(context: SensorEvaluationContext, hominem: HominemResource):
        cfg = hominem.load()
        _follow_last_run(context, cfg)
        request, cursor, reason = sensor_tick(context.cursor, cfg, jobs)
        if request is None:
            return SensorResult(skip_reason=SkipReason(reason), cursor=cursor)
        context.log.info(reason)
        return SensorResult(run_requests=[request], cursor=cursor)

    return data_threshold_retrain_sensor
