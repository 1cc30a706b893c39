"""The gate an adapter passes before it goes live.

A candidate passes when all of these hold, each measured against the adapter live now (the base
student when none is):

- its Reward Health Index is at least `health.deploy_threshold` (null: the health calibration's threshold;
  the daily job's: the `reward_health_index` of that adapter; an online update's: the fast loop's
  partial index, against its skip_below);
- the reward model prefers its replies to the live adapter's on at least `health.min_win_rate` of the
  held-out prompts (greedy, decoded as the evaluation decodes; a tie counts half);
- it still answers every memory-probe question the live adapter answers with its fact;
- its implicit reward orders the people's held-out pairs (`reward_model.people_pairs`' held_out) as
  people did no less often than the live adapter's, within `health.people_tolerance` standard errors
  of the paired difference (the base orders half by construction);
- its reply to a plain greeting is neither empty nor degenerate (one repeated word, no letters);
- the reward signal it was trained on (its `manifold.json`) has no collapsed dimension and no dominant column
  (`health.manifold`, `evaluation.manifold`); an adapter written without the figures is marked not measured.

Candidate and live adapter are loaded side by side on one base (PEFT named adapters), so the two are
compared on the same prompts in one process.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.common.files import write_text_atomic
from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.lm.generation import degenerate

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
        win = "n/a" if f.get("win_rate_vs_live") is None else f"{f['win_rate_vs_live']:.0%}"
        rhi = "n/a" if f.get("rhi") is None else f"{f['rhi']:.3f}"
        people = (
            ""
            if f.get("people_accuracy") is None
            else f"people's held-out pairs {f['people_accuracy']:.1%} (live {f['people_accuracy_live']:.1%} "
            f"+- {f['people_standard_error']:.1%}), "
        )
        head = (
            f"RHI {rhi} (>= {f.get('deploy_threshold')}), win rate over "
            f"{f.get('live_version') or 'the base'} {win} (>= {f.get('min_win_rate')}), "
            f"{people}facts lost {f.get('facts_lost', 0)}"
        )
        return head + ("" if self.passed else "; " + "; ".join(self.reasons))


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
    """`replies_of` each group's prompts, each group batched on its own as the evaluation batches it (so
    the replies equal the evaluation's), in order; those in `known` (prompt -> reply) are not generated,
    and the new ones are added to it."""
    out: list[str] = []
    for group in groups:
        missing = [p for p in dict.fromkeys(group) if p not in known]
        known |= dict(zip(missing, replies_of(model, tokenizer, name, missing, cfg, seed) if missing else []))
        out += [known[p] for p in group]
    return out


class ReplyCache:
    """The gate's greedy replies per adapter version (`<folder>/<version>.json`, `base.json` for the base alone),
    valid for one decoding (evaluation settings and student; greedy decoding draws nothing, so no seed): a
    candidate's replies are the next gate's live replies once it is promoted, and the daily adapter's come from its
    evaluation (`promotion.reuse_evaluation_replies`), so each adapter answers the held-out prompts once."""

    def __init__(self, folder: Path, cfg: HominemConfig):
        from hominem_pipeline.core.pipeline.artifacts import fingerprint

        self.folder = Path(folder)
        self.key = fingerprint(
            [cfg.evaluation.model_dump(mode="json"), str(cfg.models.student.model_dump(mode="json"))], 16
        )

    def _path(self, version: str | None) -> Path:
        return self.folder / f"{version or 'base'}.json"

    def _read(self, version: str | None) -> dict[str, Any]:
        try:
            saved = json.loads(self._path(version).read_text())
        except (OSError, ValueError):  # none yet, or a torn write: generated again
            return {}
        return saved if saved.get("decoding") == self.key else {}

    def get(self, version: str | None) -> dict[str, str]:
        return self._read(version).get("replies", {})

    def scalars(self, version: str | None, reward_model: str | None) -> dict[str, float]:
        """The scalar `reward_model` (its folder) gave each of the version's replies, by prompt."""
        return self._read(version).get("scalars", {}).get(reward_model, {}) if reward_model else {}

    def margins(self, version: str | None) -> dict[str, float]:
        """The version's implicit reward on each people's held-out pair it was measured on, by pair id."""
        return self._read(version).get("people_margins", {})

    def put(
        self,
        version: str | None,
        replies: dict[str, str],
        scalars: dict[str, float] | None = None,
        reward_model: str | None = None,
        margins: dict[str, float] | None = None,
    ) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        saved = self._read(version)
        by_model = saved.get("scalars", {})
        if scalars and reward_model:
            by_model[reward_model] = {**by_model.get(reward_model, {}), **scalars}
        merged = {
            "decoding": self.key,
            "replies": {**saved.get("replies", {}), **replies},
            "scalars": by_model,
            "people_margins": {**saved.get("people_margins", {}), **(margins or {})},
        }
        if merged == saved:
            return  # nothing new: the file stays as it is
        write_text_atomic(self._path(version), json.dumps(merged, ensure_ascii=False))


def run_gate(
    candidate: Path,
    live: Path | None,
    *,
    cfg: HominemConfig,
    base: Any,
    tokenizer: Any,
    reward_model: Any,
    prompts: Sequence[str],
    memory: pd.DataFrame | None,
    rhi: float | Callable[[list[str], list[str]], float | None] | None,
    seed: int,
    live_version: str | None = None,
    threshold: float | None = None,
    threshold_name: str | None = None,
    rhi_measured: dict[str, Any] | None = None,
    cache: ReplyCache | None = None,
    candidate_version: str | None = None,
    people: pd.DataFrame | None = None,
    base_logps: Any = None,
) -> GateReport:
    """Measure `candidate` against `live` (None: the base), both loaded on `base` (the student, with its
    `tokenizer`), and say whether it may go live. `rhi`: the candidate's health index (None: not
    measured, which fails the gate), or a function of the held-out prompts and the candidate's replies to
    them that measures it (the online updates' partial index); `threshold`: the RHI it needs (default
    `health.deploy_threshold`), `threshold_name` the setting it comes from. With a `cache`, the live
    adapter's replies it holds are not generated again, and the candidate's are kept under
    `candidate_version`. `people`: the people's held-out pairs (pair_id, prompt, chosen, rejected) both
    adapters' implicit rewards are compared on (`health.people_tolerance`), `base_logps` the base
    student's log-probability cache of their replies (`fixtures.base_logp_cache`); their margins are kept
    in the cache too."""
    from hominem_pipeline.core.evaluation.compare import outcome
    from hominem_pipeline.core.evaluation.manifold import ManifoldShape
    from hominem_pipeline.core.evaluation.memory import fact_questions, probe

    if not prompts:
        raise ValueError("the gate needs held-out prompts to compare on; set prompts.eval_per_category to at least 1")
    if threshold is None:
        from hominem_pipeline.core.evaluation.calibration import resolve

        settings = resolve(cfg)
        threshold, threshold_name = settings.threshold, settings.threshold_name
    threshold_name = threshold_name or "health.deploy_threshold"
    rhi_measured = rhi_measured or {}
    model = side_by_side_model(base, candidate, live)
    live_name = None if live is None else LIVE
    texts = list(prompts)
    questions = fact_questions(memory)
    asked = [] if questions is None else list(questions["prompt"])
    # the held-out prompts batched on their own, as the evaluation batches them (so against the base the
    # replies are the evaluation's); the memory questions, and the candidate's smoke prompt with them, after
    # (the candidate's too: those its evaluation wrote are in the cache under its version)
    known = cache.get(live_version) if cache is not None else {}
    candidate_known = cache.get(candidate_version) if cache is not None and candidate_version is not None else {}
    had = len(known) + len(candidate_known)
    live_replies = replies_in_groups(model, tokenizer, live_name, (texts, asked), known, cfg, seed)
    candidate_replies = replies_in_groups(
        model, tokenizer, CANDIDATE, (texts, asked, [SMOKE_PROMPT]), candidate_known, cfg, seed
    )
    generated = len(known) + len(candidate_known) - had
    # the reward model's scalar of each side's replies to the held-out prompts; the live adapter's kept with its
    # replies
    rm_key = (
        None
        if cache is None or getattr(reward_model, "source", None) is None
        else str(Path(reward_model.source).resolve())
    )
    sides = {"live": live_replies[: len(texts)], "candidate": candidate_replies[: len(texts)]}
    known_scalars = cache.scalars(live_version, rm_key) if cache is not None else {}
    scores = {
        "live": _scalars(reward_model, texts, sides["live"], known_scalars),
        "candidate": _scalars(reward_model, texts, sides["candidate"], {}),
    }
    if cache is not None:
        cache.put(live_version, known, dict(zip(texts, scores["live"].tolist())), rm_key)
        if candidate_version is not None:
            cache.put(
                candidate_version,
                dict(zip(texts + asked + [SMOKE_PROMPT], candidate_replies)),
                dict(zip(texts, scores["candidate"].tolist())),
                rm_key,
            )
    if callable(rhi):
        rhi = rhi(texts, candidate_replies[: len(texts)])
    reasons: list[str] = []
    figures: dict[str, Any] = {
        "candidate": str(candidate),
        "live_version": live_version,
        "rhi": rhi,
        "deploy_threshold": threshold,
        "min_win_rate": cfg.health.min_win_rate,
        "prompts": len(prompts),
        "replies_generated": generated,
    }

    smoke = candidate_replies[-1]
    figures["smoke_reply"] = smoke
    if (why := degenerate(smoke)) is not None:
        reasons.append(f"smoke generation: {why}")

    if rhi is None:
        reasons.append("no Reward Health Index measured for it")
    elif rhi < threshold:
        from hominem_pipeline.core.evaluation.calibration import below_range_text

        low = below_range_text(rhi_measured.get("components", {}), rhi_measured.get("below_range", []))
        reasons.append(f"RHI {rhi:.3f} below {threshold_name} {threshold}" + (f"; {low}" if low else ""))
    if rhi_measured.get("components"):
        figures["rhi_components"] = rhi_measured["components"]
        figures["rhi_below_range"] = rhi_measured.get("below_range", [])

    wins = [outcome(float(a), float(b)) for a, b in zip(scores["live"], scores["candidate"])]
    win_rate = float(np.mean(wins))
    figures.update(
        win_rate_vs_live=win_rate,
        live_mean_scalar=_nanmean(scores["live"]),
        candidate_mean_scalar=_nanmean(scores["candidate"]),
    )
    if win_rate < cfg.health.min_win_rate:
        reasons.append(
            f"win rate over {live_version or 'the base'} {win_rate:.0%} below health.min_win_rate "
            f"{cfg.health.min_win_rate:.0%}"
        )

    figures.update(facts_asked=0, facts_live=0, facts_candidate=0, facts_lost=0, facts_lost_prompts=[])
    if asked:
        n = len(texts)
        found = probe(
            questions, {"base": live_replies[n : n + len(asked)], "adapter": candidate_replies[n : n + len(asked)]}
        )
        figures.update(
            facts_asked=found.questions,
            facts_live=found.base,
            facts_candidate=found.adapter,
            facts_lost=len(found.lost),
            facts_lost_prompts=found.lost,
        )
        if found.lost:
            reasons.append(
                f"lost {len(found.lost)} memory-probe fact(s) the live adapter knows (first: {found.lost[0]!r})"
            )
    shape = ManifoldShape.read(candidate)
    if shape is None:
        figures["manifold"] = "not measured: the adapter was written without its reward manifold's figures"
    else:
        verdict = shape.judged(cfg.health.manifold)
        figures.update(manifold=verdict.summary(), manifold_blocked=verdict.blocked, **shape.metrics())
        reasons += [f"reward manifold: {r}" for r in verdict.reasons]
    if people is not None and len(people):
        _people_check(
            model,
            tokenizer,
            people,
            cfg,
            cache,
            base_logps,
            candidate_version,
            live is not None,
            live_version,
            figures,
            reasons,
        )
    report = GateReport(not reasons, reasons, figures)
    log.info("live gate for %s: %s. %s", candidate, "passed" if report.passed else "refused", report.summary())
    return report


def _people_check(
    model: Any,
    tokenizer: Any,
    people: pd.DataFrame,
    cfg: HominemConfig,
    cache: ReplyCache | None,
    base_logps: Any,
    candidate_version: str | None,
    has_live: bool,
    live_version: str | None,
    figures: dict[str, Any],
    reasons: list[str],
) -> None:
    """Compare the candidate's and the live adapter's (None: the base's) implicit rewards on the people's
    held-out pairs; adds the figures, and the reason when the candidate falls below by more than
    `health.people_tolerance` standard errors. Margins the cache holds for a version are not measured again."""
    from hominem_pipeline.core.evaluation.people_pairs import compare_margins

    ids = [str(i) for i in people["pair_id"]]

    def margins(name: str, version: str | None) -> np.ndarray:
        known = cache.margins(version) if cache is not None and version is not None else {}
        if not all(i in known for i in ids):
            from hominem_pipeline.core.evaluation.compare import people_figures

            model.set_adapter(name)
            known = {
                **known,
                **people_figures(model, tokenizer, people, cfg.evaluation.batch_size, base_logps)["people_margins"],
            }
            if cache is not None and version is not None:
                cache.put(version, {}, margins={i: known[i] for i in ids})
        return np.array([known[i] for i in ids], dtype=np.float64)

    candidate = margins(CANDIDATE, candidate_version)
    live = margins(LIVE, live_version) if has_live else None
    result = compare_margins(candidate, live)
    tolerance = cfg.health.people_tolerance
    figures.update(
        people_pairs=result.pairs,
        people_accuracy=result.candidate,
        people_accuracy_live=result.live,
        people_difference=result.difference,
        people_standard_error=result.standard_error,
        people_tolerance=tolerance,
    )
    if tolerance is not None and result.below(tolerance):
        reasons.append(
            f"its implicit reward orders {result.candidate:.1%} of {result.pairs} people's held-out "
            "pairs as people did, below "
            f"{live_version or 'the base'}'s {result.live:.1%} by more than health.people_tolerance "
            f"{tolerance} standard error(s) "
            f"({result.standard_error:.1%})"
        )


def _scalars(reward_model: Any, prompts: list[str], replies: list[str], known: dict[str, float]) -> np.ndarray:
    """The reward model's scalar per reply (NaN for an empty one); those `known` (by prompt) are not scored again."""
    from hominem_pipeline.core.reward.model import score_side

    out = np.array([known.get(p, np.nan) for p in prompts], dtype=np.float64)
    todo = [i for i, p in enumerate(prompts) if p not in known]
    if todo:
        out[todo] = score_side(reward_model, [prompts[i] for i in todo], [replies[i] for i in todo])["scalar"]
    return out


def _nanmean(x: np.ndarray) -> float | None:
    return float(np.nanmean(x)) if np.isfinite(x).any() else None
