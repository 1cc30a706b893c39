"""The `teacher_labels` stage: the teacher's reward label of each candidate, verified; refused labels go to
quarantine."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from hominem_pipeline.core.builds.common import teacher_accounting
from hominem_pipeline.core.common.schema import Trajectory, vector_matrix
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.stage import CheckOutcome, StageContext, StageOutput

log = logging.getLogger(__name__)


LABEL_COLUMNS = [
    "trajectory_id",
    "prompt_id",
    "vector",
    "scalar",
    "reward_intensity",
    "safety_score",
    "rationale",
    "prompt",
    "response",
    "category",
    "style",
    "turn_id",
    # turn_id: the served reply's turn in the interaction log (`labeling.served_turns`); null for the teacher's
    # candidates
]


def served_day(partition: str) -> str:
    """The day whose served replies the labels of `partition` rate: the day before (its log is complete)."""
    import datetime as dt

    return (dt.date.fromisoformat(partition) - dt.timedelta(days=1)).isoformat()


def served_log_digest(cfg: HominemConfig, partition: str) -> str | None:
    """The day before's interaction log by content, while `labeling.served_turns` rates its replies (part of the
    labels' version)."""
    from hominem_pipeline.core.builds.human_feedback import log_digest

    return log_digest(cfg, served_day(partition)) if cfg.labeling.served_turns > 0 else None


def served_replies(cfg: HominemConfig, partition: str) -> list[Trajectory]:
    """`labeling.served_turns` of the replies the student served the day before, as trajectories to rate."""
    from hominem_pipeline.core.builds.human_feedback import log_file
    from hominem_pipeline.core.online.feedback import served_trajectories
    from hominem_pipeline.core.online.log import read_events

    path = log_file(cfg, served_day(partition))
    if cfg.labeling.served_turns <= 0 or not path.exists():
        return []
    served = served_trajectories(list(read_events(path)), cfg.labeling.served_turns)
    if cfg.labeling.redact_served and teacher_leaves_machine(cfg):
        from hominem_pipeline.core.online.events import redact

        served = [t.model_copy(update={"prompt": redact(t.prompt), "response": redact(t.response)}) for t in served]
    return served


def teacher_leaves_machine(cfg: HominemConfig) -> bool:
    """Whether what the teacher reads leaves this machine: a hosted provider, or a server beyond loopback."""
    from urllib.parse import urlparse

    provider, base_url = cfg.teacher.provider, cfg.teacher.api.base_url
    if provider == "local":
        return False
    if base_url is None:
        return True  # the provider's own servers
    return urlparse(base_url).hostname not in ("127.0.0.1", "::1", "localhost")


@dataclass
class _Rating:
    to_rate: list[Trajectory]  # those with a reply
    empty: list[Trajectory]  # those without: nothing to judge, not rated
    served: list[Trajectory]  # of all, the student's replies served the day before
    result: Any  # the teacher's output
    seconds: float
    teacher: str  # the teacher, described


def _rated(ctx: StageContext) -> _Rating:
    """The day's candidates and the student's served replies of the day before (the reward model learns what it
    says), rated by the teacher; an empty reply has nothing to judge and is not rated."""
    from hominem_pipeline.core.teacher.base import TeacherOutput
    from hominem_pipeline.core.teacher.factory import build_teacher

    frame = pd.read_parquet(ctx.one("teacher_trajectories").file("trajectories.parquet"))
    trajectories = [Trajectory(**row) for row in frame.to_dict(orient="records")]
    served = served_replies(ctx.cfg, ctx.partition)
    trajectories += served
    empty = [t for t in trajectories if not t.response.strip()]
    to_rate = [t for t in trajectories if t.response.strip()]
    teacher = build_teacher(ctx.cfg)
    started = time.monotonic()
    try:
        result = teacher.rate(to_rate) if to_rate else TeacherOutput([])
    finally:
        teacher.close()
    return _Rating(to_rate, empty, served, result, time.monotonic() - started, teacher.describe())


def _verified(ctx: StageContext, rating: _Rating) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """The labels that pass the verifier (with the student's reply_logp where `verifier.min_reply_logp` is set), the
    quarantined ones (the verifier's, the empty replies, the teacher's rejected outputs), and the candidates flagged
    degenerate (kept, never the chosen reply of a pair)."""
    from hominem_pipeline.core.teacher.labeling import (
        QUARANTINE_COLUMNS,
        REPLY_LOGP,
        degenerate_rows,
        quarantine_row,
        verify_labels,
    )

    result = rating.result
    by_id = {t.trajectory_id: t for t in rating.to_rate}
    turn_of = {t.trajectory_id: t.trajectory_id.removeprefix("turn-") for t in rating.served}
    rows = []
    for label in result.items:
        t = by_id[label.trajectory_id]
        turn = turn_of.get(t.trajectory_id)
        rows.append(
            label.model_dump()
            | {"prompt": t.prompt, "response": t.response, "category": t.category, "style": t.style, "turn_id": turn}
        )
    frame, quarantine = verify_labels(pd.DataFrame(rows, columns=LABEL_COLUMNS), ctx.cfg.dimension_names)
    extra = [quarantine_row(t.model_dump(), "empty_response", "empty response, not rated") for t in rating.empty]
    extra += result.rejected
    if extra:
        quarantine = pd.concat([quarantine, pd.DataFrame(extra, columns=QUARANTINE_COLUMNS)], ignore_index=True)
    if frame.empty:
        raise ValueError(
            f"the verifier rejected all {len(quarantine)} labels of {ctx.partition} "
            f"({quarantine['check'].value_counts().to_dict()}); see data/quarantine/teacher_labels/{ctx.partition}/"
        )
    degenerate: dict[str, str] = {}
    if ctx.cfg.verifier.min_reply_logp is not None:
        frame[REPLY_LOGP] = student_reply_logps(ctx.cfg, list(frame["prompt"]), list(frame["response"]))
        degenerate = degenerate_rows(frame, ctx.cfg.verifier.min_reply_logp)
        if degenerate:
            log.info(
                "verifier: %d of %d candidates flagged degenerate (kept, never the chosen reply of a pair); first: %s",
                len(degenerate),
                len(frame),
                next(iter(degenerate.values())),
            )
    return frame, quarantine, degenerate


def _label_metrics(frame: pd.DataFrame, dims: list[str]) -> dict[str, float]:
    """Each label's mean and spread over the day."""
    vec = vector_matrix(frame["vector"], dims)
    metrics = {}
    for j, d in enumerate(dims):
        metrics[f"mean_{d}"] = float(vec[:, j].mean())
        metrics[f"std_{d}"] = float(vec[:, j].std())
    for key in ("scalar", "reward_intensity", "safety_score"):
        metrics[f"mean_{key}"] = float(frame[key].mean())
        metrics[f"std_{key}"] = float(frame[key].std(ddof=0))
    return metrics


def build_teacher_labels(ctx: StageContext) -> StageOutput:
    rating = _rated(ctx)
    frame, quarantine, degenerate = _verified(ctx, rating)
    frame.to_parquet(ctx.out_dir / "labels.parquet", index=False)
    result = rating.result
    usage_metrics, usage_metadata = teacher_accounting(result.usage, result.failed, ctx.out_dir)
    metrics: dict[str, float | None] = {
        "labels": len(frame),
        "quarantined": len(quarantine),
        "failure_rate": len(quarantine) / (len(frame) + len(quarantine)),
        "labeling_seconds": rating.seconds,
        "degenerate": len(degenerate),
        "served_labels": int(frame["turn_id"].notna().sum()),
        **usage_metrics,
        **_label_metrics(frame, ctx.cfg.dimension_names),
    }
    return StageOutput(
        metrics=metrics,
        metadata={
            "rows": len(frame),
            "teacher": rating.teacher,
            "scalar_by_style": frame.groupby("style")["scalar"].mean().round(4).to_dict(),
            "served": f"{len(rating.served)} replies served on {served_day(ctx.partition)} rated "
            f"(labeling.served_turns {ctx.cfg.labeling.served_turns})",
            "quarantined_by_check": quarantine["check"].value_counts().to_dict() if len(quarantine) else {},
            "degenerate_examples": [f"{t}: {why}" for t, why in list(degenerate.items())[:3]],
            **usage_metadata,
        },
        table="labels.parquet",
        quarantine=quarantine,
        complete=not result.failed,
    )


def student_reply_logps(cfg: HominemConfig, prompts: list[str], replies: list[str]):
    """The student's mean log-probability per reply token of each exchange (the reward model's
    `reply_logp` guard, `reward.guards`), through the project's feature cache: the reward model, which
    reads the same guard columns, finds them there instead of measuring them again."""
    from hominem_pipeline.core.lm.device import resolve_device
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.reward.feature_cache import (
        FEATURE_CACHE,
        SHIPPED_FEATURES,
    )
    from hominem_pipeline.core.reward.guards import GUARDS, GuardScorer

    scorer = GuardScorer(
        tuple(GUARDS),
        student_path(cfg),
        cache=cfg.data_dir / FEATURE_CACHE,
        shipped=cfg.path(SHIPPED_FEATURES),
        device=resolve_device(cfg.runtime.device),
    )
    return scorer(prompts, replies)[:, list(GUARDS).index("reply_logp")].numpy()


def labels_pass_verifier(metrics: dict[str, Any], cfg: HominemConfig, folder: Path | None = None) -> CheckOutcome:
    """Blocking: too many quarantined labels stop the run before anything trains on the partition."""
    from hominem_pipeline.core.teacher.labeling import verifier_verdict

    kept, quarantined, missing = (
        int(metrics["labels"]),
        int(metrics.get("quarantined") or 0),
        int(metrics.get("missing") or 0),
    )
    passed, description = verifier_verdict(kept, quarantined, cfg.verifier.max_failure_rate, missing)
    degenerate = int(metrics.get("degenerate") or 0)
    if degenerate:
        description += f"; {degenerate} kept but flagged degenerate (never a pair's chosen reply)"
    return CheckOutcome(
        passed,
        description,
        {
            "kept": kept,
            "quarantined": quarantined,
            "missing": missing,
            "degenerate": degenerate,
            "max_failure_rate": cfg.verifier.max_failure_rate,
        },
    )
