"""`hominem data ...`: inspect, check and import labeled data."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from hominem_pipeline.cli.common import (
    ConfigOpt,
    DateOpt,
    SetOpt,
    artifact_for,
    audited,
    console,
    dagster_env,
    data_app,
    fail,
    load,
    parse_date,
    reach_partitions,
    read_table,
    setup_logging,
    who,
)
from hominem_pipeline.cli.pipeline import execute


@data_app.command("validate")
def data_validate(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: Annotated[
        Optional[str], typer.Option("--date", "-d", help="Partition date (default: the newest labeled one).")
    ] = None,
    all_versions: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Also check every file of every built version of every asset against its manifest's sha256, "
            "and the labels of every labeled day.",
        ),
    ] = False,
) -> None:
    """Check every label of a partition (schema, ranges, duplicates, empty, truncated or degenerate responses);
    exits 1 when a blocking check fails. With --all, also check that no stored file is damaged, and the labels
    of every labeled day."""
    cfg = load(config, sets)
    with audited(cfg, "data validate", date=date, all=all_versions):
        if not all_versions:
            problem = _validate_labels(cfg, date)
            if problem:
                fail(problem, code=1)
            return
        damaged, refs = _validate_all(cfg)
        from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

        days = [date] if date else ArtifactStore(cfg.data_dir).partitions("teacher_labels")
        broken = {r.partition for r in refs if r.asset in ("teacher_labels", "teacher_trajectories")}
        for day in sorted(broken & set(days)):
            console.print(
                f"[yellow]the labels of {day} are not checked: a file they are read from is damaged "
                "(the table above)[/]"
            )
        from hominem_pipeline.core.pipeline.lineage import lineage

        data = lineage(cfg)
        problems = []
        for day in days:
            if day in broken:
                continue
            if data.newest("teacher_labels", parse_date(day))[0] is None:
                console.print(
                    f"[yellow]the labels of {day} are not checked: none was built under this config (pass "
                    "the --config that built them)[/]"
                )
            elif why := _validate_labels(cfg, day):
                problems.append(f"{day}: {why}")
        if not days:
            console.print("no labeled day yet: no label to check")
        if damaged or problems:
            fail("; ".join(([damaged] if damaged else []) + problems), code=1)


def _validate_labels(cfg, date: str | None) -> str | None:
    """The label checks of one labeled day (the newest with None), as a table; why they fail, or None."""
    import pandas as pd

    from hominem_pipeline.core.teacher.labeling import BLOCKING, DEGENERATE, validate_labels

    data, ref = artifact_for(cfg, "teacher_labels", date)
    labels = read_table(ref, "labels.parquet", cfg)
    trajectories = data.expected("teacher_trajectories", ref.partition)
    quarantine_file = data.store.quarantine_path("teacher_labels", ref.partition, ref.version)
    report = validate_labels(
        labels,
        cfg.dimension_names,
        read_table(trajectories, "trajectories.parquet", cfg) if trajectories else None,
        pd.read_parquet(quarantine_file) if quarantine_file.is_file() else None,
        cfg.verifier.min_reply_logp,
    )
    table = Table(title=f"teacher_labels {ref.partition} (version {ref.version}): {report.rows} rows kept")
    table.add_column("check")
    table.add_column("failing stored rows", justify="right")
    table.add_column("quarantined", justify="right")
    table.add_column("kind")
    table.add_column("examples")
    for check in (*BLOCKING, "truncated_response", DEGENERATE):
        failing = report.failures.get(check, 0) or report.warnings.get(check, 0)
        kind = "blocking" if check in BLOCKING else "warning"
        table.add_row(
            check, str(failing), str(report.quarantined.get(check, 0)), kind, "\n".join(report.examples.get(check, []))
        )
    console.print(table)
    limit = cfg.verifier.max_failure_rate
    console.print(f"failure rate {report.failure_rate:.1%} (allowed {limit:.1%}); quarantine: {quarantine_file}")
    if not report.ok(limit):
        return (
            f"{report.failed_rows} stored label row(s) fail blocking checks"
            if report.failed_rows
            else f"failure rate {report.failure_rate:.1%} is above verifier.max_failure_rate {limit:.1%}"
        )
    console.print("[green]all blocking checks pass[/]")
    return None


def _validate_all(cfg) -> tuple[str | None, list]:
    """Every file of every built version of every stage, checked against its manifest's sha256: a table of
    the damaged ones; (why that fails or None, the damaged versions)."""
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore
    from hominem_pipeline.core.pipeline.lineage import build_command
    from hominem_pipeline.core.pipeline.stages import STAGES

    store = ArtifactStore(cfg.data_dir)
    checked, damaged = 0, []
    for stage in STAGES:
        for day in store.partitions(stage.name):
            for ref in store.versions(stage.name, day):
                checked += 1
                for name, problem in ref.damaged().items():
                    damaged.append((ref, name, problem))
    if not damaged:
        console.print(f"[green]{checked} version(s) checked in {cfg.data_dir}: every file matches its manifest[/]")
        return None, []
    table = Table(title=f"{len(damaged)} damaged file(s) in {checked} version(s)")
    for column in ("asset", "day", "version", "file", "what is wrong", "to rebuild"):
        table.add_column(column, overflow="fold")
    for ref, name, problem in damaged:
        rebuild = f"rm -r {ref.path} && " + (
            f"hominem data import-preferences ... --date {ref.partition}"
            if ref.asset == "human_preferences"
            else build_command(ref.asset, ref.partition, cfg)
        )
        table.add_row(ref.asset, ref.partition, ref.version, name, problem, rebuild)
    console.print(table)
    return (
        f"{len(damaged)} stored file(s) do not match their manifests; remove each damaged version and "
        "build it again (the table's last column)",
        [ref for ref, _, _ in damaged],
    )


@data_app.command("sample")
def data_sample(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: Annotated[
        Optional[str], typer.Option("--date", "-d", help="Partition date (default: the newest labeled one).")
    ] = None,
    n: Annotated[int, typer.Option("-n", min=1, help="How many random labeled samples to print.")] = 3,
    seed: Annotated[
        Optional[int], typer.Option(help="Seed for the random choice (default: a new choice each time).")
    ] = None,
) -> None:
    """Print random labeled samples with their reward vectors, and any range or missing-field problems."""
    from hominem_pipeline.core.teacher.labeling import row_problems

    cfg = load(config, sets)
    _, ref = artifact_for(cfg, "teacher_labels", date)
    labels = read_table(ref, "labels.parquet", cfg)
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
            f"scalar {row['scalar']:+.3f}   intensity {row['reward_intensity']:.3f}   safety "
            f"{row['safety_score']:.3f}\n"
            f"[bold]rationale:[/] {row['rationale']}"
        )
        problems = row_problems(row, cfg.dimension_names)
        console.print("[green]ranges and fields ok[/]" if not problems else f"[red]problems:[/] {'; '.join(problems)}")


@data_app.command("import-preferences")
def data_import_preferences(
    path: Annotated[Path, typer.Argument(help="The file to import (.jsonl, .jsonl.gz or .parquet).")],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="hh-rlhf (HH-RLHF transcripts: chosen/rejected dialogues), jsonl or parquet "
            "(prompt/chosen/rejected rows).",
        ),
    ],
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

    setup_logging()
    cfg = load(config, sets)
    with audited(cfg, "data import-preferences", file=str(path), format=format):
        day = parse_date(date)
        if format not in FORMATS:
            fail(f"--format {format!r} is not supported; use one of: {', '.join(FORMATS)}")
        try:
            target, added = add_to_inbox(path, format, cfg.data_dir, day)
        except PreferenceImportError as exc:
            fail(str(exc))
        console.print(f"{'added' if added else 'already imported'}: {path} -> {target}")
        dagster_env(cfg)
        from dagster import AssetKey

        reach_partitions(day)
        from hominem_pipeline import definitions

        [event] = execute(
            definitions.import_job, cfg, day, [AssetKey("human_preferences")], "hominem data import-preferences"
        )
        meta = event.materialization.metadata
        if meta["pairs"].value == 0:
            fail(
                f"no usable pair in the files imported for {day}; see the reasons in "
                f"{cfg.data_dir}/quarantine/human_preferences/{day}/",
                code=1,
            )
        details = meta["details"].value if "details" in meta else {}
        for reason, count in details.get("quarantine_reasons", {}).items():
            console.print(f"quarantined {count} row(s): {reason}")


@data_app.command("import-questions")
def data_import_questions(
    path: Annotated[Path, typer.Argument(help="The file of pairs to ask about (.jsonl, .jsonl.gz or .parquet).")],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="questions (JSON lines of prompt, a, b), or a preference file: hh-rlhf, jsonl or parquet "
            "(its labels are dropped).",
        ),
    ],
    config: ConfigOpt = None,
    sets: SetOpt = None,
) -> None:
    """Pairs of replies people will be asked to choose between (`GET /feedback/next`, the page's "ask me a pair"),
    beside the teacher's newest candidates. A preference file's labels are dropped: people give their own. Written
    to <data>/<serving.log_dir>/questions/ named by content (importing it again changes nothing); a running server
    reads it at its next pick."""
    from hominem_pipeline.core.attune.questions import QUESTIONS, parse_questions, write_question_file
    from hominem_pipeline.core.human.preferences import FORMATS, PreferenceImportError, parse_preference_file

    cfg = load(config, sets)
    with audited(cfg, "data import-questions", file=str(path), format=format):
        if format not in ("questions", *FORMATS):
            fail(f"--format {format!r} is not supported; use questions or one of: {', '.join(FORMATS)}")
        if not path.is_file():
            fail(f"{path} does not exist; pass the file of pairs to ask about")
        if format == "questions":
            try:
                pairs, bad = parse_questions(path)
            except UnicodeDecodeError:
                fail(f"{path} is not UTF-8 text; save it as UTF-8 JSON lines of prompt, a and b")
        else:
            try:
                parsed = parse_preference_file(path, format, path.name)
            except PreferenceImportError as exc:
                fail(str(exc))
            pairs, bad = parsed.pairs, len(parsed.quarantine)
        if not len(pairs):
            fail(
                f"{path} has no usable pair ({bad} unusable line(s)); each needs a prompt and two different replies",
                code=1,
            )
        target, n = write_question_file(pairs, cfg.data_dir / cfg.serving.log_dir / QUESTIONS, f"file:{path.name}")
        console.print(f"{n} question(s) -> {target}" + (f"; {bad} unusable line(s) skipped" if bad else ""))


@data_app.command("ship-features")
def data_ship_features(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    base_replies: Annotated[
        bool,
        typer.Option(
            "--base-replies",
            help="Only the base student's greedy replies the gate's reply cache holds (the held-out prompts, the "
            "memory questions, the reply checks' items, as `hominem run` left them), to "
            "config/human/features/<decoding>-base-replies.json: a fresh clone's first evaluation and gate read "
            "them instead of generating them. Seconds, not minutes.",
        ),
    ] = False,
) -> None:
    """Write what the reward model's frozen networks compute for the shipped people's pairs
    (reward_model.people_pairs) and the contrast fixtures: the guard columns and the backbone's pooled states (and
    the base student's log-probabilities of the fixtures' and the people's held-out pairs' replies, which the
    evaluation reads), the people's score's projection with every shipped pair's rows through it, the reference
    log-probabilities of the pairs the daily adapter learns from, and the people's start trained on them
    (policy.dual.people_start; about 25 minutes on 2 CPU cores), to config/human/features/, so that a fresh clone's
    first run reads them instead of computing them. Run it after `hominem run` once the shipped pairs, the guards,
    the backbone, the judge's frame, policy.lora or policy.max_length change, and commit the folder."""
    from hominem_pipeline.core.builds.shipping import ship_features
    from hominem_pipeline.core.lm.models import ModelNotAvailable

    setup_logging()
    cfg = load(config, sets)
    if base_replies:
        from hominem_pipeline.core.online.reply_cache import reply_cache

        with audited(cfg, "data ship-features", base_replies=True):
            path, count = reply_cache(cfg).ship_base_replies()
        if not count:
            fail(
                "the gate's reply cache holds no reply of the base for this decoding: run `hominem run` first", code=1
            )
        console.print(f"wrote {path}: {count} replies of the base")
        return
    with audited(cfg, "data ship-features"):
        try:
            written = ship_features(cfg)
        except (ModelNotAvailable, KeyError) as exc:
            fail(str(exc).strip("'\""))
        if not written:
            fail("nothing to ship: reward_model.people_pairs names no file and fixtures.file is null", code=1)
        for path, rows, computed in written:
            console.print(f"wrote {path}: {rows} rows ({computed} computed now, the rest read from the feature cache)")


@data_app.command("export")
def data_export(
    rater: Annotated[str, typer.Option("--rater", help="The person's pseudonymous id (r-..., or local).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The file to write (must not exist).")],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="json: their turns, feedback and pairs in one document (what GET /me/data answers) | jsonl: their "
            "pairs alone, one per line, as `hominem data import-preferences --format jsonl` reads them.",
        ),
    ] = "json",
    config: ConfigOpt = None,
    sets: SetOpt = None,
) -> None:
    """Everything one person gave, from the interaction log: their turns, their feedback and the preference
    pairs it makes, each pair in config/schemas/preference-pair.json's format."""
    import json

    from hominem_pipeline.core.online.export import log_events, rater_data
    from hominem_pipeline.core.online.log import log_folder

    cfg = load(config, sets, persist=False)
    with audited(cfg, "data export", rater=rater, out=str(out), format=format) as details:
        if format not in ("json", "jsonl"):
            fail(f"--format {format!r} is not supported; use json or jsonl")
        if out.exists():
            fail(f"{out} exists; pass a new file to --out")
        data = rater_data(log_events(log_folder(cfg)), rater)
        if not data["turns"] and not data["feedback"]:
            fail(f"nothing in the interaction log is {rater!r}'s; `hominem history choices` shows who gave what", 1)
        text = (
            json.dumps(data, ensure_ascii=False, indent=1) + "\n"
            if format == "json"
            else "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in data["pairs"])
        )
        out.write_text(text, encoding="utf-8")
        details |= {"pairs": len(data["pairs"]), "turns": len(data["turns"])}
    console.print(
        f"{rater}: {len(data['pairs'])} pair(s), {len(data['turns'])} turn(s), "
        f"{len(data['feedback'])} piece(s) of feedback -> {out}"
    )


@data_app.command("forget")
def data_forget(
    rater: Annotated[str, typer.Option("--rater", help="The person's pseudonymous id (r-..., or local).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    config: ConfigOpt = None,
    sets: SetOpt = None,
) -> None:
    """Forget one person: a tombstone in the log, then their words out of every file under the data folder (the log,
    the history index, memory files, caches, and the built versions that hold them, which the next run builds
    again). What could not be removed is listed with the command that removes it. `hominem data export` first if
    they want a copy."""
    from hominem_pipeline.core.online.forget import forget
    from hominem_pipeline.core.online.log import log_folder, read_events, tombstones

    cfg = load(config, sets, persist=False)
    setup_logging()
    with audited(cfg, "data forget", rater=rater) as details:
        folder = log_folder(cfg)
        files = sorted(folder.glob("*.jsonl"))
        theirs = sum(1 for p in files for e in read_events(p, honour_tombstones=False) if e.get("rater") == rater)
        if not theirs and rater not in tombstones(folder):
            fail(f"nothing in the interaction log is {rater!r}'s; `hominem history choices` shows who gave what", 1)
        if not yes and not typer.confirm(f"Forget {rater}: {theirs} event(s) and everything built from them?"):
            fail("nothing forgotten", 1)
        report = forget(cfg, rater, who())
        details |= {"events": report.events, "removed": len(report.removed), "left": len(report.left)}
    console.print(
        f"{rater} forgotten: {report.events} event(s) out of the log, {report.rows} row(s) out of memory files, "
        f"caches and the history index, {len(report.removed)} version(s) or file(s) removed",
        highlight=False,
    )
    for line in report.removed:
        console.print(f"  removed {line}", highlight=False)
    for line in report.rebuild:
        console.print(f"  build again: {line}", highlight=False)
    for line in report.left:
        console.print(f"  [yellow]left: {line}[/]", highlight=False)
    console.print(
        "[dim]a running `hominem serve` keeps what it read at start until it restarts; DELETE /me/data on the service "
        "forgets at once[/]",
        highlight=False,
    )
