"""Plain, checkable tastes a person may have about replies, and the text features they read.

A taste says which messages it speaks to (`applies`) and whether a reply to one keeps it (`keeps`): "brief" (at
most 30 words), "asks back" (the reply ends with a question), "lists for how-to" (a how-to message gets a bulleted
or numbered list). The taste test (`benchmarks/taste_test.py`) teaches the student one of them through the page's
own calls and measures the share of held-out replies that keep it (`taste_share`, with its standard error). New
tastes are added to `TASTES`, in this one place.

The same text features (`words`, `asks_back`, `has_list`, `apologises`, `exclaims`) are what a person's taste model
reads beside the reward model's outputs (`core.attune.personal`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)])\s+\S", re.MULTILINE)
_APOLOGY = re.compile(r"\b(?:sorry|apologi[sz]e|apologies)\b", re.IGNORECASE)
_HOW_TO = re.compile(
    r"\b(?:how (?:do|can|should|would) (?:i|you|we)|how to|steps? (?:to|for)|what(?:'s| is) the best way to|"
    r"give me (?:some )?(?:tips|steps|ways)|tips (?:for|on|to)|ways to|guide (?:to|for|me))\b",
    re.IGNORECASE,
)


def words(reply: str) -> int:
    """The reply's words (runs of non-space)."""
    return len(reply.split())


def asks_back(reply: str) -> bool:
    """The reply ends with a question (its last sentence ends with '?', closing quotes and brackets aside)."""
    return reply.rstrip().rstrip("\"')]\u201d\u2019 ").endswith("?")


def has_list(reply: str) -> bool:
    """The reply holds a bulleted or numbered list: at least two lines that start with '-', '*', a bullet, or
    '1.' / '1)'."""
    return len(_LIST_ITEM.findall(reply)) >= 2


def apologises(reply: str) -> bool:
    return bool(_APOLOGY.search(reply))


def exclaims(reply: str) -> bool:
    return "!" in reply


def is_how_to(message: str) -> bool:
    """The message asks how to do something (how do I, how to, steps to, tips for, ...)."""
    return bool(_HOW_TO.search(message))


@dataclass(frozen=True)
class Taste:
    """A checkable taste: `keeps(reply)` on the messages it `applies` to (every message: None)."""

    name: str
    what: str  # in a person's words
    keeps: Callable[[str], bool]
    applies: Callable[[str], bool] | None = None

    def speaks_to(self, message: str) -> bool:
        return self.applies is None or self.applies(message)


TASTES: dict[str, Taste] = {
    t.name: t
    for t in (
        Taste("brief", "replies of at most 30 words", lambda r: 0 < words(r) <= 30),
        Taste("asks_back", "replies that end by asking something back", asks_back),
        Taste("lists_for_how_to", "a bulleted or numbered list when asked how to do something", has_list, is_how_to),
    )
}


def taste(name: str) -> Taste:
    if name not in TASTES:
        raise ValueError(f"taste {name!r} is not one of {', '.join(TASTES)}; add it to TASTES in {__name__}")
    return TASTES[name]


@dataclass(frozen=True)
class TasteShare:
    """The share of replies that keep a taste, over the messages it speaks to, with its standard error (replies
    to the same message are not independent: the error is over messages, each message's share one observation)."""

    taste: str
    share: float
    standard_error: float
    replies: int
    messages: int
    per_message: tuple[float, ...] = ()  # each message's share, in the order given (the ones it speaks to)

    def __str__(self) -> str:
        return (
            f"{self.taste} {self.share:.1%} +- {self.standard_error:.1%} "
            f"({self.replies} replies to {self.messages} messages)"
        )


def taste_share(t: Taste, messages: Sequence[str], replies: Sequence[Sequence[str]]) -> TasteShare:
    """How often the replies keep taste `t`: `replies[i]` are the samples for `messages[i]`; messages the taste does
    not speak to are left out."""
    if len(messages) != len(replies):
        raise ValueError(f"{len(messages)} messages and {len(replies)} lists of replies: give one list per message")
    per_message = [sum(t.keeps(r) for r in rs) / len(rs) for m, rs in zip(messages, replies) if rs and t.speaks_to(m)]
    n = len(per_message)
    if not n:
        raise ValueError(f"none of the {len(messages)} messages is one taste {t.name!r} speaks to")
    mean = sum(per_message) / n
    var = sum((x - mean) ** 2 for x in per_message) / (n - 1) if n > 1 else float("nan")
    count = sum(len(rs) for m, rs in zip(messages, replies) if rs and t.speaks_to(m))
    return TasteShare(t.name, mean, math.sqrt(var / n) if n > 1 else float("nan"), count, n, tuple(per_message))
