"""When to retrain: data-volume thresholds for the memory (SFT) and reward (preference) channels.

The design's cadence (execution plan, Phase 7): retrain when the memory channel has 500 new
conversations, or the reward channel 200 new preference pairs, or both reach 50% of those.
`count_given` is the one place that counts: what people said to `hominem serve`, read from the
interaction log through the preference history index (brought up to date first, incrementally; the
rules are `core/online/tally.py`'s, those `human_feedback` trains by), and the human pairs they imported.
A version that is not built yet changes nothing: a choice counts from the moment it is in the log.

`retrain_tick` is the retrain sensor's decision without Dagster: it compares the counts with those at
the last retrain (the sensor's cursor), says why it does or does not start a run, and keeps what it
decided in `data/live/retrain_sensor.json`, which `hominem live status` and the dashboard show.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hominem_pipeline.core.common.files import write_text_atomic
from hominem_pipeline.core.config import HominemConfig, RetrainConfig
from hominem_pipeline.core.online.log import log_folder
from hominem_pipeline.core.pipeline.lineage import Lineage, lineage

STATE_FILE = "retrain_sensor.json"  # in data/live/


@dataclass(frozen=True)
class DataCounts:
    conversations: int  # memory channel: conversations held with the service
    preference_pairs: int  # reward channel: people's pairs (feedback and imports)
    parts: dict[str, int] = field(default_factory=dict)  # the reward channel per part: tally.CHANNELS and `imported`

    def since(self, earlier: DataCounts) -> DataCounts:
        return DataCounts(
            conversations=max(0, self.conversations - earlier.conversations),
            preference_pairs=max(0, self.preference_pairs - earlier.preference_pairs),
            parts={k: max(0, v - earlier.parts.get(k, 0)) for k, v in self.parts.items()},
        )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataCounts:
        return cls(
            int(data.get("conversations", 0)),
            int(data.get("preference_pairs", 0)),
            {k: int(v) for k, v in data.get("parts", {}).items()},
        )


@dataclass(frozen=True)
class RetrainDecision:
    retrain: bool
    reason: str


def should_retrain(new: DataCounts, cfg: RetrainConfig) -> RetrainDecision:
    mem, rew = new.conversations, new.preference_pairs
    if mem >= cfg.memory_conversations:
        return RetrainDecision(True, f"memory channel: {mem} new conversations >= {cfg.memory_conversations}")
    if rew >= cfg.reward_pairs:
        return RetrainDecision(True, f"reward channel: {rew} new preference pairs >= {cfg.reward_pairs}")
    mem_min = cfg.combined_fraction * cfg.memory_conversations
    rew_min = cfg.combined_fraction * cfg.reward_pairs
    if mem >= mem_min and rew >= rew_min:
        return RetrainDecision(True, f"both channels at {cfg.combined_fraction:.0%}: {mem} conversations, {rew} pairs")
    return RetrainDecision(
        False,
        f"not yet: {mem}/{cfg.memory_conversations} conversations, {rew}/{cfg.reward_pairs} preference pairs",
    )


def _imported(data: Lineage) -> int:
    """The pairs of every imported day (`human_preferences`: built when imported, so counted from its versions)."""
    total = 0
    for partition in data.store.partitions("human_preferences"):
        if (ref := data.expected("human_preferences", partition)) is not None:
            total += int(ref.manifest.get("metadata", {}).get("rows", 0))
    return total


def count_given(cfg: HominemConfig, data: Lineage | None = None) -> DataCounts:
    """Everything people have given so far: the conversations held with the service and the pairs their
    feedback makes, from the log (through the history index, brought up to date), and their imported pairs.
    The teacher's own output does not count: it arrives every day by itself."""
    from hominem_pipeline.core.online.history import HistoryIndex, index_url
    from hominem_pipeline.core.online.tally import CHANNELS

    with HistoryIndex(index_url(cfg.history.url, cfg.data_dir)) as index:
        folder = log_folder(cfg)
        if folder.is_dir():
            index.update(folder)
        given = index.given()
    imported = _imported(data or lineage(cfg))
    parts = {c: getattr(given, c) for c in CHANNELS} | {"imported": imported}
    return DataCounts(conversations=given.conversations, preference_pairs=given.pairs + imported, parts=parts)


def drift_to_act_on(data: Lineage, acted: str | None) -> tuple[str, str] | None:
    """(version, reason) of the newest `attunement` day under this config when it reports drift
    (`preference_drift`: people's preferences or the served replies moved) and is not `acted`, the
    version a retrain was already started for; None otherwise."""
    days = [d for d in data.store.partitions("attunement") if data.expected("attunement", d) is not None]
    if not days:
        return None
    ref = data.expected("attunement", days[-1])
    drifted = ref.manifest.get("metadata", {}).get("drifted")
    if not isinstance(drifted, list) or not drifted or ref.version == acted:
        return None
    return ref.version, f"drift on {days[-1]}: " + "; ".join(drifted[:3])


def newest_log_day(cfg: HominemConfig) -> str | None:
    """The newest UTC day the interaction log has events for (its files are `<day>.jsonl`)."""
    folder = log_folder(cfg)
    days = sorted(p.stem for p in folder.glob("*.jsonl") if p.stat().st_size > 0) if folder.is_dir() else []
    return days[-1] if days else None


@dataclass(frozen=True)
class Request:
    """A run the sensor asks for: which job (`retrain`: the day's feedback, reward model and everything
    after, the live gate included; `daily`: the whole chain, when the day has no labels yet), for which
    day, under which run key (one run per distinct data state), with the tags the run page shows."""

    job: str
    partition: str
    run_key: str
    tags: dict[str, str]


@dataclass(frozen=True)
class Tick:
    request: Request | None
    cursor: str
    reason: str
    since: DataCounts  # counted since the last retrain


def _target(cfg: HominemConfig, data: Lineage) -> tuple[str, str] | None:
    """(job, day) a retrain runs: the newest day with feedback or labels; the retrain job when that day's
    labels are built under this config, else the daily job (its teacher work first)."""
    labeled = [d for d in data.store.partitions("teacher_labels") if data.expected("teacher_labels", d) is not None]
    day = max([d for d in (newest_log_day(cfg), labeled[-1] if labeled else None) if d is not None], default=None)
    if day is None:
        return None
    return ("retrain" if day in labeled else "daily"), day


def retrain_tick(cursor: str | None, cfg: HominemConfig, now: str | None = None) -> Tick:
    """One evaluation of the retrain sensor. The cursor holds the counts at the last retrain, so only what
    arrived since counts towards the thresholds, and the attunement version whose drift a retrain was
    started for (`drift`), so one drift starts one retrain. The outcome is kept in the state file."""
    from hominem_pipeline.core.online.live import utc_now

    data = lineage(cfg)
    counts = count_given(cfg, data)
    state = json.loads(cursor) if cursor else {}
    acted = state.pop("drift", None)
    seen = DataCounts.from_dict(state)
    since = counts.since(seen)
    decision = should_retrain(since, cfg.retrain)
    drift = drift_to_act_on(data, acted)
    if not decision.retrain and drift is not None:
        decision = RetrainDecision(True, drift[1] + f" ({decision.reason.removeprefix('not yet: ')})")
    keep = json.dumps(seen.as_dict() | ({"drift": acted} if acted else {}))
    request, reason, new_cursor = None, decision.reason, cursor or keep
    if decision.retrain:
        target = _target(cfg, data)
        if target is None:
            reason = f"{decision.reason}, but no day to train on: run `hominem run` (or `make run`) once first"
        else:
            job, day = target
            trigger = "drift" if decision.reason.startswith("drift") else "data_threshold"
            tags = {
                "hominem/trigger": trigger,
                "hominem/reason": decision.reason[:200],
                "hominem/new_conversations": str(since.conversations),
                "hominem/new_pairs": str(since.preference_pairs),
                **{f"hominem/new_{k}": str(v) for k, v in since.parts.items()},
                "hominem/total_conversations": str(counts.conversations),
                "hominem/total_pairs": str(counts.preference_pairs),
            }
            key = f"retrain-{day}-{counts.conversations}-{counts.preference_pairs}" + (
                f"-drift-{drift[0]}" if drift is not None else ""
            )
            request = Request(job=job, partition=day, run_key=key, tags=tags)
            acted = drift[0] if drift is not None else acted
            new_cursor = json.dumps(counts.as_dict() | ({"drift": acted} if acted else {}))
    tick = Tick(request, new_cursor, reason, since)
    write_state(cfg, tick, now or utc_now())
    return tick


def state_path(data_dir: Path) -> Path:
    return Path(data_dir) / "live" / STATE_FILE


def read_state(data_dir: Path) -> dict[str, Any] | None:
    """What the sensor decided last (None: it has not ticked under this data folder)."""
    path = state_path(data_dir)
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except ValueError:  # written by replace, so never half; a hand edit that broke it reads as no tick
        return None


def describe_state(state: dict[str, Any] | None) -> list[str]:
    """The sensor's state in a few lines for a person (`hominem live status`)."""
    if state is None:
        return [
            "retrain sensor: no tick yet (it runs wherever a Dagster daemon runs: `make ui`, deploy/; retrain.sensor)"
        ]
    since, limits = state["since_last_retrain"], state["thresholds"]
    lines = [
        f"retrain sensor: last tick {state['time']}: {state['reason']}",
        f"  since the last retrain: {since['conversations']}/{limits['conversations']} conversations, "
        f"{since['preference_pairs']}/{limits['preference_pairs']} preference pairs"
        + (
            " (" + ", ".join(f"{k} {v}" for k, v in since.get("parts", {}).items() if v) + ")"
            if any(since.get("parts", {}).values())
            else ""
        ),
    ]
    request, run = state.get("last_request"), state.get("last_run")
    if request:
        started = f"run {run['run_id'][:8]} {run['status'].lower()}" if run else "its run not started yet"
        lines.append(
            f"  last retrain: {request['time']}, {request['job']} job for {request['partition']} "
            f"({request['tags'].get('hominem/reason', '')}): {started}"
        )
    return lines


def write_state(cfg: HominemConfig, tick: Tick, now: str) -> None:
    """The state file: the last tick (time, reason, counts since the last retrain against the thresholds),
    the last run it requested, and that run's id and status once the daemon reports them (`record_run`)."""
    before = read_state(cfg.data_dir) or {}
    r = cfg.retrain
    _write(
        cfg,
        {
            "time": now,
            "reason": tick.reason,
            "since_last_retrain": tick.since.as_dict(),
            "thresholds": {
                "conversations": r.memory_conversations,
                "preference_pairs": r.reward_pairs,
                "combined_fraction": r.combined_fraction,
            },
            "last_request": (dataclasses.asdict(tick.request) | {"time": now})
            if tick.request
            else before.get("last_request"),
            "last_run": None if tick.request else before.get("last_run"),
        },
    )


def record_run(cfg: HominemConfig, run: dict[str, Any]) -> None:
    """The id and status of the run the last request started, as the daemon reports them."""
    state = read_state(cfg.data_dir)
    if state is not None and state.get("last_run") != run:
        _write(cfg, state | {"last_run": run})


def _write(cfg: HominemConfig, state: dict[str, Any]) -> None:
    write_text_atomic(state_path(cfg.data_dir), json.dumps(state, indent=2) + "\n")
