"""Checks on a partition of teacher labels: what `hominem data validate` and `data sample` report."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from hominem_pipeline.core.schema import label_problems

# Checks whose failures make a partition unfit for training; the rest are reported as warnings.
BLOCKING = ("schema", "duplicate_trajectory", "empty_response")


@dataclass
class ValidationReport:
    rows: int
    failures: Counter = field(default_factory=Counter)  # check -> failing rows
    warnings: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)  # check -> a few messages

    @property
    def failed_rows(self) -> int:
        return sum(self.failures.values())

    @property
    def ok(self) -> bool:
        return self.failed_rows == 0

    def note(self, check: str, message: str, blocking: bool) -> None:
        (self.failures if blocking else self.warnings)[check] += 1
        self.examples.setdefault(check, [])
        if len(self.examples[check]) < 3:
            self.examples[check].append(message)


def row_problems(row: dict[str, Any], dimensions: list[str]) -> list[str]:
    """Schema problems of one label row (ranges, finiteness, missing fields)."""
    label = {k: row.get(k) for k in ("trajectory_id", "prompt_id", "vector", "scalar", "reward_intensity", "safety_score", "rationale")}
    if isinstance(label["vector"], dict):
        label["vector"] = {k: v for k, v in label["vector"].items() if v is not None}
    return label_problems(label, dimensions)


def validate_labels(labels: pd.DataFrame, dimensions: list[str], trajectories: pd.DataFrame | None = None) -> ValidationReport:
    report = ValidationReport(rows=len(labels))
    for row in labels.to_dict(orient="records"):
        tid = row.get("trajectory_id", "?")
        problems = row_problems(row, dimensions)
        if problems:
            report.note("schema", f"{tid}: {'; '.join(problems)}", blocking=True)
        if not str(row.get("response", "")).strip():
            report.note("empty_response", f"{tid}: empty response", blocking=True)
    dupes = labels["trajectory_id"][labels["trajectory_id"].duplicated()] if "trajectory_id" in labels else []
    for tid in dupes:
        report.note("duplicate_trajectory", f"{tid}: labeled more than once", blocking=True)
    if trajectories is not None and "finished" in trajectories:
        for row in trajectories[~trajectories["finished"]].itertuples():
            report.note("truncated_response", f"{row.trajectory_id}: stopped at the token limit", blocking=False)
    return report
