"""Seed prompts: loading, the held-out evaluation split and the daily sample."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import yaml
from pydantic import ValidationError

from hominem_pipeline.core.common.schema import Prompt
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.artifacts import fingerprint


class PromptFileError(ValueError):
    """The seed prompt file is missing or malformed."""


def load_seed_prompts(path: Path, categories: list[str]) -> list[Prompt]:
    if not path.is_file():
        raise PromptFileError(f"seed prompt file {path} does not exist; set prompts.seed_file")
    raw = yaml.safe_load(path.read_text()) or {}
    entries = raw.get("prompts") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PromptFileError(f"{path} must hold a non-empty list under `prompts:`")
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise PromptFileError(f"{path}: entry {i} is not a mapping: {entry!r}")
        try:
            prompt = Prompt(
                prompt_id=entry.get("id", ""),
                text=entry.get("text", ""),
                category=entry.get("category", ""),
                difficulty=entry.get("difficulty", 0),
                tags=entry.get("tags", []),
            )
        except ValidationError as exc:
            raise PromptFileError(
                f"{path}: entry {i} ({entry.get('id', '?')}): {exc.errors()[0]['loc']} {exc.errors()[0]['msg']}"
            ) from None
        if prompt.category not in categories:
            raise PromptFileError(
                f"{path}: prompt {prompt.prompt_id} has category {prompt.category!r}; "
                f"allowed (prompts.categories): {categories}"
            )
        if prompt.prompt_id in seen:
            raise PromptFileError(f"{path}: duplicate prompt id {prompt.prompt_id!r}")
        seen.add(prompt.prompt_id)
        prompts.append(prompt)
    return prompts


def split_eval(prompts: list[Prompt], per_category: int, seed: int) -> tuple[list[Prompt], list[Prompt]]:
    """(train pool, evaluation set): `per_category` prompts of each category held out, chosen by a
    seeded hash of their ids so the split never changes when prompts are added elsewhere."""
    by_cat: dict[str, list[Prompt]] = defaultdict(list)
    for p in prompts:
        by_cat[p.category].append(p)
    held: set[str] = set()
    for items in by_cat.values():
        ranked = sorted(items, key=lambda p: fingerprint([seed, p.prompt_id]))
        held.update(p.prompt_id for p in ranked[:per_category])
    train = [p for p in prompts if p.prompt_id not in held]
    evaluation = [p for p in prompts if p.prompt_id in held]
    return train, evaluation


def sample_partition(pool: list[Prompt], n: int, seed: int) -> list[Prompt]:
    """`n` prompts stratified by category (round-robin over shuffled categories), deterministic in `seed`."""
    rng = random.Random(seed)
    by_cat: dict[str, list[Prompt]] = defaultdict(list)
    for p in pool:
        by_cat[p.category].append(p)
    for items in by_cat.values():
        rng.shuffle(items)
    cats = sorted(by_cat)
    rng.shuffle(cats)
    chosen: list[Prompt] = []
    while len(chosen) < min(n, len(pool)):
        for c in cats:
            if by_cat[c] and len(chosen) < n:
                chosen.append(by_cat[c].pop())
    return chosen


def partition_prompts(cfg: HominemConfig, prompts: list[Prompt], seed: int) -> tuple[list[Prompt], list[Prompt]]:
    """(today's training prompts, the fixed evaluation prompts) for one partition, from the seed prompts."""
    pool, evaluation = split_eval(prompts, cfg.prompts.eval_per_category, cfg.project.seed)
    if not pool:
        raise PromptFileError("every seed prompt is held out for evaluation; lower prompts.eval_per_category")
    return sample_partition(pool, cfg.prompts.per_partition, seed), evaluation
