"""The `predictions` stage: the day's prediction log (`core/attune/predictions`). Every pair people ordered
that day (page choices and thumbs from the interaction log, imported pairs) and the judge's ranked pairs,
predicted by the newest reward model built before the day (so it never trained on them; on a first day,
the day's own, marked `in_sample`)."""

from __future__ import annotations

import logging

import pandas as pd

from hominem_pipeline.core.pipeline.stage import StageContext, StageOutput

log = logging.getLogger(__name__)

PREDICTIONS = "predictions.parquet"


def predictor(ctx: StageContext):
    """(the reward model's version ref, whether it trained on the day): the newest before the day, else the day's
    own."""
    refs = sorted(ctx.inputs["reward_model"], key=lambda r: r.partition)
    before = [r for r in refs if r.partition < ctx.partition]
    return (before[-1], False) if before else (next(r for r in refs if r.partition == ctx.partition), True)


def domains_for(cfg):
    """The seed-category classifier (`attune.predictions.Domains`) on the shipped encoder."""
    from hominem_pipeline.core.attune.predictions import Domains
    from hominem_pipeline.core.lm.models import encoder_path
    from hominem_pipeline.core.teacher.prompt_generators import sentence_embedder
    from hominem_pipeline.core.teacher.prompts import load_seed_prompts

    seeds = load_seed_prompts(cfg.path(cfg.prompts.seed_file), cfg.prompts.categories)
    return Domains([(p.text, p.category) for p in seeds], sentence_embedder(encoder_path(cfg)))


def day_pairs(ctx: StageContext) -> pd.DataFrame:
    """The day's ordered pairs with their source: page, import, judge."""
    from hominem_pipeline.core.attune.predictions import page_pairs
    from hominem_pipeline.core.builds.human_feedback import CONVERSATIONS, PAIRS

    frames = []
    for ref in ctx.inputs["human_feedback"]:
        feedback = pd.read_parquet(ref.file(PAIRS))
        frames.append(page_pairs(feedback, pd.read_parquet(ref.file(CONVERSATIONS)), ctx.cfg.data_dir))
    if ctx.inputs["human_preferences"]:
        frames.append(ctx.tables("human_preferences").assign(source="import", weight=1.0))
    if ctx.inputs["preference_pairs"]:
        judge = ctx.tables("preference_pairs")
        frames.append(judge.assign(source="judge", weight=1.0, rater=None))
    frames = [f.drop(columns=["partition"], errors="ignore") for f in frames if len(f)]
    return (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["pair_id", "prompt", "chosen", "rejected", "source"])
    )


def seed_prompts_digest(cfg, partition: str) -> str:
    from hominem_pipeline.core.pipeline.artifacts import file_sha256

    return file_sha256(cfg.path(cfg.prompts.seed_file))


def build_predictions(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.attune.predictions import PEOPLE, predict, served_choices
    from hominem_pipeline.core.attune.timeline import calibration
    from hominem_pipeline.core.pipeline.artifacts import data_label
    from hominem_pipeline.core.reward.model import project_reward_model

    ref, in_sample = predictor(ctx)
    model = project_reward_model(ref.path, ctx.cfg)
    label = data_label(ctx.cfg.data_dir, ref.path)
    pairs = day_pairs(ctx)
    pred = predict(pairs, model, label, in_sample, domains_for(ctx.cfg) if len(pairs) else None, ctx.partition)
    pred.to_parquet(ctx.out_dir / PREDICTIONS, index=False)
    metrics: dict[str, float | None] = {}
    for group, rows in (
        ("people", pred[pred["source"].isin(PEOPLE)]),
        ("served", served_choices(pred)),
        ("judge", pred[pred["source"] == "judge"]),
    ):
        report = calibration(rows, ctx.cfg.attunement.bins)
        metrics[f"{group}_pairs"] = 0 if report is None else report["pairs"]
        metrics[f"{group}_agreement"] = None if report is None else report["agreement"]
        metrics[f"{group}_ece"] = None if report is None else report["ece"]
    people = int(metrics["people_pairs"] or 0)
    return StageOutput(
        metrics=metrics,
        metadata={
            "rows": len(pred),
            "reward_model": label + (" (the day's own: it trained on these pairs)" if in_sample else ""),
            "people": f"{people} choices"
            + (
                f", {metrics['people_agreement']:.1%} ordered as chosen, ECE {metrics['people_ece']:.3f}"
                if people
                else " (nobody chose between replies that day)"
            ),
            "sources": {k: int(v) for k, v in pred["source"].value_counts().items()},
        },
        table=PREDICTIONS,
    )
