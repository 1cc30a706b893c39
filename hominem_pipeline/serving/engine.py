"""The model behind the service: one worker thread runs every generation and scoring job, so requests
share the CPU through batching instead of fighting over it.

Generation is continuously batched (as vLLM does it, on a small scale): the worker keeps one batch of
rows in flight, each with its own KV cache rows, and steps them all one token at a time. A request
that arrives joins the running batch at the next step (its prompt is prefilled, then its cache is
left-padded into the batch's); a finished row leaves at once. So a client never waits for someone
else's long reply to end before its own starts. Each row samples with its own temperature, top-p and
seed (its own generator: a seeded request gets the same reply whoever it shares a batch with). Rows
with the adapter and rows without it (`hominem-base`) run in separate batches, first come first served.

Hot-swap (`swap`): a new adapter is checked off the worker, then loaded beside the old one (PEFT named
adapters on the same base, which is never reloaded) between two steps; requests submitted after that
use it, while a batch already running finishes on the adapter it started with. An old adapter is
dropped once no row uses it.

Waiting requests are bounded by `max_queue`: beyond it `submit` raises `QueueFull`, which carries how
long to wait before retrying; nothing is dropped once accepted.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hominem_pipeline.core.lm import rows as row_cache
from hominem_pipeline.core.lm.generation import messages_text

log = logging.getLogger(__name__)


class QueueFull(RuntimeError):
    def __init__(self, waiting: int, retry_after: float):
        super().__init__(f"{waiting} requests are waiting for the model; retry in {retry_after:.0f} s")
        self.retry_after = retry_after


@dataclass(frozen=True)
class Sampling:
    temperature: float  # 0: greedy
    top_p: float
    max_tokens: int
    seed: int | None = None


@dataclass
class Request:
    """One reply to write. The worker fills `ids` and calls `on_text(delta)` from its thread."""

    text: str  # the chat-templated conversation
    sampling: Sampling
    adapter: bool  # with the adapter (False: the base alone)
    on_text: Callable[[str], None] | None = None
    ids: list[int] = field(default_factory=list)
    sent: str = ""
    done: bool = False
    finish_reason: str = "length"
    cancelled: bool = False
    prompt_tokens: int = 0
    future: Future = field(default_factory=Future)
    context: list[int] = field(default_factory=list)  # prompt + reply ids: what the repetition penalty looks at
    generator: Any = None
    adapter_name: str | None = None  # the loaded adapter it runs on (stamped by `submit`; None: the base)
    adapter_label: str | None = None  # that adapter, as the log names it

    def emit(self, tokenizer: Any, final: bool = False) -> None:
        """Hand the text decoded since the last call to `on_text` (a character split across tokens waits
        for its end, unless this is the final call)."""
        text = tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd") and not final:
            return
        delta, self.sent = text[len(self.sent) :], text
        if delta and self.on_text is not None:
            self.on_text(delta)


@dataclass(frozen=True)
class EngineSettings:
    """How the engine batches and decodes (`serving:`'s settings of the same names).

    Args:
        max_batch_size: rows generating together at most.
        batch_wait_ms: how long a new request waits for others to join its batch.
        max_queue: requests waiting at most; more are refused (503) with a Retry-After.
        repetition_penalty: the decoding's repetition penalty.
        plain_start: no reply starts with an emoji or symbol token.
        threads: torch's CPU threads (None: torch's default).
        recall_facts: repeat what the person stated about themselves before their last message.
    """

    max_batch_size: int
    batch_wait_ms: float
    max_queue: int
    repetition_penalty: float
    plain_start: bool = False
    threads: int | None = None
    recall_facts: bool = False


class Engine:
    """The student (with its adapter, if any), the reward model (if any), and the worker thread."""

    def __init__(
        self,
        student: Path,
        adapter: Path | None,
        reward_model: Path | None,
        settings: EngineSettings,
        *,
        adapter_label: str | None = None,
        device: Any = None,
    ):
        """`device`: where the student and the reward model run, and the batch's tensors live (`core.lm.device`;
        None: the CPU); each row's sampling stays on the CPU (its own generator), one logits copy a step."""
        import torch

        from hominem_pipeline.core.policy.lora import load_policy

        if settings.threads:
            torch.set_num_threads(settings.threads)
        started = time.monotonic()
        self.student, self.adapter_path, self.reward_model_path = Path(student), adapter, reward_model
        self.device = torch.device(device or "cpu")
        self.model, self.tokenizer = load_policy(self.student, adapter, self.device)
        self.active: str | None = "default" if adapter is not None else None  # PEFT names the first adapter "default"
        self.labels: dict[str, str | None] = {"default": adapter_label or (str(adapter) if adapter else None)}
        self._stale: set[str] = set()  # swapped-out adapters, dropped once no row uses them
        self._base_checksum: str | None = None
        self.reward = None
        if reward_model is not None:
            from hominem_pipeline.core.reward.model import RewardModel

            self.reward = RewardModel.load(reward_model, self.device)
        self.max_batch_size, self.batch_wait = settings.max_batch_size, settings.batch_wait_ms / 1000
        self.recall_facts = settings.recall_facts
        self.max_queue, self.repetition_penalty = settings.max_queue, settings.repetition_penalty
        # plain_start: no reply starts with an emoji or symbol token (as `generate` with plain_start)
        self.symbol_ids = None
        if settings.plain_start:
            import torch

            from hominem_pipeline.core.lm.generation import symbol_token_ids

            self.symbol_ids = torch.tensor(symbol_token_ids(self.tokenizer), dtype=torch.long)
        eos = self.tokenizer.eos_token_id
        self.stop_ids = set(eos if isinstance(eos, list) else [eos])
        if (
            end := self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ) is not None and end != self.tokenizer.unk_token_id:
            self.stop_ids.add(end)
        self._pending: list[Request] = []
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future]] = queue.Queue()
        self._cond = threading.Condition()
        self._closed = False
        self.tokens_per_second = 30.0  # updated from each batch; sizes Retry-After
        self.batches = 0
        self.largest_batch = 0
        self.running = 0  # rows generating now (the batch on the worker)
        self._worker = threading.Thread(target=self._loop, name="hominem-engine", daemon=True)
        self._worker.start()
        log.info(
            "engine ready in %.1f s: student %s, adapter %s, reward model %s",
            time.monotonic() - started,
            student,
            adapter,
            reward_model,
        )

    # -- what the app calls -------------------------------------------------------------------------

    def chat_text(self, messages: list[dict[str, str]]) -> str:
        """The conversation as the model reads it; with `recall_facts`, what the person stated about
        themselves earlier repeated before their last message (`facts.with_stated_facts`)."""
        if self.recall_facts:
            from hominem_pipeline.core.online.facts import with_stated_facts

            messages = with_stated_facts(messages)
        return messages_text(self.tokenizer, messages)

    def count_tokens(self, text: str) -> int:
        """Call it on the worker (`run`): the tokenizer is not safe to share between threads."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def adapter_label(self) -> str | None:
        """The adapter new requests run on (None: the base alone)."""
        return None if self.active is None else self.labels.get(self.active)

    def submit(self, request: Request) -> Future:
        """Queue a reply; its future resolves to the request when done. Raises QueueFull."""
        with self._cond:
            request.adapter_name = self.active if request.adapter else None
            request.adapter_label = self.labels.get(request.adapter_name) if request.adapter_name else None
            if self._closed:
                raise RuntimeError("the engine is shut down")
            if len(self._pending) >= self.max_queue:
                tokens_ahead = sum(r.sampling.max_tokens for r in self._pending)
                raise QueueFull(len(self._pending), max(1.0, tokens_ahead / max(self.tokens_per_second, 1e-3)))
            self._pending.append(request)
            self._cond.notify()
        return request.future

    def run(self, job: Callable[[], Any]) -> Future:
        """Run `job` on the worker thread, between batches (scoring, swaps)."""
        future: Future = Future()
        with self._cond:
            self._jobs.put((job, future))
            self._cond.notify()
        return future

    def score(self, prompts: list[str], responses: list[str]) -> Future:
        if self.reward is None:
            raise RuntimeError("no reward model is served")
        return self.run(lambda: [o.as_dict() for o in self.reward.score(prompts, responses)])

    def base_checksum(self) -> str:
        """The served base's weights' checksum (what an adapter's METADATA must name), computed once."""
        if self._base_checksum is None:
            from hominem_pipeline.core.policy.lora import base_checksum

            self._base_checksum = base_checksum(self.model)
        return self._base_checksum

    def swap(self, adapter: Path | None, label: str | None) -> Future:
        """Serve `adapter` (None: the base alone) to requests submitted from now on. The folder is checked
        here, in the caller's thread (a damaged or foreign adapter raises BadAdapter and nothing changes);
        the load runs on the worker between two steps. The future resolves to the seconds the worker spent."""
        import uuid

        if adapter is not None:
            from hominem_pipeline.core.online.live import check_adapter

            check_adapter(Path(adapter), self.base_checksum())
        name = f"swap-{uuid.uuid4().hex[:8]}"

        def load() -> float:
            started = time.monotonic()
            if adapter is not None:
                from peft import PeftModel

                if isinstance(self.model, PeftModel):
                    self.model.load_adapter(str(adapter), adapter_name=name)
                else:
                    self.model = PeftModel.from_pretrained(self.model, str(adapter), adapter_name=name)
                self.model.eval()
                self.labels[name] = label or str(adapter)
            if self.active is not None:
                self._stale.add(self.active)
            self.active = name if adapter is not None else None
            log.info(
                "serving %s from now on (loaded in %.2f s)",
                self.adapter_label or "the base alone",
                time.monotonic() - started,
            )
            return time.monotonic() - started

        return self.run(load)

    def _drop_stale(self, batch: _Batch | None) -> None:
        """Unload swapped-out adapters no running or waiting row uses (the last adapter loaded stays)."""
        with self._cond:
            used = {self.active, batch.adapter if batch else None} | {r.adapter_name for r in self._pending}
        for name in list(self._stale):
            if name not in used and len(getattr(self.model, "peft_config", {})) > 1:
                if self.model.active_adapter == name:  # PEFT keeps one adapter active: hand it to another first
                    self.model.set_adapter(self.active or next(n for n in self.model.peft_config if n != name))
                self.model.delete_adapter(name)
                self.labels.pop(name, None)
                self._stale.discard(name)

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._worker.join(timeout=30)

    # -- the worker ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        batch: _Batch | None = None
        while True:
            while not self._jobs.empty():
                job, future = self._jobs.get()
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(job())
                    except BaseException as exc:  # handed to the caller, who reports it
                        future.set_exception(exc)
            if self._stale:
                self._drop_stale(batch)
            joining = self._admit(batch)
            if joining is None:
                return
            try:
                if joining:
                    batch = self._join(batch, joining)
                if batch is not None:
                    batch = self._step(batch)
                self.running = len(batch.rows) if batch else 0
            except BaseException as exc:
                log.exception("generation failed")
                for row in (batch.rows if batch else []) + joining:
                    if not row.future.done():
                        row.future.set_exception(exc)
                batch, self.running = None, 0

    def _admit(self, batch: _Batch | None) -> list[Request] | None:
        """Requests to join the running batch now (None: shut down). The oldest waiting request decides
        which kind of batch runs (adapter on or off): while it waits for the other kind to drain, no one
        newer joins."""
        with self._cond:
            while batch is None and not self._pending and self._jobs.empty() and not self._closed:
                self._cond.wait()
            if batch is None and not self._pending:
                return None if self._closed else []
        if batch is None and self.batch_wait > 0:
            time.sleep(self.batch_wait)  # let the requests that arrive together start together
        with self._cond:
            if not self._pending or (batch is not None and self._pending[0].adapter_name != batch.adapter):
                return []
            adapter = self._pending[0].adapter_name
            room = self.max_batch_size - (len(batch.rows) if batch else 0)
            joining = [r for r in self._pending if r.adapter_name == adapter][:room]
            self._pending = [r for r in self._pending if not any(r is j for j in joining)]
        return joining

    def _forward(self, adapter: str | None, **inputs: Any) -> Any:
        """The model on `inputs` with adapter `adapter` (by its loaded name; None: the base alone)."""
        import contextlib

        if adapter is not None and self.model.active_adapter != adapter:
            self.model.set_adapter(adapter)
        switch = (
            self.model.disable_adapter()
            if adapter is None and hasattr(self.model, "disable_adapter")
            else contextlib.nullcontext()
        )
        with switch:
            return self.model(**inputs, use_cache=True)

    def _join(self, batch: _Batch | None, rows: list[Request]) -> _Batch:
        """Prefill the new rows' prompts together (left-padded), sample each one's first token, and merge
        their cache rows into the running batch's."""
        import torch

        enc = self.tokenizer([r.text for r in rows], return_tensors="pt", padding=True, add_special_tokens=False).to(
            self.device
        )
        mask = enc["attention_mask"]
        positions = row_cache.prompt_positions(mask)
        with torch.inference_mode():
            out = self._forward(
                rows[0].adapter_name, input_ids=enc["input_ids"], attention_mask=mask, position_ids=positions
            )
        for row, ids, m in zip(rows, enc["input_ids"], mask):
            row.prompt_tokens = int(m.sum())
            row.context = ids[m.bool()].tolist()
            row.generator = torch.Generator().manual_seed(
                row.sampling.seed if row.sampling.seed is not None else int(time.time_ns() % 2**63)
            )
        cache = out.past_key_values
        if batch is None:
            mask = row_cache.join(None, None, cache, mask)  # its layers given spare columns
        new = _Batch(rows, cache, mask, positions[:, -1] + 1, rows[0].adapter_name)
        new.last = self._sample(new, out.logits[:, -1, :])
        merged = new if batch is None else batch.merge(new)
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(merged.rows))
        return self._retire(merged)

    def _step(self, batch: _Batch) -> _Batch | None:
        """One token for every row of the batch."""
        import torch

        started = time.monotonic()
        batch.mask = torch.cat(
            [batch.mask, torch.ones(len(batch.rows), 1, dtype=batch.mask.dtype, device=batch.mask.device)], 1
        )
        with torch.inference_mode():
            out = self._forward(
                batch.adapter,
                input_ids=batch.last.unsqueeze(1),
                attention_mask=batch.mask,
                position_ids=batch.positions.unsqueeze(1),
                past_key_values=batch.cache,
            )
        batch.cache, batch.positions = out.past_key_values, batch.positions + 1
        batch.last = self._sample(batch, out.logits[:, -1, :])
        seconds = time.monotonic() - started
        if seconds > 0:
            self.tokens_per_second = 0.95 * self.tokens_per_second + 0.05 * len(batch.rows) / seconds
        return self._retire(batch)

    def _sample(self, batch: _Batch, logits: Any) -> Any:
        """Each row's next token (with its own penalty, temperature, top-p and generator), appended to it."""
        import torch

        with torch.inference_mode():  # the logits are inference tensors: edited in place below
            return self._sample_rows(batch, logits)

    def _sample_rows(self, batch: _Batch, logits: Any) -> Any:
        import torch

        tokens = []
        for row, scores in zip(batch.rows, logits.float().cpu()):
            if row.cancelled and not row.done:
                row.done, row.finish_reason = True, "cancelled"
            if row.done:
                tokens.append(self.tokenizer.pad_token_id)
                continue
            if self.symbol_ids is not None and not row.ids:
                scores[self.symbol_ids] = -float("inf")
            if self.repetition_penalty != 1.0:
                seen = torch.tensor(row.context)
                picked = scores[seen]
                scores[seen] = torch.where(
                    picked < 0, picked * self.repetition_penalty, picked / self.repetition_penalty
                )
            if row.sampling.temperature <= 0:
                token = int(scores.argmax())
            else:
                scores = scores / row.sampling.temperature
                if row.sampling.top_p < 1.0:
                    ordered, order = scores.sort()  # ascending, as transformers' TopPLogitsWarper
                    drop = ordered.softmax(-1).cumsum(-1) <= 1 - row.sampling.top_p
                    drop[-1] = False
                    scores[order[drop]] = -float("inf")
                token = int(torch.multinomial(scores.softmax(-1), 1, generator=row.generator))
            if token in self.stop_ids:
                row.done, row.finish_reason = True, "stop"
            else:
                row.ids.append(token)
                row.context.append(token)
                row.emit(self.tokenizer)
                if len(row.ids) >= row.sampling.max_tokens:
                    row.done, row.finish_reason = True, "length"
            tokens.append(token)
        return torch.tensor(tokens, dtype=torch.long).to(self.device)

    def _retire(self, batch: _Batch) -> _Batch | None:
        """Finish the rows that are done (their futures resolve) and drop them from the batch."""
        done = [r for r in batch.rows if r.done]
        for row in done:
            row.emit(self.tokenizer, final=True)
            row.future.set_result(row)
        if not done:
            return batch
        keep = [i for i, r in enumerate(batch.rows) if not r.done]
        return batch.select(keep) if keep else None


@dataclass
class _Batch:
    """The rows in flight: their cache (one row each, left-padded to a common length), attention mask,
    next position and last sampled token."""

    rows: list[Request]
    cache: Any
    mask: Any  # (rows, length) long: 1 for a real token
    positions: Any  # (rows,) the next token's position in its own row
    adapter: str | None  # the loaded adapter every row of the batch runs on (None: the base)
    last: Any = None  # (rows,) the token each row feeds next

    def select(self, keep: list[int]) -> _Batch:
        import torch

        mask = row_cache.keep(self.cache, self.mask, keep)
        index = torch.tensor(keep, device=self.mask.device)
        return _Batch(
            [self.rows[i] for i in keep], self.cache, mask, self.positions[index], self.adapter, self.last[index]
        )

    def merge(self, other: _Batch) -> _Batch:
        """Both batches' rows in one: the shorter side's cache and mask left-padded to the longer length."""
        import torch

        return _Batch(
            self.rows + other.rows,
            self.cache,
            row_cache.join(self.cache, self.mask, other.cache, other.mask),
            torch.cat([self.positions, other.positions]),
            self.adapter,
            torch.cat([self.last, other.last]),
        )


async def wait(future: Future) -> Any:
    return await asyncio.wrap_future(future)
