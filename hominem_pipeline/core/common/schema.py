"""The reward manifold's records: prompts, trajectories, labels and preference pairs.

The dimension names come from config (`HominemConfig.dimension_names`); these models check a record
against whatever list is configured. `label_json_schema` renders the same rules as JSON Schema, which
is what `config/schemas/reward.json` holds for the default dimensions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

VECTOR_RANGE = (-1.0, 1.0)
SCALAR_RANGE = (-1.0, 1.0)
INTENSITY_RANGE = (0.0, 1.0)
SAFETY_RANGE = (0.0, 1.0)  # 1 = safe to learn from


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Prompt(_Record):
    prompt_id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    category: str = Field(min_length=1)
    difficulty: int = Field(ge=1, le=5)
    tags: list[str] = Field(default_factory=list)
    source: str = "seed"  # seed, templated, perturbation, evolutionary or freeform
    parent_id: str | None = None  # the prompt a perturbed or evolved one came from


class Trajectory(_Record):
    """One candidate response of the teacher to one prompt."""

    trajectory_id: str
    prompt_id: str
    prompt: str
    category: str
    difficulty: int
    candidate_index: int = Field(ge=0)
    style: str
    temperature: float
    top_p: float
    response: str
    new_tokens: int = Field(ge=0)
    finished: bool  # False when generation stopped at max_new_tokens
    ended_at_sentence: bool = (
        False  # stopped at max_new_tokens, and the response kept up to its last finished sentence
    )


class Label(_Record):
    """The teacher's judgement of one trajectory."""

    trajectory_id: str
    prompt_id: str
    vector: dict[str, float]
    scalar: float = Field(ge=SCALAR_RANGE[0], le=SCALAR_RANGE[1])
    reward_intensity: float = Field(ge=INTENSITY_RANGE[0], le=INTENSITY_RANGE[1])
    safety_score: float = Field(ge=SAFETY_RANGE[0], le=SAFETY_RANGE[1])
    rationale: str


def vector_matrix(vectors, names, dtype=np.float64) -> np.ndarray:
    """Reward vectors (mappings of dimension -> value, as labels store them) as an (n, len(names)) array."""
    return np.array([[v[d] for d in names] for v in vectors], dtype=dtype).reshape(-1, len(names))


class PreferencePair(_Record):
    pair_id: str
    prompt_id: str
    prompt: str
    category: str
    chosen: str
    rejected: str
    chosen_trajectory_id: str
    rejected_trajectory_id: str
    margin: float = Field(gt=0.0)
    chosen_reward_intensity: float = Field(ge=0.0, le=1.0)
    chosen_safety_score: float = Field(ge=0.0, le=1.0)
    rm_margin: float  # the reward model's scalar(chosen) - scalar(rejected)
    teacher_margin: float | None = None  # the teacher's weighted aggregate(chosen) - aggregate(rejected)
    ranked_by: str = "teacher"  # whose scores chose the pair: teacher (its labels) or reward_model
    # teacher, student (a candidate against the student's own reply), human (imported) or feedback (online)
    source: str = "teacher"
    dimension: str | None = None  # per-dimension pairs: the dimension the chosen reply wins on
    chosen_finished: bool = True  # False: the reply was cut at the teacher's max_new_tokens, not ended by it
    rejected_finished: bool = True


LABEL_SCALAR_FIELDS = {
    "scalar": SCALAR_RANGE,
    "reward_intensity": INTENSITY_RANGE,
    "safety_score": SAFETY_RANGE,
}


def label_problems(row: dict[str, Any], dimensions: list[str]) -> list[str]:
    """Every way `row` breaks the label schema for `dimensions` (empty when it is valid).

    Works on plain dicts (a row read back from Parquet/JSONL) so that the validator can report all
    problems of a partition instead of stopping at the first.
    """
    problems: list[str] = []
    for key in ("trajectory_id", "prompt_id", "rationale"):
        if not isinstance(row.get(key), str) or not row.get(key):
            problems.append(f"{key}: missing or empty")
    vector = row.get("vector")
    if not isinstance(vector, dict):
        problems.append("vector: missing")
    else:
        missing = [d for d in dimensions if d not in vector or vector[d] is None]
        unknown = [d for d in vector if d not in dimensions]
        if missing:
            problems.append(f"vector: missing dimensions {missing}")
        if unknown:
            problems.append(f"vector: unknown dimensions {unknown}")
        for d in dimensions:
            problems.extend(_range_problem(f"vector.{d}", vector.get(d), VECTOR_RANGE))
    for key, bounds in LABEL_SCALAR_FIELDS.items():
        problems.extend(_range_problem(key, row.get(key), bounds))
    return problems


def _range_problem(name: str, value: Any, bounds: tuple[float, float]) -> list[str]:
    if value is None:
        return [] if name.startswith("vector.") else [f"{name}: missing"]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return [f"{name}: not a number ({value!r})"]
    if not math.isfinite(value):
        return [f"{name}: not finite ({value!r})"]
    lo, hi = bounds
    if not lo <= value <= hi:
        return [f"{name}: {value:.4f} outside [{lo}, {hi}]"]
    return []


def label_json_schema(dimensions: list[str]) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of one label for the given dimensions."""

    def number(bounds: tuple[float, float], description: str) -> dict[str, Any]:
        return {"type": "number", "minimum": bounds[0], "maximum": bounds[1], "description": description}

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://hominem.dev/schemas/reward.json",
        "title": "Reward label",
        "description": "A teacher's judgement of one response: the reward vector, a scalar, learning gain and safety.",
        "type": "object",
        "additionalProperties": False,
        "required": [
            "trajectory_id",
            "prompt_id",
            "vector",
            "scalar",
            "reward_intensity",
            "safety_score",
            "rationale",
        ],
        "properties": {
            "trajectory_id": {"type": "string", "minLength": 1},
            "prompt_id": {"type": "string", "minLength": 1},
            "vector": {
                "type": "object",
                "additionalProperties": False,
                "required": list(dimensions),
                "properties": {d: number(VECTOR_RANGE, f"{d}: -1 worst, 0 neutral, 1 best") for d in dimensions},
            },
            "scalar": number(SCALAR_RANGE, "overall preference: -1 worst, 1 best"),
            "reward_intensity": number(INTENSITY_RANGE, "how strongly this example should drive learning"),
            "safety_score": number(SAFETY_RANGE, "1 = safe to learn from; low values gate learning"),
            "rationale": {"type": "string", "minLength": 1},
        },
    }


def teacher_label_schema(dimensions: list[str]) -> dict[str, Any]:
    """The part of a label a teacher writes (no ids), for structured output: Anthropic tool input,
    OpenAI `json_schema` response format, or a schema quoted in the prompt. The rationale comes first so
    that a model writing in order reasons before it scores."""
    full = label_json_schema(dimensions)
    fields = ["rationale", "vector", "scalar", "reward_intensity", "safety_score"]
    return {
        "type": "object",
        "additionalProperties": False,
        "required": fields,
        "properties": {k: full["properties"][k] for k in fields},
    }
