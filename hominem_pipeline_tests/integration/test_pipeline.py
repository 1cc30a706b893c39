"""The whole chain on a tiny configuration, through Dagster, with a real MLflow store."""

import json
import math
import time
from pathlib import Path

import pandas as pd
import pytest
from dagster import instance_for_test, materialize

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.evaluation.calibration import resolve
from hominem_pipeline.core.pipeline.artifacts import ArtifactStore
from hominem_pipeline.core.pipeline.lineage import lineage
from hominem_pipeline.core.pipeline.tracking import (
    TAG_ASSET,
    TAG_DAGSTER_RUN,
    TAG_PARTITION,
    Tracker,
)
from hominem_pipeline.core.teacher.labeling import validate_labels
from hominem_pipeline.defs import build_definitions
from hominem_pipeline.defs.resources import HominemResource

DAY = "2026-11-20"
ORDER = [
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


def served_turn(content, time, rater="local", session="s"):
    """A turn as `hominem serve` logs it, without id and reply: one user message, answered by the base."""
    from hominem_pipeline.core.online.events import context_digest

    messages = [{"role": "user", "content": content}]
    return {
        "kind": "turn",
        "time": time,
        "rater": rater,
        "session": session,
        "messages": messages,
        "model": "hominem",
        "adapter": None,
        "sampling": {},
        "finish_reason": "stop",
        "completion_tokens": 5,
        "context": context_digest(messages),
    }


def materialize_day(project, config_path, day, selection=None):
    """Every stage but the imports for `day`, on an instance of its own; the result, which succeeded."""
    defs = build_definitions(str(config_path), root=project)
    with instance_for_test() as instance:
        result = materialize(
            [a for a in defs.assets if a.key.to_user_string() != "human_preferences"],
            instance=instance,
            partition_key=day,
            resources={"hominem": HominemResource(root=str(project), config_path=str(config_path))},
            selection=selection,
        )
    assert result.success
    return result


def write_feedback_log(project):
    """What `hominem serve` would have logged on DAY: two replies to one message, a strong choice, thumbs."""
    turn = served_turn("I failed my driving test again.", f"{DAY}T09:00:00+00:00")
    events = [
        turn | {"id": "kind", "reply": "That is rough. What happened?"},
        turn | {"id": "curt", "reply": "Try harder."},
        {
            "kind": "choice",
            "id": "c1",
            "time": f"{DAY}T09:01:00+00:00",
            "rater": "local",
            "chosen": "kind",
            "rejected": "curt",
            "strength": "strong",
        },
        {
            "kind": "thumb",
            "id": "t1",
            "time": f"{DAY}T09:02:00+00:00",
            "rater": "local",
            "turn": "curt",
            "value": "down",
        },
    ]
    folder = project / "data" / "online" / "log"
    folder.mkdir(parents=True)
    (folder / f"{DAY}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def run_all(project, config_path, instance, selection=None, checks=None):
    """Materialize the stages (all but the imports' `human_preferences`); `checks`, a dict, gets the asset check
    evaluations by name."""
    defs = build_definitions(str(config_path), root=project)
    assets = [a for a in defs.assets if a.key.to_user_string() != "human_preferences"]  # filled by imports
    result = materialize(
        [*assets, *defs.asset_checks],  # the checks defined beside the assets: the live gate
        instance=instance,
        partition_key=DAY,
        resources={"hominem": HominemResource(root=str(project), config_path=str(config_path))},
        selection=selection,
    )
    assert result.success
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    if selection is None:
        assert evaluations["labels_pass_verifier"].passed
    if checks is not None:
        checks.update(evaluations)
    return {
        e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()
    }, result.run_id


@pytest.fixture(scope="module")
def chain(tmp_path_factory, tiny_student, tiny_encoder):
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path_factory.mktemp("chain") / "project", tiny_student, tiny_encoder)
    config_path = project / "config" / "tiny.yaml"
    write_feedback_log(project)
    with instance_for_test() as instance:
        checks = {}
        first, first_run = run_all(project, config_path, instance, checks=checks)
        second, second_run = run_all(project, config_path, instance)
        yield {
            "project": project,
            "config": config_path,
            "cfg": load_config(config_path, root=project),
            "first": first,
            "second": second,
            "runs": (first_run, second_run),
            "instance": instance,
            "checks": checks,
        }


def test_every_asset_materializes_with_metadata(chain):
    first = chain["first"]
    assert sorted(first) == sorted(ORDER)
    for name, meta in first.items():
        assert meta["reused_existing_version"].value is False, name
        assert len(meta["version"].value) == 16
        assert meta["mlflow_run_id"].value
        assert meta["mlflow_run"].value.startswith("http://127.0.0.1:5000/#/experiments/") and meta[
            "mlflow_run"
        ].value.endswith(f"/runs/{meta['mlflow_run_id'].value}?workflowType=machine_learning")
    generated = first["prompts"]["generated_prompts"].value
    assert first["prompts"]["generated_templated"].value == 2 and first["prompts"]["generated_perturbation"].value == 2
    assert 4 <= generated <= 6  # the tiny teacher's two written prompts may be unusable
    train = 6 + generated  # 6 sampled seed prompts + the generated ones
    assert first["prompts"]["dagster/row_count"].value == train + len(
        chain["cfg"].prompts.categories
    )  # + 1 held out per category
    assert first["teacher_trajectories"]["dagster/row_count"].value == train * 3  # 3 candidates each
    assert first["teacher_labels"]["labels"].value + first["teacher_labels"]["quarantined"].value == train * 3
    assert 0.0 <= first["evaluation"]["win_rate"].value <= 1.0
    assert first["lora_adapter"]["steps"].value == 2
    assert (
        first["human_feedback"]["pairs"].value,
        first["human_feedback"]["turns"].value,
        first["human_feedback"]["conversations"].value,
    ) == (1, 2, 1)
    assert first["reward_model"]["feedback_pairs"].value == 1  # the person's choice reached the reward model
    assert first["reward_model"]["plot: reliability"].value.startswith(
        "![reliability](data:image/png;base64,iVBOR"
    )  # its plot on the asset page
    human = chain["checks"]["human_agreement"]  # its held-out agreement with people, as an asset check
    shipped = chain[
        "cfg"
    ].reward_model.people_pairs  # HH-RLHF's 1,800, then the hand-written contrast pairs (config/human/)
    ours = sum(1 for _ in chain["cfg"].path(shipped[1].file).open())
    heads = shipped[0].heads + ours  # the heads read HH-RLHF's first `heads` and every hand-written pair
    assert (
        human.metadata["human_pairs"].value == heads + 1 and 0.0 <= human.metadata["human_agreement"].value <= 1.0
    )  # + the feedback
    held_out = shipped[
        0
    ].held_out  # HH-RLHF's last 200: every adapter is judged on them, so no adapter learns from them
    assert (
        first["reward_model"]["details"].value["shipped_pairs"] == 1800 + ours
    )  # the reward model does (the figure never reads it)
    assert (
        first["reward_model"]["people_pairs"].value == 1800 + ours + 1
    )  # the people's score reads every one, the feedback too
    assert (
        first["lora_adapter"]["people_pairs"].value == 1800 - held_out + ours + 1
    )  # the daily adapter every one but the held-out
    # the people's start shipped in config/human/features is the real student's: the tiny one's adapter starts fresh,
    # saying why
    assert (
        first["lora_adapter"]["details"]
        .value["started from"]
        .startswith("a fresh LoRA: no people's start for this student")
    )
    people = first["evaluation"]  # the adapter's implicit reward on them (the base: 0.5)
    assert (
        people["people_pairs"].value == held_out
        and 0.0 <= people["people_accuracy"].value <= 1.0
        and people["people_base_accuracy"].value == 0.5
    )
    assert f"of {held_out} as people did (base 50%)" in people["details"].value["people's held-out pairs"]
    fixtures = chain["checks"][
        "reward_fixtures"
    ]  # the contrast fixtures, as an asset check (a random tiny model fails it)
    assert (
        not fixtures.passed
        and 0.0 <= fixtures.metadata["fixture_accuracy"].value <= 1.0
        and "tag truth" in fixtures.metadata
    )
    assert first["reward_model"]["fixture_accuracy"].value == fixtures.metadata["fixture_accuracy"].value
    predicted = first[
        "predictions"
    ]  # the person's choice, with what the reward model predicted for it (the day's own: no earlier one)
    assert predicted["people_pairs"].value == 1 and predicted["details"].value["sources"]["page"] == 1
    assert (
        predicted["judge_pairs"].value == first["preference_pairs"]["dagster/row_count"].value
    )  # the judge's pairs beside
    assert "the day's own: it trained on these pairs" in predicted["details"].value["reward_model"]
    assert first["attunement"]["people_agreement"].value in (0.0, 1.0) and first["attunement"][
        "plot: calibration"
    ].value.startswith("![calibration](data:image/png")
    drift = chain["checks"]["preference_drift"]  # one choice: nothing to test yet, and it says so
    assert drift.passed and drift.description.startswith("not tested: each window needs 20 people's choices")
    moved = first["evaluation"][
        "fixture_moved_right"
    ].value  # did the adapter move the student toward the fixtures' better replies
    assert 0.0 <= moved <= 1.0 and len(first["evaluation"]["details"].value["fixtures_moved_wrong"]) == min(
        20, round((1 - moved) * 132)
    )


def test_the_day_s_gate_decides_before_the_stages_it_does_not_read(chain):
    """The probing suite, the predictions and the attunement run after the live gate's decision (their steps'
    priority), so the day's adapter goes live as soon as it can."""
    from dagster import DagsterEventType

    events = chain["instance"].all_logs(chain["runs"][0], of_type=DagsterEventType.STEP_START)
    started = [e.step_key for e in events]
    gate = next(i for i, k in enumerate(started) if "live_gate" in k)
    assert {"probes", "predictions", "attunement"} <= set(started)
    assert all(started.index(k) > gate for k in ("probes", "predictions", "attunement")), started


def test_the_probing_suite_runs_on_the_day_s_reward_model(chain):
    """The `probes` asset: trade-offs, adversarial consistency, counterfactuals, attribution and the manifold's
    shape on the day's reward model, its figures as metadata, in MLflow and in the probe_consistency check;
    `hominem probe --suite` prints them from the asset, or runs the suite itself with --fresh."""
    from hominem_pipeline.core.evaluation.suite import ATTRIBUTION, MAP_PLOT, SUITE_PLOT, SUMMARY

    cfg, first = chain["cfg"], chain["first"]
    meta = first["probes"]
    assert (
        0.0 <= meta["probe_tradeoffs_as_expected"].value <= 1.0
        and 0.0 <= meta["probe_counterfactual_right_way"].value <= 1.0
    )
    assert meta["probe_tradeoff_regressions"].value == 0.0  # no earlier reward model on the first day
    assert (
        0.0 <= meta["probe_adversarial_max_flip_rate"].value <= 1.0 and meta["probe_flip_rate_typos"].value is not None
    )
    assert (
        meta["dagster/row_count"].value == 12 + 12 + cfg.probes.adversarial_pairs
    )  # scenarios, queries, contrast pairs
    assert meta["plot: probes"].value.startswith("![probes](data:image/png;base64,") and meta[
        "plot: manifold_map"
    ].value.startswith("![manifold_map]")
    check = chain["checks"]["probe_consistency"]
    assert (
        check.metadata["max_flip_rate"].value == cfg.probes.max_flip_rate and check.metadata["regressions"].value == []
    )
    ref = lineage(cfg).require("probes", DAY)
    summary = json.loads(ref.file(SUMMARY).read_text())
    assert (
        summary["map"]["replies"] == min(cfg.probes.map_replies, first["teacher_labels"]["labels"].value) + 2
    )  # the person's pair beside
    assert summary["map"]["people_replies"] == 2 and summary["collisions"]["replies"] == cfg.probes.collision_replies
    page = ref.file(ATTRIBUTION).read_text()
    assert page.count('class="span"') > 10 and all(f"<h3>{d}</h3>" in page for d in cfg.dimension_names)
    assert ref.file(MAP_PLOT).stat().st_size > 1000 and ref.file(SUITE_PLOT).stat().st_size > 1000
    runs = Tracker(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root)).runs_for("probes")
    assert runs and runs[0].data.metrics["probe_tradeoffs_as_expected"] == pytest.approx(
        meta["probe_tradeoffs_as_expected"].value
    )

    project = chain["project"]
    read = hominem(project, "probe", "--suite", "--config", "config/tiny.yaml")
    assert (
        "read from the probes asset" in read.stderr and "trade-offs:" in read.stdout and "collisions:" in read.stdout
    )
    assert f"{summary['tradeoffs']['as_expected']}/12 chosen as written" in read.stdout
    fresh = hominem(
        project,
        "probe",
        "--suite",
        "--config",
        "config/tiny.yaml",
        "--fresh",
        "--out",
        str(project / "probe-here"),
        "--json",
    )
    ran = json.loads(fresh.stdout)
    assert (
        ran["tradeoffs"] == {**summary["tradeoffs"], "flipped": [], "regressions": []}
        and (project / "probe-here" / SUMMARY).is_file()
    )
    bad = hominem(project, "probe", "--suite", "--config", "config/tiny.yaml", "--reward-model", "nope", check=False)
    assert bad.returncode != 0 and "--reward-model nope: neither a folder nor a version" in bad.stderr


def test_the_dashboard_draws_every_view_from_the_pipeline_s_files(chain, tmp_path):
    """`hominem serve` on the chain's project: /dashboard in Debian's chromium draws the timeline, the
    calibration, drift and clusters, a comparison, a probe of typed replies and the health index from the
    run's own files (charts with data points and ink on their canvas, not only a loaded page); its data
    needs the service's token like every other route."""
    import httpx2 as httpx
    from selenium.webdriver.common.by import By

    from hominem_pipeline.testing.browser import (
        DASHBOARD_VIEWS,
        chart_drawn,
        chromium,
        compare_adapters,
        open_view,
        probe_replies,
    )
    from hominem_pipeline.testing.service import start_serve, stop_serve

    project = chain["project"]
    proc, url, _ = start_serve(
        ["--config", "config/tiny.yaml", "--reward-model", "latest", "--adapter", "none"], project
    )
    driver = chromium()
    try:
        assert (
            httpx.get(f"{url}/static/vendor/uPlot.iife.min.js").status_code == 200
        )  # installed by the project, served locally
        for view, drawn in DASHBOARD_VIEWS.items():
            open_view(driver, url, view)
            for chart in drawn:
                figure = chart_drawn(driver, chart)
                assert figure and figure["points"] > 0 and figure["ink"] > 1000, (view, chart, figure)
        open_view(driver, url, "timeline")
        assert (
            "refused" in driver.find_element(By.ID, "events").text
            or "promoted" in driver.find_element(By.ID, "events").text
        )
        open_view(driver, url, "health")
        assert "Dimensional coherence" in driver.find_element(By.ID, "components").text
        ticks = chart_drawn(driver, "chart-rhi")["ticks"]  # per-day data on a day axis: dates, never hours
        assert ticks and all(t == "" or (len(t) == 10 and t[4] == t[7] == "-") for t in ticks), ticks
        trend = chart_drawn(driver, "chart-gate-trend")  # the daily gate's figures: one point per sampled check
        assert trend and trend["series"] >= 4 and trend["points"] >= 4, trend
        open_view(driver, url, "compare")  # a first day: one reward model and one adapter, nothing set against itself
        assert "nothing earlier to compare it with" in driver.find_element(By.ID, "compare-none").text
        assert compare_adapters(driver).startswith("nothing earlier to compare with (1 adapter)")
        assert not driver.find_elements(By.CSS_SELECTOR, "#chart-compare canvas")
        open_view(driver, url, "probe")
        probe_replies(
            driver, "I failed my driving test again.", ["That's rough. What happened on the test?", "Try harder."]
        )
        figure = chart_drawn(driver, "chart-probe")
        assert (
            figure["series"] == 2
            and figure["points"] == 2 * len(chain["cfg"].dimension_names)
            and figure["ink"] > 1000
        )
        assert figure["ticks"] == [
            d.replace("_", " ") for d in chain["cfg"].dimension_names
        ]  # a named tick under each dimension's bars
        assert len(driver.find_elements(By.CSS_SELECTOR, "#probe-out .attribution .span")) >= 3
        assert (
            "typos" in driver.find_element(By.ID, "probe-out").text
            and "P(reply 1 preferred over reply 2)" in driver.find_element(By.ID, "probe-out").text
        )
    finally:
        driver.quit()
        stop_serve(proc)


def test_stages_write_their_artifacts(chain):
    cfg = chain["cfg"]
    data = lineage(cfg)
    labels_ref = data.require("teacher_labels", DAY)
    labels = pd.read_parquet(labels_ref.file("labels.parquet"))
    quarantine = pd.read_parquet(data.store.quarantine_path("teacher_labels", DAY, labels_ref.version))
    trajectories = pd.read_parquet(data.require("teacher_trajectories", DAY).file("trajectories.parquet"))
    assert len(labels) + len(quarantine) == len(
        trajectories
    )  # every trajectory is either kept or quarantined with a reason
    prompts = pd.read_parquet(data.require("prompts", DAY).file("prompts.parquet"))
    assert set(trajectories["prompt_id"]) == set(prompts[prompts.split == "train"]["prompt_id"])
    assert {"seed", "templated", "perturbation"} <= set(prompts["source"])
    assert set(quarantine.get("check", [])) <= {"schema", "empty_response", "duplicate_trajectory"}
    assert validate_labels(labels, cfg.dimension_names).ok(cfg.verifier.max_failure_rate)
    # the student's mean log-probability of each reply (verifier.min_reply_logp), measured once: the reward
    # model's guard columns of the same replies are read from the features cache, not measured again
    assert labels["reply_logp"].notna().all() and (labels["reply_logp"] < 0).all()
    assert chain["checks"]["labels_pass_verifier"].metadata["degenerate"].value == 0
    rm = data.require("reward_model", DAY)
    meta = json.loads(rm.file("METADATA.json").read_text())
    assert meta["dimensions"] == cfg.dimension_names and meta["date"] == DAY and meta["training_data_digest"]
    adapter = data.require("lora_adapter", DAY)
    assert {"adapter_config.json", "adapter_model.safetensors", "METADATA.json"} <= {
        p.name for p in adapter.path.iterdir()
    }
    # a plain PEFT adapter: it loads onto the base with PeftModel.from_pretrained, and its model card names the base
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(cfg.models.student.path), adapter.path)
    assert loaded.active_adapter == "default" and any("lora_A" in n for n, _ in loaded.named_parameters())
    card = adapter.file("README.md").read_text()
    assert (
        "base_model: tiny/random-llama" in card
        and "library_name: peft" in card
        and "PeftModel.from_pretrained" in card
    )
    adapter_meta = json.loads(adapter.file("METADATA.json").read_text())
    assert adapter_meta["reward_model"]["version"] == rm.version  # lineage: adapter -> reward model
    health = json.loads(data.require("reward_health_index", DAY).file("health.json").read_text())
    assert set(health["components"]) == {"dcs", "gvs", "mss", "cdrs", "lrps"}
    for name, comp in health["components"].items():
        assert comp["how"], name
        assert comp["value"] is None or 0.0 <= comp["value"] <= 1.0
    assert data.require("evaluation", DAY).file("dimension_deltas.png").stat().st_size > 1000
    generations = pd.read_parquet(data.require("evaluation", DAY).file("generations.parquet"))
    assert len(generations) == len(cfg.prompts.categories)  # one held-out prompt per category
    for side in ("base", "adapter"):  # the tiny student answers every prompt, and the reward model scores it
        assert (
            generations[f"{side}_response"].str.strip().astype(bool).all()
            and generations[f"{side}_scalar"].notna().all()
        ), side


def test_mlflow_has_one_run_per_materialization_linked_by_tags_and_inputs(chain):
    cfg = chain["cfg"]
    tracker = Tracker(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root))
    first_run, second_run = chain["runs"]
    for name in ORDER:
        runs = tracker.runs_for(name)
        assert len(runs) == 2, name  # one per Dagster materialization
        assert {r.data.tags[TAG_DAGSTER_RUN] for r in runs} == {first_run, second_run}
        assert all(r.data.tags[TAG_PARTITION] == DAY and r.data.tags[TAG_ASSET] == name for r in runs)
    [labels_run] = [r for r in tracker.runs_for("teacher_labels") if r.data.tags[TAG_DAGSTER_RUN] == first_run]
    assert [d.dataset.name for d in labels_run.inputs.dataset_inputs] == [f"teacher_trajectories@{DAY}"]
    [rm_run] = [r for r in tracker.runs_for("reward_model") if r.data.tags[TAG_DAGSTER_RUN] == first_run]
    assert [d.dataset.name for d in rm_run.inputs.dataset_inputs] == [
        f"teacher_labels@{DAY}",
        f"human_feedback@{DAY}",
    ]  # the labels and people's pairs it trained on
    assert "val_loss" in rm_run.data.metrics and "reward_model.epochs" in rm_run.data.params
    assert rm_run.data.params["runtime.device"].startswith("cpu (")  # runtime.device: auto, on a machine without a GPU
    assert lineage(cfg).require("reward_model", DAY).manifest["device"] == rm_run.data.params["runtime.device"]
    import mlflow

    experiment = mlflow.get_experiment_by_name(cfg.tracking.experiment)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI opens on the runs table


def test_the_reward_model_is_registered_with_the_current_alias(chain):
    from mlflow import MlflowClient

    from hominem_pipeline.core.builds.reward_model import REWARD_MODEL_NAME
    from hominem_pipeline.core.pipeline.tracking import TAG_VERSION

    cfg = chain["cfg"]
    Tracker(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root)).runs_for(
        "reward_model"
    )  # points MLflow at the store
    client = MlflowClient()
    built = lineage(cfg).require("reward_model", DAY)
    current = client.get_model_version_by_alias(REWARD_MODEL_NAME, "current")
    assert current.tags[TAG_VERSION] == built.version
    assert (
        len(client.search_model_versions(f"name = '{REWARD_MODEL_NAME}'")) == 1
    )  # the second (reusing) run registered nothing new
    # a pyfunc with a signature: any MLflow user scores a DataFrame with it, as RewardModel.score does
    import mlflow.pyfunc

    from hominem_pipeline.core.reward.model import RewardModel

    pyfunc = mlflow.pyfunc.load_model(f"models:/{REWARD_MODEL_NAME}@current")
    assert [c.name for c in pyfunc.metadata.get_input_schema().inputs] == ["prompt", "response"]
    rows = pd.DataFrame(
        {
            "prompt": ["I failed my driving test.", "I failed my driving test."],
            "response": ["That's rough. What happened?", "Try harder."],
        }
    )
    scored = pyfunc.predict(rows)
    direct = RewardModel.load(built.path).score(list(rows.prompt), list(rows.response))
    assert list(scored.columns) == [
        "scalar",
        "reward_intensity",
        "safety_score",
        *cfg.dimension_names,
        "uncertainty_scalar",
    ]
    assert scored["scalar"].tolist() == pytest.approx([o.scalar for o in direct], abs=1e-6)


def test_a_second_run_reuses_everything(chain):
    second = chain["second"]
    for name in ORDER:
        assert second[name]["reused_existing_version"].value is True, name
        assert second[name]["version"].value == chain["first"][name]["version"].value


def test_an_evaluation_reuses_the_base_replies_it_is_given(chain):
    """Several adapters of one base are compared on one set of base replies (benchmarks/policy_win_rate.py)."""
    from hominem_pipeline.core.builds.common import prompts_of
    from hominem_pipeline.core.evaluation.compare import evaluate_adapter
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.reward.model import RewardModel

    cfg, lin = chain["cfg"], lineage(chain["cfg"])
    stored = pd.read_parquet(lin.require("evaluation", DAY).file("generations.parquet"))
    prompts = prompts_of(pd.read_parquet(lin.require("prompts", DAY).file("prompts.parquet")), "eval")
    rm = RewardModel.load(lin.require("reward_model", DAY).path)
    kwargs = {
        "student_path": student_path(cfg),
        "adapter_path": lin.require("lora_adapter", DAY).path,
        "reward_model": rm,
        "cfg": cfg.evaluation,
        "seed": cfg.project.seed,
    }
    generated: dict[str, str] = {}
    first, _ = evaluate_adapter(prompts, base_replies=generated, **kwargs)
    assert generated == dict(zip(stored["prompt"], stored["base_response"]))  # what the stage decoded, now known
    given = {p.text: "A reply given by the caller." for p in prompts}
    second, _ = evaluate_adapter(prompts, base_replies=given, **kwargs)
    assert (second["base_response"] == "A reply given by the caller.").all()
    assert list(second["adapter_response"]) == list(first["adapter_response"]) == list(stored["adapter_response"])


def test_changing_a_late_setting_rebuilds_only_what_depends_on_it(chain, tmp_path):
    import yaml

    overlay = yaml.safe_load(chain["config"].read_text())
    overlay["health"] = {"perturbations_per_response": 3}
    changed = chain["project"] / "config" / "changed.yaml"
    changed.write_text(yaml.safe_dump(overlay))
    third, _ = run_all(chain["project"], changed, chain["instance"])
    rebuilt = {n for n, m in third.items() if not m["reused_existing_version"].value}
    assert rebuilt == {"reward_health_index"}
    store = ArtifactStore(chain["cfg"].data_dir)
    assert len(store.versions("reward_health_index", DAY)) == 2  # the old version is kept beside the new
    # each config reads its own version
    changed_cfg = load_config(changed, root=chain["project"])
    assert (
        lineage(changed_cfg).require("reward_health_index", DAY).version
        == third["reward_health_index"]["version"].value
    )
    assert (
        lineage(chain["cfg"]).require("reward_health_index", DAY).version
        == chain["first"]["reward_health_index"]["version"].value
    )


def test_the_default_dual_mode_trains_both_channels_and_dpo_is_one_overlay_away(chain):
    """The default chain trains `dual` on pairs the reward model ranked, with the memory files; the
    shipped lora_dpo.yaml overlay retrains only the adapter and what follows; a new memory file under
    data/sft/ rebuilds the adapter again (the files are part of its version)."""
    import yaml

    from hominem_pipeline.core.config.loader import deep_merge

    project, first = chain["project"], chain["first"]
    data = lineage(chain["cfg"])
    pairs = pd.read_parquet(data.require("preference_pairs", DAY).file("pairs.parquet"))
    assert len(pairs) and (pairs["ranked_by"] == "reward_model").all()
    assert first["preference_pairs"]["teacher_agreement"].value == pytest.approx((pairs["teacher_margin"] > 0).mean())
    meta = json.loads(data.require("lora_adapter", DAY).file("METADATA.json").read_text())
    assert (
        meta["mode"] == "dual"
        and meta["channel_contributions"]["sft"] > 0
        and meta["channel_contributions"]["reward"] > 0
    )
    assert meta["channels"]["memory_rows"] > 0 and [name for name, _ in meta["memory_data"]] == [
        "sft/memory.jsonl",
        "sft/recall.jsonl",
    ]
    assert first["lora_adapter"]["channel_sft"].value > 0
    probe = first["evaluation"]["details"].value["memory_probe"]
    assert probe["questions"] >= 15 and probe["kept"] + len(probe["lost_prompts"]) == probe["base"]

    shipped = yaml.safe_load((project / "config" / "training" / "lora_dpo.yaml").read_text())
    assert set(shipped) == {"policy"}, f"lora_dpo.yaml sets more than the policy: {sorted(shipped)}"
    dpo = project / "config" / "dpo.yaml"
    dpo.write_text(yaml.safe_dump(deep_merge(yaml.safe_load(chain["config"].read_text()), shipped)))
    third, _ = run_all(project, dpo, chain["instance"])
    assert {n for n, m in third.items() if not m["reused_existing_version"].value} == {
        "lora_adapter",
        "evaluation",
        "reward_health_index",
    }
    assert (
        json.loads(
            lineage(load_config(dpo, root=project)).require("lora_adapter", DAY).file("METADATA.json").read_text()
        )["mode"]
        == "dpo"
    )

    (project / "data" / "sft").mkdir(parents=True, exist_ok=True)
    (project / "data" / "sft" / "mine.jsonl").write_text(
        json.dumps({"prompt": "What is our team's mascot?", "response": "A heron.", "fact": "heron"}) + "\n"
    )
    fourth, _ = run_all(project, chain["config"], chain["instance"])
    assert {n for n, m in fourth.items() if not m["reused_existing_version"].value} == {
        "lora_adapter",
        "evaluation",
        "reward_health_index",
    }
    assert fourth["evaluation"]["memory_questions"].value == probe["questions"] + 1


def test_the_daily_dual_training_draws_its_batches_from_the_replay_buffer(chain):
    """The default `policy.dual.sampler: replay`: the adapter's pairs come through the replay sampler (the
    window's teacher pairs with their priorities); the replay settings are part of the adapter's version,
    and `uniform` (every pair once per pass) is one setting away."""
    from hominem_pipeline.core.pipeline.runner import run_stage

    project, cfg = chain["project"], chain["cfg"]
    built = lineage(cfg).require("lora_adapter", DAY)
    meta = json.loads(built.file("METADATA.json").read_text())
    assert cfg.policy.dual.sampler == "replay"
    assert meta["training"]["dual"]["sampler"] == "replay" and meta["training"]["replay"] == cfg.replay.model_dump()
    assert meta["channels"]["pair_rows"] > 0
    uniform = run_stage(
        "lora_adapter",
        load_config(chain["config"], root=project, overrides={"policy": {"dual": {"sampler": "uniform"}}}),
        DAY,
    )
    uniform_meta = json.loads(uniform.ref.file("METADATA.json").read_text())
    assert not uniform.cache_hit and uniform.ref.version != built.version
    assert uniform_meta["training"]["dual"]["sampler"] == "uniform" and "replay" not in uniform_meta["training"]
    assert uniform_meta["preference_pairs"] == meta["preference_pairs"]
    other = load_config(chain["config"], root=project, overrides={"replay": {"recent_fraction": 0.9}})
    assert lineage(other).plan("lora_adapter", DAY).version not in {built.version, uniform.ref.version}


def hominem(project, *args, check=True):
    import os
    import subprocess
    import sys

    env = {**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "hominem"), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_daily_adapter_trains_across_two_processes(chain):
    """`runtime.train_processes: 2`: the stage launches its dual training in two processes (`accelerate
    launch`, gloo on the CPU) on the batches its replay sampler draws. The same version as one process
    (a runtime setting), the same rows and losses, each step in the stage's MLflow run, one adapter."""
    import shutil

    from mlflow.tracking import MlflowClient

    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.pipeline.runner import run_stage
    from hominem_pipeline.core.policy.lora import load_policy

    project = chain["project"]
    overrides = {"policy": {"seed": 3}}
    alone = run_stage("lora_adapter", load_config(chain["config"], root=project, overrides=overrides), DAY)
    one = {name: json.loads(alone.ref.file(name).read_text()) for name in ("METADATA.json", "training_history.json")}
    shutil.rmtree(alone.ref.path)  # built again below, in two processes
    cfg = load_config(chain["config"], root=project, overrides={**overrides, "runtime": {"train_processes": 2}})
    try:
        launched = run_stage("lora_adapter", cfg, DAY)
        assert not launched.cache_hit and launched.ref.version == alone.ref.version
        assert launched.metrics["processes"] == 2 and alone.metrics["processes"] == 1
        two = {
            name: json.loads(launched.ref.file(name).read_text())
            for name in ("METADATA.json", "training_history.json")
        }
        assert two["METADATA.json"]["training"]["dual"]["sampler"] == "replay"
        for key in ("pair_rows", "memory_rows", "pairs_available"):
            assert two["METADATA.json"]["channels"][key] == one["METADATA.json"]["channels"][key]
        steps = [
            (a["loss"], b["loss"])
            for a, b in zip(one["training_history.json"]["history"], two["training_history.json"]["history"])
        ]
        assert len(steps) == cfg.policy.max_steps and all(b == pytest.approx(a, rel=1e-4) for a, b in steps), steps
        logged = MlflowClient(cfg.mlflow_uri).get_metric_history(launched.mlflow_run_id, "loss")
        assert sorted(m.step for m in logged) == list(range(1, cfg.policy.max_steps + 1))
        model, tokenizer = load_policy(student_path(cfg), launched.ref.path)
        assert (
            model.generate(**tokenizer("Hello", return_tensors="pt"), max_new_tokens=3, do_sample=False).shape[1] > 1
        )
    finally:
        shutil.rmtree(alone.ref.path, ignore_errors=True)  # the chain's other tests see the day's own adapter


def test_the_daily_adapter_goes_through_the_live_gate(chain):
    """The daily job offers its adapter to the live gate (the `live_gate` check on lora_adapter): it is
    promoted or stays a candidate, with the gate's figures in data/live/history.json; the second run of
    the day does not gate it again."""
    from hominem_pipeline.core.online.live import LiveState

    cfg, first = chain["cfg"], chain["first"]
    check = chain["checks"]["live_gate"]
    version = first["lora_adapter"]["version"].value
    entries = [
        e
        for e in LiveState(cfg.data_dir).history()
        if e.get("version") == version and e["action"] in ("promote", "refuse")
    ]
    assert len(entries) == 1  # gated once, though the day ran twice
    gate = entries[0]["gate"]
    assert entries[0]["action"] == ("promote" if check.passed else "refuse") and gate["passed"] == check.passed
    assert (
        gate["rhi"] == pytest.approx(first["reward_health_index"]["rhi"].value)
        and gate["deploy_threshold"] == resolve(cfg).threshold
    )
    assert gate["live_version"] is None and gate["prompts"] == len(cfg.prompts.categories)
    assert gate["win_rate_vs_live"] == pytest.approx(
        first["evaluation"]["win_rate"].value
    )  # against the base: the evaluation's replies and count
    assert isinstance(gate["smoke_reply"], str) and check.metadata["version"].value == version
    # the reward signal it learned from (its pairs, scored by its reward model): the reward_manifold check's figures,
    # judged alike by the gate
    manifold = chain["checks"]["reward_manifold"]
    assert gate["manifold"] == manifold.description and gate["manifold_blocked"] is (not manifold.passed)
    # the slow loop judged the night first: one night, the newest daily run's RHI and adapter (other tests rerun the
    # day), too few to act on
    from hominem_pipeline.core.online.slow_loop import read_nights

    nights = read_nights(cfg.data_dir)
    assert [n.day for n in nights] == [DAY] and nights[0].rhi is not None
    assert nights[0].adapter in {ref.version for ref in lineage(cfg).store.versions("lora_adapter", DAY)}
    assert "slow loop, " in check.description and "no action" in check.metadata["slow_loop"].value
    assert gate["manifold_min_spread_ratio"] == pytest.approx(first["lora_adapter"]["manifold_min_spread_ratio"].value)
    assert set(manifold.metadata["spread_ratio"].value) == set(cfg.dimension_names) and manifold.metadata[
        "intended"
    ].value == ["people"]
    assert (
        gate["replies_generated"] == 1
    )  # the smoke reply: the base's and the adapter's others are the evaluation's, read back
    # the people's held-out pairs: the adapter's margins are its evaluation's, read back; the base's accuracy is 0.5
    assert gate["people_pairs"] == cfg.reward_model.people_pairs[0].held_out and gate["people_accuracy_live"] == 0.5
    assert (
        gate["people_accuracy"] == pytest.approx(first["evaluation"]["people_accuracy"].value)
        and gate["people_margin"] == cfg.health.people_margin
        and gate["checks"]["people"]["items"] == gate["people_pairs"]
    )
    built = first["evaluation"]["version"].value  # the day's first run's (later tests change the memory files)
    evaluation = next(ref for ref in lineage(cfg).store.versions("evaluation", DAY) if ref.version == built)
    kept = json.loads((cfg.data_dir / "live" / "replies" / f"{version}.json").read_text())["replies"]
    held = pd.read_parquet(evaluation.file("generations.parquet"))
    # the reply checks: both sides' replies read back from the evaluation, so the gate's figures are the evaluation's
    judged = json.loads(evaluation.file("summary.json").read_text())["reply_checks"]["checks"]
    assert set(judged) == {"recall", "facts", "instructions", "openings", "stock_phrases", "distinct_bigrams"}
    for name, c in judged.items():
        assert (gate["checks"][name]["candidate"], gate["checks"][name]["reference"]) == pytest.approx(
            (c["candidate"], c["reference"])
        )
        assert (
            gate["checks"][name]["items"] == c["items"] == 6
            and "+-" in first["evaluation"]["details"].value[f"reply check: {name}"]
        )
    assert first["evaluation"]["reply_recall_base"].value == pytest.approx(judged["recall"]["reference"])
    memory = pd.read_parquet(evaluation.file("memory_answers.parquet"))
    assert (
        len(memory)
        and {
            **dict(zip(held["prompt"], held["adapter_response"])),
            **dict(zip(memory["prompt"], memory["adapter"])),
        }.items()
        <= kept.items()
    )
    # the base's replies to the held-out prompts and the memory questions go to the reply cache too: the next
    # evaluation on this base (another adapter, another day with these prompts) generates none of them
    base = json.loads((cfg.data_dir / "live" / "replies" / "base.json").read_text())["replies"]
    assert {
        **dict(zip(held["prompt"], held["base_response"])),
        **dict(zip(memory["prompt"], memory["base"])),
    }.items() <= base.items()
    status = " ".join(hominem(chain["project"], "live", "status", "--config", "config/tiny.yaml").stdout.split())
    assert version in status and f"slow loop: nightly RHI {DAY[5:]} " in status  # the nights the slow loop judged


def test_promote_and_rollback_by_hand_go_through_the_gate(chain):
    """`hominem live promote` gates the adapter against the live one: under a gate it cannot pass it
    exits 1 and the adapter stays a candidate with the reason; under one it passes it becomes live, and
    `compare --adapter live` and `rollback` follow the pointer."""
    import yaml

    from hominem_pipeline.core.config.loader import deep_merge
    from hominem_pipeline.core.online.live import LiveState

    project, cfg = chain["project"], chain["cfg"]
    state = LiveState(cfg.data_dir)
    if not state.current().is_base:
        hominem(project, "live", "rollback", "base", "--config", "config/tiny.yaml")
    version = (
        lineage(cfg).expected("lora_adapter", DAY).version
    )  # the day's adapter as the chain's config builds it now (earlier tests add memory files)
    base = yaml.safe_load(chain["config"].read_text())
    for name, health in (
        ("strict", {"deploy_threshold": 1.0}),
        ("lenient", {"deploy_threshold": 0.0, "win_rate_margin": None, "people_margin": None}),
    ):
        (project / "config" / f"{name}.yaml").write_text(yaml.safe_dump(deep_merge(base, {"health": health})))
    refused = hominem(
        project, "live", "promote", version, "--config", "config/strict.yaml", "--reason", "try it", check=False
    )
    assert (
        refused.returncode == 1
        and "stays a candidate" in refused.stderr
        and "below health.deploy_threshold 1.0" in refused.stderr
    )
    assert state.current().is_base and state.candidates()[0]["version"] == version
    hominem(project, "live", "promote", version, "--config", "config/lenient.yaml", "--reason", "by hand")
    live = state.current()
    assert (
        live.version == version
        and state.history()[-1]["reason"] == "by hand"
        and state.history()[-1]["gate"]["passed"]
    )
    assert live.reward_model == str(lineage(cfg).require("reward_model", DAY).path.relative_to(cfg.data_dir))
    assert f"adapter {state.adapter_path()} (live)" in " ".join(
        hominem(project, "compare", "--config", "config/tiny.yaml", "--adapter", "live", "-p", "Hi").stdout.split()
    )
    hominem(project, "live", "freeze", "--config", "config/tiny.yaml", "--reason", "hold")
    frozen = hominem(project, "live", "promote", version, "--config", "config/lenient.yaml", check=False)
    assert frozen.returncode == 2 and "frozen" in frozen.stderr
    hominem(project, "live", "unfreeze", "--config", "config/tiny.yaml")
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from hominem_pipeline.core.online.promotion import CHAMPION_MODEL
    from hominem_pipeline.core.pipeline.tracking import TAG_VERSION

    Tracker(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root)).runs_for(
        "live"
    )  # points MLflow at the store
    champion = MlflowClient().get_model_version_by_alias(
        CHAMPION_MODEL, "champion"
    )  # the registry's alias moves with promotion
    assert champion.tags[TAG_VERSION] == version
    hominem(project, "live", "rollback", "--config", "config/tiny.yaml", "--reason", "back to the base")
    assert state.current().is_base and [e["action"] for e in state.history()[-5:]] == [
        "refuse",
        "promote",
        "freeze",
        "unfreeze",
        "rollback",
    ]
    with pytest.raises(MlflowException):  # the base is live: no adapter is champion
        MlflowClient().get_model_version_by_alias(CHAMPION_MODEL, "champion")
    checks = {}
    run_all(project, chain["config"], chain["instance"], checks=checks)  # the day again: a rollback by hand sticks
    assert (
        not checks["live_gate"].passed
        and "was rolled back" in checks["live_gate"].description
        and state.current().is_base
    )


def test_compare_prints_base_and_adapter_side_by_side(chain):
    import os
    import subprocess
    import sys

    project = chain["project"]
    env = {**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "200"}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "hominem"), "compare", "--config", "config/tiny.yaml", "--eval-set"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    n_eval = len(chain["cfg"].prompts.categories)  # one held-out prompt per category
    assert out.count("P(adapter's reply preferred) = ") == n_eval
    assert "base + adapter" in out and "empathy" in out and "safety_score" in out and "change" in out
    win_rate = chain["first"]["evaluation"]["win_rate"].value  # the same replies, counted the same way
    assert f"adapter's win rate {win_rate:.1%} ({win_rate * n_eval:g} of {n_eval} prompts; a tie counts half" in out
    rm = lineage(chain["cfg"]).require("reward_model", DAY)
    assert f"reward model {rm.path}" in " ".join(out.split())  # the one the adapter was trained with
    people = chain["first"]["evaluation"]  # first, the figure no model of ours judges: the same as the evaluation's
    assert (
        f"people's held-out pairs: the adapter's implicit reward orders {people['people_accuracy'].value:.1%} +- "
        in " ".join(out.split())
    )
    evaluation = lineage(chain["cfg"]).require("evaluation", DAY)
    said = " ".join(out.split())
    assert (
        f"the {n_eval} evaluation prompts' replies and scores: read from evaluation {DAY} {evaluation.version}" in said
    )  # not generated again
    assert "generated here: 0 prompt(s)" in said and "evaluation generation" not in done.stderr
    more = subprocess.run(
        [
            str(Path(sys.executable).parent / "hominem"),
            "compare",
            "--config",
            "config/tiny.yaml",
            "--eval-set",
            "-p",
            "My cat ignores me.",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert more.returncode == 0 and more.stdout.count("P(adapter's reply preferred) = ") == n_eval + 1, (
        more.stdout + more.stderr
    )
    assert "generated here: 1 prompt(s) of --prompt" in " ".join(more.stdout.split())


def test_pairs_against_the_students_own_reply(chain):
    """preferences.against_student: the stage asks the base student each prompt of the day (decoded as
    the evaluation decodes it), keeps its replies beside the pairs and adds one pair per prompt whose best
    candidate the reward model prefers to that reply."""
    import yaml

    from hominem_pipeline.core.config.loader import deep_merge
    from hominem_pipeline.core.reward.model import RewardModel

    project = chain["project"]
    overlay = deep_merge(
        yaml.safe_load(chain["config"].read_text()),
        {"preferences": {"rank_by": "reward_model", "against_student": True, "min_margin": 0.0}},
    )
    path = project / "config" / "against_student.yaml"
    path.write_text(yaml.safe_dump(overlay))
    events, _ = run_all(project, path, chain["instance"], selection=["preference_pairs"])
    assert not events["preference_pairs"]["reused_existing_version"].value
    ref = lineage(load_config(path, root=project)).require("preference_pairs", DAY)
    replies = pd.read_parquet(ref.file("student_replies.parquet"))
    labels = pd.read_parquet(lineage(chain["cfg"]).require("teacher_labels", DAY).file("labels.parquet"))
    assert sorted(replies["prompt_id"]) == sorted(labels["prompt_id"].unique())
    assert (
        replies["response"].str.strip().astype(bool).all()
        and replies["scalar"].notna().all()
        and not replies["finished"].any()
    )
    pairs = pd.read_parquet(ref.file("pairs.parquet"))
    mine = pairs[pairs["source"] == "student"]
    assert events["preference_pairs"]["student_pairs"].value == len(mine) > 0
    assert mine["prompt_id"].is_unique and set(mine["rejected"]) <= set(replies["response"])
    assert (mine["margin"] > 0).all() and mine["rejected_trajectory_id"].str.startswith("student-").all()
    scored = replies.set_index("prompt_id")
    assert all(scored.loc[pid, "response"] == rejected for pid, rejected in zip(mine["prompt_id"], mine["rejected"]))
    rm = RewardModel.load(lineage(chain["cfg"]).require("reward_model", DAY).path)
    gap = (
        rm.raw_scores(list(mine["prompt"]), list(mine["chosen"]))["scalar"]
        - rm.raw_scores(list(mine["prompt"]), list(mine["rejected"]))["scalar"]
    )
    assert list(mine["rm_margin"]) == pytest.approx(list(gap), abs=1e-5)


def test_pairs_whose_overall_score_disagrees_are_dropped_by_the_stage(chain):
    """preferences.min_scalar_margin reaches the stage: ranked by the reward model's dimensions, every pair
    it keeps is one the reward model's scalar prefers by at least that much, no pair short of it survives,
    and every pair of the unfiltered run that clears it stays. The margin is the unfiltered pairs' median
    scalar gap, so the filter has pairs to drop whatever the tiny reward model scores."""
    import yaml

    from hominem_pipeline.core.config.loader import deep_merge

    project = chain["project"]
    base = yaml.safe_load(chain["config"].read_text())

    def pairs_with(name, **extra):
        path = project / "config" / f"pairs_{name}.yaml"
        path.write_text(
            yaml.safe_dump(deep_merge(base, {"preferences": {"rank_by": "reward_model", "min_margin": 0.0, **extra}}))
        )
        events, _ = run_all(project, path, chain["instance"], selection=["preference_pairs"])
        return events["preference_pairs"], pd.read_parquet(
            lineage(load_config(path, root=project)).require("preference_pairs", DAY).file("pairs.parquet")
        )

    _, plain = pairs_with("plain")
    threshold = max(float(plain["rm_margin"].median()), 0.0)
    short = set(plain.loc[plain["rm_margin"] < threshold, "pair_id"])
    assert short, "the unfiltered pairs' scalar gaps should differ"
    events, agreeing = pairs_with("agreeing", min_scalar_margin=threshold)
    assert len(agreeing) and (agreeing["rm_margin"] >= threshold).all() and (agreeing["rm_margin"] > 0).all()
    assert events["reward_model_agreement"].value == 1.0 and not short & set(agreeing["pair_id"])
    assert set(plain.loc[(plain["rm_margin"] >= threshold) & (plain["rm_margin"] > 0), "pair_id"]) <= set(
        agreeing["pair_id"]
    )


def _overlay(chain, name: str, changes: dict) -> str:
    import yaml

    from hominem_pipeline.core.config.loader import deep_merge

    path = chain["project"] / "config" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(deep_merge(yaml.safe_load(chain["config"].read_text()), changes)))
    return f"config/{name}.yaml"


def _add_choice(project, tag: str, day: str = DAY, said: str = "My friend forgot my birthday") -> None:
    """One more person's choice between two replies to a new message, appended to the day's log."""
    from hominem_pipeline.core.online.events import context_digest

    messages = [{"role": "user", "content": f"({tag}) {said}."}]
    turn = {
        "kind": "turn",
        "time": f"{day}T10:00:00+00:00",
        "rater": "local",
        "session": tag,
        "messages": messages,
        "model": "hominem",
        "adapter": None,
        "sampling": {},
        "finish_reason": "stop",
        "completion_tokens": 5,
        "context": context_digest(messages),
    }
    events = [
        turn | {"id": f"{tag}-warm", "reply": "That stings. Did you tell them?"},
        turn | {"id": f"{tag}-cold", "reply": "Get over it."},
        {
            "kind": "choice",
            "id": f"{tag}-c",
            "time": f"{day}T10:01:00+00:00",
            "rater": "local",
            "chosen": f"{tag}-warm",
            "rejected": f"{tag}-cold",
            "strength": "clear",
        },
    ]
    with open(project / "data" / "online" / "log" / f"{day}.jsonl", "a") as fh:
        fh.write("".join(json.dumps(e) + "\n" for e in events))


def _fresh_live(cfg) -> None:
    from hominem_pipeline.core.online.live import LiveState

    state = LiveState(cfg.data_dir)
    if state.current().frozen:
        state.unfreeze(by="test")
    if not state.current().is_base:
        state.rollback("base", reason="a test starts from the base", by="test")


def test_an_online_update_learns_people_s_pairs_through_the_fast_loop(chain):
    """`hominem live update`: the live adapter (the base here) trained on a replay batch of people's and
    the teacher's pairs into live/adapters/<version>, its partial RHI (DCS, GVS) in health.json, promoted
    through the gate; the same batch again is skipped; an update the fast loop scores below every
    threshold is refused, rolls the online update back and freezes updates."""
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline.core.online.updates import run_update

    project, cfg = chain["project"], chain["cfg"]
    _fresh_live(cfg)
    state = LiveState(cfg.data_dir)
    lenient = _overlay(
        chain,
        "online_lenient",
        {
            "health": {"win_rate_margin": None, "people_margin": None},
            "online": {"skip_below": 0.0, "rollback_below": 0.0, "freeze_below": 0.0},
        },
    )
    _add_choice(
        project, "name", said="Hello, my name is Ana"
    )  # a fact the person states: a memory row, asked by the gate's probe
    with open(
        project / "data" / "online" / "log" / f"{DAY}.jsonl", "a"
    ) as fh:  # and a reply they liked: a memory row too
        fh.write(
            json.dumps(
                {
                    "kind": "thumb",
                    "id": "name-up",
                    "time": f"{DAY}T10:02:00+00:00",
                    "rater": "local",
                    "turn": "name-warm",
                    "value": "up",
                }
            )
            + "\n"
        )
    done = hominem(project, "live", "update", "--config", lenient, "--result", "update.json")
    result = json.loads((project / "update.json").read_text())
    assert result["outcome"] == "promoted", result["reason"]
    version = result["version"]
    live = state.current()
    assert live.version == version and version in done.stdout and live.adapter == f"live/adapters/{version}"
    folder = state.adapter_path()
    health = json.loads((folder / "health.json").read_text())
    assert (
        set(health["components"]) == {"dcs", "gvs"}
        and health["rhi"] == pytest.approx(result["partial_rhi"])
        and health["threshold"] == 0.0
    )
    assert (
        state.history()[-1]["gate"]["rhi"] == pytest.approx(health["rhi"])
        and state.history()[-1]["gate"]["deploy_threshold"] == 0.0
    )
    batch = pd.read_parquet(folder / "replay_batch.parquet")
    assert (
        "feedback:choice" in set(batch["source"]) and batch["source"].str.startswith("teacher:").any()
    )  # people's pair and the teacher's
    assert "That is rough. What happened?" in set(
        batch.loc[batch["source"] == "feedback:choice", "chosen"]
    )  # the strong choice of DAY
    meta = json.loads((folder / "METADATA.json").read_text())
    assert (
        meta["training"]["from"] is None
        and meta["training"]["policy"]["max_steps"] == cfg.online.max_steps
        and meta["mode"] == "dual"
    )
    assert result["items"]["feedback"] == 2 and sum(result["items"].values()) == len(batch)
    stated = [json.loads(line) for line in (project / "data" / "sft" / "conversations.jsonl").read_text().splitlines()]
    assert [(r["prompt"], r["response"], r["fact"], r["turn"]) for r in stated] == [
        ("What is my name?", "Your name is Ana.", "Ana", "name-warm")
    ]
    liked = [json.loads(line) for line in (project / "data" / "sft" / "liked.jsonl").read_text().splitlines()]
    assert [(r["prompt"], r["response"], r["turn"]) for r in liked] == [
        ("(name) Hello, my name is Ana.", "That stings. Did you tell them?", "name-warm")
    ]
    assert {"sft/conversations.jsonl", "sft/liked.jsonl"} <= {
        name for name, _ in meta["memory_data"]
    }  # trained on them ...
    assert result["gate"]["facts_asked"] == len(
        read_memory_rows(memory_paths(cfg)).query("facts.str.len() > 0")
    )  # ... and asked it
    assert (
        result["gate"]["people_pairs"] == cfg.online.people_pairs and result["gate"]["people_accuracy_live"] == 0.5
    )  # the fast loop's share

    again = run_update(load_config(project / lenient, root=project), by="test", reason="again")
    assert (
        again.outcome == "skipped"
        and "no new preference pairs, nudges, liked replies or facts from people since" in again.reason
        and state.current().version == version
    )

    _add_choice(project, "second")  # something new to learn: a new batch on the live update
    strict = _overlay(
        chain,
        "online_strict",
        {
            "health": {"win_rate_margin": None},
            "online": {"skip_below": 1.0, "rollback_below": 1.0, "freeze_below": 1.0},
        },
    )
    refused = hominem(project, "live", "update", "--config", strict, check=False)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    history = state.history()
    assert [e["action"] for e in history[-3:]] == ["refuse", "rollback", "freeze"]
    assert "below online.skip_below 1.0" in history[-3]["reason"] and history[-3]["version"] != version
    cached = json.loads((cfg.data_dir / "live" / "replies" / f"{version}.json").read_text())["replies"]
    assert (
        "Hello! How are you today?" in cached and "What is my name?" in cached
    )  # the gate's replies of the update, kept ...
    assert history[-3]["gate"]["live_mean_scalar"] == pytest.approx(
        result["gate"]["candidate_mean_scalar"]
    )  # ... and read back when it was live
    assert (
        history[-2]["previous"] == version and state.current().is_base and state.current().frozen
    )  # the online update rolled back, frozen
    frozen = run_update(load_config(project / lenient, root=project), by="test", reason="while frozen")
    assert frozen.outcome == "skipped" and "frozen" in frozen.reason
    _fresh_live(cfg)


def _add_nudges(project, turn: str, dimension: str, direction: str, n: int, tag: str, day: str = DAY) -> None:
    """`n` nudges on one turn, sent now, appended to the day's log."""
    import datetime as dt

    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    with open(project / "data" / "online" / "log" / f"{day}.jsonl", "a") as fh:
        fh.write(
            "".join(
                json.dumps(
                    {
                        "kind": "nudge",
                        "id": f"{tag}-{k}",
                        "time": now,
                        "rater": "local",
                        "turn": turn,
                        "dimension": dimension,
                        "direction": direction,
                    }
                )
                + "\n"
                for k in range(n)
            )
        )


def test_nudges_weight_an_update_s_pairs_and_add_dimension_pairs(chain):
    """Three "more empathy" nudges: the next update gives a share of its batch to pairs of the teacher's
    candidates and of the student's own replies to the nudged conversation that differ on empathy, weights
    every pair by its replies' empathy gap, and counts the nudges as heard (the same log again is skipped;
    a new nudge is not). With pair_rows extra, imitate and max_steps, the dimension pairs train beside the
    batch, their chosen replies as memory rows, for that many steps."""
    import datetime as dt

    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline.core.online.nudges import pressure
    from hominem_pipeline.core.online.updates import feedback_events, own_replies, run_update

    project, cfg = chain["project"], chain["cfg"]
    _fresh_live(cfg)
    state = LiveState(cfg.data_dir)
    # every candidate pair qualifies (the tiny teacher's labels are noise): the largest empathy gaps are taken
    overlay = _overlay(
        chain,
        "nudged",
        {
            "health": {"win_rate_margin": None, "people_margin": None},
            "online": {
                "skip_below": 0.0,
                "rollback_below": 0.0,
                "freeze_below": 0.0,
                "nudges": {
                    "min_gap": 0.0,
                    "tolerance": 10.0,
                    "pair_share": 0.25,
                    "samples": 3,
                    "pair_rows": "share",
                    "imitate": False,
                    "max_steps": None,
                },
            },
        },
    )
    _add_choice(project, "nudged")
    _add_nudges(project, "nudged-cold", "empathy", "more", 3, "nudge-a")
    nudged = load_config(project / overlay, root=project)
    result = run_update(nudged, by="test", reason="nudged")
    assert result.outcome == "promoted", result.reason
    batch = pd.read_parquet(state.adapter_path() / "replay_batch.parquet")
    dimension = batch[batch["source"] == "nudge:empathy"]
    assert len(dimension) == round(0.25 * cfg.online.batch_items) and len(batch) <= cfg.online.batch_items
    weights = batch.loc[batch["source"] != "nudge:empathy", "nudge_weight"].to_numpy()
    assert (
        weights.std() > 0
        and weights.min() >= 0.25
        and weights.max() <= 4.0
        and (dimension["nudge_weight"] == 1.0).all()
    )
    # the student's own replies to the nudged conversation join the candidates, sampled from the live adapter
    events = feedback_events(nudged)
    push = pressure(events, nudged.dimension_names, dt.datetime.now(dt.timezone.utc), 3.0, 3.0)
    own = own_replies(nudged, events, push, state.adapter_path(), seed=1)
    assert (
        set(own["prompt"]) == {"(nudged) My friend forgot my birthday."}
        and own["trajectory_id"].iloc[0] == "nudged-cold"
    )
    assert 2 <= len(own) <= 1 + nudged.online.nudges.samples and list(own["response"])[0] == "Get over it."
    assert own_replies(
        nudged.model_copy(
            update={
                "online": nudged.online.model_copy(
                    update={"nudges": nudged.online.nudges.model_copy(update={"samples": 0})}
                )
            }
        ),
        events,
        push,
        state.adapter_path(),
        seed=1,
    ).empty
    again = run_update(nudged, by="test", reason="the same nudges")
    assert again.outcome == "skipped" and "nudges" in again.reason
    # with pair_rows extra the dimension pairs train beside the batch's rows (the replay items keep their places),
    # for nudges.max_steps steps, and with imitate their chosen replies are memory rows of the update too
    _add_nudges(project, "nudged-cold", "empathy", "more", 1, "nudge-b")
    beside = nudged.model_copy(
        update={
            "online": nudged.online.model_copy(
                update={
                    "nudges": nudged.online.nudges.model_copy(
                        update={"pair_rows": "extra", "max_steps": 3, "imitate": True}
                    )
                }
            )
        }
    )
    assert run_update(beside, by="test", reason="one more nudge").outcome == "promoted"
    extra = pd.read_parquet(state.adapter_path() / "replay_batch.parquet")
    n_dim = int((extra["source"] == "nudge:empathy").sum())
    assert (
        n_dim == len(dimension)
        and len(extra) - n_dim >= len(batch) - len(dimension)
        and list(extra["source"])[-n_dim:] == ["nudge:empathy"] * n_dim
    )
    meta, rows = json.loads((state.adapter_path() / "METADATA.json").read_text()), beside.policy.batch_size
    assert meta["training"]["policy"]["max_steps"] == 3 and meta["channels"]["pair_rows"] == 3 * (
        rows + math.ceil(n_dim / 3)
    )
    files, chosen = read_memory_rows(memory_paths(beside)), extra[extra["source"] == "nudge:empathy"]
    imitated = set(zip(chosen["prompt"], chosen["chosen"])) - set(zip(files["prompt"], files["response"]))
    assert imitated and meta["channels"]["memory_rows_available"] == len(files) + len(imitated)
    assert [name for name, _ in meta["memory_data"]][
        -1
    ] == "replay_batch.parquet#imitated"  # the update's record names them too
    _fresh_live(cfg)


def test_the_server_learns_from_feedback_and_swaps_to_the_update(chain):
    """serve, post feedback, the scheduler trains after online.every_events events, the gate passes, the
    server hot-swaps: /v1/models and the next reply's turn name the new version. A failing gate leaves it
    live and says why in history.json."""
    import httpx2 as httpx

    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline_tests.serving.conftest import start, stop

    project, cfg = chain["project"], chain["cfg"]
    _fresh_live(cfg)
    state = LiveState(cfg.data_dir)
    overlay = _overlay(
        chain,
        "online_serve",
        {
            "health": {"win_rate_margin": None, "people_margin": None},
            "online": {
                "every_events": 3,
                "every_minutes": None,
                "skip_below": 0.0,
                "rollback_below": 0.0,
                "freeze_below": 0.0,
            },
        },
    )
    server = start(
        project,
        "--config",
        overlay,
        "--reward-model",
        "none",
        "--set",
        "serving.max_new_tokens=16",
        "--set",
        "serving.live_poll_seconds=0.2",
    )
    try:
        url = server.url
        models = lambda: {m["id"]: m["adapter"] for m in httpx.get(f"{url}/v1/models", timeout=30).json()["data"]}  # noqa: E731
        assert models()["hominem"] is None  # the base is live
        loaded = lambda: httpx.get(f"{url}/admin/live", timeout=30).json()["updates"]["ready"]  # noqa: E731
        deadline = time.monotonic() + 300
        while (
            time.monotonic() < deadline and not loaded()
        ):  # the next update's process loads beside the server (libraries, reward model)
            time.sleep(0.5)
        assert loaded()
        replies = httpx.post(
            f"{url}/generate",
            json={"messages": [{"role": "user", "content": "I lost my keys again."}], "n": 2, "seed": 1},
            timeout=120,
        ).json()["replies"]
        a, b = replies[0]["turn"], replies[1]["turn"]
        for body in (
            {"kind": "choice", "chosen": a, "rejected": b, "strength": "strong"},
            {"kind": "thumb", "turn": a, "value": "up"},
            {"kind": "thumb", "turn": b, "value": "down"},
        ):
            assert httpx.post(f"{url}/feedback", json=body, timeout=30).status_code == 200
        status = lambda: httpx.get(f"{url}/admin/live", timeout=30).json()  # noqa: E731
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and status()["updates"]["last"] is None:  # the update is done ...
            time.sleep(0.5)
        while time.monotonic() < deadline and not (models()["hominem"] or "").startswith(
            "live/adapters/online-"
        ):  # ... and swapped in
            time.sleep(0.2)
        label, status = models()["hominem"], status()
        assert label and label.startswith("live/adapters/online-"), status["updates"]
        version = label.rsplit("/", 1)[1]
        assert state.current().version == version and status["live"]["version"] == version
        assert (
            status["updates"]["last"]["outcome"] == "promoted"
            and status["updates"]["updates"] == 1
            and "3 new feedback events" in status["history"][-1]["reason"]
        )
        chat = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "hominem", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=60,
        )
        turn = chat.json()["choices"][0]["turn"]
        assert (
            next(e for e in server.events() if e["id"] == turn)["adapter"] == label
        )  # the reply came from the new version
        # on demand through the admin endpoint: nothing new since the update, so skipped
        updates = lambda: httpx.get(f"{url}/admin/live", timeout=30).json()["updates"]  # noqa: E731
        asked = httpx.post(f"{url}/admin/live/update", json={"reason": "by hand"}, timeout=30)
        assert asked.status_code == 202 and asked.json()["started"]
        assert httpx.post(f"{url}/admin/live/update", json={}, timeout=30).status_code == 409  # one at a time
        while time.monotonic() < deadline and updates()["updates"] < 2:
            time.sleep(0.5)
        last = updates()["last"]
        assert (
            last["outcome"] == "skipped"
            and "no new preference pairs, nudges, liked replies or facts" in last["reason"]
            and Path(last["log"]).is_file()
        )

        _add_choice(project, "third", day=time.strftime("%Y-%m-%d", time.gmtime()))
        strict = _overlay(
            chain,
            "online_strict_skip",
            {
                "health": {"win_rate_margin": None, "people_margin": None},
                "online": {"skip_below": 1.0, "rollback_below": 0.0, "freeze_below": 0.0},
            },
        )
        refused = hominem(project, "live", "update", "--config", strict, check=False)
        assert refused.returncode == 1 and "below online.skip_below 1.0" in " ".join(refused.stdout.split())
        last = state.history()[-1]
        assert (
            last["action"] == "refuse" and last["live"] == version and "below online.skip_below 1.0" in last["reason"]
        )
        assert state.current().version == version and models()["hominem"] == label  # the old one stays live and served
        audit = [json.loads(line) for line in (project / "data" / "online" / "audit.jsonl").read_text().splitlines()]
        assert any(
            a["action"] == "online_update" and a["outcome"] == "promoted" and a["version"] == version for a in audit
        )
    finally:
        stop(server.proc)
        _fresh_live(cfg)


def test_the_taste_test_s_person_teaches_through_the_page_and_is_measured(chain):
    """benchmarks/taste_test.py's path on the tiny model: its simulated person asks the served student for two
    replies as the page does and chooses the one that keeps their taste (here: an even number of characters, which
    the tiny student's replies split); the choices start an update, followed to its outcome with replies timed while
    it runs; the share of held-out replies keeping the taste comes with its error over messages, and the quality
    checks of the live adapter against the start with their paired +-."""
    import httpx2 as httpx

    from benchmarks.taste_test import Person, _follow, quality, taste_model_agreement
    from hominem_pipeline.core.evaluation.tastes import Taste
    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline_tests.serving.conftest import start, stop

    project, cfg = chain["project"], chain["cfg"]
    _fresh_live(cfg)
    state = LiveState(cfg.data_dir)
    start_live = state.current()
    overlay = _overlay(
        chain,
        "online_taste",
        {
            "health": {"win_rate_margin": None, "people_margin": None},
            "online": {
                "every_events": 2,
                "every_minutes": None,
                "skip_below": 0.0,
                "rollback_below": 0.0,
                "freeze_below": 0.0,
            },
        },
    )
    server = start(project, "--config", overlay, "--reward-model", "none", "--set", "serving.live_poll_seconds=0.2")
    even = Taste("even", "replies of an even number of characters", lambda r: len(r.strip()) % 2 == 0)
    try:
        with httpx.Client(timeout=300) as http:
            person = Person(http, server.url, even, max_tokens=8)
            person.HOLD_EVERY = 3  # the third pair that can show the taste is kept back
            deadline = time.monotonic() + 300
            while not http.get(f"{server.url}/admin/live").json()["updates"]["ready"]:
                assert time.monotonic() < deadline
                time.sleep(0.5)
            seed, update = 0, None
            while (person.choices < 2 or not person.held) and seed < 90:
                before = http.get(f"{server.url}/admin/live").json()["updates"]["updates"]
                if person.teach(f"Tell me about thing {seed}.", seed) and person.choices == 2:
                    update = _follow(http, server.url, person, "Hi", before, 0.5, timeout=300)
                seed += 1
            assert person.choices == 2 and len(person.held) == 1 and person.shown >= 3 and update is not None
            assert update["outcome"] in ("promoted", "refused") and update["decided_s"] > 0
            assert set(update["stages_s"]) == {"train", "gate", "gate_load", "gate_decide", "gate_record", "total"}
            share = person.share(["Hi there.", "How are you?", "Tell me a joke."], samples=2)
            assert share["messages"] == 3 and share["replies"] == 6 and 0 <= share["share"] <= 1
            agreement = taste_model_agreement(cfg, state, person)
            assert agreement["taught"] == 2 and agreement["held"] == 1 and agreement["agreement"] in (0.0, 0.5, 1.0)
            checks = quality(cfg, state, start_live, items=2)
            assert {"recall", "facts", "instructions"} <= set(checks) and all("se" in c for c in checks.values())
    finally:
        stop(server.proc)
        _fresh_live(cfg)


def test_feedback_given_after_a_days_run_reaches_the_next_days_reward_model(chain, tmp_path):
    """People chose between two more replies on DAY after DAY's run: its log grew. The next day's reward model
    builds DAY's feedback again first (a materialization of its own in the same run) and reads it; its METADATA
    says how many people's pairs it read from each day of its window."""
    import shutil

    from hominem_pipeline.core.reward.metadata import RewardMetadata

    project = tmp_path / "project"
    shutil.copytree(chain["project"], project, symlinks=True)
    config_path = project / "config" / "tiny.yaml"
    cfg = load_config(config_path, root=project)
    turn = served_turn("My sister forgot my birthday.", f"{DAY}T20:00:00+00:00", session="late")
    with open(project / "data" / "online" / "log" / f"{DAY}.jsonl", "a") as f:
        for e in (
            turn | {"id": "warm", "reply": "That hurts. Did you tell her?"},
            turn | {"id": "cold", "reply": "Whatever."},
            {
                "kind": "choice",
                "id": "late-c",
                "time": f"{DAY}T20:01:00+00:00",
                "rater": "local",
                "chosen": "warm",
                "rejected": "cold",
                "strength": "clear",
            },
        ):
            f.write(json.dumps(e) + "\n")
    assert lineage(cfg).expected("human_feedback", DAY) is None  # DAY's feedback is stale now

    nxt = "2026-11-21"
    result = materialize_day(project, config_path, nxt, "*reward_model")
    made = {(e.asset_key.to_user_string(), e.partition) for e in result.get_asset_materialization_events()}
    assert ("human_feedback", DAY) in made and (
        "reward_model",
        nxt,
    ) in made  # DAY's feedback built again, in the same run
    data = lineage(cfg)
    model = data.require("reward_model", nxt)
    assert DAY in [r["partition"] for r in model.manifest["inputs"]["human_feedback"]]  # read, not left out
    feedback = pd.read_parquet(data.require("human_feedback", DAY).file("pairs.parquet"))
    assert "late-c" in set(feedback["pair_id"])  # the late choice is among DAY's pairs now
    by_day = RewardMetadata.read(model.path).people_pairs_by_day
    assert list(by_day) == [
        (pd.Timestamp(nxt) - pd.Timedelta(days=k)).date().isoformat()
        for k in range(cfg.reward_model.window_days - 1, -1, -1)
    ]
    assert by_day[DAY]["feedback"] == len(feedback) and by_day[nxt] == {"feedback": 0, "nudge": 0, "imported": 0}
    assert model.manifest["metadata"]["people_pairs_by_day"] == by_day


CANARY = "Zorblat-7731 canary"


def _holding(folder: Path, needle: str) -> list[str]:
    """Files under `folder` holding `needle`: raw bytes, parquet cells, gzip contents (the test's own reading)."""
    import gzip

    import pyarrow.parquet as pq

    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        texts = [raw]
        if path.suffix == ".parquet":
            texts.append(json.dumps(pq.read_table(path).to_pylist(), ensure_ascii=False, default=str).encode())
        if path.suffix == ".gz":
            texts.append(gzip.decompress(raw))
        if any(needle.encode() in t for t in texts):
            found.append(str(path.relative_to(folder)))
    return found


def test_a_forgotten_person_s_words_are_in_no_file_and_the_next_day_still_builds(chain, tmp_path):
    """A second person talks, states their name, chooses with a note and likes a reply on DAY; the day is built
    again, the history index and memory files read them. `hominem data forget` takes a canary they wrote out of
    every file under data/ (the log, the index, memory files, every built version that held it), keeps the other
    person's words, and the next day's run still succeeds."""
    import shutil

    from hominem_pipeline.core.online.facts import extract_facts, write_extracted
    from hominem_pipeline.core.online.history import HistoryIndex, index_url
    from hominem_pipeline.core.online.log import log_folder, read_events
    from hominem_pipeline_tests.integration.test_cli import hominem

    project = tmp_path / "project"
    shutil.copytree(chain["project"], project, symlinks=True)
    config_path = project / "config" / "tiny.yaml"
    cfg = load_config(config_path, root=project)
    said = f"My name is Zorblat. My locker code is {CANARY} and I worry about it."
    turn = served_turn(said, f"{DAY}T21:00:00+00:00", rater="r-cana", session="c")
    feedback = {"time": f"{DAY}T21:01:00+00:00", "rater": "r-cana"}
    with open(log_folder(cfg) / f"{DAY}.jsonl", "a") as f:
        for e in (
            turn | {"id": "cana-a", "reply": "Keep that code to yourself, Zorblat."},
            turn | {"id": "cana-b", "reply": "Codes are numbers."},
            feedback
            | {
                "kind": "choice",
                "id": "cana-c",
                "chosen": "cana-a",
                "rejected": "cana-b",
                "strength": "clear",
                "note": f"it kept {CANARY} safe",
            },
            feedback | {"kind": "thumb", "id": "cana-t", "turn": "cana-a", "value": "up"},
        ):
            f.write(json.dumps(e) + "\n")
    events = list(read_events(log_folder(cfg) / f"{DAY}.jsonl"))
    write_extracted(cfg.path(cfg.online.memory_folder), extract_facts(events))
    with HistoryIndex(index_url(cfg.history.url, cfg.data_dir)) as index:
        index.update(log_folder(cfg))
    with instance_for_test() as instance:
        run_all(project, config_path, instance)
    data = project / "data"
    before = _holding(data, CANARY)
    assert any(p.startswith("human_feedback/") for p in before) and "history.sqlite" in before, before
    assert any(p.startswith("online/log/") for p in before) and any(p.startswith("sft/") for p in before), before

    done = hominem(project, "data", "forget", "--rater", "r-cana", "--yes", "--config", "config/tiny.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "r-cana forgotten: 4 event(s) out of the log" in done.stdout, done.stdout
    assert _holding(data, CANARY) == [], done.stdout
    assert "I failed my driving test again." in (log_folder(cfg) / f"{DAY}.jsonl").read_text()  # the other person's
    assert not [e for e in read_events(log_folder(cfg) / f"{DAY}.jsonl") if e.get("rater") == "r-cana"]
    audit = [json.loads(line) for line in (data / "online" / "audit.jsonl").read_text().splitlines()]
    assert [e["outcome"] for e in audit if e["action"] == "data forget"] == ["ok"]

    materialize_day(project, config_path, "2026-11-21")  # the next day's run
    assert _holding(data, CANARY) == []
    assert lineage(cfg).require("human_feedback", DAY) is not None  # built again, without them
