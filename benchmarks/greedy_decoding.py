"""Greedy decoding on one shared cache (`core/lm/greedy.py`) against `generate` in batches, on what the online gate
decodes for a candidate: the held-out prompts, the memory probe's questions and the smoke prompt (the evaluation's
token limit), and the first `online.reply_check_items` items of each reply check (each check's own limit), with the
day's adapter merged on the student.

The baseline is how they were decoded before: `generate` in batches of `evaluation.batch_size`, one token limit per
batch (each batch runs until its longest reply ends, and pays a CPU step's fixed cost to the end). Each way: seconds
(the best of `--repeats`, after a warm-up), and the share of replies identical to the baseline's.

    .venv/bin/python benchmarks/greedy_decoding.py --adapter data/lora_adapter/<date>/<version> --rows 48 96

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
    ap.add_argument("--rows", type=int, nargs="+", default=[48, 96], help="rows decoded together on the shared cache")
    ap.add_argument("--repeats", type=int, default=2, help="timed decodes per way (the minimum is reported)")
    args = ap.parse_args()

    from peft import PeftModel

    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.memory import fact_questions, read_memory_rows
    from hominem_pipeline.core.evaluation.reply_checks import load_reply_checks
    from hominem_pipeline.core.evaluation.reply_checks.sets import model_input
    from hominem_pipeline.core.lm.generation import chat_text, generate, messages_text
    from hominem_pipeline.core.lm.greedy import greedy
    from hominem_pipeline.core.lm.models import load_student, student_path
    from hominem_pipeline.core.online.facts import with_stated_facts
    from hominem_pipeline.core.online.gate import SMOKE_PROMPT
    from hominem_pipeline.core.online.updates import held_out_prompts
    from hominem_pipeline.core.policy.lora import merged
    from hominem_pipeline.core.policy.metadata import AdapterMetadata

    project = args.project.resolve()
    cfg = config_on(project)  # this code's config, the project's data and student
    ev = cfg.evaluation
    adapter = Path(args.adapter) if Path(args.adapter).is_absolute() else project / args.adapter
    prompts = held_out_prompts(cfg, list(AdapterMetadata.read(adapter).preference_data))
    questions = fact_questions(read_memory_rows(memory_paths(cfg)))
    asked = prompts + ([] if questions is None else list(questions["prompt"])) + [SMOKE_PROMPT]
    base, tokenizer = load_student(student_path(cfg))
    texts = [chat_text(tokenizer, p) for p in asked]
    limits = [ev.max_new_tokens] * len(texts)
    sets = load_reply_checks(cfg).first(cfg.online.reply_check_items)
    view = with_stated_facts if cfg.serving.recall_facts else None
    for check, items in sets.items.items():
        texts += [messages_text(tokenizer, model_input(i, view)) for i in items]
        limits += [sets.max_new_tokens[check]] * len(items)
    model = PeftModel.from_pretrained(base, adapter).eval()
    print(
        f"{adapter.name} on {student_path(cfg).name}: {len(asked)} prompts and questions, {len(texts) - len(asked)} "
        f"reply-check items; token limits {sorted(set(limits))}"
    )

    def batches() -> list[str]:
        out: dict[int, str] = {}
        for limit in sorted(set(limits)):
            todo = [i for i, n in enumerate(limits) if n == limit]
            for start in range(0, len(todo), ev.batch_size):
                chunk = todo[start : start + ev.batch_size]
                got = generate(
                    model,
                    tokenizer,
                    [texts[i] for i in chunk],
                    max_new_tokens=limit,
                    seed=0,
                    repetition_penalty=ev.repetition_penalty,
                    plain_start=ev.plain_start,
                )
                out.update({i: g.text for i, g in zip(chunk, got)})
        return [out[i] for i in range(len(texts))]

    def shared(rows: int):
        return lambda: [
            g.text
            for g in greedy(
                model,
                tokenizer,
                texts,
                limits,
                repetition_penalty=ev.repetition_penalty,
                plain_start=ev.plain_start,
                rows=rows,
            )
        ]

    ways = {f"generate, batches of {ev.batch_size} by token limit": batches}
    ways |= {f"greedy, {rows} rows on one cache": shared(rows) for rows in args.rows}
    results, baseline = [], None
    with merged(model):
        greedy(model, tokenizer, texts[:2], 2)
        for way, decode in ways.items():
            best, replies = float("inf"), []
            for _ in range(args.repeats):
                started = time.perf_counter()
                replies = decode()
                best = min(best, time.perf_counter() - started)
            baseline = baseline or (best, replies)
            same = sum(a == b for a, b in zip(replies, baseline[1])) / len(replies)
            results.append((way, best, baseline[0] / best, same))
            print(
                f"{way}: {best:.1f} s, {baseline[0] / best:.2f}x the first, {same:.0%} of replies identical",
                flush=True,
            )
    print(f"\n| way | seconds ({len(texts)} replies) | speed-up | replies identical to the first row's |")
    print("| --- | --- | --- | --- |")
    for way, sec, ratio, same in results:
        print(f"| {way} | {sec:.1f} | {ratio:.2f}x | {same:.0%} |")


if __name__ == "__main__":
    main()
