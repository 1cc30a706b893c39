"""The slow loop: each night, the day's Reward Health Index joins the nightly
series, and its trend acts on what is trained next.

- **Falling nights** take the next step of a ladder (`slow_loop.steps`, by default in this order):
  `lower_lr` (the next adapters, daily and online, train at `lr_factor` times their learning rate),
  `shrink_rank` (the next daily adapters at `rank_factor` times the LoRA rank and alpha, so the same
  scaling; the people's start they begin from is cut to that rank by SVD), `freeze` (online updates and
  promotions stop). A step is taken when the RHI fell on `falling_nights` nights in a row counted from the
  night of the last step (so each step needs a new run of falls).
- **Recovery**, `recovery_nights` rising nights in a row from the last step, undoes the last step taken:
  `unfreeze`, then `restore_rank`, then `restore_lr`, one per recovery.
- **A dip after consolidation**: the night after the daily adapter went live, an RHI more than
  `revert_dip` below the one it went live with rolls it back (`revert`: "revert if RHI dips
  after consolidation").

A night rises or falls only when its RHI moved by more than `min_fall` from the night before. Each action
is an entry of the live history (`live.py`) with the night, its reason and `slow_loop_step`; the settings
in force on a day are replayed from those entries (`adjustment`), each carrying the factors it leaves in
force and the day they apply from (the next one), so a day's adapter is rebuilt the same whatever was
decided after it, and the factors are part of its version. The nights themselves are kept in
`data/live/nights.json` (one per day, the newest measurement), so the trend can be read without the
stages' folders.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hominem_pipeline.core.config import SlowLoopConfig
from hominem_pipeline.core.online.live import LiveState, write_state_file

log = logging.getLogger(__name__)

NIGHTS = "nights.json"  # data/live/nights.json: {day: {"rhi", "adapter", "recorded"}}
UNDO = {"lower_lr": "restore_lr", "shrink_rank": "restore_rank", "freeze": "unfreeze"}
LADDER = set(UNDO) | set(UNDO.values())
BY = "slow loop"


@dataclass(frozen=True)
class Night:
    day: str
    rhi: float | None  # the night's Reward Health Index (of the day's adapter); None: not measured
    adapter: str | None = None  # the daily adapter version it measured


@dataclass(frozen=True)
class Step:
    step: str  # lower_lr | shrink_rank | freeze | restore_lr | restore_rank | unfreeze | revert
    reason: str
    version: str | None = None  # revert: the adapter rolled back


@dataclass(frozen=True)
class Adjustment:
    """The slow loop's factors in force on a day: the learning rate's and the LoRA rank's."""

    lr_factor: float = 1.0
    rank_factor: float = 1.0
    steps: tuple[str, ...] = ()  # the ladder steps in force, oldest first

    @property
    def neutral(self) -> bool:
        return self.lr_factor == 1.0 and self.rank_factor == 1.0

    def digest(self) -> dict[str, float] | None:
        """What enters a daily adapter's version: nothing while neutral (no rebuild of earlier days)."""
        return None if self.neutral else {"lr_factor": self.lr_factor, "rank_factor": self.rank_factor}


# --- the decision (pure) -------------------------------------------------------------------------------


def ladder(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ladder steps in force: the history's slow-loop entries replayed (a step pushes, its undo pops)."""
    stack: list[dict[str, Any]] = []
    for e in history:
        step = e.get("slow_loop_step")
        if step in UNDO:
            stack.append(e)
        elif step in UNDO.values() and stack:
            stack.pop()
    return stack


def _moves(nights: list[Night], since: str | None, min_fall: float) -> tuple[int, int]:
    """(falls, rises) in a row at the end of the measured nights from `since` (that night included as the start)."""
    values = [n.rhi for n in nights if n.rhi is not None and (since is None or n.day >= since)]
    falls = rises = 0
    for before, after in zip(values[::-1][1:], values[::-1]):  # newest move first
        if after < before - min_fall and rises == 0:
            falls += 1
        elif after > before + min_fall and falls == 0:
            rises += 1
        else:
            break
    return falls, rises


def decide(
    nights: list[Night], history: list[dict[str, Any]], cfg: SlowLoopConfig, live_version: str | None
) -> list[Step]:
    """What tonight (the last of `nights`, oldest first) asks of the slow loop, given the live history and
    the adapter live now: a revert of last night's promotion after a dip, and at most one ladder move."""
    if not nights or nights[-1].rhi is None:
        return []
    tonight = nights[-1]
    if any(e.get("slow_loop_night") == tonight.day for e in history):
        return []  # judged already (a re-run of the night)
    out: list[Step] = []
    measured = [n for n in nights[:-1] if n.rhi is not None]
    if cfg.revert_dip is not None and measured:
        last = measured[-1]
        promoted = any(e["action"] == "promote" and e.get("version") == last.adapter for e in history)
        if last.adapter and promoted and live_version == last.adapter and tonight.rhi < last.rhi - cfg.revert_dip:
            out.append(
                Step(
                    "revert",
                    f"slow loop: RHI {tonight.rhi:.3f} on {tonight.day} is more than "
                    f"slow_loop.revert_dip {cfg.revert_dip} below "
                    f"the {last.rhi:.3f} {last.adapter} went live with on {last.day} (a dip after consolidation)",
                    last.adapter,
                )
            )
    stack = ladder(history)
    moved = [
        e.get("slow_loop_night") for e in history if e.get("slow_loop_step") in LADDER and e.get("slow_loop_night")
    ]
    falls, rises = _moves(nights, max(moved) if moved else None, cfg.min_fall)
    taken = [e["slow_loop_step"] for e in stack]
    if falls >= cfg.falling_nights:
        nxt = next((s for s in cfg.steps if s not in taken), None)
        if nxt is not None:
            out.append(
                Step(
                    nxt,
                    f"slow loop: the RHI fell {falls} nights in a row (slow_loop.falling_nights "
                    f"{cfg.falling_nights}), to {tonight.rhi:.3f} on {tonight.day}",
                )
            )
    elif rises >= cfg.recovery_nights and stack:
        out.append(
            Step(
                UNDO[taken[-1]],
                f"slow loop: the RHI rose {rises} nights in a row (slow_loop.recovery_nights {cfg.recovery_nights}), "
                f"to {tonight.rhi:.3f} on {tonight.day}: {taken[-1]} undone",
            )
        )
    return out


def adjustment(history: list[dict[str, Any]], day: str) -> Adjustment:
    """The factors in force for adapters trained on `day`: the last slow-loop entry applying by then."""
    last = None
    for e in history:
        if e.get("slow_loop_step") in LADDER and e.get("applies_from", "9999") <= day:
            last = e
    if last is None:
        return Adjustment()
    return Adjustment(
        float(last.get("lr_factor", 1.0)), float(last.get("rank_factor", 1.0)), tuple(last.get("in_force", ()))
    )


def adjustment_on(data_dir: Path, day: str) -> Adjustment:
    """`adjustment` of the project's live history: what the daily adapter of `day` trains with."""
    return adjustment(LiveState(data_dir).history(), day)


def _after(stack: list[str], step: str) -> list[str]:
    return stack + [step] if step in UNDO else [s for s in stack if UNDO[s] != step]


def factors(steps: list[str], cfg: SlowLoopConfig) -> tuple[float, float]:
    return (cfg.lr_factor if "lower_lr" in steps else 1.0, cfg.rank_factor if "shrink_rank" in steps else 1.0)


def next_day(day: str) -> str:
    return (dt.date.fromisoformat(day) + dt.timedelta(days=1)).isoformat()


# --- the policy settings an adjustment gives ----------------------------------------------------------


def adjusted_rank(r: int, alpha: float, factor: float) -> tuple[int, float]:
    """LoRA rank and alpha times `factor` (rank at least 1), alpha kept at the same ratio to the rank."""
    new_r = max(1, int(round(r * factor)))
    return new_r, alpha * new_r / r


class AdjustedPolicy:
    """The policy settings (a config section or slice) with the slow loop's factors: learning_rate and
    lora (r, alpha) changed, every other setting read through."""

    def __init__(self, policy: Any, adj: Adjustment):
        self._policy, self._adj = policy, adj
        r, alpha = adjusted_rank(policy.lora.r, policy.lora.alpha, adj.rank_factor)
        self.learning_rate = policy.learning_rate * adj.lr_factor
        self.lora = policy.lora.model_copy(update={"r": r, "alpha": alpha})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return {
            **self._policy.model_dump(**kwargs),
            "learning_rate": self.learning_rate,
            "lora": self.lora.model_dump(**kwargs),
        }


def adjusted_policy(policy: Any, adj: Adjustment) -> Any:
    return policy if adj.neutral else AdjustedPolicy(policy, adj)


# --- the nights and the actions (files) ----------------------------------------------------------------


def read_nights(data_dir: Path) -> list[Night]:
    path = Path(data_dir) / "live" / NIGHTS
    if not path.is_file():
        return []
    raw = json.loads(path.read_text())
    return [Night(day, v.get("rhi"), v.get("adapter")) for day, v in sorted(raw.items())]


def record_night(data_dir: Path, night: Night) -> list[Night]:
    """Put `night` into nights.json (replacing that day's), under the live lock; returns every night, oldest first."""
    from filelock import FileLock

    folder = Path(data_dir) / "live"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock"), timeout=60):
        path = folder / NIGHTS
        raw = json.loads(path.read_text()) if path.is_file() else {}
        raw[night.day] = {
            "rhi": night.rhi,
            "adapter": night.adapter,
            "recorded": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        write_state_file(path, dict(sorted(raw.items())))
    return read_nights(data_dir)


@dataclass(frozen=True)
class NightReport:
    night: Night
    steps: list[Step]
    adjustment: Adjustment  # in force from the next day
    enabled: bool

    @property
    def description(self) -> str:
        if self.night.rhi is None:
            return f"slow loop: no RHI measured on {self.night.day}"
        what = "; ".join(s.reason for s in self.steps) if self.steps else "no action"
        off = "" if self.enabled else " (slow_loop.enabled is false: recorded only)"
        return f"slow loop, {self.night.day} RHI {self.night.rhi:.3f}: {what}{off}"


def act(data_dir: Path, night: Night, cfg: SlowLoopConfig, *, by: str, revert: Any = None) -> NightReport:
    """Record `night`, decide, and carry out each step on the live state: `adjust` entries for the
    learning rate and rank, a freeze or unfreeze, a rollback for a revert (`revert(version, reason, **mark)`, the
    caller's rollback that also moves the registry's alias; default: the live state's own)."""
    state = LiveState(data_dir)
    nights = record_night(data_dir, night)
    history = state.history()
    current = state.current()
    steps = decide(nights, history, cfg, current.version) if cfg.enabled else []
    in_force = [e["slow_loop_step"] for e in ladder(history)]
    for step in steps:
        mark = {"slow_loop_night": night.day}
        if step.step == "revert":
            (revert or (lambda v, reason, **m: state.rollback(None, reason=reason, by=f"{BY} ({by})", **m)))(
                step.version, step.reason, **mark
            )
            continue
        in_force = _after(in_force, step.step)
        lr, rank = factors(in_force, cfg)
        mark.update(
            slow_loop_step=step.step,
            applies_from=next_day(night.day),
            lr_factor=lr,
            rank_factor=rank,
            in_force=in_force,
        )
        who = f"{BY} ({by})"
        if step.step == "freeze" and not state.current().frozen:
            state.freeze(reason=step.reason, by=who, **mark)
        elif step.step == "unfreeze" and state.current().frozen and _ours(state.current().frozen):
            state.unfreeze(reason=step.reason, by=who, **mark)
        else:  # a learning-rate or rank step; or a freeze already in place, an unfreeze of one someone else made
            state.adjust(reason=step.reason + _aside(step.step, state), by=who, **mark)
    for step in steps:
        log.info("%s", step.reason)
    return NightReport(night, steps, Adjustment(*factors(in_force, cfg), tuple(in_force)), cfg.enabled)


def _ours(frozen: dict[str, str]) -> bool:
    """A freeze the loops made (the fast loop's partial RHI, or this one), which recovery may lift; one made by hand
    is not."""
    return str(frozen.get("reason", "")).startswith(("fast loop:", "slow loop:"))


def _aside(step: str, state: LiveState) -> str:
    frozen = state.current().frozen
    if step == "freeze" and frozen:
        return f" (already frozen: {frozen['reason']})"
    if step == "unfreeze":
        return (
            f" (left frozen: frozen by hand, {frozen['reason']}; `hominem live unfreeze` lifts it)"
            if frozen
            else " (not frozen any more)"
        )
    return ""


def status(data_dir: Path, cfg: SlowLoopConfig | None, today: str, last: int = 7) -> dict[str, Any]:
    """What `hominem live status` and the dashboard show: the last nights, the steps in force and the factors
    for today, the last actions (`cfg` None: whether it is enabled is not known, e.g. to the dashboard)."""
    history = LiveState(data_dir).history()
    adj = adjustment(history, today)
    actions = [e for e in history if e.get("slow_loop_night")][-5:]
    return {
        "enabled": None if cfg is None else cfg.enabled,
        "nights": [asdict(n) for n in read_nights(data_dir)[-last:]],
        "in_force": list(adj.steps),
        "lr_factor": adj.lr_factor,
        "rank_factor": adj.rank_factor,
        "actions": [
            {
                "time": e["time"],
                "night": e["slow_loop_night"],
                "step": e.get("slow_loop_step") or e["action"],
                "reason": e.get("reason"),
            }
            for e in actions
        ],
    }
