"""The data verifier: checks on teacher labels. `verify_labels` splits a partition into rows fit for
training and quarantined rows (with the check and the reason); `validate_labels` re-checks a stored
partition for `hominem data validate`; `verifier_verdict` is the teacher_labels asset check."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from hominem_pipeline.core.common.schema import label_problems

# Checks whose failures make a partition unfit for training; the rest are reported as warnings.
BLOCKING = ("schema", "duplicate_trajectory", "empty_response")
DEGENERATE = "degenerate_response"  # a warning: kept, never the chosen reply of a pair (`verifier.min_reply_logp`)
REPLY_LOGP = "reply_logp"  # labels' column: the student's mean log-probability per reply token (`reward.guards`)


QUARANTINE_COLUMNS = ["trajectory_id", "check", "reason", "row"]


@dataclass
class ValidationReport:
    rows: int
    failures: Counter = field(default_factory=Counter)  # check -> stored rows failing it
    warnings: Counter = field(default_factory=Counter)
    quarantined: Counter = field(default_factory=Counter)  # check -> rows the stage already rejected
    examples: dict[str, list[str]] = field(default_factory=dict)  # check -> a few messages

    @property
    def failed_rows(self) -> int:
        return sum(self.failures.values())

    @property
    def failure_rate(self) -> float:
        """Share of all the partition's rows (stored + quarantined) that failed a blocking check."""
        rejected = self.failed_rows + sum(self.quarantined.values())
        total = self.rows + sum(self.quarantined.values())
        return rejected / total if total else 0.0

    def ok(self, max_failure_rate: float) -> bool:
        """A stored row that fails is never acceptable (it would reach training); quarantined rows are,
        up to the configured rate."""
        return self.failed_rows == 0 and self.failure_rate <= max_failure_rate

    def note(self, check: str, message: str, blocking: bool) -> None:
        (self.failures if blocking else self.warnings)[check] += 1
        self.examples.setdefault(check, [])
        if len(self.examples[check]) < 3:
            self.examples[check].append(message)


def row_problems(row: dict[str, Any], dimensions: list[str]) -> list[str]:
    """Schema problems of one label row (ranges, finiteness, missing fields)."""
    label = {
        k: row.get(k)
        for k in ("trajectory_id", "prompt_id", "vector", "scalar", "reward_intensity", "safety_score", "rationale")
    }
    if isinstance(label["vector"], dict):
        label["vector"] = {k: v for k, v in label["vector"].items() if v is not None}
    return label_problems(label, dimensions)


def quarantine_row(row: dict[str, Any], check: str, reason: str) -> dict[str, Any]:
    return {
        "trajectory_id": str(row.get("trajectory_id", "")),
        "check": check,
        "reason": reason,
        "row": json.dumps(row, default=str)[:4000],
    }


def verify_labels(labels: pd.DataFrame, dimensions: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows that pass every blocking check, quarantined rows with check and reason)."""
    kept, rejected, seen = [], [], set()
    for row in labels.to_dict(orient="records"):
        problems = row_problems(row, dimensions)
        if problems:
            rejected.append(quarantine_row(row, "schema", "; ".join(problems)))
        elif not str(row.get("response", "")).strip():
            rejected.append(quarantine_row(row, "empty_response", "empty response"))
        elif row["trajectory_id"] in seen:
            rejected.append(quarantine_row(row, "duplicate_trajectory", "labeled more than once"))
        else:
            seen.add(row["trajectory_id"])
            kept.append(row)
    return pd.DataFrame(kept, columns=labels.columns), pd.DataFrame(rejected, columns=QUARANTINE_COLUMNS)


def degenerate_reason(response: str, reply_logp: float | None, min_reply_logp: float | None) -> str | None:
    """Why a candidate is degenerate (`verifier.min_reply_logp`): no words or one word over and over
    (`generation.degenerate`), or a mean log-probability per token under the student below the bar
    (word salad); None when it is not, or when the bar is off."""
    from hominem_pipeline.core.lm.generation import degenerate

    if min_reply_logp is None:
        return None
    if (why := degenerate(str(response))) is not None:
        return why
    if reply_logp is not None and not math.isnan(reply_logp) and reply_logp < min_reply_logp:
        return (
            f"the student finds it unlikely: {reply_logp:.2f} nats per token, below verifier.min_reply_logp "
            f"{min_reply_logp}"
        )
    return None


def degenerate_rows(labels: pd.DataFrame, min_reply_logp: float | None) -> dict[str, str]:
    """trajectory_id -> why, for the labels `degenerate_reason` flags."""
    logps = labels[REPLY_LOGP] if REPLY_LOGP in labels else pd.Series([None] * len(labels), index=labels.index)
    out = {}
    for tid, response, logp in zip(labels["trajectory_id"], labels["response"], logps):
        if (why := degenerate_reason(response, None if logp is None else float(logp), min_reply_logp)) is not None:
            out[str(tid)] = why
    return out


def verifier_verdict(kept: int, quarantined: int, max_failure_rate: float, missing: int = 0) -> tuple[bool, str]:
    """Whether the share of trajectories without a usable label (quarantined, or `missing`: their rating
    call failed for good) is within `max_failure_rate`, and the sentence saying so."""
    total = kept + quarantined + missing
    rate = (quarantined + missing) / total if total else 0.0
    if kept == 0:
        return False, f"no label passed the verifier ({quarantined} quarantined" + (
            f", {missing} missing: their calls failed" if missing else ""
        ) + ")"
    verdict = rate <= max_failure_rate
    what = f"{quarantined}/{total} rows quarantined" + (
        f", {missing} missing (their rating calls failed)" if missing else ""
    )
    return verdict, f"{what} ({rate:.1%} without a label; allowed {max_failure_rate:.1%})"


def validate_labels(
    labels: pd.DataFrame,
    dimensions: list[str],
    trajectories: pd.DataFrame | None = None,
    quarantine: pd.DataFrame | None = None,
    min_reply_logp: float | None = None,
) -> ValidationReport:
    report = ValidationReport(rows=len(labels))
    if quarantine is not None:
        for row in quarantine.itertuples():
            report.quarantined[row.check] += 1
            report.examples.setdefault(row.check, [])
            if len(report.examples[row.check]) < 3:
                report.examples[row.check].append(f"{row.trajectory_id}: {row.reason} (quarantined)")
    # The stored rows go through the same verifier the stage used: anything it would reject now is a
    # row that reached the table (a tampered file or an older, looser version).
    _, failing = verify_labels(labels, dimensions)
    for row in failing.itertuples():
        report.note(row.check, f"{row.trajectory_id}: {row.reason}", blocking=True)
    if trajectories is not None and "finished" in trajectories:
        cut = ~trajectories["finished"].astype(bool)
        if "ended_at_sentence" in trajectories:  # cut, but kept up to its last sentence: nothing to say
            cut &= ~trajectories["ended_at_sentence"].astype(bool)
        for row in trajectories[cut].itertuples():
            report.note(
                "truncated_response",
                f"{row.trajectory_id}: stopped mid-sentence at the token limit (teacher.max_new_tokens)",
                blocking=False,
            )
    if "response" in labels:
        for tid, why in degenerate_rows(labels, min_reply_logp).items():
            report.note(DEGENERATE, f"{tid}: {why}", blocking=False)
    return report
