"""`GET /feedback/next`: the next pair a person is asked to choose between, chosen by what the served reward
model does not know (`core/attune/questions.py`, `core/attune/selection.py`).

The pool is read on first use and again when the teacher's newest day or the imported question files
change. Each question's scores by the served reward model are kept in memory (scored once, on the engine's
worker, a sample at a time). The growing error clusters are those of the newest `attunement` day. A
question asked is two turns in the log with ids `<question>-a` and `-b` (so a choice between them is an
ordinary choice, and asking it again writes nothing new); their `sampling` records how it was picked
(`by`: information or random, the value and the reason), so the log says which answers are a random sample.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import numpy as np

from hominem_pipeline.core.attune.questions import QUESTIONS, Question, choose, load_pool
from hominem_pipeline.core.online.ledger import Ledger

log = logging.getLogger(__name__)
QUESTION_TURN = re.compile(r"^(q[0-9a-f]{16})-[ab]$")
RECHECK_SECONDS = 10.0  # how often the pool's sources and the error clusters are looked at again


class QuestionDesk:
    def __init__(self, cfg: Any, engine: Any, ledger: Ledger, seed: int | None = None):
        self.cfg, self.engine, self.ledger = cfg, engine, ledger
        self.rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self._pool: list[Question] = []
        self._pool_key: Any = None
        self._scores: dict[tuple[str | None, str], dict[str, Any]] = {}  # (reward model, question) -> scores
        self._clusters: list[dict[str, Any]] = []
        self._checked_at = float("-inf")

    def _key(self) -> Any:
        from hominem_pipeline.core.pipeline.lineage import lineage

        ref, _ = lineage(self.cfg).newest("teacher_trajectories")
        folder = self.cfg.data_dir / self.cfg.serving.log_dir / QUESTIONS
        files = sorted((p.name, p.stat().st_size) for p in folder.glob("*.jsonl")) if folder.is_dir() else []
        return (None if ref is None else ref.version, tuple(files))

    def pool(self) -> list[Question]:
        """The pool, read again when the teacher's newest day or the question files changed (looked at every
        RECHECK_SECONDS)."""
        if time.monotonic() - self._checked_at >= RECHECK_SECONDS:
            self._checked_at = time.monotonic()
            key = self._key()
            if key != self._pool_key:
                self._pool, self._pool_key, self._clusters = load_pool(self.cfg), key, self._growing()
                log.info("question pool: %d pairs", len(self._pool))
            else:
                self._clusters = self._growing()
        return self._pool

    def _growing(self) -> list[dict[str, Any]]:
        """The newest attunement day's growing error clusters (new or grew): name and terms."""
        import json

        import pandas as pd

        from hominem_pipeline.core.builds.attunement import CLUSTERS
        from hominem_pipeline.core.pipeline.lineage import lineage

        ref, _ = lineage(self.cfg).newest("attunement")
        if ref is None:
            return []
        found = pd.read_parquet(ref.file(CLUSTERS), columns=["name", "terms", "status"])
        return [
            {"name": r.name, "terms": json.loads(r.terms)} for r in found.itertuples() if r.status in ("new", "grew")
        ]

    def answered(self, rater: str) -> tuple[set[str], list[str]]:
        """(the questions `rater` chose on, the prompts of every question anyone answered)."""
        mine, prompts = set(), {}
        for c in self.ledger.choices.values():
            m = QUESTION_TURN.match(c.chosen)
            if m is None:
                continue
            if c.rater == rater:
                mine.add(m.group(1))
            turn = self.ledger.turns.get(c.chosen)
            if turn is not None:
                prompts[m.group(1)] = turn.prompt
        return mine, list(prompts.values())

    def _score(self, questions: list[Question]) -> dict[str, Any]:
        reward = self.engine.reward
        label = getattr(self.engine, "reward_model_path", None)
        todo = [q for q in questions if (str(label), q.id) not in self._scores]
        if todo:
            prompts = [q.prompt for q in todo]
            outputs = self.engine.score(prompts + prompts, [q.a for q in todo] + [q.b for q in todo]).result()
            for i, q in enumerate(todo):
                a, b = outputs[i], outputs[len(todo) + i]
                gap = a["scalar"] - b["scalar"]
                self._scores[(str(label), q.id)] = {
                    "gap": gap,
                    "spread": float(np.hypot(a["uncertainty"]["scalar"], b["uncertainty"]["scalar"])),
                    "p_a": reward.probability(gap),
                    "a": a,
                    "b": b,
                }
        rows = [self._scores[(str(label), q.id)] for q in questions]
        return {
            k: np.array([r[k] for r in rows]) if k in ("gap", "spread", "p_a") else [r[k] for r in rows]
            for k in rows[0]
        }

    def next(self, rater: str) -> dict[str, Any] | None:
        """The question for `rater` and how it was picked; None when they have answered every one."""
        with self._lock:
            pool = self.pool()
            answered, seen = self.answered(rater)
            found = choose(
                pool,
                answered,
                seen,
                self._score if self.engine.reward is not None else None,
                self._clusters,
                self.cfg.attunement.selection,
                self.rng,
            )
        if found is None:
            return None
        question, chosen, scores = found
        return {
            "question": question,
            "by": chosen.by,
            "value": chosen.value,
            "parts": chosen.parts,
            "reason": chosen.reason,
            "p_a": None if "p_a" not in scores else float(scores["p_a"]),
            "a_reward": scores.get("a"),
            "b_reward": scores.get("b"),
            "pool": len(pool),
            "answered": len(answered),
        }
