"""Which two of a pool of served replies should a person who has a taste be shown, so that their choice can show it?

For each message, `serving.pair_pool` replies are what the service writes for a pair once a person has a taste model:
half at the served temperature, half warmer (`routes/feedback.py`). Here 8 are sampled per message from the daily
adapter as the server samples (`sample_as_served`, `--max-tokens` long, cut at a sentence as the page shows them),
4 of each, and split into two pools of 2 + 2.

A simulated person has one taste of `core.evaluation.tastes` (`--taste`). Their taste model (`core/attune/personal.py`,
over the reward model's outputs and the text features) is fitted on `--choices` choices they made on pools of the
other half of the messages (a reply keeping the taste over one that does not, drawn at random, `--repeats` times);
on each pool of this half, each picker shows two replies, and the pool counts when exactly one keeps the taste (the
person can choose; else they skip). Pickers:

- as sampled: the first two at the served temperature (no pool);
- most telling: the pair whose answer tells the taste model most (BALD, `posterior.bald`);
- surest: the pair it orders most surely (`PersonalModel.surest`, what the service shows);
- any: whether the pool holds such a pair at all (the ceiling).

Printed: the share of pools per picker, its standard error over pools, and surest - most telling, paired by pool.

    .venv/bin/python benchmarks/pair_picker.py --project P [--adapter A] [--pools FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import config_on, daily_adapter  # noqa: E402
from benchmarks.taste_test import seed_prompts  # noqa: E402
from hominem_pipeline.core.evaluation.tastes import TASTES  # noqa: E402

PICKERS = ("as sampled", "most telling", "surest", "any")


def sample_pools(project: Path, adapter: Path, messages: list[str], max_tokens: int) -> list[dict[str, Any]]:
    """Per message: 4 replies at the served temperature, then 4 warmer (1.5 x, as the service's pool), as shown."""
    from hominem_pipeline.core.lm.generation import end_at_sentence
    from hominem_pipeline.core.online.updates.batch import sample_as_served

    served = config_on(project).serving.temperature
    pools = [{"message": m, "replies": []} for m in messages]
    for temperature in (served, min(2.0, 1.5 * served)):
        cfg = config_on(project, {"serving": {"temperature": temperature}})
        drawn = sample_as_served(cfg, adapter, messages, 4, 500, max_new_tokens=max_tokens, batch_size=32)
        for pool, replies in zip(pools, drawn):
            pool["replies"] += [r.text if r.finished else end_at_sentence(r.text) for r in replies]
        print(f"sampled {len(messages)} x 4 at temperature {temperature:g}", flush=True)
    return pools


def shown_pairs(model: Any, rows: np.ndarray) -> dict[str, tuple[int, int]]:
    from hominem_pipeline.core.attune.posterior import bald

    pairs = [(i, j) for i in range(len(rows)) for j in range(i + 1, len(rows))]
    diffs = (rows[[i for i, _ in pairs]] - rows[[j for _, j in pairs]]) / model.spread
    best, worst, _ = model.surest(rows)
    return {"most telling": pairs[int(np.argmax(bald(model.posterior, diffs)))], "surest": (best, worst)}


def measure(pools: list[dict[str, Any]], reward_model: Any, taste_name: str, args: argparse.Namespace) -> dict:
    from hominem_pipeline.core.attune.personal import PersonalModel, distinct_replies, reply_features

    taste = TASTES[taste_name]
    texts = [r for p in pools for r in p["replies"]]
    names, feats = reply_features(reward_model, [p["message"] for p in pools for _ in p["replies"]], texts)
    keeps = np.array([taste.keeps(t) for t in texts])
    # two pools per message: replies 0, 1 (served) + 4, 5 (warmer); 2, 3 + 6, 7
    split, start = [], 0
    for m, p in enumerate(pools):
        i = list(range(start, start + len(p["replies"])))
        start += len(p["replies"])
        split += [(m, [i[0], i[1], i[4], i[5]]), (m, [i[2], i[3], i[6], i[7]])]
    rng, half = np.random.default_rng(0), len(pools) // 2
    out: dict[str, Any] = {"keep_rate": float(keeps.mean()), "replies": len(texts), "by_choices": {}}
    for k in args.choices:
        per_pool: dict[str, list[float]] = {name: [] for name in PICKERS}
        for fold in (range(half), range(half, len(pools))):
            taught = set(fold)
            can = [(a, b) for m, idx in split if m in taught for a in idx for b in idx if keeps[a] and not keeps[b]]
            judged = [
                (m, idx) for m, idx in split if m not in taught and len(distinct_replies([texts[i] for i in idx])) >= 2
            ]
            hits = {name: np.zeros(len(judged)) for name in PICKERS}
            for _ in range(args.repeats):
                drawn = [can[i] for i in rng.choice(len(can), size=min(k, len(can)), replace=False)]
                model = PersonalModel.fit(names, feats[[a for a, _ in drawn]], feats[[b for _, b in drawn]])
                for n, (_, idx) in enumerate(judged):
                    kept = [idx[i] for i in distinct_replies([texts[i] for i in idx])]
                    shown = shown_pairs(model, feats[kept]) | {"as sampled": None}
                    for name, pair in shown.items():
                        a, b = (idx[0], idx[1]) if pair is None else (kept[pair[0]], kept[pair[1]])
                        hits[name][n] += (keeps[a] != keeps[b]) / args.repeats
                    hits["any"][n] += any(keeps[a] != keeps[b] for a in kept for b in kept) / args.repeats
            for name in PICKERS:
                per_pool[name] += hits[name].tolist()
        row = {name: _mean_se(np.array(v)) for name, v in per_pool.items()}
        row["surest - most telling"] = _mean_se(np.array(per_pool["surest"]) - np.array(per_pool["most telling"]))
        row["pools"] = len(per_pool["surest"])
        out["by_choices"][str(k)] = row
        print(
            f"{taste_name}, {k} choices: "
            + ", ".join(f"{n} {row[n][0]:.1%} +- {row[n][1]:.1%}" for n in (*PICKERS, "surest - most telling")),
            flush=True,
        )
    return out


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(len(x)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, default=ROOT, help="a project whose `make run` finished")
    ap.add_argument("--adapter", help="the daily adapter sampled (default: the newest built)")
    ap.add_argument("--taste", action="append", choices=sorted(TASTES), help="default: asks_back and brief")
    ap.add_argument("--messages", type=int, default=96, help="seed prompts sampled (two pools each)")
    ap.add_argument("--choices", type=int, nargs="+", default=[8, 16, 32], help="choices the taste model is fit on")
    ap.add_argument("--repeats", type=int, default=5, help="draws of those choices per half")
    ap.add_argument("--max-tokens", type=int, default=64, help="tokens per reply, as the page asks")
    ap.add_argument("--pools", type=Path, help="pools sampled before (this script's pools.json): not sampled again")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "pair_picker")
    args = ap.parse_args()
    from hominem_pipeline.core.policy.lora import adapter_reward_model
    from hominem_pipeline.core.reward.model import project_reward_model

    project = args.project.resolve()
    adapter = daily_adapter(project, args.adapter)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.pools:
        pools = json.loads(args.pools.read_text())
    else:
        pools = sample_pools(project, adapter, seed_prompts()[: args.messages], args.max_tokens)
        (args.out / "pools.json").write_text(json.dumps(pools, indent=1) + "\n")
    cfg = config_on(project)
    reward_model = project_reward_model(adapter_reward_model(adapter, cfg.data_dir), cfg)
    results = {t: measure(pools, reward_model, t, args) for t in args.taste or ["asks_back", "brief"]}
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
