"""`GET /feedback/next`: the next pair a person is asked to choose between, chosen by what one answer would tell
of this person's preferences (`attunement.selection.method`: bald or epig, `core/attune/posterior.py`), by how much
of the people's score's doubt over the pool it would settle (design, `core/attune/design.py`), or by the
served reward model's weighted parts (`parts`, or a reward model without a people's score:
`core/attune/questions.py`, `core/attune/selection.py`).

By posterior: each person's choices so far (any pair of replies they chose between) and their consistency on repeated
pairs give a Laplace posterior over a preference model on the people's score's features (`RewardModel.
people_features`, kept in memory per reward model and text); a uniform sample of `pool_sample` unanswered pairs is
scored by its expected information (or its design worth, with their answered pairs), and the best one asked (a
`random_share` at random).

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
ASKED_KEPT = 10_000  # the newest asks remembered until answered (a choice records how its pair was picked)
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
        self._rows: dict[tuple[str, str], np.ndarray] = {}  # (reward model, text key) -> the people's score's features
        self._rows_of: str | None = None  # the reward model whose features `_rows` holds
        self._posteriors: dict[tuple[str, str], Any] = {}  # (reward model, rater) -> their last posterior
        self._precision: dict[str, float] = {}  # reward model -> the posterior's prior precision
        self._asked_lock = threading.Lock()
        self._asked: dict[tuple[str, str], dict[str, Any]] = {}  # (rater, question) -> how it was picked, newest last

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

    def asked_of(self, rater: str, chosen: str, rejected: str) -> dict[str, Any] | None:
        """How the pair of turns `chosen`, `rejected` was picked when it was asked of `rater` (None: not a question
        asked of them since the service started)."""
        a, b = QUESTION_TURN.match(chosen), QUESTION_TURN.match(rejected)
        if a is None or b is None or a.group(1) != b.group(1):
            return None
        with self._asked_lock:
            return self._asked.get((rater, a.group(1)))

    def forget(self, rater: str) -> None:
        """Drop what is held of `rater` (they were forgotten): their posterior, how their questions were asked, and
        the features of texts (theirs among them)."""
        with self._lock:
            self._posteriors = {k: v for k, v in self._posteriors.items() if k[1] != rater}
            self._rows = {}
        with self._asked_lock:
            self._asked = {k: v for k, v in self._asked.items() if k[0] != rater}

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

    def _features(self, key: str, prompts: list[str], replies: list[str]) -> np.ndarray:
        """The people's score's features of each (prompt, reply), read on the engine's worker, kept per reward model
        and text (`key` names the reward model)."""
        from hominem_pipeline.core.reward.feature_cache import text_key

        if self._rows_of != key:  # another reward model: its features are another space
            self._rows, self._rows_of = {}, key
        keys = [(key, text_key(p, r)) for p, r in zip(prompts, replies)]
        todo = sorted({i for i, k in enumerate(keys) if k not in self._rows}, key=lambda i: keys[i])
        if todo:
            reward = self.engine.reward
            rows = self.engine.run(
                lambda: reward.people_features([prompts[i] for i in todo], [replies[i] for i in todo])
            ).result()
            self._rows.update({keys[i]: row.astype(np.float32) for i, row in zip(todo, rows)})
        return np.stack([self._rows[k] for k in keys]) if keys else np.zeros((0, 0), np.float32)

    def _posterior(self, key: str, rater: str, sample: list[Question]) -> tuple[Any, np.ndarray, np.ndarray]:
        """This person's posterior over the people's score's features (their choices so far, their noise from their
        repeats), and the rows of the sample's replies (a then b) and of the pairs they answered (chosen then
        rejected)."""
        from hominem_pipeline.core.attune.posterior import LaplacePosterior, rater_noise

        choices = [
            c
            for c in self.ledger.choices_by(rater)
            if c.chosen in self.ledger.turns and c.rejected in self.ledger.turns
        ]
        chosen = [self.ledger.turns[c.chosen] for c in choices]
        rejected = [self.ledger.turns[c.rejected] for c in choices]
        rows = self._features(
            key,
            [q.prompt for q in sample] * 2 + [t.prompt for t in chosen + rejected],
            [q.a for q in sample] + [q.b for q in sample] + [t.reply for t in chosen + rejected],
        ).astype(np.float64)
        n, m = len(sample), len(choices)
        diffs, answers = rows[:n] - rows[n : 2 * n], rows[2 * n : 2 * n + m] - rows[2 * n + m :]
        if key not in self._precision:  # a typical pair's prior logit: one scale per reward model
            self._precision[key] = LaplacePosterior.prior_precision_for(diffs)
        repeats = self.ledger.consistency(rater).get(rater, {"repeats": 0, "consistent": 0})
        noise = rater_noise(repeats["consistent"], repeats["repeats"], self.cfg.attunement.selection.rater_noise)
        last = self._posteriors.get((key, rater))
        posterior = LaplacePosterior.fit(
            answers, np.ones(m), self._precision[key], noise, None if last is None else last.mean
        )
        self._posteriors[(key, rater)] = posterior
        return posterior, rows[: 2 * n], rows[2 * n :]

    def _informative(self, pool: list[Question], answered: set[str], rater: str) -> tuple[Question, Any, dict] | None:
        """(question, Pick, the served reward model's scores of it) by what one answer would tell of this person's
        preferences (`attunement.selection.method`), among a uniform sample of the unanswered pairs."""
        from hominem_pipeline.core.attune.posterior import expected_information, with_design
        from hominem_pipeline.core.attune.selection import pick_informative

        sel = self.cfg.attunement.selection
        open_ = [q for q in pool if q.id not in answered]
        if not open_:
            return None
        sample = [
            open_[i] for i in sorted(self.rng.choice(len(open_), size=min(sel.pool_sample, len(open_)), replace=False))
        ]
        key = str(getattr(self.engine, "reward_model_path", None))
        posterior, replies, given = self._posterior(key, rater, sample)
        n, m = len(sample), len(given) // 2
        diffs = replies[:n] - replies[n:]
        if sel.method == "design":
            worth = with_design(expected_information(posterior, diffs), replies[:n], replies[n:], given[:m], given[m:])
        else:
            worth = expected_information(posterior, diffs, sel.method, diffs, self.rng)
        chosen = pick_informative(worth, sel.random_share, self.rng)
        question = sample[chosen.index]
        scores = self._score([question])
        return question, chosen, {"a": scores["a"][0], "b": scores["b"][0], "p_a": chosen.parts["p_a"]}

    def _asks_by_posterior(self) -> bool:
        reward = self.engine.reward
        return self.cfg.attunement.selection.method != "parts" and reward is not None and reward.has_people_score

    def next(self, rater: str) -> dict[str, Any] | None:
        """The question for `rater` and how it was picked; None when they have answered every one."""
        with self._lock:
            pool = self.pool()
            answered, seen = self.answered(rater)
            if self._asks_by_posterior():
                found = self._informative(pool, answered, rater)
            else:
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
        with self._asked_lock:  # apart from the pick's lock: a choice posted meanwhile does not wait for a pick
            # the newest ask of a pair stands: it is the one the person answers
            self._asked.pop((rater, question.id), None)
            self._asked[(rater, question.id)] = {"by": chosen.by, "value": round(float(chosen.value), 4)}
            while len(self._asked) > ASKED_KEPT:
                self._asked.pop(next(iter(self._asked)))
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
