"""The `preference_pairs` stage: (prompt, chosen, rejected) pairs ranked by the teacher or the reward model."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.pipeline.stage import StageContext, StageOutput

if TYPE_CHECKING:
    from hominem_pipeline.core.reward.model import RewardModel

log = logging.getLogger(__name__)


def build_preference_pairs(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.policy.pairs import PairRules, sparse_pairs_warning
    from hominem_pipeline.core.policy.pairs import build_preference_pairs as build_pairs
    from hominem_pipeline.core.reward.model import project_reward_model

    labels = pd.read_parquet(ctx.one("teacher_labels").file("labels.parquet"))
    # whether each candidate ended or was cut at the teacher's token budget (training must not teach a stop there)
    trajectories = pd.read_parquet(
        ctx.one("teacher_trajectories").file("trajectories.parquet"), columns=["trajectory_id", "finished"]
    )
    labels = labels.merge(trajectories, on="trajectory_id", how="left")
    answered = labels["response"].str.strip().astype(bool).to_numpy()
    rm = project_reward_model(
        ctx.one("reward_model").path, ctx.cfg
    )  # the day's candidates: read once, by the reward model's training
    rm_scalar, rm_vectors = reward_model_scores(rm, labels)  # unanswered rows score NaN and never enter a pair
    pc = ctx.cfg.preferences
    student = _student_replies(ctx, labels, rm) if pc.against_student else None
    pairs = build_pairs(
        labels,
        PairRules(
            weights=pc.dimension_weights,
            min_margin=pc.min_margin,
            max_pairs_per_prompt=pc.max_pairs_per_prompt,
            strategy=pc.strategy,
            guard=pc.guard_dimension,
            min_scalar_margin=pc.min_scalar_margin,
        ),
        rm_scalar=rm_scalar,
        rm_vectors=rm_vectors,
        rank_by=pc.rank_by,
        student=student,
    )
    pairs, flagged = without_degenerate_chosen(pairs, labels, ctx.cfg.verifier.min_reply_logp)
    pairs.to_parquet(ctx.out_dir / "pairs.parquet", index=False)
    if student is not None:  # what the pairs against the student were built from, for inspection
        student.to_parquet(ctx.out_dir / "student_replies.parquet", index=False)
    covered = int(pairs["prompt_id"].nunique()) if len(pairs) else 0
    if warning := sparse_pairs_warning(
        covered, labels.loc[answered, "prompt_id"].nunique(), pc.rank_by, pc.min_margin, pc.min_scalar_margin
    ):
        log.warning(warning)
    return StageOutput(
        metrics={
            "pairs": len(pairs),
            "prompts_with_pairs": covered,
            "mean_margin": finite(pairs["margin"].mean()) if len(pairs) else None,
            # how often the other judge agrees with the pairs' order (the one that ranked them always does)
            "reward_model_agreement": float((pairs["rm_margin"] > 0).mean()) if len(pairs) else None,
            "teacher_agreement": float((pairs["teacher_margin"] > 0).mean()) if len(pairs) else None,
            **({"student_pairs": int((pairs["source"] == "student").sum())} if student is not None else {}),
            "dropped_degenerate_chosen": flagged,
        },
        metadata={
            "rows": len(pairs),
            "candidates": len(labels),
            **({"student_replies": len(student)} if student is not None else {}),
        },
        table="pairs.parquet",
    )


def without_degenerate_chosen(
    pairs: pd.DataFrame, labels: pd.DataFrame, min_reply_logp: float | None
) -> tuple[pd.DataFrame, int]:
    """`pairs` without those whose chosen reply the verifier flags degenerate (`teacher.labeling.degenerate_rows`:
    word salad, no words, one word over and over; such a reply may still be the rejected one), and how
    many were dropped. dual's memory channel trains on the chosen replies: it must never learn word salad."""
    from hominem_pipeline.core.teacher.labeling import degenerate_rows

    flagged = degenerate_rows(labels, min_reply_logp)
    if not flagged or pairs.empty:
        return pairs, 0
    keep = ~pairs["chosen_trajectory_id"].astype(str).isin(flagged)
    if (~keep).any():
        log.info(
            "preference pairs: %d dropped whose chosen reply is degenerate (first: %s)",
            int((~keep).sum()),
            flagged[str(pairs.loc[~keep, "chosen_trajectory_id"].iloc[0])],
        )
    return pairs[keep].reset_index(drop=True), int((~keep).sum())


def _student_replies(ctx: StageContext, labels: pd.DataFrame, rm: RewardModel) -> pd.DataFrame:
    """The base student's own reply to each prompt of the day, decoded as the evaluation decodes it,
    with the reward model's scalar and vector (`preferences.against_student`)."""
    from hominem_pipeline.core.evaluation.compare import greedy_replies
    from hominem_pipeline.core.lm.device import resolve_device
    from hominem_pipeline.core.lm.models import load_student, student_path

    prompts = labels.drop_duplicates("prompt_id")[["prompt_id", "prompt"]].reset_index(drop=True)
    model, tokenizer = load_student(student_path(ctx.cfg), resolve_device(ctx.cfg.runtime.device))
    replies = greedy_replies(
        model, tokenizer, list(prompts["prompt"]), ctx.cfg.evaluation, ctx.seed, "student replies"
    )
    del model
    replied = prompts.assign(response=[g.text for g in replies], finished=[g.finished for g in replies])
    scalar, vectors = reward_model_scores(rm, replied)
    return replied.assign(scalar=scalar, vector=vectors)


def finite(x: Any) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def reward_model_scores(rm: RewardModel, rows: pd.DataFrame) -> tuple[np.ndarray, list[dict[str, float]]]:
    """The reward model's scalar and vector (by dimension name) of each row's prompt and response
    (`evaluation.score_side`: an empty response scores NaN)."""
    from hominem_pipeline.core.reward.model import score_side

    scores = score_side(rm, list(rows["prompt"]), list(rows["response"]))
    return scores["scalar"], [dict(zip(rm.dimensions, map(float, row))) for row in scores["vector"]]
