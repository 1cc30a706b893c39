"""The online update scheduler beside the server: after `online.every_events` new feedback events, every
`online.every_minutes` while feedback came in, or on demand (POST /admin/live/update), it runs one
update (`hominem live update`, `core.online.updates.run_update`) in a child process, one at a time.

The child trains and gates off the server's process, so serving never waits on training, and a crash of the update
is not a crash of the service. It stays in the server's process group (stopping the server's group stops it) and is
terminated when the server stops. With the scheduler on, the next update's child is started ahead (with the server,
and again after each update), its libraries, the reward model and the student its guards read loaded (`hominem live
update --ready`), so the update starts without those seconds; it begins when the scheduler writes the reason to its
stdin. When it promotes an adapter, the server's LiveWatcher swaps to it at once; each update is audited with its
outcome, and its output is kept in `<log_dir>/updates/<time>.log` (the time its process started)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hominem_pipeline.core.config import OnlineConfig
from hominem_pipeline.core.online.live import utc_now

log = logging.getLogger(__name__)


def ready_marker(result: Path) -> Path:
    """The file a ready update process writes beside its result file once it has loaded what it loads ahead."""
    return result.with_name(result.name + ".ready")


class UpdateScheduler:
    def __init__(
        self,
        settings: OnlineConfig,
        config_args: Sequence[str],
        folder: Path,
        audit: Callable[..., None],
        on_done: Callable[[], Any] | None = None,
        auto: bool = True,
    ):
        """`config_args`: the --config / --set arguments the server was started with (the update runs under
        the same config); `folder`: where each update's output goes; `on_done`: called after an update
        (the live watcher's `follow`); `auto`: start updates by count and time (else only `request`)."""
        self.settings, self.config_args, self.folder, self.audit, self.on_done, self.auto = (
            settings,
            list(config_args),
            Path(folder),
            audit,
            on_done,
            auto,
        )
        self.pending = 0  # feedback events since the last update started
        self.first_pending: float | None = None  # when the oldest of them came
        self.running: dict[str, Any] | None = None  # the update in progress: started, reason, by, log
        self.last: dict[str, Any] | None = None  # the outcome of the last update
        self.updates = 0
        self._proc: subprocess.Popen | None = None
        self._spare: tuple[subprocess.Popen, Path, Path] | None = (
            None  # the child kept ready, its output and result files
        )
        self._spare_died = (
            False  # one exited unused (a crash at start): none is started ahead again until an update has run
        )
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._asked: tuple[str, str] | None = None  # (reason, by) of an update asked for and not yet started
        self._thread = threading.Thread(target=self._loop, name="hominem-online-updates", daemon=True)
        self._thread.start()

    # -- what the service calls ------------------------------------------------------------------------

    def note_feedback(self, n: int = 1) -> None:
        """`n` new feedback events were written; an update starts once enough have come."""
        with self._lock:
            self.pending += n
            self.first_pending = self.first_pending or time.monotonic()
            due = self.auto and self.pending >= self.settings.every_events
        if due:
            self._wake.set()

    def request(self, reason: str, by: str) -> bool:
        """Ask for an update now; False when one is already running or asked for."""
        with self._lock:
            if self.running is not None or self._asked is not None:
                return False
            self._asked = (reason, by)
        self._wake.set()
        return True

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "scheduler": "on" if self.auto else "on demand",
                "every_events": self.settings.every_events,
                "every_minutes": self.settings.every_minutes,
                "pending_events": self.pending,
                "running": self.running,
                "updates": self.updates,
                "last": self.last,
                "ready": self._spare is not None
                and self._spare[0].poll() is None
                and ready_marker(self._spare[2]).is_file(),
            }  # a process waits, loaded

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        spare = self._spare
        for proc in (self._proc, spare[0] if spare else None):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        self._thread.join(timeout=15)
        if spare is not None and spare is self._spare:
            spare[1].unlink(missing_ok=True)  # the ready process never ran an update: its (empty) output goes with it
            ready_marker(spare[2]).unlink(missing_ok=True)

    # -- the scheduler's thread ---------------------------------------------------------------------

    def _due(self) -> tuple[str, str] | None:
        with self._lock:
            if self._asked is not None:
                asked, self._asked = self._asked, None
                return asked
            if not self.auto or not self.pending:
                return None
            if self.pending >= self.settings.every_events:
                return (
                    f"{self.pending} new feedback events (online.every_events {self.settings.every_events})",
                    "scheduler",
                )
            minutes = self.settings.every_minutes
            if (
                minutes is not None
                and self.first_pending is not None
                and time.monotonic() - self.first_pending >= minutes * 60
            ):
                return (
                    f"{self.pending} feedback events in the last {minutes:g} minutes (online.every_minutes)",
                    "scheduler",
                )
        return None

    def _ready(self) -> tuple[subprocess.Popen, Path, Path]:
        """The child kept ready (started now if there is none, or it died)."""
        if self._spare is not None and self._spare[0].poll() is not None:
            self._spare_died = (
                True  # exited before it was used: not started again ahead of time until an update has run
            )
            log.warning(
                "the update process kept ready exited with %s before it was used (its output: %s)",
                self._spare[0].returncode,
                self._spare[1],
            )
            self._spare = None
        if self._spare is None:
            if self._stop.is_set():  # the server is stopping: no process is started that close() would not see
                raise OSError("the server is stopping")
            stamp = utc_now().replace(":", "")
            self.folder.mkdir(parents=True, exist_ok=True)
            out, result = self.folder / f"{stamp}.log", self.folder / f"{stamp}.json"
            command = [
                sys.executable,
                "-m",
                "hominem_pipeline.cli",
                "live",
                "update",
                *self.config_args,
                "--ready",
                "--result",
                str(result),
            ]
            with open(out, "w") as fh:
                proc = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.PIPE, text=True)
            self._spare = (proc, out, result)
        return self._spare

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.auto and not self._spare_died:
                # the next update's process loads while feedback comes in (and takes its seconds of loading off the
                # update)
                try:
                    self._ready()
                except OSError:
                    log.exception("no update process could be started ahead of time; the update starts its own")
            due = self._due()
            if due is not None:
                try:
                    self._run(*due)
                except Exception:  # the scheduler outlives one failed start; the next trigger tries again
                    log.exception("an online update could not be run")
            self._wake.wait(timeout=5.0)
            self._wake.clear()

    def _run(self, reason: str, by: str) -> None:
        with self._lock:
            self.running = {"started": utc_now(), "reason": reason, "by": by}
            self.pending, self.first_pending = 0, None
        started = time.monotonic()
        code: int | None = None
        out = result = None
        try:
            self._proc, out, result = self._ready()
            self._spare, self._spare_died = None, False
            ready_marker(result).unlink(missing_ok=True)
            with self._lock:
                self.running["log"] = str(out)
            self.audit("online_update_start", reason=reason, by=by, log=str(out))
            self._proc.stdin.write(" ".join(reason.split()) + "\n")  # go
            self._proc.stdin.close()
            code = self._proc.wait()
            said = " ".join(out.read_text(errors="replace").split())[
                -300:
            ]  # the end of its output: the error, when it failed
            outcome: dict[str, Any] = {
                "outcome": "failed",
                "reason": f"`hominem live update` exited {code} ({out}): ...{said}",
            }
        except OSError as exc:
            outcome = {"outcome": "failed", "reason": f"`hominem live update` could not be started: {exc}"}
        finally:
            self._proc = None
        if result is not None and result.is_file():
            outcome = json.loads(result.read_text())
        elif self._stop.is_set():
            outcome = {"outcome": "stopped", "reason": "the server stopped during the update"}
        summary = {
            "finished": utc_now(),
            "seconds": round(time.monotonic() - started, 1),
            "stages_s": outcome.get("seconds"),  # the update's own: train, gate (its load, decide, record), total
            "exit": code,
            "log": str(out) if out else None,
            **{k: outcome.get(k) for k in ("outcome", "version", "live", "reason", "partial_rhi", "items", "actions")},
        }
        with self._lock:
            self.running, self.last = None, summary
            self.updates += 1
        self.audit("online_update", **{k: v for k, v in summary.items() if k != "finished"})
        log.info("online update %s: %s", summary["outcome"], summary.get("reason"))
        if self.on_done is not None and summary["outcome"] == "promoted":
            self.on_done()
