"""`weekly_retrain_schedule`: the whole chain for the scheduled day, once a week."""

# No `from __future__ import annotations`: Dagster reads the context/resource annotations at runtime.

from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    ScheduleEvaluationContext,
    schedule,
)


def build_weekly_schedule(job, cron: str, running: bool):
    @schedule(
        name="weekly_retrain_schedule",
        job=job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.RUNNING if running else DefaultScheduleStatus.STOPPED,
        description="Materializes every asset for the day of the tick (new prompts, labels, models, evaluation): "
        "the reward model and the adapter "
        "retrain on their windows of days, the feedback people gave on each of those days included. "
        "retrain.schedule switches its default off.",
    )
    def weekly_retrain_schedule(context: ScheduleEvaluationContext):
        day = context.scheduled_execution_time.date().isoformat()
        return RunRequest(run_key=f"weekly-{day}", partition_key=day, tags={"hominem/trigger": "weekly"})

    return weekly_retrain_schedule
