"""What a saved reward model says about itself (`METADATA.json`): everything needed to load and score
it as it was trained, and how it was trained and measured. Every field is required: a folder without
one is not a model this code wrote, and is rebuilt rather than read."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

METADATA = "METADATA.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackboneInfo(_Strict):
    source: str  # the folder or hub id the backbone was read from
    kind: Literal["encoder", "decoder"]
    pooling: Literal["mean", "last", "last_mean"]
    finetune: Literal["full", "lora", "frozen"]
    depth: int  # transformer layers kept
    layers: list[int] | None  # the layers whose states the heads read side by side; None: the last alone


class GuardInfo(_Strict):
    names: list[str]  # the guard columns the heads read after the backbone's (core/reward/guards.py), in order
    student: str  # the student folder that measures them
    sha256: str  # its digest at training


class PeopleInfo(_Strict):
    encoder: str  # the encoder folder the people's score reads (core/reward/people.py)
    sha256: str  # its digest at training
    max_length: int
    # the score's weight in the scalar (the combination's w; or beside a free scalar head), fitted on people's pairs
    # out of fold
    weight: float
    alpha: float  # the score's ridge penalty
    pairs: int  # people's pairs it was fitted on
    agreement: float  # their share it orders as people chose, out of fold


class ScalarInfo(_Strict):
    """The scalar as tanh(sum_d weights[d] * vector[d] + people * people's score + intercept)
    (`reward.combination`)."""

    weights: dict[str, float]  # per dimension, each >= 0
    people: float  # the people's score's weight, >= 0 (0 without one)
    intercept: float


class UncertaintyInfo(_Strict):
    method: Literal["ensemble", "mc_dropout", "none"]
    mc_samples: int


class RewardMetadata(_Strict):
    dimensions: list[str]
    ranges: dict[str, list[float]]
    semantics: dict[str, str]
    normalisation: str
    max_length: int
    backbone: BackboneInfo
    frame: dict[str, str] | None  # the judge's frame around the exchange; None: plain pairs
    head_fit: Literal["gradient", "ridge"]
    validation: str  # how the held-out figures were obtained
    length_feature: bool
    guards: GuardInfo | None  # None: the heads read the backbone alone
    people: PeopleInfo | None  # the people's score the scalar also reads, after the guards; None: none
    scalar: ScalarInfo | None  # the scalar combined from the vector and the people's score; None: its own head
    members: int
    dropout: float
    uncertainty: UncertaintyInfo
    losses: dict[str, Any]
    training_data_digest: str
    date: str
    training_examples: int
    human_pairs: int
    # of human_pairs, those about one dimension alone (people's nudges): they train that dimension, not the scalar
    dimension_only_pairs: int = 0
    calibration: dict[str, Any] | None  # temperature scaling overall and per dimension; None: no held-out pair
    metrics: dict[str, Any]
    history: list[dict[str, Any]]
    created: str
    # each dimension's standard deviation over the teacher's labels it learned from: the spread it was taught, against
    # which a collapse of its vectors is read (`evaluation.manifold`); None: fewer than 2 labels, or a model written
    # before it
    label_spread: dict[str, float] | None = None
    # per day of its window: the people's pairs it read from that day (feedback, nudge, imported), zeros for a day with
    # none
    people_pairs_by_day: dict[str, dict[str, int]] = {}

    @property
    def temperature(self) -> float:
        return float((self.calibration or {}).get("temperature", 1.0))

    def dimension_temperature(self, dimension: str) -> float:
        return float(((self.calibration or {}).get("dimensions") or {}).get(dimension, {}).get("temperature", 1.0))

    def write(self, folder: Path) -> Path:
        path = Path(folder) / METADATA
        path.write_text(self.model_dump_json(indent=2) + "\n")
        return path

    @classmethod
    def read(cls, folder: Path) -> RewardMetadata:
        from pydantic import ValidationError

        path = Path(folder) / METADATA
        if not path.is_file():
            raise FileNotFoundError(
                f"{folder} is not a reward model folder (no {METADATA}); pass a "
                "data/reward_model/<date>/<version> folder"
            )
        try:
            return cls.model_validate_json(path.read_text())
        except ValidationError as exc:
            raise ValueError(
                f"{path} was not written by this version of hominem ({exc.error_count()} field(s) differ, e.g. "
                f"{'.'.join(map(str, exc.errors()[0]['loc']))}); rebuild it: hominem run --date <date> "
                "--select reward_model"
            ) from None
