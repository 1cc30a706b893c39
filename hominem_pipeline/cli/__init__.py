"""`hominem`: the command line. Every command works from the project folder (or with HOMINEM_HOME)."""

from __future__ import annotations

from hominem_pipeline.cli import attune, audit, data, history, live, models, pipeline, probe, serve  # noqa: F401  (each registers its commands on `app`)
from hominem_pipeline.cli.common import app, fail
from hominem_pipeline.core.config import ConfigError

__all__ = ["app", "main"]


def main() -> None:  # pragma: no cover - console script shim
    try:
        app()
    except ConfigError as exc:
        fail(str(exc))
