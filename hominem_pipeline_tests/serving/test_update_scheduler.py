"""The online update scheduler's process kept ready: one that dies at start is tried once more, not
started again every few seconds, and the update that comes due still starts its own."""

from __future__ import annotations

import time
from pathlib import Path

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.serving.updates import UpdateScheduler

ROOT = Path(__file__).resolve().parents[2]


def test_a_ready_process_that_dies_at_start_is_started_once_more_not_in_a_loop(tmp_path):
    settings = load_config(root=ROOT).online.model_copy(update={"every_events": 1000, "every_minutes": None})
    audit: list[tuple] = []
    folder = tmp_path / "updates"
    # an argument the CLI refuses: every process the scheduler starts exits at once
    scheduler = UpdateScheduler(
        settings, ["--no-such-option"], folder, lambda action, **kw: audit.append((action, kw)), auto=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (
            scheduler._spare_died and scheduler._spare and scheduler._spare[0].poll() is not None
        ):
            time.sleep(0.2)  # the first died and was replaced; wait for the replacement to die too
        assert scheduler._spare_died
        time.sleep(12)  # more than two of the scheduler's 5-second rounds
        assert len(list(folder.glob("*.log"))) == 2 and not scheduler.status()["ready"]
        # an update asked for still starts (its own process), and says how it failed
        assert scheduler.request("by hand", "test")
        while time.monotonic() < deadline and scheduler.status()["updates"] < 1:
            time.sleep(0.2)
        last = scheduler.status()["last"]
        assert (
            last["outcome"] == "failed"
            and "exited 2" in last["reason"]
            and "no-such-option" in last["reason"].replace("‘", "'")
        )
    finally:
        scheduler.close()
