"""Does the `preference_drift` check catch a rater whose taste changes, name the right dimension, and stay
quiet while the taste holds? The detector is the attunement stage's own (`core/attune/drift.py`, with the
config's `attunement.drift` thresholds and windows); the rater is simulated.

Each day the rater makes `--choices` choices between two replies to one prompt. The replies' reward vectors
come from real labels (`--labels`: a `teacher_labels` parquet of a `make run`; each pair two candidates of
one prompt) or, without one, from a seven-dimensional normal with correlation 0.4. The rater prefers A with
probability sigmoid(sharpness * (taste . (a - b) - length * words gap)); from `--change-day` the taste changes
(`--change`: empathy_to_honesty moves the weight of empathy to epistemic_integrity; shorter makes the rater
prefer shorter replies). Each day the check runs on the windows ending that day, as the asset does.

Reported per seed: the day the check first fires after the change (goal: within 2 days), whether it names
the changed dimension (and its direction), and the false alarms: days the check fires over `--quiet-days`
days of the same taste (goal: none).

    .venv/bin/python benchmarks/drift_detection.py --seeds 0 1 2 3 4 .venv/bin/python benchmarks/drift_detection.py
    --labels data/teacher_labels/<day>/<version>/labels.parquet --change shorter

Limits: the gaps are the labels' (or the normal's), not a trained reward model's, so this measures the
detector and its thresholds, not the reward model; real raters are noisier than one logistic rater.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.attune.drift import LENGTH, preference_drift, windows
from hominem_pipeline.core.config.loader import load_config

START = pd.Timestamp("2026-01-01")


def pool(labels: Path | None, dims: list[str], rng: np.random.Generator, n: int = 4000) -> pd.DataFrame:
    """Candidate pairs: each dimension's value of A and B, and their word counts."""
    if labels is not None:
        frame = pd.read_parquet(labels)
        rows = []
        for _, group in frame.groupby("prompt_id"):
            if len(group) < 2:
                continue
            a, b = group.sample(2, random_state=int(rng.integers(1 << 31))).to_dict("records")
            rows.append(
                {
                    **{
                        f"a_{d}": a["vector"][d] if isinstance(a["vector"], dict) else a["vector"][i]
                        for i, d in enumerate(dims)
                    },
                    **{
                        f"b_{d}": b["vector"][d] if isinstance(b["vector"], dict) else b["vector"][i]
                        for i, d in enumerate(dims)
                    },
                    "a_words": len(str(a["response"]).split()),
                    "b_words": len(str(b["response"]).split()),
                }
            )
        return pd.DataFrame(rows)
    cov = np.full((len(dims), len(dims)), 0.4) + 0.6 * np.eye(len(dims))
    a, b = rng.multivariate_normal(np.zeros(len(dims)), cov, n), rng.multivariate_normal(np.zeros(len(dims)), cov, n)
    out = {f"a_{d}": a[:, i] for i, d in enumerate(dims)} | {f"b_{d}": b[:, i] for i, d in enumerate(dims)}
    return pd.DataFrame(out | {"a_words": rng.integers(10, 120, n), "b_words": rng.integers(10, 120, n)})


def taste(dims: list[str], change: str, changed: bool) -> tuple[np.ndarray, float]:
    w = np.ones(len(dims)) / len(dims)
    length = 0.0
    if changed and change == "empathy_to_honesty":
        w[dims.index("epistemic_integrity")] += w[dims.index("empathy")] * 3
        w[dims.index("empathy")] = -w[dims.index("empathy")] * 2
    if changed and change == "shorter":
        length = 0.15  # per word, before the sharpness: about as much as the taste (50 words shorter is worth 7.5)
    return w, length


def day_choices(
    pairs: pd.DataFrame,
    dims: list[str],
    w: np.ndarray,
    length: float,
    n: int,
    day: str,
    rng: np.random.Generator,
    sharpness: float,
) -> pd.DataFrame:
    take = pairs.iloc[rng.integers(len(pairs), size=n)].reset_index(drop=True)
    gap = np.stack([take[f"a_{d}"] - take[f"b_{d}"] for d in dims], 1)
    words_gap = (take["a_words"] - take["b_words"]).to_numpy(dtype=float)
    p_a = 1 / (1 + np.exp(-sharpness * (gap @ w * len(dims) - length * words_gap)))
    a_wins = rng.random(n) < p_a
    sign = np.where(a_wins, 1.0, -1.0)
    out = {f"gap_{d}": gap[:, i] * sign for i, d in enumerate(dims)}
    chosen_words = np.where(a_wins, take["a_words"], take["b_words"])
    rejected_words = np.where(a_wins, take["b_words"], take["a_words"])
    model = gap @ (np.ones(len(dims)) / len(dims)) * sign  # the model keeps the old taste
    return pd.DataFrame(
        out
        | {
            "chosen_words": chosen_words,
            "rejected_words": rejected_words,
            "correct": model > 0,
            "day": day,
            "rater": "sim",
        }
    )


def run(seed: int, args: argparse.Namespace, dims: list[str], d) -> dict:
    rng = np.random.default_rng(seed)
    pairs = pool(args.labels, dims, rng)
    warmup = d.recent_days + d.reference_days - 1  # days before both windows are full
    change_at = warmup + args.quiet_days
    log = []
    fired_quiet, first, named = 0, None, None
    for i in range(change_at + args.after_days):
        day = (START + pd.Timedelta(days=i)).date().isoformat()
        changed = i >= change_at
        w, length = taste(dims, args.change, changed)
        log.append(day_choices(pairs, dims, w, length, args.choices, day, rng, args.sharpness))
        if i < warmup:
            continue
        every = pd.concat(log, ignore_index=True)
        reference, recent = windows(day, d.recent_days, d.reference_days)
        found = [
            x
            for x in preference_drift(every[every["day"].isin(reference)], every[every["day"].isin(recent)], dims, d)
            if x["drifted"]
        ]
        if not changed and found:
            fired_quiet += 1
        if changed and found and first is None:
            first = i - change_at + 1  # 1: on the day of the change
            named = sorted(
                {f"{x['dimension']} {x['direction']}" for x in found}
                | {n for x in found for n in x.get("suspects", [])}
            )
    return {"seed": seed, "false_alarm_days": fired_quiet, "fired_after_days": first, "named": named}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument(
        "--labels",
        type=Path,
        default=None,
        help="a teacher_labels parquet (its vectors); default: a seven-dimensional normal",
    )
    ap.add_argument("--change", choices=["empathy_to_honesty", "shorter"], default="empathy_to_honesty")
    ap.add_argument("--choices", type=int, default=20, help="choices a day")
    ap.add_argument(
        "--quiet-days",
        type=int,
        default=30,
        help="days of the same taste, once the windows are full, before the change (false alarms are counted on them)",
    )
    ap.add_argument(
        "--grid",
        action="store_true",
        help="also try recent_days 1-3, z 3.0/3.5/4.0 and min_shift 0.10/0.15 beside the config's",
    )
    ap.add_argument("--after-days", type=int, default=5)
    ap.add_argument(
        "--sharpness", type=float, default=3.0, help="how surely the rater follows their taste (logit scale)"
    )
    args = ap.parse_args()
    cfg = load_config()
    dims = cfg.dimension_names
    expect = {"empathy_to_honesty": ("empathy down", "epistemic_integrity up"), "shorter": (f"{LENGTH} down",)}[
        args.change
    ]
    base = cfg.attunement.drift
    settings = [base] + (
        [
            base.model_copy(update={"recent_days": r, "z": z, "min_shift": m})
            for r in (1, 2, 3)
            for z in (3.0, 3.5, 4.0)
            for m in (0.10, 0.15)
        ]
        if args.grid
        else []
    )
    print(
        f"{args.choices} choices a day; change: {args.change}; {len(args.seeds)} seeds; "
        f"{args.quiet_days} quiet days each"
    )
    for i, d in enumerate(settings):
        results = [run(s, args, dims, d) for s in args.seeds]
        caught = [r["fired_after_days"] for r in results if r["fired_after_days"] is not None]
        right = sum(r["named"] is not None and any(e in r["named"] for e in expect) for r in results)
        print(
            f"{'config' if i == 0 else 'grid  '}: recent {d.recent_days} d, reference {d.reference_days} "
            f"d, z {d.z}, shift {d.min_shift}: "
            f"caught within 2 days in {sum(c <= 2 for c in caught)}/{len(results)} seeds (ever: "
            f"{len(caught)}, median day "
            f"{np.median(caught) if caught else float('nan'):.0f}), the right dimension named in "
            f"{right}; false alarm days "
            f"{sum(r['false_alarm_days'] for r in results)} of {len(results) * args.quiet_days}"
        )


if __name__ == "__main__":
    main()
