"""What every teacher shares: the `Teacher` interface (sample candidates, rate them, write prompts), its
result types, and the rubric the local judge is asked (which a reward model reading the judge's frame
reads too). `teacher.local` and `teacher.api` implement it; `teacher.factory.build_teacher` picks one.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hominem_pipeline.core.common.schema import Label, Prompt, Trajectory
from hominem_pipeline.core.config import CandidateStyle, HominemConfig, LabelingConfig
from hominem_pipeline.core.pipeline.artifacts import fingerprint

log = logging.getLogger(__name__)

RUBRIC_MIN, RUBRIC_MAX = 1, 5


@dataclass(frozen=True)
class RubricQuestion:
    key: str  # a dimension name, or "scalar", "reward_intensity", "safety_score"
    text: str


T = TypeVar("T")


@dataclass
class TeacherOutput(Generic[T]):
    """What a teacher produced, and what it could not: `rejected` rows go to quarantine (check, reason,
    the raw output); `failed` lists calls that failed after every retry (the partition is incomplete)."""

    items: list[T]
    rejected: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class WriteRequest:
    """Free text from the teacher (prompt generators): an instruction, and how to sample."""

    key: str  # identifies the request in failures
    instruction: str
    system: str | None = None
    max_new_tokens: int = 96
    temperature: float = 0.9  # 0: greedy
    seed: int = 0


class Teacher(abc.ABC):
    """Samples candidates, labels them, and writes text on request. The local teacher is deterministic
    for a given seed; API teachers are made repeatable by the call cache."""

    @abc.abstractmethod
    def describe(self) -> dict[str, str]:
        """Provider, model and anything else that identifies what produced the data."""

    @abc.abstractmethod
    def sample(
        self, prompts: Sequence[Prompt], styles: Sequence[CandidateStyle], max_new_tokens: int, seed: int
    ) -> TeacherOutput[Trajectory]:
        """One response per prompt and candidate; candidate i uses `styles[i]`."""

    @abc.abstractmethod
    def rate(self, trajectories: Sequence[Trajectory]) -> TeacherOutput[Label]:
        """A label per trajectory that could be rated."""

    @abc.abstractmethod
    def write(self, requests: Sequence[WriteRequest]) -> TeacherOutput[str | None]:
        """The teacher's text for each request, in order (None where the call failed, listed in `failed`)."""

    def close(self) -> None:
        """Release clients and caches."""


def make_trajectory(
    prompt: Prompt, candidate: int, style: CandidateStyle, seed: int, response: str, new_tokens: int, finished: bool
) -> Trajectory:
    """A candidate; one the token limit cut is kept up to its last finished sentence (`end_at_sentence`),
    so the judge and the reward model read a reply that ends, not half a word."""
    from hominem_pipeline.core.lm.generation import as_shown

    ended = False
    if not finished:  # cut back to a sentence or line, or it ended at one already
        response, ended = as_shown(response, finished)
    return Trajectory(
        trajectory_id=trajectory_id(prompt.prompt_id, candidate, seed),
        prompt_id=prompt.prompt_id,
        prompt=prompt.text,
        category=prompt.category,
        difficulty=prompt.difficulty,
        candidate_index=candidate,
        style=style.name,
        temperature=style.temperature,
        top_p=style.top_p,
        response=response,
        new_tokens=new_tokens,
        finished=finished,
        ended_at_sentence=ended,
    )


# The text around the exchange the local judge rates (a reward model with `frame: judge` reads it too).
JUDGE_FRAME = ("Conversation to judge:\nUser: ", "\nAssistant: ", "\n")


def rubric_questions(cfg: HominemConfig) -> list[RubricQuestion]:
    qs = [RubricQuestion(d.name, d.question) for d in cfg.dimensions]
    lab = cfg.labeling
    qs += [
        RubricQuestion("scalar", lab.scalar_question),
        RubricQuestion("reward_intensity", lab.intensity_question),
        RubricQuestion("safety_score", lab.safety_question),
    ]
    return qs


def expected_score_to_label_value(key: str, expected: float) -> float:
    """Map a rubric expectation in [1, 5] onto the label's range: [-1, 1] for the vector and scalar,
    [0, 1] for intensity and safety."""
    span = RUBRIC_MAX - RUBRIC_MIN
    unit = (expected - RUBRIC_MIN) / span
    unit = min(1.0, max(0.0, unit))
    if key in ("reward_intensity", "safety_score"):
        return unit
    return 2.0 * unit - 1.0


def rubric_suffix(question: str, tail: str) -> str:
    """What follows the judged conversation when the judge is asked `question`; `tail`: the chat
    template's text after the user's content, up to the assistant's turn. The judge's rating is the
    next token (a reward model with `frame: judge_question` reads the state there)."""
    return f"\nQuestion: {question}{tail}Rating: "


def rubric_system(labeling: LabelingConfig) -> str:
    """The local judge's system text for its rubric questions (a reward model with `frame: judge` reads it too)."""
    return f"{labeling.judge_system} Answer with a single digit from {RUBRIC_MIN} to {RUBRIC_MAX}."


def trajectory_id(prompt_id: str, candidate_index: int, seed: int) -> str:
    return f"{prompt_id}-c{candidate_index}-{fingerprint([seed, prompt_id, candidate_index], 8)}"
