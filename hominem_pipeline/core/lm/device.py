"""One device policy (`runtime.device`) for every network the project runs: the local teacher, the
reward model's frozen passes (backbone, guards, the people's score's encoder) and its scoring, the
evaluation's and the gate's replies.

`auto` takes a CUDA GPU when torch sees one, else the Apple GPU (`mps`) when torch sees one, else the
CPU; `cpu`, `cuda` and `mps` force one (a GPU torch does not see is an error naming the fix). The
policy trainers train where it says too (`trl_args.trl_run_args`, `policy.lora.lora_student`).

The dtype rules: weights stay fp32 on every device (bf16 changes scores beyond the last bits, and no
tolerance for that has been measured yet), and nothing in float64 goes to a device: sums and fits in
float64 happen on the CPU, after the network's outputs come back (the Apple GPU has no float64). On a
Mac the package sets PYTORCH_ENABLE_MPS_FALLBACK=1 (unless set), so an operation the Apple GPU lacks runs
on the CPU instead of failing. The setting is runtime, not part of any version: a GPU makes a stage
faster, and its outputs equal the CPU's up to float rounding. Code that runs a network moves its inputs
to the network's device and its outputs back to the CPU, so nothing else changes with the device.
"""

from __future__ import annotations

import functools
import os
from typing import Any

DEVICES = ("auto", "cpu", "cuda", "mps")


def mps_available() -> bool:
    """Whether torch sees an Apple GPU (Apple silicon, macOS 12.3 or later, an arm64 build of torch)."""
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


@functools.lru_cache(maxsize=None)
def resolve_device(setting: str | None = "auto") -> Any:
    """The torch device `runtime.device` names (None: auto)."""
    import torch

    setting = setting or "auto"
    if setting not in DEVICES:
        raise ValueError(f"runtime.device {setting!r} is not one of {', '.join(DEVICES)}")
    if setting == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "runtime.device is cuda, but torch sees no CUDA GPU here (a CPU build of torch, or no driver); "
            "set runtime.device: auto or cpu (`--set runtime.device=cpu`)"
        )
    if setting == "mps" and not mps_available():
        raise ValueError(
            "runtime.device is mps, but torch sees no Apple GPU here (mps needs Apple silicon, macOS 12.3 or later "
            "and an arm64 build of torch); set runtime.device: auto or cpu (`--set runtime.device=cpu`)"
        )
    if setting == "auto":
        setting = "cuda" if torch.cuda.is_available() else "mps" if mps_available() else "cpu"
    return torch.device(setting)


def cpu_threads_each(processes: int) -> int:
    """CPU threads for each of `processes` processes sharing this machine: their even share of the cores this process
    may run on (its affinity; every core where the platform has none), at least 1. Oversubscribed, torch's OpenMP
    threads wait on each other and small operations run slower than on fewer threads."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // max(1, processes))


def describe_device(device: Any) -> str:
    """What a stage's metadata and MLflow params say: `cpu (2 threads)`, `cuda:0 (NVIDIA H100 80GB HBM3)` or
    `mps (Apple GPU)`."""
    import torch

    if device.type == "mps":
        return "mps (Apple GPU)"
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return f"cpu ({torch.get_num_threads()} threads)"


def place(model: Any, device: Any) -> Any:
    """`model` on `device` (fp32 everywhere: see the module's note)."""
    return model.to(device) if device is not None else model
