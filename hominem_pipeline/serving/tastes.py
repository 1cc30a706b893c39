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
        self._rows: dict[tuple[str, str], np.ndarray] = {}  # (reward model, turn id) -> its reply's features
        self._names: dict[str, tuple[str, ...]] = {}  # reward model -> the features' names
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
            names, rows = await self._turn_rows([c.chosen for c in choices] + [c.rejected for c in choices])
            model = PersonalModel.fit(names, rows[: len(choices)], rows[len(choices) :])
            self._models[rater] = (key, model)
            return model

    async def _turn_rows(self, ids: list[str]) -> tuple[tuple[str, ...], np.ndarray]:
        """The features of the turns' replies (to their prompts), each turn's read once per reward model: a new
        choice costs the reward model its two replies, not all of the person's."""
        model = str(getattr(self.engine, "reward_model_path", None))
        turns = self.ledger.turns
        todo = [i for i in dict.fromkeys(ids) if (model, i) not in self._rows]
        if todo or model not in self._names:
            prompts = [turns[i].prompt for i in todo] or ["-"]  # none new: one placeholder names the features
            names, rows = await self.features(prompts, [turns[i].reply for i in todo] or ["-"])
            self._names[model] = names
            self._rows.update({(model, i): row for i, row in zip(todo, rows)})
        names = self._names[model]
        return names, np.array([self._rows[(model, i)] for i in ids]).reshape(len(ids), len(names))

    def forget(self, rater: str) -> None:
        """Drop the rater's model and their turns' features (their turns are forgotten)."""
        self._models.pop(rater, None)
        kept = self.ledger.turns
        self._rows = {k: v for k, v in self._rows.items() if k[1] in kept}
