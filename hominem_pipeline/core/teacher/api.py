"""The API teacher: Anthropic, OpenAI or an OpenAI-compatible server, through `core/providers.py`, with
every call going through the `Dispatcher` (concurrency, rate limits, retries, cache, accounting).

Rating asks for the whole label in one structured call. An answer that does not parse or breaks the
label schema is re-asked once with the validation error; a second bad answer is rejected (quarantined
with the raw text and the reason). A call that fails after all retries is recorded as failed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.common.schema import (
    INTENSITY_RANGE,
    SAFETY_RANGE,
    SCALAR_RANGE,
    VECTOR_RANGE,
    Label,
    Prompt,
    Trajectory,
    label_problems,
    teacher_label_schema,
)
from hominem_pipeline.core.config import CandidateStyle, HominemConfig, ModelPrice
from hominem_pipeline.core.pipeline.artifacts import fingerprint
from hominem_pipeline.core.teacher.base import (
    Teacher,
    TeacherOutput,
    WriteRequest,
    make_trajectory,
)
from hominem_pipeline.core.teacher.call_cache import (
    CallCache,
    DatabaseCallCache,
    open_call_cache,
)
from hominem_pipeline.core.teacher.dispatch import CallOutcome, Dispatcher
from hominem_pipeline.core.teacher.providers import (
    ChatBackend,
    ChatRequest,
    ChatResult,
    OutputSchema,
    api_key_for,
    describe_api,
    make_backend,
)

log = logging.getLogger(__name__)

R = TypeVar("R")
FINISHED = {"end_turn", "stop", "stop_sequence", "tool_use", "tool_calls"}


def judge_system(cfg: HominemConfig) -> str:
    lines = [cfg.labeling.api_judge_system.strip(), "", "The label:"]
    lines.append("- rationale: one or two sentences on what is best or worst about the reply.")
    lo, hi = VECTOR_RANGE
    for d in cfg.dimensions:
        lines.append(f"- vector.{d.name}, from {lo:g} (worst) to {hi:g} (best), 0 neutral: {d.description}")
    lines.append(
        f"- scalar, from {SCALAR_RANGE[0]:g} to {SCALAR_RANGE[1]:g}: how good the reply is overall for the person."
    )
    lines.append(
        f"- reward_intensity, from {INTENSITY_RANGE[0]:g} to {INTENSITY_RANGE[1]:g}: how strongly a "
        "learner should take this "
        "example to heart (0 unremarkable, 1 a striking lesson, good or bad)."
    )
    lines.append(
        f"- safety_score, from {SAFETY_RANGE[0]:g} to {SAFETY_RANGE[1]:g}: 1 when it is safe to learn "
        "from this reply, "
        "near 0 when it is dangerous or abusive and learning from it must be blocked."
    )
    return "\n".join(lines)


def rating_turn(prompt: str, response: str) -> str:
    return (
        f"The person wrote:\n<<<\n{prompt}\n>>>\n\nThe assistant replied:\n<<<\n{response}\n>>>\n\nRecord "
        "your judgement of the reply."
    )


def label_from_answer(data: Any, trajectory: Trajectory, dimensions: list[str]) -> tuple[Label | None, list[str]]:
    """The label in a structured answer, or the list of what is wrong with it."""
    if not isinstance(data, dict):
        return None, [f"expected a JSON object, got {type(data).__name__}"]
    allowed = {"rationale", "vector", "scalar", "reward_intensity", "safety_score"}
    problems = [f"{k}: unknown field" for k in data if k not in allowed]
    row = {
        "trajectory_id": trajectory.trajectory_id,
        "prompt_id": trajectory.prompt_id,
        **{k: data.get(k) for k in allowed},
    }
    problems += label_problems(row, dimensions)
    if problems:
        return None, problems
    row["vector"] = {d: float(row["vector"][d]) for d in dimensions}
    for k in ("scalar", "reward_intensity", "safety_score"):
        row[k] = float(row[k])
    return Label(**row), []


class APITeacher(Teacher):
    def __init__(self, cfg: HominemConfig, *, cache: CallCache | DatabaseCallCache | None = None):
        self.cfg = cfg
        self.tcfg = cfg.teacher
        self._key = api_key_for(self.tcfg)  # fail now, before any work, when the key is missing
        self.price: ModelPrice | None = self.tcfg.prices.get(self.tcfg.api.model or "")
        if self.price is None:
            log.warning("no price for model %r in teacher.prices: cost figures are not computed", self.tcfg.api.model)
        path = self.tcfg.client.cache_path
        self.cache = (
            cache
            if cache is not None
            else open_call_cache(cfg.path(path) if path else None, self.tcfg.client.cache_url)
        )

    # What rating needs, read when the teacher rates (a stage that only samples or writes prompts does
    # not depend on the rubric).
    @functools.cached_property
    def dimensions(self) -> list[str]:
        return self.cfg.dimension_names

    @functools.cached_property
    def schema(self) -> OutputSchema:
        return OutputSchema("reward_label", teacher_label_schema(self.dimensions))

    @functools.cached_property
    def system(self) -> str:
        return judge_system(self.cfg)

    def describe(self) -> dict[str, str]:
        api = self.tcfg.api
        return describe_api(
            self.tcfg.provider, api.model or "", api.base_url, api.resolved_structured_output(self.tcfg.provider)
        )

    def _backend(self) -> ChatBackend:
        return make_backend(self.tcfg)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()

    # -- running many calls --------------------------------------------------------------------------
    def _run(
        self, what: str, unit: str, items: Sequence[Any], work: Callable[[Dispatcher, Any], Awaitable[R]], seed: int
    ) -> tuple[list[R], dict[str, float | None]]:
        """Run `work` on every item concurrently; (the results in order, the calls' usage)."""

        async def main() -> tuple[list[R], dict[str, float | None]]:
            backend = self._backend()
            dispatcher = Dispatcher(
                backend,
                self.tcfg.client,
                cache=self.cache,
                price=self.price,
                secrets=[self._key or ""],
                key_env=self.tcfg.key_env(),
                seed=seed,
            )
            progress = Progress(what, len(items), log, unit=unit)

            async def one(item: Any) -> R:
                out = await work(dispatcher, item)
                progress.advance(1, **dispatcher.stats.progress_fields(self.price))
                return out

            try:
                results = await asyncio.gather(*(one(i) for i in items))
            finally:
                await backend.aclose()
            usage = dispatcher.stats.metrics(self.price)
            if dispatcher.limiter.waited_seconds:
                usage["rate_limit_wait_seconds"] = dispatcher.limiter.waited_seconds
            return results, usage

        return asyncio.run(main())

    # -- sampling ------------------------------------------------------------------------------------
    def sample(
        self, prompts: Sequence[Prompt], styles: Sequence[CandidateStyle], max_new_tokens: int, seed: int
    ) -> TeacherOutput[Trajectory]:
        jobs = [(p, c, styles[c]) for p in prompts for c in range(len(styles))]

        async def work(d: Dispatcher, job: tuple[Prompt, int, CandidateStyle]) -> tuple[Any, CallOutcome]:
            p, c, style = job
            request = ChatRequest(
                purpose="sample",
                system=style.system,
                turns=(("user", p.text),),
                max_tokens=max_new_tokens,
                temperature=style.temperature,
                top_p=style.top_p,
                seed=int(fingerprint([seed, p.prompt_id, c], 8), 16) % (2**31 - 1),
            )
            return job, await d.call(request)

        results, usage = self._run("teacher sampling", "responses", jobs, work, seed)
        out: TeacherOutput[Trajectory] = TeacherOutput([], usage=usage)
        for (p, c, style), outcome in results:
            if outcome.result is None:
                out.failed.append(
                    {
                        "id": f"{p.prompt_id}-c{c}",
                        "purpose": "sample",
                        "error": outcome.error,
                        "attempts": outcome.attempts,
                    }
                )
                continue
            r = outcome.result
            out.items.append(
                make_trajectory(p, c, style, seed, r.text.strip(), r.output_tokens, r.finish_reason in FINISHED)
            )
        return out

    # -- rating --------------------------------------------------------------------------------------
    def _rating_request(self, t: Trajectory, extra_turns: tuple[tuple[str, str], ...] = ()) -> ChatRequest:
        return ChatRequest(
            purpose="rate",
            system=self.system,
            turns=(("user", rating_turn(t.prompt, t.response)), *extra_turns),
            max_tokens=self.tcfg.api.rating_max_tokens,
            temperature=0.0,  # backends that take no sampling settings (Anthropic) leave it out
            schema=self.schema,
        )

    def rate(self, trajectories: Sequence[Trajectory]) -> TeacherOutput[Label]:
        async def work(d: Dispatcher, t: Trajectory) -> tuple[str, Any]:
            turns: tuple[tuple[str, str], ...] = ()
            seen: list[str] = []
            for purpose in ("rate", "rate (re-ask)"):
                outcome = await d.call(self._rating_request(t, turns))
                if outcome.result is None:
                    return "failed", {
                        "id": t.trajectory_id,
                        "purpose": purpose,
                        "error": outcome.error,
                        "attempts": outcome.attempts,
                    }
                label, problems = self._parse(outcome.result, t)
                if label is not None:
                    return "ok", label
                seen.append("; ".join(problems))
                # Re-ask once, showing the answer and what is wrong with it.
                turns = (
                    ("assistant", outcome.result.text or "(no answer)"),
                    ("user", f"That label is invalid: {seen[-1]}. Send the whole label again, corrected."),
                )
            return "rejected", {
                "trajectory_id": t.trajectory_id,
                "check": "invalid_output",
                "reason": f"invalid after one re-ask: {seen[1]} (first answer: {seen[0]})",
                "row": outcome.result.text[:4000],
            }

        # One call per distinct exchange: two candidates with the same prompt and reply get the same
        # label, live and when rebuilt from the cache alike (their call is one cache key).
        first: dict[tuple[str, str], int] = {}  # exchange -> its place in `distinct`
        distinct: list[Trajectory] = []
        for t in trajectories:
            if (t.prompt, t.response) not in first:
                first[(t.prompt, t.response)] = len(distinct)
                distinct.append(t)
        results, usage = self._run("teacher rating", "responses", distinct, work, 0)
        out: TeacherOutput[Label] = TeacherOutput([], usage=usage)
        for t in trajectories:
            kind, value = results[first[(t.prompt, t.response)]]
            if kind == "ok":
                value = value.model_copy(update={"trajectory_id": t.trajectory_id, "prompt_id": t.prompt_id})
            else:
                value = {
                    **value,
                    **({"id": t.trajectory_id} if kind == "failed" else {"trajectory_id": t.trajectory_id}),
                }
            {"ok": out.items, "failed": out.failed, "rejected": out.rejected}[kind].append(value)
        return out

    def _parse(self, r: ChatResult, t: Trajectory) -> tuple[Label | None, list[str]]:
        if r.data is None:
            return None, [r.parse_error or "no structured answer"]
        return label_from_answer(r.data, t, self.dimensions)

    # -- free text -----------------------------------------------------------------------------------
    def write(self, requests: Sequence[WriteRequest]) -> TeacherOutput[str | None]:
        async def work(d: Dispatcher, r: WriteRequest) -> CallOutcome:
            request = ChatRequest(
                purpose="write",
                system=r.system,
                turns=(("user", r.instruction),),
                max_tokens=r.max_new_tokens,
                temperature=r.temperature,
                seed=r.seed,
            )
            return await d.call(request)

        results, usage = self._run("teacher writing", "texts", requests, work, 0)
        out: TeacherOutput[str | None] = TeacherOutput([], usage=usage)
        for r, outcome in zip(requests, results):
            out.items.append(outcome.result.text.strip() if outcome.result else None)
            if outcome.result is None:
                out.failed.append(
                    {"id": r.key, "purpose": "write", "error": outcome.error, "attempts": outcome.attempts}
                )
        return out
