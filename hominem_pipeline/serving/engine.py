"""The model behind the service: one worker thread runs every generation and scoring job, so requests
share the CPU through batching instead of fighting over it.

Chat requests wait in a bounded queue; the worker takes the oldest and, after `batch_wait_ms`, up to
`max_batch_size - 1` more with the same sampling settings and adapter switch, and generates them as
one left-padded batch (`model.generate` with a streamer that hands each row's new tokens to its
request as they are sampled, and a stopping rule per row: its own token limit, the end of turn, or a
client that went away). A full queue refuses new requests with `QueueFull`, which carries how long to
wait before retrying; nothing is dropped once accepted.
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

    @property
    def key(self) -> tuple[float, float]:
        return (self.temperature, self.top_p if self.temperature > 0 else 1.0)


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


class _Rows:
    """The streamer and the per-row stopping rule of one batch."""

    def __init__(self, rows: list[Request], tokenizer: Any, stop_ids: set[int]):
        self.rows, self.tokenizer, self.stop_ids = rows, tokenizer, stop_ids
        self.prompt_seen = False

    # transformers' BaseStreamer protocol: put(prompt ids) once, then put(new tokens, one per row) per step
    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        for row, token in zip(self.rows, value.tolist()):
            if row.done:
                continue
            if token in self.stop_ids:
                row.done, row.finish_reason = True, "stop"
                continue
            row.ids.append(token)
            self._emit(row)
            if len(row.ids) >= row.sampling.max_tokens:
                row.done, row.finish_reason = True, "length"

    def end(self) -> None:
        for row in self.rows:
            row.done = True

    def _emit(self, row: Request) -> None:
        text = self.tokenizer.decode(row.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # a character split across tokens: wait for the rest
            return
        delta, row.sent = text[len(row.sent):], text
        if delta and row.on_text is not None:
            row.on_text(delta)

    # a StoppingCriteria: a bool per row, True where that row is finished
    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        for row in self.rows:
            if row.cancelled and not row.done:
                row.done, row.finish_reason = True, "cancelled"
        return torch.tensor([row.done for row in self.rows], dtype=torch.bool)


class Engine:
    """The student (with its adapter, if any), the reward model (if any), and the worker thread."""

    def __init__(self, student: Path, adapter: Path | None, reward_model: Path | None, *, max_batch_size: int,
                 batch_wait_ms: float, max_queue: int, repetition_penalty: float, threads: int | None = None):
        import torch

        from hominem_pipeline.core.policy.lora import load_policy

        if threads:
            torch.set_num_threads(threads)
        started = time.monotonic()
        self.student, self.adapter_path, self.reward_model_path = Path(student), adapter, reward_model
        self.model, self.tokenizer = load_policy(self.student, adapter)
        self.reward = None
        if reward_model is not None:
            from hominem_pipeline.core.reward.model import RewardModel

            self.reward = RewardModel.load(reward_model)
        self.max_batch_size, self.batch_wait = max_batch_size, batch_wait_ms / 1000
        self.max_queue, self.repetition_penalty = max_queue, repetition_penalty
        eos = self.tokenizer.eos_token_id
        self.stop_ids = set(eos if isinstance(eos, list) else [eos])
        if (end := self.tokenizer.convert_tokens_to_ids("<|im_end|>")) is not None and end != self.tokenizer.unk_token_id:
            self.stop_ids.add(end)
        self._pending: list[Request] = []
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future]] = queue.Queue()
        self._cond = threading.Condition()
        self._closed = False
        self.tokens_per_second = 30.0  # updated from each batch; sizes Retry-After
        self.batches = 0
        self.largest_batch = 0
        self._worker = threading.Thread(target=self._loop, name="hominem-engine", daemon=True)
        self._worker.start()
        log.info("engine ready in %.1f s: student %s, adapter %s, reward model %s", time.monotonic() - started, student, adapter, reward_model)

    # -- what the app calls -------------------------------------------------------------------------

    def chat_text(self, messages: list[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def submit(self, request: Request) -> Future:
        """Queue a reply; its future resolves to the request when done. Raises QueueFull."""
        with self._cond:
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

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._worker.join(timeout=30)

    # -- the worker ---------------------------------------------------------------------------------

    def _take_batch(self) -> list[Request] | None:
        with self._cond:
            while not self._pending and self._jobs.empty() and not self._closed:
                self._cond.wait()
            if self._closed and not self._pending:
                return None
            if not self._pending:
                return []
        if self.batch_wait > 0:
            time.sleep(self.batch_wait)  # let the requests that arrive together share the batch
        with self._cond:
            first = self._pending[0]
            key = (first.sampling.key, first.adapter)
            batch = [r for r in self._pending if (r.sampling.key, r.adapter) == key][: self.max_batch_size]
            self._pending = [r for r in self._pending if not any(r is b for b in batch)]
        return batch

    def _loop(self) -> None:
        while True:
            while not self._jobs.empty():
                job, future = self._jobs.get()
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(job())
                    except BaseException as exc:  # handed to the caller, who reports it
                        future.set_exception(exc)
            batch = self._take_batch()
            if batch is None:
                return
            if not batch:
                continue
            try:
                self._generate(batch)
                for row in batch:
                    row.future.set_result(row)
            except BaseException as exc:
                log.exception("generation failed for a batch of %d", len(batch))
                for row in batch:
                    if not row.future.done():
                        row.future.set_exception(exc)

    def _generate(self, rows: list[Request]) -> None:
        import contextlib

        import torch
        from transformers import StoppingCriteriaList

        sampling = rows[0].sampling
        enc = self.tokenizer([r.text for r in rows], return_tensors="pt", padding=True, add_special_tokens=False)
        for row, mask in zip(rows, enc["attention_mask"]):
            row.prompt_tokens = int(mask.sum())
        control = _Rows(rows, self.tokenizer, self.stop_ids)
        seed = sampling.seed if sampling.seed is not None else int(time.time_ns() % 2**31)
        torch.manual_seed(seed)
        greedy = sampling.temperature <= 0
        switch = contextlib.nullcontext()
        if not rows[0].adapter and hasattr(self.model, "disable_adapter"):
            switch = self.model.disable_adapter()
        started = time.monotonic()
        with torch.inference_mode(), switch:
            self.model.generate(
                **enc,
                max_new_tokens=max(r.sampling.max_tokens for r in rows) + 1,  # +1: room to sample the end of turn
                do_sample=not greedy,
                temperature=None if greedy else sampling.temperature,
                top_p=None if greedy else sampling.top_p,
                top_k=None,
                repetition_penalty=self.repetition_penalty,
                pad_token_id=self.tokenizer.pad_token_id,
                streamer=control,
                stopping_criteria=StoppingCriteriaList([control]),
            )
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(rows))
        produced = sum(len(r.ids) for r in rows)
        seconds = time.monotonic() - started
        if produced and seconds > 0:
            self.tokens_per_second = 0.7 * self.tokens_per_second + 0.3 * produced / seconds
        for row in rows:  # what a split character held back
            text = self.tokenizer.decode(row.ids, skip_special_tokens=True)
            delta, row.sent = text[len(row.sent):], text
            if delta and row.on_text is not None:
                row.on_text(delta)


async def wait(future: Future) -> Any:
    return await asyncio.wrap_future(future)
