"""What moves the student toward people? Each setting below trains the daily adapter's trainer
(`policy.dual`, this repo's config with the setting on top) from the same data, for several seeds, all in
one run, and each adapter is judged on the 504 held-out HH-RLHF pairs no model here saw
(`student_people_agreement.py`'s split): its implicit reward's accuracy (TRL's `rewards/accuracies`;
chance 0.5), and on the contrast fixtures. Training data: the people's pairs the daily adapter learns from
(the shipped ones but the held-out; `policy.pairs.people_rows`) and, for the settings that mix them
in, a day's pairs ranked by the reward model (--ranked: a `preference_pairs` table of a built project;
drawn each once per pass here, not by the replay sampler). `cost` is a setting's optimizer steps times
rows per step times tokens per row against the default's: about what it would cost the CPU's daily job
(LoRA on more layers costs more than it shows).

    .venv/bin/python benchmarks/student_people_sweep.py --ranked
    /tmp/a-make-run/data/preference_pairs/2026-11-27/<v>/pairs.parquet python3 benchmarks/student_people_sweep.py
    --student SmolLM2-135M-Instruct.Q4_1.gguf --seeds 3 --out $OUT/sweep.jsonl   # on a GPU

The trainer places itself on a CUDA GPU where torch sees one (on 2 CPU cores a default setting takes
about 5 minutes with its evaluation; on an H100 seconds). --student: an HF folder, or a .gguf file
converted once to an fp32 folder beside it (default: the project's student). Needs
../shared/data/hh-rlhf/ (or --data PATH). Each run is appended to --out as one JSON line as it ends.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from student_people_agreement import DEFAULT_DATA, held_out_test

# name: (policy overrides, mix in the ranked pairs, what it asks)
SETTINGS: dict[str, tuple[dict, bool, str]] = {
    "default": ({}, True, "the daily default: people's pairs 2 of 3 pair rows, the reward model's ranking the rest"),
    "people": ({"dual": {"people_share": 1.0}}, False, "people's pairs alone"),
    "ranked": ({"dual": {"people_share": 0.0}}, True, "the reward model's ranking of the student's candidates alone"),
    "people_144": ({"max_steps": 144}, False, "people's pairs alone, 3x the steps"),
    "people_epoch": (
        {"max_steps": 400, "learning_rate": 1.0e-3},
        False,
        "people's pairs alone, about one pass over them (400 steps, lr 1e-3)",
    ),
    "people_len64_96": ({"max_length": 64, "max_steps": 96}, False, "people's pairs alone, 64 tokens, 2x the steps"),
    "people_all_layers": ({"lora": {"layers": None}}, False, "people's pairs alone, LoRA on every layer"),
    "people_r32": ({"lora": {"r": 32, "alpha": 64}}, False, "people's pairs alone, LoRA rank 32"),
    "people_beta05": ({"beta": 0.5}, False, "people's pairs alone, beta 0.5"),
    "people_sft0": ({"dual": {"sft_weight": 0.0}}, False, "people's pairs alone, no SFT on the chosen replies"),
    "people_sft05": ({"dual": {"sft_weight": 0.5}}, False, "people's pairs alone, SFT weight 0.5"),
    "people_batch8": ({"batch_size": 8}, False, "people's pairs alone, 8 rows a step"),
}


def student_folder(student: Path) -> Path:
    """An HF folder of the student: `student` itself, or a .gguf converted once to fp32 beside it."""
    if student.is_dir():
        return student
    from hominem_pipeline.core.lm.models import convert_gguf

    target = student.with_suffix(".hf")
    return target if (target / "config.json").is_file() else convert_gguf(student, target)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--test", type=int, default=504, help="held-out pairs (after the 1,800 of the training part)")
    ap.add_argument(
        "--student", type=Path, default=None, help="an HF folder or a .gguf file (default: the project's student)"
    )
    ap.add_argument(
        "--ranked",
        type=Path,
        default=None,
        help="a preference_pairs table (pairs.parquet) for the settings that mix ranked pairs in",
    )
    ap.add_argument("--only", default=None, help="comma-separated settings (default: all): " + ", ".join(SETTINGS))
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument(
        "--batch-size", type=int, default=None, help="the evaluation's batch (default: evaluation.batch_size)"
    )
    ap.add_argument(
        "--steps",
        type=int,
        default=None,
        help="every setting's optimizer steps (a quick look; default: each setting's own)",
    )
    ap.add_argument("--out", type=Path, default=None, help="a JSON-lines file each run is appended to")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if not args.data.is_file():
        sys.exit(f"{args.data} not found; pass --data PATH to harmless-base-test.jsonl.gz")
    names = list(SETTINGS) if args.only is None else args.only.split(",")
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        sys.exit(f"unknown setting(s) {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    if args.ranked is None and any(SETTINGS[n][1] for n in names):
        names = [n for n in names if not SETTINGS[n][1]]
        print("no --ranked table: the settings that mix in the reward model's ranking are left out")

    import pandas as pd
    import torch

    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.config.loader import deep_merge, load_config
    from hominem_pipeline.core.evaluation.fixtures import base_logp_cache, load_fixtures
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.evaluation.people_pairs import implicit_reward
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.dual import DualBatching, DualStart, mixed_sampler, train_dual_adapter
    from hominem_pipeline.core.policy.lora import load_policy
    from hominem_pipeline.core.policy.pairs import people_rows, read_preference_pairs
    from hominem_pipeline.core.reward.feature_cache import SHIPPED_FEATURES

    base_cfg = load_config(root=ROOT)
    student = student_folder(args.student.resolve()) if args.student else student_path(base_cfg)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    test = held_out_test(args.data, args.test)
    fixtures = load_fixtures(base_cfg.path(base_cfg.fixtures.file), base_cfg.dimension_names)
    people = people_rows(people_pairs(base_cfg, "train"))
    ranked = read_preference_pairs([args.ranked]) if args.ranked else None
    memory = read_memory_rows(memory_paths(base_cfg))
    batch = args.batch_size or base_cfg.evaluation.batch_size
    scratch = Path(tempfile.mkdtemp(prefix="people-sweep-"))
    base = base_logp_cache(
        student, scratch / "base", base_cfg.path(SHIPPED_FEATURES)
    )  # the base's rows: measured by the first run, read by the rest
    default = base_cfg.policy
    print(
        f"student {student} on {device}; {len(people)} people's pairs, "
        f"{0 if ranked is None else len(ranked)} ranked; {len(test)} held-out pairs; "
        f"{args.seeds} seed(s) x {len(names)} settings",
        flush=True,
    )
    results: dict[str, list[dict]] = {}
    for seed in range(args.seeds):
        for name in names:
            overrides, mix, _ = SETTINGS[name]
            cfg = load_config(
                root=ROOT, overrides={"policy": deep_merge(overrides, {"max_steps": args.steps} if args.steps else {})}
            ).policy
            pairs = people if not mix else pd.concat([ranked.assign(source="ranked"), people], ignore_index=True)
            sampler = mixed_sampler(len(ranked), len(people), cfg.dual.people_share, seed) if mix else None
            started = time.monotonic()
            out = scratch / f"{name}-{seed}"
            trained = train_dual_adapter(
                pairs,
                memory,
                start=DualStart(student, shipped_reference=base_cfg.path(SHIPPED_FEATURES), device=device),
                cfg=cfg,
                out_dir=out,
                seed=seed,
                batching=DualBatching(pair_sampler=sampler),
            )
            model, tokenizer = load_policy(student, out, device)
            held, _ = implicit_reward(
                model,
                tokenizer,
                list(test["prompt"]),
                list(test["chosen"]),
                list(test["rejected"]),
                batch,
                base_cache=base,
            )
            fixed, _ = implicit_reward(
                model,
                tokenizer,
                [f.prompt for f in fixtures],
                [f.better for f in fixtures],
                [f.worse for f in fixtures],
                batch,
                base_cache=base,
            )
            cost = (
                cfg.max_steps
                * cfg.batch_size
                * cfg.max_length
                / (default.max_steps * default.batch_size * default.max_length)
            )
            row = {
                "setting": name,
                "seed": seed,
                "people_accuracy": held.accuracy,
                "people_standard_error": held.standard_error,
                "people_mean_margin": held.mean_margin,
                "fixture_accuracy": fixed.accuracy,
                "train_accuracy": trained.history[-1]["rewards/accuracies"],
                "seconds_per_step": trained.metrics["seconds_per_step"],
                "cost": cost,
                "seconds": time.monotonic() - started,
                "device": device.type,
            }
            results.setdefault(name, []).append(row)
            print(
                f"{name:18s} seed {seed}  people {held.accuracy:6.1%} +- {held.standard_error:.1%}  "
                f"margin {held.mean_margin:+.3f}  "
                f"fixtures {fixed.accuracy:6.1%}  ({row['seconds_per_step']:.2f} s/step, {row['seconds']:.0f} s)",
                flush=True,
            )
            if args.out:
                with args.out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
            del model
    print(f"\n{'setting':18s} {'cost':>5s}  {'people (mean +- sd over seeds)':>30s}  {'fixtures':>8s}  what it asks")
    for name, rows in results.items():
        acc = np.array([r["people_accuracy"] for r in rows])
        fix = np.mean([r["fixture_accuracy"] for r in rows])
        print(
            f"{name:18s} {rows[0]['cost']:5.1f}  {acc.mean():>21.1%} +- "
            f"{acc.std(ddof=1) if len(acc) > 1 else 0:.1%} (n {len(acc)})  {fix:8.1%}  "
            f"{SETTINGS[name][2]}"
        )


if __name__ == "__main__":
    main()
