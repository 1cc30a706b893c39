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
    RetrainDecision,
    count_training_data,
    drift_to_act_on,
    should_retrain,
)
from hominem_pipeline.defs.resources import HominemResource


def sensor_tick(cursor: str | None, hominem_cfg) -> tuple[RunRequest | None, str, str]:
    """(run request or None, new cursor, reason). The cursor holds the counts at the last retrain, so
    only data that arrived since then counts towards the thresholds, and the attunement version whose
    drift a retrain was started for (`drift`), so one drift starts one retrain."""
    data = lineage(hominem_cfg)
    now = count_training_data(data)
    state = json.loads(cursor) if cursor else {}
    acted = state.pop("drift", None)
    seen = DataCounts(**state) if state else DataCounts(0, 0)
    decision = should_retrain(now.since(seen), hominem_cfg.retrain)
    drift = drift_to_act_on(data, acted)
    if not decision.retrain and drift is not None:
        decision = RetrainDecision(True, drift[1] + f" ({decision.reason.removeprefix('not yet: ')})")
    keep = json.dumps(seen.__dict__ | ({"drift": acted} if acted else {}))
    if not decision.retrain:
        return None, cursor or keep, decision.reason
    labeled = [d for d in data.store.partitions("teacher_labels") if data.expected("teacher_labels", d) is not None]
    if not labeled:
        return None, cursor or keep, "thresholds reached but no teacher_labels partition to train on"
    partition = labeled[-1]
    request = RunRequest(
        # One run per distinct data state: a repeated tick over the same counts launches nothing new.
        run_key=f"retrain-{partition}-{now.conversations}-{now.preference_pairs}" + (f"-drift-{drift[0]}" if drift is not None else ""),
        partition_key=partition,
        tags={"hominem/trigger": "drift" if decision.reason.startswith("drift") else "data_threshold", "hominem/reason": decision.reason[:200]},
    )
    acted = drift[0] if drift is not None else acted
    return request, json.dumps(now.__dict__ | ({"drift": acted} if acted else {})), decision.reason


def build_retrain_sensor(job, interval_seconds: int):
    @sensor(
        name="data_threshold_retrain_sensor",
        job=job,
        minimum_interval_seconds=interval_seconds,
        default_status=DefaultSensorStatus.STOPPED,
        description="Retrains the reward model and adapter when new conversations or preference pairs cross the configured thresholds, "
                    "or when the day's attunement reports that people's preferences or the served replies drifted.",
    )
    def data_threshold_retrain_sensor(context: SensorEvaluationContext, hominem: HominemResource):
        cfg = hominem.load()
        request, cursor, reason = sensor_tick(context.cursor, cfg)
        if request is None:
            return SensorResult(skip_reason=SkipReason(reason), cursor=cursor)
        context.log.info(reason)
        return SensorResult(run_requests=[request], cursor=cursor)

    return data_threshold_retrain_sensor
