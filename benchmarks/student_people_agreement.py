"""Does the day's adapter move the student toward what people prefer? Judged on people's pairs no one
here wrote, not by the project's reward model: the DPO implicit reward of the adapter against the base
(`core/evaluation/people_pairs.py`; TRL's `rewards/accuracies`, 0.5 is chance) on HH-RLHF harmless-base
pairs held out of the seed-0 split (the 1,800 of its training part are the pairs shipped in
config/human/; the next --test are never seen by any model here), and on the contrast fixtures.

    .venv/bin/python benchmarks/student_people_agreement.py --project /tmp/a-make-run --date 2026-11-27
    .venv/bin/python benchmarks/student_people_agreement.py --adapter data/lora_adapter/2026-11-27/<version> --test
    200 .venv/bin/python benchmarks/student_people_agreement.py --project /tmp/a-make-run --date 2026-11-27
    --simulate-week 20

--simulate-week N: a week of the page's use ending on --date (the 6 days before it and the day itself: a
day after today is not a partition), then that day's job built again and its new adapter measured. Each
of the 7 days the log gets N choices a person made on the page (two replies to a conversation, one
chosen, strength clear), drawn from the HH-RLHF pairs that no held-out set holds; `human_feedback` is
built for each day and the whole daily job for the last, whose reward model and adapter learn from the
week's choices (`policy.window_days`). It changes the project's data: use a scratch clone.

Each adapter named (--adapter, repeatable; default: every lora_adapter version of --date in the project)
is measured in the same run; the base's log-probabilities are kept in the project's features cache, so a
second run reads them. Beside each, what its `evaluation` (when the project built one on it) found: the
win rate over the base by the reward model, and the memory probe's facts (the base's, the adapter's,
lost). Needs ../shared/data/hh-rlhf/ (or --data PATH); the project itself never reads it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.human.preferences import parse_preference_file

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"
TRAIN = 1800  # the training part of the split (the pairs shipped in config/human/)


def held_out_test(data: Path, n: int):
    """The `n` HH-RLHF pairs after the 1,800 of the seed-0 split's training part: never seen by any model here."""
    pairs = parse_preference_file(data, "hh-rlhf", data.name).pairs.reset_index(drop=True)
    order = np.random.default_rng(0).permutation(len(pairs))
    return pairs.iloc[order[TRAIN : TRAIN + n]].reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--test", type=int, default=504, help="held-out pairs (after the 1,800 of the training part)")
    ap.add_argument("--project", type=Path, default=ROOT, help="the project folder whose adapters and student to use")
    ap.add_argument("--date", default=None, help="the day whose adapters to measure (default: the newest built)")
    ap.add_argument(
        "--adapter",
        type=Path,
        action="append",
        default=None,
        help="an adapter folder (repeatable; default: the day's)",
    )
    ap.add_argument(
        "--simulate-week",
        type=int,
        default=0,
        metavar="N",
        help="N page choices a day for the 7 days ending on --date, then its new adapter measured",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if not args.data.is_file():
        sys.exit(f"{args.data} not found; pass --data PATH to harmless-base-test.jsonl.gz")

    from benchmarks.common import config_on
    from hominem_pipeline.core.evaluation.fixtures import base_logp_cache, load_fixtures
    from hominem_pipeline.core.evaluation.people_pairs import implicit_reward
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore
    from hominem_pipeline.core.policy.lora import load_policy
    from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES

    project = args.project.resolve()
    cfg = config_on(project)
    store = ArtifactStore(cfg.data_dir)
    adapters = args.adapter
    if args.simulate_week:
        if not args.date:
            sys.exit("--simulate-week needs --date: the day the week ends on")
        before = {ref.version for ref in store.versions("lora_adapter", args.date)}
        simulate_week(project, args.date, args.simulate_week)
        store = ArtifactStore(cfg.data_dir)
        adapters = [ref.path for ref in store.versions("lora_adapter", args.date) if ref.version not in before]
    if not adapters:
        days = store.partitions("lora_adapter")
        if not days:
            sys.exit(f"no lora_adapter built in {cfg.data_dir}; run `make run` there, or pass --adapter")
        day = args.date or days[-1]
        adapters = [ref.path for ref in store.versions("lora_adapter", day)]
        if not adapters:
            sys.exit(f"no lora_adapter built for {day} in {cfg.data_dir} (built days: {', '.join(days)})")
    test = held_out_test(args.data, args.test)
    fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names) if cfg.fixtures.file else []
    student = student_path(cfg)
    base = base_logp_cache(
        student, cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES)
    )  # the base's rows, kept for the next run
    evaluations = {}  # adapter version -> its evaluation's metrics
    for day in store.partitions("evaluation"):
        for ref in store.versions("evaluation", day):
            for used in ref.manifest.get("inputs", {}).get("lora_adapter", []):
                evaluations[used["version"]] = ref.manifest.get("metrics", {})
    rows = []
    for adapter in adapters:
        started = time.monotonic()
        model, tokenizer = load_policy(student, Path(adapter))
        held, _ = implicit_reward(
            model,
            tokenizer,
            list(test["prompt"]),
            list(test["chosen"]),
            list(test["rejected"]),
            cfg.evaluation.batch_size,
            base_cache=base,
        )
        fixed, _ = implicit_reward(
            model,
            tokenizer,
            [f.prompt for f in fixtures],
            [f.better for f in fixtures],
            [f.worse for f in fixtures],
            cfg.evaluation.batch_size,
            base_cache=base,
        )
        rows.append((Path(adapter), held, fixed, time.monotonic() - started))
    print(
        f"\n{len(test)} held-out HH-RLHF pairs, {len(fixtures)} contrast fixtures; the base reads 0.5 on "
        "both by construction"
    )
    print(
        f"{'adapter':58s} {'people':>16s} {'margin':>8s} {'base/adapter prefer chosen':>28s} "
        f"{'fixtures':>16s} {'RM win rate':>12s} "
        f"{'facts base/adapter/lost':>24s} {'seconds':>8s}"
    )
    for path, held, fixed, seconds in rows:
        name = "/".join(path.parts[-3:])
        ev = evaluations.get(path.name, {})
        win = "n/a" if ev.get("win_rate") is None else f"{100 * ev['win_rate']:.1f}%"
        facts = (
            "n/a"
            if ev.get("memory_base") is None
            else f"{ev['memory_base']}/{ev['memory_adapter']}/{ev['memory_base'] - ev['memory_kept']}"
        )
        print(
            f"{name:58s} {100 * held.accuracy:7.1f}% +-{100 * held.standard_error:4.1f} {held.mean_margin:+8.3f} "
            f"{100 * held.base_prefers_chosen:13.1f}% / {100 * held.adapter_prefers_chosen:5.1f}% "
            f"{100 * fixed.accuracy:7.1f}% +-{100 * fixed.standard_error:4.1f} {win:>12s} {facts:>24s} {seconds:8.0f}"
        )


def simulate_week(project: Path, day: str, per_day: int) -> None:
    """Write `per_day` page choices into the interaction log of each of the 7 days ending on `day` (HH-RLHF
    pairs of the shipped training part, as conversations the page served: each pair's transcript as
    messages, its two replies as two turns, the person's choice between them), build `human_feedback`
    for each day and the whole job for `day` (`hominem run`, in `project`)."""
    import datetime as dt
    import json
    import os
    import re
    import subprocess

    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.online.events import context_digest

    cfg = load_config(root=project)
    pool = people_pairs(cfg)
    pool = pool[pool["source"].str.contains("hh-rlhf")].reset_index(drop=True)
    picked = pool.iloc[np.random.default_rng(1).permutation(len(pool))[: 7 * per_day]].reset_index(drop=True)
    log_dir = cfg.data_dir / cfg.serving.log_dir / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOMINEM_HOME": str(project)}
    env.pop("DAGSTER_HOME", None)
    days = [(dt.date.fromisoformat(day) - dt.timedelta(days=k)).isoformat() for k in range(6, -1, -1)]
    for k, when in enumerate(days):
        events = []
        for j, pair in picked.iloc[k * per_day : (k + 1) * per_day].iterrows():
            parts = re.split(r"\n\n(Human|Assistant): ", pair["prompt"].removesuffix("\n\nAssistant:"))[1:]
            messages = [
                {"role": "user" if who == "Human" else "assistant", "content": text}
                for who, text in zip(parts[::2], parts[1::2])
            ]
            turn = {
                "kind": "turn",
                "time": f"{when}T10:00:00+00:00",
                "rater": "week",
                "session": f"week-{j}",
                "messages": messages,
                "model": "hominem",
                "adapter": None,
                "sampling": {},
                "finish_reason": "stop",
                "completion_tokens": 5,
                "context": context_digest(messages),
            }
            events += [
                turn | {"id": f"week-{j}-a", "reply": pair["chosen"]},
                turn | {"id": f"week-{j}-b", "reply": pair["rejected"]},
                {
                    "kind": "choice",
                    "id": f"week-{j}-c",
                    "time": f"{when}T10:01:00+00:00",
                    "rater": "week",
                    "chosen": f"week-{j}-a",
                    "rejected": f"week-{j}-b",
                    "strength": "clear",
                },
            ]
        with open(log_dir / f"{when}.jsonl", "a") as fh:
            fh.write("".join(json.dumps(e) + "\n" for e in events))
        select = ["--select", "human_feedback"] if when != days[-1] else []
        print(f"{when}: {per_day} page choices; hominem run {' '.join(select) or '(every asset)'}", flush=True)
        subprocess.run(
            [str(project / ".venv" / "bin" / "hominem"), "run", "--date", when, *select],
            cwd=project,
            env=env,
            check=True,
        )


if __name__ == "__main__":
    main()
