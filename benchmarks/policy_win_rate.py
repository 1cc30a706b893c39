"""Win rate of adapters over the base, by the reward model, on prompts the adapters never trained on.

The evaluation stage judges an adapter on the 18 held-out prompts (2 per category): a win rate there
has a standard error of ~12 points. This script runs the evaluation stage's own comparison
(`evaluation.evaluate_adapter`: greedy replies of base and base+adapter, scored by the reward model,
memory probe included) for each adapter given, in one process, on a larger prompt set:

- `--prompts unseen` (default): the seed prompts in `config/prompts/seed_prompts.yaml` that no stored
  `prompts` partition put in training or evaluation (few are left once a week of days is stored).
- `--prompts untrained`: those, plus the held-out evaluation prompts, plus every stored day's training
  prompts that none of the given adapters trained on (each adapter's METADATA.json names the
  preference_pairs partitions it read; their prompts are left out). An adapter trained on one day's
  pairs leaves the other days' prompts (days share many seed prompts): 179 on a week of data here
  (one standard error ~4 points at --limit 150).

    .venv/bin/python benchmarks/policy_win_rate.py --adapter dpo=data/lora_adapter/<date>/<v1> --adapter
    dual=data/lora_adapter/<date>/<v2> .venv/bin/python benchmarks/policy_win_rate.py --adapter ... --reward-model
    data/reward_model/<date>/<v> --prompts untrained --limit 150 ... --save out/win_rate     # also each adapter's
    per-prompt table: replies, reward vectors, outcome

Reads the project's data/ (adapters, reward model, stored prompts); needs no ../shared data.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.evaluation.compare import EvaluationProbes, evaluate_adapter
from hominem_pipeline.core.evaluation.memory import read_memory_rows
from hominem_pipeline.core.lm.models import student_path
from hominem_pipeline.core.policy.lora import adapter_reward_model
from hominem_pipeline.core.reward.model import RewardModel
from hominem_pipeline.core.teacher.prompts import load_seed_prompts

DIMENSION_ORDER = (
    "empathy",
    "social_coherence",
    "agency_support",
    "epistemic_integrity",
    "harm_avoidance",
    "narrative_alignment",
    "curiosity",
)


def stored_prompts(cfg) -> pd.DataFrame:
    """Every stored prompts partition (any version), one table."""
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

    store = ArtifactStore(cfg.data_dir)
    refs = [ref for day in store.partitions("prompts") for ref in store.versions("prompts", day)]
    tables = [pd.read_parquet(ref.file("prompts.parquet")) for ref in refs]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=["text"])


def unseen_seeds(cfg, stored: pd.DataFrame) -> list:
    """Seed prompts absent from every stored prompts partition."""
    used = set(stored["text"])
    return [
        p for p in load_seed_prompts(cfg.path(cfg.prompts.seed_file), cfg.prompts.categories) if p.text not in used
    ]


def unseen_prompts(cfg, limit: int) -> list:
    """Seed prompts no stored prompts partition used, balanced over categories."""
    return balanced(unseen_seeds(cfg, stored_prompts(cfg)), limit)


def trained_prompts(adapter: Path, data_dir: Path) -> set[str]:
    """The prompt texts of the preference pairs an adapter's METADATA.json says it trained on."""
    import json

    meta = adapter / "METADATA.json"
    if not meta.is_file():
        sys.exit(f"{adapter} has no METADATA.json, so the prompts it trained on are unknown; use --prompts unseen")
    refs = json.loads(meta.read_text()).get("preference_data")
    if refs is None:
        sys.exit(
            f"{meta} does not name the preference_pairs it trained on, so the prompts it trained on are "
            "unknown; use --prompts unseen"
        )
    texts: set[str] = set()
    for ref in refs:
        table = data_dir / ref["asset"] / ref["partition"] / ref["version"] / "pairs.parquet"
        if not table.is_file():
            sys.exit(
                f"{adapter} trained on {table}, which is no longer stored, so the prompts it trained on "
                "are unknown; use --prompts unseen"
            )
        texts |= set(pd.read_parquet(table, columns=["prompt"])["prompt"])
    return texts


def untrained_prompts(cfg, adapters: list[Path], limit: int) -> list:
    """Unseen seed, held-out and stored training prompts (in that order within each category) that none
    of `adapters` trained on, one of each text, balanced over categories."""
    from hominem_pipeline.core.builds.common import prompts_of

    trained = set().union(*(trained_prompts(a, cfg.data_dir) for a in adapters))
    stored = stored_prompts(cfg)
    pool = unseen_seeds(cfg, stored)
    if len(stored):
        pool += prompts_of(stored, "eval") + prompts_of(stored, "train")
    seen, picked = set(trained), []
    for p in pool:
        if p.text not in seen:
            seen.add(p.text)
            picked.append(p)
    return balanced(picked, limit)


def balanced(prompts, limit: int):
    """At most `limit` prompts, round-robin over categories in the given order."""
    by_category: dict[str, list] = {}
    for p in prompts:
        by_category.setdefault(p.category, []).append(p)
    picked, i = [], 0
    while len(picked) < min(limit, len(prompts)):
        for group in by_category.values():
            if i < len(group) and len(picked) < limit:
                picked.append(group[i])
        i += 1
    return picked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", action="append", required=True, help="NAME=PATH of an adapter folder (repeat)")
    parser.add_argument(
        "--reward-model",
        default=None,
        help="reward model folder (default: the one the first adapter's METADATA names)",
    )
    parser.add_argument(
        "--prompts",
        choices=("unseen", "untrained"),
        default="unseen",
        help="unseen: seed prompts no stored day used; untrained: also held-out and stored training prompts "
        "no given adapter trained on",
    )
    parser.add_argument("--limit", type=int, default=60, help="at most this many prompts")
    parser.add_argument(
        "--save",
        type=Path,
        default=None,
        help="write each adapter's per-prompt table (replies, scores, outcome) to DIR/NAME.parquet",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = load_config(root=ROOT)
    adapters = dict(item.split("=", 1) for item in args.adapter)
    rm_path = (
        Path(args.reward_model)
        if args.reward_model
        else adapter_reward_model(Path(next(iter(adapters.values()))), cfg.data_dir)
    )
    if rm_path is None:
        sys.exit("the first adapter has no METADATA.json naming its reward model; pass --reward-model PATH")
    rm = RewardModel.load(rm_path)
    prompts = (
        unseen_prompts(cfg, args.limit)
        if args.prompts == "unseen"
        else untrained_prompts(cfg, [Path(p) for p in adapters.values()], args.limit)
    )
    memory = read_memory_rows([cfg.path(p) for p in cfg.policy.dual.memory_files])
    print(
        f"{len(prompts)} {args.prompts} prompts over {len({p.category for p in prompts})} categories; "
        f"reward model {rm_path.name}",
        flush=True,
    )
    rows, base_replies = [], {}  # the base answers once, for every adapter
    for name, path in adapters.items():
        started = time.monotonic()
        table, summary = evaluate_adapter(
            prompts,
            student_path=student_path(cfg),
            adapter_path=Path(path),
            reward_model=rm,
            cfg=cfg.evaluation,
            seed=cfg.project.seed,
            probes=EvaluationProbes(memory=memory),
            base_replies=base_replies,
        )
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            table.to_parquet(args.save / f"{name}.parquet", index=False)
        win = summary["win_rate"]
        se = math.sqrt(win * (1 - win) / len(prompts))
        probe = summary.get("memory_probe", {})
        rows.append(
            (
                name,
                win,
                se,
                summary["adapter_mean_scalar"] - summary["base_mean_scalar"],
                [summary[f"delta_{d}"] for d in DIMENSION_ORDER],
                probe,
                time.monotonic() - started,
            )
        )
        print(f"  {name}: win {win:.1%} +- {se:.1%} ({time.monotonic() - started:.0f} s)", flush=True)
    print(
        f"\n{'adapter':<12} {'win rate':>9} {'+-1 se':>7} {'d scalar':>9} "
        + " ".join(f"{d[:8]:>8}" for d in DIMENSION_ORDER)
        + "  facts base->adapter (lost)"
    )
    for name, win, se, dscalar, deltas, probe, _ in rows:
        facts = f"{probe.get('base')}->{probe.get('adapter')} ({probe.get('lost')})" if probe else "-"
        print(
            f"{name:<12} {win:>8.1%} {se:>7.1%} {dscalar:>+9.4f} "
            + " ".join(f"{d:>+8.4f}" for d in deltas)
            + f"  {facts}"
        )
    for name, *_, probe, _ in rows:
        if probe and (probe["lost_prompts"] or probe["gained_prompts"]):
            print(f"{name}: lost {probe['lost_prompts']}; gained {probe['gained_prompts']}")


if __name__ == "__main__":
    main()
