"""The daily `dual` training's batch sampler: `uniform` (every pair once per pass, reshuffled) against
`replay` (each step's pairs drawn by the replay buffer's sampler: recent and old, by priority and at
random; `replay:` in the config), on the same preference pairs, several training seeds each.

The pairs, reward model and memory files are those a daily adapter of `--project` was trained with
(its METADATA.json). Each variant trains `policy.max_steps` steps into a scratch folder; then every
adapter and the base answer the prompts none of them trained on (`policy_win_rate.untrained_prompts`:
unseen seed, held-out and stored training prompts), judged by that reward model, with the memory probe.

    .venv/bin/python benchmarks/dual_sampler.py --project /path/to/project --adapter data/lora_adapter/<day>/<version>
    .venv/bin/python benchmarks/dual_sampler.py ... --seeds 0 1 2 --limit 128

Reads the project's data/ (needs a `make run`); writes nothing there.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import config_on


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, default=ROOT)
    ap.add_argument(
        "--adapter",
        required=True,
        help="a daily dual adapter of the project (its pairs, reward model and memory files are used)",
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--limit", type=int, default=128, help="at most this many untrained prompts")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from benchmarks.policy_win_rate import balanced, stored_prompts, unseen_seeds
    from hominem_pipeline.core.builds.common import prompts_of
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.compare import EvaluationProbes, evaluate_adapter
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.online.replay import ReplayBuffer, teacher_replay_items
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore
    from hominem_pipeline.core.policy.dual import DualBatching, DualStart, train_dual_adapter
    from hominem_pipeline.core.policy.pairs import read_preference_pairs
    from hominem_pipeline.core.reward.model import RewardModel

    project = args.project.resolve()
    cfg = config_on(project)  # this code's config, the project's data and student
    daily = Path(args.adapter) if Path(args.adapter).is_absolute() else project / args.adapter
    meta = json.loads((daily / "METADATA.json").read_text())
    store = ArtifactStore(cfg.data_dir)
    refs = [store.existing(k["asset"], k["partition"], k["version"]) for k in meta["preference_data"]]
    if None in refs:
        sys.exit(f"{daily} trained on preference pairs that are no longer stored: {meta['preference_data']}")
    pairs = read_preference_pairs([r.file("pairs.parquet") for r in refs])
    rm_key = meta["reward_model"]
    rm = RewardModel.load(cfg.data_dir / rm_key["asset"] / rm_key["partition"] / rm_key["version"])
    memory = read_memory_rows(memory_paths(cfg))
    trained = set(pairs["prompt"])
    stored = stored_prompts(cfg)
    pool = unseen_seeds(cfg, stored) + (
        prompts_of(stored, "eval") + prompts_of(stored, "train") if len(stored) else []
    )
    seen, picked = set(trained), []
    for p in pool:
        if p.text not in seen:
            seen.add(p.text)
            picked.append(p)
    prompts = balanced(picked, args.limit)
    print(
        f"{len(pairs)} pairs over {len(refs)} day(s), {len(memory)} memory rows; {len(prompts)} "
        f"untrained prompts; reward model {rm_key['version']}",
        flush=True,
    )

    tmp = Path(tempfile.mkdtemp(prefix="hominem-sampler-"))
    rows, base_replies = [], {}
    try:
        for sampler in ("uniform", "replay"):
            policy = cfg.policy.model_copy(update={"dual": cfg.policy.dual.model_copy(update={"sampler": sampler})})
            for seed in args.seeds:
                out = tmp / f"{sampler}-{seed}"
                run_seed = seed  # the same seeds for both samplers: each seed's LoRA initialisation is the same
                started = time.monotonic()
                batches = (
                    ReplayBuffer(teacher_replay_items(store, refs), cfg.replay, recent="newest_time").batches(run_seed)
                    if sampler == "replay"
                    else None
                )
                train_dual_adapter(
                    pairs,
                    memory,
                    start=DualStart(student_path(cfg)),
                    cfg=policy,
                    out_dir=out,
                    seed=run_seed,
                    batching=DualBatching(pair_sampler=batches),
                )
                trained_s = time.monotonic() - started
                table, summary = evaluate_adapter(
                    prompts,
                    student_path=student_path(cfg),
                    adapter_path=out,
                    reward_model=rm,
                    cfg=cfg.evaluation,
                    seed=cfg.project.seed,
                    probes=EvaluationProbes(memory=memory),
                    base_replies=base_replies,
                )
                probe = summary.get("memory_probe", {})
                rows.append(
                    {
                        "sampler": sampler,
                        "seed": seed,
                        "win_rate": summary["win_rate"],
                        "facts": probe.get("adapter"),
                        "base_facts": probe.get("base"),
                        "lost": len(probe.get("lost_prompts", [])),
                        "train_s": round(trained_s, 1),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = len(prompts)
    print(
        f"\n| sampler | wins over the base, seeds {' / '.join(map(str, args.seeds))} | mean | facts "
        f"known after (base: {rows[0]['base_facts']} of "
        f"{len(memory)}) | of the base's lost | train s |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for sampler in ("uniform", "replay"):
        rs = [r for r in rows if r["sampler"] == sampler]
        mean = sum(r["win_rate"] for r in rs) / len(rs)
        print(
            f"| {sampler} | {' / '.join(format(r['win_rate'], '.1%') for r in rs)} | {mean:.1%} "
            f"(+-{math.sqrt(mean * (1 - mean) / (n * len(rs))):.1%}) | "
            f"{' / '.join(str(r['facts']) for r in rs)} | {sum(r['lost'] for r in rs)} | "
            f"{sum(r['train_s'] for r in rs) / len(rs):.0f} |"
        )


if __name__ == "__main__":
    main()
