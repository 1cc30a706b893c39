"""`hominem`: the command line. Every command works from the project folder (or with HOMINEM_HOME)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from hominem_pipeline.core.config import ConfigError, HominemConfig
from hominem_pipeline.core.config_loader import (
    load_config,
    parse_assignments,
    write_set_overlay,
)
from hominem_pipeline.warnings_seen import silence_known

app = typer.Typer(help="hominem: distill a human-like reward signal into a reward model and LoRA adapters.", no_args_is_help=True, add_completion=False)
data_app = typer.Typer(help="Inspect and check labeled data.", no_args_is_help=True)
app.add_typer(data_app, name="data")
console = Console()
err = Console(stderr=True)

ConfigOpt = Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML file overlaid on config/hominem.yaml (only the keys it sets change).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="KEY=VALUE on top of the config: a dotted key and a YAML value, e.g. --set policy.mode=dpo --set preferences.guard_dimension=null (repeatable).")]
DateOpt = Annotated[Optional[str], typer.Option("--date", "-d", help="Partition date YYYY-MM-DD (default: today, UTC).")]


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def _config(config: Path | None, sets: list[str] | None = None) -> HominemConfig:
    """The config: config/hominem.yaml, the overlay, then each --set. With --set, the combination is
    written as an overlay under data/overlays/ so that Dagster runs and later commands see the same."""
    try:
        if not sets:
            return load_config(config)
        return load_config(write_set_overlay(config, parse_assignments(sets)))
    except ConfigError as exc:
        _fail(str(exc))
        raise  # unreachable


def _date(value: str | None) -> str:
    if value is None:
        return dt.datetime.now(dt.timezone.utc).date().isoformat()
    try:
        return dt.date.fromisoformat(value).isoformat()
    except ValueError:
        _fail(f"--date {value!r} is not a date; use YYYY-MM-DD, e.g. --date {dt.date.today().isoformat()}")
        raise


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "httpx2", "anthropic", "openai", "urllib3", "filelock", "alembic", "mlflow", "dagster"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    silence_known()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _dagster_env(cfg: HominemConfig) -> None:
    """Dagster's instance lives in the project: DAGSTER_HOME is data/dagster/, holding a link to the
    project's dagster.yaml, so every store Dagster keeps is under data/dagster/."""
    home = cfg.data_dir / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    link = home / "dagster.yaml"
    source = cfg.root / "dagster.yaml"
    if source.is_file() and not (link.is_symlink() and link.resolve() == source.resolve()):
        link.unlink(missing_ok=True)
        link.symlink_to(source)
    os.environ["DAGSTER_HOME"] = str(home.resolve())
    if cfg.overlay is not None:
        os.environ["HOMINEM_CONFIG"] = str(cfg.overlay)
    os.chdir(cfg.root)


@app.command("config")
def show_config(
    keys: Annotated[Optional[list[str]], typer.Argument(help="Dotted keys or sections, e.g. policy.dual teacher.provider (default: every setting).")] = None,
    config: ConfigOpt = None,
    sets: SetOpt = None,
) -> None:
    """Each setting's value under this config (overlay and --set applied) and what it means."""
    from hominem_pipeline.core.config_loader import describe

    try:
        rows = describe(_config(config, sets), keys or [""])
    except KeyError as exc:
        _fail(exc.args[0])
    for row in rows:
        value = "" if row.section else f" = {json.dumps(row.value, ensure_ascii=False)}"
        console.print(f"[bold]{row.key}[/]{value}\n    {row.meaning}", highlight=False, soft_wrap=True)


@app.command()
def setup(config: ConfigOpt = None, sets: SetOpt = None) -> None:
    """Prepare the offline models once: convert the packaged SmolLM2 GGUF to an HF folder, find the encoder."""
    _logging()
    from hominem_pipeline.core.models import (
        ModelNotAvailable,
        encoder_path,
        prepare_student,
    )

    cfg = _config(config, sets)
    try:
        student = prepare_student(cfg)
        encoder = encoder_path(cfg)
    except ModelNotAvailable as exc:
        _fail(str(exc))
    console.print(f"student: {student}\nencoder: {encoder}")


@app.command()
def run(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: DateOpt = None,
    select: Annotated[str, typer.Option("--select", "-s", help="Dagster asset selection, e.g. '*', 'reward_model+', 'prompts,teacher_trajectories'.")] = "*",
    fill_window: Annotated[bool, typer.Option(
        "--fill-window", help="First build the days before --date that the day's windows read and that lack them, oldest first, one Dagster run "
                              "per day: labels for each day of the reward model's window (reward_model.window_days) and, when the selection "
                              "trains an adapter, that day's reward model and preference pairs for each day of the adapter's window "
                              "(policy.window_days): a fresh clone's reward model and adapter then train on full windows, as after a week of "
                              "daily runs (~5 min a day on the offline default on 2 cores).")] = False,
) -> None:
    """Materialize assets for one day through Dagster (runs show in the Dagster UI, metrics in MLflow)."""
    _logging()
    cfg = _config(config, sets)
    day = _date(date)
    _dagster_env(cfg)
    from hominem_pipeline.core.models import ModelNotAvailable, prepare_student

    try:
        prepare_student(cfg)
    except ModelNotAvailable as exc:
        _fail(str(exc))

    from dagster import AssetSelection

    from hominem_pipeline import definitions

    job = definitions.daily_job()
    if "human_preferences" in select:
        _fail("human_preferences is not built by `hominem run`; fill it with `hominem data import-preferences PATH --format hh-rlhf`")
    try:
        keys = AssetSelection.from_coercible(select.split(",")).resolve(job.asset_layer.asset_graph)
    except Exception as exc:  # dagster raises several error types for a bad selection string
        _fail(f"--select {select!r} is not a valid asset selection ({exc}); try '*' or 'reward_model+'")
    if not keys:
        _fail(f"--select {select!r} matches no asset; assets are: {', '.join(sorted(k.to_user_string() for k in job.asset_layer.asset_graph.get_all_asset_keys()))}")
    if fill_window:
        _fill_window(cfg, day, pairs="lora_adapter" in {k.to_user_string() for k in keys})
    _execute(definitions.daily_job, cfg, day, keys, "hominem run")


def _fill_window(cfg: HominemConfig, day: str, pairs: bool) -> None:
    """Build each earlier day that `day`'s windows read and that lacks it (oldest first; days before
    project.partitions_start are left out): teacher_labels for the days of the reward model's window,
    and, when the run trains an adapter (`pairs`), preference_pairs (with that day's reward model, as a
    daily run would have trained it) for the days of the adapter's window. A day's stages that are
    already current are reused, not rebuilt."""
    from dagster import AssetSelection

    from hominem_pipeline import definitions
    from hominem_pipeline.core.lineage import lineage, window_gaps

    rm_days, policy_days = cfg.reward_model.window_days, (cfg.policy.window_days if pairs else 0)
    plan = window_gaps(lineage(cfg), day, rm_days, policy_days)
    console.print(f"[bold]--fill-window[/]: reward_model.window_days {rm_days}"
                  + (f", policy.window_days {policy_days}; " if pairs else "; ")
                  + (f"filling {len(plan)} earlier day(s): " + ", ".join(f"{d} ({'labels to pairs' if a == 'preference_pairs' else 'labels'})" for d, a in plan)
                     if plan else "every earlier day is built"))
    graph = definitions.daily_job().asset_layer.asset_graph
    for k, (d, asset) in enumerate(plan, 1):
        keys = AssetSelection.assets(asset).upstream().resolve(graph)
        _execute(definitions.daily_job, cfg, d, keys, f"hominem run --fill-window ({k}/{len(plan)})")


def _execute(job_fn, cfg: HominemConfig, day: str, keys, title: str) -> list:
    """Run `keys` of the job `job_fn` returns for partition `day` through Dagster's `execute_job`
    (so the run is recorded in the project's instance and shows in the UI); print a summary; exit 1
    with the root cause when a step fails. Returns the materialization events."""
    from dagster import DagsterInstance, execute_job, reconstructable
    from dagster._core.errors import DagsterInvalidSubsetError

    from hominem_pipeline.defs.launch import first_failure

    job = job_fn()
    if not job.partitions_def.has_partition_key(day):
        _fail(f"--date {day} is outside the daily partitions (from {cfg.project.partitions_start} to today); change project.partitions_start or the date")
    started = time.monotonic()
    console.print(f"[bold]{title}[/] {day}: {len(keys)} asset(s), DAGSTER_HOME {os.environ['DAGSTER_HOME']}, MLflow {cfg.mlflow_uri}")
    # Dagster's own console lines (and a failed step's traceback) stay in the run's event log in the
    # UI; the terminal shows our progress lines and, on failure, the root cause.
    run_config = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    try:
        with execute_job(
            reconstructable(job_fn),
            instance=DagsterInstance.get(),
            run_config=run_config,
            tags={"dagster/partition": day, "hominem/trigger": "cli"},
            asset_selection=sorted(keys, key=lambda k: k.to_user_string()),
        ) as result:
            success = result.success
            run_id = result.run_id
            events = result.get_asset_materialization_events()
            failure = None if success else first_failure(result)
    except DagsterInvalidSubsetError as exc:
        _fail(str(exc))
    _print_summary(events, cfg, day, run_id, time.monotonic() - started)
    if not success:
        _fail(f"run {run_id} failed at {failure}\n(full traceback: `make ui`, Dagster -> Runs -> {run_id[:8]})", code=1)
    return events


def _print_summary(events, cfg: HominemConfig, day: str, run_id: str, seconds: float) -> None:
    table = Table(title=f"hominem {day}  (Dagster run {run_id[:8]}, {seconds / 60:.1f} min)")
    for col in ("asset", "version", "", "highlights"):
        table.add_column(col)
    keys = {
        "prompts": ("train_prompts", "eval_prompts"),
        "teacher_trajectories": ("trajectories", "tokens_per_second"),
        "teacher_labels": ("labels", "mean_scalar"),
        "reward_model": ("val_pairwise_accuracy", "val_pairs", "val_ece", "val_pearson_scalar", "train_seconds"),
        "preference_pairs": ("pairs", "mean_margin"),
        "lora_adapter": ("steps", "final_loss", "seconds_per_step"),
        "evaluation": ("win_rate", "adapter_mean_scalar", "base_mean_scalar"),
        "reward_health_index": ("rhi", "deployable", "dcs", "gvs", "mss", "cdrs", "lrps"),
        "human_preferences": ("pairs", "quarantined", "duplicates_dropped"),
    }
    for event in events:
        asset = event.asset_key.to_user_string()
        meta = event.materialization.metadata
        highlights = []
        for k in keys.get(asset, ()):
            if k in meta:
                v = meta[k].value
                highlights.append(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}")
        reused = meta.get("reused_existing_version")
        table.add_row(asset, str(meta["version"].value), "reused" if reused and reused.value else "built", "  ".join(highlights))
    console.print(table)
    console.print(
        f"results: {cfg.data_dir}/<asset>/{day}/   (one folder per version; the table above names the ones this config reads)\n"
        f"UIs:     make ui   ->  Dagster http://127.0.0.1:3000   MLflow http://127.0.0.1:5000"
    )


@app.command()
def ui(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    dagster_port: Annotated[int, typer.Option(help="Port of the Dagster UI.")] = 3000,
    mlflow_port: Annotated[int, typer.Option(help="Port of the MLflow UI.")] = 5000,
) -> None:
    """Start the Dagster UI and the MLflow UI on localhost together; Ctrl-C stops both."""
    cfg = _config(config, sets)
    _dagster_env(cfg)
    (cfg.data_dir / "mlflow").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    bindir = Path(sys.executable).parent
    commands = {
        "Dagster": [str(bindir / "dagster"), "dev", "-m", "hominem_pipeline.definitions", "-h", "127.0.0.1", "-p", str(dagster_port)],
        "MLflow": [
            str(bindir / "mlflow"), "server", "--backend-store-uri", cfg.mlflow_uri, "--default-artifact-root",
            cfg.path(cfg.tracking.artifact_root).resolve().as_uri(), "--host", "127.0.0.1", "--port", str(mlflow_port), "--workers", "1",
        ],
    }
    procs: dict[str, subprocess.Popen] = {}
    dagster_home = os.environ["DAGSTER_HOME"]
    for name, cmd in commands.items():
        # Own process group each, so stopping takes their workers and children too. Dagster starts in
        # its home (not the project folder, whose dagster.yaml it would warn about).
        procs[name] = subprocess.Popen(cmd, env=env, cwd=dagster_home if name == "Dagster" else cfg.root, start_new_session=True)
    console.print(f"Dagster UI: http://127.0.0.1:{dagster_port}\nMLflow UI:  http://127.0.0.1:{mlflow_port}\nCtrl-C stops both.")

    def stop(*_: object) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # SIGINT is what both servers treat as Ctrl-C (a clean shutdown of their own children);
        # whatever is left after the grace period is killed with its whole group.
        for proc in procs.values():
            _signal_group(proc, signal.SIGINT)
        deadline = time.monotonic() + 20
        for proc in procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)
        console.print("stopped Dagster and MLflow")
        raise typer.Exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        for name, proc in procs.items():
            if proc.poll() is not None:
                err.print(f"{name} exited with code {proc.returncode}; stopping the other one")
                stop()
        time.sleep(1)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass  # the whole group is already gone


def _artifact_for(cfg: HominemConfig, asset: str, date: str | None):
    """(lineage, ref): the version of `asset` this config implies on `date`, or on the newest day that has one."""
    from hominem_pipeline.core.lineage import build_command, lineage

    data = lineage(cfg)
    if date:
        day = _date(date)
        if (ref := data.expected(asset, day)) is None:
            _fail(f"no {asset} for {day} built under this config; build it: {build_command(asset, day, cfg)}")
        return data, ref
    ref = data.latest(asset)
    if ref is None:
        built = data.store.partitions(asset)
        _fail(f"no {asset} built under this config in {cfg.data_dir}"
              + (f" (days built under other settings: {', '.join(built[-5:])})" if built else "") + "; run `hominem run` (or `make run`) first")
    return data, ref


@data_app.command("validate")
def data_validate(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: Annotated[Optional[str], typer.Option("--date", "-d", help="Partition date (default: the newest labeled one).")] = None,
) -> None:
    """Check every label of a partition (schema, ranges, duplicates, empty or truncated responses);
    exits 1 when a blocking check fails."""
    import pandas as pd

    from hominem_pipeline.core.teacher.labeling import BLOCKING, validate_labels

    cfg = _config(config, sets)
    data, ref = _artifact_for(cfg, "teacher_labels", date)
    labels = pd.read_parquet(ref.file("labels.parquet"))
    trajectories = data.expected("teacher_trajectories", ref.partition)
    quarantine_file = data.store.quarantine_path("teacher_labels", ref.partition, ref.version)
    report = validate_labels(
        labels,
        cfg.dimension_names,
        pd.read_parquet(trajectories.file("trajectories.parquet")) if trajectories else None,
        pd.read_parquet(quarantine_file) if quarantine_file.is_file() else None,
    )
    table = Table(title=f"teacher_labels {ref.partition} (version {ref.version}): {report.rows} rows kept")
    table.add_column("check")
    table.add_column("failing stored rows", justify="right")
    table.add_column("quarantined", justify="right")
    table.add_column("kind")
    table.add_column("examples")
    for check in (*BLOCKING, "truncated_response"):
        failing = report.failures.get(check, 0) or report.warnings.get(check, 0)
        kind = "blocking" if check in BLOCKING else "warning"
        table.add_row(check, str(failing), str(report.quarantined.get(check, 0)), kind, "\n".join(report.examples.get(check, [])))
    console.print(table)
    limit = cfg.verifier.max_failure_rate
    console.print(f"failure rate {report.failure_rate:.1%} (allowed {limit:.1%}); quarantine: {quarantine_file}")
    if not report.ok(limit):
        reason = f"{report.failed_rows} stored label row(s) fail blocking checks" if report.failed_rows else f"failure rate {report.failure_rate:.1%} is above verifier.max_failure_rate {limit:.1%}"
        _fail(reason, code=1)
    console.print("[green]all blocking checks pass[/]")


@data_app.command("sample")
def data_sample(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: Annotated[Optional[str], typer.Option("--date", "-d", help="Partition date (default: the newest labeled one).")] = None,
    n: Annotated[int, typer.Option("-n", min=1, help="How many random labeled samples to print.")] = 3,
    seed: Annotated[Optional[int], typer.Option(help="Seed for the random choice (default: a new choice each time).")] = None,
) -> None:
    """Print random labeled samples with their reward vectors, and any range or missing-field problems."""
    import pandas as pd

    from hominem_pipeline.core.teacher.labeling import row_problems

    cfg = _config(config, sets)
    _, ref = _artifact_for(cfg, "teacher_labels", date)
    labels = pd.read_parquet(ref.file("labels.parquet"))
    picked = labels.sample(n=min(n, len(labels)), random_state=seed)
    for row in picked.to_dict(orient="records"):
        console.rule(f"{row['trajectory_id']}  [{row.get('category', '?')}, style {row.get('style', '?')}]")
        console.print(f"[bold]prompt:[/] {row['prompt']}\n[bold]response:[/] {row['response']}")
        table = Table(show_header=True)
        for d in cfg.dimension_names:
            table.add_column(d, justify="right")
        table.add_row(*[f"{row['vector'].get(d, float('nan')):+.3f}" for d in cfg.dimension_names])
        console.print(table)
        console.print(
            f"scalar {row['scalar']:+.3f}   intensity {row['reward_intensity']:.3f}   safety {row['safety_score']:.3f}\n"
            f"[bold]rationale:[/] {row['rationale']}"
        )
        problems = row_problems(row, cfg.dimension_names)
        console.print("[green]ranges and fields ok[/]" if not problems else f"[red]problems:[/] {'; '.join(problems)}")


@data_app.command("import-preferences")
def data_import_preferences(
    path: Annotated[Path, typer.Argument(help="The file to import (.jsonl, .jsonl.gz or .parquet).")],
    format: Annotated[str, typer.Option("--format", "-f", help="hh-rlhf (HH-RLHF transcripts: chosen/rejected dialogues), jsonl or parquet (prompt/chosen/rejected rows).")],
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: DateOpt = None,
) -> None:
    """Bring human preference pairs into the `human_preferences` asset for a day. Rows that cannot be
    used are kept, with the reason, in the partition's quarantine table; importing the same file again
    changes nothing."""
    from hominem_pipeline.core.human.preferences import (
        FORMATS,
        PreferenceImportError,
        add_to_inbox,
    )

    _logging()
    cfg = _config(config, sets)
    day = _date(date)
    if format not in FORMATS:
        _fail(f"--format {format!r} is not supported; use one of: {', '.join(FORMATS)}")
    try:
        target, added = add_to_inbox(path, format, cfg.data_dir, day)
    except PreferenceImportError as exc:
        _fail(str(exc))
    console.print(f"{'added' if added else 'already imported'}: {path} -> {target}")
    _dagster_env(cfg)
    from dagster import AssetKey

    from hominem_pipeline import definitions

    [event] = _execute(definitions.import_job, cfg, day, [AssetKey("human_preferences")], "hominem data import-preferences")
    meta = event.materialization.metadata
    if meta["pairs"].value == 0:
        _fail(f"no usable pair in the files imported for {day}; see the reasons in {cfg.data_dir}/quarantine/human_preferences/{day}/", code=1)
    details = meta["details"].value if "details" in meta else {}
    for reason, count in details.get("quarantine_reasons", {}).items():
        console.print(f"quarantined {count} row(s): {reason}")


@app.command("reward-probe")
def reward_probe(
    prompt: Annotated[str, typer.Option("--prompt", "-p", help="The user's message.")],
    response: Annotated[list[str], typer.Option("--response", "-r", help="A reply to score; repeat the option to compare several.")],
    model: Annotated[Optional[Path], typer.Option("--model", "-m", help="A reward model folder (default: the newest built one).")] = None,
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: Annotated[Optional[str], typer.Option("--date", "-d", help="Use that day's reward model (default: the newest).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON instead of a table.")] = False,
) -> None:
    """Score replies to one prompt with the reward model: each dimension, the scalar, intensity and safety
    with their uncertainty, the dimensions on which the replies differ most, and the calibrated
    probability that the first reply is preferred over each other."""
    import json

    from hominem_pipeline.core.reward.model import RewardModel

    cfg = _config(config, sets)
    path = model or _artifact_for(cfg, "reward_model", date)[1].path
    try:
        rm = RewardModel.load(path)
        outputs = rm.score([prompt] * len(response), response)
    except (FileNotFoundError, ValueError, TypeError) as exc:
        _fail(str(exc))
    if as_json:
        console.print_json(json.dumps([o.as_dict() for o in outputs]))
        return
    console.print(f"[dim]reward model {path}[/]")
    for i, text in enumerate(response, 1):
        console.print(f"[bold]#{i}[/] {text if len(text) <= 160 else text[:157] + '...'}")
    rows = [(d, [o.vector[d] for o in outputs], [o.uncertainty[d] for o in outputs]) for d in rm.dimensions]
    rows += [(k, [getattr(o, k) for o in outputs], [o.uncertainty[k] for o in outputs]) for k in ("scalar", "reward_intensity", "safety_score")]
    spread = {name: max(values) - min(values) for name, values, _ in rows[: len(rm.dimensions)]}
    top = {d for d in sorted(spread, key=spread.get, reverse=True)[:3] if spread[d] > 0} if len(outputs) > 1 else set()
    table = Table(title=f"prompt: {prompt if len(prompt) <= 80 else prompt[:77] + '...'}")
    table.add_column("output")
    for i in range(len(outputs)):
        table.add_column(f"#{i + 1} (± sd)", justify="right")
    if len(outputs) > 1:
        table.add_column("spread", justify="right")
    for name, values, sds in rows:
        cells = [f"{v:+.3f} ± {s:.3f}" for v, s in zip(values, sds)]
        label = f"[bold yellow]{name} *[/]" if name in top else name
        table.add_row(label, *cells, *([f"{max(values) - min(values):.3f}"] if len(outputs) > 1 else []), end_section=name == rm.dimensions[-1])
    console.print(table)
    if top:
        console.print(f"[yellow]*[/] the dimensions on which the replies differ most: {', '.join(sorted(top, key=spread.get, reverse=True))}")
    for j in range(1, len(response)):
        p = rm.probability(outputs[0].scalar - outputs[j].scalar)
        console.print(f"P(#1 preferred over #{j + 1}) = {p:.3f}   (calibrated, temperature {rm.temperature:.3f})")


@app.command()
def compare(
    prompt: Annotated[Optional[list[str]], typer.Option("--prompt", "-p", help="A prompt to answer; repeat for several.")] = None,
    eval_set: Annotated[bool, typer.Option("--eval-set", help="Use the held-out evaluation prompts (of the newest prompts partition).")] = False,
    adapter: Annotated[Optional[Path], typer.Option("--adapter", "-a", help="Adapter folder (default: the newest built one).")] = None,
    reward_model: Annotated[Optional[Path], typer.Option("--reward-model", "-m", help="Reward model folder (default: the one the adapter was trained with).")] = None,
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: Annotated[Optional[str], typer.Option("--date", "-d", help="Use that day's adapter (default: the newest).")] = None,
) -> None:
    """Base and base+adapter side by side: their replies (greedy), reward vectors, intensity and safety,
    what changed, and the reward model's calibrated probability that the adapter's reply is preferred."""
    import pandas as pd

    from hominem_pipeline.core.evaluation.compare import side_by_side
    from hominem_pipeline.core.models import student_path
    from hominem_pipeline.core.policy.lora import adapter_reward_model
    from hominem_pipeline.core.reward.model import RewardModel

    _logging()
    cfg = _config(config, sets)
    texts = list(prompt or [])
    ref = _artifact_for(cfg, "lora_adapter", date)[1] if adapter is None else None
    adapter_path = adapter or ref.path
    if eval_set:
        _, prompts_ref = _artifact_for(cfg, "prompts", None)
        table = pd.read_parquet(prompts_ref.file("prompts.parquet"))
        texts += list(table.loc[table["split"] == "eval", "text"])
    if not texts:
        _fail("nothing to compare on; pass --prompt TEXT (repeatable) or --eval-set")
    if reward_model is None:
        reward_model = adapter_reward_model(adapter_path, cfg.data_dir) or _artifact_for(cfg, "reward_model", None)[1].path
    try:
        rm_model = RewardModel.load(reward_model)
        rows = side_by_side(texts, student_path=student_path(cfg), adapter_path=adapter_path, reward_model=rm_model, cfg=cfg.evaluation, seed=cfg.project.seed)
    except (FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    console.print(f"[dim]adapter {adapter_path}\nreward model {reward_model}[/]")
    wins = 0
    for row in rows:
        console.rule(row.prompt if len(row.prompt) <= 100 else row.prompt[:97] + "...")
        replies = Table(show_header=True, expand=True)
        replies.add_column("base")
        replies.add_column("base + adapter")
        replies.add_row(*(row.replies[side] or "(empty reply: not scored)" for side in ("base", "adapter")))
        console.print(replies)
        scores = Table(show_header=True)
        for column in ("output", "base", "adapter", "change"):
            scores.add_column(column, justify="left" if column == "output" else "right")
        for name, b in row.scores["base"].items():
            a = row.scores["adapter"][name]
            change = a - b
            colour = "dim" if pd.isna(change) or abs(change) <= 0.005 else "green" if change > 0 else "red"  # NaN: an empty side
            scores.add_row(name, f"{b:+.3f}", f"{a:+.3f}", f"[{colour}]{change:+.3f}[/]", end_section=name == rm_model.dimensions[-1])
        console.print(scores)
        console.print(f"P(adapter's reply preferred) = {row.p_adapter_preferred:.3f}")
        wins += row.p_adapter_preferred > 0.5
    if len(rows) > 1:
        console.print(f"[bold]adapter preferred on {wins}/{len(rows)} prompts[/]")


@app.command()
def export(
    adapter: Annotated[Path, typer.Option("--adapter", "-a", help="A LoRA adapter folder (data/lora_adapter/<date>/<version>).")],
    merged: Annotated[Path, typer.Option("--merged", "-o", help="New folder for the merged model.")],
    base: Annotated[Optional[Path], typer.Option("--base", help="The base model folder (default: the one the adapter names).")] = None,
) -> None:
    """Merge an adapter into its base and write a plain HF model (safetensors + tokenizer) that LM Studio,
    llama.cpp's convert_hf_to_gguf.py and transformers can load."""
    from hominem_pipeline.core.policy.export import export_merged

    _logging()
    try:
        info = export_merged(adapter, merged, base)
    except (FileNotFoundError, FileExistsError) as exc:
        _fail(str(exc))
    console.print(f"merged {info['adapter']} into {info['base']} -> {merged}")
    console.print(f"for llama.cpp / LM Studio: python convert_hf_to_gguf.py {merged} --outfile model.gguf")


def main() -> None:  # pragma: no cover - console script shim
    try:
        app()
    except ConfigError as exc:
        _fail(str(exc))


if __name__ == "__main__":  # pragma: no cover
    main()
