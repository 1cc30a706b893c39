"""How often the reward model agrees with people: HH-RLHF harmless-base pairs, a fixed seeded split.

The file is read with the project's own importer (`parse_preference_file`, format hh-rlhf), shuffled
with a fixed seed, and split into `--train` pairs (the trainer holds `val_fraction` of them out for
early stopping and the temperature) and the other `--test` pairs, which no step of training sees. The
model is trained on the pairs alone (Bradley-Terry on the scalar head; no teacher labels) with the
22M MiniLM encoder (`config/reward/encoder.yaml`: the default reads in the offline judge's frame with
ridge heads fitted to labels, which pairs cannot train), then the script prints on the test pairs:
agreement with the people (chosen scored above rejected), ECE / MCE / Brier of the calibrated
P(chosen preferred), and training time. With `--baseline`, a frozen backbone with only the heads
trained (the reference of a linear Bradley-Terry head on frozen MiniLM) runs first, in the same
process, for the ratio.

    .venv/bin/python benchmarks/reward_human_agreement.py                  # 1,800 train / the other 504 test
    .venv/bin/python benchmarks/reward_human_agreement.py --baseline --epochs 2
    .venv/bin/python benchmarks/reward_human_agreement.py --finetune frozen --layers 1,2,3,4,5,6

Needs ../shared/data/hh-rlhf/ (or --data PATH); the project itself never reads it.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.config_loader import load_config  # noqa: E402
from hominem_pipeline.core.human.preferences import parse_preference_file  # noqa: E402
from hominem_pipeline.core.models import reward_backbone  # noqa: E402
from hominem_pipeline.core.reward.calibration import (  # noqa: E402
    both_orders,
    calibration_report,
    preference_probability,
    reliability_diagram,
)
from hominem_pipeline.core.reward.model import RewardModel  # noqa: E402
from hominem_pipeline.core.reward.training import train_reward_model  # noqa: E402

ENCODER = ROOT / "config" / "reward" / "encoder.yaml"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"


def run(name: str, cfg, train, test, seed: int, plot: Path | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        metrics = train_reward_model(
            pd.DataFrame(), dimensions=cfg.dimension_names, backbone_path=reward_backbone(cfg),
            cfg=cfg.reward_model, out_dir=Path(tmp), seed=seed, data_digest="hh-rlhf", date="benchmark", human_pairs=train,
        )
        seconds = time.monotonic() - started
        rm = RewardModel.load(tmp)
        n = len(test)
        scalar = rm.raw_scores(list(test["prompt"]) * 2, list(test["chosen"]) + list(test["rejected"]), batch_size=64)["scalar"]
    pairs = np.stack([np.arange(n), np.arange(n, 2 * n)], 1)
    gaps, outcomes = both_orders(pairs, scalar)
    before = calibration_report(preference_probability(gaps, 1.0), outcomes)
    after = calibration_report(preference_probability(gaps, rm.temperature), outcomes)
    accuracy = float((scalar[:n] > scalar[n:]).mean())
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        reliability_diagram(before, after, plot, f"{name}: {n} held-out HH-RLHF pairs, accuracy {accuracy:.1%}, T = {rm.temperature:.2f}")
    result = {
        "name": name,
        "accuracy": accuracy,
        "ece": after["ece"],
        "mce": after["mce"],
        "brier": after["brier"],
        "ece_uncalibrated": before["ece"],
        "temperature": rm.temperature,
        "val_accuracy": metrics.get("val_human_accuracy"),
        "epochs_run": metrics["epochs_run"],
        "best_epoch": metrics["best_epoch"],
        "train_seconds": seconds,
        "train_pairs": metrics["train_sequences"] // 2,
    }
    print(
        f"{name:>10}: accuracy {accuracy:.1%} on {n} held-out pairs (val {result['val_accuracy']:.1%}), "
        f"ECE {after['ece']:.3f} (uncalibrated {before['ece']:.3f}), MCE {after['mce']:.3f}, Brier {after['brier']:.3f}, "
        f"T {rm.temperature:.3f}; trained on {result['train_pairs']} pairs, {result['epochs_run']} epochs (best {result['best_epoch']}) "
        f"in {seconds:.0f} s = {seconds / max(result['train_pairs'], 1) * 1000 / result['epochs_run']:.0f} s per 1,000 pairs per epoch",
        flush=True,
    )
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--train", type=int, default=1800, help="pairs to train on (the trainer holds val_fraction of them out)")
    ap.add_argument("--test", type=int, default=None, help="held-out pairs to report on (default: all the others)")
    ap.add_argument("--seed", type=int, default=0, help="shuffle and training seed")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--max-length", type=int, default=None)
    ap.add_argument("--learning-rate", type=float, default=None, help="encoder learning rate (default: the config's)")
    ap.add_argument("--finetune", choices=["full", "lora", "frozen"], default=None, help="how the backbone trains (default: the config's)")
    ap.add_argument("--length-feature", choices=["on", "off"], default=None, help="heads also read the sequence's log length (default: the config's)")
    ap.add_argument("--layers", default=None, help="pool the states after these encoder layers side by side, e.g. 1,2,3,4,5,6 (default: the config's)")
    ap.add_argument("--baseline", action="store_true", help="also train a frozen backbone (heads only) first, for the ratio")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "plots" / "reward_human_agreement.png")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if not args.data.is_file():
        sys.exit(f"{args.data} not found; pass --data PATH to harmless-base-test.jsonl.gz")

    pairs = parse_preference_file(args.data, "hh-rlhf", args.data.name).pairs.reset_index(drop=True)
    order = np.random.default_rng(args.seed).permutation(len(pairs))
    args.test = args.test or len(pairs) - args.train
    if args.train + args.test > len(pairs):
        sys.exit(f"--train {args.train} + --test {args.test} is more than the {len(pairs)} usable pairs in {args.data}")
    train, test = pairs.iloc[order[: args.train]].reset_index(drop=True), pairs.iloc[order[args.train : args.train + args.test]].reset_index(drop=True)
    print(f"{len(pairs)} usable pairs; seed {args.seed}: train {len(train)} (val held out inside), test {len(test)}", flush=True)

    overrides: dict = {}
    if args.epochs:
        overrides["epochs"] = args.epochs
    if args.max_length:
        overrides["max_length"] = args.max_length
    if args.learning_rate:
        overrides["learning_rate"] = args.learning_rate
    backbone: dict = {}
    if args.finetune:
        backbone["finetune"] = args.finetune
    if args.layers:
        try:
            backbone["layers"] = [int(x) for x in args.layers.split(",")]
        except ValueError:
            sys.exit(f"--layers {args.layers!r}: give layer numbers separated by commas, e.g. 1,2,3,4,5,6")
    if backbone:
        overrides["backbone"] = backbone
    if args.length_feature:
        overrides["length_feature"] = args.length_feature == "on"
    results = []
    if args.baseline:
        frozen = load_config(ENCODER, root=ROOT, overrides={"reward_model": {**overrides, "backbone": {**backbone, "finetune": "frozen"}, "uncertainty": {"method": "none"}}})
        results.append(run("frozen", frozen, train, test, args.seed, None))
    cfg = load_config(ENCODER, root=ROOT, overrides={"reward_model": overrides})
    results.append(run(args.finetune or "default", cfg, train, test, args.seed, args.plot))
    if args.baseline:
        print(f"accuracy default / frozen: {results[1]['accuracy'] / results[0]['accuracy']:.3f}")
    print(f"reliability diagram: {args.plot}")


if __name__ == "__main__":
    main()
