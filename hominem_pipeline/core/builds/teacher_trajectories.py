"""The `teacher_trajectories` stage: the teacher's candidate replies, several per prompt."""

from __future__ import annotations

import logging
import time

import pandas as pd

from hominem_pipeline.core.builds.common import prompts_of, teacher_accounting
from hominem_pipeline.core.pipeline.stage import StageContext, StageOutput

log = logging.getLogger(__name__)


def build_teacher_trajectories(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.teacher.factory import build_teacher

    prompts = prompts_of(pd.read_parquet(ctx.one("prompts").file("prompts.parquet")), "train")
    teacher = build_teacher(ctx.cfg)
    started = time.monotonic()
    try:
        result = teacher.sample(prompts, ctx.cfg.teacher.candidate_styles(), ctx.cfg.teacher.max_new_tokens, ctx.seed)
    finally:
        teacher.close()
    seconds = time.monotonic() - started
    if not result.items:
        raise RuntimeError(
            f"the teacher produced no trajectory for {ctx.partition}: {len(result.failed)} calls failed, "
            f"e.g. {result.failed[:1]}"
        )
    frame = pd.DataFrame([t.model_dump() for t in result.items])
    frame.to_parquet(ctx.out_dir / "trajectories.parquet", index=False)
    tokens = int(frame["new_tokens"].sum())
    usage_metrics, usage_metadata = teacher_accounting(result.usage, result.failed, ctx.out_dir)
    return StageOutput(
        metrics={
            "trajectories": len(frame),
            "generation_seconds": seconds,
            "tokens_per_second": tokens / seconds if seconds > 0 else None,
            "mean_new_tokens": float(frame["new_tokens"].mean()),
            "unfinished_share": float((~frame["finished"]).mean()),
            "empty_responses": int((frame["response"].str.strip() == "").sum()),
            **usage_metrics,
        },
        metadata={
            "rows": len(frame),
            "teacher": teacher.describe(),
            "styles": frame.groupby("style").size().to_dict(),
            **usage_metadata,
        },
        table="trajectories.parquet",
        complete=not result.failed,
    )
