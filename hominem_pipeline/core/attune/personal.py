"""A person's own taste model: what one person prefers, learned from their choices on the page.

Each reply is read as features the project already computes: the reward model's vector (the seven dimensions),
its reward_intensity and safety_score, the people's score where the model has one, and plain text features
(`TEXT_FEATURES`: its length in log words, whether it ends with a question, holds a list, apologises, exclaims).
The person prefers reply a over b with probability eps + (1 - 2 eps) sigmoid(w . (z_a - z_b)) (the question desk's
model, `core.attune.posterior`), with z the features divided by their spread over the replies seen, so one prior
fits every feature. `PersonalModel.fit` finds w's Laplace posterior from the person's choices: cheap (Newton steps
on a dozen weights), Bayesian (it says how sure it is of each weight), and with 10-20 choices it sets the weights a
plain taste needs (the shared basis with per-person weights of PReF and LoRe; here the basis is the features).

From it: the chance the person prefers one reply over another (`probability`), a ranking of several replies
(`utility`), the features that lead their taste in plain words, with how sure it is (`leading`, `describe`), and
how often it predicts choices it was not fitted on (`agreement`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hominem_pipeline.core.attune.posterior import PRIOR_LOGIT_SD, LaplacePosterior
from hominem_pipeline.core.evaluation.tastes import apologises, asks_back, exclaims, has_list, words

TEXT_FEATURES = ("length", "asks_back", "list", "apology", "exclamation")
SCORE_FEATURES = ("reward_intensity", "safety_score")
PEOPLE_FEATURE = "people_score"
SURE = 0.8  # a leaning is said in words once the posterior puts this much of its mass on its side
MIN_SPREAD = 0.05  # the least spread a feature is divided by (a feature every reply shares carries no taste)
NO_CHOICES = "no choices yet: nothing learned of this person's taste"

_WORDS = {  # a feature's name -> (the person's taste when its weight is positive, when negative)
    "length": ("longer replies", "shorter replies"),
    "asks_back": ("replies that end by asking something back", "replies that do not end with a question"),
    "list": ("replies with a list", "replies without a list"),
    "apology": ("replies that apologise", "replies that do not apologise"),
    "exclamation": ("replies with exclamations", "replies without exclamations"),
    "reward_intensity": ("replies the reward model feels strongly about", "calmer replies"),
    "safety_score": ("safer replies", "bolder replies"),
    PEOPLE_FEATURE: ("replies people in general prefer", "replies people in general like less"),
}


def text_features(replies: Sequence[str]) -> np.ndarray:
    """(n, 5) `TEXT_FEATURES` of each reply."""
    return np.array(
        [[math.log1p(words(r)), asks_back(r), has_list(r), apologises(r), exclaims(r)] for r in replies],
        dtype=np.float64,
    ).reshape(len(replies), len(TEXT_FEATURES))


def feature_names(dimensions: Sequence[str], people: bool) -> tuple[str, ...]:
    return (*dimensions, *SCORE_FEATURES, *((PEOPLE_FEATURE,) if people else ()), *TEXT_FEATURES)


def reply_features(
    reward_model: Any, prompts: Sequence[str], replies: Sequence[str]
) -> tuple[tuple[str, ...], np.ndarray]:
    """(names, (n, d) features) of each reply to its prompt: the reward model's outputs, then the text features
    (the text features alone without a reward model: None)."""
    if reward_model is None:
        return TEXT_FEATURES, text_features(replies)
    raw = reward_model.raw_scores(list(prompts), list(replies))
    people = reward_model.people_column(list(prompts), list(replies))
    columns = [np.asarray(raw["vector"], dtype=np.float64)]
    columns += [np.asarray(raw[k], dtype=np.float64)[:, None] for k in SCORE_FEATURES]
    if people is not None:
        columns.append(np.asarray(people, dtype=np.float64)[:, None])
    columns.append(text_features(replies))
    return feature_names(reward_model.dimensions, people is not None), np.concatenate(columns, 1)


def distinct_replies(replies: Sequence[str]) -> list[int]:
    """The index of each distinct, non-empty reply's first appearance (stripped), in order: the replies a taste model
    chooses a pair among."""
    first: dict[str, int] = {}
    for i, reply in enumerate(replies):
        first.setdefault(reply.strip(), i)
    return [i for text, i in first.items() if text]


@dataclass(frozen=True)
class Leaning:
    """One feature's weight in a person's taste: its posterior mean and standard deviation (per spread of the
    feature), and how sure the model is of its sign (the posterior's mass on that side, 0.5-1)."""

    feature: str
    weight: float
    sd: float
    sure: float

    @property
    def words(self) -> str:
        up, down = _WORDS.get(
            self.feature, (f"more {self.feature.replace('_', ' ')}", f"less {self.feature.replace('_', ' ')}")
        )
        return up if self.weight > 0 else down


@dataclass(frozen=True)
class PersonalModel:
    """A person's taste: the posterior over w (`posterior`) on features `names` divided by `spread`, fitted on
    `choices` of their choices."""

    names: tuple[str, ...]
    spread: np.ndarray
    posterior: LaplacePosterior
    choices: int

    @classmethod
    def fit(
        cls,
        names: Sequence[str],
        chosen: np.ndarray,
        rejected: np.ndarray,
        noise: float = 0.1,
        spread: np.ndarray | None = None,
        logit_sd: float = PRIOR_LOGIT_SD,
    ) -> PersonalModel:
        """The model after choices of `chosen[i]` over `rejected[i]` ((n, d) features each, columns `names`).
        `noise`: the person's flip rate (the page's repeated pairs measure it, `posterior.rater_noise`); `spread`:
        each feature's scale (default: its standard deviation over these replies, at least `MIN_SPREAD`)."""
        chosen, rejected = (
            np.atleast_2d(np.asarray(chosen, np.float64)),
            np.atleast_2d(np.asarray(rejected, np.float64)),
        )
        if chosen.shape != rejected.shape or chosen.shape[1] != len(names):
            raise ValueError(
                f"chosen {chosen.shape} and rejected {rejected.shape} must both be (choices, {len(names)}) features "
                f"named {', '.join(names)}"
            )
        if spread is None:
            seen = np.vstack([chosen, rejected])
            spread = seen.std(0) if len(seen) > 1 else np.ones(len(names))
        spread = np.maximum(np.asarray(spread, np.float64), MIN_SPREAD)
        diffs = (chosen - rejected) / spread
        # the prior: a typical pair of replies (every feature one spread apart, about sqrt(2 d)) has a logit of sd
        # logit_sd before any choice; fixed, not read from the choices, so a person's first choices are not
        # judged against their own spread
        precision = 2.0 * len(names) / logit_sd**2
        posterior = LaplacePosterior.fit(diffs, np.ones(len(diffs)), precision, noise)
        return cls(tuple(names), spread, posterior, len(diffs))

    def _diffs(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (np.atleast_2d(np.asarray(a, np.float64)) - np.atleast_2d(np.asarray(b, np.float64))) / self.spread

    def probability(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The chance the person chooses each reply of `a` over the one of `b` at its row (the posterior integrated
        out)."""
        return self.posterior.predictive(self._diffs(a, b))

    def utility(self, features: np.ndarray) -> np.ndarray:
        """Each reply's place in the person's taste (the posterior mean's w . z): higher is preferred."""
        return (np.atleast_2d(np.asarray(features, np.float64)) / self.spread) @ self.posterior.mean

    def surest(self, features: np.ndarray) -> tuple[int, int, float]:
        """Of the replies whose `features` are the rows, the one it ranks highest and the one it ranks lowest, and
        its chance that the person chooses the first over the second: the pair whose answer it is surest of. Shown
        to the person, a pair that can show their taste (a choice there teaches the student); trained on, the
        student's own replies ranked as they would rank them."""
        n = len(features)
        if n < 2:
            raise ValueError(f"{n} reply(ies): a pair needs at least two")
        utility = self.utility(features)
        best, worst = int(np.argmax(utility)), int(np.argmin(utility))
        if best == worst:  # every reply alike to it
            best, worst = 0, 1
        return best, worst, float(self.probability(features[best], features[worst])[0])

    def agreement(self, chosen: np.ndarray, rejected: np.ndarray) -> float:
        """The share of choices (not fitted on) it predicts: the chosen reply more likely than not."""
        p = self.probability(chosen, rejected)
        return float(np.mean(np.where(np.isclose(p, 0.5), 0.5, p > 0.5))) if len(p) else float("nan")

    def leading(self, k: int = 3) -> list[Leaning]:
        """The `k` features that lead the taste most surely (largest |mean| / sd)."""
        sd = np.sqrt(self.posterior.latent(np.eye(len(self.names)))[1])
        mean = self.posterior.mean
        order = np.argsort(-np.abs(mean) / np.maximum(sd, 1e-12))[:k]
        return [
            Leaning(
                self.names[i],
                float(mean[i]),
                float(sd[i]),
                float(0.5 * (1 + math.erf(abs(mean[i]) / (sd[i] * math.sqrt(2))))),
            )
            for i in order
        ]

    def describe(self, k: int = 3, sure: float = SURE) -> str:
        """The leading features it is at least `sure` of, in plain words, each with how sure it is, e.g. "from 20
        choices: prefers replies that end by asking something back (sure 97%), shorter replies (sure 81%)"."""
        if not self.choices:
            return NO_CHOICES
        said = [f"{x.words} (sure {x.sure:.0%})" for x in self.leading(k) if x.sure >= sure]
        if not said:
            return f"from {self._choices_text}: not yet sure of any leaning (none at {sure:.0%})"
        return f"from {self._choices_text}: prefers {', '.join(said)}"

    @property
    def _choices_text(self) -> str:
        return f"{self.choices} choice" + ("" if self.choices == 1 else "s")

    def as_dict(self) -> dict[str, Any]:
        return {
            "names": list(self.names),
            "spread": self.spread.tolist(),
            "mean": self.posterior.mean.tolist(),
            "chol": self.posterior.chol.tolist(),
            "noise": self.posterior.noise,
            "prior_precision": self.posterior.prior_precision,
            "choices": self.choices,
            "leading": [x.__dict__ | {"words": x.words} for x in self.leading()],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PersonalModel:
        post = LaplacePosterior(
            np.asarray(d["mean"], np.float64),
            np.asarray(d["chol"], np.float64),
            float(d["noise"]),
            float(d["prior_precision"]),
        )
        return cls(tuple(d["names"]), np.asarray(d["spread"], np.float64), post, int(d["choices"]))
