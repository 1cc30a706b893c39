"""Training across processes: the `dual` loop data-parallel under `accelerate launch --multi_gpu
--num_processes N` (or torchrun), which set RANK, WORLD_SIZE and the rendezvous in the environment.

Every process draws the same batch (the same seed, the same sampler) and trains on its share of its
rows; the gradients are averaged over all processes before each optimizer step, so every process holds
the same adapter, and rank 0 alone writes it. Gloo on CPUs, NCCL on GPUs (each process on the GPU of its
LOCAL_RANK). A plain run is one process: nothing is reduced and nothing waits.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Ranks:
    world: int = 1
    rank: int = 0
    device: Any = None  # the device this process trains on under a launcher (None: the caller's choice)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def shard(self, rows: Sequence[Any]) -> list[Any]:
        """This process's share of a batch's rows (every world-th, from its rank)."""
        return list(rows[self.rank :: self.world])

    def average(self, tensors: Sequence[torch.Tensor]) -> None:
        """Each tensor replaced, in place, by its mean over the processes (one all-reduce for them all)."""
        if self.world == 1 or not tensors:
            return
        import torch.distributed as dist

        flat = torch.cat([t.reshape(-1) for t in tensors])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat.div_(self.world)
        offset = 0
        for t in tensors:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()

    def broadcast(self, tensors: Sequence[torch.Tensor]) -> None:
        """Rank 0's values of the tensors in every process (the same start, whatever each one drew)."""
        if self.world == 1:
            return
        import torch.distributed as dist

        for t in tensors:
            dist.broadcast(t.data, src=0)

    def share(self, value: Any) -> Any:
        """Rank 0's `value` (any picklable object) in every process; the others pass anything."""
        if self.world == 1:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]

    def total(self, values: dict[str, float]) -> dict[str, float]:
        """Figures summed over the processes (counts of rows)."""
        if self.world == 1:
            return values
        import torch.distributed as dist

        keys = sorted(values)
        t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return dict(zip(keys, t.tolist()))

    def mean(self, values: dict[str, float]) -> dict[str, float]:
        """Figures averaged over the processes (what a step's record reports)."""
        return {k: v / self.world for k, v in self.total(values).items()}

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()


def process_device() -> torch.device:
    """The device a launched process trains on: the GPU of its LOCAL_RANK where torch sees CUDA (the launcher
    hides the GPUs for `runtime.device: cpu`), else the CPU. Never the Apple GPU: torch.distributed has no
    backend for it (`launch.run_launched` refuses `mps` with more than one process)."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def ranks() -> Ranks:
    """The processes this one trains with: from the launcher's environment (the process group started on
    first use), else one process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Ranks()
    import torch.distributed as dist

    rank, device = int(os.environ.get("RANK", "0")), process_device()
    cuda = device.type == "cuda"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        torch.cuda.set_device(device)
    return Ranks(world, rank, device)
