"""Which rows make each batch: how many pair and memory rows (`batch_rows`), and samplers over pairs laid out
as two kinds, each drawn in its own proportion (`mixed_sampler`, `beside_sampler`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

from hominem_pipeline.core.config import DualConfig


def batch_rows(cfg: DualConfig, batch_size: int, n_memory: int, n_pairs: int) -> tuple[int, int]:
    """(pair rows, memory rows) of each batch. The memory share: fixed, `memory_fraction`; availability,
    the memory rows' share of all rows, at most `memory_fraction`. `memory_rows: share` takes that share
    of `batch_size` from the pairs; `extra` keeps `batch_size` pair rows and adds that share of them as
    memory rows. A channel without data gets no rows; while both have data, each gets at least one row."""
    if n_memory == 0:
        return (batch_size if n_pairs else 0), 0
    if n_pairs == 0:
        return 0, batch_size
    share = cfg.memory_fraction if cfg.mixing == "fixed" else min(cfg.memory_fraction, n_memory / (n_memory + n_pairs))
    if share == 0:
        return batch_size, 0
    if cfg.memory_rows == "extra":
        return batch_size, max(1, round(batch_size * share))
    n_mem = int(min(batch_size - 1, max(1, round(batch_size * share))))
    return batch_size - n_mem, n_mem


def cycle(n: int, rng: random.Random) -> Iterator[int]:
    """Indices 0..n-1, reshuffled on every pass."""
    while True:
        order = list(range(n))
        rng.shuffle(order)
        yield from order


def mixed_sampler(
    n_ranked: int, n_people: int, people_share: float, seed: int, ranked: Callable[[int], Sequence[int]] | None = None
) -> Callable[[int], list[int]]:
    """A `pair_sampler` over pairs laid out as `n_ranked` ranked candidates' pairs, then `n_people`
    people's pairs: each batch of n takes `people_share` of its rows from the people's pairs (each once
    per pass, reshuffled; the fraction carried from batch to batch, so the share is exact over a run) and
    the rest from the ranked ones (by `ranked(k)`, their indices 0..n_ranked-1; None: each once per
    pass). With one kind absent every row is the other's."""
    rng = random.Random(seed)
    people, own = cycle(n_people, rng), cycle(n_ranked, rng)
    share = 0.0 if n_people == 0 else 1.0 if n_ranked == 0 else people_share
    owed = 0.0

    def draw(n: int) -> list[int]:
        nonlocal owed
        owed += n * share
        k = min(n, int(owed + 1e-9))
        owed -= k
        rest = n - k
        first = [int(i) for i in ranked(rest)] if ranked is not None and rest else [next(own) for _ in range(rest)]
        return first + [n_ranked + next(people) for _ in range(k)]

    return draw


def beside_sampler(n_main: int, n_beside: int, beside: int, seed: int) -> Callable[[int], list[int]]:
    """A `pair_sampler` over pairs laid out as `n_main` pairs, then `n_beside` others: each batch of n takes
    `beside` rows from the others and n - beside from the main ones, each kind once per pass, reshuffled
    (an online update's dimension pairs beside its replay batch: `extra_pair_rows`)."""
    rng = random.Random(seed)
    main, other = cycle(n_main, rng), cycle(n_beside, rng)

    def draw(n: int) -> list[int]:
        if n_main + n_beside == 0:
            return []
        k = n if n_main == 0 else min(n, beside) if n_beside else 0
        return [next(main) for _ in range(n - k)] + [n_main + next(other) for _ in range(k)]

    return draw
