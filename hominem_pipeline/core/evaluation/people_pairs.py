"""Does the student move toward what people prefer? Judged on people's own pairs, not by a reward model
of ours: the DPO implicit reward of an adapter on a pair,

    m = (log pi(chosen) - log pi_ref(chosen)) - (log pi(rejected) - log pi_ref(rejected)),

with pi the student with the adapter and pi_ref the base (the sequences' summed log-probabilities of the
reply's tokens, end of turn included, given the prompt in the student's chat template). TRL reports
beta * m per pair as `rewards/margins` and the share of pairs with m > 0 as `rewards/accuracies`: the
same definition (beta scales, never changes the sign), except that an exact tie counts half here, so
the base itself (m = 0 on every pair) reads 0.5, chance, and anything above it is the adapter having
moved toward the people's choices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

PEOPLE_MAX_LENGTH = 256  # tokens of prompt + reply (the prompt cut from the left), as the fixtures'


@dataclass(frozen=True)
class ImplicitReward:
    """An adapter's implicit reward on people's pairs."""

    pairs: int
    accuracy: float  # share of pairs with margin > 0 (TRL's rewards/accuracies); 0.5 is chance
    standard_error: float  # of the accuracy, binomial
    mean_margin: float  # nats (TRL's rewards/margins / beta)
    base_prefers_chosen: float  # share of pairs whose chosen reply the base finds the more likely per token
    adapter_prefers_chosen: float  # the same for the adapter

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def pair_scores(margins: np.ndarray) -> np.ndarray:
    """Each pair's share of a correct order: 1 margin > 0, 0.5 a tie, 0 otherwise (their mean: the accuracy)."""
    margins = np.asarray(margins, dtype=np.float64)
    return (margins > 0) + 0.5 * (margins == 0)


@dataclass(frozen=True)
class PeopleComparison:
    """Two adapters' implicit-reward accuracies on the same people's pairs."""

    pairs: int
    candidate: float
    live: float
    difference: float  # candidate - live
    standard_error: float  # of the difference, paired (each pair read by both)

    def below(self, tolerance: float) -> bool:
        """Whether the candidate falls below the live adapter by more than `tolerance` standard errors."""
        return self.difference < 0 and self.difference < -tolerance * self.standard_error


def compare_margins(candidate: np.ndarray, live: np.ndarray | None) -> PeopleComparison:
    """The candidate's accuracy against the live adapter's (None: the base, whose margins are all 0) on
    the same pairs, and the standard error of their paired difference."""
    c = pair_scores(candidate)
    v = pair_scores(np.zeros(len(c)) if live is None else live)
    d = c - v
    n = len(d)
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return PeopleComparison(
        n,
        float(c.mean()) if n else float("nan"),
        float(v.mean()) if n else float("nan"),
        float(d.mean()) if n else float("nan"),
        se,
    )


def exchange_logps(
    model: Any,
    tokenizer: Any,
    exchanges: Sequence[tuple[str, str]],
    batch_size: int,
    max_length: int = PEOPLE_MAX_LENGTH,
    cache: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(summed log-probability of each reply's tokens with its end of turn, their count) given its prompt,
    under `model` as it stands (a PEFT model: with its adapter on). `cache`: a `FeatureCache` of this
    model's (sum, count) rows by exchange, read first and added to (for a network that does not change)."""
    from hominem_pipeline.core.policy.sequences import encode
    from hominem_pipeline.core.reward.feature_cache import cached_rows, text_key
    from hominem_pipeline.core.reward.guards import reply_token_logps

    def measure(todo: Sequence[int]) -> np.ndarray:  # the LM head on the replies' positions alone
        sums, counts = reply_token_logps(
            model, [encode(tokenizer, *exchanges[i], max_length) for i in todo], tokenizer.pad_token_id, batch_size
        )
        return np.stack([sums.numpy(), counts.numpy()], 1)

    rows = cached_rows(cache, [text_key(p, r) for p, r in exchanges], measure, 2).numpy().astype(np.float64)
    return rows[:, 0], np.maximum(rows[:, 1].round().astype(np.int64), 1)


def implicit_reward(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    chosen: Sequence[str],
    rejected: Sequence[str],
    batch_size: int,
    max_length: int = PEOPLE_MAX_LENGTH,
    base_cache: Any = None,
) -> tuple[ImplicitReward, np.ndarray]:
    """The implicit reward of `model`'s active adapter on the pairs, against its base (adapter off;
    `base_cache`: a cache of the base's rows). Returns the summary and each pair's margin."""
    from hominem_pipeline.core.policy.lora import merged

    exchanges = [(p, r) for p, c, j in zip(prompts, chosen, rejected) for r in (c, j)]
    with merged(model):
        adapter, tokens = exchange_logps(model, tokenizer, exchanges, batch_size, max_length)
    with model.disable_adapter():
        base, _ = exchange_logps(model, tokenizer, exchanges, batch_size, max_length, cache=base_cache)
    adapter, base, tokens = adapter.reshape(-1, 2), base.reshape(-1, 2), tokens.reshape(-1, 2)
    margins = (adapter[:, 0] - base[:, 0]) - (adapter[:, 1] - base[:, 1])
    n = len(margins)
    accuracy = float(pair_scores(margins).mean()) if n else float("nan")  # a tie (the base itself) counts half
    per_token = lambda lp: float(np.mean(lp[:, 0] / tokens[:, 0] > lp[:, 1] / tokens[:, 1])) if n else float("nan")  # noqa: E731
    summary = ImplicitReward(
        n,
        accuracy,
        math.sqrt(accuracy * (1 - accuracy) / n) if n else float("nan"),
        float(margins.mean()) if n else float("nan"),
        per_token(base),
        per_token(adapter),
    )
    return summary, margins
