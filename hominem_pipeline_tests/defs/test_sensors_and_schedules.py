import datetime as dt
import json

from dagster import (
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
)

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.defs import build_definitions
from hominem_pipeline.defs.resources import HominemResource
from hominem_pipeline.defs.sensors import sensor_tick
from hominem_pipeline.testing.artifacts import publish_expected
from hominem_pipeline_tests.core.test_retrain import write_choices_by_hand


def fake_partition(cfg, asset, day, rows, **metadata):
    publish_expected(cfg, asset, day, rows, metadata=metadata)


def test_sensor_counts_what_people_said_and_triggers_once_per_data_state(tiny_cfg):
    request, cursor, reason = sensor_tick(None, tiny_cfg)
    assert request is None and "0/500 conversations" in reason

    fake_partition(tiny_cfg, "teacher_trajectories", "2026-11-20", 3000)  # the teacher's own output does not count
    fake_partition(tiny_cfg, "teacher_labels", "2026-11-20", 3000)
    fake_partition(tiny_cfg, "preference_pairs", "2026-11-20", 900)
    assert sensor_tick(cursor, tiny_cfg)[0] is None
    write_choices_by_hand(LOG(tiny_cfg), "2026-11-20", 90)  # 90 choices on the page, in 90 conversations
    fake_partition(tiny_cfg, "human_preferences", "2026-11-20", 30)  # and 30 imported pairs
    request, cursor, reason = sensor_tick(None, tiny_cfg, {"retrain": "hominem_retrain", "daily": "hominem_daily"})
    assert request is None and reason == "not yet: 90/500 conversations, 120/200 preference pairs"
    write_choices_by_hand(LOG(tiny_cfg), "2026-11-20", 300)  # ids t0a..: the first 90 again (written once), 210 new
    request, cursor, reason = sensor_tick(cursor, tiny_cfg, {"retrain": "hominem_retrain", "daily": "hominem_daily"})
    assert isinstance(request, RunRequest) and request.job_name == "hominem_retrain"
    assert request.partition_key == "2026-11-20"
    assert request.run_key == "retrain-2026-11-20-300-330"
    assert reason == "reward channel: 330 new preference pairs >= 200"
    assert request.tags["hominem/new_conversations"] == "300" and request.tags["hominem/new_imported"] == "30"
    assert json.loads(cursor)["preference_pairs"] == 330

    # Nothing new since: no second run.
    again, cursor2, reason = sensor_tick(cursor, tiny_cfg)
    assert again is None and cursor2 == cursor and "0/500" in reason


LOG = lambda cfg: cfg.data_dir / cfg.serving.log_dir / "log"  # noqa: E731


def test_drift_the_attunement_reports_starts_one_retrain(tiny_cfg):
    request, cursor, _ = sensor_tick(None, tiny_cfg)
    fake_partition(tiny_cfg, "teacher_labels", "2026-11-20", 10)
    fake_partition(tiny_cfg, "attunement", "2026-11-20", 3, drifted="none")  # a day without drift: nothing
    assert sensor_tick(cursor, tiny_cfg)[0] is None
    fake_partition(
        tiny_cfg,
        "attunement",
        "2026-11-21",
        3,
        drifted=["all: people now choose the longer reply less often (50% -> 20% of choices)"],
    )
    request, cursor, reason = sensor_tick(cursor, tiny_cfg)
    assert isinstance(request, RunRequest) and request.tags["hominem/trigger"] == "drift"
    assert (
        reason.startswith("drift on 2026-11-21: all: people now choose the longer reply less often")
        and "0/500 conversations" in reason
    )
    assert "-drift-" in request.run_key
    again, cursor2, _ = sensor_tick(cursor, tiny_cfg)  # the same drift: no second run, and the cursor keeps it
    assert again is None and json.loads(cursor2)["drift"] == json.loads(cursor)["drift"]


def test_sensor_evaluates_a_tick_through_dagster_on_a_real_log(project, tiny_cfg):
    defs = build_definitions(str(project / "config" / "tiny.yaml"), root=project)
    sensor = defs.resolve_sensor_def("data_threshold_retrain_sensor")
    assert sensor.default_status == DefaultSensorStatus.RUNNING  # on wherever a daemon runs (retrain.sensor)
    resource = HominemResource(root=str(project), config_path=str(project / "config" / "tiny.yaml"))
    with instance_for_test() as instance:
        ctx = build_sensor_context(instance=instance, resources={"hominem": resource}, definitions=defs)
        result = sensor.evaluate_tick(ctx)
        assert result.run_requests == [] and "not yet" in result.skip_message
        fake_partition(tiny_cfg, "teacher_labels", "2026-11-20", 10)
        write_choices_by_hand(LOG(tiny_cfg), "2026-11-20", 250)
        ctx = build_sensor_context(
            instance=instance, resources={"hominem": resource}, cursor=result.cursor, definitions=defs
        )
        result = sensor.evaluate_tick(ctx)
        [request] = result.run_requests
        assert request.run_key == "retrain-2026-11-20-250-250" and request.job_name == "hominem_retrain"
        assert request.tags["hominem/trigger"] == "data_threshold" and request.tags["hominem/new_choice"] == "250"


def test_sensor_and_schedule_start_stopped_when_the_config_says_so(project):
    import yaml

    overlay = project / "config" / "off.yaml"
    overlay.write_text(
        yaml.safe_dump(
            yaml.safe_load((project / "config" / "tiny.yaml").read_text())
            | {"retrain": {"sensor": False, "schedule": False}}
        )
    )
    defs = build_definitions(str(overlay), root=project)
    assert defs.resolve_sensor_def("data_threshold_retrain_sensor").default_status == DefaultSensorStatus.STOPPED
    assert defs.resolve_schedule_def("weekly_retrain_schedule").default_status == DefaultScheduleStatus.STOPPED


def test_weekly_schedule_requests_the_ticks_day_with_a_run_key(project):
    defs = build_definitions(str(project / "config" / "tiny.yaml"), root=project)
    schedule = defs.resolve_schedule_def("weekly_retrain_schedule")
    assert schedule.cron_schedule == load_config(root=project).retrain.weekly_cron
    assert schedule.default_status == DefaultScheduleStatus.RUNNING
    ctx = build_schedule_context(
        scheduled_execution_time=dt.datetime(2026, 11, 23, 3, 0, tzinfo=dt.timezone.utc),
        repository_def=defs.get_repository_def(),
    )
    [request] = schedule.evaluate_tick(ctx).run_requests
    assert request.run_key == "weekly-2026-11-23" and request.partition_key == "2026-11-23"
    assert (
        schedule.job_name == "hominem_daily"
    )  # the whole chain: the reward model's and the adapter's windows, feedback included
