"""Helpers the stages' build functions share."""

from __future__ import annotations

import json
import logging
from typing import Any

import pandas as pd

from hominem_pipeline.core.common.schema import Prompt

log = logging.getLogger(__name__)


def write_json(path, payload: Any) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=float) + "\n")


def prompts_of(frame: pd.DataFrame, split: str) -> list[Prompt]:
    cols = list(Prompt.model_fields)
    rows = frame[frame.split == split][cols]
    rows = rows.astype(object).where(rows.notna(), None)  # a missing parent_id reads back as NaN
    return [
        Prompt(**{k: (list(v) if k == "tags" else v) for k, v in row.items()})
        for row in rows.to_dict(orient="records")
    ]


def teacher_accounting(
    usage: dict[str, float | None], failed: list[dict[str, Any]], out_dir
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Metrics and metadata for a teacher's calls: usage (calls, cache hits, retries, tokens, cost) and
    the calls that failed for good, written to failed_calls.json so the partition says what is missing."""
    metadata: dict[str, Any] = {"missing": len(failed)}
    if failed:
        write_json(out_dir / "failed_calls.json", failed)
        metadata["failed_examples"] = failed[:3]
        log.warning(
            "%d teacher calls failed after every retry; the partition is incomplete (see failed_calls.json)",
            len(failed),
        )
    if usage:
        metadata["usage"] = usage
    return {**usage, "missing": len(failed)}, metadata
