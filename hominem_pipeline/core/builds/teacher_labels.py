"""The `teacher_labels` stage: the teacher's reward label of each candidate, verified; refused labels go to quarantine."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd

from hominem_pipeline.core.builds.common import teacher_accounting
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.schema import Trajectory, vector_matrix
from hominem_pipeline.core.stage import CheckOutcome, StageContext, StageOutput

log = logging.getLogger(__name__)


LABEL_COLUMNS = ["trajectory_id", "prompt_id", "vector", "scalar", "reward_intensity", "safety_score", "rationale", "prompt", "response", "category", "style"]


def build_teacher_labels(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.teacher.base import TeacherOutput
    from hominem_pipeline.core.teacher.factory import build_teacher
    from hominem_pipeline.core.teacher.labeling import (
        QUARANTINE_COLUMNS,
        quarantine_row,
        verify_labels,
    )

    trajectories_frame = pd.read_parquet(ctx.one("teacher_trajectories").file("trajectories.parquet"))
    trajectories = [Trajectory(**row) for row in trajectories_frame.to_dict(orient="records")]
    # An empty response has nothing to judge: it is quarantined without spending a rating on it.
    empty = [t for t in trajectories if not t.response.strip()]
    to_rate = [t for t in trajectories if t.response.strip()]
    teacher = build_teacher(ctx.cfg)
    started = time.monotonic()
    try:
        result = teacher.rate(to_rate) if to_rate else TeacherOutput([])
    finally:
        teacher.close()
    seconds = time.monotonic() - started
    dims = ctx.cfg.dimension_names
    by_id = {t.trajectory_id: t for t in to_rate}
    rows = [
        label.model_dump() | {"prompt": t.prompt, "response": t.response, "category": t.category, "style": t.style}
        for label in result.items
        for t in [by_id[label.trajectory_id]]
    ]
    frame, quarantine = verify_labels(pd.DataFrame(rows, columns=LABEL_COLUMNS), dims)
    extra = [quarantine_row(t.model_dump(), "empty_response", "empty response, not rated") for t in empty] + result.rejected
    if extra:
        quarantine = pd.concat([quarantine, pd.DataFrame(extra, columns=QUARANTINE_COLUMNS)], ignore_index=True)
    if frame.empty:
        raise ValueError(
            f"the verifier rejected all {len(quarantine)} labels of {ctx.partition} "
            f"({quarantine['check'].value_counts().to_dict()}); see data/quarantine/teacher_labels/{ctx.partition}/"
        )
    frame.to_parquet(ctx.out_dir / "labels.parquet", index=False)
    vec = vector_matrix(frame["vector"], dims)
    total = len(frame) + len(quarantine)
    usage_metrics, usage_metadata = teacher_accounting(result.usage, result.failed, ctx.out_dir)
    metrics: dict[str, float | None] = {
        "labels": len(frame),
        "quarantined": len(quarantine),
        "failure_rate": len(quarantine) / total,
        "labeling_seconds": seconds,
        **usage_metrics,
    }
    for j, d in enumerate(dims):
        metrics[f"mean_{d}"] = float(vec[:, j].mean())
        metrics[f"std_{d}"] = float(vec[:, j].std())
    for key in ("scalar", "reward_intensity", "safety_score"):
        metrics[f"mean_{key}"] = float(frame[key].mean())
        metrics[f"std_{key}"] = float(frame[key].std(ddof=0))
    return StageOutput(
        metrics=metrics,
        metadata={
            "rows": len(frame),
            "teacher": teacher.describe(),
            "scalar_by_style": frame.groupby("style")["scalar"].mean().round(4).to_dict(),
            "quarantined_by_check": quarantine["check"].value_counts().to_dict() if len(quarantine) else {},
            **usage_metadata,
        },
        table="labels.parquet",
        quarantine=quarantine,
        complete=not result.failed,
    )


def labels_pass_verifier(metrics: dict[str, Any], cfg: HominemConfig, folder: Path | None = None) -> CheckOutcome:
    """Blocking: too many quarantined labels stop the run before anything trains on the partition."""
    from hominem_pipeline.core.teacher.labeling import verifier_verdict

    kept, quarantined, missing = int(metrics["labels"]), int(metrics.get("quarantined") or 0), int(metrics.get("missing") or 0)
    passed, description = verifier_verdict(kept, quarantined, cfg.verifier.max_failure_rate, missing)
    return CheckOutcome(passed, description, {"kept": kept, "quarantined": quarantined, "missing": missing, "max_failure_rate": cfg.verifier.max_failure_rate})
