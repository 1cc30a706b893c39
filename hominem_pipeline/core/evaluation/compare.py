"""Base vs base+adapter on held-out prompts: generations, reward-model scores, win rate, deltas."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hominem_pipeline.core.common.schema import Prompt
from hominem_pipeline.core.config import EvaluationConfig
from hominem_pipeline.core.lm.generation import Generated, chat_text
from hominem_pipeline.core.reward.model import RewardModel, score_side

log = logging.getLogger(__name__)

SIDES = ("base", "adapter")


def greedy_replies(
    model: Any, tokenizer: Any, prompts: Sequence[str], cfg: EvaluationConfig, seed: int, what: str = "replies"
) -> list[Generated]:
    """The model's replies to `prompts` as the evaluation decodes them (`decode_as_evaluated`, `cfg.max_new_tokens`).
    Greedy decoding draws nothing: `seed` is not read."""
    from hominem_pipeline.core.lm.greedy import decode_as_evaluated

    texts = [chat_text(tokenizer, p) for p in prompts]
    return decode_as_evaluated(model, tokenizer, texts, cfg.max_new_tokens, cfg, what, "responses")


def generate_both(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    cfg: EvaluationConfig,
    seed: int,
    base_replies: dict[str, str] | None = None,
) -> dict[str, list[str]]:
    """Greedy responses of the base (adapter disabled) and of base+adapter for each prompt text.
    `base_replies` (prompt text -> the base's reply, decoded with the same settings) are reused, and the
    ones generated here are added to it: several adapters of one base are compared on one set of base replies."""
    from hominem_pipeline.core.policy.lora import merged

    known = {} if base_replies is None else base_replies
    todo = [p for p in dict.fromkeys(prompts) if p not in known]
    if todo:
        with model.disable_adapter():
            known.update(
                zip(
                    todo,
                    (g.text for g in greedy_replies(model, tokenizer, todo, cfg, seed, "evaluation generation, base")),
                )
            )
    with merged(model):
        adapter = greedy_replies(model, tokenizer, prompts, cfg, seed, "evaluation generation, adapter")
    return {"base": [known[p] for p in prompts], "adapter": [g.text for g in adapter]}


def outcome(base: float, adapter: float, tie_tolerance: float = 1e-6) -> float:
    """1 adapter wins, 0 base wins, 0.5 tie; an unscorable (empty) side loses to a scored one."""
    if math.isnan(base) and math.isnan(adapter):
        return 0.5
    if math.isnan(base):
        return 1.0
    if math.isnan(adapter):
        return 0.0
    if abs(adapter - base) <= tie_tolerance:
        return 0.5
    return 1.0 if adapter > base else 0.0


def compare(
    prompts: Sequence[Prompt], responses: dict[str, list[str]], reward_model: RewardModel
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The per-prompt table and the summary: win rate, mean scalar per side, per-dimension deltas."""
    texts = [p.text for p in prompts]
    scores = {side: score_side(reward_model, texts, responses[side]) for side in SIDES}
    dims = reward_model.dimensions
    rows = []
    for i, p in enumerate(prompts):
        row: dict[str, Any] = {"prompt_id": p.prompt_id, "category": p.category, "prompt": p.text}
        for side in SIDES:
            s = scores[side]
            row[f"{side}_response"] = responses[side][i]
            row[f"{side}_scalar"] = float(s["scalar"][i])
            row[f"{side}_reward_intensity"] = float(s["reward_intensity"][i])
            row[f"{side}_safety_score"] = float(s["safety_score"][i])
            row[f"{side}_vector"] = {d: float(s["vector"][i, j]) for j, d in enumerate(dims)}
        row["adapter_outcome"] = outcome(row["base_scalar"], row["adapter_scalar"])
        rows.append(row)
    table = pd.DataFrame(rows)
    deltas = scores["adapter"]["vector"] - scores["base"]["vector"]
    both = ~np.isnan(deltas).any(axis=1)
    summary: dict[str, Any] = {
        "prompts": len(prompts),
        "win_rate": float(table["adapter_outcome"].mean()) if len(table) else None,
        "base_mean_scalar": float(np.nanmean(scores["base"]["scalar"]))
        if np.isfinite(scores["base"]["scalar"]).any()
        else None,
        "adapter_mean_scalar": float(np.nanmean(scores["adapter"]["scalar"]))
        if np.isfinite(scores["adapter"]["scalar"]).any()
        else None,
        "empty_responses_base": int(sum(not r.strip() for r in responses["base"])),
        "empty_responses_adapter": int(sum(not r.strip() for r in responses["adapter"])),
        "identical_responses": int(sum(a == b for a, b in zip(responses["base"], responses["adapter"]))),
    }
    for j, d in enumerate(dims):
        summary[f"delta_{d}"] = float(deltas[both, j].mean()) if both.any() else None
    summary["win_rate_by_category"] = {c: float(g["adapter_outcome"].mean()) for c, g in table.groupby("category")}
    return table, summary


@dataclass(frozen=True)
class EvaluationProbes:
    """What an evaluation asks beside the held-out prompts.

    Args:
        memory: memory rows (`memory.read_memory_rows`): their fact questions are asked of both sides (the memory
            probe), in `summary["memory_probe"]`, with each question's replies in `summary["memory_answers"]`.
        fixtures: the contrast fixtures: whether the adapter moved the student toward their better replies
            (`fixtures.adapter_moves`), in `summary["fixtures"]` and the summary's fixture_* figures.
        people: the people's held-out pairs (pair_id, prompt, chosen, rejected): the adapter's implicit reward on
            them (`people_pairs.implicit_reward`, TRL's rewards/accuracies), in the summary's people_* figures and,
            per pair, in `summary["people_margins"]` (pair_id -> margin).

        reply_checks: the reply checks' sets (`reply_checks.load_reply_checks`): both sides' replies judged by the
            paired rule under `health`, in `summary["reply_checks"]` (each check's figures) and, per item,
            `summary["reply_check_replies"]` (key, check, id, base, adapter).
        view: how the served student reads a conversation (recall's items), e.g. `with_stated_facts`.
        health: the health settings whose rule (confidence, power, reply_margins) judges the reply checks.
    """

    memory: pd.DataFrame | None = None
    fixtures: Sequence[Any] | None = None
    people: pd.DataFrame | None = None
    reply_checks: Any = None
    view: Any = None
    health: Any = None


def _fixture_figures(model: Any, tokenizer: Any, fixtures: Sequence[Any], batch_size: int, cache: Any) -> dict:
    from hominem_pipeline.core.evaluation.fixtures import adapter_moves

    report, figures = adapter_moves(model, tokenizer, fixtures, batch_size, base_cache=cache)
    log.info(
        "contrast fixtures: the adapter moved the student toward the better reply on %.0f%% of %d "
        "(mean move %+.2f nats)",
        100 * report.accuracy,
        report.pairs,
        figures["fixture_mean_move"],
    )
    return {
        "fixture_moved_right": report.accuracy,
        **{f"fixture_moved_right_{t}": v for t, v in report.by_tag.items()},
        **figures,
        "fixtures": report.as_dict(),
    }


def evaluate_adapter(
    prompts: Sequence[Prompt],
    *,
    student_path: Path,
    adapter_path: Path,
    reward_model: RewardModel,
    cfg: EvaluationConfig,
    seed: int,
    probes: EvaluationProbes = EvaluationProbes(),
    base_replies: dict[str, str] | None = None,
    base_logps: Any = None,
    device: Any = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """`compare` on the held-out prompts, and what `probes` asks (`EvaluationProbes`).

    Args:
        prompts: the held-out prompts.
        student_path: the base student.
        adapter_path: the adapter evaluated on it.
        reward_model: scores both sides' replies.
        cfg: the `evaluation` settings (decoding, batch size).
        seed: the decoding's seed.
        probes: the memory probe, the contrast fixtures and the people's held-out pairs.
        base_replies: the base's replies already known (prompt text, or a reply check item's cache key -> reply),
            read instead of generated; the new ones are added (see `generate_both`).
        base_logps: the base student's log-probability cache of the fixtures' and people's pairs' replies
            (`fixtures.base_logp_cache`; None: measured).
        device: where the student runs (`core.lm.device`; None: the CPU).
    """
    from hominem_pipeline.core.evaluation.memory import fact_questions, probe
    from hominem_pipeline.core.policy.lora import load_policy

    if not prompts:
        raise ValueError("no evaluation prompts: set prompts.eval_per_category to at least 1")
    model, tokenizer = load_policy(student_path, adapter_path, device)
    responses = generate_both(model, tokenizer, [p.text for p in prompts], cfg, seed, base_replies)
    table, summary = compare(prompts, responses, reward_model)
    questions = fact_questions(probes.memory)
    if questions is not None and len(questions):
        answers = generate_both(model, tokenizer, list(questions["prompt"]), cfg, seed, base_replies)
        summary["memory_probe"] = probe(questions, answers).as_dict()
        summary["memory_answers"] = [
            {"prompt": q, "base": b, "adapter": a}
            for q, b, a in zip(questions["prompt"], answers["base"], answers["adapter"])
        ]
    if probes.people is not None and len(probes.people):
        summary.update(people_figures(model, tokenizer, probes.people, cfg.batch_size, base_logps))
    if probes.fixtures:
        summary.update(_fixture_figures(model, tokenizer, probes.fixtures, cfg.batch_size, base_logps))
    if probes.reply_checks is not None:
        summary.update(_reply_check_figures(model, tokenizer, probes, cfg, seed, base_replies))
    return table, summary


def _reply_check_figures(
    model: Any,
    tokenizer: Any,
    probes: EvaluationProbes,
    cfg: EvaluationConfig,
    seed: int,
    base_replies: dict[str, str] | None,
):
    """Both sides' replies to the reply checks' items, judged: the base's read from `base_replies` where known (the
    same base, sets and decoding give the same replies every day)."""
    from hominem_pipeline.core.evaluation.reply_checks import check_replies, judge_replies
    from hominem_pipeline.core.evaluation.reply_checks.generation import check_keys
    from hominem_pipeline.core.policy.lora import merged

    sets, view = probes.reply_checks, probes.view
    known = {} if base_replies is None else base_replies
    with model.disable_adapter():
        base = check_replies(model, tokenizer, sets, cfg, seed, known, view, "reply checks, base")
    mine: dict[str, str] = {}
    with merged(model):
        adapter = check_replies(model, tokenizer, sets, cfg, seed, mine, view, "reply checks, adapter")
    checks, figures = judge_replies(sets, adapter, base, probes.health, "the base")
    keys = check_keys(tokenizer, sets, view)
    rows = [
        {"key": k, "check": c, "id": item.id, "base": b, "adapter": a}
        for c, items in sets.items.items()
        for k, item, b, a in zip(keys[c], items, base[c], adapter[c])
    ]
    return {
        "reply_checks": {"checks": {c.name: c.as_dict() for c in checks}, "figures": figures},
        "reply_check_replies": rows,
    }


def people_figures(
    model: Any,
    tokenizer: Any,
    people: pd.DataFrame,
    batch_size: int,
    base_cache: Any = None,
    what: str = "people's held-out pairs",
) -> dict[str, Any]:
    """The active adapter's implicit reward on the people's held-out pairs, as the summary's people_*
    figures (the base's accuracy is 0.5 by construction), and each pair's margin (`people_margins`).
    `what`: the pairs, as the log line names them."""
    from hominem_pipeline.core.evaluation.people_pairs import implicit_reward

    reward, margins = implicit_reward(
        model,
        tokenizer,
        list(people["prompt"]),
        list(people["chosen"]),
        list(people["rejected"]),
        batch_size,
        base_cache=base_cache,
    )
    log.info(
        "%s: the adapter's implicit reward orders %.1f%% +- %.1f of %d as people did (base 50%%; mean margin "
        "%+.2f nats)",
        what,
        100 * reward.accuracy,
        100 * reward.standard_error,
        reward.pairs,
        reward.mean_margin,
    )
    return {
        "people_accuracy": reward.accuracy,
        "people_standard_error": reward.standard_error,
        "people_mean_margin": reward.mean_margin,
        "people_pairs": reward.pairs,
        "people_base_accuracy": 0.5,
        "people_base_prefers_chosen": reward.base_prefers_chosen,
        "people_adapter_prefers_chosen": reward.adapter_prefers_chosen,
        "people_margins": dict(zip(people["pair_id"].astype(str), margins.tolist())),
    }


def adapter_people_figures(
    student_path: Path,
    adapter_path: Path,
    people: pd.DataFrame,
    batch_size: int,
    base_cache: Any = None,
    device: Any = None,
) -> dict[str, Any]:
    """`people_figures` of the adapter at `adapter_path` (loaded here on `device`)."""
    from hominem_pipeline.core.policy.lora import load_policy

    model, tokenizer = load_policy(student_path, adapter_path, device)
    return people_figures(model, tokenizer, people, batch_size, base_cache)


@dataclass(frozen=True)
class SideBySide:
    prompt: str
    replies: dict[str, str]  # side (base, adapter) -> reply
    scores: dict[str, dict[str, float]]  # side -> output (each dimension, scalar, intensity, safety); NaN: empty reply
    p_adapter_preferred: float  # calibrated by the reward model; 1 or 0 when one side is empty


def _adapter_preferred(reward_model: RewardModel, scores: dict[str, dict[str, float]]) -> float:
    """The calibrated probability that the adapter's reply is preferred; 1 or 0 when one side is empty (unscored)."""
    base, adapter = scores["base"]["scalar"], scores["adapter"]["scalar"]
    return (
        reward_model.probability(adapter - base)
        if not (math.isnan(base) or math.isnan(adapter))
        else outcome(base, adapter)
    )


def side_by_side(
    prompts: Sequence[str],
    *,
    student_path: Path,
    adapter_path: Path,
    reward_model: RewardModel,
    cfg: EvaluationConfig,
    seed: int,
) -> list[SideBySide]:
    """Base and base+adapter replies to each prompt (greedy), each scored by the reward model (an empty
    reply is not scored and loses, as in the evaluation stage)."""
    from hominem_pipeline.core.policy.lora import load_policy

    if not prompts:
        raise ValueError("no prompt to compare on; pass --prompt TEXT or --eval-set")
    model, tokenizer = load_policy(student_path, adapter_path)
    replies = generate_both(model, tokenizer, prompts, cfg, seed)
    raw = {side: score_side(reward_model, prompts, replies[side]) for side in SIDES}
    rows = []
    for i, prompt in enumerate(prompts):
        scores = {
            side: {
                **{d: float(raw[side]["vector"][i, j]) for j, d in enumerate(reward_model.dimensions)},
                **{k: float(raw[side][k][i]) for k in ("scalar", "reward_intensity", "safety_score")},
            }
            for side in SIDES
        }
        rows.append(
            SideBySide(
                prompt, {side: replies[side][i] for side in SIDES}, scores, _adapter_preferred(reward_model, scores)
            )
        )
    return rows


def side_by_side_from_evaluation(table: pd.DataFrame, reward_model: RewardModel) -> list[SideBySide]:
    """The side-by-side rows an evaluation version already holds (its `generations.parquet`: both sides'
    greedy replies and scores, by the reward model it was judged with), in its order."""
    rows = []
    for r in table.itertuples(index=False):
        scores = {
            side: {
                **{
                    d: float((getattr(r, f"{side}_vector") or {}).get(d, math.nan)) for d in reward_model.dimensions
                },  # NaN: an empty reply
                **{k: float(getattr(r, f"{side}_{k}")) for k in ("scalar", "reward_intensity", "safety_score")},
            }
            for side in SIDES
        }
        rows.append(
            SideBySide(
                r.prompt,
                {side: getattr(r, f"{side}_response") for side in SIDES},
                scores,
                _adapter_preferred(reward_model, scores),
            )
        )
    return rows


def plot_dimension_deltas(summary: dict[str, Any], dimensions: Sequence[str], path: Path, title: str) -> Path:
    """Bar chart of the adapter's mean change per reward dimension (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = [summary.get(f"delta_{d}") or 0.0 for d in dimensions]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(dimensions, values, color=["#2b8a3e" if v >= 0 else "#c92a2a" for v in values])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel("adapter - base")
    ax.set_title(f"{title}  (win rate {summary.get('win_rate', float('nan')):.2f})")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
