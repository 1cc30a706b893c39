"""Does a backbone that learns people's pairs order held-out people's pairs better? A LoRA on the reward
backbone's top layers trained with TRL's RewardTrainer (`core.reward.preference_lora`) on the shipped
people's training pairs (the HH-RLHF harmless-base 1,600 without the 200 held out for adapters, and the
contrast pairs), read in the reward model's frame; its score beside the student's mean log-likelihood.

Scored on the 504 HH-RLHF harmless-base pairs held out of the seed-0 split (as
`benchmarks/reward_human_agreement.py`, whose default reward model is the baseline: 65.3%), the 132 contrast
fixtures (overall and the weakest tag) and the README's driving-test pair. One line per setting and seed,
and the mean with its standard error over seeds.

    .venv/bin/python benchmarks/reward_backbone.py --project /tmp/fresh   # rank 8, top 6 layers, 1 epoch
    .venv/bin/python benchmarks/reward_backbone.py --project P --layers 3 6 --seeds 0 1 2 --limit 400

Needs a project whose student is prepared (`make run` or `hominem setup`) and ../shared/data/hh-rlhf/
(or --data PATH). On 2 CPU cores one epoch of 1,892 pairs through the top 6 of 24 layers takes about
an hour; on a GPU a few minutes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import config_on, lora_backbone, paired_se
from hominem_pipeline.core.evaluation.fixtures import fixture_report, load_fixtures
from hominem_pipeline.core.human.preferences import parse_preference_file

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"
TRAIN = 1800  # the training part of the split (the pairs shipped in config/human/)
DRIVING = ("I failed my driving test again.", "That's rough. What happened?", "Try harder.")


def agreement(scores_chosen: np.ndarray, scores_rejected: np.ndarray) -> tuple[float, float]:
    right = (scores_chosen > scores_rejected).astype(float)
    return float(right.mean()), paired_se(right)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True, help="a project whose student is prepared")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--test", type=int, default=504, help="held-out pairs (after the 1,800 of the training part)")
    ap.add_argument("--limit", type=int, default=None, help="train on the first N training pairs (shuffled) only")
    ap.add_argument("--ranks", type=int, nargs="+", default=[8])
    ap.add_argument("--layers", type=int, nargs="+", default=[6], help="top layers of the kept depth with a LoRA")
    ap.add_argument("--epochs", type=float, nargs="+", default=[1.0])
    ap.add_argument("--learning-rate", type=float, default=2e-4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument(
        "--backbone",
        choices=("student", "encoder"),
        default="student",
        help="student: the reward model's backbone, cut to its depth, in its judge frame; encoder: MiniLM, "
        "the people's score's encoder, whole, reading [CLS] prompt [SEP] reply [SEP]",
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument(
        "--extra-pairs",
        type=Path,
        nargs="*",
        default=[],
        help="more training pairs, jsonl {prompt, chosen, rejected}: config/human/hominem-helpfulness-pairs.jsonl",
    )
    ap.add_argument("--out", type=Path, default=None, help="keep the trained adapters here (default: a temp folder)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if not args.data.is_file():
        sys.exit(f"{args.data} not found; pass --data PATH to harmless-base-test.jsonl.gz")

    import pandas as pd

    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.reward.preference_lora import (
        PreferenceLoraSettings,
        load_preference_lora,
        preference_scores,
        train_preference_lora,
    )

    cfg = config_on(args.project.resolve())
    base, depth, encode = lora_backbone(cfg, args.backbone)

    pairs = parse_preference_file(args.data, "hh-rlhf", args.data.name).pairs.reset_index(drop=True)
    order = np.random.default_rng(0).permutation(len(pairs))
    test = pairs.iloc[order[TRAIN : TRAIN + args.test]].reset_index(drop=True)
    train = people_pairs(cfg, "train")
    if set(train["pair_id"]) & set(test["pair_id"]):
        sys.exit("the shipped people's pairs overlap the held-out pairs: this split is not theirs")
    extra = [parse_preference_file(f, "jsonl", f.name).pairs for f in args.extra_pairs]
    train = pd.concat([train, *extra], ignore_index=True).sample(frac=1.0, random_state=0).reset_index(drop=True)
    if args.limit:
        train = train.iloc[: args.limit]
    fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)
    print(f"training pairs {len(train)}, held out {len(test)}, fixtures {len(fixtures)}", flush=True)

    results = []
    keep = args.out or Path(tempfile.mkdtemp(prefix="hominem-preference-lora-"))
    for rank, layers, epochs, seed in itertools.product(args.ranks, args.layers, args.epochs, args.seeds):
        settings = PreferenceLoraSettings(
            rank=rank,
            alpha=2 * rank,
            layers=layers,
            epochs=epochs,
            learning_rate=args.learning_rate,
            batch_size=args.batch_size,
            seed=seed,
        )
        out = keep / f"{args.backbone}-r{rank}-l{layers}-e{epochs:g}-s{seed}"
        started = time.monotonic()
        metrics = train_preference_lora(
            base,
            train[["prompt", "chosen", "rejected"]],
            encode,
            out,
            depth=depth,
            settings=settings,
            progress=lambda logs: print(
                json.dumps({k: logs[k] for k in logs if not k.startswith("num_")}), flush=True
            ),
        )
        trained_s = time.monotonic() - started
        model, tok = load_preference_lora(base, out, depth)
        read = encode(tok)
        held, held_se = agreement(
            preference_scores(model, tok, read, test["prompt"], test["chosen"]),
            preference_scores(model, tok, read, test["prompt"], test["rejected"]),
        )
        gaps = preference_scores(
            model, tok, read, [f.prompt for f in fixtures], [f.better for f in fixtures]
        ) - preference_scores(model, tok, read, [f.prompt for f in fixtures], [f.worse for f in fixtures])
        report = fixture_report(fixtures, gaps)
        weakest = min(report.by_tag, key=report.by_tag.get)
        kind, blunt = preference_scores(model, tok, read, [DRIVING[0]] * 2, list(DRIVING[1:]))
        row = {
            "rank": rank,
            "layers": layers,
            "epochs": epochs,
            "seed": seed,
            "held_out": held,
            "held_out_se": held_se,
            "fixtures": report.accuracy,
            "weakest_tag": weakest,
            "weakest": report.by_tag[weakest],
            "driving_kind": bool(kind > blunt),
            "train_s": round(trained_s),
            "train_loss": metrics.get("train_loss"),
        }
        results.append(row)
        print(json.dumps(row), flush=True)
    table = pd.DataFrame(results)
    summary = table.groupby(["rank", "layers", "epochs"]).agg(
        held_out=("held_out", "mean"),
        seed_se=("held_out", paired_se),
        fixtures=("fixtures", "mean"),
        seeds=("seed", "count"),
    )
    print(table.to_string(index=False))
    print(summary.to_string())
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
