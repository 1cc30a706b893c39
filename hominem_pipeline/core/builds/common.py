"""Helpers the stages' build functions share."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.schema import Prompt

log = logging.getLogger(__name__)


def write_json(path, payload: Any) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=float) + "\n")


def finite(x: Any) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def prompts_of(frame: pd.DataFrame, split: str) -> list[Prompt]:
    cols = list(Prompt.model_fields)
    rows = frame[frame.split == split][cols]
    rows = rows.astype(object).where(rows.notna(), None)  # a missing parent_id reads back as NaN
    return [Prompt(**{k: (list(v) if k == "tags" else v) for k, v in row.items()}) for row in rows.to_dict(orient="records")]


def teacher_accounting(usage: dict[str, float | None], failed: list[dict[str, Any]], out_dir) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Metrics and metadata for a teacher's calls: usage (calls, cache hits, retries, tokens, cost) and
    the calls that failed for good, written to failed_calls.json so the partition says what is missing."""
    metadata: dict[str, Any] = {"missing": len(failed)}
    if failed:
        write_json(out_dir / "failed_calls.json", failed)
        metadata["failed_examples"] = failed[:3]
        log.warning("%d teacher calls failed after every retry; the partition is incomplete (see failed_calls.json)", len(failed))
    if usage:
        metadata["usage"] = usage
    return {**usage, "missing": len(failed)}, metadata


def reward_model_scores(rm: Any, rows: pd.DataFrame) -> tuple[np.ndarray, list[dict[str, float]]]:
    """The reward model's scalar and vector (by dimension name) of each row's prompt and response
    (`evaluation.score_side`: an empty response scores NaN)."""
    from hominem_pipeline.core.reward.model import score_side

    scores = score_side(rm, list(rows["prompt"]), list(rows["response"]))
    return scores["scalar"], [dict(zip(rm.dimensions, map(float, row))) for row in scores["vector"]]


def memory_paths(cfg: HominemConfig) -> list[Path]:
    return [cfg.path(p) for p in cfg.policy.dual.memory_files]


def memory_files_digest(cfg: HominemConfig, partition: str) -> list[list[str]]:
    """The memory files' digests (`policy.dual.memory_files` and data/sft/): new or edited rows retrain a
    dual adapter and re-run the memory probe."""
    from hominem_pipeline.core.evaluation.memory import memory_digest

    return memory_digest(memory_paths(cfg))
