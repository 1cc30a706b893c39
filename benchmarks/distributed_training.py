"""Seconds per optimizer step of the `dual` trainer in one process against the same training launched
across N processes (`accelerate launch --multi_gpu --num_processes N`, torchrun underneath; gloo on CPUs,
NCCL on GPUs), in the same run, on the same batches.

Both train a fresh LoRA on the student from the same `--batch-size` HH-RLHF pairs (the first that fit in
`--max-length` tokens, as benchmarks/policy_step_speed.py takes them) for `--steps` steps, with the
same config: across N processes each one takes its share of every batch and the gradients are averaged,
so the batch a step learns from is the same. Printed: seconds per step, the ratio, and each step's loss
side by side (the same trajectory, up to the mean of the shards' means).

On a CPU machine the processes share its cores: one process uses them all through its threads, N split
them (each gets cores / N threads), so the ratio says what the split costs or gains there; on a machine
with N GPUs each process has its own.

    .venv/bin/python benchmarks/distributed_training.py                    # 2 processes, 4 pairs x 256 tokens, 6 steps
    .venv/bin/python benchmarks/distributed_training.py --processes 2 --steps 4 --max-length 128

Needs ../shared/data/hh-rlhf/ (or --data PATH) and `make setup` (the student folder).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.policy_step_speed import DEFAULT_DATA, same_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--student", default=None, help="student HF folder (default: models.student from config)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=256)
    args = parser.parse_args()
    if not Path(args.data).exists():
        sys.exit(f"no HH-RLHF file at {args.data}; pass --data PATH to harmless-base-test.jsonl.gz")

    import torch

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.launch import RESULT, LaunchSpec, launch_command, write_spec

    cfg = load_config(
        root=ROOT,
        overrides={
            "policy": {
                "mode": "dual",
                "max_steps": args.steps,
                "batch_size": args.batch_size,
                "max_length": args.max_length,
                "dual": {"mixing": "fixed", "memory_fraction": 0.0, "channels": {"monitor_every": 0}},
            }
        },
    )
    student = Path(args.student) if args.student else student_path(cfg)
    pairs = same_batch(Path(args.data), student, args.batch_size, args.max_length).assign(
        chosen_reward_intensity=0.5, chosen_safety_score=1.0
    )
    cores = os.cpu_count() or 1
    results = {}
    with tempfile.TemporaryDirectory(prefix="hominem-distributed-") as scratch:
        for n in (1, args.processes):
            spec = write_spec(
                Path(scratch) / f"p{n}",
                LaunchSpec(
                    mode="dual", student=student, policy=cfg.policy, seed=0, out_dir=Path(scratch) / f"adapter{n}"
                ),
                pairs=pairs,
            )
            threads = "1" if torch.cuda.is_available() else str(max(1, cores // n))
            # one process as the pipeline trains by default; n as it does under runtime.train_processes
            cmd = (
                [sys.executable, "-m", "hominem_pipeline.core.policy.launch", str(spec)]
                if n == 1
                else launch_command(spec, n)
            )
            done = subprocess.run(
                cmd, env={**os.environ, "OMP_NUM_THREADS": threads}, cwd=ROOT, capture_output=True, text=True
            )
            if done.returncode:
                sys.exit(f"{n} process(es) failed:\n{done.stderr[-3000:]}")
            results[n] = json.loads((spec.parent / RESULT).read_text())
            print(
                f"  {n} process(es), {threads} thread(s) each: {results[n]['metrics']['seconds_per_step']:.2f} s/step",
                flush=True,
            )
    one, many = results[1], results[args.processes]
    device = "cuda" if torch.cuda.is_available() else f"cpu ({cores} cores)"
    print(f"\ndual, {args.batch_size} pairs x up to {args.max_length} tokens, {args.steps} steps, {device}")
    print(f"{'processes':<10} {'s/step':>7} {'vs one':>7}")
    for n, r in results.items():
        print(
            f"{n:<10} {r['metrics']['seconds_per_step']:>7.2f} "
            f"{r['metrics']['seconds_per_step'] / one['metrics']['seconds_per_step']:>6.2f}x"
        )
    print("\nstep  loss (1 process)  loss (" + str(args.processes) + " processes)")
    for a, b in zip(one["history"], many["history"]):
        print(f"{a['step']:<5} {a['loss']:>16.4f}  {b['loss']:>16.4f}")


if __name__ == "__main__":
    main()
