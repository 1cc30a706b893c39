"""Does every dashboard view answer within 2 seconds with 90 days of history, the first
request after a restart included?

The setup:
- A scratch data folder beside a `make run` project (--project): 90 days of synthetic history written as the
  stages write it (a version folder with `manifest.json` per asset and day: attunement with its report and error
  clusters, reward_health_index, evaluation with its replies, reward_model, lora_adapter, probes with its tables),
  several versions on some days, and a live history of promotions, refusals and rollbacks. The project's models
  are linked in.
- `hominem serve` on it, with the project's newest reward model (the Probe view scores typed replies with it).
- Each view's JSON route is asked --requests times (the Probe view's three requests with new text each time); the
  first request of each view after the start is timed on
  its own (a cold cache: every manifest read once). The page itself and the chart library are timed too.

    .venv/bin/python benchmarks/dashboard_latency.py --project /path/to/project [--days 90] [--requests 20]

Prints per view: the first request, the median and the p95, against the 2 s goal.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL = 2.0
DIMS = [
    "empathy",
    "social_coherence",
    "agency_support",
    "epistemic_integrity",
    "harm_avoidance",
    "narrative_alignment",
    "curiosity",
]


def version_folder(
    data: Path, asset: str, day: str, version: str, metrics: dict, inputs: dict, files: dict | None = None
) -> Path:
    """One synthetic version published as a stage publishes its own (`ArtifactStore.publish`): `files` maps each
    file's name to what writes it to a path."""
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

    store = ArtifactStore(data)
    with store.staging(asset, day) as staged:
        for name, write in (files or {}).items():
            write(staged / name)
        manifest = {"metrics": metrics, "inputs": inputs, "metadata": {}, "complete": True}
        return store.publish(staged, asset, day, version, manifest).path


def ref(asset: str, day: str, version: str) -> dict:
    return {"asset": asset, "partition": day, "version": version, "content": version}


def synthesize(data: Path, days: int, seed: int) -> dict:
    """`days` days ending yesterday of every asset the dashboard reads; returns counts."""
    rng = random.Random(seed)
    end = dt.date.today() - dt.timedelta(days=1)
    history, versions = [], 0
    prompts = [f"Held-out prompt number {i} about something that matters to someone." for i in range(18)]
    for k in range(days):
        day = (end - dt.timedelta(days=days - 1 - k)).isoformat()
        for n in range(1 + (k % 7 == 0)):  # a second version every seventh day (a changed setting)
            rm, ad = f"rm{k:03d}{n}".ljust(16, "0"), f"ad{k:03d}{n}".ljust(16, "0")
            version_folder(
                data,
                "reward_model",
                day,
                rm,
                {"fixture_accuracy": 0.9 + rng.random() / 20, "people_agreement": 0.6 + rng.random() / 10},
                {},
            )
            version_folder(
                data, "lora_adapter", day, ad, {"steps": 48}, {"reward_model": [ref("reward_model", day, rm)]}
            )
            generations = pd.DataFrame(
                {
                    "prompt": prompts,
                    "adapter_response": [f"A reply of adapter {ad} to prompt {i}." for i in range(18)],
                    "adapter_scalar": np.random.default_rng(k).uniform(-1, 1, 18),
                }
            )
            version_folder(
                data,
                "evaluation",
                day,
                f"ev{k:03d}{n}".ljust(16, "0"),
                {
                    "win_rate": rng.random(),
                    "people_accuracy": 0.55 + rng.random() / 10,
                    "memory_kept": 19,
                    "memory_lost": rng.randint(0, 1),
                    **{f"delta_{d}": rng.gauss(0, 0.05) for d in DIMS},
                },
                {"lora_adapter": [ref("lora_adapter", day, ad)]},
                {"generations.parquet": generations.to_parquet},
            )
            components = {c: rng.uniform(0.4, 0.95) for c in ("dcs", "gvs", "mss", "cdrs", "lrps")}
            version_folder(
                data,
                "reward_health_index",
                day,
                f"rh{k:03d}{n}".ljust(16, "0"),
                {"rhi": float(np.mean(list(components.values()))), "deployable": 1.0, "partial": 0.0, **components},
                {"lora_adapter": [ref("lora_adapter", day, ad)]},
            )
            bins = [
                {
                    "lo": i / 10,
                    "hi": (i + 1) / 10,
                    "confidence": i / 10 + 0.05,
                    "accuracy": min(1, max(0, i / 10 + rng.gauss(0, 0.05))),
                    "count": 20,
                }
                for i in range(10)
            ]
            report = {
                "agreement": 0.62,
                "stderr": 0.02,
                "ece": 0.04,
                "brier": 0.2,
                "confidence": 0.6,
                "pairs": 200,
                "bins": bins,
            }
            summary = {
                "day": day,
                "reward_model": f"reward_model/{day}/{rm}",
                "window": [day, day],
                "calibration": {"people": report, "judge": report},
                "errors": 40,
                "clusters": 4,
                "people_pairs": 200,
                "drift": {
                    "drifted": [{"scope": "empathy", "says": "people now prefer less empathy", "z": -4.1}]
                    if k % 30 == 29
                    else [],
                    "preference": [],
                    "served": [],
                    "recent": [day, day],
                    "reference": [day, day],
                },
            }
            clusters = pd.DataFrame(
                {
                    "cluster": range(4),
                    "status": ["growing", "new", "shrinking", "continues"],
                    "size": [12, 8, 5, 3],
                    "previous_size": [9, None, 7, 3],
                    "name": [f"cluster {i}" for i in range(4)],
                    "terms": [["advice", "job"]] * 4,
                    "domain": "moral_dilemma",
                    "tag": None,
                    "length_gap": 10.0,
                    "dimension": "empathy",
                    "dimension_gap": 0.1,
                    "examples": [[{"prompt": "p", "chosen": "c", "rejected": "r"}]] * 4,
                    "centroid": [list(np.zeros(384))] * 4,
                }
            )
            version_folder(
                data,
                "attunement",
                day,
                f"at{k:03d}{n}".ljust(16, "0"),
                {
                    "people_agreement": 0.6 + rng.random() / 10,
                    "people_ece": rng.random() / 10,
                    "judge_agreement": 0.9,
                    "judge_ece": 0.05,
                },
                {"reward_model": [ref("reward_model", day, rm)]},
                {
                    "attunement.json": lambda path: path.write_text(json.dumps(summary)),
                    "clusters.parquet": clusters.to_parquet,
                },
            )
            tradeoffs = pd.DataFrame(
                {
                    "id": [f"s{i}" for i in range(12)],
                    "trade": "empathy_vs_honesty",
                    "expected": "a",
                    "choice": [rng.choice("ab") for _ in range(12)],
                    "scalar_gap": [rng.gauss(0, 0.2) for _ in range(12)],
                }
            )
            counterfactuals = pd.DataFrame(
                {
                    "id": [f"c{i}" for i in range(12)],
                    "dimension": "empathy",
                    "direction": "up",
                    "moved": [rng.gauss(0, 0.1) for _ in range(12)],
                }
            )
            version_folder(
                data,
                "probes",
                day,
                f"pr{k:03d}{n}".ljust(16, "0"),
                {
                    "probe_tradeoffs_as_expected": rng.random(),
                    "probe_adversarial_max_flip_rate": rng.random() / 5,
                    "probe_counterfactual_right_way": rng.random(),
                },
                {"reward_model": [ref("reward_model", day, rm)]},
                {"tradeoffs.parquet": tradeoffs.to_parquet, "counterfactuals.parquet": counterfactuals.to_parquet},
            )
            versions += 7
            history.append(
                {
                    "time": f"{day}T05:0{n}:00+00:00",
                    "action": rng.choice(["promote", "refuse", "refuse"]),
                    "version": ad,
                    "reason": "the daily job's adapter",
                }
            )
            if k % 20 == 19:
                history.append(
                    {"time": f"{day}T09:00:00+00:00", "action": "rollback", "version": None, "reason": "RHI fell"}
                )
    (data / "live").mkdir(parents=True, exist_ok=True)
    (data / "live" / "history.json").write_text(json.dumps(history))
    return {"days": days, "versions": versions, "live_events": len(history)}


def probe_body(i: int) -> dict:
    return {"prompt": reply_body(i)["prompt"], "replies": [reply_body(i)["reply"], "Try harder."]}


def reply_body(i: int) -> dict:
    """A typed reply of about 25 words, new for each `i`."""
    return {
        "prompt": f"I failed my driving test again, for the {i + 2}th time.",
        "changes": ["typos", "paraphrase", "insertion", "reorder"],
        "reply": f"That sounds really discouraging after {i + 2} tries. Lots of people need several attempts; "
        "what went wrong this time, and what felt better than before?",
    }


def timed(client, method: str, url: str, **kw) -> float:
    started = time.perf_counter()
    response = client.request(method, url, timeout=120, **kw)
    response.raise_for_status()
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--project",
        type=Path,
        required=True,
        help="a `make run` project (its models and newest reward model are used)",
    )
    ap.add_argument("--days", type=int, default=90)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("/tmp/hominem-dashboard-latency"))
    args = ap.parse_args()

    import httpx2 as httpx

    from hominem_pipeline.testing.service import start_serve, stop_serve

    project = args.project.resolve()
    if args.out.exists():
        shutil.rmtree(args.out)
    data = args.out / "data"
    data.mkdir(parents=True)
    (data / "models").symlink_to(project / "data" / "models")
    made = synthesize(data, args.days, 0)
    from benchmarks.common import newest, project_config

    rm = newest(project_config(project), "reward_model").path
    overlay = args.out / "overlay.yaml"
    overlay.write_text(json.dumps({"project": {"data_dir": str(data)}}))
    print(
        f"{made['days']} days, {made['versions']} versions, {made['live_events']} live events in {data}; "
        f"reward model {rm}",
        flush=True,
    )
    views = {
        "page": ("GET", "/dashboard", {}),
        "chart library": ("GET", "/static/vendor/uPlot.iife.min.js", {}),
        "timeline": ("GET", "/dashboard/api/timeline", {}),
        "calibration": ("GET", "/dashboard/api/calibration", {}),
        "drift": ("GET", "/dashboard/api/drift", {}),
        "health": ("GET", "/dashboard/api/health", {}),
        "options": ("GET", "/dashboard/api/options", {}),
    }
    # this checkout's config with the scratch data folder (the project lends its models and reward model)
    proc, url, startup = start_serve(
        ["--config", str(overlay), "--adapter", "none", "--reward-model", str(rm)],
        ROOT,
        env={"HOMINEM_HOME": str(ROOT)},
    )
    try:
        with httpx.Client() as client:
            options = client.get(url + "/dashboard/api/options", timeout=120).json()
            first = {}
            # the first request of each view after the restart (the options call above warmed only its own manifests)
            rms, ads = options["reward_models"], options["adapters"]
            views["compare reward models"] = (
                "GET",
                "/dashboard/api/compare",
                {"params": {"kind": "reward_models", "a": rms[-2]["label"], "b": rms[-1]["label"]}},
            )
            views["compare adapters"] = (
                "GET",
                "/dashboard/api/compare",
                {"params": {"kind": "adapters", "a": ads[0]["label"], "b": ads[-1]["label"]}},
            )
            # both adapters' replies scored on the served reward model (the Compare view asks 2 prompts a request)
            views["compare: one scale"] = (
                "GET",
                "/dashboard/api/compare/score",
                {"params": {"a": ads[0]["label"], "b": ads[-1]["label"]}},
            )
            # the Probe view's three requests (the page draws each as it arrives); the attribution once per reply, here
            # the longer
            views["probe: scores"] = ("POST", "/dashboard/api/probe", {"json": probe_body(0)})
            views["probe: attribution"] = ("POST", "/dashboard/api/probe/attribution", {"json": reply_body(0)})
            views["probe: rewrites"] = (
                "POST",
                "/dashboard/api/probe/rewrites",
                {"json": reply_body(0)},
            )  # the four of the reply (the frames: a second, smaller request)
            for name, (method, path, kw) in views.items():
                first[name] = timed(client, method, url + path, **kw)
            rows = []
            for name, (method, path, kw) in views.items():
                if name.startswith(
                    "probe"
                ):  # typed text is new each time: the same words again would be read from caches
                    kws = [
                        {"json": (probe_body if name == "probe: scores" else reply_body)(i + 1)}
                        for i in range(args.requests)
                    ]
                elif (
                    name == "compare: one scale"
                ):  # two other adapters each time: replies the reward model has not read
                    kws = [
                        {
                            "params": {
                                "a": ads[(2 * i + 1) % len(ads)]["label"],
                                "b": ads[(2 * i + 2) % len(ads)]["label"],
                            }
                        }
                        for i in range(args.requests)
                    ]
                else:
                    kws = [kw] * args.requests
                times = [timed(client, method, url + path, **k) for k in kws]
                rows.append((name, first[name], float(np.median(times)), float(np.percentile(times, 95))))
    finally:
        stop_serve(proc)
    print(f"hominem serve answered /healthz after {startup:.1f} s; {args.requests} requests per view after the first")
    print(f"{'view':24s} {'first':>8s} {'median':>8s} {'p95':>8s}  goal {GOAL:.0f} s")
    for name, f, med, p95 in rows:
        print(f"{name:24s} {f:8.3f} {med:8.3f} {p95:8.3f}  {'ok' if max(f, p95) < GOAL else 'OVER'}")
    worst = max(rows, key=lambda r: max(r[1], r[3]))
    print(f"slowest: {worst[0]} ({max(worst[1], worst[3]):.3f} s, {max(worst[1], worst[3]) / GOAL:.2f} of the goal)")


if __name__ == "__main__":
    main()
