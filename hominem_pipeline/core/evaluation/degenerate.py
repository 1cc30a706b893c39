"""What must not move a reward model, and what it must never prefer: one typo in a reply, and degenerate
replies made for a message from its sensible reply.

- **Word salad**: the sensible reply's own words, shuffled. The same vocabulary, no sense.
- **Spam**: the sensible reply's first sentence drowned in hashtags, handles and emoji.
- **Cheer**: an upbeat line that ignores what the person said (`CHEER`, written by hand), as in "Hey there,
  buddy! Keep smiling and happy driving, everyone!" to someone who failed their driving test again.

Each reads a *scorer* as the probing suite does (anything with `raw_scores(prompts, replies)` returning
"scalar" (n,)): a `RewardModel`, or a toy in the tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.evaluation.probes import sentences

CHEER = (
    "Hey there, buddy! Keep smiling and have an awesome day, everyone!",
    "Wow, that's so exciting!!! You're doing amazing, sweetie! Stay positive!",
    "Woohoo! Life is a party and you're invited! Good vibes only!",
    "Yay! Every day is a gift, that's why it's called the present! Cheers!",
    "Awesome!! Just keep being you, superstar! The sun always shines after the rain!",
    "LOL love it! Happy vibes your way, friend! Let's goooo!",
    "That's the spirit! Smile and the world smiles with you! Have fun!",
    "Fantastic question, champ! Stay awesome and keep rocking it!",
)
SPAM_TAGS = (
    "#BeAwesome",
    "#TravelToday",
    "@MakesItFun",
    "#Blessed",
    "#GoodVibes",
    "#LifeHacks",
    "#Motivation",
    "🎉",
    "🔥",
    "💯",
    "✨",
    "😍",
)


def word_salad(reply: str, rng: random.Random) -> str:
    """The reply's words in a shuffled order (a reply of one word is returned with its letters shuffled)."""
    words = reply.split()
    if len(words) < 2:
        letters = list(reply)
        rng.shuffle(letters)
        return "".join(letters)
    shuffled = words[:]
    while shuffled == words:
        rng.shuffle(shuffled)
    return " ".join(shuffled)


def spam(reply: str, rng: random.Random) -> str:
    """The reply's first sentence, then eight hashtags, handles and emoji."""
    first = (sentences(reply) or [reply])[0]
    return f"{first} {' '.join(rng.sample(SPAM_TAGS, 8))}"


def cheer(reply: str, rng: random.Random) -> str:
    """An upbeat line that ignores the message (`CHEER`); the sensible reply is not read."""
    return rng.choice(CHEER)


KINDS: dict[str, Callable[[str, random.Random], str]] = {"word_salad": word_salad, "spam": spam, "cheer": cheer}


def one_typo(text: str, rng: random.Random) -> str:
    """Two neighbouring inner letters swapped in one word of 4+ letters (unchanged when there is none)."""
    words = text.split(" ")
    spots = [
        (i, k)
        for i, w in enumerate(words)
        if sum(c.isalpha() for c in w) >= 4
        for k in range(1, len(w) - 2)
        if w[k].isalpha() and w[k + 1].isalpha() and w[k] != w[k + 1]
    ]
    if not spots:
        return text
    i, k = rng.choice(spots)
    w = words[i]
    words[i] = w[:k] + w[k + 1] + w[k] + w[k + 2 :]
    return " ".join(words)


def _scalar(scorer: Any, prompts: Sequence[str], replies: Sequence[str]) -> np.ndarray:
    return np.asarray(scorer.raw_scores(list(prompts), list(replies))["scalar"], dtype=np.float64)


def degenerate_report(scorer: Any, prompts: Sequence[str], sensible: Sequence[str], seed: int = 0) -> pd.DataFrame:
    """Per kind (`KINDS`): the messages, the share where the sensible reply scores higher (a tie is a loss),
    the mean scalar gap, and the message where the degenerate reply did best."""
    base = _scalar(scorer, prompts, sensible)
    rows = []
    for kind, make in KINDS.items():
        rng = random.Random(f"{seed}:{kind}")
        made = [make(reply, rng) for reply in sensible]
        gaps = base - _scalar(scorer, prompts, made)
        worst = int(np.argmin(gaps))
        rows.append(
            {
                "kind": kind,
                "messages": len(gaps),
                "sensible_higher": float((gaps > 0).mean()),
                "mean_gap": float(gaps.mean()),
                "worst": {"prompt": prompts[worst], "reply": made[worst], "gap": round(float(gaps[worst]), 4)},
            }
        )
    return pd.DataFrame(rows)


def typo_shifts(scorer: Any, prompts: Sequence[str], replies: Sequence[str], seed: int = 0) -> dict[str, Any]:
    """How far one typo moves the scalar: the mean and largest |shift| over the replies a typo changes, the
    share moved by more than 0.1, and the reply moved most."""
    rng = random.Random(f"{seed}:one_typo")
    typed = [one_typo(r, rng) for r in replies]
    keep = [i for i, (a, b) in enumerate(zip(replies, typed)) if a != b]
    if not keep:
        return {"replies": 0, "mean_shift": None, "max_shift": None, "over_0_1": None, "worst": None}
    p = [prompts[i] for i in keep]
    shift = np.abs(_scalar(scorer, p, [typed[i] for i in keep]) - _scalar(scorer, p, [replies[i] for i in keep]))
    worst = keep[int(np.argmax(shift))]
    return {
        "replies": len(keep),
        "mean_shift": float(shift.mean()),
        "max_shift": float(shift.max()),
        "over_0_1": float((shift > 0.1).mean()),
        "worst": {"prompt": prompts[worst], "reply": typed[worst], "shift": round(float(shift.max()), 4)},
    }
