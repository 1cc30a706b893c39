"""Offering an adapter for promotion: check its files, run the gate against the live adapter, then
promote it or keep it as a refused candidate with the reason. The daily job, `hominem live promote`,
the server's admin endpoint and the online updater all go through `offer`."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hominem_pipeline.core.config import HominemConfig
from hominem_pipeline.core.online.gate import (
    GateHealth,
    GateModels,
    GateQuestions,
    GateReport,
    GateSides,
    run_gate,
)
from hominem_pipeline.core.online.live import (
    HEALTH,
    BadAdapter,
    Live,
    LiveError,
    LiveState,
    check_adapter,
    find_adapter,
)
from hominem_pipeline.core.online.reply_cache import reply_cache
from hominem_pipeline.core.online.slow_loop import BY, Night, NightReport, act

if TYPE_CHECKING:
    from hominem_pipeline.core.reward.model import RewardModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Offer:
    version: str
    adapter: Path
    report: GateReport
    live: Live  # what is live after the offer
    # seconds to load the student and check the adapter, to decide (the gate), and to record the decision (the live
    # history, and on a promotion the MLflow registry's champion)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def promoted(self) -> bool:
        return self.report.passed


def health_of(cfg: HominemConfig, adapter: Path) -> GateHealth:
    """The RHI of `adapter`, the threshold it is held to and its setting (None: the health index's own), and what
    it measured: for an online update, the partial index in its health.json (held to the fast loop's
    skip_below); for a daily lora_adapter version, what the `reward_health_index` stage measured for it (the
    version this config implies, else the newest built on it). What it measured: each component with its value
    and where it lies against the panel's healthy range, and those below it. Nothing measured: an empty
    GateHealth (which the gate refuses)."""
    if (adapter / HEALTH).is_file():
        health = json.loads((adapter / HEALTH).read_text())
        from hominem_pipeline.core.evaluation.calibration import fast_loop

        skip = fast_loop(cfg)["skip_below"]
        return GateHealth(health.get("rhi"), skip.value, skip.name, _measured(health))
    from hominem_pipeline.core.pipeline.lineage import MissingInput, lineage

    version, day = adapter.name, adapter.parent.name
    on_it = []
    for manifest in (cfg.data_dir / "reward_health_index" / day).glob("*/manifest.json"):
        m = json.loads(manifest.read_text())
        if any(i["version"] == version for i in m.get("inputs", {}).get("lora_adapter", [])) and m.get(
            "complete", True
        ):
            on_it.append((manifest.stat().st_mtime, manifest.parent, m))
    if not on_it:
        return GateHealth()
    try:
        expected = lineage(cfg).expected("reward_health_index", day)
    except MissingInput:  # the config's inputs for that day are not all built: the newest measured on it
        expected = None
    chosen = next((x for x in on_it if expected is not None and x[1] == expected.path), max(on_it, key=lambda x: x[0]))
    folder, m = chosen[1], chosen[2]
    health = json.loads((folder / "health.json").read_text()) if (folder / "health.json").is_file() else {}
    return GateHealth(m["metrics"].get("rhi"), measured=_measured(health))


def _measured(health: dict[str, Any]) -> dict[str, Any]:
    """A health report's components (value, and verdict against the panel) and those below the healthy range."""
    verdicts = health.get("verdicts") or {}
    components = {
        k: {"value": c.get("value"), "verdict": verdicts.get(k)} for k, c in (health.get("components") or {}).items()
    }
    return {
        "components": components,
        "below_range": health.get("below_range") or [],
        "calibration": health.get("calibration"),
    }


def decisive_gate(data_dir: Path) -> dict[str, Any] | None:
    """The history entry of the gate that decided what is served: the live adapter's promotion, or the newest
    refusal while the base is served (None: no gate has run)."""
    state = LiveState(data_dir)
    current = state.current()
    if current.version is None:
        entries = state.candidates()[:1]
    else:
        entries = [
            e for e in reversed(state.history()) if e["action"] == "promote" and e["version"] == current.version
        ]
    return entries[0] if entries else None


def gate_lines(data_dir: Path) -> list[str]:
    """The sampled checks of the gate that decided what is served (`decisive_gate`), one line each: its figure
    +- its standard error against the model it was compared with, the rule, the smallest drop it detects, and its
    verdict."""
    from hominem_pipeline.core.evaluation.noise import PairedCheck

    entry = decisive_gate(data_dir)
    checks = ((entry or {}).get("gate") or {}).get("checks")
    if not checks:
        return []
    head = f"the gate's checks for {entry['version']} ({entry['time']}), each {PairedCheck.rule_words()}:"
    return [head] + [f"  {PairedCheck(**c).line()}" for c in checks.values()]


def why_base(data_dir: Path) -> str | None:
    """Why the base answers (no adapter is live), in words a person can act on: the newest candidate the
    gate refused, why, and the commands that serve it anyway or gate it again; None when an adapter is live."""
    state = LiveState(data_dir)
    if state.current().version is not None:
        return None
    refused = state.candidates()
    if not refused:
        return "no adapter has passed the gate yet (none was offered: `make run` builds and gates the day's adapter)"
    last = refused[0]
    figures = last.get("gate") or {}
    from hominem_pipeline.core.evaluation.calibration import below_range_text

    below = figures.get("rhi_below_range") or []
    low = below_range_text(figures.get("rhi_components") or {}, below)
    why = last.get("reason", "")
    if low and not any(k.upper() in why for k in below):  # a daily refusal's reason names them already
        why += f" (below the panel's healthy range: {low})"
    return (
        f"the gate refused {last['version']} ({last['time']}): {why}. `hominem serve --adapter latest` "
        "serves it anyway; "
        f"`hominem live promote {last['version']}` gates it again"
    )


def gate_prompts(cfg: HominemConfig) -> list[str]:
    """The held-out prompts of the newest `prompts` built under this config: what the gate compares on."""
    import pandas as pd

    from hominem_pipeline.core.builds.common import prompts_of
    from hominem_pipeline.core.pipeline.lineage import lineage

    ref = lineage(cfg).latest("prompts")
    if ref is None:
        raise LiveError("no prompts built under this config to compare adapters on; run `hominem run` first")
    return [p.text for p in prompts_of(pd.read_parquet(ref.file("prompts.parquet")), "eval")]


@dataclass(frozen=True)
class GateSubset:
    """How much of each held-out set a gate asks (the daily gate all of them, an online update's the first few), and
    whose taste models judge it."""

    people_pairs: int | None = None  # the first N of the people's held-out pairs (0: none; None: all)
    reply_items: int | None = None  # the first N items of each reply check (0: none; None: all)
    tastes: dict[str, Any] | None = None  # the taste model of each person whose taste pairs it trained on (by rater)
    choices: dict[str, Any] | None = None  # those persons' choices it never trained on (by rater)

    @classmethod
    def online(
        cls, cfg: HominemConfig, tastes: dict[str, Any] | None = None, choices: dict[str, Any] | None = None
    ) -> GateSubset:
        return cls(cfg.online.people_pairs, cfg.online.reply_check_items, tastes, choices)


def offer(
    cfg: HominemConfig,
    adapter: Path,
    *,
    by: str,
    reason: str,
    health: GateHealth | None = None,
    reward_model: RewardModel | None = None,
    version: str | None = None,
    seed: int | None = None,
    prompts: list[str] | None = None,
    subset: GateSubset = GateSubset(),
) -> Offer:
    """Gate `adapter` against the live one and promote it if it passes; a refusal is recorded with its
    reasons and the adapter stays on disk as a candidate. A damaged adapter (BadAdapter) is refused
    without running the gate.

    Args:
        cfg: the project's settings.
        adapter: the candidate's folder.
        by: who offers it (`cli:<user>`, `admin:<rater>`, `dagster`, ...), for the live history.
        reason: why, for the live history.
        health: its health index and what it is held to (`gate.GateHealth`); default: `health_of`.
        reward_model: the one its METADATA names, when the caller has it loaded already.
        version: its version (default: the folder's name).
        seed: the decoding's seed (default: `project.seed`).
        prompts: the held-out prompts (default: `gate_prompts`).
        subset: how much of the people's held-out pairs and of each reply check it asks (default: all, as the
            evaluation does; an online update's gate: `GateSubset.online`), and whose taste models judge it.
    """
    from hominem_pipeline.core.lm.models import load_student, student_path
    from hominem_pipeline.core.policy.lora import adapter_reward_model, base_checksum

    started = time.monotonic()
    state = LiveState(cfg.data_dir)
    adapter = Path(adapter)
    version = version or adapter.name
    current = state.current()
    if current.frozen:
        raise LiveError(
            f"live updates are frozen since {current.frozen['since']} ({current.frozen['reason']}); "
            "`hominem live unfreeze` first"
        )
    base, tokenizer = load_student(student_path(cfg))  # checks the adapter's base, then carries both adapters
    rm_path = adapter_reward_model(adapter, cfg.data_dir) if (adapter / "METADATA.json").is_file() else None
    try:
        check_adapter(adapter, base_checksum(base))
    except BadAdapter as exc:
        report = GateReport(
            False, [f"adapter files: {exc}"], {"candidate": str(adapter), "live_version": current.version}
        )
        state.refuse(version, adapter, rm_path, gate=report.as_dict(), reason=report.reasons[0], by=by)
        return Offer(version, adapter, report, current)
    rm_path = rm_path or state.reward_model_path(current)
    if rm_path is None or not Path(rm_path).is_dir():
        raise LiveError(
            f"no reward model to judge {adapter} with (its METADATA names {rm_path}); build one with `hominem run`"
        )
    sides = GateSides(adapter, state.adapter_path(current), version, current.version)
    loaded = time.monotonic()
    questions = _questions(cfg, prompts, subset, cfg.project.seed if seed is None else seed)
    questions = replace(questions, tastes=subset.tastes, choices=subset.choices)
    report = run_gate(
        sides,
        cfg=cfg,
        models=_models(cfg, base, tokenizer, reward_model, rm_path),
        questions=questions,
        health=health if health is not None else health_of(cfg, adapter),
        cache=reply_cache(cfg),
    )
    decided = time.monotonic()
    seconds = report.figures["seconds"] = {"load": round(loaded - started, 2), "decide": round(decided - loaded, 2)}
    if report.passed:
        live = state.promote(version, adapter, rm_path, gate=report.as_dict(), reason=reason, by=by)
        move_champion(cfg, live)
    else:
        state.refuse(version, adapter, rm_path, gate=report.as_dict(), reason="; ".join(report.reasons), by=by)
        live = current
    return Offer(version, adapter, report, live, {**seconds, "record": round(time.monotonic() - decided, 2)})


def _models(cfg: HominemConfig, base: Any, tokenizer: Any, reward_model: RewardModel, rm_path: Path) -> GateModels:
    from hominem_pipeline.core.evaluation.fixtures import base_logp_cache
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES
    from hominem_pipeline.core.reward.model import project_reward_model

    scorer = reward_model if reward_model is not None else project_reward_model(rm_path, cfg)
    logps = base_logp_cache(student_path(cfg), cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES))
    return GateModels(base, tokenizer, scorer, logps)


def _questions(cfg: HominemConfig, prompts: list[str] | None, subset: GateSubset, seed: int) -> GateQuestions:
    """The held-out prompts, the memory probe's rows (with `evaluation.memory_probe`), the people's held-out
    pairs and the reply checks' items (as much of each as `subset` says) the gate asks."""
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.builds.reward_model import people_pairs as held_out_pairs
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.evaluation.reply_checks import load_reply_checks
    from hominem_pipeline.core.online.facts import with_stated_facts

    sets = load_reply_checks(cfg) if subset.reply_items != 0 else None
    if sets is not None and subset.reply_items is not None:
        sets = sets.first(subset.reply_items)
    return GateQuestions(
        prompts=gate_prompts(cfg) if prompts is None else prompts,
        memory=read_memory_rows(memory_paths(cfg)) if cfg.evaluation.memory_probe else None,
        people=_first(held_out_pairs(cfg, "held_out"), subset.people_pairs),
        seed=seed,
        reply_checks=sets,
        view=with_stated_facts if cfg.serving.recall_facts else None,
    )


def _first(pairs: Any, n: int | None) -> Any:
    return pairs if pairs is None or n is None else pairs.head(n) if n > 0 else None


CHAMPION_MODEL = "hominem-lora-adapter"  # in the MLflow model registry; alias `champion` = the live adapter
CHAMPION = "champion"


def move_champion(cfg: HominemConfig, live: Live) -> int | None:
    """Point the registry's `champion` alias of hominem-lora-adapter at the live adapter (each adapter
    version registered once, its folder logged in an MLflow run `live/<version>`); with the base live,
    the alias is removed. Returns the registry version (None: the base)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from hominem_pipeline.core.pipeline.tracking import Tracker

    tracker = Tracker(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root))
    tracker.runs_for("live")  # points MLflow at the project's store
    _champion_reward_model(live)
    if live.version is None:
        try:
            MlflowClient().delete_registered_model_alias(CHAMPION_MODEL, CHAMPION)
        except MlflowException:  # no such model or alias yet: nothing to move
            pass
        return None
    adapter = LiveState(cfg.data_dir).adapter_path(live)
    with tracker.stage_run(
        asset="live",
        partition=live.since[:10],
        dagster_run_id=f"live-{live.version}",
        tags={"hominem.live_version": live.version},
    ) as run:

        def log_adapter() -> str:
            run.log_artifact(adapter, "adapter")
            return f"runs:/{run.run_id}/adapter"

        return run.register_model(
            CHAMPION_MODEL,
            live.version,
            log_adapter,
            alias=CHAMPION,
            description="hominem: LoRA adapters that went live; alias `champion` is the live one "
            "(data/live/current.json)",
        )


def _champion_reward_model(live: Live) -> None:
    """Point hominem-reward-model's `champion` alias at the reward model the live adapter serves with (its
    registry version tagged with that artifact version); none registered (or the base alone): left as is."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from hominem_pipeline.core.builds.reward_model import REWARD_MODEL_NAME
    from hominem_pipeline.core.pipeline.tracking import TAG_VERSION

    if not live.reward_model:
        return
    client = MlflowClient()
    try:
        found = client.search_model_versions(
            f"name = '{REWARD_MODEL_NAME}' and tags.`{TAG_VERSION}` = '{Path(live.reward_model).name}'"
        )
    except MlflowException:
        return
    if found:
        client.set_registered_model_alias(REWARD_MODEL_NAME, CHAMPION, found[0].version)


def rollback(cfg: HominemConfig, version: str | None, *, reason: str, by: str, **extra: Any) -> Live:
    """`LiveState.rollback`, with the registry's `champion` alias moved back too."""
    live = LiveState(cfg.data_dir).rollback(version, reason=reason, by=by, **extra)
    move_champion(cfg, live)
    return live


def promote_version(cfg: HominemConfig, version: str, *, by: str, reason: str = "promoted by hand") -> Offer:
    """`hominem live promote VERSION`: the adapter of that version, through the same gate."""
    return offer(cfg, find_adapter(cfg.data_dir, version), by=by, reason=reason, version=version)


def describe(live: Live) -> dict[str, Any]:
    return {
        "version": live.version or "base",
        "adapter": live.adapter,
        "reward_model": live.reward_model,
        "since": live.since or None,
        "frozen": live.frozen,
    }


def gate_daily_adapter(cfg: HominemConfig, day: str, *, by: str):
    """The daily job's adapter for `day` offered for promotion (the `live_gate` check on lora_adapter):
    a CheckOutcome saying whether it is live. An adapter already live, already refused while the same
    adapter was live, or rolled back since it was live, is not gated again (a re-run of the day reuses
    every version, and a rollback by hand sticks)."""
    from hominem_pipeline.core.pipeline.lineage import lineage
    from hominem_pipeline.core.pipeline.stage import CheckOutcome

    ref = lineage(cfg).expected("lora_adapter", day)
    if ref is None:
        return CheckOutcome(False, f"no lora_adapter for {day} under this config", {})
    state = LiveState(cfg.data_dir)
    current = state.current()
    meta = {"version": ref.version, "live_before": current.version or "base"}
    if current.version == ref.version:
        return CheckOutcome(True, f"{ref.version} is live (since {current.since})", meta)
    history = state.history()
    demoted = [e for e in history if e["action"] == "rollback" and e.get("previous") == ref.version]
    if demoted:  # it was live and someone rolled it back: the daily job does not bring it back
        return CheckOutcome(
            False,
            f"{ref.version} was rolled back {demoted[-1]['time']} ({demoted[-1].get('reason', '')}); "
            f"`hominem live promote {ref.version}` makes it live again",
            meta,
        )
    earlier = [
        e
        for e in history
        if e.get("version") == ref.version and e["action"] == "refuse" and e.get("live") == current.version
    ]
    if earlier:
        return CheckOutcome(
            False,
            f"{ref.version} stays a candidate (gated {earlier[-1]['time']}): {earlier[-1]['reason']}",
            {**meta, **_flat(earlier[-1].get("gate", {}))},
        )
    if current.frozen:
        return CheckOutcome(
            False,
            f"live updates are frozen ({current.frozen['reason']}): {ref.version} stays a candidate, not gated",
            meta,
        )
    reuse_evaluation_replies(cfg, day, ref.version, live_is_base=current.version is None)
    try:
        result = offer(cfg, ref.path, by=by, reason=f"the daily job's adapter for {day}", version=ref.version)
    except (
        LiveError
    ) as exc:  # nothing to gate with (no reward model, no held-out prompts): a failed check, not a failed run
        return CheckOutcome(False, f"{ref.version} was not gated: {exc}", meta)
    what = f"{ref.version} is live" if result.promoted else f"{ref.version} stays a candidate"
    return CheckOutcome(
        result.promoted, f"{what}: {result.report.summary()}", {**meta, **_flat(result.report.as_dict())}
    )


def reuse_evaluation_replies(cfg: HominemConfig, day: str, version: str, *, live_is_base: bool) -> int:
    """Put the replies the day's `evaluation` (the version this config implies, built on adapter `version`) decoded
    into the gate's reply cache: the adapter's under its version and, when the base is live, the base's; and the
    adapter's implicit reward on each people's held-out pair. The gate decodes as the evaluation does and batches
    the held-out prompts and the memory questions as it does, so the replies are the ones it would generate. Returns
    how many were added."""
    import pandas as pd

    from hominem_pipeline.core.builds.evaluation import PEOPLE_MARGINS, evaluation_replies
    from hominem_pipeline.core.pipeline.lineage import lineage

    ref = lineage(cfg).expected("evaluation", day)
    if ref is None or version not in {i["version"] for i in ref.manifest.get("inputs", {}).get("lora_adapter", [])}:
        return 0
    replies = evaluation_replies(ref.path)
    cache = reply_cache(cfg)
    margins = (
        pd.read_parquet(ref.path / PEOPLE_MARGINS)
        if (ref.path / PEOPLE_MARGINS).is_file()
        else pd.DataFrame(columns=["pair_id", "margin"])
    )
    cache.put(
        version,
        dict(zip(replies["prompt"], replies["adapter"])),
        margins=dict(zip(margins["pair_id"].astype(str), margins["margin"].astype(float))),
    )
    if live_is_base:
        cache.put(None, dict(zip(replies["prompt"], replies["base"])))
    log.info(
        "live gate: %d replies of %s%s read from its evaluation %s",
        len(replies),
        version,
        " and of the base" if live_is_base else "",
        ref.version,
    )
    return len(replies)


def _flat(figures: dict[str, Any]) -> dict[str, Any]:
    """Gate figures as asset-check metadata: numbers and short text; lists joined."""
    out: dict[str, Any] = {}
    for k, v in figures.items():
        if isinstance(v, list):
            v = "; ".join(map(str, v)) or "none"
        if v is None or isinstance(v, (int, float, str, bool)):
            out[k] = v if v is not None else "n/a"
    return out


def night_of(cfg: HominemConfig, day: str) -> Night:
    """The slow loop's night of `day`: the day's RHI (the `reward_health_index` version this config implies) and the
    adapter it measured."""
    from hominem_pipeline.core.pipeline.lineage import lineage

    ref = lineage(cfg).expected("reward_health_index", day)
    if ref is None:
        return Night(day, None)
    adapters = ref.manifest.get("inputs", {}).get("lora_adapter", [])
    return Night(day, ref.manifest.get("metrics", {}).get("rhi"), adapters[0]["version"] if adapters else None)


def nightly(cfg: HominemConfig, day: str, *, by: str) -> NightReport:
    """The daily job's slow loop for `day` (`slow_loop.act`), before its adapter is offered to the live gate;
    a revert moves the registry's alias back too."""

    def revert(version: str, reason: str, **mark: Any) -> None:
        try:
            rollback(cfg, None, reason=reason, by=f"{BY} ({by})", **mark)
        except LiveError as exc:  # nothing before it to go back to: said, not raised
            log.warning("slow loop: could not revert %s: %s", version, exc)

    return act(cfg.data_dir, night_of(cfg, day), cfg.slow_loop, by=by, revert=revert)
