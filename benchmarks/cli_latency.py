"""How long does each everyday command take on a first day, start-up included?

Runs each command as a person types it, in the project folder (`--project`, default this checkout; its
`make run` must have built the day), and times the whole process:

- `reward-probe` of two replies;
- `reward-probe --fixtures`, read from the reward model's `reward_fixtures` check, and computed fresh
  (the same fixtures in a file the check did not score, so nothing is read back: only the feature cache);
- `compare --eval-set`, read from the day's `evaluation`;
- `chat -p`, its first reply (the process start, the student and the adapter loaded, one reply);
- `history choices`, after the first indexing (`history update` first, timed too).

Each figure is set against its goal (issue 76) as a ratio; the baseline in the same run is the same
command's own floor: `hominem --help` (the interpreter, the CLI's imports).

    .venv/bin/python benchmarks/cli_latency.py
    .venv/bin/python benchmarks/cli_latency.py --project /path/to/clone --json benchmarks/results/cli_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROMPT = "I failed my driving test again."
REPLIES = ("That's rough. What happened on the test?", "Try harder.")


def timed(project: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    """Seconds the command took, and its result (fails loudly when the command fails)."""
    hominem = project / ".venv" / "bin" / "hominem"
    env = {**os.environ, "HOMINEM_HOME": str(project), "COLUMNS": "160"}
    env.pop("DAGSTER_HOME", None)
    started = time.monotonic()
    done = subprocess.run([str(hominem), *args], cwd=project, env=env, capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(
            f"`hominem {' '.join(args)}` failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return seconds, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--project", type=Path, default=ROOT, help="the project folder whose first day was built (make run)"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    project = args.project.resolve()
    sys.path.insert(0, str(project))
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.pipeline.lineage import lineage

    cfg = load_config(root=project)
    model = lineage(cfg).newest("reward_model")[0]
    if model is None:
        sys.exit(f"no reward model is built in {cfg.data_dir}: run `make run` in {project} first")
    rows: list[tuple[str, float, float, str]] = []  # (what, seconds, goal, how it answered)

    floor, _ = timed(project, "--help")
    probe, _ = timed(project, "reward-probe", "--prompt", PROMPT, "-r", REPLIES[0], "-r", REPLIES[1])
    rows.append(("reward-probe, two replies", probe, 10.0, "scored by the day's reward model"))
    kept, out = timed(project, "reward-probe", "--fixtures")
    assert "read from the reward_fixtures check's scores" in " ".join(out.stdout.split()), out.stdout
    rows.append(("reward-probe --fixtures, from the check", kept, 30.0, "the check's scores read back"))
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "fixtures.yaml"
        copy.write_text(
            cfg.path(cfg.fixtures.file).read_text() + "\n"
        )  # same pairs, another file: nothing to read back
        fresh, out = timed(
            project, "reward-probe", "--fixtures", "--model", str(model.path), "--set", f"fixtures.file={copy}"
        )
        assert "scored here" in out.stdout, out.stdout
    rows.append(("reward-probe --fixtures, computed fresh", fresh, 120.0, "scored here (the feature cache)"))
    compare, out = timed(project, "compare", "--eval-set")
    said = " ".join(out.stdout.split())
    rows.append(
        (
            "compare --eval-set, from the evaluation",
            compare,
            30.0,
            "read from the evaluation"
            if "read from evaluation" in said
            else "generated (no evaluation of this adapter)",
        )
    )
    chat, _ = timed(project, "chat", "-p", "My name is Ana.", "--max-tokens", "48")
    rows.append(("chat -p, first reply", chat, 20.0, "the live adapter (or the base), one reply"))
    index, _ = timed(project, "history", "update")
    again, _ = timed(project, "history", "choices")
    rows.append(
        ("history choices, after the first indexing", again, 3.0, f"first indexing (history update) {index:.1f} s")
    )

    print(f"\n{'command':44s} {'seconds':>8s} {'goal':>6s} {'/goal':>6s}  how")
    for what, seconds, goal, how in rows:
        print(f"{what:44s} {seconds:8.1f} {goal:6.0f} {seconds / goal:6.2f}  {how}")
    print(f"{'baseline: hominem --help (start-up alone)':44s} {floor:8.1f}")
    met = all(seconds <= goal for _, seconds, goal, _ in rows)
    print(f"\n{'every goal met' if met else 'a goal is missed'} ({os.cpu_count()} CPU cores, {platform.machine()})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}",
                    "baseline_help_seconds": round(floor, 2),
                    "commands": [{"command": w, "seconds": round(s, 2), "goal": g, "how": h} for w, s, g, h in rows],
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
