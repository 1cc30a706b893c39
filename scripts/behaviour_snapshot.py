"""The tiny chain's outputs, to check that a change of structure changes no behaviour.

    python scripts/behaviour_snapshot.py write before.json        # on the old code
    python scripts/behaviour_snapshot.py write after.json         # on the new code
    python scripts/behaviour_snapshot.py compare before.json after.json

`write` builds the tests' tiny student and encoder, a project with the tests' tiny overlay and one
day of feedback, materializes every stage through Dagster (a throwaway instance, a real MLflow
store), and records what each stage wrote: tables, tensors (the reward model's heads, the adapter's
weights) and JSON, plus the reward model's scores on the contrast fixtures. `compare` lists every
value that differs beyond --tolerance; keys that hold a time, a digest or a version are left out,
and version ids and temporary folders inside texts are read as one name (they differ between any two
runs, or by design when the code changes).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DAY = "2026-11-20"
STAGES = (
    "prompts",
    "teacher_trajectories",
    "teacher_labels",
    "human_feedback",
    "reward_model",
    "preference_pairs",
    "lora_adapter",
    "evaluation",
    "reward_health_index",
    "probes",
    "predictions",
    "attunement",
)
# Keys whose values differ between two runs of the same code (times, run ids, folders) or by design
# when the code changes (versions, code digests).
VOLATILE = re.compile(
    r"^(definition|content|files|inputs|created|created_at|time|run_id|tokens_per_second|seconds|seconds_per_.*|.*_seconds)$"
)
# Inside a text: a version id, a temporary folder.
NAMES = re.compile(r"[0-9a-f]{16}|/tmp/[^ '\"]*")


def _plain(value):
    """JSON-ready: arrays to lists, numpy scalars to floats."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _read(path: Path):
    import numpy as np
    import pandas as pd

    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
        return {c: _plain([v.tolist() if isinstance(v, np.ndarray) else v for v in frame[c]]) for c in frame.columns}
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return {k: _plain(v.float().numpy()) for k, v in sorted(load_file(str(path)).items())}
    if path.suffix in (".json", ".jsonl"):
        text = path.read_text()
        try:
            return _plain(json.loads(text))
        except json.JSONDecodeError:
            return [_plain(json.loads(line)) for line in text.splitlines() if line.strip()]
    return None


def _materialize(project: Path, config_path: Path, instance, selection: str | None = None) -> None:
    from dagster import materialize

    from hominem_pipeline.defs import build_definitions
    from hominem_pipeline.defs.resources import HominemResource

    defs = build_definitions(str(config_path), root=project)
    assets = [a for a in defs.assets if a.key.to_user_string() != "human_preferences"]  # filled by imports
    result = materialize(
        [*assets, *defs.asset_checks],
        instance=instance,
        partition_key=DAY,
        selection=selection,
        resources={"hominem": HominemResource(root=str(project), config_path=str(config_path))},
    )
    assert result.success


def _stage_outputs(cfg, stages, prefix: str, snapshot: dict) -> None:
    from hominem_pipeline.core.pipeline.lineage import lineage

    data = lineage(cfg)
    for stage in stages:
        ref = data.require(stage, DAY)
        for path in sorted(p for p in ref.path.rglob("*") if p.is_file()):
            if (value := _read(path)) is not None:
                snapshot[f"{prefix}{stage}/{path.relative_to(ref.path)}"] = value


def _overlay(config_path: Path, name: str, changes: dict) -> Path:
    import yaml

    from hominem_pipeline.core.config.loader import deep_merge

    path = config_path.parent / f"{name}.yaml"
    path.write_text(yaml.safe_dump(deep_merge(yaml.safe_load(config_path.read_text()), changes)))
    return path


def _add_choice(project: Path) -> None:
    """A person's clear choice between two replies to a new message, appended to the day's log."""
    from hominem_pipeline.core.online.events import context_digest

    messages = [{"role": "user", "content": "My friend forgot my birthday."}]
    turn = {
        "kind": "turn",
        "time": f"{DAY}T10:00:00+00:00",
        "rater": "local",
        "session": "b",
        "messages": messages,
        "model": "hominem",
        "adapter": None,
        "sampling": {},
        "finish_reason": "stop",
        "completion_tokens": 5,
        "context": context_digest(messages),
    }
    events = [
        turn | {"id": "b-warm", "reply": "That stings. Did you tell them?"},
        turn | {"id": "b-cold", "reply": "Get over it."},
        {
            "kind": "choice",
            "id": "b-c",
            "time": f"{DAY}T10:01:00+00:00",
            "rater": "local",
            "chosen": "b-warm",
            "rejected": "b-cold",
            "strength": "clear",
        },
    ]
    with open(project / "data" / "online" / "log" / f"{DAY}.jsonl", "a") as fh:
        fh.write("".join(json.dumps(e) + "\n" for e in events))


def write(out: Path) -> None:
    import pandas as pd
    import yaml
    from dagster import instance_for_test

    from hominem_pipeline.core.config import RewardModelConfig
    from hominem_pipeline.core.config.loader import deep_merge, load_config
    from hominem_pipeline.core.evaluation.fixtures import load_fixtures
    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline.core.online.updates import run_update
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
    from hominem_pipeline_tests.conftest import build_tiny_encoder, build_tiny_student, make_project
    from hominem_pipeline_tests.integration.test_pipeline import write_feedback_log

    work = Path(tempfile.mkdtemp(prefix="hominem-snapshot-"))
    student = build_tiny_student(work / "student")
    encoder = build_tiny_encoder(work / "encoder")
    project = make_project(work / "project", student, encoder)
    config_path = project / "config" / "tiny.yaml"
    write_feedback_log(project)
    snapshot: dict = {}
    with instance_for_test() as instance:
        _materialize(project, config_path, instance)
        cfg = load_config(config_path, root=project)
        _stage_outputs(cfg, STAGES, "", snapshot)
        model = RewardModel.load(lineage(cfg).require("reward_model", DAY).path)
        fixtures = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)
        prompts = [f.prompt for f in fixtures] * 2
        replies = [f.better for f in fixtures] + [f.worse for f in fixtures]
        snapshot["reward_model/fixture_scores"] = _plain(model.raw_scores(prompts, replies))
        # the adapter trained by DPO instead of the dual channels (the shipped overlay)
        dpo = _overlay(
            config_path, "dpo", yaml.safe_load((project / "config" / "training" / "lora_dpo.yaml").read_text())
        )
        _materialize(project, dpo, instance, "lora_adapter")
        _stage_outputs(load_config(dpo, root=project), ("lora_adapter",), "dpo:", snapshot)
    # an online update on people's choices (the fast loop), promoted through a lenient gate
    lenient = _overlay(
        config_path,
        "lenient",
        {
            "health": {"win_rate_margin": None, "people_margin": None},
            "online": {"skip_below": 0.0, "rollback_below": 0.0, "freeze_below": 0.0},
        },
    )
    _add_choice(project)
    result = run_update(load_config(lenient, root=project), by="snapshot", reason="snapshot")
    snapshot["online_update/result"] = _plain(
        {k: v for k, v in result.__dict__.items() if k in ("outcome", "partial_rhi", "items", "gate")}
    )
    folder = LiveState(cfg.data_dir).adapter_path()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if (value := _read(path)) is not None:
            snapshot[f"online_update/{path.relative_to(folder)}"] = value
    # the reward model's other engine: heads and a LoRA on the backbone trained by gradient
    labels = pd.read_parquet(lineage(cfg).require("teacher_labels", DAY).file("labels.parquet"))
    gradient = RewardModelConfig.model_validate(
        deep_merge(
            cfg.reward_model.model_dump(),
            {
                "head_fit": "gradient",
                "scalar": "free",
                "epochs": 2,
                "guards": [],
                "people_score": {"encoder": None},
                "rationale_weight": 0.5,
                "backbone": {"finetune": "lora", "frame": "pair", "lora": {"target_modules": ["q_proj", "v_proj"]}},
            },
        )
    )
    metrics = train_reward_model(
        labels,
        dimensions=cfg.dimension_names,
        sources=RewardSources(student),
        cfg=gradient,
        out_dir=work / "gradient",
        seed=0,
        data_digest="snapshot",
        date=DAY,
    ).metrics
    snapshot["gradient_reward_model/metrics"] = _plain(metrics)
    snapshot["gradient_reward_model/heads"] = _read(work / "gradient" / "heads.safetensors")
    snapshot["gradient_reward_model/scores"] = _plain(RewardModel.load(work / "gradient").raw_scores(prompts, replies))
    out.write_text(json.dumps(snapshot, default=str))
    print(f"{len(snapshot)} outputs written to {out} (project {project})")


def _diff(a, b, where: str, tolerance: float, found: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if VOLATILE.match(k):
                continue
            if k not in a or k not in b:
                found.append(f"{where}/{k}: only in {'after' if k in b else 'before'}")
            else:
                _diff(a[k], b[k], f"{where}/{k}", tolerance, found)
    elif isinstance(a, list) and isinstance(b, list):
        if all(isinstance(x, str) for x in a + b):  # a set written as a list (LoRA's target modules)
            a, b = sorted(a), sorted(b)
        if len(a) != len(b):
            found.append(f"{where}: length {len(a)} != {len(b)}")
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                _diff(x, y, f"{where}[{i}]", tolerance, found)
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if abs(a - b) > tolerance * max(1.0, abs(a)):
            found.append(f"{where}: {a!r} != {b!r}")
    elif isinstance(a, str) and isinstance(b, str):
        if NAMES.sub("<name>", a) != NAMES.sub("<name>", b):
            found.append(f"{where}: {a[:80]!r} != {b[:80]!r}")
    elif a != b:
        found.append(f"{where}: {str(a)[:80]!r} != {str(b)[:80]!r}")


def compare(before: Path, after: Path, tolerance: float, limit: int = 200) -> int:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    found: list[str] = []
    _diff(a, b, "", tolerance, found)
    for line in found[:limit]:
        print(line)
    print(f"{len(found)} difference(s) beyond {tolerance:g} over {len(a)} outputs")
    return 1 if found else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("out", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument(
        "--tolerance", type=float, default=1e-6, help="relative difference allowed on a number (default 1e-6)"
    )
    args = parser.parse_args()
    if args.command == "write":
        write(args.out)
        return 0
    return compare(args.before, args.after, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
