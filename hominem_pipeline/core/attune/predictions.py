"""The prediction log: what a reward model predicted for a pair a person (or the judge) ordered.

One row per pair: who ordered it and when (`source`: page, import or judge; `rater`, `time`), the
prompt's category (where the pipeline wrote the prompt) and domain (the seed category it lies nearest,
by the shipped encoder: every prompt has one), which reward model predicted (`reward_model`, and
`in_sample` when it had trained on the pair's day), P(chosen) through its fitted temperature, the
scalar gap and its ensemble spread, each dimension's gap, and, for a page choice, what the reward model
that served the two replies predicted at the time (`served_p_chosen`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.reward.calibration import preference_probability

Embed = Callable[[list[str]], np.ndarray]
SOURCES = (
    "page",
    "import",
    "judge",
)  # people's choices (the page's, imported ones), and the judge's ranked candidates
PEOPLE = ("page", "import")
# a page pair's category when both replies are the student's (else asked: an imported question; written: elsewhere)
SERVED_CATEGORY = "served"
BASE_COLUMNS = [
    "pair_id",
    "source",
    "rater",
    "time",
    "day",
    "prompt_id",
    "prompt",
    "chosen",
    "rejected",
    "category",
    "domain",
    "tag",
    "weight",
    "reward_model",
    "in_sample",
    "p_chosen",
    "gap",
    "gap_std",
    "correct",
    "served_reward_model",
    "served_p_chosen",
    "chosen_words",
    "rejected_words",
]


def columns(dimensions: Sequence[str]) -> list[str]:
    """The table's columns: the base ones, each dimension's gap (chosen - rejected) and the chosen reply's value."""
    return BASE_COLUMNS + [f"gap_{d}" for d in dimensions] + [f"chosen_{d}" for d in dimensions]


def empty(dimensions: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in columns(dimensions)})


def _dtype(column: str) -> str:
    if column in ("in_sample", "correct"):
        return "bool"
    if column in ("chosen_words", "rejected_words"):
        return "int64"
    if column in ("weight", "p_chosen", "gap", "gap_std", "served_p_chosen") or column.startswith(("gap_", "chosen_")):
        return "float64"
    return "object"


def words(texts: Sequence[str]) -> np.ndarray:
    return np.array([len(str(t).split()) for t in texts], dtype=np.int64)


class Domains:
    """The seed category a prompt lies nearest (cosine to each category's mean embedding of its seed
    prompts): a domain for prompts the pipeline did not write (page conversations, imported pairs)."""

    def __init__(self, seeds: Sequence[tuple[str, str]], embed: Embed):
        if not seeds:
            raise ValueError("Domains needs seed prompts (text, category); prompts.seed_file has none")
        self.embed = embed
        self.names = sorted({c for _, c in seeds})
        vectors = _unit(embed([t for t, _ in seeds]))
        cats = np.array([c for _, c in seeds])
        self.centroids = _unit(np.stack([vectors[cats == c].mean(0) for c in self.names]))

    def __call__(self, prompts: Sequence[str]) -> list[str]:
        if not len(prompts):
            return []
        sims = _unit(self.embed([_last_message(p) for p in prompts])) @ self.centroids.T
        return [self.names[i] for i in sims.argmax(1)]


def _last_message(prompt: str) -> str:
    """A transcript prompt ("\\n\\nHuman: ... \\n\\nAssistant:") by its last human message; else itself."""
    if "\n\nHuman:" not in prompt:
        return prompt
    last = prompt.rsplit("\n\nHuman:", 1)[1]
    return last.split("\n\nAssistant:", 1)[0].strip() or prompt


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def predict(
    pairs: pd.DataFrame, model: Any, label: str, in_sample: bool, domains: Domains | None, day: str
) -> pd.DataFrame:
    """The prediction rows of `pairs` by `model`.

    Args:
        pairs: pair_id, prompt, chosen, rejected, source; optional rater, time, prompt_id, category, tag, weight,
            served_reward_model, served_p_chosen, day, domain.
        model: the RewardModel that predicts.
        label: its version.
        in_sample: whether it trained on these pairs.
        domains: gives each prompt's domain where the frame has none.
        day: each row's day where the frame has none.
    """
    dims = list(model.dimensions)
    if not len(pairs):
        return empty(dims)
    prompts = list(pairs["prompt"])
    raw = model.raw_scores(prompts + prompts, list(pairs["chosen"]) + list(pairs["rejected"]), uncertainty=True)
    n = len(pairs)
    vector, scalar, spread = (
        raw["vector"].astype(np.float64),
        raw["scalar"].astype(np.float64),
        raw["std"]["scalar"].astype(np.float64),
    )
    gap = scalar[:n] - scalar[n:]
    p = preference_probability(gap, model.temperature)
    out = pd.DataFrame(
        {
            "pair_id": pairs["pair_id"].astype(str).to_numpy(),
            "source": pairs["source"].to_numpy(),
            "rater": _column(pairs, "rater"),
            "time": _column(pairs, "time"),
            "day": pairs["day"].to_numpy() if "day" in pairs else day,
            "prompt_id": _column(pairs, "prompt_id"),
            "prompt": prompts,
            "chosen": pairs["chosen"].to_numpy(),
            "rejected": pairs["rejected"].to_numpy(),
            "category": _column(pairs, "category"),
            "domain": domains(prompts) if domains is not None else _column(pairs, "domain"),
            "tag": _column(pairs, "tag"),
            "weight": pairs["weight"].astype(float).to_numpy() if "weight" in pairs else np.ones(n),
            "reward_model": label,
            "in_sample": bool(in_sample),
            "p_chosen": p,
            "gap": gap,
            "gap_std": np.sqrt(spread[:n] ** 2 + spread[n:] ** 2),
            "correct": gap > 0,
            "served_reward_model": _column(pairs, "served_reward_model"),
            "served_p_chosen": pairs["served_p_chosen"].astype(float).to_numpy()
            if "served_p_chosen" in pairs
            else np.full(n, np.nan),
            "chosen_words": words(pairs["chosen"]),
            "rejected_words": words(pairs["rejected"]),
        }
    )
    for j, d in enumerate(dims):
        out[f"gap_{d}"] = vector[:n, j] - vector[n:, j]
    for j, d in enumerate(dims):
        out[f"chosen_{d}"] = vector[:n, j]
    return out[columns(dims)]


def served_choices(pred: pd.DataFrame) -> pd.DataFrame:
    """The rows of people's choices between two replies the student served (what the reward model must
    read of the student's own style), beside the judge's ranked candidates."""
    return pred[(pred["source"] == "page") & (pred["category"] == SERVED_CATEGORY)]


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame:
        return np.array([None] * len(frame), dtype=object)
    return frame[name].astype(object).where(frame[name].notna(), None).to_numpy()


def page_pairs(feedback: pd.DataFrame, conversations: pd.DataFrame, data_dir: Path) -> pd.DataFrame:
    """A day's page pairs (`human_feedback`'s table) with the time of the choice and what the serving
    reward model predicted then: P(chosen) from the two turns' scalars through that model's temperature
    (read from its folder's METADATA; NaN when either reply was not scored or the folder is gone); the
    category says whose replies they were: served (both the student's), asked (a question the service
    asked), written (rated elsewhere)."""
    from hominem_pipeline.core.online.events import BASE, SERVED

    if not len(feedback):
        return feedback.assign(source=[], served_reward_model=[], served_p_chosen=[], time=[], category=[])
    turns = (
        conversations.set_index("turn")
        if len(conversations)
        else pd.DataFrame(columns=["scalar", "reward_model", "time", "model"])
    )
    temperatures: dict[str, float | None] = {}
    served_label, served_p, times, kinds = [], [], [], []
    for row in feedback.itertuples(index=False):
        a = turns.loc[row.chosen_turn] if row.chosen_turn in turns.index else None
        b = turns.loc[row.rejected_turn] if row.rejected_turn in turns.index else None
        label = (
            a["reward_model"]
            if a is not None and a["reward_model"] == (b["reward_model"] if b is not None else None)
            else None
        )
        t = temperatures.setdefault(label, _temperature(data_dir / label)) if label else None
        ok = t is not None and pd.notna(a["scalar"]) and pd.notna(b["scalar"])
        served_label.append(label)
        served_p.append(float(preference_probability(float(a["scalar"]) - float(b["scalar"]), t)) if ok else np.nan)
        times.append(max(str(a["time"]), str(b["time"])) if a is not None and b is not None else None)
        models = {a.get("model") if a is not None else None, b.get("model") if b is not None else None}
        kinds.append(SERVED_CATEGORY if models <= {SERVED, BASE} else "asked" if "question" in models else "written")
    return feedback.assign(
        source="page", served_reward_model=served_label, served_p_chosen=served_p, time=times, category=kinds
    )


def _temperature(folder: Path) -> float | None:
    from hominem_pipeline.core.reward.metadata import RewardMetadata

    try:
        return RewardMetadata.read(folder).temperature
    except (OSError, KeyError, ValueError, TypeError):
        return None
