"""Which decoding gives sentences: the student's replies to every contrast fixture prompt and every
seed prompt under each setting, in one run, counted as

    sentences   replies that start with an ASCII character, are at least 90% ASCII and hold at
                least three words (emoji strings, other scripts and empty replies are not)
    loops       replies whose word 3-grams are less than 70% distinct (a phrase going round)

Settings: greedy at repetition penalty 1.0 and 1.1, the service's sampling (temperature 0.7, top-p
0.9, penalty 1.1, seeded), each with and without `plain_start` (no emoji or symbol token first).
The evaluation uses `evaluation.repetition_penalty` and `evaluation.plain_start`.

    .venv/bin/python benchmarks/evaluation_decoding.py --limit 132   # the fixtures' prompts, 64 new tokens
    .venv/bin/python benchmarks/evaluation_decoding.py               # and every seed prompt (~4x longer)

Needs `make setup` (the student folder).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.evaluation.fixtures import load_fixtures
from hominem_pipeline.core.lm.generation import chat_text, generate
from hominem_pipeline.core.lm.models import load_student, student_path
from hominem_pipeline.core.teacher.prompts import load_seed_prompts

SETTINGS = {  # name -> generate() keyword arguments
    "greedy, penalty 1.0": {"repetition_penalty": 1.0},
    "greedy, penalty 1.0, plain start": {"repetition_penalty": 1.0, "plain_start": True},
    "greedy, penalty 1.1": {"repetition_penalty": 1.1},
    "greedy, penalty 1.1, plain start": {"repetition_penalty": 1.1, "plain_start": True},
    "sampled as served": {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.1},
    "sampled as served, plain start": {
        "temperature": 0.7,
        "top_p": 0.9,
        "repetition_penalty": 1.1,
        "plain_start": True,
    },
}


def is_sentence(text: str) -> bool:
    text = text.strip()
    return (
        bool(text)
        and text[0].isascii()
        and sum(c.isascii() for c in text) / len(text) >= 0.9
        and len(re.findall(r"[A-Za-z]{2,}", text)) >= 3
    )


def loops(text: str) -> bool:
    words = text.split()
    grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    return bool(grams) and len(set(grams)) / len(grams) < 0.7


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="the first N prompts only (the fixtures' come first)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: evaluation.max_new_tokens")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    cfg = load_config(None)
    seeds = [p.text for p in load_seed_prompts(cfg.path(cfg.prompts.seed_file), cfg.prompts.categories)]
    fixtures = [f.prompt for f in load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)]
    prompts = list(dict.fromkeys(fixtures + seeds))[: args.limit]
    tokens = args.max_new_tokens or cfg.evaluation.max_new_tokens
    model, tokenizer = load_student(student_path(cfg))
    texts = [chat_text(tokenizer, p) for p in prompts]
    print(
        f"{len(prompts)} prompts ({len(seeds)} seed, {len(fixtures)} fixture, duplicates once), {tokens} "
        f"new tokens, batch {args.batch_size}",
        flush=True,
    )
    print(f"{'setting':36s} {'sentences':>11s} {'loops':>6s} {'seconds':>8s}  first replies that are not sentences")
    for name, settings in SETTINGS.items():
        started = time.monotonic()
        replies = []
        for start in range(0, len(texts), args.batch_size):
            replies += [
                g.text
                for g in generate(
                    model, tokenizer, texts[start : start + args.batch_size], max_new_tokens=tokens, seed=0, **settings
                )
            ]
        seconds = time.monotonic() - started
        bad = [r for r in replies if not is_sentence(r)]
        print(
            f"{name:36s} {len(replies) - len(bad):>5d}/{len(replies):<5d} {sum(map(loops, replies)):>6d} "
            f"{seconds:>8.0f}  " + " | ".join(repr(r[:40]) for r in bad[:3]),
            flush=True,
        )


if __name__ == "__main__":
    main()
