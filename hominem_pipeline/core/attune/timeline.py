"""Calibration over time: agreement with people, ECE and the reliability curve per day and per
reward-model version, over a rolling window, and per domain. People's choices (the page's and
imported ones) and the judge's ranked pairs are reported side by side, never mixed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.attune.predictions import PEOPLE

GROUPS = {"people": PEOPLE, "judge": ("judge",)}


def group_of(source: pd.Series) -> pd.Series:
    return source.map(lambda s: "people" if s in PEOPLE else "judge")


def calibration(pred: pd.DataFrame, bins: int) -> dict[str, Any] | None:
    """Agreement (the share ordered as chosen), its standard error, mean confidence, ECE, Brier and the
    reliability bins of one set of predictions; each pair counted in both orders, as the reward model's
    own calibration report does, so the bins are symmetric around 0.5. None without a row."""
    from hominem_pipeline.core.reward.calibration import calibration_report

    if not len(pred):
        return None
    p = pred["p_chosen"].to_numpy(dtype=np.float64)
    correct = pred["correct"].to_numpy(dtype=bool)
    report = calibration_report(np.concatenate([p, 1 - p]), np.concatenate([np.ones(len(p)), np.zeros(len(p))]), bins)
    agreement = float(correct.mean())
    return {
        "pairs": int(len(p)),
        "agreement": agreement,
        "stderr": float(np.sqrt(agreement * (1 - agreement) / len(p))),
        "confidence": float(np.maximum(p, 1 - p).mean()),
        "ece": report["ece"],
        "brier": report["brier"],
        "bins": report["bins"],
    }


def by_day(pred: pd.DataFrame, bins: int) -> pd.DataFrame:
    """One row per (group, day, reward model): pairs, agreement, ECE, Brier, mean confidence."""
    rows = []
    if len(pred):
        frame = pred.assign(group=group_of(pred["source"]))
        for (group, day, version), part in frame.groupby(["group", "day", "reward_model"], sort=True):
            c = calibration(part, bins)
            rows.append(
                {
                    "group": group,
                    "day": day,
                    "reward_model": version,
                    "in_sample": bool(part["in_sample"].any()),
                    **{k: c[k] for k in ("pairs", "agreement", "stderr", "ece", "brier", "confidence")},
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "group",
            "day",
            "reward_model",
            "in_sample",
            "pairs",
            "agreement",
            "stderr",
            "ece",
            "brier",
            "confidence",
        ],
    )


def by_domain(pred: pd.DataFrame, bins: int) -> pd.DataFrame:
    """People's choices in the window per domain: pairs, agreement, ECE."""
    people = pred[pred["source"].isin(PEOPLE)]
    rows = [
        {"domain": d, **{k: c[k] for k in ("pairs", "agreement", "stderr", "ece")}}
        for d, part in people.groupby("domain", sort=True)
        if (c := calibration(part, bins)) is not None
    ]
    return pd.DataFrame(rows, columns=["domain", "pairs", "agreement", "stderr", "ece"])


def plot(days: pd.DataFrame, window: dict[str, dict[str, Any] | None], path: Path, title: str) -> None:
    """Agreement and ECE per day (people solid, judge dashed) beside the window's reliability curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"people": "-", "judge": "--"}
    for group, part in days.groupby("group"):
        daily = part.groupby("day").apply(
            lambda g: pd.Series(
                {
                    "agreement": np.average(g["agreement"], weights=g["pairs"]),
                    "ece": np.average(g["ece"], weights=g["pairs"]),
                }
            ),
            include_groups=False,
        )
        x = pd.to_datetime(daily.index)
        left.plot(x, daily["agreement"], styles[group], marker="o", color="tab:blue", label=f"{group}: agreement")
        left.plot(x, daily["ece"], styles[group], marker="s", color="tab:orange", label=f"{group}: ECE")
    left.axhline(0.5, color="grey", lw=0.8)
    left.set_ylim(0, 1)
    left.set_title("per day")
    left.legend(fontsize=8)
    left.tick_params(axis="x", labelrotation=30, labelsize=8)
    right.plot([0, 1], [0, 1], color="grey", lw=0.8)
    for group, report in window.items():
        if report is None:
            continue
        conf = [b["confidence"] for b in report["bins"]]
        acc = [b["accuracy"] for b in report["bins"]]
        right.plot(
            conf, acc, styles[group], marker="o", label=f"{group}: {report['pairs']} pairs, ECE {report['ece']:.3f}"
        )
    right.set_xlabel("predicted P(chosen)")
    right.set_ylabel("share chosen")
    right.set_title("reliability over the window")
    right.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
