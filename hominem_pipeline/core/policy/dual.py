"""The dual-channel trainer: one LoRA, two channels, one short training loop.

Each step takes a batch of preference rows (prompt, chosen, rejected, intensity, safety) and memory rows
(instruction, response) and minimises `losses.dual_channel_loss`: the memory channel is the next-token
loss of every chosen reply and memory row, the reward channel the DPO loss of every pair, weighted by
its reward intensity; the safety gate skips, down-weights or inverts each pair by its safety score. The
policy's chosen and rejected sequences go through the model in one forward pass, the memory rows in
another (they are short, and would be padded to the pairs' length); the reference
(the same model with the adapter switched off) scores the pairs without gradients, as TRL's DPO does,
with TRL's fused LM head and with dropout off (TRL's DPO default), so a step costs what TRL's DPO step
costs. With `memory_margin` set the reference also scores the memory rows, which are then anchored
to it (`losses.dual_channel_loss`). TRL's trainers take no per-example weights, hence this loop; its
optimizer, schedule and clipping are the Hugging Face Trainer's defaults (AdamW, linear decay,
gradient norm clipped at 1)."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from hominem_pipeline.core.common.files import write_text_atomic
from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.config import DualConfig, PolicyConfig
from hominem_pipeline.core.policy.losses import SafetyGate, dual_channel_loss
from hominem_pipeline.core.policy.sequences import (
    encode,
    pair_sequences,
    sequence_logps,
)

log = logging.getLogger(__name__)

MAX_GRAD_NORM = 1.0


def sequence_key(seq: tuple[list[int], int]) -> str:
    """A sequence's identity for the reference cache: its tokens and where its reply starts."""
    ids, begin = seq
    return hashlib.blake2b(
        np.asarray(ids, dtype=np.int64).tobytes() + begin.to_bytes(4, "little"), digest_size=12
    ).hexdigest()


def reference_logps(
    model: Any, seqs: Sequence[tuple[list[int], int]], cache: dict[str, float], pad_id: int
) -> torch.Tensor:
    """The reference's (the base's: adapter off, no dropout) summed reply log-probability of each
    sequence, computed once per sequence and kept in `cache` by its content: the reference never
    changes, and a pair is drawn several times over a run (and, with a `reference_cache` file, again in
    later runs on the same base)."""
    keys = [sequence_key(s) for s in seqs]
    todo = [k for k, key in enumerate(keys) if key not in cache]
    if todo:
        with torch.no_grad(), model.disable_adapter():
            values, _ = sequence_logps(model, [seqs[k] for k in todo], pad_id)
        cache.update({keys[k]: v for k, v in zip(todo, values.tolist())})
    return torch.tensor([cache[key] for key in keys], dtype=torch.float32)


def load_reference_cache(path: Path | None, base: str) -> dict[str, float]:
    """The reference log-probabilities saved at `path` for the base with checksum `base` (empty when
    there are none, or they belong to another base)."""
    try:
        saved = json.loads(Path(path).read_text()) if path is not None else {}
    except (OSError, ValueError):
        saved = {}
    return dict(saved.get("logps", {})) if saved.get("base") == base else {}


def shipped_reference_file(folder: Path, base: str) -> Path:
    """Where a project ships the reference log-probabilities of its people's pairs for the base with checksum
    `base`."""
    return Path(folder) / f"{base[:16]}-reference.npz"


def load_shipped_reference(folder: Path | None, base: str) -> dict[str, float]:
    """The reference log-probabilities shipped in `folder` for this base (empty when there are none)."""
    path = None if folder is None else shipped_reference_file(folder, base)
    if path is None or not path.is_file():
        return {}
    with np.load(path) as saved:
        return dict(zip(saved["keys"].tolist(), saved["logps"].astype(np.float64).tolist()))


REFERENCE_CACHE = (
    "cache/reference_logps.json"  # under the data folder: shared by the daily dual training and online updates
)
REFERENCE_CACHE_MAX = 50_000  # sequences kept, the newest


def save_reference_cache(path: Path, base: str, cache: dict[str, float]) -> None:
    write_text_atomic(path, json.dumps({"base": base, "logps": dict(list(cache.items())[-REFERENCE_CACHE_MAX:])}))


CHANNELS = ("memory", "reward")


class ChannelMonitor:
    """The dominance monitor (design 001 Phase 5.5): on a measured step, each channel's share of the
    gradient, |g_c| / (|g_memory| + |g_reward|), of the channels' losses as weighted then. With `max_share`,
    a channel above it is scaled down to it (its loss weighted by a balance factor from then on, this
    step's gradient too): share' = max_share exactly on the step it was measured."""

    def __init__(self, max_share: float | None):
        self.max_share = max_share
        self.balance = {c: 1.0 for c in CHANNELS}
        self.shares: list[dict[str, float]] = []
        self.rebalanced = 0

    def measure(self, grads: dict[str, list[torch.Tensor]]) -> dict[str, float]:
        norms = {c: float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads[c]))) for c in CHANNELS}
        total = sum(norms.values())
        share = {c: norms[c] / total if total else 0.0 for c in CHANNELS}
        top = max(CHANNELS, key=share.get)
        other = next(c for c in CHANNELS if c != top)
        if self.max_share is not None and share[top] > self.max_share and norms[other] > 0:
            scale = self.max_share / (1 - self.max_share) * norms[other] / norms[top]
            self.balance[top] *= scale
            for g in grads[top]:
                g.mul_(scale)
            self.rebalanced += 1
            log.info(
                "dual training: the %s channel had %.0f%% of the gradient (max_share %.0f%%): its loss "
                "now weighs %.3g",
                top,
                100 * share[top],
                100 * self.max_share,
                self.balance[top],
            )
        self.shares.append(share)
        return share

    def summary(self) -> dict[str, Any]:
        """For the adapter's METADATA `channels`: the mean share over the measured steps, the steps measured
        and rebalanced, the balance factors at the end."""
        mean = {c: float(np.mean([s[c] for s in self.shares])) for c in CHANNELS} if self.shares else None
        return {
            "gradient_share": mean,
            "gradient_share_max": {c: float(max(s[c] for s in self.shares)) for c in CHANNELS}
            if self.shares
            else None,
            "measured_steps": len(self.shares),
            "rebalanced_steps": self.rebalanced,
            "max_share": self.max_share,
            "balance": dict(self.balance),
        }


def _optimizer_step(
    params: list[torch.Tensor],
    optimizers: dict[str, torch.optim.Optimizer],
    grads: dict[str, list[torch.Tensor]] | None,
) -> float:
    """One step of each optimizer (`both`: on the summed gradient; a channel's: on its own), each gradient
    clipped to MAX_GRAD_NORM; `grads` None: the gradient backward() left in the parameters. Returns the norm
    of the summed gradient before clipping (what GVS reads)."""
    if grads is None:
        norm = float(torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM))
        optimizers["both"].step()
        optimizers["both"].zero_grad(set_to_none=True)
        return norm
    norm = float(torch.sqrt(sum(((a + b).float() ** 2).sum() for a, b in zip(grads["memory"], grads["reward"]))))
    for name, optimizer in optimizers.items():
        for p, *gs in zip(params, *(grads[c] for c in (CHANNELS if name == "both" else (name,)))):
            p.grad = sum(gs)
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return norm


def batch_rows(cfg: DualConfig, batch_size: int, n_memory: int, n_pairs: int) -> tuple[int, int]:
    """(pair rows, memory rows) of each batch. The memory share: fixed, `memory_fraction`; availability,
    the memory rows' share of all rows, at most `memory_fraction`. `memory_rows: share` takes that share
    of `batch_size` from the pairs; `extra` keeps `batch_size` pair rows and adds that share of them as
    memory rows. A channel without data gets no rows; while both have data, each gets at least one row."""
    if n_memory == 0:
        return (batch_size if n_pairs else 0), 0
    if n_pairs == 0:
        return 0, batch_size
    share = cfg.memory_fraction if cfg.mixing == "fixed" else min(cfg.memory_fraction, n_memory / (n_memory + n_pairs))
    if share == 0:
        return batch_size, 0
    if cfg.memory_rows == "extra":
        return batch_size, max(1, round(batch_size * share))
    n_mem = int(min(batch_size - 1, max(1, round(batch_size * share))))
    return batch_size - n_mem, n_mem


def _cycle(n: int, rng: random.Random) -> Iterator[int]:
    """Indices 0..n-1, reshuffled on every pass."""
    while True:
        order = list(range(n))
        rng.shuffle(order)
        yield from order


def mixed_sampler(
    n_ranked: int, n_people: int, people_share: float, seed: int, ranked: Callable[[int], Sequence[int]] | None = None
) -> Callable[[int], list[int]]:
    """A `pair_sampler` over pairs laid out as `n_ranked` ranked candidates' pairs, then `n_people`
    people's pairs: each batch of n takes `people_share` of its rows from the people's pairs (each once
    per pass, reshuffled; the fraction carried from batch to batch, so the share is exact over a run) and
    the rest from the ranked ones (by `ranked(k)`, their indices 0..n_ranked-1; None: each once per
    pass). With one kind absent every row is the other's."""
    rng = random.Random(seed)
    people, own = _cycle(n_people, rng), _cycle(n_ranked, rng)
    share = 0.0 if n_people == 0 else 1.0 if n_ranked == 0 else people_share
    owed = 0.0

    def draw(n: int) -> list[int]:
        nonlocal owed
        owed += n * share
        k = min(n, int(owed + 1e-9))
        owed -= k
        rest = n - k
        first = [int(i) for i in ranked(rest)] if ranked is not None and rest else [next(own) for _ in range(rest)]
        return first + [n_ranked + next(people) for _ in range(k)]

    return draw


def beside_sampler(n_main: int, n_beside: int, beside: int, seed: int) -> Callable[[int], list[int]]:
    """A `pair_sampler` over pairs laid out as `n_main` pairs, then `n_beside` others: each batch of n takes
    `beside` rows from the others and n - beside from the main ones, each kind once per pass, reshuffled
    (an online update's dimension pairs beside its replay batch: `extra_pair_rows`)."""
    rng = random.Random(seed)
    main, other = _cycle(n_main, rng), _cycle(n_beside, rng)

    def draw(n: int) -> list[int]:
        if n_main + n_beside == 0:
            return []
        k = n if n_main == 0 else min(n, beside) if n_beside else 0
        return [next(main) for _ in range(n - k)] + [n_main + next(other) for _ in range(k)]

    return draw


@dataclass(frozen=True)
class PairLabels:
    intensity: np.ndarray  # per pair, after normalisation
    safety: np.ndarray
    raw_intensity_mean: float


def pair_labels(pairs: pd.DataFrame, cfg: DualConfig, reward_model: Any | None = None) -> PairLabels:
    """Each pair's reward intensity and safety score from the configured sources: the teacher's label of
    the chosen reply, the reward model's score of it, or (intensity only) the constant 1; a pair's optional
    `weight` column (the nudges' weights of an online update) multiplies its intensity."""
    if pairs.empty:
        return PairLabels(np.zeros(0), np.zeros(0), 1.0)
    scored: dict[str, np.ndarray] = {}
    if "reward_model" in (cfg.intensity_source, cfg.safety_source):
        if reward_model is None:
            raise ValueError(
                "policy.dual takes intensity or safety from the reward model, but none was given; set "
                "the sources to teacher"
            )
        scored = reward_model.raw_scores(list(pairs["prompt"]), list(pairs["chosen"]))
    if cfg.intensity_source == "constant":
        intensity = np.ones(len(pairs))
    elif cfg.intensity_source == "teacher":
        intensity = pairs["chosen_reward_intensity"].to_numpy(dtype=np.float64)
    else:
        intensity = np.asarray(scored["reward_intensity"], dtype=np.float64)
    safety = (
        pairs["chosen_safety_score"].to_numpy(dtype=np.float64)
        if cfg.safety_source == "teacher"
        else np.asarray(scored["safety_score"], dtype=np.float64)
    )
    if "weight" in pairs:
        intensity = intensity * pairs["weight"].to_numpy(dtype=np.float64)
    intensity = np.clip(intensity, 0.0, None)
    mean = float(intensity.mean())
    if cfg.normalize_intensity and mean > 0:
        intensity = intensity / mean
    return PairLabels(intensity, np.clip(safety, 0.0, 1.0), mean)


def train_dual_adapter(
    pairs: pd.DataFrame,
    memory: pd.DataFrame,
    *,
    student_path: Path,
    cfg: PolicyConfig,
    out_dir: Path,
    seed: int,
    reward_model: Any | None = None,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
    init_adapter: Path | None = None,
    pair_sampler: Callable[[int], Sequence[int]] | None = None,
    reference_cache: Path | None = None,
    memory_per_step: int | None = None,
    extra_pair_rows: int = 0,
    shipped_reference: Path | None = None,
    device: Any = None,
    people_start: tuple[Path, str] | None = None,
) -> dict[str, Any]:
    """Train a LoRA adapter with the dual-channel loss; saves it (PEFT format) with the tokenizer to `out_dir`.
    `init_adapter`: an adapter to train on from (an online update of the live one) instead of a fresh one; the
    reference stays the base (adapter off). `pair_sampler(n)`: the rows of `pairs` for a batch of `n` (the replay
    buffer's `batches`); None: every pair once per pass, reshuffled. `reference_cache`: a file of the base's
    log-probabilities of sequences, read at the start and written back at the end (online updates train on many of
    the same pairs each time). `memory_per_step`: that many memory rows beside each step's `batch_size` pair rows,
    instead of `policy.dual`'s mixing (an online update rehearses every memory row this way). `extra_pair_rows`:
    that many pair rows per step beside the batch's (an online update's dimension pairs, which its `pair_sampler`
    draws). `shipped_reference`: the project's shipped features folder, whose reference log-probabilities of the
    people's pairs (`ship_reference`) are read, never written. `device`: where it trains (`lora.lora_student`; None:
    a CUDA GPU where torch sees one). `people_start`: (the shipped features folder, the key of the people's training
    pairs): a fresh adapter starts from the people's start shipped there where it fits
    (`people_start.load_people_start`; channels' `start` says).

    `pairs` needs prompt, chosen, rejected and, for teacher-sourced labels, chosen_reward_intensity and
    chosen_safety_score; `memory` prompt and response (`memory.read_memory_rows`)."""
    from trl.trainer.utils import add_fused_lm_head, disable_dropout_in_model

    from hominem_pipeline.core.policy.distributed import ranks as launched
    from hominem_pipeline.core.policy.lora import (
        AdapterTraining,
        lora_student,
        save_adapter,
    )

    dual = cfg.dual
    n_pairs, n_memory = len(pairs), len(memory)
    if n_pairs == 0 and n_memory == 0:
        raise ValueError(
            "dual training needs preference pairs or memory rows; preference_pairs produced none and no "
            "memory file has rows"
        )
    ranks = launched()  # one process, or those `accelerate launch` started: each trains on its share of every batch
    # scored once, by the first process (the only one a launch gives the reward model), and shared
    labels = ranks.share(pair_labels(pairs, dual, reward_model) if ranks.main else None)
    gate = SafetyGate.from_config(cfg.safety_gate)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model, tokenizer, before = lora_student(
        student_path, cfg, init_adapter, device if device is not None else ranks.device
    )
    start = f"the adapter {init_adapter}" if init_adapter is not None else "a fresh LoRA"
    if people_start is not None and init_adapter is None:
        from hominem_pipeline.core.policy.people_start import load_people_start

        start = load_people_start(model, people_start[0], before, cfg.lora, people_start[1])
        log.info("dual training starts from %s", start)
    add_fused_lm_head(model.get_base_model())
    disable_dropout_in_model(model)  # as TRL's DPO does by default: policy and reference see the same network
    pad = tokenizer.pad_token_id
    pair_seqs = pair_sequences(tokenizer, pairs, cfg.max_length)
    memory_seqs = [
        encode(tokenizer, r.prompt, r.response, cfg.max_length, end_of_turn=dual.memory_stop)
        for r in memory.itertuples()
    ]
    n_pair, n_mem = batch_rows(dual, cfg.batch_size, n_memory, n_pairs)
    if memory_per_step is not None and n_memory:
        n_pair, n_mem = (cfg.batch_size if n_pairs else 0), min(memory_per_step, n_memory)
    if n_pairs:
        n_pair += extra_pair_rows
    pair_order, memory_order = _cycle(n_pairs, rng), _cycle(n_memory, rng)

    shipped = load_shipped_reference(shipped_reference, before)
    ref_cache = {
        **shipped,
        **load_reference_cache(reference_cache, before),
    }  # the base's log-probability of each sequence used so far, by content
    known = len(ref_cache)
    params = [p for p in model.parameters() if p.requires_grad]
    ranks.broadcast(params)  # one start for all
    ch = dual.channels
    factors = {"memory": ch.memory_lr_factor, "reward": ch.reward_lr_factor}
    # one AdamW on the summed gradient, or one per channel (its own moments) at its own rate
    optimizers = (
        {c: torch.optim.AdamW(params, lr=cfg.learning_rate * f, weight_decay=0.0) for c, f in factors.items()}
        if ch.split
        else {"both": torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=0.0)}
    )
    decay = lambda step: max(0.0, 1 - step / cfg.max_steps)  # noqa: E731
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, decay) for o in optimizers.values()]
    monitor = ChannelMonitor(ch.max_share)
    history: list[dict[str, float]] = []
    totals = {
        "sft": 0.0,
        "memory": 0.0,
        "reward": 0.0,
        "pair_rows": 0,
        "memory_rows": 0,
        "skipped": 0,
        "downweighted": 0,
        "inverted": 0,
    }
    progress = Progress("dual-channel training", cfg.max_steps, log, unit="steps")
    model.train()
    started = time.monotonic()
    for step in range(1, cfg.max_steps + 1):
        record = {
            "loss": 0.0,
            "sft": 0.0,
            "memory": 0.0,
            "reward": 0.0,
            "skipped": 0,
            "downweighted": 0,
            "inverted": 0,
            "correct": 0,
            "margin": 0.0,
        }
        measured = bool(ch.monitor_every) and (step - 1) % ch.monitor_every == 0
        grads = {c: [torch.zeros_like(p) for p in params] for c in CHANNELS} if ch.split or measured else None
        for _ in range(cfg.gradient_accumulation_steps):
            pi = (
                [int(i) for i in pair_sampler(n_pair)]
                if pair_sampler is not None
                else [next(pair_order) for _ in range(n_pair)]
            )
            mi = [next(memory_order) for _ in range(n_mem)]
            drawn = len(pi) + len(mi)
            pi, mi = ranks.shard(pi), ranks.shard(mi)  # every process drew the same batch; each takes its rows
            if not pi and not mi:  # more processes than rows: this one adds nothing to the step
                continue
            # the loss is a mean over the rows: this process's mean weighted by its share of the batch (times the
            # processes, whose figures and gradients are averaged) makes the average the whole batch's mean
            scale = ranks.world * (len(pi) + len(mi)) / drawn / cfg.gradient_accumulation_steps
            seqs = [pair_seqs[i][0] for i in pi] + [pair_seqs[i][1] for i in pi] + [memory_seqs[i] for i in mi]
            # pairs and memory rows in separate passes: a short memory row is not padded to a long pair's length
            parts = [sequence_logps(model, part, pad) for part in (seqs[: 2 * len(pi)], seqs[2 * len(pi) :]) if part]
            logps, counts = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
            zeros = torch.zeros(len(mi), device=logps.device)
            chosen, rejected, mem = logps[: len(pi)], logps[len(pi) : 2 * len(pi)], logps[2 * len(pi) :]
            anchored = dual.memory_margin is not None and bool(mi)
            ref = reference_logps(model, seqs[: 2 * len(pi) + (len(mi) if anchored else 0)], ref_cache, pad).to(
                logps.device
            )
            ref_chosen, ref_rejected = ref[: len(pi)], ref[len(pi) : 2 * len(pi)]
            tokens = counts.clamp(min=1)
            nll = -torch.cat([chosen / tokens[: len(pi)], mem / tokens[2 * len(pi) :]])
            # the base's mean token NLL of each memory row (pair rows' entries are not read)
            memory_ref_nll = (
                torch.cat([zeros.new_zeros(len(pi)), -ref[2 * len(pi) :] / tokens[2 * len(pi) :]])
                if anchored
                else None
            )
            out = dual_channel_loss(
                torch.cat([chosen, zeros]),
                torch.cat([rejected, zeros]),
                torch.cat([ref_chosen, zeros]),
                torch.cat([ref_rejected, zeros]),
                nll,
                torch.tensor(
                    np.concatenate([labels.intensity[pi], np.ones(len(mi))]), dtype=torch.float32, device=logps.device
                ),
                torch.tensor(
                    np.concatenate([labels.safety[pi], np.ones(len(mi))]), dtype=torch.float32, device=logps.device
                ),
                pair_mask=torch.tensor([True] * len(pi) + [False] * len(mi), device=logps.device),
                beta=cfg.beta,
                w_sft=dual.sft_weight,
                w_reward=dual.reward_weight,
                gate=gate,
                w_memory=dual.memory_weight,
                memory_ref_nll=memory_ref_nll,
                memory_margin=dual.memory_margin or 0.0,
            )
            channel_losses = {
                "memory": out.sft * monitor.balance["memory"],
                "reward": out.reward * monitor.balance["reward"],
            }
            if grads is None:
                (sum(channel_losses.values()) * scale).backward()
            else:  # each channel's gradient on its own
                for c, loss in channel_losses.items():
                    if loss.requires_grad:
                        for acc, g in zip(
                            grads[c], torch.autograd.grad(loss * scale, params, retain_graph=True, allow_unused=True)
                        ):
                            if g is not None:
                                acc.add_(g)
            margins = cfg.beta * ((chosen - ref_chosen) - (rejected - ref_rejected)).detach()
            record["loss"] += out.total.detach().item() * scale
            record["sft"] += out.sft.detach().item() * scale
            record["memory"] += out.memory.detach().item() * scale
            record["reward"] += out.reward.detach().item() * scale
            record["correct"] += int((margins > 0).sum())
            record["margin"] += float(margins.sum())
            for key in ("skipped", "downweighted", "inverted"):
                record[key] += getattr(out, key)
            totals["pair_rows"] += len(pi)
            totals["memory_rows"] += len(mi)
        if ranks.world > 1:  # the step's gradient: the mean over the processes
            if grads is None:
                for p in params:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                ranks.average([p.grad for p in params])
            else:
                ranks.average([g for c in CHANNELS for g in grads[c]])
            record = ranks.mean({k: record[k] for k in ("loss", "sft", "memory", "reward")}) | ranks.total(
                {k: record[k] for k in ("skipped", "downweighted", "inverted", "correct", "margin")}
            )
        shares = monitor.measure(grads) if measured else None
        grad_norm = _optimizer_step(params, optimizers, grads)
        for scheduler in schedulers:
            scheduler.step()
        seen = n_pair * cfg.gradient_accumulation_steps
        entry = {
            "step": step,
            "loss": record["loss"],
            "sft": record["sft"],
            "memory": record["memory"],
            "reward": record["reward"],
            "grad_norm": grad_norm,
            "learning_rate": cfg.learning_rate * decay(step),
            "rewards/accuracies": record["correct"] / seen if seen else float("nan"),
            "rewards/margins": record["margin"] / seen if seen else float("nan"),
            "gate/skipped": record["skipped"],
            "gate/downweighted": record["downweighted"],
            "gate/inverted": record["inverted"],
            **(
                {f"share/{c}": s for c, s in shares.items()} | {f"balance/{c}": b for c, b in monitor.balance.items()}
                if shares
                else {}
            ),
        }
        history.append(entry)
        for key in ("sft", "memory", "reward", "skipped", "downweighted", "inverted"):
            totals[key] += record[key]
        if on_log:
            on_log(step, {k: v for k, v in entry.items() if k != "step"})
        progress.advance(
            1,
            loss=f"{record['loss']:.4f}",
            sft=f"{record['sft']:.3f}",
            **({"memory": f"{record['memory']:.3f}"} if n_mem else {}),
            reward=f"{record['reward']:.3f}",
        )
    seconds = time.monotonic() - started
    rows = ranks.total({"pair_rows": totals["pair_rows"], "memory_rows": totals["memory_rows"]})
    totals.update({k: int(round(v)) for k, v in rows.items()})
    if ranks.main:  # every process holds the same adapter: one writes it
        trainable = save_adapter(model, tokenizer, out_dir, before)
        if reference_cache is not None:
            save_reference_cache(reference_cache, before, {k: v for k, v in ref_cache.items() if k not in shipped})
    else:
        trainable = sum(p.numel() for p in params)
    ranks.barrier()
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
        "processes": ranks.world,
    }
    return AdapterTraining(
        metrics,
        before,
        history,
        {
            "sft": totals["sft"] / channel_sum if channel_sum else 0.0,
            "reward": totals["reward"] / channel_sum if channel_sum else 0.0,
        },
        {
            "sft_loss_sum": totals["sft"],
            "memory_loss_sum": totals["memory"],
            "reward_loss_sum": totals["reward"],
            "pair_rows": totals["pair_rows"],
            "memory_rows": totals["memory_rows"],
            "memory_rows_per_batch": n_mem,
            "pairs_available": n_pairs,
            "memory_rows_available": n_memory,
            "gated": {k: totals[k] for k in ("skipped", "downweighted", "inverted")},
            "reference_sequences": len(ref_cache) - known,  # each scored by the base once, however often it was drawn
            "lr_factors": factors,
            **monitor.summary(),
            "start": start,
        },
    )
