"""How well the reward model agrees with the teacher on prompts it never saw: k-fold cross-validation
over the default run's own labels.

With gradient-trained heads the reward_model stage reports its figures on one validation split: on a
single default day that is 6-8 prompts and 5-16 teacher pairs, so one run's "held-out accuracy" is
mostly the luck of the split (ridge heads, the default, score every prompt out of fold inside the
stage). This script reads the same labels the stage trains on (the current teacher_labels of every day
in the window ending at `--date`), splits the prompts into `--folds` folds, and for each fold trains a
model exactly as the stage does on the other folds, then scores the fold's replies. Every labeled reply
thus gets an out-of-fold score, and the figures cover every pair of the window, for any variant:

- pairwise accuracy on same-prompt teacher pairs with a scalar gap >= 0.1 (the issue's measure), with
  its standard error;
- Pearson correlation of the scalar and of each dimension with the teacher;
- the accuracy on each day's pairs, so a day that disagrees with the rest shows;
- ECE / MCE / Brier of the calibrated P(preferred) with the temperature cross-fitted: each fold's
  pairs get the T fitted on the other folds' out-of-fold pairs, so no pair calibrates itself.

Each `--variant NAME=JSON` (reward_model settings overlaid on the config) runs in the same process, on
the same folds; the default list compares the configured model (the local judge's own network, cut to 24
layers, reading the exchange in the judge's frame up to its overall question, ridge heads) with the same
network reading the frame without the question (cut to 18 layers, the default before), and with the
MiniLM encoder of `config/reward/encoder.yaml`, fine-tuned and frozen with ridge heads.

    .venv/bin/python benchmarks/reward_teacher_agreement.py                       # latest day in data/
    .venv/bin/python benchmarks/reward_teacher_agreement.py --variant default={} --folds 8
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import named_settings
from hominem_pipeline.core.common.schema import vector_matrix
from hominem_pipeline.core.common.stats import pearson
from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.lm.models import reward_backbone
from hominem_pipeline.core.pipeline.lineage import lineage
from hominem_pipeline.core.reward.calibration import (
    both_orders,
    calibration_report,
    fit_temperature,
    preference_probability,
    reliability_diagram,
    same_prompt_pairs,
)
from hominem_pipeline.core.reward.dataset import PAIR_GAP, pairwise_accuracy
from hominem_pipeline.core.reward.model import RewardModel
from hominem_pipeline.core.reward.ridge import prompt_folds
from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
from hominem_pipeline.core.teacher.base import rubric_system

ENCODER = yaml.safe_load((ROOT / "config" / "reward" / "encoder.yaml").read_text())[
    "reward_model"
]  # MiniLM, as the overlay sets it
DEFAULT_VARIANTS = {
    # the judge's network, cut to 24 layers, reading in the judge's frame up to its overall question, ridge heads
    "configured": {},
    "judge frame without the question, 18 layers": {"backbone": {"frame": "judge", "depth": 18}},
    "encoder": ENCODER,  # config/reward/encoder.yaml: MiniLM fine-tuned
    "frozen encoder, ridge": {
        **ENCODER,
        "backbone": {**ENCODER["backbone"], "finetune": "frozen"},
        "head_fit": "ridge",
    },
}


def window_labels(cfg, date: str | None) -> tuple[pd.DataFrame, list[str]]:
    data = lineage(cfg)
    latest = data.latest("teacher_labels")
    if latest is None:
        sys.exit(f"no teacher_labels under {data.store.root} for this config; run `make run` first")
    date = date or latest.partition
    refs = data.plan("reward_model", date).inputs["teacher_labels"]  # the window the day's reward model reads
    frames = [pd.read_parquet(r.file(r.manifest["table"])).assign(day=r.partition) for r in refs]
    return pd.concat(frames, ignore_index=True), [r.partition for r in refs]


def out_of_fold(
    name: str, cfg, labels: pd.DataFrame, fold: np.ndarray, folds: int, seed: int
) -> tuple[dict[str, np.ndarray], float]:
    """Every reply's scores from the model trained without its fold."""
    scores = {"scalar": np.zeros(len(labels)), "vector": np.zeros((len(labels), len(cfg.dimension_names)))}
    started = time.monotonic()
    for k in range(folds):
        train, held = labels[fold != k].reset_index(drop=True), labels[fold == k]
        with tempfile.TemporaryDirectory() as tmp:
            m = train_reward_model(
                train,
                dimensions=cfg.dimension_names,
                sources=RewardSources(
                    reward_backbone(cfg),
                    judge_system=rubric_system(cfg.labeling),
                    judge_question=cfg.labeling.scalar_question,
                ),
                cfg=cfg.reward_model,
                out_dir=Path(tmp),
                seed=seed + k,
                data_digest="cross-validation",
                date="benchmark",
            ).metrics
            raw = RewardModel.load(tmp).raw_scores(list(held["prompt"]), list(held["response"]))
        scores["scalar"][fold == k] = raw["scalar"]
        scores["vector"][fold == k] = raw["vector"]
        fitted = (
            f"ridge penalty {m['ridge_alpha']:g}"
            if "ridge_alpha" in m
            else f"{m['epochs_run']} epochs (best {m['best_epoch']})"
        )
        print(f"  {name}: fold {k + 1}/{folds} trained on {len(train)} labels, {fitted}", flush=True)
    return scores, time.monotonic() - started


def cross_fitted(gaps: np.ndarray, outcomes: np.ndarray, pair_fold: np.ndarray, folds: int) -> np.ndarray:
    """P(first preferred) of each pair (both orders, as `both_orders` gives them) with the T fitted on
    the other folds' pairs."""
    where = np.tile(pair_fold, 2)
    probs = np.zeros(len(gaps))
    for k in range(folds):
        if (where == k).any():
            probs[where == k] = preference_probability(
                gaps[where == k], fit_temperature(gaps[where != k], outcomes[where != k])
            )
    return probs


def corr(value: float | None) -> str:
    return "n/a (constant)" if value is None else f"{value:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--date", default=None, help="last day of the label window (default: the latest teacher_labels partition)"
    )
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="reward_model settings to compare (repeatable)",
    )
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "plots" / "reward_teacher_agreement.png")
    args = ap.parse_args()
    logging.basicConfig(
        level=logging.ERROR
    )  # the per-fold "few validation pairs" warnings are what this script answers
    variants = named_settings(args.variant, "--variant", """'{"epochs": 3}' (reward_model settings)""")
    variants = variants or DEFAULT_VARIANTS

    base = load_config(root=ROOT)
    labels, days = window_labels(base, args.date)
    fold = prompt_folds(labels["prompt_id"].to_numpy(), args.folds, args.seed)
    pairs = same_prompt_pairs(labels["prompt_id"].to_numpy(), labels["scalar"].to_numpy(np.float64), PAIR_GAP)
    teacher_vec = vector_matrix(labels["vector"], base.dimension_names)
    label_day = labels["day"].to_numpy()
    pair_day = np.where(
        label_day[pairs[:, 0]] == label_day[pairs[:, 1]], label_day[pairs[:, 0]], "across days"
    )  # a prompt may come back on later days
    day_groups = [d for d in [*days, "across days"] if (pair_day == d).any()]
    print(
        f"{len(labels)} labels of {labels['prompt_id'].nunique()} prompts ({', '.join(days)}), "
        f"{len(pairs)} teacher pairs with a gap >= {PAIR_GAP}; {args.folds} prompt folds",
        flush=True,
    )

    for i, (name, overrides) in enumerate(variants.items()):
        cfg = load_config(root=ROOT, overrides={"reward_model": overrides})
        scores, seconds = out_of_fold(name, cfg, labels, fold, args.folds, args.seed)
        accuracy = pairwise_accuracy(pairs, scores["scalar"])
        gaps, outcomes = both_orders(pairs, scores["scalar"])
        after = calibration_report(cross_fitted(gaps, outcomes, fold[pairs[:, 0]], args.folds), outcomes)
        if i == 0:  # the diagram shows the first variant
            before = calibration_report(preference_probability(gaps, 1.0), outcomes)
            args.plot.parent.mkdir(parents=True, exist_ok=True)
            reliability_diagram(
                before,
                after,
                args.plot,
                f"{name}: {len(pairs)} out-of-fold teacher pairs, accuracy {accuracy:.1%}\n'after' = T "
                "cross-fitted on the other folds",
            )
            print(f"reliability diagram of {name!r}: {args.plot}", flush=True)
        dims = {d: pearson(scores["vector"][:, j], teacher_vec[:, j]) for j, d in enumerate(base.dimension_names)}
        se = float(np.sqrt(accuracy * (1 - accuracy) / len(pairs)))
        print(
            f"{name:>16}: accuracy {accuracy:.1%} +- {se:.1%} on {len(pairs)} pairs, Pearson scalar "
            f"{corr(pearson(scores['scalar'], labels['scalar'].to_numpy()))}, "
            f"cross-fitted ECE {after['ece']:.3f} MCE {after['mce']:.3f} Brier {after['brier']:.3f} (T "
            f"on all {fit_temperature(gaps, outcomes):.3g}), "
            f"{seconds:.0f} s for {args.folds} models",
            flush=True,
        )
        print(
            "                  Pearson per dimension: " + ", ".join(f"{d} {corr(v)}" for d, v in dims.items()),
            flush=True,
        )
        print(
            "                  accuracy by day: "
            + ", ".join(
                f"{d} {pairwise_accuracy(pairs[pair_day == d], scores['scalar']):.1%} of {int((pair_day == d).sum())}"
                for d in day_groups
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
