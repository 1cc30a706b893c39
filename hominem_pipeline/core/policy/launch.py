"""One adapter trained across processes: the `dual`, `dpo` or `rl` trainer on inputs written to a folder,
run by each process `accelerate launch` starts.

    accelerate launch --multi_gpu --num_processes 2 -m hominem_pipeline.core.policy.launch SPEC.json

`--multi_gpu` starts the processes through torchrun; on a machine without GPUs they train on the CPU,
over gloo. SPEC.json (written by `write_spec`) names the mode, the student folder, the policy settings
(`PolicyConfig` as JSON), the seed, the pairs (parquet; `prompt`, `chosen`, `rejected` and the labels the
mode reads), the memory rows (parquet, for `dual`), the reward model folder (for `rl`, and for `dual`
when it reads intensity or safety from it), and where the adapter goes; for `dual` also the batches
drawn ahead (a sampler the launching process built: the replay buffer, the people's share), the
reference caches and the people's start. Rank 0 writes the adapter there and `result.json` beside
SPEC.json: the metrics, the training history, the base's checksum and the channels' accounting, as the
trainer returns them.

`run_launched` is how a stage trains this way (`runtime.train_processes`): it writes nothing itself,
starts the launch, relays rank 0's progress lines to its log and returns what the trainer returned.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

RESULT = "result.json"
BATCHES = "batches.json"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchSpec:
    """What one launched training runs (SPEC.json, beside the pairs it trains on).

    Args:
        mode: dual | dpo | rl.
        student: the base student's folder.
        policy: the `policy` settings, whole (a PolicyConfig).
        seed: the training's seed.
        out_dir: where the adapter is written.
        reward_model: the reward model the processes load (rank 0 through the project's feature cache).
        reference_cache: the dual trainer's reference log-probabilities file.
        shipped_reference: the shipped features folder whose reference log-probabilities are read.
        people_start: (the shipped features folder, the key of the people's training pairs).
        feature_cache: (the project's feature cache folder, the shipped one) the reward model scores through on
            rank 0.
        dimension_weights: rl: the weights of the reward vector's dimensions.
        device: `runtime.device` (cpu keeps the processes off any GPU).
    """

    mode: str
    student: Path
    policy: Any
    seed: int
    out_dir: Path
    reward_model: Path | None = None
    reference_cache: Path | None = None
    shipped_reference: Path | None = None
    people_start: tuple[Path, str] | None = None
    feature_cache: tuple[Path, Path | None] | None = None
    dimension_weights: Mapping[str, float] | None = None
    device: str = "auto"


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def write_spec(
    folder: Path,
    spec: LaunchSpec,
    pairs: pd.DataFrame,
    memory: pd.DataFrame | None = None,
    batches: Sequence[Sequence[int]] | None = None,
) -> Path:
    """The inputs of one launched training, in `folder`; returns SPEC.json's path. `batches`: the rows of
    `pairs` for each draw of a `dual` run (`draw_batches`), in order."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs.to_parquet(folder / "pairs.parquet", index=False)
    if memory is not None:
        memory.to_parquet(folder / "memory.parquet", index=False)
    if batches is not None:
        (folder / BATCHES).write_text(json.dumps([[int(i) for i in b] for b in batches]))
    start, cache = spec.people_start, spec.feature_cache
    written = {
        "mode": spec.mode,
        "student": str(spec.student),
        "policy": spec.policy.model_dump(mode="json"),
        "seed": spec.seed,
        "out_dir": str(spec.out_dir),
        "memory": memory is not None,
        "reward_model": _text(spec.reward_model),
        "batches": batches is not None,
        "reference_cache": _text(spec.reference_cache),
        "shipped_reference": _text(spec.shipped_reference),
        "people_start": None if start is None else [str(start[0]), start[1]],
        "feature_cache": None if cache is None else [str(cache[0]), _text(cache[1])],
        "dimension_weights": dict(spec.dimension_weights) if spec.dimension_weights is not None else None,
        "device": spec.device,
    }
    path = folder / "spec.json"
    path.write_text(json.dumps(written, indent=2) + "\n")
    return path


def draw_batches(sampler: Callable[[int], Sequence[int]], rows: int, draws: int) -> list[list[int]]:
    """`draws` batches of `rows` pair rows from a `dual` pair sampler, as the trainer would draw them one
    after another (`train_dual_adapter` draws `max_steps x gradient_accumulation_steps` times)."""
    return [[int(i) for i in sampler(rows)] for _ in range(draws)]


def _replayed(batches: list[list[int]]) -> Callable[[int], list[int]]:
    order = iter(batches)

    def sampler(n: int) -> list[int]:
        batch = next(order, None)
        if batch is None or len(batch) != n:
            raise RuntimeError(
                f"the launched training drew a batch of {n} pair rows beyond the {len(batches)} drawn ahead "
                f"(or of another size: {None if batch is None else len(batch)}); draw_batches was given other settings"
            )
        return batch

    return sampler


def _reward_model(spec: dict[str, Any], rank: int) -> Any:
    """The reward model the spec names, on this process's device; rank 0 reads and writes the project's
    feature cache (the others compute what they score: two writers would compact each other's shards)."""
    from hominem_pipeline.core.policy.distributed import process_device
    from hominem_pipeline.core.reward.model import RewardModel

    model = RewardModel.load(Path(spec["reward_model"]), process_device())
    if spec.get("feature_cache") and rank == 0:
        folder, shipped = spec["feature_cache"]
        model.use_feature_cache(Path(folder), Path(shipped) if shipped else None)
    return model


def train(spec_path: Path) -> dict[str, Any]:
    from hominem_pipeline.core.config import PolicyConfig
    from hominem_pipeline.core.policy.distributed import process_device

    spec = json.loads(Path(spec_path).read_text())
    folder = Path(spec_path).parent
    rank = int(os.environ.get("RANK", "0"))
    cfg = PolicyConfig.model_validate(spec["policy"])
    pairs = pd.read_parquet(folder / "pairs.parquet")
    student = Path(spec["student"])
    common = {"cfg": cfg, "out_dir": Path(spec["out_dir"]), "seed": spec["seed"]}

    def path(key: str) -> Path | None:
        return Path(spec[key]) if spec.get(key) else None

    if spec["mode"] == "dual":
        from hominem_pipeline.core.policy.dual import DualBatching, DualStart, train_dual_adapter

        memory = (
            pd.read_parquet(folder / "memory.parquet")
            if spec["memory"]
            else pd.DataFrame({"prompt": [], "response": []})
        )
        start = spec.get("people_start")
        batches = json.loads((folder / BATCHES).read_text()) if spec.get("batches") else None
        result = train_dual_adapter(
            pairs,
            memory,
            start=DualStart(
                student,
                reference_cache=path("reference_cache"),
                shipped_reference=path("shipped_reference"),
                people_start=(Path(start[0]), start[1]) if start else None,
            ),
            reward_model=_reward_model(spec, rank) if spec["reward_model"] and rank == 0 else None,
            batching=DualBatching(pair_sampler=_replayed(batches) if batches is not None else None),
            **common,
        )
    elif spec["mode"] == "dpo":
        from hominem_pipeline.core.policy.dpo import train_dpo_adapter

        result = train_dpo_adapter(pairs, student_path=student, device=process_device(), **common)
    elif spec["mode"] == "rl":
        from hominem_pipeline.core.policy.rl import train_rl_adapter

        result = train_rl_adapter(
            list(pairs["prompt"]),
            reward_model=_reward_model(spec, rank),
            dimension_weights=spec.get("dimension_weights"),
            student_path=student,
            device=process_device(),  # the dual trainer takes its ranks' device
            **common,
        )
    else:
        raise ValueError(f"unknown mode {spec['mode']!r}: dual | dpo | rl")
    out = {
        "metrics": result.metrics,
        "history": result.history,
        "base_checksum": result.base_checksum,
        "channel_contributions": result.channel_contributions,
        "channels": result.channels,
    }
    if rank == 0:
        (folder / RESULT).write_text(json.dumps(out, indent=1, default=float) + "\n")
    return out


def launch_command(spec_path: Path, processes: int) -> list[str]:
    """`accelerate launch` of `processes` processes on this machine, each training on `spec_path` (through
    this interpreter: a worker need not have the venv's bin on its PATH)."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "0",
        "-m",
        "hominem_pipeline.core.policy.launch",
        str(spec_path),
    ]


def run_launched(spec_path: Path, processes: int, *, device: str = "auto") -> Any:
    """Train on `spec_path` in `processes` processes (`launch_command`) and return the trainer's
    `AdapterTraining`, as rank 0 wrote it. Rank 0's log lines (its progress) come through this process's
    log; a failed launch raises with the end of what the processes printed. On a CPU the cores are
    shared out (each process gets cores / processes threads); with GPUs each process takes the GPU of its
    rank, so `processes` may not exceed the GPUs torch sees (`device: cpu` keeps them all on the CPU; `mps` is
    refused, and `auto` on a Mac trains them on the CPU)."""
    import torch

    from hominem_pipeline.core.config.project import check_processes_on
    from hominem_pipeline.core.lm.device import cpu_threads_each
    from hominem_pipeline.core.policy.lora import AdapterTraining

    if processes < 2:
        raise ValueError(f"run_launched needs 2 or more processes, not {processes}; one trains in this process")
    check_processes_on(device, processes)
    env = {**os.environ}
    gpus = torch.cuda.device_count() if device != "cpu" and torch.cuda.is_available() else 0
    if gpus and processes > gpus:
        raise ValueError(
            f"runtime.train_processes is {processes}, but torch sees {gpus} GPU(s) here and each process takes one; "
            f"set it to at most {gpus}, or runtime.device: cpu to train on the CPU"
        )
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["OMP_NUM_THREADS"] = str(cpu_threads_each(processes))
    result = Path(spec_path).parent / RESULT
    result.unlink(missing_ok=True)
    tail: deque[str] = deque(maxlen=60)
    log.info(
        "training in %d processes (accelerate launch, %s)",
        processes,
        f"{gpus} GPUs" if gpus else f"{env['OMP_NUM_THREADS']} CPU threads each",
    )
    proc = subprocess.Popen(
        launch_command(spec_path, processes),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            tail.append(line.rstrip())
            if " rank 0 " in line:  # the launched processes' own log lines (launch.main's format)
                log.info("%s", line.rstrip().split(" rank 0 ", 1)[1])
        code = proc.wait()
    except BaseException:
        os.killpg(proc.pid, 15)
        proc.wait()
        raise
    if code or not result.is_file():
        raise RuntimeError(
            f"training in {processes} processes failed (exit {code}); the last lines:\n" + "\n".join(tail)
        )
    out = json.loads(result.read_text())
    return AdapterTraining(
        out["metrics"], out["base_checksum"], out["history"], out["channel_contributions"], out["channels"]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", type=Path, help="SPEC.json written by write_spec")
    args = parser.parse_args(argv)
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(
        level=logging.INFO if rank == "0" else logging.WARNING,
        format="%(asctime)s rank " + rank + " %(message)s",
        datefmt="%H:%M:%S",
    )
    train(args.spec)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
