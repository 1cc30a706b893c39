"""`hominem config`, `setup`, `run` and `ui`: the pipeline through Dagster, and its UIs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from hominem_pipeline.cli.common import (
    ConfigOpt,
    DateOpt,
    SetOpt,
    app,
    audited,
    console,
    dagster_env,
    err,
    fail,
    load,
    parse_date,
    reach_partitions,
    setup_logging,
    signal_group,
)
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.pipeline.artifacts import PARTIAL


@app.command("config")
def show_config(
    keys: Annotated[
        Optional[list[str]],
        typer.Argument(help="Dotted keys or sections, e.g. policy.dual teacher.provider (default: every setting)."),
    ] = None,
    config: ConfigOpt = None,
    sets: SetOpt = None,
) -> None:
    """Each setting's value under this config (overlay and --set applied) and what it means."""
    from hominem_pipeline.core.config.loader import describe

    try:
        rows = describe(load(config, sets, persist=False), keys or [""])
    except KeyError as exc:
        fail(exc.args[0])
    for row in rows:
        value = "" if row.section else f" = {json.dumps(row.value, ensure_ascii=False)}"
        console.print(f"[bold]{row.key}[/]{value}\n    {row.meaning}", highlight=False, soft_wrap=True)


@app.command()
def setup(config: ConfigOpt = None, sets: SetOpt = None) -> None:
    """Prepare the offline models once: convert the packaged SmolLM2 GGUF to an HF folder, find the encoder."""
    setup_logging()
    from hominem_pipeline.core.lm.models import (
        ModelNotAvailable,
        encoder_path,
        prepare_student,
    )

    cfg = load(config, sets)
    try:
        student = prepare_student(cfg)
        encoder = encoder_path(cfg)
    except ModelNotAvailable as exc:
        fail(str(exc))
    console.print(f"student: {student}\nencoder: {encoder}")


@app.command()
def run(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: DateOpt = None,
    select: Annotated[
        str,
        typer.Option(
            "--select",
            "-s",
            help="Dagster asset selection, e.g. '*', 'reward_model+', 'prompts,teacher_trajectories'.",
        ),
    ] = "*",
    fill_window: Annotated[
        bool,
        typer.Option(
            "--fill-window",
            help="First build the days before --date that the day's windows read and that lack them, oldest "
            "first, one Dagster run "
            "per day: labels for each day of the reward model's window (reward_model.window_days) and, "
            "when the selection "
            "trains an adapter, that day's reward model and preference pairs for each day of the adapter's window "
            "(policy.window_days): a fresh clone's reward model and adapter then train on full windows, "
            "as after a week of "
            "daily runs (~5 min a day on the offline default on 2 cores). A day's feedback (the "
            "service's log) is built "
            "with it, and alone where only the log changed since.",
        ),
    ] = False,
) -> None:
    """Materialize assets for one day through Dagster (runs show in the Dagster UI, metrics in MLflow)."""
    import dagster  # noqa: F401 (first: without the pipeline installed, say so before anything is prepared)

    setup_logging()
    cfg = load(config, sets)
    with audited(cfg, "run", date=date, select=select, fill_window=fill_window):
        day = parse_date(date)
        dagster_env(cfg)
        from hominem_pipeline.core.lm.models import ModelNotAvailable, prepare_student

        try:
            prepare_student(cfg)
        except ModelNotAvailable as exc:
            fail(str(exc))

        from dagster import AssetSelection

        reach_partitions(day, max(cfg.reward_model.window_days, cfg.policy.window_days) - 1 if fill_window else 0)
        from hominem_pipeline import definitions

        job = definitions.daily_job()
        if "human_preferences" in select:
            fail(
                "human_preferences is not built by `hominem run`; fill it with `hominem data "
                "import-preferences PATH --format hh-rlhf`"
            )
        try:
            keys = AssetSelection.from_coercible(select.split(",")).resolve(job.asset_layer.asset_graph)
        except Exception as exc:  # dagster raises several error types for a bad selection string
            fail(f"--select {select!r} is not a valid asset selection ({exc}); try '*' or 'reward_model+'")
        if not keys:
            fail(
                f"--select {select!r} matches no asset; assets are: "
                f"{', '.join(sorted(k.to_user_string() for k in job.asset_layer.asset_graph.get_all_asset_keys()))}"
            )
        _check_teacher_key(cfg, day, {k.to_user_string() for k in keys}, fill_window)
        if fill_window:
            _fill_window(cfg, day, pairs="lora_adapter" in {k.to_user_string() for k in keys})
        execute(definitions.daily_job, cfg, day, keys, "hominem run")


def _check_teacher_key(cfg: HominemConfig, day: str, selected: set[str], fill_window: bool) -> None:
    """A hosted teacher's key, and that something answers at its address, are checked before any run
    starts, when a selected stage that calls the teacher has work to do (is not built for this config):
    nothing is started, so no failed run, empty partition folder or failed MLflow run is left behind."""
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline.core.pipeline.stages import TEACHER_STAGES
    from hominem_pipeline.core.teacher.providers import (
        MissingKeyError,
        api_key_for,
        teacher_address,
        unreachable_address,
    )

    if cfg.teacher.provider == "local":
        return
    data = lineage(cfg)
    if fill_window or any(data.expected(stage, day) is None for stage in TEACHER_STAGES if stage in selected):
        try:
            api_key_for(cfg.teacher)
        except MissingKeyError as exc:
            fail(str(exc))
        api = cfg.teacher.api
        if why := unreachable_address(api.base_url, cfg.teacher.provider):
            fail(
                f"cannot reach the teacher at {teacher_address(api.base_url, cfg.teacher.provider)}: {why}; "
                f"start the server there, or fix teacher.api.base_url"
            )


def _fill_window(cfg: HominemConfig, day: str, pairs: bool) -> None:
    """Build each earlier day that `day`'s windows read and that lacks it (oldest first; days before
    project.partitions_start are left out): teacher_labels for the days of the reward model's window,
    and, when the run trains an adapter (`pairs`), preference_pairs (with that day's reward model, as a
    daily run would have trained it) for the days of the adapter's window. A day's stages that are
    already current are reused, not rebuilt."""
    from dagster import AssetSelection

    from hominem_pipeline import definitions
    from hominem_pipeline.core.builds.human_feedback import log_digest
    from hominem_pipeline.core.pipeline.lineage import lineage, window_gaps

    rm_days, policy_days = cfg.reward_model.window_days, (cfg.policy.window_days if pairs else 0)
    plan = window_gaps(lineage(cfg), day, rm_days, policy_days)
    what = {"preference_pairs": "labels to pairs", "teacher_labels": "labels", "human_feedback": "the day's feedback"}
    console.print(
        f"[bold]--fill-window[/]: reward_model.window_days {rm_days}"
        + (f", policy.window_days {policy_days}; " if pairs else "; ")
        + (
            f"filling {len(plan)} earlier day(s): " + ", ".join(f"{d} ({what[a]})" for d, a in plan)
            if plan
            else "every earlier day is built"
        )
    )
    graph = definitions.daily_job().asset_layer.asset_graph
    for k, (d, asset) in enumerate(plan, 1):
        selection = AssetSelection.assets(asset).upstream()
        if log_digest(cfg, d):  # the day's feedback too, where people talked to the service that day
            selection = selection | AssetSelection.assets("human_feedback")
        keys = selection.resolve(graph)
        execute(definitions.daily_job, cfg, d, keys, f"hominem run --fill-window ({k}/{len(plan)})")


PARTIAL_EXIT = 3  # the run finished, but some teacher calls failed for good: the versions so marked are partial


def execute(job_fn, cfg: HominemConfig, day: str, keys, title: str) -> list:
    """Run `keys` of the job `job_fn` returns for partition `day` in this process, recorded in the
    project's instance under the UI's origin for the job (so the UI lists it under the job); print a summary; exit 1
    with the root cause when a step fails, 3 (`PARTIAL_EXIT`) when a version is partial. Returns the
    materialization events."""
    from dagster._core.errors import DagsterInvalidSubsetError

    from hominem_pipeline.defs.launch import execute_in_process, first_failure

    job = job_fn()
    if not job.partitions_def.has_partition_key(day):
        fail(
            f"--date {day} is outside the daily partitions ({job.partitions_def.get_first_partition_key()} to today); "
            "change project.partitions_start (now "
            f"{cfg.project.partitions_start or 'null: the first built day'}) or the date"
        )
    started = time.monotonic()
    console.print(
        f"[bold]{title}[/] {day}: {len(keys)} asset(s), DAGSTER_HOME {os.environ['DAGSTER_HOME']}, "
        f"MLflow {cfg.mlflow_uri}"
    )
    # Dagster's own console lines (and a failed step's traceback) stay in the run's event log in the
    # UI; the terminal shows our progress lines and, on failure, the root cause.
    run_config = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    tags = {"dagster/partition": day, "hominem/trigger": "cli"}
    try:
        if cfg.runtime.launch == "queue":  # the instance's queue: the daemon launches it where its run launcher says
            from hominem_pipeline.defs.launch import submit_and_wait

            queued = submit_and_wait(
                job_fn,
                keys,
                run_config,
                tags,
                working_directory=str(cfg.root),
                on_status=lambda status: console.print(f"run {status.lower()}", highlight=False),
            )
            success, run_id, events, failure = queued.success, queued.run_id, queued.events, queued.failure
        else:
            with execute_in_process(
                job_fn, keys, run_config, tags, working_directory=os.environ["DAGSTER_HOME"]
            ) as result:
                success = result.success
                run_id = result.run_id
                events = result.get_asset_materialization_events()
                failure = None if success else first_failure(result.all_events)
    except DagsterInvalidSubsetError as exc:
        fail(str(exc))
    _print_summary(events, cfg, day, run_id, time.monotonic() - started)
    if not success:
        fail(f"run {run_id} failed at {failure}\n(full traceback: `make ui`, Dagster -> Runs -> {run_id[:8]})", code=1)
    partial = [
        (e.asset_key.to_user_string(), e.materialization.metadata)
        for e in events
        if PARTIAL in str(e.materialization.metadata["version"].value)
    ]
    if partial:
        missing = sum(int(m["missing"].value) for _, m in partial if "missing" in m)
        fail(
            f"{', '.join(a for a, _ in partial)} {'is' if len(partial) == 1 else 'are'} partial: "
            f"{missing} teacher call(s) failed after every retry "
            f"(failed_calls.json in each version); run the same command again to make only those calls",
            code=PARTIAL_EXIT,
        )
    return events


def _print_summary(events, cfg: HominemConfig, day: str, run_id: str, seconds: float) -> None:
    table = Table(title=f"hominem {day}  (Dagster run {run_id[:8]}, {seconds / 60:.1f} min)")
    table.add_column("asset")
    table.add_column("version", no_wrap=True, min_width=16)  # a partial version's id is longer: never cut
    table.add_column("")
    table.add_column("highlights")
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
        "human_feedback": ("turns", "pairs", "raters"),
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
        state = "reused" if reused and reused.value else "built"
        if PARTIAL in str(meta["version"].value):
            state = f"[bold yellow]partial[/] ({meta['missing'].value if 'missing' in meta else '?'} calls failed)"
        table.add_row(asset, str(meta["version"].value), state, "  ".join(highlights))
    console.print(table)
    console.print(
        f"results: {cfg.data_dir}/<asset>/{day}/   (one folder per version; the table above names the "
        "ones this config reads)\n"
        f"UIs:     make ui   ->  Dagster http://127.0.0.1:3000   MLflow http://127.0.0.1:5000"
    )


def _ui_commands(cfg, dagster_port: int, mlflow_port: int) -> tuple[dict[str, list[str]], str]:
    """The commands that start each UI (no MLflow server where the tracking URI is a server already: it is the MLflow
    UI), and where the MLflow UI is."""
    from hominem_pipeline.defs.launch import DEFINITIONS_MODULE  # the run origin `hominem run` gives its runs

    bindir = Path(sys.executable).parent
    dagster = [str(bindir / "dagster"), "dev", "-m", DEFINITIONS_MODULE, "-h", "127.0.0.1", "-p", str(dagster_port)]
    if cfg.mlflow_uri.startswith(("http://", "https://")):  # a tracking server (a deployment)
        return {"Dagster": dagster}, cfg.mlflow_uri
    mlflow = [
        str(bindir / "mlflow"),
        "server",
        "--backend-store-uri",
        cfg.mlflow_uri,
        "--default-artifact-root",
        cfg.path(cfg.tracking.artifact_root).resolve().as_uri(),
        "--host",
        "127.0.0.1",
        "--port",
        str(mlflow_port),
        "--workers",
        "1",
    ]
    return {"Dagster": dagster, "MLflow": mlflow}, f"http://127.0.0.1:{mlflow_port}"


@app.command("ui-proxy")
def ui_proxy(
    dagster: Annotated[
        Optional[str], typer.Option(help="The Dagster UI to guard, e.g. http://127.0.0.1:3001.")
    ] = None,
    mlflow: Annotated[
        Optional[str],
        typer.Option(help="The MLflow server to guard (UI and tracking API), e.g. http://127.0.0.1:5001."),
    ] = None,
    host: Annotated[str, typer.Option(help="Where the proxy listens.")] = "0.0.0.0",
    dagster_port: Annotated[int, typer.Option(help="The proxy's port for Dagster.")] = 3000,
    mlflow_port: Annotated[int, typer.Option(help="The proxy's port for MLflow.")] = 5000,
    config: ConfigOpt = None,
    sets: SetOpt = None,
) -> None:
    """A deployment's Dagster and MLflow servers behind the service's tokens (see deploy/README.md): run them on
    loopback or a private network, and this where people reach them. An admin token is admitted (a browser signs in
    at /_hominem/login; an MLflow client sends MLFLOW_TRACKING_TOKEN); anything else is refused and audited."""
    import asyncio

    from hominem_pipeline.serving.ui_proxy import Route, serve

    cfg = load(config, sets, persist=False)
    ports = {"Dagster": (dagster, dagster_port), "MLflow": (mlflow, mlflow_port)}
    routes = [Route(name, host, port, url.rstrip("/")) for name, (url, port) in ports.items() if url]
    if not routes:
        fail("nothing to guard: pass --dagster URL and/or --mlflow URL")
    guard = _ui_guard(cfg, host, dagster_port, mlflow_port)
    if guard is None:
        fail("no token is configured (serving.tokens_file or its environment variable): the proxy would admit anyone")
    for route in routes:
        console.print(f"{route.name}: http://{host}:{route.port} -> {route.upstream} (admin token)", highlight=False)
    # A service manager stops it with SIGTERM: handled here, so it stops as after Ctrl-C even when the process was
    # started with SIGTERM ignored (a disposition a child inherits from whatever launched it).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        asyncio.run(serve(routes, guard.access))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        fail(f"the UI proxy cannot listen ({exc.strerror}); pass other ports")


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


class _Guard:
    """The UIs behind the authenticating proxy (`serving/ui_proxy.py`): each UI on a free loopback port, the proxy
    where people reach it."""

    def __init__(self, access, host: str, ports: dict[str, int]):
        from hominem_pipeline.serving.ui_proxy import Route, free_port

        self.access = access
        self.inner = {name: free_port() for name in ports}
        self.routes = [Route(n, host, ports[n], f"http://127.0.0.1:{self.inner[n]}") for n in ports]

    def start(self) -> None:
        from hominem_pipeline.serving.ui_proxy import start_in_thread

        try:
            start_in_thread(self.routes, self.access)
        except OSError as exc:
            fail(f"the UI proxy cannot listen ({exc.strerror}); pass other --dagster-port / --mlflow-port")


def _ui_guard(cfg, host: str, dagster_port: int, mlflow_port: int) -> _Guard | None:
    """The proxy when the service's tokens are configured; None (the UIs open) on loopback without tokens; beyond
    loopback without tokens, the command stops, as `hominem serve` does."""
    from hominem_pipeline.core.online.audit import audit_path
    from hominem_pipeline.serving.auth import Access, AccessError

    s = cfg.serving
    try:
        access = Access.from_settings(
            cfg.path(s.tokens_file) if s.tokens_file else None, s.tokens_env, audit_path(cfg), repo=cfg.root
        )
        access.check_bind(host)
    except AccessError as exc:
        fail(str(exc).replace("serving.host", "--host"))
    return None if access.open else _Guard(access, host, {"Dagster": dagster_port, "MLflow": mlflow_port})


def _stopper(procs: dict[str, subprocess.Popen]) -> Callable[..., None]:
    """The handler that stops both servers and exits."""

    def stop(*_: object) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # SIGINT is what both servers treat as Ctrl-C (a clean shutdown of their own children);
        # whatever is left after the grace period is killed with its whole group.
        for proc in procs.values():
            signal_group(proc, signal.SIGINT)
        deadline = time.monotonic() + 20
        for proc in procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            signal_group(proc, signal.SIGKILL)
        console.print("stopped Dagster and MLflow")
        raise typer.Exit(0)

    return stop


@app.command()
def ui(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    dagster_port: Annotated[int, typer.Option(help="Port of the Dagster UI.")] = 3000,
    mlflow_port: Annotated[int, typer.Option(help="Port of the MLflow UI.")] = 5000,
    host: Annotated[
        str,
        typer.Option(help="Where the UIs listen; beyond 127.0.0.1 they need the service's tokens (serving.tokens_*)."),
    ] = "127.0.0.1",
) -> None:
    """Start the Dagster UI and the MLflow UI together; Ctrl-C stops both. With the service's tokens configured
    (serving.tokens_file or its environment variable), both sit behind an authenticating proxy that admits an admin
    token (a browser signs in once at /_hominem/login); without tokens they are open on loopback only."""
    from hominem_pipeline.core.pipeline.tracking import experiment_url

    cfg = load(config, sets)
    dagster_env(cfg)
    (cfg.data_dir / "mlflow").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    guard = _ui_guard(cfg, host, dagster_port, mlflow_port)
    inner = guard.inner if guard else {"Dagster": dagster_port, "MLflow": mlflow_port}
    commands, mlflow_ui = _ui_commands(cfg, inner["Dagster"], inner["MLflow"])
    if guard and "MLflow" not in commands:  # a tracking server of the deployment's: not this command's to guard
        guard.routes = [r for r in guard.routes if r.name != "MLflow"]
    # before the server starts: this creates the store (and the experiment) the server then opens, where
    # both creating it at once would race on its schema migration
    runs = experiment_url(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root), mlflow_ui)
    procs: dict[str, subprocess.Popen] = {}
    dagster_home = os.environ["DAGSTER_HOME"]
    for name, cmd in commands.items():
        # Own process group each, so stopping takes their workers and children too. Dagster starts in
        # its home (not the project folder, whose dagster.yaml it would warn about).
        procs[name] = subprocess.Popen(
            cmd, env=env, cwd=dagster_home if name == "Dagster" else cfg.root, start_new_session=True
        )
    if guard:
        guard.start()
        shown = f"http://{host}:{mlflow_port}" if "MLflow" in commands else mlflow_ui
        runs = runs.replace(mlflow_ui, shown)
        mlflow_ui = shown
    console.print(
        f"Dagster UI: http://{host}:{dagster_port}\nMLflow UI:  {mlflow_ui}\n"
        f"  the runs: {runs}  (the model-training view)\n"
        + ("  behind the service's tokens: an admin token, or sign in at /_hominem/login\n" if guard else "")
        + "Ctrl-C stops both."
    )
    stop = _stopper(procs)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        for name, proc in procs.items():
            if proc.poll() is not None:
                err.print(f"{name} exited with code {proc.returncode}; stopping the other one")
                stop()
        time.sleep(1)
