"""Making many API calls well: bounded concurrency, a requests/tokens-per-minute limiter, retries with
exponential backoff and jitter that honour `retry-after`, the call cache, and accounting of calls,
cache hits, retries, failures, tokens and cost.

`Dispatcher.call` is one logical call (cache lookup, then up to `1 + max_retries` attempts). A call
that finally fails returns a `CallOutcome` with the error instead of raising, so the caller records it;
only a `FatalProviderError` stops everything: a bad key or an unknown model, or an address where nothing
answers (connection refused, a name that does not resolve) before any call has succeeded. Once one has,
the same failure is retried like a timeout: the server may be restarting.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

from hominem_pipeline.core.config import ModelPrice, TeacherClientConfig
from hominem_pipeline.core.teacher.call_cache import (
    CallCache,
    DatabaseCallCache,
    call_key,
)
from hominem_pipeline.core.teacher.providers import (
    ChatBackend,
    ChatRequest,
    ChatResult,
    FatalProviderError,
    classify_error,
    redact,
    teacher_address,
)

log = logging.getLogger(__name__)


class TokenBucket:
    """`rate_per_minute` units refill continuously up to one second's worth (at least one request's
    worth); a request may take the bucket below zero and the next one waits until it is back above."""

    def __init__(self, rate_per_minute: float):
        self.rate = rate_per_minute / 60.0
        self.capacity = max(self.rate, 1.0)
        self.level = self.capacity
        self.updated = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now

    def wait_time(self) -> float:
        self._refill()
        return 0.0 if self.level > 0 else (-self.level + 1e-6) / self.rate

    def take(self, amount: float) -> None:
        self._refill()
        self.level -= amount

    def give_back(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


class RateLimiter:
    """Requests per minute and tokens per minute (input + output, estimated before the call and
    corrected after it)."""

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None):
        self.requests = TokenBucket(requests_per_minute) if requests_per_minute else None
        self.tokens = TokenBucket(tokens_per_minute) if tokens_per_minute else None
        self._lock = asyncio.Lock()
        self.waited_seconds = 0.0

    async def acquire(self, estimated_tokens: int) -> None:
        async with self._lock:  # first come, first served
            while True:
                wait = (
                    max(b.wait_time() for b in (self.requests, self.tokens) if b)
                    if (self.requests or self.tokens)
                    else 0.0
                )
                if wait <= 0:
                    break
                self.waited_seconds += wait
                await asyncio.sleep(wait)
            if self.requests:
                self.requests.take(1)
            if self.tokens:
                self.tokens.take(estimated_tokens)

    def settle(self, estimated_tokens: int, actual_tokens: int) -> None:
        if self.tokens:
            if actual_tokens > estimated_tokens:
                self.tokens.take(actual_tokens - estimated_tokens)
            else:
                self.tokens.give_back(estimated_tokens - actual_tokens)


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter: uniform in [base/2, min(cap, base * 2**attempt)]."""
    top = min(cap, base * (2**attempt))
    return rng.uniform(min(base / 2, top), top)


@dataclass
class CallOutcome:
    result: ChatResult | None  # None: the call failed for good (error says why)
    error: str | None = None
    attempts: int = 0  # requests sent; 0 for a cache hit


@dataclass
class CallStats:
    calls: int = 0  # requests sent (every attempt)
    cache_hits: int = 0
    retries: int = 0
    failed: int = 0  # logical calls that gave up
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cached_output_tokens: int = 0

    def cost(self, price: ModelPrice | None, cached: bool = False) -> float | None:
        if price is None:
            return None
        i, o = (
            (self.cached_input_tokens, self.cached_output_tokens)
            if cached
            else (self.input_tokens, self.output_tokens)
        )
        return (i * price.input + o * price.output) / 1e6

    def progress_fields(self, price: ModelPrice | None) -> dict[str, Any]:
        cost = self.cost(price)
        return {
            "calls": self.calls,
            "hits": self.cache_hits,
            "retries": self.retries,
            "failed": self.failed,
            "cost": "n/a" if cost is None else f"${cost:.4f}",
        }

    def metrics(self, price: ModelPrice | None) -> dict[str, float | None]:
        return {
            "api_calls": self.calls,
            "cache_hits": self.cache_hits,
            "retries": self.retries,
            "failed_calls": self.failed,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost(price),
            "cost_saved_by_cache_usd": self.cost(price, cached=True),
        }


class Dispatcher:
    def __init__(
        self,
        backend: ChatBackend,
        client: TeacherClientConfig,
        *,
        cache: CallCache | DatabaseCallCache | None,
        price: ModelPrice | None,
        secrets: list[str],
        key_env: str | None = None,
        seed: int = 0,
    ):
        self.key_hint = f"the key in ${key_env}" if key_env else "the server's access settings"
        self.backend = backend
        self.client = client
        self.cache = cache
        self.price = price
        self.secrets = [s for s in secrets if s]
        self.stats = CallStats()
        self.limiter = RateLimiter(client.requests_per_minute, client.tokens_per_minute)
        self._slots = asyncio.Semaphore(client.concurrency)
        self._rng = random.Random(seed)
        self._answered = False  # some call got an answer from the server: a refused connection later may be a restart

    @property
    def address(self) -> str:
        """The server the calls go to, as a person would check it (no user:password)."""
        return teacher_address(getattr(self.backend, "base_url", None), self.backend.provider)

    def _estimate_tokens(self, request: ChatRequest) -> int:  # ~4 characters a token
        chars = len(request.system or "") + sum(len(t) for _, t in request.turns)
        if request.schema is not None:
            chars += 2000
        return chars // 4 + request.max_tokens

    async def call(self, request: ChatRequest) -> CallOutcome:
        key = call_key(self.backend.fingerprint_payload(request))
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:  # served as it came, readable or not: what was built on it is built again the same way
                result = ChatResult.from_json(hit)
                self.stats.cache_hits += 1
                self.stats.cached_input_tokens += result.input_tokens
                self.stats.cached_output_tokens += result.output_tokens
                return CallOutcome(result)
        last_error = "no attempt made"
        estimate = self._estimate_tokens(request)
        for attempt in range(self.client.max_retries + 1):
            await self.limiter.acquire(estimate)
            self.stats.calls += 1
            if attempt:
                self.stats.retries += 1
            try:
                async with self._slots:
                    result = await self.backend.chat(request, stream=self.client.stream and request.schema is None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # classified below; anything that is not an API error propagates
                kind = classify_error(exc)
                if kind is None:
                    raise
                self.limiter.settle(estimate, 0)
                last_error = redact(kind.message, self.secrets)
                if kind.unreachable and not self._answered:
                    raise FatalProviderError(
                        f"cannot reach the teacher at {self.address}: {last_error}; start the server there, "
                        f"or fix teacher.api.base_url"
                    ) from None
                if kind.fatal:
                    raise FatalProviderError(
                        f"{self.backend.provider} refused the call ({last_error}); check {self.key_hint}, "
                        f"teacher.api.model ({self.backend.model!r}) and teacher.api.base_url"
                    ) from None
                if not kind.retryable or attempt == self.client.max_retries:
                    break
                if kind.retry_after is not None:
                    if kind.retry_after > self.client.max_retry_after_seconds:
                        last_error += f" (asked to retry after {kind.retry_after:.0f}s, over max_retry_after_seconds)"
                        break
                    delay = kind.retry_after + self._rng.uniform(0, 0.1 * max(kind.retry_after, 0.1))
                else:
                    delay = backoff_delay(
                        attempt, self.client.backoff_seconds, self.client.max_backoff_seconds, self._rng
                    )
                log.debug("%s call failed (%s); retry %d in %.2fs", request.purpose, last_error, attempt + 1, delay)
                await asyncio.sleep(delay)
                continue
            self._answered = True
            self.limiter.settle(estimate, result.input_tokens + result.output_tokens)
            self.stats.input_tokens += result.input_tokens
            self.stats.output_tokens += result.output_tokens
            if self.cache is not None:
                self.cache.put(
                    key,
                    result.to_json(),
                    provider=self.backend.provider,
                    model=self.backend.model,
                    purpose=request.purpose,
                )
            return CallOutcome(result, attempts=attempt + 1)
        self.stats.failed += 1
        return CallOutcome(None, error=last_error, attempts=attempt + 1)
