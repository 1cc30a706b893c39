"""The gate an adapter passes before it goes live.

A candidate passes when all of these hold, each measured against the adapter live now (the base
student when none is):

- its Reward Health Index is at least `health.deploy_threshold` (null: the health calibration's threshold;
  the daily job's: the `reward_health_index` of that adapter; an online update's: the fast loop's
  partial index, against its skip_below);
- the reward model's win rate of its replies over the live adapter's on the held-out prompts (greedy, decoded as
  the evaluation decodes; a tie counts half) is not below 50% beyond `health.win_rate_margin`;
- it still answers every memory-probe question the live adapter answers with its fact;
- its implicit reward orders the people's held-out pairs (`reward_model.people_pairs`' held_out) as
  people did not less often than the live adapter's beyond `health.people_margin` (the base orders half by
  construction);
- its reply to a plain greeting is neither empty nor degenerate (one repeated word, no letters);
- the reward signal it was trained on (its `manifold.json`) has no collapsed dimension and no dominant column
  (`health.manifold`, `evaluation.manifold`); an adapter written without the figures is marked not measured;
- its own replies, greedy, to the reply checks' items (`evaluation.reply_checks`: recall of what the person said,
  general facts, instructions kept, sameness) are no worse than the live adapter's beyond `health.reply_margins`;
- an online update trained on a person's taste: their taste model does not prefer the live adapter's replies to
  its own, and its implicit reward orders their choices it never trained on (`online.taste.held_out`) as they chose
  not less often than the live adapter's, each beyond `health.taste_margin`.

Each sampled check (the win rate, the people's pairs, the reply checks) is decided under its own noise by one
rule, paired non-inferiority at `health.confidence` (`core/evaluation/noise.py`), and reports its estimate, its
standard error, the smallest drop it can detect and the rule under `checks` in the gate's figures.

Candidate and live adapter are loaded side by side on one base (PEFT named adapters), so the two are
compared on the same prompts in one process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.evaluation.noise import NoiseRule, PairedCheck, paired_check
from hominem_pipeline.core.lm.generation import degenerate
from hominem_pipeline.core.online.gate_person import choices_check, taste_checks
from hominem_pipeline.core.online.reply_cache import ReplyCache

if TYPE_CHECKING:
    from hominem_pipeline.core.reward.model import RewardModel

log = logging.getLogger(__name__)

SMOKE_PROMPT = "Hello! How are you today?"
CANDIDATE, LIVE = "candidate", "live"


@dataclass(frozen=True)
class GateReport:
    passed: bool
    reasons: list[str]  # why it failed, one line per failed condition (empty when it passed)
    figures: dict[str, Any] = field(default_factory=dict)  # every measured figure and its threshold

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "reasons": self.reasons, **self.figures}

    def summary(self) -> str:
        f = self.figures
        rhi = "n/a" if f.get("rhi") is None else f"{f['rhi']:.3f}"
        checks = [
            f"{c['name']} {c['candidate']:.1%} vs {c['reference']:.1%} ({c['difference']:+.1%}"
            f"{_spread(c['standard_error'])}, n={c['items']}"
            f"{', refused' if c['refused'] else '' if c.get('checked', True) else ', not checked'})"
            for c in f.get("checks", {}).values()
        ]
        if "people" not in f.get("checks", {}) and f.get("people_accuracy") is not None:
            checks.append(
                f"people's held-out pairs {f['people_accuracy']:.1%} vs {f['people_accuracy_live']:.1%} (not checked)"
            )
        head = (
            f"RHI {rhi} (>= {f.get('deploy_threshold')}) against {f.get('live_version') or 'the base'}, "
            + "".join(f"{c}, " for c in checks)
            + f"facts lost {f.get('facts_lost', 0)}"
        )
        return head + ("" if self.passed else "; " + "; ".join(self.reasons))


def _spread(standard_error: float) -> str:
    """A check's spread as the summary writes it (+- its standard error), or nothing where it has none (one item)."""
    return f" +- {standard_error:.1%}" if np.isfinite(standard_error) else ""


def side_by_side_model(base: Any, candidate: Path, live: Path | None):
    """The base model with the candidate and (if any) the live adapter loaded under their names."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(base, candidate, adapter_name=CANDIDATE)
    if live is not None:
        model.load_adapter(str(live), adapter_name=LIVE)
    model.eval()
    return model


def replies_of(
    model: Any, tokenizer: Any, name: str | None, prompts: Sequence[str], cfg: HominemConfig, seed: int
) -> list[str]:
    """Greedy replies (the evaluation's decoding) with adapter `name`, or the base alone (None)."""
    from hominem_pipeline.core.evaluation.compare import greedy_replies
    from hominem_pipeline.core.policy.lora import merged

    if name is not None:
        model.set_adapter(name)
    with model.disable_adapter() if name is None else merged(model):
        return [
            g.text
            for g in greedy_replies(model, tokenizer, prompts, cfg.evaluation, seed, f"gate replies, {name or 'base'}")
        ]


def replies_in_groups(
    model: Any,
    tokenizer: Any,
    name: str | None,
    groups: Sequence[Sequence[str]],
    known: dict[str, str],
    cfg: HominemConfig,
    seed: int,
) -> list[str]:
    """`replies_of` each group's prompts, in order. Those in `known` (prompt -> reply) are not generated; the rest,
    of every group, are decoded together (a CPU decoding step costs little more for 38 rows than for 18, and
    greedy replies do not depend on their batch but where two tokens are nearly tied), and added to it."""
    missing = [p for p in dict.fromkeys(p for group in groups for p in group) if p not in known]
    known |= dict(zip(missing, replies_of(model, tokenizer, name, missing, cfg, seed) if missing else []))
    return [known[p] for group in groups for p in group]


@dataclass(frozen=True)
class GateSides:
    """The two adapters the gate compares, loaded side by side on the base.

    Args:
        candidate: the candidate adapter's folder.
        live: the live adapter's folder (None: the base).
        candidate_version: the candidate's version (its replies are kept in the cache under it).
        live_version: the live version (None: the base).
    """

    candidate: Path
    live: Path | None
    candidate_version: str | None = None
    live_version: str | None = None


@dataclass(frozen=True)
class GateModels:
    """What the gate runs: the base student with its tokenizer, the reward model that scores the replies, and the
    base's log-probability cache of the people's pairs' replies (`fixtures.base_logp_cache`; None: none)."""

    base: Any
    tokenizer: Any
    reward_model: RewardModel
    base_logps: Any = None


@dataclass(frozen=True)
class GateQuestions:
    """What both adapters are asked.

    Args:
        prompts: the held-out prompts whose replies the reward model compares.
        memory: the memory rows whose facts are asked (`memory.fact_questions`; None: no memory probe).
        people: the people's held-out pairs (pair_id, prompt, chosen, rejected) both implicit rewards are compared
            on (`health.people_margin`); None: not compared.
        seed: the decoding's seed (greedy decoding draws nothing; kept for sampling settings).
        reply_checks: the reply checks' sets (`reply_checks.load_reply_checks`) both sides answer, judged by the
            paired rule (`health.reply_margins`); None: not asked.
        view: how the served student reads a conversation (`with_stated_facts` under serving.recall_facts).
        tastes: the taste model of each person whose taste pairs an online update trained on (by rater): each judges
            both sides' replies to the held-out prompts (`health.taste_margin`); None: none.
        choices: those persons' choices the update never trained on (by rater; prompt, chosen, rejected): both sides'
            implicit rewards are compared on them (`health.taste_margin`); None: none.
    """

    prompts: Sequence[str]
    memory: pd.DataFrame | None = None
    people: pd.DataFrame | None = None
    seed: int = 0
    reply_checks: Any = None
    view: Any = None
    tastes: dict[str, Any] | None = None
    choices: dict[str, pd.DataFrame] | None = None


@dataclass(frozen=True)
class GateHealth:
    """The candidate's Reward Health Index and what it is held to.

    Args:
        rhi: the index (None: not measured, which fails the gate), or a function that measures it (the online
            updates' partial index) from the held-out prompts, the candidate's replies to them and the candidate
            loaded (the gate's model with the candidate's adapter active, and the tokenizer).
        threshold: the index it needs (None: the calibration's threshold, or `health.deploy_threshold`).
        threshold_name: the setting the threshold comes from.
        measured: the health report (its components and those below the panel's range, for the refusal's words).
    """

    rhi: float | Callable[[list[str], list[str], tuple[Any, Any]], float | None] | None = None
    threshold: float | None = None
    threshold_name: str | None = None
    measured: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Replies:
    """Both sides' replies: to the held-out prompts, the memory questions and (the candidate) the smoke prompt."""

    texts: list[str]
    asked: list[str]
    questions: pd.DataFrame | None
    live: list[str]
    candidate: list[str]
    generated: int  # replies generated now (the rest came from the cache)
    live_known: dict[str, str]  # the live side's replies by prompt, the cache's and the new ones


@dataclass
class _Verdict:
    figures: dict[str, Any]
    reasons: list[str] = field(default_factory=list)

    def add(self, check: PairedCheck, setting: str) -> None:
        """A sampled check's figures (under `checks`, by name) and, when its rule refused, the reason."""
        self.figures.setdefault("checks", {})[check.name] = check.as_dict()
        if check.refused:
            self.reasons.append(f"{check.reason()} ({setting})")


def _replies(
    model: Any, sides: GateSides, models: GateModels, questions: GateQuestions, cfg, cache, fresh: dict[str, str]
) -> _Replies:
    """Both sides' replies to the held-out prompts and the memory questions, and the candidate's to the smoke prompt:
    the candidate's are in the cache (its evaluation wrote them under its version) or `fresh`; what the cache does not
    hold of the live side's is decoded together."""
    from hominem_pipeline.core.evaluation.memory import fact_questions

    texts = list(questions.prompts)
    asked_rows = fact_questions(questions.memory)
    asked = [] if asked_rows is None else list(asked_rows["prompt"])
    known = cache.get(sides.live_version) if cache is not None else {}
    mine = cache.get(sides.candidate_version) if cache is not None and sides.candidate_version is not None else {}
    mine |= fresh
    had = len(known)
    live_name = None if sides.live is None else LIVE
    tok, seed = models.tokenizer, questions.seed
    live = replies_in_groups(model, tok, live_name, (texts, asked), known, cfg, seed)
    candidate = replies_in_groups(model, tok, CANDIDATE, (texts, asked, [SMOKE_PROMPT]), mine, cfg, seed)
    return _Replies(texts, asked, asked_rows, live, candidate, len(known) - had + len(fresh), known)


def _candidate_replies(
    model: Any,
    tokenizer: Any,
    questions: GateQuestions,
    cfg: HominemConfig,
    cache: ReplyCache | None,
    sides: GateSides,
) -> dict[str, str]:
    """The candidate's greedy replies to all it is asked that the cache does not hold under its version: the held-out
    prompts, the memory questions, the smoke prompt and the reply checks' items, decoded together (`lm.greedy`: the
    replies of every token limit share full decoding steps). Keyed as the cache keeps them: a prompt, or a reply
    check's item key."""
    from hominem_pipeline.core.evaluation.memory import fact_questions
    from hominem_pipeline.core.evaluation.reply_checks.generation import check_requests
    from hominem_pipeline.core.lm.generation import chat_text
    from hominem_pipeline.core.lm.greedy import decode_as_evaluated
    from hominem_pipeline.core.policy.lora import merged

    held = cache.get(sides.candidate_version) if cache is not None and sides.candidate_version is not None else {}
    asked_rows = fact_questions(questions.memory)
    prompts = [*questions.prompts, *([] if asked_rows is None else asked_rows["prompt"]), SMOKE_PROMPT]
    wanted = {p: (chat_text(tokenizer, p), cfg.evaluation.max_new_tokens) for p in prompts}
    if questions.reply_checks is not None:
        wanted |= check_requests(tokenizer, questions.reply_checks, questions.view)
    wanted = {k: asked for k, asked in wanted.items() if k not in held}
    if not wanted:
        return {}
    texts, limits = [text for text, _ in wanted.values()], [limit for _, limit in wanted.values()]
    model.set_adapter(CANDIDATE)
    with merged(model):
        out = decode_as_evaluated(model, tokenizer, texts, limits, cfg.evaluation, "gate replies, candidate")
    return {k: g.text for k, g in zip(wanted, out)}


def _scores(replies: _Replies, sides: GateSides, models: GateModels, cache: ReplyCache | None) -> dict[str, Any]:
    """The reward model's scalar of each side's replies to the held-out prompts; the live adapter's kept with its
    replies, the candidate's under its version."""
    reward_model, texts = models.reward_model, replies.texts
    source = getattr(reward_model, "source", None)
    rm_key = None if cache is None or source is None else str(Path(source).resolve())
    known_scalars = cache.scalars(sides.live_version, rm_key) if cache is not None else {}
    scores = {
        "live": _scalars(reward_model, texts, replies.live[: len(texts)], known_scalars),
        "candidate": _scalars(reward_model, texts, replies.candidate[: len(texts)], {}),
    }
    if cache is not None:
        cache.put(sides.live_version, replies.live_known, dict(zip(texts, scores["live"].tolist())), rm_key)
        if sides.candidate_version is not None:
            answered = dict(zip(texts + replies.asked + [SMOKE_PROMPT], replies.candidate))
            cache.put(sides.candidate_version, answered, dict(zip(texts, scores["candidate"].tolist())), rm_key)
    return scores


def _check_rhi(verdict: _Verdict, rhi: float | None, health: GateHealth, threshold: float, name: str) -> None:
    if rhi is None:
        verdict.reasons.append("no Reward Health Index measured for it")
    elif rhi < threshold:
        from hominem_pipeline.core.evaluation.calibration import below_range_text

        measured = health.measured
        low = below_range_text(measured.get("components", {}), measured.get("below_range", []))
        verdict.reasons.append(f"RHI {rhi:.3f} below {name} {threshold}" + (f"; {low}" if low else ""))
    if health.measured.get("components"):
        verdict.figures["rhi_components"] = health.measured["components"]
        verdict.figures["rhi_below_range"] = health.measured.get("below_range", [])


def _check_wins(verdict: _Verdict, scores: dict[str, Any], cfg: HominemConfig, live_version: str | None) -> None:
    from hominem_pipeline.core.evaluation.compare import outcome
    from hominem_pipeline.core.evaluation.health.index import win_rate_check

    wins = [outcome(float(a), float(b)) for a, b in zip(scores["live"], scores["candidate"])]
    verdict.figures.update(
        win_rate_vs_live=float(np.mean(wins)),
        live_mean_scalar=_nanmean(scores["live"]),
        candidate_mean_scalar=_nanmean(scores["candidate"]),
    )
    verdict.add(win_rate_check(wins, cfg.health, live_version or "the base"), "health.win_rate_margin")


def _check_facts(verdict: _Verdict, replies: _Replies) -> None:
    """The memory probe: no fact the live adapter answers may be lost."""
    from hominem_pipeline.core.evaluation.memory import probe

    verdict.figures.update(facts_asked=0, facts_live=0, facts_candidate=0, facts_lost=0, facts_lost_prompts=[])
    if not replies.asked:
        return
    n, k = len(replies.texts), len(replies.asked)
    found = probe(replies.questions, {"base": replies.live[n : n + k], "adapter": replies.candidate[n : n + k]})
    verdict.figures.update(
        facts_asked=found.questions,
        facts_live=found.base,
        facts_candidate=found.adapter,
        facts_lost=len(found.lost),
        facts_lost_prompts=found.lost,
    )
    if found.lost:
        verdict.reasons.append(
            f"lost {len(found.lost)} memory-probe fact(s) the live adapter knows (first: {found.lost[0]!r})"
        )


def _check_manifold(verdict: _Verdict, candidate: Path, cfg: HominemConfig) -> None:
    from hominem_pipeline.core.evaluation.manifold import ManifoldShape

    shape = ManifoldShape.read(candidate)
    if shape is None:
        verdict.figures["manifold"] = "not measured: the adapter was written without its reward manifold's figures"
        return
    judged = shape.judged(cfg.health.manifold)
    verdict.figures.update(manifold=judged.summary(), manifold_blocked=judged.blocked, **shape.metrics())
    verdict.reasons += [f"reward manifold: {r}" for r in judged.reasons]


def run_gate(
    sides: GateSides,
    *,
    cfg: HominemConfig,
    models: GateModels,
    questions: GateQuestions,
    health: GateHealth = GateHealth(),
    cache: ReplyCache | None = None,
) -> GateReport:
    """Measure the candidate against the live adapter (or the base), both loaded on the base student, and say
    whether it may go live (see the module's docstring). With a `cache`, the live adapter's replies it holds are
    not generated again, and the candidate's (and both sides' people's margins) are kept in it."""
    if not questions.prompts:
        raise ValueError("the gate needs held-out prompts to compare on; set prompts.eval_per_category to at least 1")
    threshold, threshold_name = health.threshold, health.threshold_name
    if threshold is None:
        from hominem_pipeline.core.evaluation.calibration import resolve

        settings = resolve(cfg)
        threshold, threshold_name = settings.threshold, settings.threshold_name
    threshold_name = threshold_name or "health.deploy_threshold"
    model = side_by_side_model(models.base, sides.candidate, sides.live)
    fresh = _candidate_replies(model, models.tokenizer, questions, cfg, cache, sides)
    replies = _replies(model, sides, models, questions, cfg, cache, fresh)
    scores = _scores(replies, sides, models, cache)
    rhi = health.rhi
    if callable(rhi):
        model.set_adapter(CANDIDATE)
        rhi = rhi(replies.texts, replies.candidate[: len(replies.texts)], (model, models.tokenizer))
    smoke = replies.candidate[-1]
    verdict = _Verdict(
        {
            "candidate": str(sides.candidate),
            "live_version": sides.live_version,
            "rhi": rhi,
            "deploy_threshold": threshold,
            "win_rate_margin": cfg.health.win_rate_margin,
            "confidence": cfg.health.confidence,
            "prompts": len(questions.prompts),
            "replies_generated": replies.generated,
            "smoke_reply": smoke,
        }
    )
    if (why := degenerate(smoke)) is not None:
        verdict.reasons.append(f"smoke generation: {why}")
    _check_rhi(verdict, rhi, health, threshold, threshold_name)
    _check_wins(verdict, scores, cfg, sides.live_version)
    if questions.tastes:
        n = len(replies.texts)
        sides_replies = (replies.texts, replies.live[:n], replies.candidate[:n])
        taste_checks(verdict, *sides_replies, models.reward_model, questions.tastes, cfg, sides.live_version)
    _check_facts(verdict, replies)
    _check_manifold(verdict, sides.candidate, cfg)
    if questions.people is not None and len(questions.people):
        _people_check(model, models, questions.people, cfg, cache, sides, verdict)
    for rater, choices in sorted((questions.choices or {}).items()):
        adapters = (CANDIDATE, None if sides.live is None else LIVE)
        held = (models.tokenizer, models.base_logps, choices)
        choices_check(verdict, model, adapters, *held, rater, cfg, sides.live_version)
    if questions.reply_checks is not None:
        _reply_checks(model, models.tokenizer, questions, cfg, cache, sides, verdict, fresh)
    report = GateReport(not verdict.reasons, verdict.reasons, verdict.figures)
    log.info("live gate for %s: %s. %s", sides.candidate, "passed" if report.passed else "refused", report.summary())
    return report


def _people_check(
    model: Any,
    models: GateModels,
    people: pd.DataFrame,
    cfg: HominemConfig,
    cache: ReplyCache | None,
    sides: GateSides,
    verdict: _Verdict,
) -> None:
    """Compare the candidate's and the live adapter's (None: the base's) implicit rewards on the people's
    held-out pairs; adds the figures, and the paired check's verdict (`health.people_margin`). Margins the cache
    holds for a version are not measured again."""
    from hominem_pipeline.core.evaluation.people_pairs import compare_margins, pair_scores

    ids = [str(i) for i in people["pair_id"]]

    def margins(name: str, version: str | None) -> np.ndarray:
        known = cache.margins(version) if cache is not None and version is not None else {}
        if not all(i in known for i in ids):
            from hominem_pipeline.core.evaluation.compare import people_figures

            model.set_adapter(name)
            batch = cfg.evaluation.batch_size
            known = {
                **known,
                **people_figures(model, models.tokenizer, people, batch, models.base_logps)["people_margins"],
            }
            if cache is not None and version is not None:
                cache.put(version, {}, margins={i: known[i] for i in ids})
        return np.array([known[i] for i in ids], dtype=np.float64)

    candidate = margins(CANDIDATE, sides.candidate_version)
    live = margins(LIVE, sides.live_version) if sides.live is not None else np.zeros(len(ids))
    result = compare_margins(candidate, live)
    verdict.figures.update(
        people_pairs=result.pairs,
        people_accuracy=result.candidate,
        people_accuracy_live=result.live,
        people_difference=result.difference,
        people_standard_error=result.standard_error,
        people_margin=cfg.health.people_margin,
    )
    if cfg.health.people_margin is not None:
        rule = NoiseRule(cfg.health.people_margin, cfg.health.confidence, cfg.health.power)
        what = "the implicit reward's order of the people's held-out pairs"
        check = paired_check(
            "people", what, pair_scores(candidate), pair_scores(live), rule, sides.live_version or "the base"
        )
        verdict.add(check, "health.people_margin")


def _reply_checks(
    model: Any,
    tokenizer: Any,
    questions: GateQuestions,
    cfg: HominemConfig,
    cache: ReplyCache | None,
    sides: GateSides,
    verdict: _Verdict,
    fresh: dict[str, str],
) -> None:
    """Both sides' replies to the reply checks' items (those the cache holds under a version are not generated
    again; the candidate's new ones are `fresh`; the new ones are kept), judged by the paired rule; each check's
    figures go under `checks` and its refusal, if any, among the reasons."""
    from hominem_pipeline.core.evaluation.reply_checks import check_replies, judge_replies
    from hominem_pipeline.core.policy.lora import merged

    def replies(name: str | None, version: str | None, new: dict[str, str]) -> dict[str, list[str]]:
        known = cache.get(version) if cache is not None and (version is not None or name is None) else {}
        had = dict(known)
        known |= new
        if name is not None:
            model.set_adapter(name)
        with model.disable_adapter() if name is None else merged(model):
            out = check_replies(
                model,
                tokenizer,
                questions.reply_checks,
                cfg.evaluation,
                questions.seed,
                known,
                questions.view,
                f"gate reply checks, {name or 'base'}",
            )
        if cache is not None and (version is not None or name is None) and known != had:
            cache.put(version, {k: v for k, v in known.items() if k not in had})
        return out

    live = replies(None if sides.live is None else LIVE, sides.live_version, {})
    candidate = replies(CANDIDATE, sides.candidate_version, fresh)
    checks, figures = judge_replies(
        questions.reply_checks, candidate, live, cfg.health, sides.live_version or "the base"
    )
    verdict.figures["reply_checks"] = figures
    for check in checks:
        verdict.add(check, f"health.reply_margins.{check.name}")


def _scalars(reward_model: RewardModel, prompts: list[str], replies: list[str], known: dict[str, float]) -> np.ndarray:
    """The reward model's scalar per reply (NaN for an empty one); those `known` (by prompt) are not scored again."""
    from hominem_pipeline.core.reward.model import score_side

    out = np.array([known.get(p, np.nan) for p in prompts], dtype=np.float64)
    todo = [i for i, p in enumerate(prompts) if p not in known]
    if todo:
        out[todo] = score_side(reward_model, [prompts[i] for i in todo], [replies[i] for i in todo])["scalar"]
    return out


def _nanmean(x: np.ndarray) -> float | None:
    return float(np.nanmean(x)) if np.isfinite(x).any() else None
