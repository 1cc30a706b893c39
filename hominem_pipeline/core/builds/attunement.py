"""The `attunement` stage: the prediction log of a window read back (`core/attune`). Calibration per day,
per reward-model version and per domain; preference and served-reply drift between the recent and the
reference window, by the day's reward model; the people's pairs that model orders against them,
clustered, named and followed from yesterday's clusters (yesterday's model on yesterday's window)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.attune.drift import windows
from hominem_pipeline.core.builds.common import write_json
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.artifacts import data_label
from hominem_pipeline.core.pipeline.stage import CheckOutcome, StageContext, StageOutput

log = logging.getLogger(__name__)

SUMMARY, DAYS, DOMAINS, CLUSTERS, PLOT = (
    "attunement.json",
    "calibration_days.parquet",
    "domains.parquet",
    "clusters.parquet",
    "calibration.png",
)


def window_days(cfg: HominemConfig) -> int:
    """Days of predictions the stage reads: the calibration window, or both drift windows if longer."""
    a = cfg.attunement
    return max(a.window_days, a.drift.recent_days + a.drift.reference_days)


def _errors_of(model: Any, label: str, people: pd.DataFrame, days: list[str]) -> pd.DataFrame:
    from hominem_pipeline.core.attune.predictions import predict

    part = people[people["day"].isin(days)]
    now = predict(part, model, label, False, None, days[-1])
    return now[~now["correct"]]


def _served_vectors(ctx: StageContext, model: Any) -> pd.DataFrame:
    """The window's served replies scored by `model`: one row per turn with its day and vector."""
    from hominem_pipeline.core.builds.human_feedback import CONVERSATIONS

    frames = [
        pd.read_parquet(r.file(CONVERSATIONS), columns=["turn", "prompt", "reply"]).assign(day=r.partition)
        for r in ctx.inputs["human_feedback"]
    ]
    served = (
        pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["turn", "prompt", "reply", "day"])
    )
    served = served[served["reply"].fillna("").str.strip() != ""].reset_index(drop=True)
    if not len(served):
        return served.assign(vector=[])
    raw = model.raw_scores(list(served["prompt"]), list(served["reply"]))
    return served.assign(vector=list(raw["vector"].astype(np.float64)))


def _calibration(
    ctx: StageContext, pred: pd.DataFrame, window: list[str]
) -> tuple[pd.DataFrame, dict, Any, pd.DataFrame]:
    """The window's calibration by day, by group of sources and by domain (written with its plot); (by day, by
    group, people's choices between two served replies, by domain)."""
    from hominem_pipeline.core.attune.predictions import served_choices
    from hominem_pipeline.core.attune.timeline import GROUPS, by_day, by_domain, calibration, plot

    a = ctx.cfg.attunement
    in_window = pred[pred["day"].isin(window)]
    days = by_day(in_window, a.bins)
    days.to_parquet(ctx.out_dir / DAYS, index=False)
    report = {g: calibration(in_window[in_window["source"].isin(s)], a.bins) for g, s in GROUPS.items()}
    own = calibration(served_choices(in_window), a.bins)  # people's choices between the student's own replies
    domains = by_domain(in_window, a.bins)
    domains.to_parquet(ctx.out_dir / DOMAINS, index=False)
    plot(days, report, ctx.out_dir / PLOT, f"predictions against later choices, {window[0]} to {ctx.partition}")
    return days, report, own, domains


def _drift(ctx: StageContext, model: Any, now: pd.DataFrame) -> dict[str, Any]:
    """Preference drift (people's pairs, read by the day's model) and served-reply drift between the windows."""
    from hominem_pipeline.core.attune.drift import preference_drift, served_drift

    a, dims = ctx.cfg.attunement, ctx.cfg.dimension_names
    reference, recent = windows(ctx.partition, a.drift.recent_days, a.drift.reference_days)
    preference = preference_drift(now[now["day"].isin(reference)], now[now["day"].isin(recent)], dims, a.drift)
    served = _served_vectors(ctx, model)

    def vectors(days_: list[str]) -> np.ndarray:
        rows = served.loc[served["day"].isin(days_), "vector"].to_list()
        return np.stack(rows) if rows else np.zeros((0, len(dims)))

    served_report = served_drift(vectors(reference), vectors(recent), dims, a.drift)
    drifted = sorted((d for d in preference if d["drifted"]), key=lambda d: -abs(d["z"]))
    drifted += [dict(d, scope="served") for d in served_report if d["drifted"]]
    return {
        "reference": [reference[0], reference[-1]],
        "recent": [recent[0], recent[-1]],
        "preference": preference,
        "served": served_report,
        "drifted": drifted,
    }


def _clusters(ctx: StageContext, now: pd.DataFrame, people: pd.DataFrame, window: list[str]) -> tuple:
    """The people's pairs the day's model orders against them, clustered and named, followed from yesterday's
    clusters (yesterday's model on yesterday's window); (clusters, errors)."""
    from hominem_pipeline.core.attune.clusters import cluster_errors, follow
    from hominem_pipeline.core.lm.models import encoder_path
    from hominem_pipeline.core.reward.model import project_reward_model
    from hominem_pipeline.core.teacher.prompt_generators import sentence_embedder

    a, dims = ctx.cfg.attunement, ctx.cfg.dimension_names
    scale = {d: float(now[f"gap_{d}"].std()) if len(now) > 1 else 1.0 for d in dims}
    scale["length"] = float((now["chosen_words"] - now["rejected_words"]).std()) if len(now) > 1 else 1.0
    errors = now[~now["correct"] & now["day"].isin(window)]
    embed = sentence_embedder(encoder_path(ctx.cfg)) if len(errors) >= a.clusters.min_errors else None
    seed = ctx.cfg.project.seed  # not the day's seed: yesterday's clusters, recomputed here, come out as they did
    clusters, _ = cluster_errors(errors, dims, scale, embed, a.clusters, seed)
    previous = sorted(
        (r for r in ctx.inputs["reward_model"] if r.partition < ctx.partition), key=lambda r: r.partition
    )
    yesterday = None
    if previous and len(clusters):
        before = previous[-1]
        model = project_reward_model(before.path, ctx.cfg)
        old = _errors_of(
            model, data_label(ctx.cfg.data_dir, before.path), people, windows(before.partition, a.window_days, 0)[1]
        )
        if len(old) >= a.clusters.min_errors:
            yesterday, _ = cluster_errors(old, dims, scale, embed, a.clusters, seed)
            yesterday = follow(yesterday, None, before.partition, a.clusters.match_similarity)
    clusters = follow(clusters, yesterday, ctx.partition, a.clusters.match_similarity)
    stored = clusters.assign(terms=clusters["terms"].map(json.dumps), examples=clusters["examples"].map(json.dumps))
    stored.to_parquet(ctx.out_dir / CLUSTERS, index=False)
    return clusters, errors


def _metrics(report: dict[str, Any], own: Any, drifted: list, clusters: int, errors: int) -> dict[str, float | None]:
    people, judge = report["people"], report["judge"]
    return {
        "people_pairs": 0 if people is None else people["pairs"],
        "people_agreement": None if people is None else people["agreement"],
        "people_ece": None if people is None else people["ece"],
        "judge_agreement": None if judge is None else judge["agreement"],
        "judge_ece": None if judge is None else judge["ece"],
        # people's choices between two replies the student served: its own style, beside the judge's candidates
        "served_pairs": 0 if own is None else own["pairs"],
        "served_agreement": None if own is None else own["agreement"],
        "drifted": len(drifted),
        "error_clusters": clusters,
        "errors": errors,
    }


def build_attunement(ctx: StageContext) -> StageOutput:
    from hominem_pipeline.core.attune.predictions import PEOPLE, predict
    from hominem_pipeline.core.reward.model import project_reward_model

    a = ctx.cfg.attunement
    pred = ctx.tables("predictions").drop(columns=["partition"])
    window = windows(ctx.partition, a.window_days, 0)[1]
    days, report, own, domains = _calibration(ctx, pred, window)
    current = next(r for r in ctx.inputs["reward_model"] if r.partition == ctx.partition)
    model = project_reward_model(current.path, ctx.cfg)
    label = data_label(ctx.cfg.data_dir, current.path)
    people = pred[pred["source"].isin(PEOPLE)].reset_index(drop=True)
    now = predict(people, model, label, False, None, ctx.partition)  # the day's model on every people's pair read
    drift = _drift(ctx, model, now)
    clusters, errors = _clusters(ctx, now, people, window)
    summary = {
        "day": ctx.partition,
        "window": [window[0], ctx.partition],
        "reward_model": label,
        "calibration": {
            g: None if r is None else {k: v for k, v in r.items() if k != "bins"} | {"bins": r["bins"]}
            for g, r in report.items()
        },
        "drift": drift,
        "clusters": len(clusters[clusters["status"] != "closed"]),
        "errors": len(errors),
        "people_pairs": int(len(now)),
    }
    write_json(ctx.out_dir / SUMMARY, summary)
    drifted = drift["drifted"]
    return StageOutput(
        metrics=_metrics(report, own, drifted, summary["clusters"], len(errors)),
        metadata={
            "rows": len(days),
            "drifted": [f"{d['scope']}: {d['says']}" for d in drifted] or "none",
            "clusters": [f"[{r.status}] {r.size} pairs: {r.name}" for r in clusters.itertuples()][:10],
            "domains": {r.domain: f"{r.agreement:.0%} of {r.pairs}" for r in domains.itertuples()},
        },
        table=DAYS,
        mlflow_artifacts=[PLOT, SUMMARY],
    )


def preference_drift_check(metrics: dict[str, Any], cfg: HominemConfig, folder: Path) -> CheckOutcome:
    """Warns when people's preferences or the served replies drifted between the windows, naming each
    dimension and the direction; passes, saying what it tested, otherwise."""
    summary = json.loads((folder / SUMMARY).read_text())
    drift = summary["drift"]
    drifted = drift["drifted"]
    meta = {
        "reference": " to ".join(drift["reference"]),
        "recent": " to ".join(drift["recent"]),
        "drifted": [f"{d['scope']}: {d['dimension']} {d['direction']}" for d in drifted],
    }
    if drifted:
        return CheckOutcome(False, "drift: " + "; ".join(f"{d['scope']}: {d['says']}" for d in drifted[:6]), meta)
    tested = len({d["dimension"] for d in drift["preference"]})
    if not tested and not drift["served"]:
        d = cfg.attunement.drift
        return CheckOutcome(
            True,
            f"not tested: each window needs {d.min_choices} people's choices (and {d.min_served} served "
            "replies for their vectors)",
            meta,
        )
    return CheckOutcome(
        True,
        f"no drift: {tested} preference dimensions and {len(drift['served'])} served-reply dimensions "
        "compared, none moved past the thresholds",
        meta,
    )
