"""The dual-channel training loop: `DualTrainer` sets the model, the data and the optimizers up, `step`
trains one optimizer step (its micro-batches in `_micro_batch`), `fit` runs the steps and `result`
sums them up. The bookkeeping is one `StepRecord` per step; the run's totals are sums over them."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.config import PolicyConfig
from hominem_pipeline.core.policy.dual.labels import pair_labels
from hominem_pipeline.core.policy.dual.monitor import CHANNELS, ChannelMonitor, optimizer_step
from hominem_pipeline.core.policy.dual.reference import (
    load_reference_cache,
    load_shipped_reference,
    reference_logps,
    save_reference_cache,
)
from hominem_pipeline.core.policy.dual.samplers import batch_rows, cycle
from hominem_pipeline.core.policy.losses import (
    DualChannelLoss,
    DualLossInputs,
    DualLossWeights,
    SafetyGate,
    dual_channel_loss,
)
from hominem_pipeline.core.policy.sequences import encode, pair_sequences, sequence_logps

if TYPE_CHECKING:
    from hominem_pipeline.core.policy.lora import AdapterTraining
    from hominem_pipeline.core.reward.model import RewardModel

log = logging.getLogger(__name__)

GATED = ("skipped", "downweighted", "inverted")


@dataclass(frozen=True)
class DualStart:
    """Where the adapter starts and trains, and the reference log-probabilities it reads.

    Args:
        student: the base student's folder.
        init_adapter: an adapter to train on from (an online update of the live one) instead of a fresh one;
            the reference stays the base (adapter off).
        people_start: (the shipped features folder, the key of the people's training pairs): a fresh adapter
            starts from the people's start shipped there where it fits (`people_start.load_people_start`; the
            channels' `start` says).
        device: where it trains (`lora.lora_student`; None: a launched process's own device, else
            `runtime.device`'s auto).
        reference_cache: a file of the base's log-probabilities of sequences, read at the start and written
            back at the end (online updates train on many of the same pairs each time).
        shipped_reference: the project's shipped features folder, whose reference log-probabilities of the
            people's pairs (`ship_reference`) are read, never written.
    """

    student: Path
    init_adapter: Path | None = None
    people_start: tuple[Path, str] | None = None
    device: Any = None
    reference_cache: Path | None = None
    shipped_reference: Path | None = None


@dataclass(frozen=True)
class DualBatching:
    """How each step's rows are drawn, where they differ from `policy.dual`'s mixing.

    Args:
        pair_sampler: `pair_sampler(n)` gives the rows of the pairs for a batch of `n` (the replay buffer's
            `batches`); None: every pair once per pass, reshuffled.
        memory_per_step: that many memory rows beside each step's `batch_size` pair rows, instead of
            `policy.dual`'s mixing (an online update rehearses every memory row this way).
        extra_pair_rows: that many pair rows per step beside the batch's (an online update's dimension pairs,
            which its `pair_sampler` draws).
    """

    pair_sampler: Callable[[int], Sequence[int]] | None = None
    memory_per_step: int | None = None
    extra_pair_rows: int = 0


@dataclass
class StepRecord:
    """One optimizer step's figures, summed over its micro-batches (losses as the batch's means)."""

    loss: float = 0.0
    sft: float = 0.0
    memory: float = 0.0
    reward: float = 0.0
    skipped: int = 0
    downweighted: int = 0
    inverted: int = 0
    correct: int = 0  # pairs whose implicit reward margin is above 0
    margin: float = 0.0  # their margins' sum
    pair_rows: int = 0  # rows this process trained on
    memory_rows: int = 0


class DualTrainer:
    """One LoRA trained on both channels; see the package's docstring for the loss and the reference.

    Args:
        pairs: prompt, chosen, rejected and, for teacher-sourced labels, chosen_reward_intensity and
            chosen_safety_score (an optional `weight` multiplies a pair's intensity).
        memory: prompt and response (`memory.read_memory_rows`).
        start: where it starts and trains (`DualStart`).
        cfg: the `policy` settings.
        seed: seeds the adapter's initialisation and the batches.
        reward_model: scores the pairs' chosen replies where `policy.dual` takes intensity or safety from it.
        batching: how each step's rows are drawn (`DualBatching`).
    """

    def __init__(
        self,
        pairs: pd.DataFrame,
        memory: pd.DataFrame,
        *,
        start: DualStart,
        cfg: PolicyConfig,
        seed: int,
        reward_model: RewardModel | None = None,
        batching: DualBatching = DualBatching(),
    ):
        from hominem_pipeline.core.policy.distributed import ranks as launched

        self.cfg, self.dual, self.batching = cfg, cfg.dual, batching
        self.n_pairs, self.n_memory = len(pairs), len(memory)
        if self.n_pairs == 0 and self.n_memory == 0:
            raise ValueError(
                "dual training needs preference pairs or memory rows; preference_pairs produced none and no "
                "memory file has rows"
            )
        self.ranks = launched()  # one process, or those `accelerate launch` started: each trains its share of a batch
        # scored once, by the first process (the only one a launch gives the reward model), and shared
        self.labels = self.ranks.share(pair_labels(pairs, self.dual, reward_model) if self.ranks.main else None)
        self.gate = SafetyGate.from_config(cfg.safety_gate)
        torch.manual_seed(seed)
        rng = random.Random(seed)
        self._model(start)
        self.pair_seqs = pair_sequences(self.tokenizer, pairs, cfg.max_length)
        self.memory_seqs = [
            encode(self.tokenizer, r.prompt, r.response, cfg.max_length, end_of_turn=self.dual.memory_stop)
            for r in memory.itertuples()
        ]
        self.n_pair, self.n_mem = self._rows_per_batch()
        self.pair_order, self.memory_order = cycle(self.n_pairs, rng), cycle(self.n_memory, rng)
        self.reference_file = start.reference_cache
        self.shipped = load_shipped_reference(start.shipped_reference, self.before)
        # the base's log-probability of each sequence used so far, by content
        self.ref_cache = {**self.shipped, **load_reference_cache(start.reference_cache, self.before)}
        self.known = len(self.ref_cache)
        self._optimizers()
        self.records: list[StepRecord] = []

    def _model(self, start: DualStart) -> None:
        """The student with its LoRA (fresh, the people's start, or `init_adapter`), set as TRL's DPO sets it."""
        from trl.trainer.utils import add_fused_lm_head, disable_dropout_in_model

        from hominem_pipeline.core.policy.lora import lora_student

        device = start.device if start.device is not None else self.ranks.device
        self.model, self.tokenizer, self.before = lora_student(start.student, self.cfg, start.init_adapter, device)
        self.started_from = f"the adapter {start.init_adapter}" if start.init_adapter is not None else "a fresh LoRA"
        if start.people_start is not None and start.init_adapter is None:
            from hominem_pipeline.core.policy.people_start import load_people_start

            folder, key = start.people_start
            self.started_from = load_people_start(self.model, folder, self.before, self.cfg.lora, key)
            log.info("dual training starts from %s", self.started_from)
        add_fused_lm_head(self.model.get_base_model())
        disable_dropout_in_model(self.model)  # as TRL's DPO does by default: policy and reference see the same net
        self.pad = self.tokenizer.pad_token_id

    def _rows_per_batch(self) -> tuple[int, int]:
        """(pair rows, memory rows) each micro-batch draws."""
        cfg, b = self.cfg, self.batching
        n_pair, n_mem = batch_rows(self.dual, cfg.batch_size, self.n_memory, self.n_pairs)
        if b.memory_per_step is not None and self.n_memory:
            n_pair, n_mem = (cfg.batch_size if self.n_pairs else 0), min(b.memory_per_step, self.n_memory)
        if self.n_pairs:
            n_pair += b.extra_pair_rows
        return n_pair, n_mem

    def _optimizers(self) -> None:
        """One AdamW on the summed gradient, or one per channel (its own moments) at its own rate; each with the
        linear decay to 0 over the run."""
        cfg, ch = self.cfg, self.dual.channels
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.ranks.broadcast(self.params)  # one start for all
        self.lr_factors = {"memory": ch.memory_lr_factor, "reward": ch.reward_lr_factor}
        if ch.split:
            self.optimizers = {
                c: torch.optim.AdamW(self.params, lr=cfg.learning_rate * f, weight_decay=0.0)
                for c, f in self.lr_factors.items()
            }
        else:
            self.optimizers = {"both": torch.optim.AdamW(self.params, lr=cfg.learning_rate, weight_decay=0.0)}
        self.schedulers = [torch.optim.lr_scheduler.LambdaLR(o, self.decay) for o in self.optimizers.values()]
        self.monitor = ChannelMonitor(ch.max_share)

    def decay(self, step: int) -> float:
        """The learning rate's factor after `step` steps."""
        return max(0.0, 1 - step / self.cfg.max_steps)

    def _draw(self) -> tuple[list[int], list[int], int]:
        """(pair rows, memory rows) of this process's share of the next micro-batch, and how many rows were drawn
        for all processes (every process draws the same batch; each takes its rows)."""
        sampler = self.batching.pair_sampler
        if sampler is not None:
            pi = [int(i) for i in sampler(self.n_pair)]
        else:
            pi = [next(self.pair_order) for _ in range(self.n_pair)]
        mi = [next(self.memory_order) for _ in range(self.n_mem)]
        drawn = len(pi) + len(mi)
        return self.ranks.shard(pi), self.ranks.shard(mi), drawn

    def _losses(self, pi: list[int], mi: list[int]) -> tuple[DualChannelLoss, torch.Tensor]:
        """The dual-channel loss of the rows, and each pair's implicit reward margin."""
        cfg, dual, n = self.cfg, self.dual, len(pi)
        seqs = (
            [self.pair_seqs[i][0] for i in pi] + [self.pair_seqs[i][1] for i in pi] + [self.memory_seqs[i] for i in mi]
        )
        # pairs and memory rows in separate passes: a short memory row is not padded to a long pair's length
        parts = [sequence_logps(self.model, part, self.pad) for part in (seqs[: 2 * n], seqs[2 * n :]) if part]
        logps, counts = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        device = logps.device
        zeros = torch.zeros(len(mi), device=device)
        chosen, rejected, mem = logps[:n], logps[n : 2 * n], logps[2 * n :]
        anchored = dual.memory_margin is not None and bool(mi)
        ref = reference_logps(self.model, seqs[: 2 * n + (len(mi) if anchored else 0)], self.ref_cache, self.pad)
        ref = ref.to(device)
        ref_chosen, ref_rejected = ref[:n], ref[n : 2 * n]
        tokens = counts.clamp(min=1)
        nll = -torch.cat([chosen / tokens[:n], mem / tokens[2 * n :]])
        # the base's mean token NLL of each memory row (pair rows' entries are not read)
        memory_ref_nll = torch.cat([zeros.new_zeros(n), -ref[2 * n :] / tokens[2 * n :]]) if anchored else None
        ones = np.ones(len(mi))
        inputs = DualLossInputs(
            torch.cat([chosen, zeros]),
            torch.cat([rejected, zeros]),
            torch.cat([ref_chosen, zeros]),
            torch.cat([ref_rejected, zeros]),
            nll,
            torch.tensor(np.concatenate([self.labels.intensity[pi], ones]), dtype=torch.float32, device=device),
            torch.tensor(np.concatenate([self.labels.safety[pi], ones]), dtype=torch.float32, device=device),
            pair_mask=torch.tensor([True] * n + [False] * len(mi), device=device),
            memory_ref_nll=memory_ref_nll,
        )
        weights = DualLossWeights(
            beta=cfg.beta,
            w_sft=dual.sft_weight,
            w_reward=dual.reward_weight,
            w_memory=dual.memory_weight,
            memory_margin=dual.memory_margin or 0.0,
        )
        out = dual_channel_loss(inputs, weights, self.gate)
        margins = cfg.beta * ((chosen - ref_chosen) - (rejected - ref_rejected)).detach()
        return out, margins

    def _backward(self, out: DualChannelLoss, scale: float, grads: dict[str, list[torch.Tensor]] | None) -> None:
        """The channels' gradients: summed in the parameters, or each channel's on its own into `grads`."""
        balance = self.monitor.balance
        channel_losses = {"memory": out.sft * balance["memory"], "reward": out.reward * balance["reward"]}
        if grads is None:
            (sum(channel_losses.values()) * scale).backward()
            return
        for c, loss in channel_losses.items():
            if loss.requires_grad:
                found = torch.autograd.grad(loss * scale, self.params, retain_graph=True, allow_unused=True)
                for acc, g in zip(grads[c], found):
                    if g is not None:
                        acc.add_(g)

    def _micro_batch(self, record: StepRecord, grads: dict[str, list[torch.Tensor]] | None) -> None:
        pi, mi, drawn = self._draw()
        if not pi and not mi:  # more processes than rows: this one adds nothing to the step
            return
        # the loss is a mean over the rows: this process's mean weighted by its share of the batch (times the
        # processes, whose figures and gradients are averaged) makes the average the whole batch's mean
        scale = self.ranks.world * (len(pi) + len(mi)) / drawn / self.cfg.gradient_accumulation_steps
        out, margins = self._losses(pi, mi)
        self._backward(out, scale, grads)
        record.loss += out.total.detach().item() * scale
        record.sft += out.sft.detach().item() * scale
        record.memory += out.memory.detach().item() * scale
        record.reward += out.reward.detach().item() * scale
        record.correct += int((margins > 0).sum())
        record.margin += float(margins.sum())
        for key in GATED:
            setattr(record, key, getattr(record, key) + getattr(out, key))
        record.pair_rows += len(pi)
        record.memory_rows += len(mi)

    def _reduce(self, record: StepRecord, grads: dict[str, list[torch.Tensor]] | None) -> StepRecord:
        """With several processes: the step's gradient and figures over all of them (the mean; counts summed)."""
        ranks = self.ranks
        if ranks.world == 1:
            return record
        if grads is None:
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            ranks.average([p.grad for p in self.params])
        else:
            ranks.average([g for c in CHANNELS for g in grads[c]])
        figures = asdict(record)
        reduced = ranks.mean({k: figures[k] for k in ("loss", "sft", "memory", "reward")}) | ranks.total(
            {k: figures[k] for k in (*GATED, "correct", "margin")}
        )
        return StepRecord(**reduced, pair_rows=record.pair_rows, memory_rows=record.memory_rows)

    def step(self, step: int) -> dict[str, Any]:
        """One optimizer step over `gradient_accumulation_steps` micro-batches; its history entry."""
        cfg, ch = self.cfg, self.dual.channels
        measured = bool(ch.monitor_every) and (step - 1) % ch.monitor_every == 0
        grads = None
        if ch.split or measured:
            grads = {c: [torch.zeros_like(p) for p in self.params] for c in CHANNELS}
        record = StepRecord()
        for _ in range(cfg.gradient_accumulation_steps):
            self._micro_batch(record, grads)
        record = self._reduce(record, grads)
        shares = self.monitor.measure(grads) if measured else None
        grad_norm = optimizer_step(self.params, self.optimizers, grads)
        for scheduler in self.schedulers:
            scheduler.step()
        self.records.append(record)
        seen = self.n_pair * cfg.gradient_accumulation_steps
        entry = {
            "step": step,
            "loss": record.loss,
            "sft": record.sft,
            "memory": record.memory,
            "reward": record.reward,
            "grad_norm": grad_norm,
            "learning_rate": cfg.learning_rate * self.decay(step),
            "rewards/accuracies": record.correct / seen if seen else float("nan"),
            "rewards/margins": record.margin / seen if seen else float("nan"),
            **{f"gate/{k}": getattr(record, k) for k in GATED},
        }
        if shares:
            entry |= {f"share/{c}": s for c, s in shares.items()}
            entry |= {f"balance/{c}": b for c, b in self.monitor.balance.items()}
        return entry

    def fit(self, on_log: Callable[[int, dict[str, float]], None] | None = None) -> list[dict[str, Any]]:
        """`max_steps` steps; the history, one entry per step (each also given to `on_log`)."""
        progress = Progress("dual-channel training", self.cfg.max_steps, log, unit="steps")
        self.model.train()
        history = []
        for step in range(1, self.cfg.max_steps + 1):
            entry = self.step(step)
            history.append(entry)
            if on_log:
                on_log(step, {k: v for k, v in entry.items() if k != "step"})
            shown = {"memory": f"{entry['memory']:.3f}"} if self.n_mem else {}
            progress.advance(
                1, loss=f"{entry['loss']:.4f}", sft=f"{entry['sft']:.3f}", **shown, reward=f"{entry['reward']:.3f}"
            )
        return history

    def save(self, out_dir: Path) -> int:
        """The adapter (PEFT format, with the tokenizer) and the reference cache, written by the first process
        alone (every process holds the same adapter). Returns the adapter's trainable parameters."""
        from hominem_pipeline.core.policy.lora import save_adapter

        if self.ranks.main:
            trainable = save_adapter(self.model, self.tokenizer, out_dir, self.before)
            if self.reference_file is not None:
                kept = {k: v for k, v in self.ref_cache.items() if k not in self.shipped}
                save_reference_cache(self.reference_file, self.before, kept)
        else:
            trainable = sum(p.numel() for p in self.params)
        self.ranks.barrier()
        return trainable

    def result(self, history: list[dict[str, Any]], seconds: float, trainable: int) -> AdapterTraining:
        """The run summed up: its metrics, each channel's share of the loss, and the channels' accounting."""
        from hominem_pipeline.core.policy.lora import AdapterTraining

        totals = {f.name: sum(getattr(r, f.name) for r in self.records) for f in fields(StepRecord)}
        rows = self.ranks.total({"pair_rows": totals["pair_rows"], "memory_rows": totals["memory_rows"]})
        totals.update({k: int(round(v)) for k, v in rows.items()})
        channel_sum = totals["sft"] + totals["reward"]
        last = history[-1]
        metrics = {
            "steps": len(history),
            "train_seconds": seconds,
            "seconds_per_step": seconds / len(history),
            "final_loss": last["loss"],
            "final_reward_accuracy": last["rewards/accuracies"],
            "final_reward_margin": last["rewards/margins"],
            "trainable_parameters": trainable,
            "processes": self.ranks.world,
        }
        contributions = {c: totals[c] / channel_sum if channel_sum else 0.0 for c in ("sft", "reward")}
        channels = {
            "sft_loss_sum": totals["sft"],
            "memory_loss_sum": totals["memory"],
            "reward_loss_sum": totals["reward"],
            "pair_rows": totals["pair_rows"],
            "memory_rows": totals["memory_rows"],
            "memory_rows_per_batch": self.n_mem,
            "pairs_available": self.n_pairs,
            "memory_rows_available": self.n_memory,
            "gated": {k: totals[k] for k in GATED},
            "reference_sequences": len(self.ref_cache) - self.known,  # each scored by the base once
            "lr_factors": self.lr_factors,
            **self.monitor.summary(),
            "start": self.started_from,
        }
        return AdapterTraining(metrics, self.before, history, contributions, channels)


def train_dual_adapter(
    pairs: pd.DataFrame,
    memory: pd.DataFrame,
    *,
    start: DualStart,
    cfg: PolicyConfig,
    out_dir: Path,
    seed: int,
    reward_model: RewardModel | None = None,
    batching: DualBatching = DualBatching(),
    on_log: Callable[[int, dict[str, float]], None] | None = None,
) -> AdapterTraining:
    """Train a LoRA adapter with the dual-channel loss (`DualTrainer`, whose Args these are, with `out_dir`, where
    the adapter is saved in PEFT format with the tokenizer, and `on_log`, called with each step's figures)."""
    trainer = DualTrainer(pairs, memory, start=start, cfg=cfg, seed=seed, reward_model=reward_model, batching=batching)
    started = time.monotonic()
    history = trainer.fit(on_log)
    seconds = time.monotonic() - started
    return trainer.result(history, seconds, trainer.save(out_dir))
