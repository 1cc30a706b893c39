"""Online updates of the live adapter: the fast loop.

One update:

1. builds the replay buffer: people's preference pairs from the last `online.feedback_days` of the
   interaction log (their strength is the intensity; the live reward model scores the chosen reply's
   safety and vector, once per pair and reward model) and the teacher's preference pairs of the newest
   `online.teacher_days` days the live adapter was trained on (`update_sources`);
2. samples `online.batch_items` of them (recent and old, by priority and at random; with people's nudges
   pressing on dimensions, every pair is weighted by the pressure and dimension pairs join the batch,
   taking `online.nudges.pair_share` of it or trained beside it, `nudges.py`) and trains the live adapter
   (the base when none is live) for `online.max_steps` steps (`online.nudges.max_steps` while nudges
   press) of the `dual` loss on them and the memory files, into an immutable `data/live/adapters/<version>/`;
3. offers it to the gate (`promotion.offer`) with its partial Reward Health Index: DCS on its replies to
   the held-out prompts and GVS on its gradient norms, weighted as in `health.weights` and renormalised,
   written to `health.json` beside it. Below `online.skip_below` it stays a candidate; below
   `online.rollback_below` the online update live now is rolled back too; below `online.freeze_below`
   online updates are frozen until `hominem live unfreeze` (each left null: the health calibration's
   `fast_loop.thresholds`, `calibration.fast_loop`).

Before that, facts and corrections people stated in the log, and the replies they thumbed up
(`online.liked_replies`), become memory rows (`facts`, in `online.memory_folder`). An update with nothing
from people to learn from (no pair, no nudge, no newly liked reply, no new fact), nothing
new since the live online update was trained, or whose batch and starting adapter equal an earlier
update's, is skipped with the reason. `hominem live update`, the server's scheduler and
POST /admin/live/update all run `run_update`.

The parts: `sources` (where the data comes from), `batch` (what one update learns from: `gather`),
`training` (`train_update`), `judging` (the partial health index, the gate, the fast loop).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.evaluation.calibration import fast_loop
from hominem_pipeline.core.online.live import LIVE_DIR, ONLINE_ADAPTERS, LiveState
from hominem_pipeline.core.online.updates.batch import (
    PEOPLE_SEEN,
    REPLAY_BATCH,
    UpdateBatch,
    gather,
    own_replies,
    sample_as_served,
    stated_facts,
)
from hominem_pipeline.core.online.updates.judging import judge, partial_health
from hominem_pipeline.core.online.updates.result import UpdateResult
from hominem_pipeline.core.online.updates.sources import (
    SCORES,
    feedback_events,
    held_out_prompts,
    prepare,
    reward_model_at,
    update_sources,
)
from hominem_pipeline.core.online.updates.training import train_update

log = logging.getLogger(__name__)

__all__ = [
    "PEOPLE_SEEN",
    "REPLAY_BATCH",
    "SCORES",
    "UpdateBatch",
    "UpdateResult",
    "feedback_events",
    "gather",
    "held_out_prompts",
    "own_replies",
    "partial_health",
    "prepare",
    "reward_model_at",
    "run_update",
    "sample_as_served",
    "stated_facts",
    "train_update",
    "update_sources",
]


def run_update(cfg: HominemConfig, *, by: str, reason: str) -> UpdateResult:
    """One online update of the live adapter, gated; see the package's docstring. One at a time per data
    folder (a file lock; another process's update in progress: skipped), and never beside the daily run's training
    (`common.locks.training`: skipped, the next trigger tries again); a temp folder an update killed mid-training
    left behind is removed."""
    from filelock import FileLock, Timeout

    from hominem_pipeline.core.common.locks import TrainingBusy, training

    folder = cfg.data_dir / LIVE_DIR / ONLINE_ADAPTERS
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(folder / ".update.lock"), timeout=0), training(cfg.data_dir, "an online update", wait=0):
            for torn in folder.glob(".online-*.tmp"):
                shutil.rmtree(torn, ignore_errors=True)
            return _update(cfg, by=by, reason=reason)
    except Timeout:
        return UpdateResult(
            "skipped",
            f"another online update of {cfg.data_dir} is running",
            live=LiveState(cfg.data_dir).current().version,
        )
    except TrainingBusy as busy:  # the daily run trains: the next trigger tries again
        return UpdateResult(
            "skipped", f"{busy}; the next update tries again", live=LiveState(cfg.data_dir).current().version
        )


def _update(cfg: HominemConfig, *, by: str, reason: str) -> UpdateResult:
    """The batch, the training, the gate."""
    started = time.monotonic()
    limits = fast_loop(cfg)  # before anything trains: a missing threshold is named now
    plan = gather(cfg, LiveState(cfg.data_dir))
    if isinstance(plan, UpdateResult):
        return plan
    log.info(
        "online update %s: %d replay items (%s) on %s, %d steps",
        plan.version,
        len(plan.batch),
        plan.items,
        plan.live or "the base",
        plan.steps,
    )
    out = cfg.data_dir / LIVE_DIR / ONLINE_ADAPTERS / plan.version
    result = train_update(cfg, plan, out)
    trained = time.monotonic()
    outcome = judge(cfg, plan, result, out, limits, by=by, reason=reason)
    done = time.monotonic()
    seconds = {
        **outcome.seconds,  # the gate's own: loading, deciding, recording
        "train": round(trained - started, 2),
        "gate": round(done - trained, 2),
        "total": round(done - started, 2),
    }
    log.info("online update %s %s in %.0f s: %s", plan.version, outcome.outcome, seconds["total"], outcome.reason)
    return dataclasses.replace(outcome, seconds=seconds)
