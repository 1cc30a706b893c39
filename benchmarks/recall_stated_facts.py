"""Does the student say back the name a person gave earlier in the conversation, with and without
`serving.recall_facts` (core/online/facts.py `with_stated_facts`: the person's earlier statements about
themselves repeated, in their words, before their last message in the model's input)?

Each conversation: the person gives their name and a worry, the assistant answers, then the person asks
one of three questions about their name (after another sentence, alone, or indirectly). 16 names x 3
questions, greedy decoding (the evaluation's), 32 tokens; a reply counts when it contains the name.
Two kinds of conversation: `written`, the assistant's answer written here (the same for every model),
and `free`, the model's own answer to the first message (48 tokens, as `hominem chat` would have it,
with recall_facts as the row says), which is what a person meets in a chat.

    .venv/bin/python benchmarks/recall_stated_facts.py            # the base student
    .venv/bin/python benchmarks/recall_stated_facts.py --adapter live

Needs the converted student (`make run` or `hominem setup`); no ../shared data.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.lm.generation import generate, messages_text
from hominem_pipeline.core.online.facts import with_stated_facts

NAMES = [
    "Ana",
    "Oskar",
    "Priya",
    "Tomasz",
    "Wen",
    "Kofi",
    "Ines",
    "Dmitri",
    "Lena",
    "Marco",
    "Sofia",
    "Ravi",
    "Yuki",
    "Elif",
    "Nadia",
    "Hugo",
]
QUESTIONS = [
    "My manager keeps changing the deadlines. Anyway, what is my name?",
    "What is my name?",
    "Do you remember my name?",
]


def conversation(name: str, question: str) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"Hi! My name is {name}. I had a rough week at work."},
        {
            "role": "assistant",
            "content": "I'm sorry to hear that. Do you want to talk about what happened at work this week?",
        },
        {"role": "user", "content": question},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--adapter", default=None, help="`live`, `latest` or an adapter folder (default: the base student)"
    )
    args = parser.parse_args()
    from hominem_pipeline.core.lm.models import prepare_student
    from hominem_pipeline.core.policy.lora import load_policy
    from hominem_pipeline.serving.server import resolve_adapter

    cfg = load_config(root=ROOT)
    adapter = resolve_adapter(cfg, args.adapter) if args.adapter else None
    model, tokenizer = load_policy(prepare_student(cfg), adapter)
    started = time.monotonic()
    print(
        f"{len(NAMES)} names x {len(QUESTIONS)} questions, "
        f"{'adapter ' + str(adapter) if adapter else 'the base student'}, greedy, 32 tokens"
    )
    penalty = cfg.evaluation.repetition_penalty
    for label, view in (("without recall_facts", lambda m: m), ("with recall_facts", with_stated_facts)):
        opening = [conversation(n, "")[:1] for n in NAMES]
        own = generate(
            model,
            tokenizer,
            [messages_text(tokenizer, view(c)) for c in opening],
            max_new_tokens=48,
            seed=0,
            repetition_penalty=penalty,
        )
        for kind in ("written", "free"):
            said = 0
            for question in QUESTIONS:
                convs = [conversation(n, question) for n in NAMES]
                if kind == "free":  # the model's own first answer in place of the written one
                    convs = [
                        [c[0], {"role": "assistant", "content": r.text.strip()}, c[2]] for c, r in zip(convs, own)
                    ]
                replies = generate(
                    model,
                    tokenizer,
                    [messages_text(tokenizer, view(c)) for c in convs],
                    max_new_tokens=32,
                    seed=0,
                    repetition_penalty=penalty,
                )
                said += sum(n in r.text for n, r in zip(NAMES, replies))
            total = len(NAMES) * len(QUESTIONS)
            print(
                f"{label:22s} {kind:8s} the name said back in {said}/{total} replies ({100 * said / total:.0f}%)",
                flush=True,
            )
    print(f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
