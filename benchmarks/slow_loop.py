"""Does the slow loop take each action once, in order, on a scripted run of nights, and does a recovery undo
them? The nights are scripted (their RHI is set, not measured); everything else is the project's own: the
slow loop (`core/online/slow_loop.py`, the config's `slow_loop` settings), a real live state in a scratch
data folder, and the settings the next daily adapter would train with (`AdjustedPolicy` over the config's
`policy`).

The script: a healthy start; the day's adapter goes live and the next night's RHI dips (revert); nine
falling nights (lower_lr, shrink_rank, freeze, one per three falls); six rising nights (unfreeze,
restore_rank, restore_lr, one per two rises). Printed: each night's RHI, what the loop did and the next
adapter's learning rate and LoRA rank; a plot goes to docs/plots/slow_loop.png. Exit status 1 if an action
is missing, repeated or out of order.

With `--project P` (a `make run` project), the adapter the day after `shrink_rank` is also trained for a few
steps from the project's people's start, cut to the smaller rank, on its newest preference pairs: its
adapter config and what it started from are printed.

    .venv/bin/python benchmarks/slow_loop.py
    .venv/bin/python benchmarks/slow_loop.py --project /tmp/p --steps 4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.online.live import LiveState
from hominem_pipeline.core.online.slow_loop import Night, act, adjusted_policy, adjustment, next_day

EXPECTED = ["revert", "lower_lr", "shrink_rank", "freeze", "unfreeze", "restore_rank", "restore_lr"]
SCRIPT = (
    [0.78, 0.80, 0.82, 0.74]  # rising; night 3's adapter goes live; night 4 dips 0.08
    + [0.73, 0.71, 0.69, 0.67, 0.65, 0.63, 0.61, 0.59, 0.57]  # nine falls
    + [0.60, 0.63, 0.66, 0.69, 0.72, 0.75]
)  # six rises
PROMOTED_ON = 3


def scripted(data: Path, cfg) -> list[dict]:
    state, rows = LiveState(data), []
    day = "2026-12-01"
    for i, rhi in enumerate(SCRIPT, start=1):
        adapter = f"adapter-{day}"
        report = act(data, Night(day, rhi, adapter), cfg.slow_loop, by="benchmark")
        if i == PROMOTED_ON:  # the gate passes the night's adapter (a consolidation)
            state.promote(
                adapter,
                data / "lora_adapter" / day / adapter,
                None,
                gate={"rhi": rhi},
                reason="the daily job's adapter",
                by="benchmark",
            )
        policy = adjusted_policy(cfg.policy, adjustment(state.history(), next_day(day)))
        rows.append(
            {
                "night": day,
                "rhi": rhi,
                "actions": [s.step for s in report.steps],
                "next_lr": policy.learning_rate,
                "next_r": policy.lora.r,
                "frozen": bool(state.current().frozen),
                "live": state.current().version or "base",
            }
        )
        day = next_day(day)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    x = list(range(1, len(rows) + 1))
    top.plot(x, [r["rhi"] for r in rows], "o-", color="#1d1f23")
    for xi, r in zip(x, rows):
        for k, a in enumerate(r["actions"]):
            top.annotate(
                a,
                (xi, r["rhi"]),
                textcoords="offset points",
                xytext=(0, 10 + 12 * k),
                ha="center",
                fontsize=8,
                color="#d0584b",
            )
    top.set_ylabel("nightly RHI")
    top.set_title("The slow loop on scripted nights: falls step down, rises step back", fontsize=10)
    bottom.step(
        x,
        [r["next_lr"] / rows[0]["next_lr"] for r in rows],
        where="post",
        label="next adapter's learning rate (x configured)",
    )
    bottom.step(
        x,
        [r["next_r"] / rows[0]["next_r"] for r in rows],
        where="post",
        label="next adapter's LoRA rank (x configured)",
        linestyle="--",
    )
    bottom.fill_between(
        x, 0, [1.05 if r["frozen"] else 0 for r in rows], step="post", color="#adb5bd", alpha=0.4, label="frozen"
    )
    bottom.set_ylim(0, 1.1)
    top.annotate(
        "went live",
        (PROMOTED_ON, rows[PROMOTED_ON - 1]["rhi"]),
        textcoords="offset points",
        xytext=(0, 10),
        ha="center",
        fontsize=8,
        color="#2f9e6f",
    )
    from matplotlib.ticker import MaxNLocator

    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlabel("night")
    bottom.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def train_shrunk(project: Path, steps: int, factor: float) -> None:
    """A few dual steps of the adapter with shrink_rank in force, from the project's people's start cut to the rank."""
    from hominem_pipeline.core.builds.lora_adapter import people_start_setting
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.online.slow_loop import AdjustedPolicy, Adjustment
    from hominem_pipeline.core.policy.dual import DualStart, train_dual_adapter
    from hominem_pipeline.core.policy.pairs import read_preference_pairs

    cfg = load_config(None, root=project)
    from benchmarks.common import newest

    pairs = read_preference_pairs([newest(cfg, "preference_pairs").file("pairs.parquet")]).head(8)
    policy = AdjustedPolicy(
        cfg.policy.model_copy(update={"max_steps": steps}), Adjustment(1.0, factor, ("shrink_rank",))
    )
    with tempfile.TemporaryDirectory() as out:
        result = train_dual_adapter(
            pairs,
            read_memory_rows(memory_paths(cfg)).head(4),
            start=DualStart(student_path(cfg), people_start=people_start_setting(cfg)),
            cfg=policy,
            out_dir=Path(out),
            seed=0,
        )
        config = json.loads((Path(out) / "adapter_config.json").read_text())
    print(
        f"\nthe adapter with shrink_rank in force ({steps} steps on {len(pairs)} pairs of {newest.parent.name}): "
        f"r {config['r']}, alpha {config['lora_alpha']} (configured r {cfg.policy.lora.r}, alpha "
        f"{cfg.policy.lora.alpha})"
    )
    print(f"started from: {result.channels['start']}")
    start = people_start_setting(cfg)
    if start is not None:
        import torch
        from safetensors.torch import load_file

        from hominem_pipeline.core.policy.people_start import truncate_lora

        path = sorted(start[0].glob("*-people-start.safetensors"))[0]
        whole = load_file(str(path))
        cut = truncate_lora(whole, policy.lora.r)
        energy = [
            (
                torch.linalg.matrix_norm(cut[k.replace("lora_A", "lora_B")].double() @ cut[k].double()) ** 2,
                torch.linalg.matrix_norm(whole[k.replace("lora_A", "lora_B")].double() @ whole[k].double()) ** 2,
            )
            for k in whole
            if k.endswith("lora_A.weight")
        ]
        kept = float(sum(e[0] for e in energy) / sum(e[1] for e in energy))
        print(
            f"the cut keeps {kept:.1%} of the people's start's update (squared Frobenius norm of B A "
            f"over its {len(energy)} modules)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=None, help="a config overlay (default: config/hominem.yaml alone)")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "plots" / "slow_loop.png")
    ap.add_argument(
        "--project",
        type=Path,
        default=None,
        help="a `make run` project: also train the shrunk adapter from its people's start",
    )
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()

    cfg = load_config(args.config, root=ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        rows = scripted(Path(tmp) / "data", cfg)
        history = LiveState(Path(tmp) / "data").history()
    print(
        f"slow_loop: falling_nights {cfg.slow_loop.falling_nights}, recovery_nights "
        f"{cfg.slow_loop.recovery_nights}, min_fall {cfg.slow_loop.min_fall}, "
        f"steps {cfg.slow_loop.steps}, revert_dip {cfg.slow_loop.revert_dip}"
    )
    print(f"{'night':12s} {'RHI':>6s}  {'action':14s} {'next lr':>9s} {'next r':>6s}  frozen  live")
    for r in rows:
        print(
            f"{r['night']:12s} {r['rhi']:6.3f}  {', '.join(r['actions']) or '-':14s} {r['next_lr']:9.2e} "
            f"{r['next_r']:6d}  {'yes' if r['frozen'] else 'no':6s}  {r['live']}"
        )
    for e in history:
        if e.get("slow_loop_night"):
            print(f"  {e['slow_loop_night']} {e['action']}: {e.get('reason')}")
    done = [a for r in rows for a in r["actions"]]
    ok = (
        done == EXPECTED
        and rows[-1]["next_lr"] == rows[0]["next_lr"]
        and rows[-1]["next_r"] == rows[0]["next_r"]
        and not rows[-1]["frozen"]
    )
    print(
        f"\nactions in order: {done}\nexpected:         "
        f"{EXPECTED}\n{'each once, in order; the recovery undid them' if ok else 'NOT as expected'}"
    )
    plot(rows, args.plot)
    print(f"plot: {args.plot}")
    if args.project:
        train_shrunk(args.project.resolve(), args.steps, cfg.slow_loop.rank_factor)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
