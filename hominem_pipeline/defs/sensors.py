"""`data_threshold_retrain_sensor`: retrain when enough new data has arrived since the last retrain."""

# No `from __future__ import annotations`: Dagster reads the context/resource annotations at runtime.

import json

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from hominem_pipeline.core.lineage import lineage
from hominem_pipeline.core.retrain import (
    DataCounts,
    count_training_data,
    should_retrain,
)
from hominem_pipeline.defs.resources import HominemResource


def sensor_tick(cursor: str | None, hominem_cfg) -> tuple[RunRequest | None, str, str]:
    """(run request or None, new cursor, reason). The cursor holds the counts at the last retrain, so
    only data that arrived since then counts towards the thresholds."""
    data = lineage(hominem_cfg)
    now = count_training_data(data)
    seen = DataCounts(**json.loads(cursor)) if cursor else DataCounts(0, 0)
    decision = should_retrain(now.since(seen), hominem_cfg.retrain)
    if not decision.retrain:
        return None, cursor or json.dumps(seen.__dict__), decision.reason
    labeled = [d for d in data.store.partitions("teacher_labels") if data.expected("teacher_labels", d) is not None]
    if not labeled:
        return None, cursor or json.dumps(seen.__dict__), "thresholds reached but no teacher_labels partition to train on"
    partition = labeled[-1]
    request = RunRequest(
        # One run per distinct data state: a repeated tick over the same counts launches nothing new.
        run_key=f"retrain-{partition}-{now.conversations}-{now.preference_pairs}",
        partition_key=partition,
        tags={"hominem/trigger": "data_threshold", "hominem/reason": decision.reason[:200]},
    )
    return request, json.dumps(now.__dict__), decision.reason


def build_retrain_sensor(job, interval_seconds: int):
    @sensor(
        name="data_threshold_retrain_sensor",
        job=job,
        minimum_interval_seconds=interval_seconds,
        default_status=DefaultSensorStatus.STOPPED,
        description="Retrains the reward model and adapter when new conversations or preference pairs cross the configured thresholds.",
    )
    def data_threshold_retrain_sensor(context: SensorEvaluationContext, hominem: HominemResource):
        cfg = hominem.load()
        request, cursor, reason = sensor_tick(context.cursor, cfg)
        if request is None:
            return SensorResult(skip_reason=SkipReason(reason), cursor=cursor)
        context.log.info(reason)
        return SensorResult(run_requests=[request], cursor=cursor)

    return data_threshold_retrain_sensor
