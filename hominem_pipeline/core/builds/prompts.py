"""The `prompts` stage: seed prompts sampled for the day (stratified by category) and generated ones, plus the
held-out evaluation prompts."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from hominem_pipeline.core.builds.common import teacher_accounting
from hominem_pipeline.core.common.schema import Prompt
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.artifacts import file_sha256
from hominem_pipeline.core.pipeline.stage import StageContext, StageOutput

log = logging.getLogger(__name__)


def build_prompts(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.teacher.prompts import (
        load_seed_prompts,
        partition_prompts,
    )

    cfg = ctx.cfg
    seeds = load_seed_prompts(cfg.path(cfg.prompts.seed_file), cfg.prompts.categories)
    train, evaluation = partition_prompts(cfg, seeds, ctx.seed)
    generated, gen_metrics, gen_metadata, failed = _generated_prompts(cfg, train, seeds, ctx.seed)
    missing_metrics, missing_metadata = teacher_accounting(
        {}, failed, ctx.out_dir
    )  # a failed call leaves the version partial: filled next run
    train = train + generated
    rows = [p.model_dump() | {"split": "train"} for p in train] + [
        p.model_dump() | {"split": "eval"} for p in evaluation
    ]
    frame = pd.DataFrame(rows)
    frame.to_parquet(ctx.out_dir / "prompts.parquet", index=False)
    by_cat = frame[frame.split == "train"].groupby("category").size().to_dict()
    by_source = frame[frame.split == "train"].groupby("source").size().to_dict()
    return StageOutput(
        metrics={"train_prompts": len(train), "eval_prompts": len(evaluation), **gen_metrics, **missing_metrics},
        metadata={
            "rows": len(frame),
            "train_by_category": by_cat,
            "train_by_source": by_source,
            **gen_metadata,
            **missing_metadata,
        },
        table="prompts.parquet",
        complete=not failed,
    )


def _generated_prompts(
    cfg: HominemConfig, base: list[Prompt], known: list[Prompt], seed: int
) -> tuple[list[Prompt], dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The generators' prompts for the day, with their counts (proposed, kept, dropped and why), and the
    teacher's writing calls that failed after every retry."""
    from hominem_pipeline.core.lm.models import encoder_path
    from hominem_pipeline.core.teacher.base import WriteRequest
    from hominem_pipeline.core.teacher.factory import build_teacher
    from hominem_pipeline.core.teacher.prompt_generators import (
        generate_prompts,
        sentence_embedder,
    )

    g = cfg.prompts.generators
    if not g.enabled:
        return [], {}, {}, []
    teacher = build_teacher(cfg) if g.uses_teacher else None
    tokens = {"evolutionary": g.evolutionary.max_new_tokens, "freeform": g.freeform.max_new_tokens}

    usage: dict[str, float | None] = {}
    failed: list[dict[str, Any]] = []

    def write(plans):
        requests = [
            WriteRequest(
                key=f"{p.source}-{i}",
                instruction=p.instruction,
                max_new_tokens=tokens[p.source],
                temperature=0.9,
                seed=seed + i,
            )
            for i, p in enumerate(plans)
        ]
        written = teacher.write(requests)
        usage.update(written.usage)
        failed.extend(written.failed)
        return written.items

    try:
        result = generate_prompts(
            cfg, base, known, seed, write=write if teacher else None, embed=sentence_embedder(encoder_path(cfg))
        )
    finally:
        if teacher is not None:
            teacher.close()
    kept = pd.Series([p.source for p in result.prompts], dtype=str).value_counts().to_dict()
    metrics: dict[str, Any] = {
        "generated_prompts": len(result.prompts),
        "dropped_generated_prompts": len(result.dropped),
    }
    metrics.update({f"generated_{k}": kept.get(k, 0) for k in result.proposed})
    metrics.update({f"teacher_{k}": v for k, v in usage.items()})
    if result.dropped:
        log.info(
            "prompt generators: %d of %d proposed prompts dropped (near-duplicates or unusable)",
            len(result.dropped),
            sum(result.proposed.values()),
        )
    return (
        result.prompts,
        metrics,
        {"generators_proposed": result.proposed, "generators_dropped": result.dropped[:20]},
        failed,
    )


def prompt_files_digest(cfg: HominemConfig, partition: str) -> dict[str, Any]:
    """The files the prompts are read from: the seed prompts, and the templates when they are used."""
    out: dict[str, Any] = {"seeds": file_sha256(cfg.path(cfg.prompts.seed_file))}
    if cfg.prompts.generators.templated.count:
        out["templates"] = file_sha256(cfg.path(cfg.prompts.generators.templated.file))
    return out
