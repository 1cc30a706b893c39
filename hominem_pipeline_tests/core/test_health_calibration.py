"""The health index's calibration: the panel's constants, weights, threshold and healthy ranges in force."""

from pathlib import Path

import pytest
import yaml

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.evaluation.calibration import CalibrationError, fast_loop, resolve
from hominem_pipeline.core.evaluation.health import Component, aggregate, gradient_variance_stability
from hominem_pipeline.core.online.live import LiveState
from hominem_pipeline.core.online.promotion import gate_lines, why_base
from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME

PANEL = {
    "panel": {"command": "benchmarks/health_panel.py calibrate", "healthy": 6, "broken": 8},
    "references": {"gvi_max": {"dual": 2.0, "dpo": 1.0}},
    "weights": {"dcs": 0.3, "gvs": 0.2, "mss": 0.2, "cdrs": 0.2, "lrps": 0.1},
    "threshold": 0.55,
    "healthy": {
        "dcs": [0.30, 0.40],
        "gvs": [0.40, 0.70],
        "mss": [0.70, 0.90],
        "cdrs": [0.40, 0.60],
        "lrps": [0.60, 0.95],
        "rhi": [0.58, 0.70],
    },
    "broken": {"gvs": [0.0, 0.3]},
    "fast_loop": {"thresholds": {"skip_below": 0.45, "rollback_below": 0.35, "freeze_below": 0.25}},
}


def calibrated(project: Path, data=PANEL, online=None, **health):
    path = project / "config" / "health" / "panel.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return load_config(
        project / "config" / "tiny.yaml",
        root=project,
        overrides={
            "health": {
                "calibration": "config/health/panel.yaml",
                "weights": None,
                "gvi_max_reference": None,
                "deploy_threshold": None,
                **health,
            },
            **({"online": online} if online else {}),
        },
    )


def components(**values):
    base = {"dcs": 0.35, "gvs": 0.6, "mss": 0.8, "cdrs": 0.5, "lrps": 0.8}
    return {k: Component(k, v, "test") for k, v in (base | values).items()}


def test_without_a_calibration_the_configs_values_are_used_and_nothing_is_judged(tiny_cfg):
    cfg = load_config(
        tiny_cfg.root / "config" / "tiny.yaml",
        root=tiny_cfg.root,
        overrides={
            "health": {
                "calibration": None,
                "weights": {"dcs": 0.25, "gvs": 0.15, "mss": 0.25, "cdrs": 0.20, "lrps": 0.15},
                "gvi_max_reference": 1.0,
                "deploy_threshold": 0.7,
            }
        },
    )
    settings = resolve(cfg)
    assert (
        settings.threshold == 0.7
        and settings.threshold_name == "health.deploy_threshold"
        and settings.reference("gvi_max", "dpo") == 1.0
    )
    report = aggregate(components(), cfg)
    assert report.verdicts == dict.fromkeys(("dcs", "gvs", "mss", "cdrs", "lrps")) and report.calibration is None
    with pytest.raises(
        ValueError,
        match="health.calibration is null, so health.weights, health.gvi_max_reference, "
        "health.deploy_threshold must be set",
    ):
        load_config(
            tiny_cfg.root / "config" / "tiny.yaml",
            root=tiny_cfg.root,
            overrides={"health": {"calibration": None, "deploy_threshold": None}},
        )


def test_a_calibration_supplies_weights_threshold_and_per_mode_constants(project):
    cfg = calibrated(project)
    settings = resolve(cfg)
    assert (
        settings.weights == PANEL["weights"]
        and settings.threshold == 0.55
        and settings.threshold_text == "the panel's threshold 0.55 (config/health/panel.yaml)"
    )
    assert settings.reference("gvi_max", "dual") == 2.0 and settings.reference("gvi_max", "dpo") == 1.0
    with pytest.raises(CalibrationError, match="no value for policy mode 'rl'"):
        settings.reference("gvi_max", "rl")
    # GVS normalised by the mode's constant: the same gradient norms score higher against a noisier mode's healthy runs
    norms = [1.0, 3.0]  # coefficient of variation 0.5
    assert gradient_variance_stability(norms, settings.reference("gvi_max", "dual")).value == pytest.approx(0.75)
    assert gradient_variance_stability(norms, settings.reference("gvi_max", "dpo")).value == pytest.approx(0.5)
    # the config's own value overrides the calibration's
    assert resolve(calibrated(project, deploy_threshold=0.9)).threshold == 0.9
    assert resolve(calibrated(project, gvi_max_reference=3.0)).reference("gvi_max", "rl") == 3.0


def test_a_refusal_names_the_component_below_the_panels_healthy_range(project):
    cfg = calibrated(project)
    healthy = aggregate(components(), cfg)
    assert healthy.deployable and healthy.rhi >= 0.55 and healthy.below_range == [], healthy.reason
    assert (
        healthy.verdicts["gvs"] == "in the healthy range 0.40-0.70"
        and healthy.calibration == "config/health/panel.yaml"
    )
    broken = aggregate(components(gvs=0.0, cdrs=0.1), cfg)
    assert not broken.deployable and broken.below_range == ["gvs", "cdrs"]
    assert broken.verdicts["gvs"] == "below the healthy range 0.40-0.70"
    assert "below the panel's threshold 0.55 (config/health/panel.yaml)" in broken.reason
    assert "GVS 0.000 (0.40-0.70)" in broken.reason and "CDRS 0.100 (0.40-0.60)" in broken.reason
    assert aggregate(components(dcs=0.9), cfg).verdicts["dcs"] == "above the healthy range 0.30-0.40"


def test_a_missing_or_broken_calibration_says_how_to_write_it(project):
    cfg = calibrated(project)
    (project / "config" / "health" / "panel.yaml").unlink()
    with pytest.raises(CalibrationError, match="health_panel.py calibrate"):
        resolve(cfg)
    with pytest.raises(CalibrationError, match="weights must give each"):
        resolve(calibrated(project, data={**PANEL, "weights": {"dcs": 1.0}}))
    with pytest.raises(CalibrationError, match="has no threshold"):
        resolve(calibrated(project, data={k: v for k, v in PANEL.items() if k != "threshold"}))


def test_a_new_calibration_is_a_new_version_of_every_days_health_index(project):
    cfg = calibrated(project)
    files = STAGES_BY_NAME["reward_health_index"].files
    before = files(cfg, "2026-11-20")
    calibrated(project, data={**PANEL, "threshold": 0.6})
    assert files(cfg, "2026-11-20") != before and before["calibration"] is not None


def test_with_the_base_live_the_service_says_which_adapter_was_refused_and_why(tmp_path):
    state = LiveState(tmp_path)
    assert "no adapter has passed the gate yet" in why_base(tmp_path)
    gate = {
        "rhi_components": {
            "gvs": {"value": 0.05, "verdict": "below the healthy range 0.40-0.70"},
            "dcs": {"value": 0.35, "verdict": "in"},
        },
        "rhi_below_range": ["gvs"],
    }
    adapter = tmp_path / "lora_adapter" / "2026-11-20" / "abc"
    adapter.mkdir(parents=True)
    state.refuse("abc", adapter, None, gate=gate, reason="RHI 0.410 below the panel's threshold 0.55", by="test")
    said = why_base(tmp_path)
    assert "the gate refused abc" in said and "RHI 0.410 below the panel's threshold 0.55" in said
    assert "GVS 0.050 (below the healthy range 0.40-0.70)" in said and "DCS" not in said
    assert "hominem serve --adapter latest" in said and "hominem live promote abc" in said
    assert gate_lines(tmp_path) == []  # a refusal without sampled checks: nothing more to say
    # the refusal's sampled checks, each with its figure, +- and verdict, and the one that refused by how much
    from hominem_pipeline.core.evaluation.noise import NoiseRule, paired_check

    rule = NoiseRule(0.0, 0.98, 0.8)
    recall = paired_check("recall", "recall", [0.0] * 30 + [1.0] * 10, [1.0] * 40, rule, "the base")
    facts = paired_check("facts", "facts", [1.0, 0.0] * 20, [1.0, 0.0] * 20, rule, "the base")
    checks = {"recall": recall.as_dict(), "facts": facts.as_dict()}
    state.refuse("def", adapter, None, gate={"checks": checks}, reason=recall.reason(), by="test")
    said, lines = why_base(tmp_path), gate_lines(tmp_path)
    assert "the gate refused def" in said and "beyond it" in said and "-75.0% +- " in said
    assert lines[0].startswith("the gate's checks for def") and len(lines) == 3
    assert lines[1].strip() == recall.line() and lines[1].endswith("refused") and lines[2].endswith("passed")


def test_the_fast_loops_thresholds_are_the_configs_where_set_else_the_panels(project):
    cfg = calibrated(project, online={"skip_below": None, "rollback_below": None, "freeze_below": None})
    limits = fast_loop(cfg)
    assert {k: t.value for k, t in limits.items()} == PANEL["fast_loop"]["thresholds"]
    assert limits["skip_below"].text == "the panel's skip_below 0.45 (config/health/panel.yaml)"
    # one set in the config wins over the panel's, and is named as the config's
    mixed = fast_loop(calibrated(project, online={"skip_below": 0.5, "rollback_below": None, "freeze_below": None}))
    assert mixed["skip_below"].text == "online.skip_below 0.5" and mixed["rollback_below"].value == 0.35
    # out of order once the two are put together
    with pytest.raises(
        CalibrationError, match="freeze_below <= rollback_below <= skip_below: the panel's freeze_below 0.25"
    ):
        fast_loop(calibrated(project, online={"skip_below": 0.2, "rollback_below": None, "freeze_below": None}))
    # left null with no calibration to fill it
    bare = {k: v for k, v in PANEL.items() if k != "fast_loop"}
    with pytest.raises(CalibrationError, match="online.skip_below is null and config/health/panel.yaml gives none"):
        fast_loop(
            calibrated(project, data=bare, online={"skip_below": None, "rollback_below": None, "freeze_below": None})
        )


def test_a_component_below_its_floor_refuses_though_the_index_passes(project):
    cfg = calibrated(project, data={**PANEL, "floors": {"dcs": 0.3}})
    fine = aggregate(components(dcs=0.31), cfg)
    assert fine.deployable, fine.reason
    low = aggregate(components(dcs=0.25, mss=0.9, cdrs=0.6, lrps=0.95), cfg)
    assert low.rhi >= 0.55 and not low.deployable
    assert low.reason == (
        f"RHI {low.rhi:.3f} passes the panel's threshold 0.55 (config/health/panel.yaml), but DCS 0.250 "
        "below the panel's "
        "floor 0.3 (its healthy range 0.30-0.40)"
    )
    assert low.verdicts[
        "dcs"
    ] == "below the panel's floor 0.3 (healthy range 0.30-0.40): it refuses" and low.below_range == ["dcs"]
    # below both: the threshold's reason, then the floor's
    both = aggregate(components(dcs=0.1, gvs=0.0, mss=0.3), cfg)
    assert both.reason.startswith(f"RHI {both.rhi:.3f} below the panel's threshold 0.55") and both.reason.endswith(
        "DCS 0.100 below the panel's floor 0.3 (its healthy range 0.30-0.40)"
    )
    with pytest.raises(CalibrationError, match="floors must map components"):
        resolve(calibrated(project, data={**PANEL, "floors": {"warmth": 0.3}}))
    # a threshold of one's own (health.deploy_threshold) holds the index to it alone
    own = calibrated(project, data={**PANEL, "floors": {"dcs": 0.3}}, deploy_threshold=0.0)
    assert aggregate(components(dcs=0.25), own).deployable


def test_the_shipped_calibration_is_what_the_kept_panel_gives(tmp_path):
    """config/health/calibration.yaml is `health_panel.py calibrate` on the measures kept in
    benchmarks/results/health_panel/: a change to either without the other fails here."""
    import subprocess
    import sys

    from hominem_pipeline_tests.conftest import REPO

    out = tmp_path / "calibration.yaml"
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "health_panel.py"), "calibrate", "--out", str(out)],
        check=True,
        capture_output=True,
        cwd=REPO,
        timeout=300,
    )
    got, shipped = (
        yaml.safe_load(out.read_text()),
        yaml.safe_load((REPO / "config" / "health" / "calibration.yaml").read_text()),
    )
    for key in ("references", "weights", "threshold", "floors", "healthy", "broken", "auc", "gate", "fast_loop"):
        assert got[key] == shipped[key], key
