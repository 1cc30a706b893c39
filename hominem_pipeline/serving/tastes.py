"""Each person's taste model in the service (`core/attune/personal.py`), fitted on their choices the ledger holds and
kept until they choose again: what `GET /me/taste` says, and what picks the two replies a person is shown for a pair
(`serving.pair_pool`)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from hominem_pipeline.core.attune.personal import PersonalModel, reply_features
from hominem_pipeline.serving.engine import wait


class ServedTastes:
    """Taste models by rater over the served reward model's outputs (text features alone without one)."""

    def __init__(self, engine: Any, ledger: Any):
        self.engine, self.ledger = engine, ledger
        self._models: dict[str, tuple[tuple[str, ...], PersonalModel]] = {}
        self._lock = asyncio.Lock()

    def _mine(self, rater: str) -> list[Any]:
        turns = self.ledger.turns
        return [
            c
            for c in self.ledger.choices_by(rater)
            if c.repeat_of is None and c.chosen in turns and c.rejected in turns
        ]

    def choices_of(self, rater: str) -> list[tuple[str, str, str]]:
        """(message, chosen reply, rejected reply) of each of the rater's choices (a repeat not counted again)."""
        turns = self.ledger.turns
        return [(turns[c.chosen].prompt, turns[c.chosen].reply, turns[c.rejected].reply) for c in self._mine(rater)]

    async def features(self, prompts: list[str], replies: list[str]) -> tuple[tuple[str, ...], np.ndarray]:
        engine = self.engine
        return await wait(engine.run(lambda: reply_features(engine.reward, prompts, replies)))  # the worker's model

    async def model(self, rater: str) -> PersonalModel:
        """The rater's taste model, fitted again when they chose since it was."""
        choices = self._mine(rater)
        key = tuple(c.id for c in choices)  # a new choice, or one forgotten, fits it again
        async with self._lock:
            known = self._models.get(rater)
            if known is not None and known[0] == key:
                return known[1]
            mine = self.choices_of(rater)
            if mine:
                prompts = [m for m, _, _ in mine]
                names, chosen = await self.features(prompts, [c for _, c, _ in mine])
                _, rejected = await self.features(prompts, [r for _, _, r in mine])
            else:
                names, _ = await self.features(["-"], ["-"])
                chosen = rejected = np.zeros((0, len(names)))
            model = PersonalModel.fit(names, chosen, rejected)
            self._models[rater] = (key, model)
            return model

    def forget(self, rater: str) -> None:
        self._models.pop(rater, None)
