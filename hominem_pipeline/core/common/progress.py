"""Progress lines for long steps: `what: 32/96 (33%) 4.1/s eta 15s`, at most every few seconds.

Plain log lines (not a redrawn bar) so the same progress reads well in a terminal, in CI logs and in
the Dagster UI, which captures the `hominem` loggers.
"""

from __future__ import annotations

import logging
import time


class Progress:
    def __init__(self, what: str, total: int, logger: logging.Logger, unit: str = "items", every_seconds: float = 5.0):
        self.what, self.total, self.log, self.unit = what, total, logger, unit
        self.every = every_seconds
        self.done = 0
        self.started = time.monotonic()
        self._last = 0.0
        self.log.info("%s: %d %s to do", what, total, unit)

    def advance(self, n: int = 1, **extra: object) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every or self.done >= self.total:
            self._last = now
            elapsed = max(now - self.started, 1e-9)
            rate = self.done / elapsed
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            suffix = "".join(f" {k}={v}" for k, v in extra.items())
            pct = 100.0 * self.done / self.total if self.total else 100.0
            self.log.info(
                "%s: %d/%d %s (%.0f%%) %.2f/s eta %.0fs%s",
                self.what,
                self.done,
                self.total,
                self.unit,
                pct,
                rate,
                eta,
                suffix,
            )
