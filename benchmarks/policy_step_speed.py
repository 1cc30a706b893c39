"""Seconds per optimizer step of the dual-channel trainer against plain TRL DPO, on the same batch, in
the same run, and the peak memory of each.

Both train a fresh LoRA on the student from the same `--batch-size` HH-RLHF pairs (so every step sees exactly the
same batch in both: the first pairs that fit in `--max-length` tokens untruncated, since TRL drops a pair whose
prompt fills the budget and the dual trainer keeps it) for `--steps` steps. Each variant runs in its own child
process, so its peak memory (resident set on a CPU, CUDA max allocated on a GPU) is its own; the figure printed is
the peak minus the memory held once the model is loaded (what training adds). Variants:

    dpo            TRL's DPOTrainer (the baseline) dual           the dual-channel loop, SFT on the chosen replies +
    intensity-weighted DPO, no memory rows dual+memory    the same with memory_fraction 0.25 of the batch taken by
    memory-file rows dual+monitor   dual with the dominance monitor on every step (each channel's gradient on its
    own: a second backward pass) dual+rates     dual with per-channel learning rates (memory 0.5x): one AdamW per
    channel, every step split like dual+monitor

The `dual` variants other than `+monitor` run with the monitor off (`policy.dual.channels.monitor_every: 0`), so
`dual+monitor` / `dual` is what a measured step costs.

    .venv/bin/python benchmarks/policy_step_speed.py                 # student from config, 4 pairs x 256 tokens, 6
    steps .venv/bin/python benchmarks/policy_step_speed.py --steps 3 --max-length 128 .venv/bin/python
    benchmarks/policy_step_speed.py --config config/training/lora_dual.yaml   # that overlay's LoRA and dual
    settings

`--config` overlays a YAML file on config/hominem.yaml for every variant (the LoRA both train, the
dual weights); the mode, steps, batch and memory share stay the benchmark's.

Needs ../shared/data/hh-rlhf/ (or --data PATH) and `make setup` (the student folder).
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"
VARIANTS = ("dpo", "dual", "dual+memory", "dual+monitor", "dual+rates")
CHANNELS = {"dual+monitor": {"monitor_every": 1}, "dual+rates": {"monitor_every": 0, "memory_lr_factor": 0.5}}


def peak_bytes() -> int:
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def same_batch(data: Path, student: Path, n: int, max_length: int):
    """The first `n` HH-RLHF pairs whose prompt with either reply fits in `max_length` tokens: TRL drops
    pairs whose prompt alone fills the budget and cuts long replies, the dual trainer keeps and
    left-truncates them, so only pairs neither touches make literally the same batch for both."""
    from transformers import AutoTokenizer

    from hominem_pipeline.core.human.preferences import parse_preference_file
    from hominem_pipeline.core.policy.sequences import encode

    tokenizer = AutoTokenizer.from_pretrained(student)
    pairs = parse_preference_file(data, "hh-rlhf", "bench").pairs
    fits = [
        i
        for i, r in enumerate(pairs.itertuples())
        if all(len(encode(tokenizer, r.prompt, reply, 10**6)[0]) <= max_length for reply in (r.chosen, r.rejected))
    ]
    return pairs.iloc[fits[:n]].reset_index(drop=True)


def run_variant(variant: str, args: argparse.Namespace) -> dict:
    """One variant in this process: train, then report seconds per step and memory."""
    import pandas as pd
    import torch

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.dpo import train_dpo_adapter
    from hominem_pipeline.core.policy.dual import DualStart, train_dual_adapter

    logging.basicConfig(level=logging.WARNING)
    cfg = load_config(
        args.config,
        root=ROOT,
        overrides={
            "policy": {
                "mode": "dpo" if variant == "dpo" else "dual",
                "max_steps": args.steps,
                "batch_size": args.batch_size,
                "max_length": args.max_length,
                "dual": {
                    "mixing": "fixed",
                    "memory_fraction": 0.25 if variant == "dual+memory" else 0.0,
                    "channels": CHANNELS.get(variant, {"monitor_every": 0}),
                },
            }
        },
    )
    student = Path(args.student) if args.student else student_path(cfg)
    pairs = same_batch(Path(args.data), student, args.batch_size, args.max_length).assign(
        chosen_reward_intensity=0.5, chosen_safety_score=1.0
    )
    memory = (
        read_memory_rows([ROOT / "config" / "sft"])
        if variant == "dual+memory"
        else pd.DataFrame(columns=["prompt", "response"])
    )
    torch.set_num_threads(args.threads or torch.get_num_threads())
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(
        student, dtype=torch.float32
    )  # what loading costs, before the baseline reading
    loaded = peak_bytes()
    with tempfile.TemporaryDirectory() as out:
        if variant == "dpo":
            result = train_dpo_adapter(pairs, student_path=student, cfg=cfg.policy, out_dir=Path(out), seed=0)
        else:
            result = train_dual_adapter(
                pairs, memory, start=DualStart(student), cfg=cfg.policy, out_dir=Path(out), seed=0
            )
    return {
        "variant": variant,
        "seconds_per_step": result.metrics["seconds_per_step"],
        "steps": result.metrics["steps"],
        "peak_gib": peak_bytes() / 2**30,
        "training_gib": (peak_bytes() - loaded) / 2**30,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--student", default=None, help="student HF folder (default: models.student from config)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument(
        "--config",
        default=None,
        help="YAML overlaid on config/hominem.yaml for every variant (e.g. config/training/lora_dual.yaml)",
    )
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # internal: run one variant, print JSON
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args)))
        return
    if not Path(args.data).exists():
        sys.exit(f"no HH-RLHF file at {args.data}; pass --data PATH to harmless-base-test.jsonl.gz")
    rows = []
    for variant in VARIANTS:
        cmd = (
            [
                sys.executable,
                __file__,
                "--variant",
                variant,
                "--data",
                args.data,
                "--steps",
                str(args.steps),
                "--batch-size",
                str(args.batch_size),
                "--max-length",
                str(args.max_length),
                "--threads",
                str(args.threads),
            ]
            + (["--student", args.student] if args.student else [])
            + (["--config", args.config] if args.config else [])
        )
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{variant} failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"  {variant}: {rows[-1]['seconds_per_step']:.2f} s/step", flush=True)
    base = rows[0]["seconds_per_step"]
    print(
        f"\n{args.batch_size} pairs x up to {args.max_length} tokens, {args.steps} steps, device "
        f"{rows[0]['device']}, {rows[0]['threads']} threads" + (f", config {args.config}" if args.config else "")
    )
    print(f"{'variant':<13} {'s/step':>7} {'vs TRL DPO':>10} {'peak GiB':>9} {'training adds GiB':>18}")
    for r in rows:
        print(
            f"{r['variant']:<13} {r['seconds_per_step']:>7.2f} {r['seconds_per_step'] / base:>9.2f}x "
            f"{r['peak_gib']:>9.2f} {r['training_gib']:>18.2f}"
        )


if __name__ == "__main__":
    main()
