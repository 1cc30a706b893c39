"""Retention: raw conversations are kept `privacy.retention_days` days, then dropped.

`expire` takes every event of an older day out of the interaction log (the day's file goes), indexes the log again
without them (a sqlite index vacuumed, so no free page keeps their text), and removes those days' `human_feedback`
versions, the built copies of the log's text: so no reader of the log and no new build sees them. Built versions
of later stages (a reward model, an adapter) are what was learnt, and stay. The memory files' facts (`data/sft/`)
are what people asked to be remembered, and stay until they are forgotten (`core/online/forget.py`).

It runs at every stage build (`pipeline/runner.refresh_window`) and when the service starts; with
`retention_days` null it does nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

COPIES_OF_THE_LOG = ("human_feedback",)  # stages whose versions hold the log's text as it was


@dataclass
class Expired:
    days: list[str] = field(default_factory=list)  # log days dropped
    events: int = 0
    versions: list[str] = field(default_factory=list)  # removed, relative to the data folder


def first_kept(days: int, today: dt.date | None = None) -> str:
    """The oldest day whose conversations are kept with `retention_days` = `days` (today counts as one)."""
    today = today or dt.datetime.now(dt.timezone.utc).date()
    return (today - dt.timedelta(days=days - 1)).isoformat()


def expire(cfg: Any, today: dt.date | None = None, interaction_log: Any = None) -> Expired:
    """Drop what is older than `privacy.retention_days` (see the module's docstring); `interaction_log`: the one a
    running service writes through, else one opened here. Nothing to do: returns at once."""
    from hominem_pipeline.core.online.forget import take_out
    from hominem_pipeline.core.online.log import event_day, log_folder
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

    out = Expired()
    days = cfg.privacy.retention_days
    if days is None:
        return out
    folder = log_folder(cfg)
    keep = first_kept(days, today)
    store = ArtifactStore(cfg.data_dir)
    old = sorted(
        {p.name.removesuffix(".jsonl") for p in folder.glob("*.jsonl") if p.name < f"{keep}.jsonl"}
        | {d for a in COPIES_OF_THE_LOG for d in store.partitions(a) if d < keep}
    )
    if not old:
        return out
    out.events, _ = take_out(cfg, lambda e: event_day(e) < keep, interaction_log)
    for day in old:
        for asset in COPIES_OF_THE_LOG:
            for ref in store.versions(asset, day):
                shutil.rmtree(ref.path)
                out.versions.append(f"{asset}/{day}/{ref.version}")
    out.days = old
    log.info(
        "privacy.retention_days %d: %d event(s) of %s dropped from the log, %d version(s) removed",
        days,
        out.events,
        ", ".join(old),
        len(out.versions),
    )
    return out
