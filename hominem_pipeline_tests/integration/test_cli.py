"""The real `hominem` entry point, run as a user would, against a throwaway project folder."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

HOMINEM = str(Path(sys.executable).parent / "hominem")
DAY = "2026-11-19"


def hominem(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run([HOMINEM, *args], cwd=project, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def labeled_project(tmp_path_factory, tiny_student, tiny_encoder):
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path_factory.mktemp("cli") / "project", tiny_student, tiny_encoder)
    done = hominem(
        project,
        "run",
        "--config",
        "config/tiny.yaml",
        "--date",
        DAY,
        "--select",
        "prompts,teacher_trajectories,teacher_labels",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return project, done


def test_run_materializes_through_dagster_into_the_project(labeled_project):
    project, done = labeled_project
    assert "teacher_labels" in done.stdout and "built" in done.stdout
    assert "Dagster http://127.0.0.1:3000" in done.stdout
    for asset in ("prompts", "teacher_trajectories", "teacher_labels"):
        assert len(ArtifactStore(project / "data").versions(asset, DAY)) == 1
    assert not (project / "data" / "reward_model").exists()  # not selected

    from dagster import DagsterInstance

    os.environ["DAGSTER_HOME"] = str(project / "data" / "dagster")
    try:
        with DagsterInstance.get() as instance:
            [run] = instance.get_runs()
            assert run.tags["dagster/partition"] == DAY and run.job_name == "hominem_daily"
            assert run.is_success
    finally:
        del os.environ["DAGSTER_HOME"]
    assert (project / "data" / "dagster" / "storage").is_dir()
    assert (project / "data" / "dagster" / "dagster.yaml").resolve() == (project / "dagster.yaml").resolve()


def test_data_validate_and_sample(labeled_project):
    project, _ = labeled_project
    ok = hominem(project, "data", "validate", "--config", "config/tiny.yaml")
    assert ok.returncode == 0, ok.stderr
    assert f"teacher_labels {DAY}" in ok.stdout and "all blocking checks pass" in ok.stdout
    sample = hominem(project, "data", "sample", "--config", "config/tiny.yaml", "-n", "2", "--seed", "1")
    assert sample.returncode == 0, sample.stderr
    assert sample.stdout.count("rationale:") == 2 and sample.stdout.count("ranges and fields ok") == 2


def test_validate_fails_on_a_bad_partition(labeled_project, tmp_path):
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline.testing.artifacts import publish_expected

    project, _ = labeled_project
    cfg = load_config(project / "config" / "tiny.yaml", root=project)
    good = lineage(cfg).require("teacher_labels", DAY)
    labels = pd.read_parquet(good.file("labels.parquet"))
    labels.loc[0, "scalar"] = 3.0
    labels.loc[1, "response"] = ""
    trajectories = lineage(cfg).require("teacher_trajectories", DAY).file("trajectories.parquet").read_bytes()
    publish_expected(
        cfg,
        "teacher_trajectories",
        "2026-11-18",
        files={"trajectories.parquet": trajectories},
        table="trajectories.parquet",
    )
    labels.to_parquet(tmp_path / "labels.parquet")
    damaged = publish_expected(
        cfg,
        "teacher_labels",
        "2026-11-18",
        len(labels),
        files={"labels.parquet": (tmp_path / "labels.parquet").read_bytes()},
        table="labels.parquet",
    )
    try:
        bad = hominem(project, "data", "validate", "--config", "config/tiny.yaml", "--date", "2026-11-18")
        assert bad.returncode == 1
        assert "scalar: 3.0000 outside [-1.0, 1.0]" in bad.stdout
        assert "2 stored label row(s) fail blocking checks" in bad.stderr
        every = hominem(
            project, "data", "validate", "--all", "--config", "config/tiny.yaml"
        )  # the whole store fails on that one day
        assert every.returncode == 1 and "2026-11-18: 2 stored label row(s) fail blocking checks" in every.stderr, (
            every.stdout + every.stderr
        )
    finally:  # the bad day taken out again: the later tests read a sound store
        shutil.rmtree(damaged.path)


def test_a_damaged_file_is_named_with_the_command_that_rebuilds_it(labeled_project):
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.pipeline.lineage import lineage

    project, _ = labeled_project
    whole = hominem(project, "data", "validate", "--all", "--config", "config/tiny.yaml")
    assert whole.returncode == 0 and "every file matches its manifest" in whole.stdout, whole.stdout + whole.stderr
    assert (
        f"teacher_labels {DAY}" in whole.stdout and "all blocking checks pass" in whole.stdout
    )  # the label checks run too
    other = hominem(project, "data", "validate", "--all")  # labels built under another config are named, not failed
    assert (
        other.returncode == 0
        and f"the labels of {DAY} are not checked: none was built under this config" in " ".join(other.stdout.split())
    ), other.stdout + other.stderr
    labels = (
        lineage(load_config(project / "config" / "tiny.yaml", root=project))
        .require("teacher_labels", DAY)
        .file("labels.parquet")
    )
    kept = labels.read_bytes()
    try:
        labels.write_bytes(kept[: len(kept) // 2])  # a truncated copy, as a full disk or an interrupted sync leaves it
        for command in (["data", "validate"], ["data", "sample"]):
            broken = hominem(project, *command, "--config", "config/tiny.yaml", "--date", DAY)
            said = " ".join(broken.stderr.split())
            assert (
                broken.returncode == 2
                and f"{labels} is damaged" in said
                and f"hominem run --date {DAY} --select '*teacher_labels'" in said
            ), said
            assert "Traceback" not in broken.stdout + broken.stderr
        every = hominem(project, "data", "validate", "--all")
        assert (
            every.returncode == 1
            and "1 damaged file(s)" in every.stdout
            and "labels.parquet" in every.stdout
            and "changed since it was written" in every.stdout
        )
        assert f"the labels of {DAY} are not checked" in " ".join(every.stdout.split())
    finally:
        labels.write_bytes(kept)


def test_an_overlay_with_another_data_dir_leaves_the_project_untouched_mlflow_included(labeled_project, tmp_path):
    import sqlite3

    project, _ = labeled_project

    def files() -> dict[str, tuple[int, int]]:
        return {
            str(p.relative_to(project)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in project.rglob("*")
            if p.is_file()
        }

    def mlflow_runs(db: Path) -> int:
        with sqlite3.connect(db) as con:
            return con.execute("select count(*) from runs").fetchone()[0]

    elsewhere = tmp_path / "elsewhere"
    (project / "config" / "elsewhere.yaml").write_text(
        f"extends: config/tiny.yaml\nproject: {{data_dir: {elsewhere}}}\n"
    )
    before, runs = files(), mlflow_runs(project / "data" / "mlflow" / "mlflow.db")
    done = hominem(project, "run", "--config", "config/elsewhere.yaml", "--date", DAY, "--select", "prompts")
    assert done.returncode == 0, done.stdout + done.stderr
    after = files()
    assert {k: v for k, v in after.items() if before.get(k) != v} == {}, "the original project changed"
    assert mlflow_runs(project / "data" / "mlflow" / "mlflow.db") == runs
    assert (
        mlflow_runs(elsewhere / "mlflow" / "mlflow.db") == 1 and (elsewhere / "dagster" / "dagster.yaml").is_symlink()
    )
    assert any((elsewhere / "prompts" / DAY).iterdir())


def test_history_shows_the_callers_choices_with_what_they_were_about(tmp_path, tiny_student, tiny_encoder):
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.online.log import InteractionLog, log_folder
    from hominem_pipeline_tests.conftest import make_project
    from hominem_pipeline_tests.core.test_history import first_day

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    first_day(InteractionLog(log_folder(load_config(project / "config" / "tiny.yaml", root=project))))
    first = hominem(project, "history", "choices", "--config", "config/tiny.yaml", "--rater", "ana")
    assert first.returncode == 0 and "indexed 6 turns and 6 feedback events" in first.stdout, (
        first.stdout + first.stderr
    )
    assert (
        "I failed my exam again." in first.stdout
        and "reply 1" in first.stdout
        and "reply 0" in first.stdout
        and "choice0" not in first.stdout
    )
    again = hominem(project, "history", "choices", "--config", "config/tiny.yaml", "--rater", "ana")
    assert (
        "indexed" not in again.stdout and "Loading" not in again.stdout + again.stderr
    )  # nothing new: no model loaded, no bar
    mine = hominem(
        project, "history", "choices", "--config", "config/tiny.yaml"
    )  # no --rater: the page's own on loopback
    assert (
        mine.returncode == 0
        and "choices of local: none" in mine.stdout
        and "raters in the index: ana, ben" in " ".join(mine.stdout.split())
    ), mine.stdout


def test_a_missing_api_key_stops_before_any_run_starts(labeled_project):
    project, _ = labeled_project
    (project / "config" / "hosted.yaml").write_text(
        "extends: config/tiny.yaml\nteacher:\n  provider: anthropic\n  api:\n    model: claude-test\n"
    )
    runs = project / "data" / "dagster" / "storage"
    before = sorted(p.name for p in runs.iterdir())
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    done = subprocess.run(
        [HOMINEM, "run", "--config", "config/hosted.yaml", "--date", "2026-11-21"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "HOMINEM_HOME": str(project), "COLUMNS": "200"},
    )
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and "needs an API key in the environment variable ANTHROPIC_API_KEY" in said, (
        done.stdout + done.stderr
    )
    assert (
        "results:" not in done.stdout and not (project / "data" / "prompts" / "2026-11-21").exists()
    )  # no run, no empty partition folder
    assert sorted(p.name for p in runs.iterdir()) == before


def test_bad_input_gives_a_clear_error(labeled_project, tmp_path):
    project, _ = labeled_project
    wrong_date = hominem(project, "run", "--date", "2026-02-30")
    assert wrong_date.returncode == 2 and "is not a date; use YYYY-MM-DD" in wrong_date.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy:\n  beta: -1\n")
    bad_config = hominem(project, "run", "--config", str(bad))
    assert bad_config.returncode == 2 and "policy.beta = -1" in bad_config.stderr
    assert "policy.beta: DPO temperature" in " ".join(bad_config.stderr.split())  # what the key means
    unknown = hominem(project, "run", "--config", "config/tiny.yaml", "--select", "no_such_asset")
    assert unknown.returncode == 2 and "no_such_asset" in unknown.stderr
    missing = hominem(project, "data", "validate", "--date", "2026-01-05")
    assert missing.returncode == 2 and "no teacher_labels for 2026-01-05" in missing.stderr
    bad_set = hominem(project, "run", "--config", "config/tiny.yaml", "--set", "policy.beta=-1")
    assert bad_set.returncode == 2 and "policy.beta = -1" in bad_set.stderr
    no_value = hominem(project, "run", "--set", "policy.beta")
    assert no_value.returncode == 2 and "--set 'policy.beta': write KEY=VALUE" in no_value.stderr
    celery = tmp_path / "celery.yaml"
    celery.write_text((project / "config" / "tiny.yaml").read_text() + "\nruntime:\n  executor: celery\n")
    no_broker = hominem(project, "run", "--config", str(celery), "--select", "prompts")
    assert (
        no_broker.returncode == 2
        and "no broker is set: set runtime.celery_broker" in no_broker.stderr
        and "Traceback" not in no_broker.stderr
    )


def test_config_shows_each_setting_its_value_and_meaning(labeled_project):
    project, _ = labeled_project
    shown = hominem(
        project,
        "config",
        "policy.dual",
        "health.dcs_layers",
        "--config",
        "config/tiny.yaml",
        "--set",
        "policy.dual.memory_weight=null",
    )
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "policy.dual The dual-channel loss" in text
    assert "policy.dual.memory_weight = null w_sft of memory-file rows" in text  # --set applied
    assert "health.dcs_layers = " in text and "policy.mode" not in text
    unknown = hominem(project, "config", "polcy")
    assert unknown.returncode == 2 and "no setting 'polcy'; the sections are project" in " ".join(
        unknown.stderr.split()
    )


def test_set_changes_one_setting_for_the_run_and_later_commands(labeled_project):
    """--set reaches the Dagster run (a new prompts version for the day) and a later command with the same
    --set reads what that run built."""
    project, _ = labeled_project
    done = hominem(
        project,
        "run",
        "--config",
        "config/tiny.yaml",
        "--set",
        "prompts.per_partition=3",
        "--date",
        DAY,
        "--select",
        "prompts",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        len(ArtifactStore(project / "data").versions("prompts", DAY)) == 2
    )  # the day's first prompts and these, side by side
    [overlay] = (project / "data" / "overlays").glob("set-*.yaml")
    from hominem_pipeline.core.config.loader import load_config

    assert load_config(overlay, root=project).prompts.per_partition == 3


def test_a_failed_step_reports_its_root_cause(labeled_project):
    import yaml

    project, _ = labeled_project
    overlay = yaml.safe_load((project / "config" / "tiny.yaml").read_text())
    overlay["preferences"]["min_margin"] = 2.0  # no pair can have a margin this large
    (project / "config" / "no_pairs.yaml").write_text(yaml.safe_dump(overlay))
    done = hominem(project, "run", "--config", "config/no_pairs.yaml", "--date", DAY, "--select", "reward_model+")
    assert done.returncode == 1
    assert "failed at lora_adapter: PreferenceFileError: no preference pairs" in " ".join(done.stderr.split())
    assert "Traceback" not in done.stdout + done.stderr  # the traceback stays in the Dagster run's log
    assert "preference_pairs" in done.stdout  # the summary still lists what was built


def test_import_preferences_fills_the_human_preferences_asset(labeled_project, tmp_path):
    import gzip
    import json

    project, _ = labeled_project
    dialogue = "\n\nHuman: Can you help me hide money from my wife?\n\nAssistant:"
    src = tmp_path / "hh.jsonl.gz"
    with gzip.open(src, "wt") as fh:
        fh.write(
            json.dumps(
                {
                    "chosen": dialogue + " I'd rather help you talk with her.",
                    "rejected": dialogue + " Sure, open a secret account.",
                }
            )
            + "\n"
        )
        fh.write(json.dumps({"chosen": dialogue + " Same", "rejected": dialogue + " Same"}) + "\n")
    done = hominem(
        project,
        "data",
        "import-preferences",
        str(src),
        "--format",
        "hh-rlhf",
        "--date",
        DAY,
        "--config",
        "config/tiny.yaml",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "quarantined 1 row(s): chosen and rejected replies are identical" in done.stdout

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.pipeline.lineage import lineage

    ref = lineage(load_config(project / "config" / "tiny.yaml", root=project)).require("human_preferences", DAY)
    pairs = pd.read_parquet(ref.file("pairs.parquet"))
    assert list(pairs.rejected) == ["Sure, open a secret account."] and pairs.prompt.iloc[0] == dialogue
    quarantine = pd.read_parquet(
        project / "data" / "quarantine" / "human_preferences" / DAY / f"{ref.version}.parquet"
    )
    assert list(quarantine.reason) == ["chosen and rejected replies are identical"]

    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes('{"prompt": "Caf\u00e9?", "chosen": "Oui", "rejected": "Non"}'.encode("latin-1"))
    refused = hominem(
        project,
        "data",
        "import-preferences",
        str(latin),
        "--format",
        "jsonl",
        "--date",
        DAY,
        "--config",
        "config/tiny.yaml",
    )
    assert (
        refused.returncode == 2
        and "is not UTF-8 text" in " ".join(refused.stderr.split())
        and "Traceback" not in refused.stdout + refused.stderr
    )
    assert (
        len(list((project / "data" / "inbox" / "human_preferences" / DAY).glob("*.import.json"))) == 1
    )  # the refused file never reached the inbox

    again = hominem(
        project,
        "data",
        "import-preferences",
        str(src),
        "--format",
        "hh-rlhf",
        "--date",
        DAY,
        "--config",
        "config/tiny.yaml",
    )
    assert again.returncode == 0 and "already imported" in again.stdout and "reused" in again.stdout
    shipped = (
        project / "config" / "human" / "hh-rlhf-harmless-1800.jsonl.gz"
    )  # the pairs every reward model already learns from
    assert (
        hominem(
            project,
            "data",
            "import-preferences",
            str(shipped),
            "--format",
            "hh-rlhf",
            "--date",
            DAY,
            "--config",
            "config/tiny.yaml",
        ).returncode
        == 0
    )
    built = hominem(project, "run", "--config", "config/tiny.yaml", "--date", DAY, "--select", "reward_model")
    assert built.returncode == 0, built.stdout + built.stderr
    meta = (
        lineage(load_config(project / "config" / "tiny.yaml", root=project))
        .require("reward_model", DAY)
        .manifest["metadata"]
    )
    ours = sum(
        1 for _ in (project / "config" / "human" / "hominem-contrast-pairs.jsonl").open()
    )  # the hand-written contrast pairs
    # the imported copies of the shipped pairs count once, those of the 200 held out from the daily adapter too
    assert (meta["human_pairs"], meta["shipped_pairs"]) == (1800 + ours + 1, 1800 + ours)

    wrong = hominem(project, "data", "import-preferences", str(src), "--format", "csv", "--date", DAY)
    assert wrong.returncode == 2 and "--format 'csv' is not supported" in wrong.stderr
    via_run = hominem(project, "run", "--select", "human_preferences", "--date", DAY)
    assert via_run.returncode == 2 and "import-preferences" in via_run.stderr


def test_reward_probe_prints_scores_uncertainty_and_preference(labeled_project):
    import json

    project, _ = labeled_project
    built = hominem(project, "run", "--config", "config/tiny.yaml", "--date", DAY, "--select", "reward_model")
    assert built.returncode == 0, built.stdout + built.stderr
    args = [
        "reward-probe",
        "--config",
        "config/tiny.yaml",
        "--prompt",
        "I lost my job today.",
        "-r",
        "That is hard. What happened?",
        "-r",
        "ok",
    ]
    done = hominem(project, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "empathy" in out and "safety_score" in out and "±" in out
    assert "differ most" in out and "P(#1 preferred over #2) = " in out
    assert "scalar = tanh(" in out and "never scores lower" in " ".join(out.split())  # the combined scalar's formula
    as_json = hominem(project, *args, "--json")
    scores = json.loads(as_json.stdout)
    assert (
        len(scores) == 2 and set(scores[0]["uncertainty"]) >= {"empathy", "scalar"} and -1 <= scores[0]["scalar"] <= 1
    )
    empty = hominem(
        project, "reward-probe", "--config", "config/tiny.yaml", "--prompt", "hi", "-r", "fine", "-r", "  "
    )
    assert empty.returncode == 2 and "item 1: the response is empty" in empty.stderr
    missing = hominem(project, "reward-probe", "--prompt", "hi", "-r", "x", "--model", str(project))
    assert missing.returncode == 2 and "is not a reward model folder" in missing.stderr
    fixtures = hominem(project, "reward-probe", "--config", "config/tiny.yaml", "--fixtures")
    assert fixtures.returncode == 0, fixtures.stdout + fixtures.stderr
    assert (
        "harm_avoidance" in fixtures.stdout
        and "truth" in fixtures.stdout
        and "goal: the scalar at least 90% overall" in fixtures.stdout
    )
    assert (
        "epistemic_integrity" in fixtures.stdout and "each tag's own dimension at least 90% overall" in fixtures.stdout
    )
    assert "read from the reward_fixtures check's scores" in " ".join(fixtures.stdout.split())  # not scored again
    edited = (
        project / "config" / "fixtures_edited.yaml"
    )  # a file the check did not score: scored here, from the feature cache
    edited.write_text((project / "config" / "fixtures" / "contrast.yaml").read_text() + "\n")
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.pipeline.lineage import lineage

    model = lineage(load_config(project / "config" / "tiny.yaml", root=project)).require("reward_model", DAY).path
    again = hominem(
        project,
        "reward-probe",
        "--config",
        "config/tiny.yaml",
        "--fixtures",
        "--set",
        f"fixtures.file={edited}",
        "--model",
        str(model),
    )
    assert again.returncode == 0 and "scoring 132 fixture pairs" in again.stdout and "scored here" in again.stdout, (
        again.stdout + again.stderr
    )
    report = json.loads(
        hominem(project, "reward-probe", "--config", "config/tiny.yaml", "--fixtures", "--json").stdout
    )
    assert report["pairs"] == 132 and len(report["failures"]) == round((1 - report["accuracy"]) * 132)
    dims = report["dimensions"]  # the seven dimensions' tags, truth and relevance: scored by their own dimension too
    assert (
        dims["pairs"] == 108
        and report["dimension_of"]["truth"] == "epistemic_integrity"
        and "fluency" not in dims["by_tag"]
    )
    assert hominem(project, "reward-probe", "--config", "config/tiny.yaml").returncode == 2


def test_fill_window_builds_the_earlier_days_that_the_windows_read(tmp_path, tiny_student, tiny_encoder):
    """`hominem run --fill-window` labels each earlier day of the reward model's window without labels
    (one Dagster run per day, oldest first), leaves built days alone, then runs --date; when the
    selection trains an adapter, the days of the adapter's window also get their reward model and
    preference pairs, so the adapter reads a full window of pairs."""
    from dagster import DagsterInstance

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    (project / "config" / "window3.yaml").write_text(
        "extends: config/tiny.yaml\nreward_model: {window_days: 3}\npolicy: {window_days: 2}\n"
    )
    labels = "prompts,teacher_trajectories,teacher_labels"
    first = hominem(project, "run", "--config", "config/window3.yaml", "--date", "2026-11-18", "--select", labels)
    assert first.returncode == 0, first.stdout + first.stderr
    cfg = load_config(project / "config" / "window3.yaml", root=project)
    current = lambda asset, day: lineage(cfg).expected(asset, day)  # noqa: E731
    kept = current("teacher_labels", "2026-11-18").version
    done = hominem(
        project, "run", "--config", "config/window3.yaml", "--date", DAY, "--select", labels, "--fill-window"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "filling 1 earlier day(s): 2026-11-17 (labels)" in " ".join(done.stdout.split())
    assert [d for d in ("2026-11-16", "2026-11-17", "2026-11-18", DAY) if current("teacher_labels", d)] == [
        "2026-11-17",
        "2026-11-18",
        DAY,
    ]
    assert current("teacher_labels", "2026-11-18").version == kept
    assert not (project / "data" / "preference_pairs").exists()  # no adapter selected: no pairs
    os.environ["DAGSTER_HOME"] = str(project / "data" / "dagster")
    try:
        with DagsterInstance.get() as instance:
            runs = sorted(instance.get_runs(), key=lambda r: r.run_id)
            assert sorted(r.tags["dagster/partition"] for r in runs) == ["2026-11-17", "2026-11-18", DAY] and all(
                r.is_success for r in runs
            )
    finally:
        del os.environ["DAGSTER_HOME"]
    again = hominem(
        project, "run", "--config", "config/window3.yaml", "--date", DAY, "--select", labels, "--fill-window"
    )
    assert again.returncode == 0 and "every earlier day is built" in again.stdout
    # An adapter selected: the day before DAY (policy.window_days 2) gets its reward model and pairs,
    # from its own window of labels (2026-11-16..18: two days), and DAY's adapter reads both days' pairs.
    adapter = hominem(
        project, "run", "--config", "config/window3.yaml", "--date", DAY, "--select", "*lora_adapter", "--fill-window"
    )
    assert adapter.returncode == 0, adapter.stdout + adapter.stderr
    assert "filling 1 earlier day(s): 2026-11-18 (labels to pairs)" in " ".join(adapter.stdout.split())
    assert current("teacher_labels", "2026-11-18").version == kept  # reused, not relabeled
    assert [d for d in ("2026-11-17", "2026-11-18", DAY) if current("preference_pairs", d)] == ["2026-11-18", DAY]
    read = lambda asset, day, up: sorted(r["partition"] for r in current(asset, day).manifest["inputs"][up])  # noqa: E731
    assert read("reward_model", "2026-11-18", "teacher_labels") == ["2026-11-17", "2026-11-18"]
    assert read("lora_adapter", DAY, "preference_pairs") == ["2026-11-18", DAY]


def test_feedback_given_in_the_page_leaves_the_days_commands_working(tmp_path, tiny_student, tiny_encoder):
    """The README's day: `hominem run` for today, a person rates two replies in `hominem serve`, and the
    README's `reward-probe` and `compare --eval-set` still work without a rebuild, saying that they read
    the versions built before that feedback and what brings them up to date."""
    import datetime as dt

    import httpx2 as httpx

    from hominem_pipeline_tests.conftest import make_project
    from hominem_pipeline_tests.serving.conftest import start, stop

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()  # the day the server logs feedback under
    built = hominem(project, "run", "--config", "config/tiny.yaml", "--date", today, "--select", "*lora_adapter")
    assert built.returncode == 0, built.stdout + built.stderr
    server = start(project, "--set", "serving.max_new_tokens=8")
    try:
        replies = httpx.post(
            f"{server.url}/generate",
            json={"messages": [{"role": "user", "content": "I failed my driving test again."}], "n": 2, "seed": 1},
            timeout=120,
        ).json()["replies"]
        choice = {"kind": "choice", "chosen": replies[0]["turn"], "rejected": replies[1]["turn"], "strength": "clear"}
        assert httpx.post(f"{server.url}/feedback", json=choice, timeout=30).status_code == 200
    finally:
        stop(server.proc)
    probe = hominem(
        project,
        "reward-probe",
        "--config",
        "config/tiny.yaml",
        "--prompt",
        "I failed my driving test again.",
        "-r",
        "That's rough. What happened?",
        "-r",
        "Try harder.",
    )
    said = " ".join(probe.stderr.split())
    assert probe.returncode == 0 and "P(#1 preferred over #2) = " in probe.stdout, probe.stdout + probe.stderr
    assert f"reward_model {today} is from before new feedback (" in said and "event(s)); `hominem run --date" in said
    assert (
        f"hominem run --date {today} --select '*reward_model' --config config/tiny.yaml` brings it up to date"
        in said.replace(str(project / "config"), "config")
    )
    compare = hominem(project, "--why", "compare", "--config", "config/tiny.yaml", "--eval-set")
    assert compare.returncode == 0 and "P(adapter's reply preferred) = " in compare.stdout, (
        compare.stdout + compare.stderr
    )
    notice = [
        line for line in compare.stderr.splitlines() if f"lora_adapter {today} is from before new feedback (" in line
    ]
    assert len(notice) == 1 and "cannot be built yet" not in notice[0], (
        compare.stderr
    )  # one line, the root named, not the chain
    assert f"why: lora_adapter for {today} is version" in " ".join(compare.stderr.split())


def test_every_state_changing_command_is_audited_and_the_chain_shows_tampering(labeled_project):
    """The run that labeled the project, a validation and a freeze each wrote one audit line (who, what, on which
    day, the outcome); `hominem audit` lists and filters them, and `hominem audit verify` names a removed line."""
    import json

    project, _ = labeled_project
    assert hominem(project, "data", "validate", "--config", "config/tiny.yaml", "--date", DAY).returncode == 0
    assert hominem(project, "live", "freeze", "--config", "config/tiny.yaml", "--reason", "a test").returncode == 0
    assert hominem(project, "live", "unfreeze", "--config", "config/tiny.yaml").returncode == 0
    listed = hominem(project, "audit", "--config", "config/tiny.yaml", "--json", "-n", "100000")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    entries = json.loads(listed.stdout)
    mine = [e for e in entries if e["who"].startswith("cli:")]
    actions = [e["action"] for e in mine]
    assert actions[0] == "run" and mine[0]["date"] == DAY and mine[0]["outcome"] == "ok"
    assert actions[-3:] == ["data validate", "live freeze", "live unfreeze"]
    assert mine[-2]["reason"] == "a test" and all(e["outcome"] == "ok" for e in mine[-3:])
    labeled = {"build prompts", "build teacher_labels"}
    builds = [e for e in entries if e["who"].startswith("dagster:") and e["action"] in labeled]
    assert {e["action"] for e in builds} == labeled and all(e["day"] == DAY and e["version"] for e in builds)
    assert builds[0]["outcome"] == "built"
    frozen = json.loads(
        hominem(project, "audit", "--config", "config/tiny.yaml", "--action", "freeze", "--json").stdout
    )
    assert [e["action"] for e in frozen] == ["live freeze", "live unfreeze"]

    verified = hominem(project, "audit", "verify", "--config", "config/tiny.yaml")
    assert verified.returncode == 0 and "chain intact" in verified.stdout, verified.stdout + verified.stderr
    path = project / "data" / "online" / "audit.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-2] + lines[-1:]) + "\n")  # the freeze removed
    broken = hominem(project, "audit", "verify", "--config", "config/tiny.yaml")
    assert (
        broken.returncode == 1
        and "(live unfreeze," in broken.stderr
        and "the line before it was removed" in (broken.stderr)
    )
    path.write_text("\n".join(lines) + "\n")


def test_data_export_writes_one_persons_pairs_the_importer_reads(labeled_project, tmp_path):
    import json

    from hominem_pipeline.core.human.preferences import parse_preference_file
    from hominem_pipeline_tests.core.test_export import events

    project, _ = labeled_project
    nobody = hominem(project, "data", "export", "--rater", "r-ana", "-o", str(tmp_path / "none.json"))
    assert nobody.returncode == 1 and "nothing in the interaction log is 'r-ana''s" in nobody.stderr
    log = project / "data" / "online" / "log" / "2026-11-20.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(json.dumps(e) + "\n" for e in events()))
    out = tmp_path / "ana.jsonl"
    done = hominem(project, "data", "export", "--rater", "r-ana", "-o", str(out), "--format", "jsonl")
    assert done.returncode == 0 and "r-ana: 1 pair(s), 2 turn(s), 1 piece(s) of feedback" in done.stdout, done.stderr
    assert "Ben" not in out.read_text()
    assert parse_preference_file(out, "jsonl", out.name).pairs["chosen"].tolist() == ["Ana's worry: a kind reply"]
    audit = [json.loads(line) for line in (project / "data" / "online" / "audit.jsonl").read_text().splitlines()]
    exports = [e for e in audit if e["action"] == "data export"]
    assert [e["outcome"] for e in exports] == ["failed: exit 1", "ok"] and exports[1]["pairs"] == 1
    log.unlink()
