"""The `evaluation` stage: base against base+adapter on the held-out prompts, and the memory probe."""

from __future__ import annotations

import logging

import pandas as pd

from hominem_pipeline.core.builds.common import prompts_of, write_json
from hominem_pipeline.core.builds.memory_files import memory_paths
from hominem_pipeline.core.pipeline.stage import StageContext, StageOutput

log = logging.getLogger(__name__)

MEMORY_ANSWERS = (
    "memory_answers.parquet"  # in an evaluation version: prompt, base, adapter (the memory probe's replies)
)
# in an evaluation version: pair_id, margin (the adapter's implicit reward on each people's held-out pair)
PEOPLE_MARGINS = "people_margins.parquet"


def build_evaluation(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.evaluation.compare import (
        EvaluationProbes,
        evaluate_adapter,
        plot_dimension_deltas,
    )
    from hominem_pipeline.core.evaluation.fixtures import base_logp_cache, load_fixtures
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.lm.device import resolve_device
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.reward.feature_cache import (
        FEATURE_CACHE,
        SHIPPED_FEATURES,
    )
    from hominem_pipeline.core.reward.model import project_reward_model

    cfg = ctx.cfg
    prompts = prompts_of(pd.read_parquet(ctx.one("prompts").file("prompts.parquet")), "eval")
    device = resolve_device(ctx.cfg.runtime.device)
    rm = project_reward_model(ctx.one("reward_model").path, ctx.cfg)
    table, summary = evaluate_adapter(
        prompts,
        student_path=student_path(ctx.cfg),
        adapter_path=ctx.one("lora_adapter").path,
        reward_model=rm,
        cfg=ctx.cfg.evaluation,
        seed=ctx.seed,
        probes=EvaluationProbes(
            memory=read_memory_rows(memory_paths(ctx.cfg)) if ctx.cfg.evaluation.memory_probe else None,
            fixtures=None
            if cfg.fixtures.file is None
            else load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names),
            people=people_pairs(cfg, "held_out"),
        ),
        base_logps=base_logp_cache(student_path(cfg), cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES)),
        device=device,
    )
    table.to_parquet(ctx.out_dir / "generations.parquet", index=False)
    # the memory probe's questions and both sides' replies (the gate reuses them with the held-out prompts' replies)
    pd.DataFrame(summary.pop("memory_answers", []), columns=["prompt", "base", "adapter"]).to_parquet(
        ctx.out_dir / MEMORY_ANSWERS, index=False
    )
    margins = summary.pop("people_margins", {})
    pd.DataFrame({"pair_id": list(margins), "margin": list(margins.values())}).to_parquet(
        ctx.out_dir / PEOPLE_MARGINS, index=False
    )
    write_json(ctx.out_dir / "summary.json", summary)
    plot_dimension_deltas(
        summary, rm.dimensions, ctx.out_dir / "dimension_deltas.png", f"adapter vs base, {ctx.partition}"
    )
    metrics = {k: v for k, v in summary.items() if v is None or isinstance(v, (int, float))}
    metrics.update({f"memory_{k}": v for k, v in summary.get("memory_probe", {}).items() if isinstance(v, int)})
    return StageOutput(
        metrics=metrics,
        metadata={
            "rows": len(table),
            **(
                {
                    "people's held-out pairs": f"implicit reward orders {summary['people_accuracy']:.1%} +- "
                    f"{summary['people_standard_error']:.1%} "
                    f"of {summary['people_pairs']} as people did (base 50%)"
                }
                if "people_accuracy" in summary
                else {}
            ),
            "win_rate_by_category": summary["win_rate_by_category"],
            "memory_probe": summary.get("memory_probe"),
            "fixtures_moved_wrong": [
                f"[{x['tag']}] {x['prompt']}" for x in summary.get("fixtures", {}).get("failures", [])
            ][:20],
        },
        table="generations.parquet",
        mlflow_artifacts=["summary.json", "dimension_deltas.png"],
    )
