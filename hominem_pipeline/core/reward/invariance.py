"""Pairs that teach the people's score what does not matter and what it must never prefer
(`reward_model.people_score.invariance`).

From a sample of the people's chosen replies, each becomes:

- **a degenerate pair** per kind, the sensible reply over one made from it: its words shuffled (word salad),
  its first sentence drowned in hashtags and emoji (spam), or an upbeat line that ignores the message
  (cheer). Target: the chosen reply ahead, as a people's pair asks.
- **an equal pair** per meaning-preserving rewrite: one typo, a few typos, the reply in lower case, or the
  message in a friendly frame. Target: no gap.

The cheer lines, spam tags and frames here are written apart from those the evaluation measures with
(`core.evaluation.degenerate`, the probing suite's frames), so a benchmark of robustness does not read the
training's own strings.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hominem_pipeline.core.evaluation.degenerate import one_typo, word_salad
from hominem_pipeline.core.evaluation.probes import sentences, typos

TRAIN_CHEER = (
    "Oh wow, how fun!! Sending sunshine and sparkles your way, pal!",
    "Yippee! Today is a fantastic day to be fantastic! Keep shining!",
    "Haha, you rock! Positive thoughts only, my friend! High five!",
    "Amazing stuff! Dream big and dance like nobody's watching!",
    "So cool!! Remember, every cloud has a silver lining! Go get 'em, tiger!",
    "Yay for you! Life's too short to frown, so keep grinning!",
    "Brilliant, love the energy! You're a total rockstar, keep it up!",
    "Whee! What a wonderful world! Big hugs and happy thoughts!",
)
TRAIN_SPAM = (
    "#Winning",
    "#Inspo",
    "@DailyDeals",
    "#FollowMe",
    "#Trending",
    "#InstaGood",
    "#NoFilter",
    "#Goals",
    "🙌",
    "💪",
    "⭐",
    "🥳",
    "😎",
    "👍",
)
TRAIN_FRAMES = (
    "Hi! {prompt} Thanks a lot.",
    "Quick question: {prompt}",
    "{prompt} Any help is appreciated.",
)


def _spam(reply: str, rng: random.Random) -> str:
    first = (sentences(reply) or [reply])[0]
    return f"{first} {' '.join(rng.sample(TRAIN_SPAM, 8))}"


DEGENERATE: dict[str, Callable[[str, random.Random], str]] = {
    "word_salad": word_salad,
    "spam": _spam,
    "cheer": lambda reply, rng: rng.choice(TRAIN_CHEER),
}
REWRITES: dict[str, Callable[[str, random.Random], str]] = {
    "one_typo": one_typo,
    "typos": typos,
    "lower_case": lambda reply, rng: reply.lower(),
}


@dataclass(frozen=True)
class InvariancePairs:
    """New exchanges and the pairs they make with their sources: `pairs[i]` is (source row, new row) with
    the source row an index the caller gave and the new row an index into `texts`; `targets` 1 (the source
    ahead) or 0 (equal); `kinds` names each pair's degenerate kind or rewrite."""

    texts: list[tuple[str, str]]
    pairs: np.ndarray
    targets: np.ndarray
    kinds: list[str]

    def __len__(self) -> int:
        return len(self.pairs)


def _draw(seed: int, prompt: str, reply: str) -> random.Random:
    """The draws for one exchange: its content and `seed` decide them, whatever else is trained beside it and
    whichever day trains it."""
    digest = hashlib.sha256(f"{seed}\x00{prompt}\x00{reply}".encode()).hexdigest()
    return random.Random(digest)


def invariance_pairs(
    prompts: Sequence[str], replies: Sequence[str], rows: Sequence[int], sources: int, seed: int = 0
) -> InvariancePairs:
    """Degenerate and equal pairs for at most `sources` of the exchanges (`prompts[i]`, `replies[i]`) at
    `rows`: one per kind of `DEGENERATE` and one per rewrite of `REWRITES`, plus the message in one of
    `TRAIN_FRAMES`. The exchanges are chosen, and their pairs made, by their content and `seed` alone, so the
    same shipped pairs give the same texts on any day (their encoder rows ship with the project). A
    rewrite that changes nothing (a reply with no word a typo can reach, one already in lower case) makes no
    pair."""
    first = {(prompts[r], replies[r]): int(r) for r in reversed(list(rows))}
    ranked = sorted(first, key=lambda text: _draw(seed, *text).random())
    texts: list[tuple[str, str]] = []
    pairs, targets, kinds = [], [], []
    for prompt, reply in ranked[:sources]:
        source, rng = first[prompt, reply], _draw(seed, prompt, reply)
        made = [(kind, prompt, make(reply, rng), 1.0) for kind, make in DEGENERATE.items()]
        made += [(kind, prompt, make(reply, rng), 0.0) for kind, make in REWRITES.items()]
        made.append(("frame", rng.choice(TRAIN_FRAMES).format(prompt=prompt), reply, 0.0))
        for kind, new_prompt, new_reply, target in made:
            if (new_prompt, new_reply) == (prompt, reply) or not new_reply.strip():
                continue
            pairs.append((source, len(texts)))
            texts.append((new_prompt, new_reply))
            targets.append(target)
            kinds.append(kind)
    return InvariancePairs(
        texts, np.asarray(pairs, dtype=np.int64).reshape(-1, 2), np.asarray(targets, dtype=np.float64), kinds
    )
