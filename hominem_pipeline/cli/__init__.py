"""`hominem`: the command line. Every command works from the project folder (or with HOMINEM_HOME)."""

from __future__ import annotations

import sys

from hominem_pipeline.cli import attune, audit, data, history, live, models, pipeline, probe, serve  # noqa: F401  (each registers its commands on `app`)
from hominem_pipeline.cli.common import app, err
from hominem_pipeline.core.config import ConfigError

__all__ = ["app", "main"]


PIPELINE_ONLY = ("dagster", "dagster_webserver", "dagster_celery", "dagster_postgres", "mlflow", "trl", "datasets")


def main() -> None:  # pragma: no cover - console script shim
    try:
        app()
    except ConfigError as exc:  # outside the command's context: said here, not through `fail`'s typer.Exit
        err.print(f"[bold red]error:[/] {exc}")
        sys.exit(2)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in PIPELINE_ONLY:
            raise
        missing = f"this command needs the pipeline ({exc.name} is not installed)"
        err.print(f"[bold red]error:[/] {missing}: make install, or pip install -e '.[pipeline]'")
        sys.exit(2)
