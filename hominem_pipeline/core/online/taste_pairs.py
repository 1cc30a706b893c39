"""A person's taste taught on the student's own replies: each choice teaches more than the pair it was made on.

For every person (a rater in the log) with at least `online.taste.min_choices` preference pairs, their taste model
(`core.attune.personal.PersonalModel`) is fitted on those pairs. The student (the live adapter) then answers the
person's newest `online.taste.prompts` messages `online.taste.samples` times each, sampled as the server samples;
the taste model ranks each message's replies, and the one it likes most and the one it likes least become a pair
when it is sure enough the person would choose so (`online.taste.min_probability`). With `online.taste.endings`,
the replies ranked for a message are instead endings sampled after one opening (`with_endings`): the pair's two
replies share all but their ending, so what it teaches sits where they differ. These on-policy pairs join the
update's batch as replay items of source `taste:<rater>`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.attune.personal import PersonalModel, distinct_replies, reply_features
from hominem_pipeline.core.online.replay import FINISHED, ITEM_COLUMNS
from hominem_pipeline.core.pipeline.artifacts import fingerprint

log = logging.getLogger(__name__)

Sampler = Callable[[list[str], int], list[list[tuple[str, bool]]]]  # (prompts, k) -> per prompt k (text, finished)
# (prompts, openings, n) -> per prompt n replies (text, finished) that begin with its opening
Ender = Callable[[list[str], list[str], int], list[list[tuple[str, bool]]]]


@dataclass(frozen=True)
class PersonChoices:
    """One person's choices as features (`names`; `chosen[i]` over `rejected[i]`) and their newest messages."""

    rater: str
    names: tuple[str, ...]
    chosen: np.ndarray
    rejected: np.ndarray
    prompts: list[str]

    def model(self, seen: np.ndarray | None = None, noise: float = 0.1) -> PersonalModel:
        """Their taste model, each feature divided by its spread over their choices' replies and `seen` (the replies
        it is to rank), so a feature the choices happen to share does not weigh more than it should."""
        pool = np.vstack([self.chosen, self.rejected] + ([] if seen is None or not len(seen) else [seen]))
        return PersonalModel.fit(self.names, self.chosen, self.rejected, noise, spread=pool.std(0))


@dataclass(frozen=True)
class TastePairs:
    """An update's taste pairs as replay items, and the taste model of each person they came from (by rater)."""

    items: pd.DataFrame
    models: dict[str, PersonalModel]


def held_out_choices(pairs: pd.DataFrame, share: float, after: int) -> np.ndarray:
    """Which of people's pairs (`feedback_tables`' pairs, in the log's order) are choices never trained on: of each
    person's choices after their first `after` (those train, as a taste model needs them: `online.taste.min_choices`;
    0: no taste models, none held out), `share`, by a digest of each choice's id, so a choice held out stays out
    however the log grows (`online.taste.held_out`)."""
    if pairs.empty or share <= 0 or after <= 0:
        return np.zeros(len(pairs), dtype=bool)
    choice = (pairs["source"].astype(str) == "feedback:choice").to_numpy()
    nth = pairs["rater"].where(choice).groupby(pairs["rater"].where(choice)).cumcount().to_numpy()
    draw = np.array([int(fingerprint(str(i), 8), 16) / 16**8 for i in pairs["pair_id"]])
    return choice & (nth >= after) & (draw < share)


def person_choices(pairs: pd.DataFrame, reward_model: Any, min_choices: int, prompts: int) -> list[PersonChoices]:
    """The choices of each rater with at least `min_choices` pairs among people's `pairs` (`feedback_tables`'
    pairs: rater, prompt, chosen, rejected, oldest first), with their newest `prompts` distinct messages."""
    if pairs.empty or min_choices <= 0 or "rater" not in pairs:
        return []
    out = []
    for rater, own in pairs.groupby("rater", sort=True):
        if len(own) < min_choices:
            continue
        names, chosen = reply_features(reward_model, list(own["prompt"]), list(own["chosen"]))
        _, rejected = reply_features(reward_model, list(own["prompt"]), list(own["rejected"]))
        newest = list(dict.fromkeys(reversed(list(own["prompt"]))))[:prompts]
        out.append(PersonChoices(str(rater), names, chosen, rejected, newest))
    return out


def with_endings(
    prompts: Sequence[str], drawn: Sequence[Sequence[tuple[str, bool]]], ender: Ender, n: int
) -> list[list[tuple[str, bool]]]:
    """Each message's replies to rank when endings are sampled: for a message with a reply of two sentences or more
    among its `drawn` replies, the first such reply and `n` endings sampled after its opening (`generation.opening`);
    for one without, its drawn replies as they are."""
    from hominem_pipeline.core.lm.generation import opening

    begun = {}
    for i, replies in enumerate(drawn):
        found = next(((o, r) for r in replies if (o := opening(r[0]))), None)
        if found:
            begun[i] = found
    ended = ender([prompts[i] for i in begun], [o for o, _ in begun.values()], n) if begun else []
    out = [list(replies) for replies in drawn]
    for (i, (_, reply)), endings in zip(begun.items(), ended):
        out[i] = [reply, *endings]
    return out


def ranked_pairs(
    person: PersonChoices, reward_model: Any, drawn: Sequence[Sequence[tuple[str, bool]]], min_probability: float
) -> tuple[list[dict[str, Any]], PersonalModel]:
    """Per message of `person.prompts`, its replies `drawn` (text, finished) ranked by the person's taste model: the
    best and the worst as a pair where the model gives the best at least `min_probability` of being chosen. Also
    the model (its spread over their choices and these replies)."""
    asked: list[tuple[str, list[str], dict[str, bool]]] = []
    for prompt, replies in zip(person.prompts, drawn):
        kept = {replies[i][0].strip(): bool(replies[i][1]) for i in distinct_replies([t for t, _ in replies])}
        if len(kept) >= 2:
            asked.append((prompt, list(kept), kept))
    # every message's replies scored in one pass of the reward model, then split by message
    flat = [(prompt, t) for prompt, texts, _ in asked for t in texts]
    _, scored = reply_features(reward_model, [p for p, _ in flat], [t for _, t in flat]) if flat else (None, None)
    bounds = np.cumsum([0] + [len(texts) for _, texts, _ in asked])
    found = [(*a, scored[bounds[i] : bounds[i + 1]]) for i, a in enumerate(asked)]
    model = person.model(scored if flat else None)
    log.info("taste of %s: %s", person.rater, model.describe())
    rows: list[dict[str, Any]] = []
    for prompt, texts, kept, feats in found:
        best, worst, p = model.surest(feats)
        if p < min_probability:
            continue
        rows.append(
            {
                "prompt": prompt,
                "chosen": texts[best],
                "rejected": texts[worst],
                "probability": p,
                "chosen_finished": kept[texts[best]],
                "rejected_finished": kept[texts[worst]],
            }
        )
    return rows, model


def taste_items(
    pairs: pd.DataFrame,
    reward_model: Any,
    sample: Sampler,
    *,
    min_choices: int,
    prompts: int,
    samples: int,
    min_probability: float,
    now: str,
    ender: Ender | None = None,
    endings: int = 0,
) -> TastePairs:
    """The on-policy taste pairs of every person with enough choices (module docstring) as replay items, and each
    person's taste model: a pair's weight is 2 p - 1 for the model's probability p (0.5-1) that the person prefers
    its chosen reply, so a sure pair weighs 1; its intensity the same; safety and vector the reward model's of the
    chosen reply. With `endings` (and `ender`), each message's replies ranked are endings of one opening
    (`with_endings`)."""
    rows, models = [], {}
    for person in person_choices(pairs, reward_model, min_choices, prompts):
        drawn = sample(person.prompts, samples)
        if endings and ender is not None:
            drawn = with_endings(person.prompts, drawn, ender, endings)
        ranked, models[person.rater] = ranked_pairs(person, reward_model, drawn, min_probability)
        rows += [{"rater": person.rater, **row} for row in ranked]
    if not rows:
        return TastePairs(pd.DataFrame(columns=ITEM_COLUMNS + FINISHED), models)
    table = pd.DataFrame(rows)
    raw = reward_model.raw_scores(list(table["prompt"]), list(table["chosen"]))
    sure = np.clip(2.0 * table["probability"].to_numpy(dtype=float) - 1.0, 0.0, 1.0)
    items = pd.DataFrame(
        {
            "id": [
                f"taste:{r}:{fingerprint([p, c, j], 12)}"
                for r, p, c, j in zip(table["rater"], table["prompt"], table["chosen"], table["rejected"])
            ],
            "time": now,
            "source": [f"taste:{r}" for r in table["rater"]],
            "prompt": table["prompt"].to_numpy(),
            "chosen": table["chosen"].to_numpy(),
            "rejected": table["rejected"].to_numpy(),
            "reward_intensity": sure,
            "safety_score": np.asarray(raw["safety_score"], dtype=float),
            "vector": [dict(zip(reward_model.dimensions, map(float, v))) for v in raw["vector"]],
            "weight": sure,
            "chosen_finished": table["chosen_finished"].to_numpy(dtype=bool),
            "rejected_finished": table["rejected_finished"].to_numpy(dtype=bool),
        },
        columns=ITEM_COLUMNS + FINISHED,
    )
    return TastePairs(items, models)


def before_and_after(cfg: Any, model: PersonalModel, reward_model: Any, taught: set[str]) -> dict[str, Any] | None:
    """One message the person never taught on, with the reply of the adapter live before their online updates (the
    newest daily adapter in the live stack) and the live one's: the message whose reply moved most toward their taste
    (`model`'s utility), from the replies the gate keeps (`gate.reply_cache`: both answered the held-out prompts and
    the memory questions greedily). None while no online update is live or no message is shared."""
    from hominem_pipeline.core.online.gate import SMOKE_PROMPT
    from hominem_pipeline.core.online.live import LIVE_DIR, ONLINE_ADAPTERS, LiveState
    from hominem_pipeline.core.online.reply_cache import reply_cache

    state = LiveState(cfg.data_dir)
    online = f"{LIVE_DIR}/{ONLINE_ADAPTERS}/"
    stack = state.stack()
    if not stack or stack[-1]["version"] is None or not str(stack[-1]["adapter"]).startswith(online):
        return None
    daily = next((e for e in reversed(stack) if not str(e["adapter"] or "").startswith(online)), None)
    cache = reply_cache(cfg)
    before, after = cache.get(daily["version"] if daily else None), cache.get(stack[-1]["version"])
    shared = [
        m
        for m in before
        if m in after and not m.startswith("check:") and m != SMOKE_PROMPT and m not in taught and after[m].strip()
    ]
    if not shared:
        return None
    _, was = reply_features(reward_model, shared, [before[m] for m in shared])
    _, now = reply_features(reward_model, shared, [after[m] for m in shared])
    best = int(np.argmax(model.utility(now) - model.utility(was)))
    return {
        "message": shared[best],
        "before": before[shared[best]],
        "after": after[shared[best]],
        "before_version": daily["version"] if daily else None,
        "after_version": stack[-1]["version"],
    }
