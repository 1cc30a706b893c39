"""The `evaluation` stage: base against base+adapter on the held-out prompts, and the memory probe."""

from __future__ import annotations

import logging
from pathlib import Path

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
# in an evaluation version: key, check, id, base, adapter (both sides' replies to the reply checks' items)
REPLY_CHECK_REPLIES = "reply_check_replies.parquet"


def reply_checks_digest(cfg) -> dict[str, str | None]:
    """The reply checks' set files' digests: a changed set evaluates every day again."""
    from hominem_pipeline.core.config.evaluation import REPLY_CHECKS
    from hominem_pipeline.core.pipeline.artifacts import optional_file_digest

    rc = cfg.evaluation.reply_checks
    return {c: optional_file_digest(cfg.path(getattr(rc, c))) if getattr(rc, c) else None for c in REPLY_CHECKS}


def reply_check_probes(cfg) -> dict:
    """The reply checks' part of the evaluation's probes: the sets, the service's view of a conversation
    (serving.recall_facts) and the rule's settings."""
    from hominem_pipeline.core.evaluation.reply_checks import load_reply_checks
    from hominem_pipeline.core.online.facts import with_stated_facts

    sets = load_reply_checks(cfg)
    if sets is None:
        return {}
    return {
        "reply_checks": sets,
        "view": with_stated_facts if cfg.serving.recall_facts else None,
        "health": cfg.health,
    }


def _write_answers(ctx: StageContext, summary: dict, table: pd.DataFrame) -> None:
    """The memory probe's and the reply checks' replies of both sides, and the people's margins, beside the
    evaluation (the gate reads them back); the base's replies (to the held-out prompts, the memory questions and the
    reply checks' items) also go to the reply cache, for the next day and the gate."""
    from hominem_pipeline.core.online.reply_cache import reply_cache

    memory = pd.DataFrame(summary.pop("memory_answers", []), columns=["prompt", "base", "adapter"])
    memory.to_parquet(ctx.out_dir / MEMORY_ANSWERS, index=False)
    base_answers = dict(zip(table["prompt"], table["base_response"])) | dict(zip(memory["prompt"], memory["base"]))
    replies = pd.DataFrame(summary.pop("reply_check_replies", []), columns=["key", "check", "id", "base", "adapter"])
    replies.to_parquet(ctx.out_dir / REPLY_CHECK_REPLIES, index=False)
    reply_cache(ctx.cfg).put(None, dict(zip(replies["key"], replies["base"])) | base_answers)
    margins = summary.pop("people_margins", {})
    pd.DataFrame({"pair_id": list(margins), "margin": list(margins.values())}).to_parquet(
        ctx.out_dir / PEOPLE_MARGINS, index=False
    )


def evaluation_replies(folder: Path) -> pd.DataFrame:
    """Both sides' replies an evaluation version (its folder) wrote, keyed as the gate's reply cache keys them:
    prompt (the held-out prompt, the memory question, or the reply check item's key), base, adapter."""
    held = pd.read_parquet(folder / "generations.parquet", columns=["prompt", "base_response", "adapter_response"])
    frames = [held.rename(columns={"base_response": "base", "adapter_response": "adapter"})]
    if (folder / MEMORY_ANSWERS).is_file():
        frames.append(pd.read_parquet(folder / MEMORY_ANSWERS))
    if (folder / REPLY_CHECK_REPLIES).is_file():
        checks = pd.read_parquet(folder / REPLY_CHECK_REPLIES, columns=["key", "base", "adapter"])
        frames.append(checks.rename(columns={"key": "prompt"}))
    return pd.concat(frames, ignore_index=True)


def _metrics(summary: dict) -> dict:
    metrics = {k: v for k, v in summary.items() if v is None or isinstance(v, (int, float))}
    for name, check in summary.get("reply_checks", {}).get("checks", {}).items():
        metrics |= {f"reply_{name}": check["candidate"], f"reply_{name}_base": check["reference"]}
        metrics[f"reply_{name}_se"] = check["standard_error"]
    metrics.update({f"memory_{k}": v for k, v in summary.get("memory_probe", {}).items() if isinstance(v, int)})
    return metrics


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
    from hominem_pipeline.core.online.reply_cache import reply_cache
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
            **reply_check_probes(cfg),
        ),
        # the base's replies known from earlier days (the gate's reply cache under the base, the shipped copy with
        # it): the same base, sets and decoding give the same replies
        base_replies=reply_cache(cfg).get(None),
        base_logps=base_logp_cache(student_path(cfg), cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES)),
        device=device,
    )
    table.to_parquet(ctx.out_dir / "generations.parquet", index=False)
    _write_answers(ctx, summary, table)
    write_json(ctx.out_dir / "summary.json", summary)
    plot_dimension_deltas(
        summary, rm.dimensions, ctx.out_dir / "dimension_deltas.png", f"adapter vs base, {ctx.partition}"
    )
    metrics = _metrics(summary)
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
            **reply_check_lines(summary.get("reply_checks")),
            "win_rate_by_category": summary["win_rate_by_category"],
            "memory_probe": summary.get("memory_probe"),
            "fixtures_moved_wrong": [
                f"[{x['tag']}] {x['prompt']}" for x in summary.get("fixtures", {}).get("failures", [])
            ][:20],
        },
        table="generations.parquet",
        mlflow_artifacts=["summary.json", "dimension_deltas.png"],
    )


def reply_check_lines(reply_checks: dict | None) -> dict[str, str]:
    """Each reply check in one line (figure +- SE against the base, the rule, the verdict), for the metadata."""
    if not reply_checks:
        return {}
    from hominem_pipeline.core.evaluation.noise import PairedCheck

    return {f"reply check: {n}": PairedCheck(**c).line() for n, c in reply_checks["checks"].items()}
