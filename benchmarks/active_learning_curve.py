"""How many people's answers does the reward model need when the service chooses what to ask by expected
information (`GET /feedback/next`, `attunement.selection`), against asking at random?

By default, in-process (`active_learning_sim.py`): the picker's posterior (`core.attune.posterior`) and the
project's people's score as the learner, on HH-RLHF's labels and on consistent simulated raters at three noise
levels, several seeds, with the paired standard error:

    .venv/bin/python benchmarks/active_learning_curve.py --project /path/to/project --seeds 0 1 2 3 4

With `--through-service`, end to end through `hominem serve` and the pipeline, as follows.

The setup:
- The question pool is the 1,800 HH-RLHF pairs of the seed-0 split's training part, imported with
  `hominem data import-questions` (labels dropped).
- The reward model is judged on the 504 held-out pairs after them (`student_people_agreement.held_out_test`).
  It is the project's default with one difference: the shipped HH-RLHF pairs are left out of its people's
  pairs, so what it knows of these people comes from the answers alone. The hand-written contrast pairs stay.
- The two arms differ only in `attunement.selection.random_share`: 0 (pure information gain) or 1 (at random).
  Other arms (`--arms`): `boosted` asks as the information arm and also weighs each answer up in the retrain by its
  value when asked (`attunement.selection.retrain_boost`, `--boost`); `disagreement` and `novelty` ask by that part
  of the expected information alone; `uncertain` and `calm` are two explicit mixes, uncertainty first and coverage
  first (`ARMS` below). All ask through the same service, the imported questions alone (`teacher_candidates: false`:
  the rater knows only the HH-RLHF labels).
- In each round, a simulated rater answers `--per-round` questions through `hominem serve` with the human
  label, as choices. Then `hominem run --select human_feedback,reward_model` retrains the reward model on
  every answer so far, through the pipeline, and the server restarts on it.
- Each arm and seed has its own scratch data folder. The day's prompts, candidates and labels are copied
  into it; the models and the feature cache are linked.

The figure: the fewest answers with which the information arm reaches the random arm's final agreement, in
each seed. Goal: at most half the random arm's. Also plotted: agreement against answers, both arms, every seed.

    .venv/bin/python benchmarks/active_learning_curve.py --project /path/to/project --seeds 0 1 --rounds 6
    --per-round 30

Needs a `make run` project with today's (UTC) teacher labels. If the day turns during the run, the next
day's labels are built first. Writes only under --out (default /tmp/hominem-active-learning).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks.active_learning_sim import NOISE, answers_to_reach, simulate, summarise
from benchmarks.active_learning_sim import plot as plot_in_process
from benchmarks.common import scratch_data

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"
POOL_FILE = "config/human/hh-rlhf-harmless-1800.jsonl.gz"
COPIED = ("prompts", "teacher_trajectories", "teacher_labels")
# each arm's attunement.selection keys beside teacher_candidates false (the rater knows only the imported pairs'
# labels)
ARMS = {
    "random": {"random_share": 1.0},
    "information": {"random_share": 0.0},  # the shipped method (attunement.selection.method)
    "parts": {"random_share": 0.0, "method": "parts"},  # the shipped weights (attunement.selection.weights)
    "boosted": {"random_share": 0.0, "retrain_boost": None},  # None: --boost
    "disagreement": {
        "random_share": 0.0,
        "method": "parts",
        "weights": {"uncertainty": 0.0, "disagreement": 1.0, "cluster": 0.0, "novelty": 0.0},
    },  # query by committee
    "novelty": {
        "random_share": 0.0,
        "method": "parts",
        "weights": {"uncertainty": 0.0, "disagreement": 0.0, "cluster": 0.0, "novelty": 1.0},
    },  # coverage alone
    # uncertainty first (the weights shipped before the calm ones were measured against them)
    "uncertain": {
        "random_share": 0.0,
        "method": "parts",
        "weights": {"uncertainty": 1.0, "disagreement": 1.0, "cluster": 0.5, "novelty": 0.5},
    },
    # less on the calibrated uncertainty (with noisy labels the least-sure pairs are often those people disagree on),
    # more on coverage
    "calm": {
        "random_share": 0.0,
        "method": "parts",
        "weights": {"uncertainty": 0.25, "disagreement": 1.0, "cluster": 0.5, "novelty": 1.0},
    },
}
COLOURS = {
    "random": "tab:grey",
    "parts": "tab:olive",
    "information": "tab:blue",
    "boosted": "tab:orange",
    "disagreement": "tab:green",
    "novelty": "tab:purple",
    "uncertain": "tab:brown",
    "calm": "tab:red",
}


def hominem(project: Path, *args: str, timeout: int = 3600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOMINEM_HOME": str(project)}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "hominem"), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        sys.exit(f"hominem {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def today() -> str:
    return dt.datetime.now(dt.timezone.utc).date().isoformat()


def scratch(project: Path, out: Path, arm: str, seed: int, day: str, boost: float = 0.0) -> Path:
    """A scratch data folder for one arm and seed, and its overlay (returned)."""
    if (out / f"{arm}-{seed}").exists():
        shutil.rmtree(out / f"{arm}-{seed}")  # its overlay and runs too
    data = scratch_data(project, out / f"{arm}-{seed}" / "data", day, COPIED)
    selection = {"teacher_candidates": False, "retrain_boost": 0.0, **ARMS[arm]}
    if selection["retrain_boost"] is None:
        selection["retrain_boost"] = boost
    overlay = {
        "project": {"data_dir": str(data)},
        "reward_model": {"people_pairs": [{"file": "config/human/hominem-contrast-pairs.jsonl", "format": "jsonl"}]},
        "attunement": {"selection": selection},
    }
    path = data.parent / "overlay.yaml"
    path.write_text(json.dumps(overlay))  # JSON is YAML
    return path


def ensure_labels(project: Path, overlay: Path, data: Path, day: str) -> None:
    """The log's day needs its teacher labels (the day turned during the run): build them once, copy them in."""
    if (data / "teacher_labels" / day).exists():
        return
    if not (project / "data" / "teacher_labels" / day).exists():
        print(f"  the day turned: building {day}'s teacher labels in {project}", flush=True)
        hominem(project, "run", "--date", day, "--select", ",".join(COPIED))
    for asset in COPIED:
        shutil.copytree(project / "data" / asset / day, data / asset / day, symlinks=True)


def agreement(cfg, held_out) -> float:
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline.core.reward.model import project_reward_model

    ref, _ = lineage(cfg).newest("reward_model")
    model = project_reward_model(ref.path, cfg)
    gaps = model.pair_gaps(list(held_out["prompt"]), list(held_out["chosen"]), list(held_out["rejected"]))
    return float((gaps > 0).mean())


def run_arm(
    project: Path, out: Path, arm: str, seed: int, args, labels: dict[str, str], held_out
) -> list[tuple[int, float]]:
    import httpx2 as httpx

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.testing.service import start_serve, stop_serve

    day = today()
    overlay = scratch(project, out, arm, seed, day, args.boost)
    data = overlay.parent / "data"
    hominem(
        project, "data", "import-questions", str(project / POOL_FILE), "--format", "hh-rlhf", "--config", str(overlay)
    )
    curve, answered = [], 0
    for round_ in range(args.rounds + 1):
        day = today()
        ensure_labels(project, overlay, data, day)
        started = time.monotonic()
        hominem(project, "run", "--config", str(overlay), "--date", day, "--select", "human_feedback,reward_model")
        cfg = load_config(overlay, root=project)
        curve.append((answered, agreement(cfg, held_out)))
        print(
            f"  {arm} seed {seed}: {answered} answers -> {curve[-1][1]:.1%} on {len(held_out)} held-out pairs "
            f"(retrain and measure {time.monotonic() - started:.0f} s)",
            flush=True,
        )
        if round_ == args.rounds:
            break
        proc, url, _ = start_serve(
            ["--config", str(overlay), "--adapter", "none", "--reward-model", "latest"],
            project,
            env={"HOMINEM_HOME": str(project)},
        )
        try:
            for _ in range(args.per_round):
                nxt = httpx.get(f"{url}/feedback/next", timeout=600).json()
                q = nxt["question"]
                if q is None:
                    break
                if q["id"] not in labels:
                    sys.exit(
                        f"the service asked {q['id']} ({q['source']}), not one of {POOL_FILE}'s "
                        "questions: the scratch pool has more than the import"
                    )
                chosen_text = labels[q["id"]]
                chosen, rejected = (q["a"], q["b"]) if q["a"]["text"] == chosen_text else (q["b"], q["a"])
                posted = httpx.post(
                    f"{url}/feedback",
                    json={
                        "kind": "choice",
                        "chosen": chosen["turn"],
                        "rejected": rejected["turn"],
                        "strength": "clear",
                    },
                    timeout=60,
                )
                posted.raise_for_status()
                answered += 1
        finally:
            stop_serve(proc)
    return curve


def warm(project: Path, questions: list, held_out) -> None:
    """What the frozen networks compute for every question of the pool and the held-out pairs, into the
    project's feature cache (shared by every arm): one pass here, so that the service's picks and the
    retrains read features instead of the student. Any reward model built under this config reads the same."""
    from benchmarks.common import newest, project_config
    from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES
    from hominem_pipeline.core.reward.model import RewardModel

    model = RewardModel.load(newest(project_config(project), "reward_model").path)
    model.use_feature_cache(project / "data" / FEATURE_CACHE, project / SHIPPED_FEATURES)
    started, chunk = time.monotonic(), 100
    for i in range(0, len(questions), chunk):
        part = questions[i : i + chunk]
        prompts = [q.prompt for q in part]
        model.raw_scores(prompts + prompts, [q.a for q in part] + [q.b for q in part])
        print(
            f"  warming the feature cache: {i + len(part)}/{len(questions)} questions, "
            f"{time.monotonic() - started:.0f} s",
            flush=True,
        )
    model.raw_scores(list(held_out["prompt"]) * 2, list(held_out["chosen"]) + list(held_out["rejected"]))


def needed(curve: list[tuple[int, float]], target: float) -> int | None:
    return next((n for n, a in curve if a >= target), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, required=True, help="a `make run` project with today's teacher labels")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1],
        help="runs (each arm once per run: the service's picks are not seeded)",
    )
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per-round", type=int, default=30)
    ap.add_argument("--arms", nargs="+", default=["random", "information"], choices=list(ARMS))
    ap.add_argument("--boost", type=float, default=1.0, help="attunement.selection.retrain_boost of the boosted arm")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the curves already in --out (curves.json; in-process: in_process.json, summarised again)",
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/hominem-active-learning"))
    ap.add_argument("--through-service", action="store_true", help="the end-to-end arms through the service")
    ap.add_argument("--raters", nargs="+", default=["hh", *NOISE], choices=["hh", *NOISE], help="in-process raters")
    ap.add_argument(
        "--picks",
        nargs="+",
        default=["random", "random-again", "bald", "epig", "uncertainty", "disagreement"],
        help="in-process arms",
    )
    ap.add_argument("--checkpoints", type=int, nargs="+", default=[10, 20, 40, 60, 100, 150, 200, 300])
    args = ap.parse_args()

    from student_people_agreement import held_out_test

    if not args.through_service:
        in_process(args, held_out_test(args.data, 504))
        return

    from hominem_pipeline.core.attune.questions import make
    from hominem_pipeline.core.human.preferences import parse_preference_file

    project = args.project.resolve()
    pool = parse_preference_file(project / POOL_FILE, "hh-rlhf", POOL_FILE).pairs
    labels = {
        make(r.prompt, r.chosen, r.rejected, "hh").id: r.chosen for r in pool.itertuples()
    }  # the id the imported question has
    held_out = held_out_test(args.data, 504)
    print(
        f"pool {len(pool)} questions, {len(held_out)} held-out pairs; {args.rounds} rounds of "
        f"{args.per_round} answers; seeds {args.seeds}",
        flush=True,
    )
    warm(project, [make(r.prompt, r.chosen, r.rejected, "hh") for r in pool.itertuples()], held_out)
    saved = args.out / "curves.json"
    curves = {}
    if args.resume and saved.exists():
        curves = {
            (k.rsplit("-", 1)[0], int(k.rsplit("-", 1)[1])): [tuple(p) for p in c]
            for k, c in json.loads(saved.read_text()).items()
        }
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for arm in args.arms:
            if (arm, seed) not in curves:
                curves[(arm, seed)] = run_arm(project, args.out, arm, seed, args, labels, held_out)
                saved.write_text(json.dumps({f"{a}-{s}": c for (a, s), c in curves.items()}))
    report(curves, args.seeds)
    plot(curves, args.out / "active_learning_curve.png")
    print(f"plot: {args.out / 'active_learning_curve.png'}")


def in_process(args, held_out) -> None:
    """The picker in-process on every rater: curves, the answers each arm needs against random, the plot."""
    from benchmarks.common import config_on
    from hominem_pipeline.core.human.preferences import parse_preference_file

    project = args.project.resolve()
    saved = args.out / "in_process.json"
    if args.resume and saved.exists():  # the curves of an earlier run: summarised and plotted again
        curves = {
            tuple(k.split("/")): [tuple(p) for p in c] for k, c in json.loads(saved.read_text())["curves"].items()
        }
        curves = {(r, a, int(s)): c for (r, a, s), c in curves.items()}
    else:
        pool = parse_preference_file(project / POOL_FILE, "hh-rlhf", POOL_FILE).pairs.reset_index(drop=True)
        curves = simulate(config_on(project), pool, held_out, args.raters, args.picks, args.seeds, args.checkpoints)
    summary = summarise(curves, args.raters, args.picks, args.seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    saved.write_text(
        json.dumps(
            {
                "curves": {"/".join(map(str, k)): c for k, c in curves.items()},
                "summary": {"/".join(k): v for k, v in summary.items()},
            },
            indent=1,
        )
    )
    plot_in_process(curves, args.raters, args.picks, args.seeds, args.out / "active_learning_raters.png")
    print(f"plot: {args.out / 'active_learning_raters.png'}; figures: {args.out / 'in_process.json'}")


def report(curves: dict, seeds: list[int]) -> None:
    """Per seed, the answers each arm needs to reach the random arm's final agreement, and their mean ratio."""
    for arm in [a for a in ARMS if a != "random"]:
        ratios = []
        for seed in seeds:
            if ("random", seed) not in curves or (arm, seed) not in curves:
                continue
            target = curves[("random", seed)][-1][1]
            mine, rand = needed(curves[(arm, seed)], target), needed(curves[("random", seed)], target)
            ratios.append(None if mine is None or not rand else mine / rand)
            most = curves[(arm, seed)][-1][0]
            print(
                f"run {seed}: random reaches {target:.1%} with {rand} answers; {arm} with "
                f"{mine if mine is not None else f'more than {most}'}"
            )
        kept = [r for r in ratios if r is not None]
        if ratios:
            print(
                f"{arm} needs {np.mean(kept):.2f} of the random arm's answers (mean over {len(kept)} of "
                f"{len(ratios)} seeds; goal <= 0.5)"
                if kept
                else f"{arm} did not reach the random arm's final agreement in any seed"
            )
    # the same on the seeds' mean curves (less noisy than one seed's final point), crossings interpolated
    means = {arm: mean_curve(curves, arm, seeds) for arm in ARMS}
    if means["random"]:
        n_final, target = means["random"][-1]

        def reached(arm: str) -> str:
            at = answers_to_reach(means[arm], target)
            return f"{arm} at {at:.0f} ({at / n_final:.2f} of it)" if at else f"{arm} at more than {means[arm][-1][0]}"

        others = [reached(arm) for arm in ARMS if arm != "random" and means[arm]]
        print(f"mean over seeds: random reaches {target:.1%} at {n_final} answers; " + "; ".join(others))


def mean_curve(curves: dict, arm: str, seeds: list[int]) -> list[tuple[int, float]]:
    """(answers, agreement averaged over the seeds that have the arm) at the answer counts all of them reached."""
    runs = [dict(curves[(arm, s)]) for s in seeds if (arm, s) in curves]
    if not runs:
        return []
    shared = sorted(set.intersection(*(set(r) for r in runs)))
    return [(n, float(np.mean([r[n] for r in runs]))) for n in shared]


def plot(curves: dict, path: Path) -> None:
    """Agreement against answers: each seed thin, the seeds' mean thick, one colour per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted({s for _, s in curves})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm in ARMS:
        for seed in seeds:
            if (arm, seed) in curves:
                n, a = zip(*curves[(arm, seed)])
                ax.plot(n, a, "--" if arm == "random" else "-", color=COLOURS[arm], alpha=0.3, linewidth=1)
        mean = mean_curve(curves, arm, seeds)
        if mean:
            n, a = zip(*mean)
            ax.plot(
                n,
                a,
                "--" if arm == "random" else "-",
                marker="o",
                color=COLOURS[arm],
                linewidth=2.5,
                label=f"{arm} (mean of {sum((arm, s) in curves for s in seeds)} runs)",
            )
    ax.set_xlabel("people's answers")
    ax.set_ylabel("agreement on 504 held-out HH-RLHF pairs")
    ax.set_title("questions chosen by expected information against at random")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
