"""How the evaluation's greedy decoding scales with `evaluation.batch_size`, on the prompts the gate and
the evaluation decode: a day's held-out prompts and the memory probe's questions (and the gate's smoke
prompt), with the day's adapter on the student. For each batch size, two ways: each group in its own
batches (as the evaluation decodes the held-out prompts), and every group together (as the gate decodes
what its cache does not hold, `gate.replies_in_groups`).

On a CPU a decoding step costs little more for 38 sequences than for 18 (the step's fixed cost
dominates a 135M model), so three groups of 18, 19 and 1 pay for three full decodes. For each
batch size and way: seconds (the best of `--repeats`, after one warm-up call), and the share of replies
identical to the first row's (padding changes a greedy decode only where two tokens are nearly tied).

    .venv/bin/python benchmarks/greedy_batch_size.py --adapter data/lora_adapter/<date>/<version> --sizes 32 48 64

Reads the project's data/ (the adapter and the prompts it was evaluated on); needs no ../shared data.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import config_on


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--project", type=Path, default=ROOT, help="the project whose data/ holds the adapter (default: this repo)"
    )
    ap.add_argument("--adapter", required=True, help="a daily adapter folder, relative to --project or absolute")
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[32, 48, 64],
        help="batch sizes; the first, each group alone, is the baseline",
    )
    ap.add_argument("--repeats", type=int, default=2, help="timed decodes per batch size (the minimum is reported)")
    args = ap.parse_args()

    from peft import PeftModel

    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.compare import greedy_replies
    from hominem_pipeline.core.evaluation.memory import fact_questions, read_memory_rows
    from hominem_pipeline.core.lm.models import load_student, student_path
    from hominem_pipeline.core.online.gate import SMOKE_PROMPT, replies_in_groups
    from hominem_pipeline.core.online.updates import held_out_prompts
    from hominem_pipeline.core.policy.metadata import AdapterMetadata

    project = args.project.resolve()
    cfg = config_on(project)  # this code's config, the project's data and student
    adapter = Path(args.adapter) if Path(args.adapter).is_absolute() else project / args.adapter
    prompts = held_out_prompts(cfg, list(AdapterMetadata.read(adapter).preference_data))
    questions = fact_questions(read_memory_rows(memory_paths(cfg)))
    groups = {
        "held-out prompts": prompts,
        "memory questions": [] if questions is None else list(questions["prompt"]),
        "smoke prompt": [SMOKE_PROMPT],
    }
    base, tokenizer = load_student(student_path(cfg))
    model = PeftModel.from_pretrained(base, adapter).eval()
    print(
        f"{adapter.name} on {student_path(cfg).name}: " + ", ".join(f"{len(g)} {name}" for name, g in groups.items())
    )

    greedy_replies(model, tokenizer, prompts[:2], cfg.evaluation, cfg.project.seed, "warm-up")
    rows, baseline = [], None
    for size in args.sizes:
        ev = cfg.evaluation.model_copy(update={"batch_size": size})
        sized = cfg.model_copy(update={"evaluation": ev})
        ways = {
            "each group alone": lambda: [
                r.text
                for g in groups.values()
                for r in greedy_replies(model, tokenizer, g, ev, cfg.project.seed, f"batch {size}")
            ],
            "together": lambda: replies_in_groups(
                model, tokenizer, "default", list(groups.values()), {}, sized, cfg.project.seed
            ),
        }
        for way, decode in ways.items():
            best, replies = float("inf"), []
            for _ in range(args.repeats):
                started = time.perf_counter()
                replies = decode()
                best = min(best, time.perf_counter() - started)
            baseline = baseline or (best, replies)
            same = sum(a == b for a, b in zip(replies, baseline[1])) / len(replies)
            rows.append((size, way, best, baseline[0] / best, same))
            print(
                f"batch_size {size}, {way}: {best:.1f} s, {baseline[0] / best:.2f}x the first, "
                f"{same:.0%} of replies identical to it",
                flush=True,
            )
    print(
        f"\n| batch_size | groups | seconds ({sum(len(g) for g in groups.values())} replies) | speed-up | replies "
        "identical to the first row's |"
    )
    print("| --- | --- | --- | --- | --- |")
    for size, way, sec, ratio, same in rows:
        print(f"| {size} | {way} | {sec:.1f} | {ratio:.2f}x | {same:.0%} |")


if __name__ == "__main__":
    main()
