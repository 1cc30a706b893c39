"""The `probes` stage: the probing suite (`evaluation.suite`) on the day's reward model, its trade-off
choices read against the newest earlier version's, its manifold map drawn from the day's teacher
candidates and people's pairs."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.artifacts import data_label
from hominem_pipeline.core.pipeline.stage import CheckOutcome, StageContext, StageOutput

log = logging.getLogger(__name__)


def probe_files_digest(cfg: HominemConfig, partition: str) -> Any:
    """The probe files' and the contrast fixtures' digests (part of the stage's version)."""
    from hominem_pipeline.core.evaluation.fixtures import fixtures_file_digest
    from hominem_pipeline.core.pipeline.artifacts import optional_file_digest

    p = cfg.probes
    return {
        "tradeoffs": optional_file_digest(p.tradeoffs and cfg.path(p.tradeoffs)),
        "counterfactuals": optional_file_digest(p.counterfactuals and cfg.path(p.counterfactuals)),
        "fixtures": fixtures_file_digest(cfg),
    }


def build_probes(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.builds.human_feedback import PAIRS
    from hominem_pipeline.core.evaluation.suite import (
        ADVERSARIAL,
        ATTRIBUTION,
        MAP_PLOT,
        SUITE_PLOT,
        SUMMARY,
        TRADEOFFS,
        metrics,
        run_suite,
    )
    from hominem_pipeline.core.reward.model import project_reward_model

    refs = sorted(ctx.inputs["reward_model"], key=lambda r: r.partition)
    current = next(r for r in refs if r.partition == ctx.partition)
    earlier = [r for r in refs if r.partition < ctx.partition]
    model = project_reward_model(current.path, ctx.cfg)
    previous = project_reward_model(earlier[-1].path, ctx.cfg) if earlier else None
    labels = pd.read_parquet(
        ctx.one("teacher_labels").file("labels.parquet"), columns=["prompt", "response", "category"]
    )
    people = [
        pd.read_parquet(r.file(PAIRS), columns=["prompt", "chosen", "rejected"])
        for r in ctx.inputs.get("human_feedback", [])
        if r.file(PAIRS).is_file()
    ]
    # the project's seed, not the day's: the same contrast pairs every day, so flip rates compare across days (and
    # their rewrites are cached)
    summary = run_suite(
        model,
        ctx.cfg,
        ctx.cfg.project.seed,
        ctx.out_dir,
        previous=previous,
        replies=labels,
        people=pd.concat(people, ignore_index=True) if people else None,
        label=data_label(ctx.cfg.data_dir, current.path),
        previous_label=data_label(ctx.cfg.data_dir, earlier[-1].path) if earlier else None,
    )
    figures = metrics(summary)
    log.info("probes %s: %s", ctx.partition, ", ".join(f"{k} {v:.3g}" for k, v in figures.items() if v is not None))
    made = [
        f for f in (SUMMARY, TRADEOFFS, ADVERSARIAL, ATTRIBUTION, MAP_PLOT, SUITE_PLOT) if (ctx.out_dir / f).is_file()
    ]
    cases = sum(
        (summary.get(k) or {}).get(n, 0)
        for k, n in (("tradeoffs", "scenarios"), ("counterfactuals", "queries"), ("adversarial", "pairs"))
    )
    return StageOutput(
        metrics=figures,
        metadata={"rows": cases, "reward_model": summary["reward_model"], "previous": summary["previous"]},
        mlflow_artifacts=made,
    )


def probe_consistency_check(metrics: dict[str, Any], cfg: HominemConfig, folder: Path) -> CheckOutcome:
    """The `probe_consistency` check: no trade-off regression against the version before, and no
    perturbation flipping more than probes.max_flip_rate of the contrast pairs."""
    from hominem_pipeline.core.evaluation.suite import SUMMARY, verdict

    summary = json.loads((folder / SUMMARY).read_text())
    passed, description = verdict(summary, cfg.probes.max_flip_rate)
    meta = {k: v for k, v in metrics.items() if k.startswith("probe_") and v is not None}
    return CheckOutcome(
        passed,
        description,
        {
            **meta,
            "max_flip_rate": cfg.probes.max_flip_rate,
            "regressions": (summary.get("tradeoffs") or {}).get("regressions", []),
        },
    )
