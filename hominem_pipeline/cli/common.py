"""What every `hominem` command shares: the Typer app, the options, config and date parsing, errors."""

from __future__ import annotations

import datetime as dt
import logging
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from hominem_pipeline.core.config import ConfigError, HominemConfig
from hominem_pipeline.core.config.loader import (
    load_config,
    parse_assignments,
    write_set_overlay,
)
from hominem_pipeline.warnings_seen import silence_known

app = typer.Typer(
    help="hominem: distill a human-like reward signal into a reward model and LoRA adapters.",
    no_args_is_help=True,
    add_completion=False,
)
data_app = typer.Typer(help="Inspect and check labeled data.", no_args_is_help=True)
app.add_typer(data_app, name="data")
console = Console()
err = Console(stderr=True)
WHY = {"on": False}  # `hominem --why ...`: after a one-line notice, its whole reason


@app.callback()
def _everywhere(
    why: Annotated[
        bool,
        typer.Option(
            "--why", help="After a one-line notice (a version from before new feedback, ...), print its whole reason."
        ),
    ] = False,
) -> None:
    WHY["on"] = why


ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="YAML file overlaid on config/hominem.yaml (only the keys it sets change)."),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        help="KEY=VALUE on top of the config: a dotted key and a YAML value, e.g. --set policy.mode=dpo "
        "--set preferences.guard_dimension=null (repeatable).",
    ),
]
DateOpt = Annotated[
    Optional[str], typer.Option("--date", "-d", help="Partition date YYYY-MM-DD (default: today, UTC).")
]


def fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def load(config: Path | None, sets: list[str] | None = None, persist: bool = True) -> HominemConfig:
    """The config: config/hominem.yaml, the overlay, then each --set. With --set and `persist`, the
    combination is written as an overlay under data/overlays/ so that Dagster runs and later commands
    see the same; commands that only read the config (`config`, `serve`) apply --set in memory."""
    try:
        if not sets:
            return load_config(config)
        if not persist:
            return load_config(config, overrides=parse_assignments(sets))
        return load_config(write_set_overlay(config, parse_assignments(sets)))
    except ConfigError as exc:
        fail(str(exc))
        raise  # unreachable


def parse_date(value: str | None) -> str:
    if value is None:
        return dt.datetime.now(dt.timezone.utc).date().isoformat()
    try:
        return dt.date.fromisoformat(value).isoformat()
    except ValueError:
        fail(f"--date {value!r} is not a date; use YYYY-MM-DD, e.g. --date {dt.date.today().isoformat()}")
        raise


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "httpx2", "anthropic", "openai", "urllib3", "filelock", "alembic", "mlflow", "dagster"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    silence_known()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def reach_partitions(day: str, back_days: int = 0) -> None:
    """The definitions this process (and its children) load offer `day` and the `back_days` days before it
    (project.partitions_start null: the first partition is the project's first built day)."""
    import datetime as dt

    from hominem_pipeline.defs.partitions import REACH_ENV

    os.environ[REACH_ENV] = (dt.date.fromisoformat(day) - dt.timedelta(days=back_days)).isoformat()


def dagster_env(cfg: HominemConfig) -> None:
    """Dagster's instance: embedded, it lives in the project (DAGSTER_HOME is data/dagster/, holding a link
    to the project's dagster.yaml, so every store Dagster keeps is under data/dagster/); in a deployment,
    `runtime.dagster_home` names the folder of its dagster.yaml (deploy/: Postgres, the run queue)."""
    if cfg.runtime.dagster_home is not None:
        home = cfg.path(cfg.runtime.dagster_home)
        if not (home / "dagster.yaml").is_file():
            fail(
                f"runtime.dagster_home is {cfg.runtime.dagster_home}, which has no dagster.yaml; copy "
                "deploy/dagster.yaml there (deploy/README.md)"
            )
        os.environ["DAGSTER_HOME"] = str(home.resolve())
    else:
        home = cfg.data_dir / "dagster"
        home.mkdir(parents=True, exist_ok=True)
        link = home / "dagster.yaml"
        source = cfg.root / "dagster.yaml"
        if source.is_file() and not (link.is_symlink() and link.resolve() == source.resolve()):
            link.unlink(missing_ok=True)
            link.symlink_to(source)
        os.environ["DAGSTER_HOME"] = str(home.resolve())
    if cfg.runtime.executor == "celery":
        from hominem_pipeline.defs.build import NO_BROKER, celery_broker

        if not celery_broker(cfg.runtime):
            fail(NO_BROKER)
    if cfg.overlay is not None:
        os.environ["HOMINEM_CONFIG"] = str(cfg.overlay)
    os.chdir(cfg.root)


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass  # the whole group is already gone


def read_table(ref, name: str, cfg: HominemConfig):
    """A version's Parquet table, its bytes checked against the manifest first: a damaged file is named
    with the command that rebuilds it, not a reader's traceback."""
    import pandas as pd

    from hominem_pipeline.core.pipeline.artifacts import DamagedArtifact
    from hominem_pipeline.core.pipeline.lineage import build_command

    try:
        return pd.read_parquet(ref.verified_file(name, build_command(ref.asset, ref.partition, cfg)))
    except DamagedArtifact as exc:
        fail(str(exc))


def artifact_for(cfg: HominemConfig, asset: str, date: str | None):
    """(lineage, ref): the version of `asset` this config implies on `date` (default: the newest day
    that has one), else the newest one it built there from earlier inputs (people gave feedback since
    the day's run), said on stderr; fails naming the cause when there is neither."""
    from hominem_pipeline.core.pipeline.lineage import lineage

    data = lineage(cfg)
    ref, note = data.newest(asset, parse_date(date) if date else None)
    if ref is None:
        fail(note or f"no {asset} built under this config")
    if note:
        err.print(f"[dim]{note}[/]", highlight=False)
        if WHY["on"]:
            err.print(f"[dim]why: {data.stale_details(ref)}[/]", highlight=False)
    return data, ref


def who() -> str:
    """Who runs this command, as the audit log names them: `cli:<user>`."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


@contextmanager
def audited(cfg: HominemConfig, action: str, **details: Any) -> Iterator[dict[str, Any]]:
    """One line in the audit log (`core/online/audit.py`) for a state-changing command, written when it ends: who
    (`cli:<user>`), what, the details it names (a day, a version, a file; the command may add to the yielded dict),
    and how it ended (`ok`, or `failed: <why>`)."""
    from hominem_pipeline.core.online.audit import AuditLog, audit_path

    outcome = "ok"
    try:
        yield details
    except typer.Exit as exc:
        outcome = "ok" if exc.exit_code == 0 else f"failed: exit {exc.exit_code}"
        raise
    except BaseException as exc:
        outcome = f"failed: {exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        raise
    finally:
        AuditLog(audit_path(cfg)).append(action, who(), outcome=outcome, **details)
