"""What the benchmarks share, each through the package: this code's config on another project's data, the
newest versions a project built (through its lineage, never by globbing its folders), the standard error of
paired differences, and interaction-log events as the service writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def config_on(project: Path, overrides: dict | None = None):
    """This repo's config (this code's settings) with `project`'s data folder and student, then
    `overrides`: a project built under older code or config is measured with the settings of the code under test."""
    from hominem_pipeline.core.config.loader import deep_merge, load_config

    student = load_config(root=ROOT).models.student.path
    there = {"project": {"data_dir": str(project / "data")}, "models": {"student": {"path": str(project / student)}}}
    return load_config(root=ROOT, overrides=deep_merge(there, overrides or {}))


def project_config(project: Path):
    """The project's own config (its config/hominem.yaml), as `hominem` run in its folder reads it."""
    from hominem_pipeline.core.config.loader import load_config

    return load_config(root=project)


def newest(cfg, asset: str, day: str | None = None):
    """The version of `asset` a command reads (`Lineage.newest`: this config's on `day`, default the newest day
    that has one); SystemExit saying why when there is none."""
    from hominem_pipeline.core.pipeline.lineage import lineage

    ref, why = lineage(cfg).newest(asset, day)
    if ref is None:
        raise SystemExit(f"no {asset} to read in {cfg.data_dir}: {why or 'none is built'}; run `make run`")
    return ref


def paired_se(x: np.ndarray) -> float:
    """The standard error of a mean of paired differences (NaN with fewer than two)."""
    x = np.asarray(x, dtype=np.float64)
    return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def turn_event(turn_id: str, time: str, messages: list[dict[str, str]], reply: str, **fields: Any) -> dict[str, Any]:
    """A served turn as the interaction log holds it (`events.new_turn`): the `local` rater unless `fields` names
    another."""
    from hominem_pipeline.core.online.events import new_turn

    rater = fields.pop("rater", "local")
    fields.setdefault("model", "hominem")
    return new_turn(rater, messages, reply, id=turn_id, time=time, **fields).model_dump(mode="json")


def choice_event(event_id: str, time: str, chosen: str, rejected: str, **fields: Any) -> dict[str, Any]:
    """A choice between two turns as the log holds it (`events.Choice`); `clear` and the `local` rater by default."""
    from hominem_pipeline.core.online.events import Choice

    fields = {"rater": "local", "strength": "clear"} | fields
    return Choice(kind="choice", id=event_id, time=time, chosen=chosen, rejected=rejected, **fields).model_dump(
        mode="json", exclude_none=True
    )
