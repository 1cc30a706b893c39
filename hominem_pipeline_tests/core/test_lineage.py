"""Versions are derived from a stage's slice of the config, its inputs' contents and its source, and a
stage reads the input versions its own config implies."""

import shutil
from pathlib import Path

import pytest

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.pipeline.lineage import (
    PACKAGE_ROOT,
    Lineage,
    MissingInput,
    definition_version,
    lineage,
    module_closure,
)
from hominem_pipeline.core.pipeline.stage import SliceError
from hominem_pipeline.core.pipeline.stages import STAGES, STAGES_BY_NAME
from hominem_pipeline.testing.artifacts import publish_expected

DAY = "2026-11-20"
CHAIN = [s.name for s in STAGES if s.daily]  # in table order, upstream first


def planned_versions(cfg, root=PACKAGE_ROOT) -> dict[str, str]:
    """The version of every stage of the chain for DAY, each upstream faked at its expected version with
    bytes of its own (a rebuilt stage writes other bytes: versions follow their inputs' contents)."""
    out = {}
    for name in CHAIN:
        data = Lineage(cfg, STAGES_BY_NAME, root=root)
        out[name] = data.plan(name, DAY).version
        if data.expected(name, DAY) is None:
            publish_expected(cfg, name, DAY, text=f"{name} {out[name]}", root=root)
    return out


def copy_package(tmp_path) -> Path:
    root = tmp_path / "pkg" / "hominem_pipeline"
    shutil.copytree(PACKAGE_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_a_setting_in_a_slice_changes_that_stage_and_its_downstream_only(project, tiny_cfg):
    base = planned_versions(tiny_cfg)
    # policy.beta is in lora_adapter's slice: it and what reads it change, nothing upstream does
    changed = load_config(project / "config" / "tiny.yaml", root=project, overrides={"policy": {"beta": 0.3}})
    after = planned_versions(changed)
    assert [n for n in CHAIN if after[n] != base[n]] == ["lora_adapter", "evaluation", "reward_health_index"]
    # a setting outside every slice (the retrain sensor's threshold) changes nothing
    outside = load_config(project / "config" / "tiny.yaml", root=project, overrides={"retrain": {"reward_pairs": 7}})
    assert planned_versions(outside) == base
    assert not any(p == "retrain" or p.startswith("retrain.") for s in STAGES for p in s.settings(outside))


def test_a_source_line_of_a_module_a_stage_runs_changes_it_and_its_downstream_only(tiny_cfg, tmp_path):
    root = copy_package(tmp_path)
    base = planned_versions(tiny_cfg, root)
    training = root / "core" / "reward" / "training" / "gradient.py"  # run by reward_model alone
    name = "hominem_pipeline.core.reward.training.gradient"
    assert name in module_closure("hominem_pipeline.core.builds.reward_model", root)
    assert name not in module_closure("hominem_pipeline.core.builds.preference_pairs", root)
    training.write_text(training.read_text() + "\n# a changed line\n")
    after = planned_versions(tiny_cfg, root)
    assert [n for n in CHAIN if after[n] != base[n]] == [
        "reward_model",
        "preference_pairs",
        "lora_adapter",
        "evaluation",
        "reward_health_index",
        "probes",
        "predictions",
        "attunement",
    ]
    assert definition_version(STAGES_BY_NAME["reward_model"], tiny_cfg, root) != definition_version(
        STAGES_BY_NAME["reward_model"], tiny_cfg
    )
    assert definition_version(STAGES_BY_NAME["prompts"], tiny_cfg, root) == definition_version(
        STAGES_BY_NAME["prompts"], tiny_cfg
    )


def test_no_stage_version_covers_a_trainer_it_does_not_run():
    """What `hominem data ship-features` writes is trained and measured in its own module: the reward
    model's version does not cover the dual trainer, and no stage's covers the shipping module."""
    closures = {s.name: module_closure(s.build.__module__) for s in STAGES}
    trainers = ("dual", "rl", "dpo", "losses", "people_start")
    policy = [m for m in closures["reward_model"] if m.startswith("hominem_pipeline.core.policy.")]
    assert [m for m in policy if m.split(".")[3] in trainers] == []  # no trainer, nor a module of one
    assert "hominem_pipeline.core.reward.training.ridge_heads" in closures["reward_model"]
    assert any(m.startswith("hominem_pipeline.core.policy.dual.") for m in closures["lora_adapter"])
    assert [n for n, c in closures.items() if "hominem_pipeline.core.builds.shipping" in c] == []


def test_a_version_names_its_inputs_bytes_not_their_names(tiny_cfg):
    """Two builds of the same upstream version id with other bytes (a sampling teacher on another
    machine) make different downstream versions."""
    publish_expected(tiny_cfg, "teacher_labels", DAY, text="one day's labels")
    first = lineage(tiny_cfg).plan("reward_model", DAY).version
    labels = lineage(tiny_cfg).expected("teacher_labels", DAY)
    shutil.rmtree(labels.path)
    publish_expected(tiny_cfg, "teacher_labels", DAY, text="the same settings, other samples")
    assert lineage(tiny_cfg).expected("teacher_labels", DAY).version == labels.version
    assert lineage(tiny_cfg).plan("reward_model", DAY).version != first


def test_two_overlays_in_one_data_folder_each_read_their_own_inputs(project, tiny_cfg):
    other = load_config(
        project / "config" / "tiny.yaml", root=project, overrides={"labeling": {"judge_system": "Judge kindly."}}
    )
    mine = publish_expected(tiny_cfg, "teacher_labels", DAY, text="mine")
    theirs = publish_expected(other, "teacher_labels", DAY, text="theirs")
    assert mine.version != theirs.version
    # written last, the other overlay's labels are not what this config reads
    assert lineage(tiny_cfg).plan("reward_model", DAY).inputs["teacher_labels"] == [mine]
    assert lineage(other).plan("reward_model", DAY).inputs["teacher_labels"] == [theirs]
    # both read the same candidates, whose settings they agree on
    assert lineage(tiny_cfg).expected("teacher_trajectories", DAY) == lineage(other).expected(
        "teacher_trajectories", DAY
    )


def test_a_missing_input_names_its_version_and_the_command_that_builds_it(tiny_cfg):
    with pytest.raises(
        MissingInput,
        match=r"needs teacher_labels for 2026-11-20 as this config builds it \(version [0-9a-f]{16}\), which "
        r"is not built; "
        r"build it: hominem run --date 2026-11-20 --select '\*teacher_labels' --config .*tiny.yaml",
    ):
        publish_expected(tiny_cfg, "teacher_trajectories", DAY)
        lineage(tiny_cfg).plan("reward_model", DAY)
    # earlier days of a window are optional: the first day's model trains on the days that are there
    publish_expected(tiny_cfg, "teacher_labels", DAY)
    assert [r.partition for r in lineage(tiny_cfg).plan("reward_model", DAY).inputs["teacher_labels"]] == [DAY]


def test_a_stage_reads_only_its_slice(project, tiny_cfg):
    view = STAGES_BY_NAME["reward_health_index"].slice(tiny_cfg)
    assert view.health.deploy_threshold == tiny_cfg.health.deploy_threshold
    assert view.data_dir == tiny_cfg.data_dir  # locations are not settings
    assert view.policy.max_length == tiny_cfg.policy.max_length  # DCS on the policy reads its replies at that length
    with pytest.raises(
        SliceError,
        match="stage 'reward_health_index' read the setting 'policy.beta', which is not in its config slice",
    ):
        view.policy.beta  # noqa: B018
    pairs = STAGES_BY_NAME["preference_pairs"].slice(tiny_cfg)
    assert pairs.preferences.min_margin == tiny_cfg.preferences.min_margin
    with pytest.raises(SliceError, match="'evaluation'"):
        pairs.evaluation  # noqa: B018  (only with preferences.against_student)
    dpo = load_config(project / "config" / "tiny.yaml", root=project, overrides={"policy": {"mode": "dpo"}})
    policy = STAGES_BY_NAME["lora_adapter"].slice(dpo)
    assert policy.policy.lora.r == dpo.policy.lora.r
    with pytest.raises(SliceError, match="'policy.dual'"):
        policy.policy.dual  # noqa: B018  (dpo mode reads no dual settings)
    assert "dual" not in policy.policy.model_dump()
    assert (
        STAGES_BY_NAME["lora_adapter"].slice(tiny_cfg).policy.dual.memory_weight == tiny_cfg.policy.dual.memory_weight
    )


def test_an_undeclared_read_is_never_a_silent_default(tiny_cfg):
    view = STAGES_BY_NAME["reward_health_index"].slice(tiny_cfg)
    with pytest.raises(SliceError):
        getattr(view, "preferences", None)
    with pytest.raises(SliceError):
        hasattr(view, "teacher")


def test_an_experiment_made_without_the_model_training_kind_gets_it(tmp_path):
    import mlflow

    from hominem_pipeline.core.pipeline.tracking import EXPERIMENT_KIND, Tracker

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    mlflow.create_experiment(
        "made-by-hand", artifact_location=(tmp_path / "art").as_uri()
    )  # as an older version, or a user, made it
    Tracker(uri, "made-by-hand", tmp_path / "art").runs_for("reward_model")
    assert mlflow.get_experiment_by_name("made-by-hand").tags[EXPERIMENT_KIND[0]] == EXPERIMENT_KIND[1]


def test_feedback_after_a_days_run_leaves_its_stages_readable_and_says_what_changed(tiny_cfg):
    """A new event in the day's log makes a new human_feedback version, so the day's reward model is no
    longer the one this config implies; commands still find the one built before, with a note naming the
    feedback, and only another config's version is refused, saying so."""
    from hominem_pipeline.core.builds.human_feedback import log_file

    log = log_file(tiny_cfg, DAY)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text('{"kind": "turn", "id": "a"}\n')
    publish_expected(tiny_cfg, "human_feedback", DAY, metadata={"events": {"turn": 1}})
    built = publish_expected(tiny_cfg, "reward_model", DAY)
    assert lineage(tiny_cfg).newest("reward_model", DAY) == (built, None)
    with open(log, "a") as fh:  # the page's next rating
        fh.write('{"kind": "thumb", "id": "b"}\n')
    data = lineage(tiny_cfg)
    assert data.expected("reward_model", DAY) is None
    ref, note = data.newest("reward_model", DAY)
    assert (
        ref == built
        and note
        == f"reward_model {DAY} is from before new feedback (1 event(s)); `hominem run --date {DAY} "
        f"--select '*reward_model' --config {tiny_cfg.overlay}` brings it up to date"
    )
    assert (
        data.stale_details(ref)
        == f"reward_model for {DAY} is version {built.version}, built before new feedback in the service's log"
    )
    assert data.waits_on("reward_model", DAY) == [("human_feedback", DAY)]
    assert data.newest("reward_model") == (ref, note)  # the newest day too
    other = tiny_cfg.model_copy(
        update={"reward_model": tiny_cfg.reward_model.model_copy(update={"ridge_alphas": [7.0]})}
    )
    ref, why = lineage(other).newest("reward_model", DAY)
    assert (
        ref is None and f"reward_model for {DAY} is built only under other settings or code than this config's" in why
    )
    assert lineage(tiny_cfg).newest("lora_adapter", DAY) == (
        None,
        f"no lora_adapter for {DAY} is built in {tiny_cfg.data_dir}; "
        f"build it: hominem run --date {DAY} --select '*lora_adapter' --config {tiny_cfg.overlay}",
    )


def test_an_earlier_day_of_a_window_built_only_under_other_settings_is_named_not_silently_dropped(tiny_cfg):
    other = tiny_cfg.model_copy(
        update={"labeling": tiny_cfg.labeling.model_copy(update={"rationale_max_new_tokens": 9})}
    )
    publish_expected(other, "teacher_labels", "2026-11-19")  # yesterday's labels, built under another labeling setting
    publish_expected(tiny_cfg, "teacher_labels", DAY)
    plan = lineage(tiny_cfg).plan("reward_model", DAY)
    assert [r.partition for r in plan.inputs["teacher_labels"]] == [DAY]
    assert [(a, d) for a, d, _ in plan.left_out] == [("teacher_labels", "2026-11-19")]
    assert (
        plan.left_out[0][2] == lineage(tiny_cfg).plan("teacher_labels", "2026-11-19").version
    )  # the version that would be read


def test_a_stale_day_of_feedback_that_cannot_be_built_again_stops_the_run_naming_the_day(tiny_cfg):
    from hominem_pipeline.core.builds.human_feedback import log_file
    from hominem_pipeline.core.pipeline.runner import WindowInputStale, run_stage

    publish_expected(tiny_cfg, "teacher_labels", DAY)
    log_file(tiny_cfg, "2026-11-19").mkdir(
        parents=True
    )  # yesterday's log cannot be read (a folder where the file should be)
    with pytest.raises(WindowInputStale) as caught:
        run_stage("reward_model", tiny_cfg, DAY)
    message = str(caught.value)
    assert message.startswith(
        "reward_model for 2026-11-20 reads human_feedback for 2026-11-19, which changed since it was built"
    )
    assert f"build it: hominem run --date 2026-11-19 --select '*human_feedback' --config {tiny_cfg.overlay}" in message
