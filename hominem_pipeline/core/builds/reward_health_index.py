"""The `reward_health_index` stage: the Reward Health Index of the adapter and whether it may go live."""

from __future__ import annotations

import json
import logging

import pandas as pd

from hominem_pipeline.core.builds.common import write_json
from hominem_pipeline.core.pipeline.stage import StageContext, StageOutput

log = logging.getLogger(__name__)


def build_reward_health_index(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.evaluation.health import compute_health, plot_health
    from hominem_pipeline.core.lm.device import resolve_device
    from hominem_pipeline.core.reward.model import project_reward_model

    generations = pd.read_parquet(ctx.one("evaluation").file("generations.parquet"))
    adapter = ctx.one("lora_adapter")
    history = json.loads(adapter.file("training_history.json").read_text())
    rm = project_reward_model(ctx.one("reward_model").path, ctx.cfg)
    report = compute_health(
        rm,
        generations,
        history["grad_norms"],
        ctx.cfg,
        ctx.seed,
        mode=adapter.manifest.get("metadata", {}).get("mode"),
        adapter=adapter.path,
        device=resolve_device(ctx.cfg.runtime.device),
    )
    for name, comp in report.components.items():
        if report.verdicts.get(name):
            log.info(
                "%s %s: %s", name.upper(), "n/a" if comp.value is None else f"{comp.value:.3f}", report.verdicts[name]
            )
    write_json(ctx.out_dir / "health.json", report.as_dict())
    plot_health(report, ctx.out_dir / "health.png", f"Reward Health Index, {ctx.partition}")
    metrics: dict[str, float | None] = {
        "rhi": report.rhi,
        "deployable": float(report.deployable),
        "partial": float(report.partial),
    }
    for name, comp in report.components.items():
        metrics[name] = comp.value
    return StageOutput(
        metrics=metrics,
        metadata={
            "rows": 1,
            "missing": report.missing,
            "reason": report.reason,
            "how": {k: c.how for k, c in report.components.items()},
            "threshold": report.threshold,
            "threshold_from": report.threshold_name,
            "against_the_panel": report.verdicts,
            "below_healthy_range": report.below_range,
            "calibration": report.calibration,
            "calibration_digest": report.calibration_digest,
        },
        mlflow_artifacts=["health.json", "health.png"],
    )
