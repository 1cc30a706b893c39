"""`hominem probe --suite`: the probing suite's summary for one reward model."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from hominem_pipeline.cli.common import ConfigOpt, SetOpt, app, artifact_for, console, err, fail, load

SHOWN = 4  # items listed per line


def _reward_model(cfg, which: str | None, date: str | None) -> Path:
    """A reward model folder from --reward-model: a folder, a version id under data/reward_model, or the newest
    built (None, `latest`)."""
    if which in (None, "latest"):
        return artifact_for(cfg, "reward_model", date)[1].path
    path = Path(which)
    if path.is_dir():
        return path
    found = sorted((cfg.data_dir / "reward_model").glob(f"*/{which}"))
    if not found:
        fail(
            f"--reward-model {which}: neither a folder nor a version under {cfg.data_dir / 'reward_model'}; "
            "give a data/reward_model/<date>/<version> folder, its version id, or latest"
        )
    return found[-1]


def _built(cfg, rm: Path) -> Path | None:
    """The folder of a `probes` version built on this reward model (its day's), if any."""
    for manifest in sorted((cfg.data_dir / "probes" / rm.parent.name).glob("*/manifest.json"), reverse=True):
        m = json.loads(manifest.read_text())
        if m.get("complete", True) and any(
            i["version"] == rm.name and i["partition"] == rm.parent.name
            for i in m.get("inputs", {}).get("reward_model", [])
        ):
            return manifest.parent
    return None


def _few(items: list[str]) -> str:
    return ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def print_summary(s: dict[str, Any], folder: Path) -> None:
    console.print(
        f"[bold]probing suite[/]  reward model {s['reward_model']}"
        + (f", against {s['previous']}" if s.get("previous") else "")
    )
    if t := s.get("tradeoffs"):
        per = ", ".join(f"{k} {v['as_expected']}/{v['scenarios']}" for k, v in t["per_trade"].items())
        line = (
            f"  trade-offs: {t['as_expected']}/{t['scenarios']} chosen as written ({per}); each dimension on "
            f"its side in {t['dimensions_as_expected']}"
        )
        console.print(escape(line))
        if t["missed"]:
            console.print(escape(f"    missed: {_few(t['missed'])}"), style="yellow")
        if t["regressions"]:
            console.print(escape(f"    regressions against {s['previous']}: {_few(t['regressions'])}"), style="red")
    if a := s.get("adversarial"):
        per = ", ".join(
            f"{k} {v['flip_rate']:.0%} (|shift| {v['mean_shift']:.3f})"
            for k, v in a["per"].items()
            if v["flip_rate"] is not None
        )
        console.print(escape(f"  adversarial, {a['pairs']} contrast pairs, share flipped: {per}"))
    if c := s.get("counterfactuals"):
        per = ", ".join(f"{k} {v['right_way']}/{v['queries']} ({v['dimension']})" for k, v in c["per_change"].items())
        console.print(
            escape(
                f"  counterfactuals: {c['right_way']}/{c['queries']} moved the named dimension the right "
                f"way, {c['largest']} of them most: {per}"
            )
        )
        if c["missed"]:
            console.print(escape(f"    missed: {_few(c['missed'])}"), style="yellow")
    if at := s.get("attribution"):
        console.print(
            escape(
                f"  attribution ({at['method']}, {at['words']} words a span) of "
                f"{', '.join(at['examples'])}: {folder / 'attribution.html'}"
            )
        )
    if m := s.get("map"):
        corr = ", ".join(f"{r['a']}~{r['b']} {r['r']:+.2f}" for r in m["strongest_correlations"])
        console.print(
            escape(
                f"  manifold: {m['replies']} replies, PC1 {m['explained'][0]:.0%} of the variance"
                + (f", PC2 {m['explained'][1]:.0%}" if len(m["explained"]) > 1 else "")
                + f"; most correlated: {corr}"
            )
        )
    if k := s.get("collisions"):
        pairs = [f"{p['a']} vs {p['b']} {p['gda']:+.2f}" for p in k["pairs"]]
        console.print(
            escape(
                f"  collisions: {len(pairs)} pairs of dimensions with opposed gradients on "
                f"{k['replies']} replies (DCS {k['dcs']:.3f})" + (f": {_few(pairs)}" if pairs else "")
            )
        )
    console.print(f"[dim]files: {folder}[/]")


@app.command("probe")
def probe(
    suite: Annotated[
        bool, typer.Option("--suite", help="Run (or read) the whole probing suite and print its summary.")
    ] = False,
    reward_model: Annotated[
        Optional[str],
        typer.Option("--reward-model", "-m", help="A reward model folder, its version id, or latest (default)."),
    ] = None,
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: Annotated[Optional[str], typer.Option("--date", "-d", help="With latest: that day's reward model.")] = None,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out", "-o", help="Folder for the results when the suite runs here (default: a new temporary folder)."
        ),
    ] = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh", help="Run the suite here even when the `probes` asset holds it for this reward model."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """The probing suite on a reward model: trade-off scenarios (against the version before), adversarial
    consistency, counterfactual queries, attribution, and the manifold's shape (PCA, correlations, reward
    collisions). Read from the day's `probes` asset when it was built on this reward model, else run here
    (a minute or two on a CPU). For one prompt and a few replies, see `hominem reward-probe`."""
    from hominem_pipeline.core.evaluation.suite import SUMMARY, run_suite

    if not suite:
        fail("give --suite (the probing suite); for one prompt and its replies use `hominem reward-probe`")
    cfg = load(config, sets)
    rm = _reward_model(cfg, reward_model, date)
    folder = None if fresh else _built(cfg, rm)
    if folder is not None:
        summary = json.loads((folder / SUMMARY).read_text())
        err.print(f"[dim]read from the probes asset: {folder}[/]")
    else:
        from hominem_pipeline.core.pipeline.artifacts import data_label
        from hominem_pipeline.core.reward.model import project_reward_model

        folder = out or Path(tempfile.mkdtemp(prefix="hominem-probe-"))
        err.print(f"[dim]running the probing suite on {rm} into {folder} ...[/]")
        try:
            summary = run_suite(
                project_reward_model(rm, cfg), cfg, cfg.project.seed, folder, label=data_label(cfg.data_dir, rm)
            )
        except (FileNotFoundError, ValueError) as exc:
            fail(str(exc))
    if as_json:
        console.print_json(json.dumps(summary, default=float))
        return
    print_summary(summary, folder)
