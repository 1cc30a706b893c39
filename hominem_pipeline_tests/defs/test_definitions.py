import datetime as dt

from dagster import AssetKey, DailyPartitionsDefinition, TimeWindowPartitionMapping

from hominem_pipeline.defs import DAILY_JOB, IMPORT_JOB, RETRAIN_JOB, build_definitions

CHAIN = [
    "prompts",
    "teacher_trajectories",
    "teacher_labels",
    "human_feedback",
    "reward_model",
    "preference_pairs",
    "lora_adapter",
    "evaluation",
    "reward_health_index",
    "probes",
    "predictions",
    "attunement",
]
ASSETS = [*CHAIN, "human_preferences"]


def test_definitions_load_with_twelve_daily_partitioned_assets(project):
    defs = build_definitions(str(project / "config" / "tiny.yaml"), root=project)
    graph = defs.resolve_asset_graph()
    assert sorted(k.to_user_string() for k in graph.get_all_asset_keys()) == sorted(ASSETS)
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    for name in ASSETS:
        partitions = graph.get(AssetKey(name)).partitions_def
        assert isinstance(partitions, DailyPartitionsDefinition)
        assert partitions.has_partition_key(today)  # today's partition exists (end_offset=1)
    daily = defs.resolve_job_def(DAILY_JOB)
    assert sorted(k.to_user_string() for k in daily.asset_layer.executable_asset_keys) == sorted(CHAIN)
    retrain = defs.resolve_job_def(RETRAIN_JOB)
    assert sorted(k.to_user_string() for k in retrain.asset_layer.executable_asset_keys) == sorted(
        CHAIN[3:]
    )  # the day's feedback onwards
    assert [k.to_user_string() for k in defs.resolve_job_def(IMPORT_JOB).asset_layer.executable_asset_keys] == [
        "human_preferences"
    ]
    assert {s.name for s in defs.sensors} == {"data_threshold_retrain_sensor"}
    assert {s.name for s in defs.schedules} == {"weekly_retrain_schedule"}


def test_without_a_start_the_partitions_begin_at_the_projects_first_day(project, tiny_cfg, monkeypatch):
    from hominem_pipeline.defs.partitions import REACH_ENV
    from hominem_pipeline.testing.artifacts import publish_expected

    (project / "config" / "first.yaml").write_text("extends: config/tiny.yaml\nproject: {partitions_start: null}\n")
    monkeypatch.delenv(REACH_ENV, raising=False)

    def first() -> str:
        defs = build_definitions(str(project / "config" / "first.yaml"), root=project)
        return defs.resolve_job_def(DAILY_JOB).partitions_def.get_first_partition_key()

    today = dt.datetime.now(dt.timezone.utc).date()
    assert first() == today.isoformat()  # nothing built: today alone, the catalog 100% filled by its first run
    built = (today - dt.timedelta(days=3)).isoformat()
    publish_expected(tiny_cfg, "teacher_labels", built)
    assert first() == built  # the first built day
    monkeypatch.setenv(REACH_ENV, "2026-11-02")  # `hominem run --date 2026-11-02` (or its --fill-window) reaches back
    assert first() == "2026-11-02"


def test_training_assets_read_a_window_of_days(project):
    defs = build_definitions(str(project / "config" / "tiny.yaml"), root=project)
    graph = defs.resolve_asset_graph()
    node = graph.get(AssetKey("reward_model"))
    mapping = node.partition_mappings[AssetKey("teacher_labels")]
    assert isinstance(mapping, TimeWindowPartitionMapping)
    assert (mapping.start_offset, mapping.end_offset) == (-6, 0)  # reward_model.window_days = 7
    upstream = {k.to_user_string() for k in node.parent_keys}
    assert upstream == {
        "teacher_labels",
        "human_preferences",
        "human_feedback",
    }  # people's pairs of the same window train it too
    for human in ("human_preferences", "human_feedback"):
        assert (
            node.partition_mappings[AssetKey(human)].start_offset,
            node.partition_mappings[AssetKey(human)].end_offset,
        ) == (-6, 0)
    # the prediction log reads the reward model of the day before (it never trained on the day's choices); the
    # attunement reads both drift windows of predictions (1 recent + 14 reference days)
    predictions = graph.get(AssetKey("predictions")).partition_mappings[AssetKey("reward_model")]
    assert (predictions.start_offset, predictions.end_offset) == (-1, 0)
    attunement = graph.get(AssetKey("attunement")).partition_mappings[AssetKey("predictions")]
    assert (attunement.start_offset, attunement.end_offset) == (-14, 0)
    adapter = graph.get(
        AssetKey("lora_adapter")
    )  # people's own pairs of policy.window_days teach the daily adapter too
    assert {k.to_user_string() for k in adapter.parent_keys} == {
        "preference_pairs",
        "reward_model",
        "human_preferences",
        "human_feedback",
    }
    for human in ("human_preferences", "human_feedback"):
        assert (
            adapter.partition_mappings[AssetKey(human)].start_offset,
            adapter.partition_mappings[AssetKey(human)].end_offset,
        ) == (-6, 0)


def test_every_assets_dagster_parents_and_code_version_come_from_the_stage_table(project, tiny_cfg):
    from hominem_pipeline.core.pipeline.lineage import definition_version
    from hominem_pipeline.core.pipeline.stages import STAGES

    defs = build_definitions(str(project / "config" / "tiny.yaml"), root=project)
    graph = defs.resolve_asset_graph()
    for stage in STAGES:
        node = graph.get(AssetKey(stage.name))
        assert {k.to_user_string() for k in node.parent_keys} == {i.asset for i in stage.inputs}, stage.name
        assert node.code_version == definition_version(stage, tiny_cfg) and node.group_name == stage.group


def test_labels_check_blocks_when_too_many_rows_are_quarantined(tiny_cfg):
    from hominem_pipeline.core.builds.teacher_labels import labels_pass_verifier

    ok = labels_pass_verifier({"labels": 19, "quarantined": 1}, tiny_cfg)
    assert ok.passed and ok.metadata["quarantined"] == 1
    bad = labels_pass_verifier({"labels": 9, "quarantined": 11}, tiny_cfg)  # tiny.yaml allows 50%
    assert not bad.passed and "11/20 rows quarantined" in bad.description


def test_human_agreement_check_warns_below_the_floor_and_passes_without_people(tiny_cfg):
    from hominem_pipeline.core.builds.reward_model import human_agreement

    floor = tiny_cfg.reward_model.min_human_agreement
    none = human_agreement({"val_pairwise_accuracy": 0.9, "val_pairs": 12}, tiny_cfg)
    assert none.passed and "no human pairs" in none.description and "90.0%" in none.description
    good = human_agreement(
        {"val_human_accuracy": floor + 0.1, "val_human_pairs": 40, "val_pairwise_accuracy": 0.8, "val_pairs": 12},
        tiny_cfg,
    )
    assert good.passed and good.metadata["human_agreement"] == floor + 0.1 and good.metadata["judge_agreement"] == 0.8
    bad = human_agreement(
        {"val_human_accuracy": floor - 0.1, "val_human_pairs": 40, "val_pairwise_accuracy": 0.8, "val_pairs": 12},
        tiny_cfg,
    )
    assert not bad.passed and "of 40" in bad.description and "below" in bad.description


def test_reward_model_carries_warning_checks_for_people_and_the_fixtures(project):
    defs = build_definitions(str(project / "config" / "tiny.yaml"), root=project)
    specs = sorted(defs.resolve_assets_def("reward_model").check_specs, key=lambda s: s.name)
    assert [s.name for s in specs] == ["human_agreement", "reward_dimension_fixtures", "reward_fixtures"] and not any(
        s.blocking for s in specs
    )


def test_teacher_labels_carries_a_blocking_verifier_check(project):
    defs = build_definitions(str(project / "config" / "tiny.yaml"), root=project)
    [spec] = defs.resolve_assets_def("teacher_labels").check_specs
    assert spec.name == "labels_pass_verifier" and spec.blocking
