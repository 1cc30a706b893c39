"""`hominem audit`: the audit log (core/online/audit.py): list and filter its lines, and verify its chain."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.table import Table

from hominem_pipeline.cli.common import ConfigOpt, SetOpt, app, console, fail, load

audit_app = typer.Typer(
    help="The audit log of every state-changing action (the service's and the CLI's): list, filter, verify.",
    invoke_without_command=True,
)
app.add_typer(audit_app, name="audit")


@audit_app.callback()
def audit_list(
    ctx: typer.Context,
    config: ConfigOpt = None,
    sets: SetOpt = None,
    action: Annotated[Optional[str], typer.Option("--action", help="Only lines whose action contains this.")] = None,
    by: Annotated[Optional[str], typer.Option("--who", help="Only lines of this actor (r-..., cli:<user>).")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Only lines from this UTC time or day on.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Newest lines shown.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print the lines as JSON.")] = False,
) -> None:
    """The newest lines of the audit log, filtered; `hominem audit verify` checks its chain."""
    if ctx.invoked_subcommand is not None:
        return
    from hominem_pipeline.core.online.audit import AuditLog, audit_path

    cfg = load(config, sets, persist=False)
    rows = [
        e
        for e in AuditLog(audit_path(cfg)).entries()
        if (action is None or action in str(e.get("action")))
        and (by is None or e.get("who") == by or e.get("rater") == by)
        and (since is None or str(e.get("time", "")) >= since)
    ][-limit:]
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table("time", "who", "action", "details")
    for e in rows:
        rest = {k: v for k, v in e.items() if k not in ("time", "who", "action", "prev", "hash")}
        table.add_row(str(e.get("time", "")), str(e.get("who", "")), str(e.get("action", "")), json.dumps(rest))
    console.print(table)


@audit_app.command("verify")
def audit_verify(config: ConfigOpt = None, sets: SetOpt = None) -> None:
    """Check the audit log's chain: names each line removed, edited or moved; exits 1 if any."""
    from hominem_pipeline.core.online.audit import AuditLog, audit_path

    cfg = load(config, sets, persist=False)
    path = audit_path(cfg)
    verdict = AuditLog(path).verify()
    older = f" ({verdict.unchained} written before the chain, not checked)" if verdict.unchained else ""
    if not verdict.intact:
        fail(
            f"{path}: {len(verdict.problems)} problem(s) in {verdict.lines} lines{older}:\n  "
            + "\n  ".join(verdict.problems),
            code=1,
        )
    console.print(f"{path}: {verdict.lines} lines, chain intact{older}; last hash {verdict.last}")
