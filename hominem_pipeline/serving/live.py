"""The service follows the live pointer: when `data/live/current.json` changes (a promotion by the daily
job or `hominem live promote`, a rollback, the online updater), the engine hot-swaps to the adapter it
names. A folder that fails its checks is refused, audited, and the adapter serving now stays."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from hominem_pipeline.core.online.live import BadAdapter, LiveState

log = logging.getLogger(__name__)
NOTHING = object()  # nothing refused (a version of None is the base, which may be refused too)


class LiveWatcher:
    def __init__(
        self,
        state: LiveState,
        engine,
        audit: Callable[..., None],
        label: Callable[[Path | None], str | None],
        interval: float = 1.0,
    ):
        self.state, self.engine, self.audit, self.label, self.interval = state, engine, audit, label, interval
        self.version = state.current().version  # what the engine serves (it was loaded from the pointer)
        self.refused: object = (
            NOTHING  # the version last refused (None: the base): not tried again until the pointer moves on
        )
        self._seen = self._stamp()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the watcher's thread and an admin endpoint may both follow
        self._thread = threading.Thread(target=self._loop, name="hominem-live-watcher", daemon=True)
        self._thread.start()

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = self.state.current_path.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            stamp = self._stamp()
            if stamp != self._seen:
                self._seen = stamp
                try:
                    self.follow()
                except Exception:  # the watcher must outlive one bad read; the next change is tried again
                    log.exception("following the live pointer failed")

    def follow(self) -> bool:
        """Swap to what the pointer names now, if that is not what is served; True when swapped."""
        with self._lock:
            return self._follow()

    def _follow(self) -> bool:
        live = self.state.current()
        if live.version == self.version or live.version == self.refused:
            return False
        path = self.state.adapter_path(live)
        try:
            seconds = self.engine.swap(path, self.label(path)).result()
        except (BadAdapter, OSError, ValueError, RuntimeError) as exc:
            self.refused = live.version
            log.error(
                "the live pointer names %s, which cannot serve (%s); %s keeps answering",
                live.version,
                exc,
                self.version or "the base",
            )
            self.audit("live_swap_refused", version=live.version, reason=str(exc), serving=self.version)
            return False
        self.audit(
            "live_swap", version=live.version or "base", previous=self.version or "base", seconds=round(seconds, 3)
        )
        self.version, self.refused = live.version, NOTHING
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class RegistryWatcher:
    """Follows a registry alias (`models:/hominem-lora-adapter@champion`) for a server on a machine without
    the project's data folder: every `interval` seconds it asks the tracking server which version the
    alias names, and when that moved, downloads it (`core/registry.fetch`) and hot-swaps. A version that
    cannot serve is refused and audited, as with the live pointer."""

    def __init__(
        self,
        cfg,
        uri: str,
        engine,
        audit: Callable[..., None],
        label: Callable[[Path | None], str | None],
        interval: float = 30.0,
    ):
        from hominem_pipeline.core.pipeline.registry import alias_version

        self.cfg, self.uri, self.engine, self.audit, self.label, self.interval = (
            cfg,
            uri,
            engine,
            audit,
            label,
            interval,
        )
        self.version = alias_version(cfg, uri)  # what the engine serves (resolved from the alias at start)
        self.refused: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hominem-registry-watcher", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.follow()
            except Exception:  # an unreachable server now and then: the next poll tries again
                log.exception("following %s failed", self.uri)

    def follow(self) -> bool:
        """Swap to the version the alias names now, if that is not what is served; True when swapped."""
        from hominem_pipeline.core.pipeline.registry import alias_version, fetch

        version = alias_version(self.cfg, self.uri)
        if version is None or version == self.version or version == self.refused:
            return False
        try:
            path = fetch(self.cfg, self.uri, "adapter_config.json", version)
            seconds = self.engine.swap(path, self.label(path)).result()
        except (BadAdapter, OSError, ValueError, RuntimeError) as exc:
            self.refused = version
            log.error(
                "%s names version %s, which cannot serve (%s); version %s keeps answering",
                self.uri,
                version,
                exc,
                self.version,
            )
            self.audit("registry_swap_refused", uri=self.uri, version=version, reason=str(exc), serving=self.version)
            return False
        self.audit("registry_swap", uri=self.uri, version=version, previous=self.version, seconds=round(seconds, 3))
        self.version, self.refused = version, None
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
