"""One adapter trained across processes: the `dual`, `dpo` or `rl` trainer on inputs written to a folder,
run by each process `accelerate launch` starts.

    accelerate launch --multi_gpu --num_processes 2 -m hominem_pipeline.core.policy.launch SPEC.json

`--multi_gpu` starts the processes through torchrun; on a machine without GPUs they train on the CPU,
over gloo. SPEC.json (written by `write_spec`) names the mode, the student folder, the policy settings
(`PolicyConfig` as JSON), the seed, the pairs (parquet; `prompt`, `chosen`, `rejected` and the labels the
mode reads), the memory rows (parquet, for `dual`), the reward model folder (for `rl`) and where the
adapter goes. Rank 0 writes the adapter there and `result.json` beside SPEC.json: the metrics, the
training history, the base's checksum and the channels' accounting, as the trainer returns them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

import pandas as pd

RESULT = "result.json"


def write_spec(folder: Path, *, mode: str, student: Path, policy: Any, seed: int, out_dir: Path, pairs: pd.DataFrame,
               memory: pd.DataFrame | None = None, reward_model: Path | None = None) -> Path:
    """The inputs of one launched training, in `folder`; returns SPEC.json's path."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs.to_parquet(folder / "pairs.parquet", index=False)
    if memory is not None:
        memory.to_parquet(folder / "memory.parquet", index=False)
    spec = {"mode": mode, "student": str(student), "policy": policy.model_dump(mode="json"), "seed": seed, "out_dir": str(out_dir),
            "memory": memory is not None, "reward_model": str(reward_model) if reward_model else None}
    path = folder / "spec.json"
    path.write_text(json.dumps(spec, indent=2) + "\n")
    return path


def train(spec_path: Path) -> dict[str, Any]:
    from hominem_pipeline.core.config import PolicyConfig

    spec = json.loads(Path(spec_path).read_text())
    folder = Path(spec_path).parent
    cfg = PolicyConfig.model_validate(spec["policy"])
    pairs = pd.read_parquet(folder / "pairs.parquet")
    common = {"student_path": Path(spec["student"]), "cfg": cfg, "out_dir": Path(spec["out_dir"]), "seed": spec["seed"]}
    if spec["mode"] == "dual":
        from hominem_pipeline.core.policy.dual import train_dual_adapter

        memory = pd.read_parquet(folder / "memory.parquet") if spec["memory"] else pd.DataFrame({"prompt": [], "response": []})
        result = train_dual_adapter(pairs, memory, **common)
    elif spec["mode"] == "dpo":
        from hominem_pipeline.core.policy.dpo import train_dpo_adapter

        result = train_dpo_adapter(pairs, **common)
    elif spec["mode"] == "rl":
        from hominem_pipeline.core.policy.rl import train_rl_adapter
        from hominem_pipeline.core.reward.model import RewardModel

        result = train_rl_adapter(list(pairs["prompt"]), reward_model=RewardModel.load(Path(spec["reward_model"])), **common)
    else:
        raise ValueError(f"unknown mode {spec['mode']!r}: dual | dpo | rl")
    out = {"metrics": result.metrics, "history": result.history, "base_checksum": result.base_checksum,
           "channel_contributions": result.channel_contributions, "channels": result.channels}
    if int(os.environ.get("RANK", "0")) == 0:
        (folder / RESULT).write_text(json.dumps(out, indent=1, default=float) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", type=Path, help="SPEC.json written by write_spec")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rank " + os.environ.get("RANK", "0") + " %(message)s", datefmt="%H:%M:%S")
    train(args.spec)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
