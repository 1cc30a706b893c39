"""`hominem attune`: the day's attunement in a few screenfuls: agreement with people and ECE (the
judge's beside), per day and per domain, what drifted, and the error clusters with an example each."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.markup import escape

from hominem_pipeline.cli.common import ConfigOpt, SetOpt, app, artifact_for, console, load, read_table

SHOWN = 8  # drifted dimensions printed


def _share(report: dict | None, unit: str) -> str:
    if not report:
        return f"no {unit} in the window"
    return (
        f"{report['agreement']:.1%} ± {report['stderr']:.1%} of {report['pairs']} {unit} ordered as chosen, "
        f"ECE {report['ece']:.3f}"
    )


@app.command("attune")
def attune(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: Annotated[
        Optional[str],
        typer.Option("--date", "-d", help="Partition date (default: the newest day with an attunement)."),
    ] = None,
    clusters: Annotated[
        int, typer.Option("--clusters", "-k", min=0, help="Error clusters shown (largest first).")
    ] = 5,
) -> None:
    """How well the reward model predicts what people later chose: agreement and calibration (ECE) over the
    window, per day and per domain; what drifted between the recent and the reference window; the pairs it
    orders against people, clustered, with an example each. Built by the `attunement` asset (`hominem run`)."""
    from hominem_pipeline.core.builds.attunement import DAYS, DOMAINS, SUMMARY

    cfg = load(config, sets)
    _, ref = artifact_for(cfg, "attunement", date)
    summary = json.loads(ref.file(SUMMARY).read_text())
    cal = summary["calibration"]
    console.print(
        f"[bold]attunement {summary['day']}[/]  window {summary['window'][0]} to {summary['window'][1]}, "
        f"reward model {summary['reward_model']}"
    )
    console.print(f"  people: {_share(cal['people'], 'choices')}")
    console.print(f"  judge:  {_share(cal['judge'], 'pairs')} [dim](beside, never mixed in)[/]")
    days = read_table(ref, DAYS, cfg)
    people = days[days["group"] == "people"].tail(7)
    if len(people):
        console.print(
            "  per day: "
            + ", ".join(
                f"{r.day[5:]} {r.agreement:.0%} of {r.pairs}" + (" (in sample)" if r.in_sample else "")
                for r in people.itertuples()
            )
        )
    domains = read_table(ref, DOMAINS, cfg)
    if len(domains):
        console.print(
            "  per domain: "
            + ", ".join(
                f"{r.domain} {r.agreement:.0%} of {r.pairs}"
                for r in domains.sort_values("pairs", ascending=False).itertuples()
            )
        )
    _print_drift(cfg, ref, summary["drift"])
    _print_clusters(cfg, ref, summary, clusters)


def _print_drift(cfg, ref, drift: dict) -> None:
    """What drifted between the reference and the recent window, or why nothing was tested."""
    from hominem_pipeline.core.builds.attunement import SUMMARY

    console.print(
        f"[bold]drift[/]  reference {drift['reference'][0]} to {drift['reference'][1]}, recent "
        f"{drift['recent'][0]} to {drift['recent'][1]}"
    )
    if drift["drifted"]:
        for d in drift["drifted"][:SHOWN]:
            figure = f"z {d['z']:+.1f}" if "z" in d else f"KS p {d['p_value']:.1g}, PSI {d['psi']:.2f}"
            console.print(f"  [yellow]{escape(d['scope'])}[/]: {escape(d['says'])} [dim]({figure})[/]")
        if len(drift["drifted"]) > SHOWN:
            console.print(f"  ... {len(drift['drifted']) - SHOWN} more in {ref.path / SUMMARY}")
    elif not drift["preference"] and not drift["served"]:
        d = cfg.attunement.drift
        console.print(
            f"  not tested: each window needs {d.min_choices} people's choices ({d.min_served} served "
            "replies for their vectors)"
        )
    else:
        console.print(
            f"  none: {len({d['dimension'] for d in drift['preference']})} preference and "
            f"{len(drift['served'])} served-reply dimensions compared"
        )


def _print_clusters(cfg, ref, summary: dict, clusters: int) -> None:
    """The error clusters the day's model makes on people's pairs, with an example each."""
    from hominem_pipeline.core.builds.attunement import CLUSTERS

    found = read_table(ref, CLUSTERS, cfg)
    live = found[found["status"] != "closed"]
    console.print(
        f"[bold]error clusters[/]  {summary['errors']} of {summary['people_pairs']} people's pairs "
        "ordered against them by the day's model" + (f", {len(live)} clusters" if len(live) else "")
    )
    for row in live.head(clusters).itertuples():
        change = f"{row.status}, was {row.previous_size}" if row.status in ("grew", "shrank", "held") else row.status
        console.print(f"  {escape(f'[{change}]')} {row.size} pairs: {escape(row.name)}")
        example = json.loads(row.examples)[0]
        console.print(
            f"    e.g. {escape(repr(example['prompt'][:90]))}: chose "
            f"{escape(repr(example['chosen'][:60]))} over {escape(repr(example['rejected'][:60]))} "
            f"[dim](P = {example['p_chosen']:.2f})[/]"
        )
    closed = found[found["status"] == "closed"]
    if len(closed):
        console.print(f"  closed since yesterday: {len(closed)} ({escape('; '.join(closed['name'].head(3)))})")
