"""`hominem live ...`: which adapter the service answers with, and changing it (through the gate)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from hominem_pipeline.cli.common import ConfigOpt, SetOpt, app, audited, console, fail, load, setup_logging, who

live_app = typer.Typer(
    help="The live adapter: status, online update, promote (through the gate), rollback, freeze, notes.",
    no_args_is_help=True,
)
app.add_typer(live_app, name="live")

ReasonOpt = Annotated[Optional[str], typer.Option("--reason", "-r", help="Why; kept in data/live/history.json.")]


def _state(config, sets):
    from hominem_pipeline.core.online.live import LiveState

    return LiveState(load(config, sets, persist=False).data_dir)


def _do(action):
    from hominem_pipeline.core.online.live import LiveError

    try:
        return action()
    except LiveError as exc:
        fail(str(exc))


@live_app.command("status")
def live_status(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    last: Annotated[int, typer.Option("--last", "-n", help="History entries shown.")] = 10,
) -> None:
    """The live adapter, whether updates are frozen, the slow loop's nights and the settings in force, the
    candidates the gate refused, and the latest history."""
    from hominem_pipeline.core.online.live import utc_now
    from hominem_pipeline.core.online.slow_loop import status as slow_status

    cfg = load(config, sets, persist=False)
    state = _state(config, sets)
    live = _do(state.current)
    console.print(
        f"live: [bold]{live.version or 'base'}[/]"
        + (f"  {live.adapter}" if live.adapter else "  (the base student alone)")
        + (f"  since {live.since}" if live.since else "")
    )
    if live.version is None:
        from hominem_pipeline.core.online.promotion import why_base

        console.print(f"why the base: {why_base(cfg.data_dir)}", highlight=False)
    from hominem_pipeline.core.online.promotion import gate_lines

    for line in gate_lines(cfg.data_dir):
        console.print(line, highlight=False, soft_wrap=True)
    if live.reward_model:
        console.print(f"reward model: {live.reward_model}")
    for line in health_lines(cfg):
        console.print(line, highlight=False)
    if live.frozen:
        console.print(
            f"[bold yellow]frozen[/] since {live.frozen['since']} by {live.frozen['by']}: "
            f"{live.frozen['reason']} (`hominem live unfreeze`)"
        )
    stack = [s["version"] or "base" for s in state.stack()]
    if len(stack) > 1:
        console.print(f"rollback goes to: {stack[-2]}  (live before, oldest first: {', '.join(stack[:-1])})")
    slow = slow_status(cfg.data_dir, cfg.slow_loop, utc_now()[:10])
    if slow["nights"]:
        trend = "  ".join(
            f"{n['day'][5:]} {n['rhi']:.3f}" if n["rhi"] is not None else f"{n['day'][5:]} -" for n in slow["nights"]
        )
        console.print(f"slow loop{'' if slow['enabled'] else ' (off: slow_loop.enabled false)'}: nightly RHI {trend}")
    if slow["in_force"]:
        console.print(
            f"[bold yellow]slow loop in force[/]: {', '.join(slow['in_force'])} (next adapters: learning "
            f"rate x{slow['lr_factor']:g}, "
            f"LoRA rank x{slow['rank_factor']:g}); rising nights undo them"
        )
    for a in slow["actions"]:
        console.print(f"  {a['night']}: {a['step']}: {a['reason']}")
    from hominem_pipeline.core.pipeline.retrain import describe_state, read_state

    for line in describe_state(read_state(cfg.data_dir)):
        console.print(line, highlight=False)
    candidates = state.candidates()
    if candidates:
        table = Table(title="candidates the gate refused")
        for col in ("version", "when", "why"):
            table.add_column(col)
        for c in candidates[:last]:
            table.add_row(c["version"], c["time"], c.get("reason", ""))
        console.print(table)
    history = state.history()[-last:]
    if history:
        table = Table(title=f"history (last {len(history)})")
        for col in ("when", "action", "version", "by", "reason / note"):
            table.add_column(col)
        for e in history:
            action = e["action"] + (
                f" ({e['slow_loop_step']})" if e.get("slow_loop_step") and e["slow_loop_step"] != e["action"] else ""
            )
            table.add_row(
                e["time"], action, e.get("version") or "base", e.get("by", ""), e.get("note") or e.get("reason") or ""
            )
        console.print(table)


def health_lines(cfg) -> list[str]:
    """The newest day's Reward Health Index: each component against the panel's healthy range, the one
    that refused, and the pattern of the last nights (flat near 0.5: the evaluator failing)."""
    from hominem_pipeline.core.dashboard.views import DashboardData

    h = DashboardData(cfg.data_dir).health()
    if h["rhi"] is None:
        return []
    threshold = h.get("threshold")
    lines = [
        f"health of {h['day']}: RHI {h['rhi']:.3f}"
        + (f" (threshold {threshold:g}, {h['threshold_from']})" if threshold is not None else "")
        + ("" if h["deploy"] is None else ("  may go live" if h["deploy"] else "  refused"))
    ]
    for c in h["components"]:
        value = "n/a" if c["value"] is None else f"{c['value']:.3f}"
        lines.append(
            f"  {c['key'].upper():5s} {value}  {c.get('verdict') or 'no healthy range (health.calibration: null)'}"
            + ("  <- below the panel's healthy range" if c.get("below") else "")
        )
    if h["pattern"]:
        means = {p["pattern"]: p["means"] for p in h["patterns"]}
        lines.append(f"pattern of the last nights: {h['pattern']}: {means[h['pattern']]}")
    return lines


@live_app.command("promote")
def live_promote(
    version: Annotated[
        str, typer.Argument(help="The adapter's version id (a lora_adapter version or an online update's).")
    ],
    config: ConfigOpt = None,
    sets: SetOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Gate the adapter against the live one and make it live if it passes; exit 1 with the reasons if not."""
    from hominem_pipeline.core.online.promotion import promote_version

    setup_logging()
    cfg = load(config, sets, persist=False)
    with audited(cfg, "live promote", version=version, reason=reason):
        result = _do(lambda: promote_version(cfg, version, by=who(), reason=reason or "promoted by hand"))
        console.print(result.report.summary())
        if not result.promoted:
            fail(f"{version} stays a candidate: " + "; ".join(result.report.reasons), code=1)
    console.print(f"[bold green]{version} is live[/]")


@live_app.command("rollback")
def live_rollback(
    version: Annotated[
        Optional[str], typer.Argument(help="A version that was live, or `base`; default: the one live before.")
    ] = None,
    config: ConfigOpt = None,
    sets: SetOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Make the adapter live before the current one (or VERSION) live again; no gate: it was live already."""
    from hominem_pipeline.core.online.promotion import rollback

    cfg = load(config, sets, persist=False)
    with audited(cfg, "live rollback", version=version, reason=reason) as details:
        live = _do(lambda: rollback(cfg, version, reason=reason or "rolled back by hand", by=who()))
        details["live"] = live.version
    console.print(f"live: [bold]{live.version or 'base'}[/]")


@live_app.command("freeze")
def live_freeze(config: ConfigOpt = None, sets: SetOpt = None, reason: ReasonOpt = None) -> None:
    """Stop online updates and promotions; the live adapter keeps answering."""
    with audited(load(config, sets, persist=False), "live freeze", reason=reason):
        _do(lambda: _state(config, sets).freeze(reason=reason or "frozen by hand", by=who()))
    console.print("live updates frozen (`hominem live unfreeze` resumes them)")


@live_app.command("unfreeze")
def live_unfreeze(config: ConfigOpt = None, sets: SetOpt = None, reason: ReasonOpt = None) -> None:
    """Resume online updates and promotions."""
    with audited(load(config, sets, persist=False), "live unfreeze", reason=reason):
        _do(lambda: _state(config, sets).unfreeze(reason=reason or "", by=who()))
    console.print("live updates resumed")


@live_app.command("note")
def live_note(
    text: Annotated[str, typer.Argument(help="What you noticed about the live adapter.")],
    config: ConfigOpt = None,
    sets: SetOpt = None,
) -> None:
    """Keep a note about the live adapter in its history."""
    _do(lambda: _state(config, sets).note(text, by=who()))
    console.print("noted")


@live_app.command("update")
def live_update(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    reason: ReasonOpt = None,
    result: Annotated[
        Optional[Path], typer.Option("--result", help="Also write the outcome as JSON to this file.")
    ] = None,
    ready: Annotated[
        bool,
        typer.Option(
            "--ready",
            help="Load the libraries and the reward model, then wait: a line on stdin starts the update (the line "
            "is its reason); end of input exits. `hominem serve` keeps one such process ready, at the priority "
            "online.update_nice.",
        ),
    ] = False,
) -> None:
    """One online update now: a short `dual` update of the live adapter on a replay batch (people's pairs
    from the log, the teacher's pairs), through the fast-loop gate; promoted if it passes. Exit 1 when
    the gate refuses it, 0 when promoted or skipped (nothing new to learn, frozen)."""
    import json

    from hominem_pipeline.core.online.updates import run_update
    from hominem_pipeline.serving.updates import ready_marker

    setup_logging()
    if ready:
        import importlib
        import os
        import sys

        os.nice(load(config, sets, persist=False).online.update_nice)  # the server's replies come first

        # what an update imports first: seconds it then does not wait for
        for module in (
            "peft",
            "trl.trainer.utils",
            "hominem_pipeline.core.online.promotion",
            "hominem_pipeline.core.policy.dual",
            "hominem_pipeline.core.reward.model",
            "hominem_pipeline.core.evaluation.health",
        ):
            importlib.import_module(module)
        from hominem_pipeline.core.online.updates import prepare

        prepare(
            load(config, sets, persist=False)
        )  # and the reward model it would follow now, with the student its guards read
        if result is not None:
            ready_marker(result).touch()  # the server's status says "ready" from now on
        line = sys.stdin.readline()
        if not line:
            raise typer.Exit(0)  # the server stopped before it needed this process
        reason = line.strip() or reason
    cfg = load(config, sets, persist=False)
    with audited(cfg, "live update", reason=reason) as details:
        done = _do(lambda: run_update(cfg, by=who(), reason=reason or "online update by hand"))
        details |= {"result": done.outcome, "version": done.version}
    if result is not None:
        result.write_text(json.dumps(done.as_dict(), indent=1, default=str) + "\n")
    console.print(f"{done.outcome}: {done.version or ''} {done.reason}".replace("  ", " "))
    if done.outcome == "refused":
        raise typer.Exit(1)
    if done.outcome == "promoted":
        console.print(f"[bold green]{done.version} is live[/]")
