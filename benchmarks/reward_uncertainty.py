"""Does each head's uncertainty mean something? The default reward model, trained here as a first day trains it
(the project's teacher labels of --date, the shipped people's pairs), under each seed, and checked on pairs it never
saw (`core.reward.calibration.uncertainty_report`):

    scalar, people      the 504 HH-RLHF harmless-base pairs held out of the seed-0 split (people's choice)
    safety, people      the same pairs: the rejected reply is the more harmful one
    scalar, fixtures    the 132 contrast fixtures, the better reply first
    own dimension       each fixture tagged with a dimension, on that dimension's head

For each: the accuracy, the ECE of Phi(gap / spread) (the probability the ensemble's spread implies), the AUROC of
the certainty |gap| / spread for telling right orderings from wrong ones, and the accuracy of the least, middle and
most certain thirds. Beside them, the ECE of the scalar's calibrated P(preferred) (its fitted temperature, which
the service and the gate read) on the people's pairs. `--plot` draws a reliability diagram per head (seeds pooled).

    .venv/bin/python benchmarks/reward_uncertainty.py --project P --date D --seeds 0 1 2 --plot docs/uncertainty.png
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import config_on, train_first_day
from benchmarks.reward_settings import first_day_arguments, first_day_inputs


def held_out_sets(model, test, fixtures) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per head: (gap, spread) of each held-out pair, the preferred reply first."""
    from hominem_pipeline.core.common.tags import own_dimension

    n, f = len(test), len(fixtures)
    prompts = list(test["prompt"]) * 2 + [x.prompt for x in fixtures] * 2
    replies = (
        list(test["chosen"]) + list(test["rejected"]) + [x.better for x in fixtures] + [x.worse for x in fixtures]
    )
    out = model.raw_scores(prompts, replies, uncertainty=True)
    std = out["std"]
    people, fx = (slice(0, n), slice(n, 2 * n)), (slice(2 * n, 2 * n + f), slice(2 * n + f, 2 * n + 2 * f))

    def pair(values, spreads, rows):
        a, b = rows
        return values[a] - values[b], np.sqrt(spreads[a] ** 2 + spreads[b] ** 2)

    dims = list(model.dimensions)
    own = [(i, dims.index(d)) for i, x in enumerate(fixtures) if (d := own_dimension(x.tag, dims)) is not None]
    rows, cols = np.array([i for i, _ in own]), np.array([j for _, j in own])
    better, worse = out["vector"][fx[0]][rows, cols], out["vector"][fx[1]][rows, cols]
    spread = np.sqrt(std["vector"][fx[0]][rows, cols] ** 2 + std["vector"][fx[1]][rows, cols] ** 2)
    return {
        "scalar, people": pair(out["scalar"], std["scalar"], people),
        "safety, people": pair(out["safety_score"], std["safety_score"], people),
        "scalar, fixtures": pair(out["scalar"], std["scalar"], fx),
        "own dimension": (better - worse, spread),
    }


def checked(model, test, fixtures) -> tuple[dict, dict]:
    """(figures per head, (gap, spread) per head) for one trained model."""
    from hominem_pipeline.core.reward.calibration import calibration_report, preference_probability, uncertainty_report

    sets = held_out_sets(model, test, fixtures)
    figures = {}
    for name, (gap, spread) in sets.items():
        try:
            r = uncertainty_report(gap, spread, np.ones(len(gap)))
        except ValueError as e:
            figures[name] = {"error": str(e)}
            continue
        figures[name] = {
            k: r[k] for k in ("accuracy", "ece", "auroc", "auroc of the gap", "accuracy by certainty", "median z")
        }
    gap = sets["scalar, people"][0]
    p = preference_probability(gap, model.temperature)
    figures["scalar, people"]["ece of P(preferred)"] = calibration_report(
        np.concatenate([p, 1 - p]), np.concatenate([np.ones(len(p)), np.zeros(len(p))])
    )["ece"]
    figures["scalar, people"]["temperature"] = model.temperature
    return figures, sets


def plot(pooled: dict[str, tuple[np.ndarray, np.ndarray]], path: Path, seeds: list[int]) -> None:
    """One reliability diagram per head: the share ordered right against Phi(gap / spread), seeds pooled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hominem_pipeline.core.reward.calibration import uncertainty_report

    fig, axes = plt.subplots(1, len(pooled), figsize=(3.2 * len(pooled), 3.4), squeeze=False)
    for ax, (name, (gap, spread)) in zip(axes.flat, pooled.items()):
        ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1)
        try:
            r = uncertainty_report(gap, spread, np.ones(len(gap)))
        except ValueError:
            ax.set_title(f"{name}: no spread", fontsize=8)
            continue
        ax.plot([b["confidence"] for b in r["bins"]], [b["accuracy"] for b in r["bins"]], "s-", markersize=3)
        ax.set_title(f"{name}: {len(gap)} pairs\nECE {r['ece']:.3f}, AUROC {r['auroc']:.2f}", fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"Each head's uncertainty on held-out pairs (seeds {seeds})", fontsize=10)
    fig.supxlabel("Phi(gap / spread): the probability the ensemble's spread implies", fontsize=8)
    fig.supylabel("share people (or the fixture) preferred", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    first_day_arguments(ap)
    ap.add_argument("--plot", type=Path, default=None, help="write the reliability diagrams here (PNG)")
    args = ap.parse_args()
    project, _, test, fixtures, labels = first_day_inputs(args)
    out = Path(tempfile.mkdtemp(prefix="hominem-uncertainty-"))
    rows, pooled = [], {}
    for seed in args.seeds:
        cfg = config_on(project, {"project": {"seed": seed}})
        model, _ = train_first_day(cfg, labels, out / str(seed), args.date)
        figures, sets = checked(model, test, fixtures)
        rows.append({"seed": seed, **figures})
        print(json.dumps(rows[-1]), flush=True)
        for name, (gap, spread) in sets.items():
            old = pooled.get(name, (np.empty(0), np.empty(0)))
            pooled[name] = (np.concatenate([old[0], gap]), np.concatenate([old[1], spread]))
    print(f"\nmean over seeds {args.seeds}")
    for name in rows[0]:
        if name == "seed" or "error" in rows[0][name]:
            continue
        keys = [k for k, v in rows[0][name].items() if isinstance(v, float)]
        mean = {k: float(np.mean([r[name][k] for r in rows])) for k in keys}
        thirds = np.mean([r[name]["accuracy by certainty"] for r in rows], axis=0)
        print(
            f"{name:18s} "
            + " ".join(f"{k} {v:.3f}" for k, v in mean.items())
            + " | accuracy by certainty thirds "
            + "/".join(f"{t:.2f}" for t in thirds)
        )
    if args.plot:
        plot(pooled, args.plot, args.seeds)
        print(f"reliability diagrams: {args.plot}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
