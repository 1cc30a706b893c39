"""`health_panel.py measure`: the panel's days read back and measured (see health_panel.py).

Per day, three kinds of figures, each kept in `<panel>/measured/<day>.json`:

- **objective**: what says a day is broken without reading the RHI: the adapter's implicit reward on
  the people's held-out pairs (the base: 50%), facts of the memory files lost against the base, the
  contrast fixtures the adapter moved toward the worse reply, the held-out replies' perplexity
  against the base's, and the reward model's own fixture accuracy (overall and per dimension) and its
  dimensions' correlation (`broken_by` judges them, for kept days too);
- **gate**: the live gate's other checks against the base (win rate, facts, people's pairs, smoke
  reply, manifold collapse, merging and dominance), the RHI left out;
- **components**: each RHI component measured by this code, and the RHI under the calibration in use.

The first two depend only on the built versions and are measured once; the components again whenever
the health code or its calibration changes (and the manifold check again where its kept figures predate merging).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from health_panel import ROOT, UNCALIBRATED, Day, day_config, panel_days, read_days

log = logging.getLogger("health_panel")

PERPLEXITY_PAIRS = 50  # people's held-out pairs whose chosen replies the perplexity is read on
FACTS_LOST = "facts lost against the base"  # the objective reason a day lost facts; no RHI component reads memory
BROKEN_PERPLEXITY = (
    2.0  # an adapter whose held-out perplexity is this many times the base's is broken (training on people's
)
# pairs raises it on these replies by about a third)
RESULTS = (
    ROOT / "benchmarks" / "results" / "health_panel"
)  # each day's measures, kept with the code: the calibration's evidence
COLLAPSED_CORRELATION = (
    0.9  # a reward model whose dimensions correlate this much on average over the day's replies has one
)
# what measures the ingredients (calibration.py only normalises and weighs them, which `calibrate` does again
# from the ingredients)
COMPONENT_CODE = tuple(
    str(p.relative_to(ROOT)) for p in sorted((ROOT / "hominem_pipeline/core/evaluation/health").glob("*.py"))
)


def _ref(cfg, asset: str, partition: str, version: str):
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore

    ref = ArtifactStore(cfg.data_dir).existing(asset, partition, version)
    if ref is None:
        raise FileNotFoundError(f"{asset}/{partition}/{version} is not in {cfg.data_dir}; build the day again")
    return ref


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def code_key(cfg) -> str:
    h = hashlib.sha256()
    for name in COMPONENT_CODE:
        p = ROOT / name
        h.update(p.read_bytes() if p.is_file() else b"")
    health = cfg.health.model_dump(mode="json")
    health["manifold"].pop(
        "max_mean_correlation", None
    )  # no component reads the gate's manifold thresholds (a new one measures nothing again)
    h.update(json.dumps(health, sort_keys=True).encode())
    return h.hexdigest()[:16]


def perplexity_ratio(
    student: Path, adapter: Path, people: pd.DataFrame, base_nll: dict[str, float]
) -> dict[str, float]:
    """Held-out perplexity of the adapter and of the base on the people's held-out pairs' chosen replies (per
    token)."""
    from hominem_pipeline.core.evaluation.people_pairs import exchange_logps
    from hominem_pipeline.core.policy.lora import load_policy

    rows = people.head(PERPLEXITY_PAIRS)
    exchanges = list(zip(rows["prompt"], rows["chosen"]))
    from hominem_pipeline.core.policy.lora import merged

    model, tokenizer = load_policy(student, adapter, None)
    if "nll" not in base_nll:
        with model.disable_adapter():
            bsums, bcounts = exchange_logps(model, tokenizer, exchanges, 16)
        base_nll["nll"] = float(-bsums.sum() / bcounts.sum())
    with merged(model):
        sums, counts = exchange_logps(model, tokenizer, exchanges, 16)
    nll = float(-sums.sum() / counts.sum())
    return {
        "perplexity": float(np.exp(nll)),
        "perplexity_base": float(np.exp(base_nll["nll"])),
        "perplexity_ratio": float(np.exp(nll - base_nll["nll"])),
    }


def objective(day: Day, cfg, gate: dict[str, Any], ppl: dict[str, float]) -> dict[str, Any]:
    """The measures that say whether the day is broken without the RHI (`broken_by` reads them); of a day the
    pipeline stopped before its evaluation, those of what it built (its reward model's)."""
    built = day.versions
    ev = (
        _ref(cfg, "evaluation", day.partition, built["evaluation"]).manifest["metrics"]
        if "evaluation" in built
        else {}
    )
    rm = (
        _ref(cfg, "reward_model", day.partition, built["reward_model"]).manifest["metrics"]
        if "reward_model" in built
        else {}
    )
    dims = [d.name for d in cfg.dimensions]
    rm_dims = {d: rm.get(f"fixture_dimension_accuracy_{d}") for d in dims}
    out = {
        "people_accuracy": ev.get("people_accuracy"),
        "people_standard_error": ev.get("people_standard_error"),
        "facts_lost": gate.get("facts_lost"),
        "facts_asked": gate.get("facts_asked"),
        "fixture_moved_right": ev.get("fixture_moved_right"),
        "rm_fixture_accuracy": rm.get("fixture_accuracy"),
        "rm_fixture_dimension_accuracy": rm_dims,
        "rm_people_agreement": rm.get("people_agreement"),
        **ppl,
    }
    return out


def dimension_correlation(g: dict[str, Any]) -> float:
    """The mean correlation between the reward model's dimensions over every reply it scored for the day's
    components (base, adapter, perturbed and halved replies): 1 when its dimensions are one."""
    v = np.asarray([x for side in ("base", "adapter", "perturbed", "halves") for x in g[side]["vector"]], dtype=float)
    c = np.corrcoef(v.T)
    return float(np.nanmean(c[np.triu_indices(len(c), 1)]))


def broken_by(out: dict[str, Any], ingredients: dict[str, Any] | None, fixture_floor: float) -> list[str]:
    """What calls the day broken among its objective measures (none reads the RHI): the adapter on people's
    held-out pairs, facts, the contrast fixtures and held-out perplexity; the reward model on its fixtures
    (overall below `fixtures.min_accuracy`, any dimension below chance) and its dimensions' correlation."""
    broken = []
    if out["people_accuracy"] is not None and out["people_accuracy"] < 0.5:
        broken.append(f"people's held-out pairs {out['people_accuracy']:.1%}, below the base's 50%")
    if (out["facts_lost"] or 0) > 0:
        broken.append(f"{out['facts_lost']} of {out['facts_asked']} {FACTS_LOST}")
    if out["fixture_moved_right"] is not None and out["fixture_moved_right"] < 0.5:
        broken.append(
            f"moved the student toward the worse reply on {1 - out['fixture_moved_right']:.0%} of the "
            "contrast fixtures"
        )
    if (out.get("perplexity_ratio") or 0.0) > BROKEN_PERPLEXITY:
        broken.append(f"held-out perplexity {out['perplexity_ratio']:.2f}x the base's (> {BROKEN_PERPLEXITY})")
    if out["rm_fixture_accuracy"] is not None and out["rm_fixture_accuracy"] < fixture_floor:
        broken.append(
            f"reward model orders {out['rm_fixture_accuracy']:.0%} of its contrast fixtures right, below "
            f"fixtures.min_accuracy {fixture_floor:.0%}"
        )
    inverted = [
        f"{d} {v:.0%}" for d, v in (out["rm_fixture_dimension_accuracy"] or {}).items() if v is not None and v < 0.5
    ]
    if inverted:
        broken.append(f"reward model orders its fixtures below chance on {', '.join(inverted)}")
    if ingredients:
        r = dimension_correlation(ingredients)
        if r > COLLAPSED_CORRELATION:
            broken.append(
                f"reward model's dimensions correlate {r:.2f} on average (> {COLLAPSED_CORRELATION}): they are one"
            )
    return broken


def gate_checks(day: Day, cfg, people: pd.DataFrame, memory: pd.DataFrame, folder: Path) -> dict[str, Any]:
    """The live gate against the base, the RHI left out (its own line is dropped): each other check's figures and
    reasons."""
    from hominem_pipeline.core.builds.evaluation import PEOPLE_MARGINS, evaluation_replies
    from hominem_pipeline.core.evaluation.fixtures import base_logp_cache
    from hominem_pipeline.core.evaluation.reply_checks import load_reply_checks
    from hominem_pipeline.core.lm.models import load_student, student_path
    from hominem_pipeline.core.online.facts import with_stated_facts
    from hominem_pipeline.core.online.gate import GateModels, GateQuestions, GateSides, run_gate
    from hominem_pipeline.core.online.reply_cache import ReplyCache
    from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES
    from hominem_pipeline.core.reward.model import project_reward_model

    ev = _ref(cfg, "evaluation", day.partition, day.versions["evaluation"])
    adapter = _ref(cfg, "lora_adapter", day.partition, day.versions["lora_adapter"])
    rm = project_reward_model(_ref(cfg, "reward_model", day.partition, day.versions["reward_model"]).path, cfg)
    held = pd.read_parquet(ev.file("generations.parquet"))
    cache = ReplyCache(folder, cfg)
    version = f"{day.name}-{adapter.version}"
    replies = evaluation_replies(ev.path)
    margins = pd.read_parquet(ev.path / PEOPLE_MARGINS)
    cache.put(
        version,
        dict(zip(replies["prompt"], replies["adapter"])),
        margins=dict(zip(margins["pair_id"].astype(str), margins["margin"].astype(float))),
    )
    cache.put(None, dict(zip(replies["prompt"], replies["base"])))
    base, tokenizer = load_student(student_path(cfg))
    logps = base_logp_cache(student_path(cfg), cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES))
    report = run_gate(
        GateSides(adapter.path, None, candidate_version=version),
        cfg=cfg,
        models=GateModels(base, tokenizer, rm, logps),
        questions=GateQuestions(
            list(held["prompt"]),
            memory,
            people,
            cfg.project.seed,
            reply_checks=load_reply_checks(cfg),
            view=with_stated_facts if cfg.serving.recall_facts else None,
        ),
        cache=cache,
    )
    reasons = [r for r in report.reasons if not r.startswith("no Reward Health Index")]
    keep = (
        "win_rate_vs_live",
        "facts_asked",
        "facts_lost",
        "people_accuracy",
        "people_standard_error",
        "smoke_reply",
        "manifold",
        "manifold_blocked",
        "manifold_mean_correlation",
        "checks",
        "reply_checks",
    )
    return {"passed": not reasons, "reasons": reasons, **{k: report.figures.get(k) for k in keep}}


def manifold_again(day: Day, cfg, gate: dict[str, Any]) -> dict[str, Any]:
    """`gate` with its reward-manifold check measured again by this code: the adapter's training pairs (the
    preference pairs it was built from) scored by the day's reward model, judged under `health.manifold`. For a
    day whose gate was measured before the check judged something it judges now (the dimensions' merging)."""
    from hominem_pipeline.core.evaluation.manifold import reward_manifold
    from hominem_pipeline.core.policy.pairs import read_preference_pairs
    from hominem_pipeline.core.reward.model import project_reward_model

    adapter = _ref(cfg, "lora_adapter", day.partition, day.versions["lora_adapter"])
    refs = [
        _ref(cfg, "preference_pairs", i["partition"], i["version"])
        for i in adapter.manifest["inputs"]["preference_pairs"]
    ]
    pairs = read_preference_pairs([r.file("pairs.parquet") for r in refs])
    rm = project_reward_model(_ref(cfg, "reward_model", day.partition, day.versions["reward_model"]).path, cfg)
    shape = reward_manifold(rm, list(pairs["prompt"]), list(pairs["chosen"]), list(pairs["rejected"]))
    verdict = shape.judged(cfg.health.manifold)
    reasons = [r for r in gate["reasons"] if not r.startswith("reward manifold:")] + [
        f"reward manifold: {r}" for r in verdict.reasons
    ]
    return {
        **gate,
        "manifold": verdict.summary(),
        "manifold_blocked": verdict.blocked,
        "manifold_mean_correlation": shape.mean_correlation,
        "reasons": reasons,
        "passed": not reasons,
    }


def components(day: Day, cfg) -> dict[str, Any]:
    """Each RHI component of the day measured by this code (with the calibration in use), the RHI, and the
    ingredients every component is computed from (`ingredients`)."""
    from hominem_pipeline.core.evaluation.health import compute_health
    from hominem_pipeline.core.pipeline.lineage import stage_seed
    from hominem_pipeline.core.reward.model import project_reward_model

    ev = _ref(cfg, "evaluation", day.partition, day.versions["evaluation"])
    adapter = _ref(cfg, "lora_adapter", day.partition, day.versions["lora_adapter"])
    rm = project_reward_model(_ref(cfg, "reward_model", day.partition, day.versions["reward_model"]).path, cfg)
    history = json.loads(adapter.file("training_history.json").read_text())
    generations = pd.read_parquet(ev.file("generations.parquet"))
    seed = stage_seed(cfg, "reward_health_index", day.partition)
    report = compute_health(
        rm,
        generations,
        history["grad_norms"],
        cfg,
        seed,
        mode=adapter.manifest["metadata"].get("mode"),
        adapter=adapter.path,
    )
    raw = ingredients(cfg, rm, adapter.path, generations, seed, np.asarray(report.components["dcs"].details["gda"]))
    raw |= {"grad_norms": history["grad_norms"], "mode": adapter.manifest["metadata"].get("mode")}
    return report.as_dict() | {"ingredients": raw}


def _rounded(x: Any) -> Any:
    return np.round(np.asarray(x, dtype=np.float64), 5).tolist()


def ingredients(cfg, rm, adapter: Path, generations: pd.DataFrame, seed: int, gda: np.ndarray) -> dict[str, Any]:
    """What every component is computed from: the gradient agreement matrices (`gda`: the one the index
    measured, where `health.dcs_on` says; the other measured here) and the reward model's raw outputs on the
    base's, the adapter's, the perturbed and the halved replies. Any reading of a component that differs only
    in how it combines these is computed from them again without the models (`health_panel.py variants`)."""
    from hominem_pipeline.core.evaluation.health import (
        first_half,
        gradient_agreement,
        perturbations,
        policy_gradient_agreement,
    )
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.lora import load_policy

    answered = generations[generations["adapter_response"].str.strip() != ""]
    prompts, replies = list(answered["prompt"]), list(answered["adapter_response"])
    if cfg.health.dcs_on == "policy":
        backbone = gradient_agreement(rm, prompts, replies, cfg.health.dcs_layers)
        cos = gda
    else:
        policy, tokenizer = load_policy(student_path(cfg), adapter, None)
        cos = policy_gradient_agreement(
            policy, tokenizer, prompts, replies, rm.raw_scores(prompts, replies)["vector"], cfg.policy.max_length
        )
        backbone = gda

    def scores(ps: list[str], rs: list[str]) -> dict[str, Any]:
        out = rm.raw_scores(ps, rs)
        return {k: _rounded(out[k]) for k in ("vector", "scalar", "safety_score", "reward_intensity")}

    all_prompts = list(generations["prompt"])
    base, adapted = list(generations["base_response"]), list(generations["adapter_response"])
    keep = [i for i in range(len(all_prompts)) if base[i].strip() and adapted[i].strip()]
    originals, perturbed = perturbations(
        [adapted[i] for i in keep], cfg.health.perturbations_per_response, seed
    )  # as MSS draws them
    texts = base + adapted
    long = [i for i, r in enumerate(texts) if len(r.split()) >= 4]
    dims = list(rm.dimensions)
    raw = {
        "dimensions": dims,
        "gda_policy": _rounded(cos),
        "gda_backbone": _rounded(backbone),
        "categories": list(generations["category"]),
        "adapter_outcome": [
            None if pd.isna(x) else float(x)
            for x in generations.get("adapter_outcome", pd.Series([None] * len(generations)))
        ],
        "answered": [bool(r.strip()) for r in adapted],
        "kept": keep,  # the prompts both answered (MSS's)
        "eval_vectors": {
            side: [
                [None if not isinstance(v, dict) or v.get(d) is None else float(v[d]) for d in dims]
                for v in generations[f"{side}_vector"]
            ]
            for side in ("base", "adapter")
        },
        "base": scores(all_prompts, base),
        "adapter": scores(all_prompts, adapted),
        "perturbed_of": [keep[i] for i in originals],
        "perturbed": scores([all_prompts[keep[i]] for i in originals], perturbed),
        "halves_of": long,  # indices into base replies then adapter replies
        "halves": scores([(all_prompts + all_prompts)[i] for i in long], [first_half(texts[i]) for i in long]),
    }
    return raw


def auc(healthy: list[float], broken: list[float]) -> float | None:
    """P(a healthy day's value > a broken day's), ties half: the separation a threshold on it can reach."""
    h, b = [x for x in healthy if x is not None], [x for x in broken if x is not None]
    if not h or not b:
        return None
    return float(np.mean([1.0 if x > y else 0.5 if x == y else 0.0 for x in h for y in b]))


def measure(panel: Path, only: set[str] | None, keep: bool = True) -> dict[str, Any]:
    """Measure the panel's built days (`only`: those named) and print the report; with `keep`, each day's measures
    also go to benchmarks/results/health_panel/, which `calibrate` reads (without it they stay in the panel's
    `measured/` folder: a study that leaves the calibration's measures as they are)."""
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.evaluation.manifold import (
        ManifoldShape,
    )  # a package older than merging: measured again later
    from hominem_pipeline.core.evaluation.memory import read_memory_rows
    from hominem_pipeline.core.lm.models import student_path

    built = {d["name"]: Day(**d) for d in read_days(panel)}
    days = [built[d.name] for d in panel_days() if d.name in built and (only is None or d.name in only)]
    if not days:
        raise SystemExit(f"no built day in {panel}/days.json; run `health_panel.py build --panel {panel}` first")
    default = day_config(panel, panel_days()[0])
    people = people_pairs(default, "held_out")
    memory = read_memory_rows(memory_paths(default))
    out_dir = panel / "measured"
    out_dir.mkdir(exist_ok=True)
    base_nll: dict[str, float] = _read(out_dir / "base_nll.json")
    rows = []
    for day in days:
        cfg = day_config(panel, day)
        path = out_dir / f"{day.name}.json"
        saved = _read(path)
        versions = json.dumps(day.versions, sort_keys=True)
        if day.stopped:  # the pipeline refused the day before its gate: nothing to gate or index, what it built judged
            saved = {"versions": versions, "stopped": day.stopped, "objective": objective(day, cfg, {}, {})}
            saved["objective"]["broken_by"] = broken_by(saved["objective"], None, cfg.fixtures.min_accuracy)
            log.info(
                "%s: stopped in %s before the gate (%s)", day.name, day.stopped["stage"], day.stopped["error"][:200]
            )
            path.write_text(json.dumps(saved, indent=2, default=str) + "\n")
            if keep:
                _keep(day, saved)
            rows.append((day, saved))
            continue
        if saved.get("versions") != versions:
            log.info("%s: the gate's checks and the objective measures", day.name)
            with tempfile.TemporaryDirectory() as tmp:
                gate = gate_checks(day, cfg, people, memory, Path(tmp))
            adapter = _ref(cfg, "lora_adapter", day.partition, day.versions["lora_adapter"]).path
            ppl = perplexity_ratio(student_path(cfg), adapter, people, base_nll)
            (out_dir / "base_nll.json").write_text(json.dumps(base_nll))
            saved = {"versions": versions, "gate": gate, "objective": objective(day, cfg, gate, ppl)}
            path.write_text(json.dumps(saved, indent=2, default=str) + "\n")  # kept if the components fail
        if (
            saved["gate"].get("manifold_mean_correlation") is None
            and "mean_correlation" in ManifoldShape.__dataclass_fields__
        ):
            log.info("%s: the reward manifold again (its dimensions' merging)", day.name)
            saved["gate"] = manifold_again(day, cfg, saved["gate"])
            path.write_text(json.dumps(saved, indent=2, default=str) + "\n")
        key = code_key(cfg)
        if saved.get("components_key") != key:
            log.info("%s: the RHI components", day.name)
            saved |= {"components_key": key, "health": components(day, cfg)}
        saved["mode"] = (
            _ref(cfg, "lora_adapter", day.partition, day.versions["lora_adapter"]).manifest["metadata"].get("mode")
        )
        saved["objective"]["broken_by"] = broken_by(
            saved["objective"], saved["health"]["ingredients"], cfg.fixtures.min_accuracy
        )
        path.write_text(json.dumps(saved, indent=2, default=str) + "\n")
        if keep:
            _keep(day, saved)
        rows.append((day, saved))
    return report(panel, rows)


def _keep(day: Day, saved: dict[str, Any]) -> None:
    """The day's measures where `calibrate` reads them (benchmarks/results/health_panel/)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{day.name}.json").write_text(
        json.dumps(
            {"name": day.name, "healthy": day.healthy, "what": day.what, **saved}, default=str, separators=(",", ":")
        )
        + "\n"
    )


def report(panel: Path, rows: list[tuple[Day, dict[str, Any]]]) -> dict[str, Any]:
    from hominem_pipeline.core.evaluation.health import COMPONENTS

    names = list(COMPONENTS) + ["rhi"]

    def value(saved: dict[str, Any], name: str) -> float | None:
        h = saved["health"]
        return h["rhi"] if name == "rhi" else (h["components"][name]["value"])

    print(f"\n{'day':22s} {'kind':8s} " + " ".join(f"{n.upper():>6s}" for n in names) + "  gate   objective")
    for day, saved in rows:
        broken = saved["objective"]["broken_by"]
        if "stopped" in saved:
            print(
                f"{day.name:22s} {'healthy' if day.healthy else 'broken':8s} stopped in "
                f"{saved['stopped']['stage']} before the gate: "
                f"{saved['stopped']['error'][:100]}  {'; '.join(broken) or 'sound'}"
            )
            continue
        vals = " ".join(f"{value(saved, n):6.3f}" if value(saved, n) is not None else "   n/a" for n in names)
        gate = "pass" if saved["gate"]["passed"] else "refuse"
        print(
            f"{day.name:22s} {'healthy' if day.healthy else 'broken':8s} {vals}  {gate:6s} "
            f"{'; '.join(broken) or 'sound'}"
        )
    stopped = [(d, s) for d, s in rows if "stopped" in s]
    rows = [
        (d, s) for d, s in rows if "stopped" not in s
    ]  # the index and the gate's checks read the days that reached them
    separation = {}
    for n in names:
        h = [value(s, n) for d, s in rows if d.healthy]
        b = [value(s, n) for d, s in rows if not d.healthy]
        separation[n] = {
            "auc": auc(h, b),
            "healthy": [x for x in h if x is not None],
            "broken": [x for x in b if x is not None],
        }
    print(
        "\nAUC (healthy above broken):  "
        + "  ".join(
            f"{n.upper()} {separation[n]['auc']:.2f}" if separation[n]["auc"] is not None else f"{n.upper()} n/a"
            for n in names
        )
    )
    for n in names:
        s = separation[n]
        if s["healthy"] and s["broken"]:
            print(
                f"  {n.upper():5s} healthy {min(s['healthy']):.3f}-{max(s['healthy']):.3f}   broken "
                f"{min(s['broken']):.3f}-{max(s['broken']):.3f}"
            )
    unsound = [d.name for d, s in rows if d.healthy and s["objective"]["broken_by"]]
    sound = [d.name for d, s in rows if not d.healthy and not s["objective"]["broken_by"]]
    if unsound:
        print(f"\nhealthy days the objective measures call broken: {', '.join(unsound)}")
    if sound:
        print(f"broken days no objective measure calls broken: {', '.join(sound)}")
    passing = [(d.name, s["gate"]) for d, s in rows if not d.healthy and s["gate"]["passed"]]
    print("\nbroken days the gate's other checks let through: " + (", ".join(n for n, _ in passing) or "none"))
    for d, s in rows:
        print(
            f"  {d.name:22s} "
            + ("passes" if s["gate"]["passed"] else "refused: " + "; ".join(s["gate"]["reasons"]))[:200]
        )
    refusals = check_refusals(rows)
    summary = {
        "refusals": refusals,
        "days": [
            {"name": d.name, "healthy": d.healthy, "what": d.what, **{k: v for k, v in s.items() if k != "health"}}
            for d, s in rows + stopped
        ],
        "separation": separation,
    }
    (panel / "measured" / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(
        "\nevery reading of each component: health_panel.py variants; the calibration and the fast loop "
        "on it: health_panel.py calibrate"
    )
    return summary


def check_refusals(rows: list[tuple[Day, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each sampled check of the gate: on how many sound and broken days it refused, and which (the days measured
    before the check existed are left out of its counts). Printed as a table."""
    names = sorted({n for _, s in rows for n in (s["gate"].get("checks") or {})})
    out: dict[str, dict[str, Any]] = {}
    print(
        f"\n{'sampled check':18s} {'sound days refused':>20s} {'broken days refused':>20s}  broken days it let through"
    )
    for name in names:
        seen = [(d, s["gate"]["checks"][name]) for d, s in rows if name in (s["gate"].get("checks") or {})]
        sound = [d.name for d, c in seen if d.healthy and c["refused"]]
        broken = [d.name for d, c in seen if not d.healthy and c["refused"]]
        n_sound = sum(d.healthy for d, _ in seen)
        n_broken = len(seen) - n_sound
        missed = [d.name for d, c in seen if not d.healthy and not c["refused"]]
        out[name] = {"sound": n_sound, "sound_refused": sound, "broken": n_broken, "broken_refused": broken}
        print(f"{name:18s} {len(sound):>9d} of {n_sound:<8d} {len(broken):>9d} of {n_broken:<8d}  {', '.join(missed)}")
    whole = [(d.healthy, s["gate"]["passed"]) for d, s in rows]
    sound_refused = sum(h and not p for h, p in whole)
    broken_refused = sum(not h and not p for h, p in whole)
    n_sound = sum(h for h, _ in whole)
    n_broken = len(whole) - n_sound
    print(f"{'the whole gate':18s} {sound_refused:>9d} of {n_sound:<8d} {broken_refused:>9d} of {n_broken:<8d}")
    return out


def choose_threshold(healthy: list[float], broken: list[float]) -> tuple[float, str]:
    """The RHI threshold the panel supports: the midpoint of the widest gap that refuses the most broken
    days while promoting the most healthy ones (each error counts the same), and how it was placed."""
    values = sorted(set(healthy) | set(broken))
    cuts = [(a + b) / 2 for a, b in zip(values, values[1:])] or values

    def errors(t: float) -> int:
        return sum(h < t for h in healthy) + sum(b >= t for b in broken)

    best = min(errors(t) for t in cuts)
    good = [t for t in cuts if errors(t) == best]

    # among equally good cuts, the one with the widest gap around it
    def gap(t: float) -> float:
        below = max([v for v in values if v < t], default=t)
        above = min([v for v in values if v >= t], default=t)
        return above - below

    t = max(good, key=gap)
    return round(t, 3), f"{best} day(s) on the wrong side; midpoint of a {gap(t):.3f} gap"


def fast_loop_thresholds(healthy: list[float], broken: list[float]) -> dict[str, float]:
    """The fast loop's thresholds on the panel's partial index (DCS, GVS): skip_below placed as the RHI's
    threshold is (`choose_threshold`); rollback_below below the healthy range by the range's own width, and
    freeze_below at half its lowest value, so that neither ever acts on a healthy adapter of the panel."""
    skip, _ = choose_threshold(healthy, broken)
    lo, hi = min(healthy), max(healthy)
    rollback = min(skip, max(0.0, lo - (hi - lo)))
    return {"skip_below": skip, "rollback_below": round(rollback, 3), "freeze_below": round(min(rollback, lo / 2), 3)}


DESIGN_WEIGHTS = UNCALIBRATED["weights"]  # the weights the index had before the panel calibrated them
GVI_HEADROOM = 2.0  # GVI_max is this many times the most unsteady healthy run's GVI (of its policy mode)


def measured_days(panel: Path | None) -> list[dict[str, Any]]:
    """Each measured day with its ingredients, in panel order (from `panel`/measured, or from the measures kept
    in benchmarks/results/health_panel/), labelled by the objective measures: a day is healthy when none of
    them calls it broken (`intended` keeps what it was built to be)."""
    from hominem_pipeline.core.config.loader import load_config

    folder = panel / "measured" if panel else RESULTS
    floor = load_config(root=ROOT).fixtures.min_accuracy
    out = []
    for day in panel_days():
        saved = _read(folder / f"{day.name}.json")
        if saved.get("stopped"):  # refused before the gate: labelled by what it built, else as it was meant
            broken = broken_by(saved["objective"], None, floor)
            out.append(
                {
                    **saved,
                    "objective": {**saved["objective"], "broken_by": broken},
                    "name": day.name,
                    "what": day.what,
                    "intended": day.healthy,
                    "healthy": day.healthy and not broken,
                    "mode": None,
                }
            )
            continue
        if not saved.get("health", {}).get("ingredients"):
            continue
        saved["objective"]["broken_by"] = broken_by(saved["objective"], saved["health"]["ingredients"], floor)
        out.append(
            {
                **saved,
                "name": day.name,
                "what": day.what,
                "intended": day.healthy,
                "healthy": not saved["objective"]["broken_by"],
                "mode": saved["health"]["ingredients"].get("mode") or "dual",
            }
        )
    if not out:
        raise SystemExit(
            f"no measured day with ingredients in {folder}; run `health_panel.py measure --panel DIR` first"
        )
    return out


def components_from(
    g: dict[str, Any],
    dcs_on: str,
    gvi_max: float,
    drift_max: float | None,
    curvature_max: float | None,
    dcs_healthy: float | None = None,
) -> dict[str, Any]:
    """The five components of one day from its ingredients, combined as `compute_health` combines them
    (the package's formulas), under these constants."""
    from hominem_pipeline.core.evaluation.health import (
        coherence_of,
        cross_domain_robustness,
        gradient_variance_stability,
        predictivity_of,
        stability_of,
    )

    kept = np.asarray(g.get("kept") or [i for i, a in enumerate(g["answered"]) if a])
    where = {int(k): i for i, k in enumerate(kept)}
    base_v, ad_v, ad_s = (
        np.asarray(g[side][key]) for side, key in (("base", "vector"), ("adapter", "vector"), ("adapter", "scalar"))
    )
    n = len(g["base"]["scalar"])
    halves_of = np.asarray(g["halves_of"])
    on_adapter = halves_of >= n
    answered = np.asarray(g["answered"])
    mine = on_adapter & answered[halves_of % n]
    return {
        "dcs": coherence_of(g["gda_policy"] if dcs_on == "policy" else g["gda_backbone"], dcs_on, dcs_healthy),
        "gvs": gradient_variance_stability(g["grad_norms"], gvi_max),
        "mss": stability_of(
            base_v[kept],
            ad_v[kept],
            ad_s[kept],
            [where[int(i)] for i in g["perturbed_of"]],
            g["perturbed"]["scalar"],
            drift_max,
            curvature_max,
        ),
        "cdrs": cross_domain_robustness(ingredient_table(g), g["dimensions"], against="improvement"),
        "lrps": predictivity_of(np.asarray(g["halves"]["scalar"])[mine], ad_s[halves_of[mine] - n]),
    }


def references_of(healthy: list[dict[str, Any]], raw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The normalising constants the `healthy` days give (their components `raw`, unnormalised): GVI_max per
    policy mode and overall, MSS's drift and curvature maxima (GVI_HEADROOM times the healthy days' largest),
    and the coherence the healthy days' dimensions have (DCS's `dcs_healthy`, their mean)."""
    modes: dict[str, list[float]] = {}
    for d in healthy:
        if raw[d["name"]]["gvs"].value is not None:
            modes.setdefault(d["mode"], []).append(raw[d["name"]]["gvs"].details["gvi"])
    gvi_max = {m: round(GVI_HEADROOM * max(v), 4) for m, v in sorted(modes.items())}
    gvi_max["default"] = round(GVI_HEADROOM * max(x for v in modes.values() for x in v), 4)
    mss = [raw[d["name"]]["mss"].details for d in healthy if raw[d["name"]]["mss"].value is not None]
    coherence = [
        raw[d["name"]]["dcs"].details["coherence"] for d in healthy if raw[d["name"]]["dcs"].value is not None
    ]
    return {
        "gvi_max": gvi_max,
        "rdm_drift_max": round(GVI_HEADROOM * max(m["rdm_drift"] for m in mss), 4),
        "curvature_variance_max": round(GVI_HEADROOM * max(m["curvature_variance"] for m in mss), 4),
        "dcs_healthy": round(float(np.mean(coherence)), 4),
    }


def calibrate(panel: Path | None, out: Path, weights: dict[str, float] | str | None = None) -> dict[str, Any]:
    """The calibration the measured panel supports, written to `out` (health.calibration): GVI_max per
    policy mode from the healthy days' training runs, MSS's references from their drift and curvature, the
    weights, the threshold chosen on the panel's RHI, and each component's healthy and broken ranges. Every
    component is computed again from each day's ingredients with the package's formulas (`components_from`)."""
    import datetime as dt
    import platform

    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.evaluation.health import COMPONENTS

    dcs_on = load_config(root=ROOT).health.dcs_on
    every = measured_days(panel)
    stopped = [
        d for d in every if d.get("stopped")
    ]  # refused by the pipeline before the gate: no index to calibrate on
    days = [d for d in every if not d.get("stopped")]
    weights = weights or "separation"  # or "design", or the five weights
    chosen = (
        {
            "separation": "each component by its AUC above 0.5 on the panel: one that does not separate carries no "
            "weight",
            "design": "the design's (001, Phase 10.2)",
        }.get(weights, "given")
        if isinstance(weights, str)
        else "given"
    )
    if weights == "design":
        weights = DESIGN_WEIGHTS
    raw = {d["name"]: components_from(d["health"]["ingredients"], dcs_on, 1.0, None, None) for d in days}
    references = references_of([d for d in days if d["healthy"]], raw)

    def values(
        d: dict[str, Any], w: dict[str, float] | None = None, refs: dict[str, Any] | None = None
    ) -> dict[str, float]:
        w, refs = w or weights, refs or references
        gvi_max = refs["gvi_max"]
        comps = components_from(
            d["health"]["ingredients"],
            dcs_on,
            gvi_max.get(d["mode"], gvi_max["default"]),
            refs["rdm_drift_max"],
            refs["curvature_variance_max"],
            refs["dcs_healthy"],
        )
        c = {k: comps[k].value for k in COMPONENTS}
        c["rhi"] = sum(w[k] * (c[k] or 0.0) for k in COMPONENTS)
        return c

    def separation(kept: list[dict[str, Any]], refs: dict[str, Any]) -> dict[str, float]:
        """Each component weighted by how far it separates the `kept` days beyond chance."""
        first = [(d, values(d, DESIGN_WEIGHTS, refs)) for d in kept]  # the components alone are read
        lift = {
            k: max(
                0.0, auc([v[k] for d, v in first if d["healthy"]], [v[k] for d, v in first if not d["healthy"]]) - 0.5
            )
            for k in COMPONENTS
        }
        total = sum(lift.values()) or 1.0
        w = {k: round(lift[k] / total, 3) for k in COMPONENTS}
        w[max(w, key=w.get)] += round(1.0 - sum(w.values()), 3)
        return w

    fitted = weights == "separation"
    if fitted:
        weights = separation(days, references)
    scored = [(d, values(d)) for d in days]
    healthy = {k: [v[k] for d, v in scored if d["healthy"] and v[k] is not None] for k in list(COMPONENTS) + ["rhi"]}
    broken = {
        k: [v[k] for d, v in scored if not d["healthy"] and v[k] is not None] for k in list(COMPONENTS) + ["rhi"]
    }

    # The references come from the healthy days and the weights (when fitted) from all of them, so each day is also
    # scored under references and weights fitted on the other days alone: the RHI's separation on days it has not seen
    def held_out_rhi(d: dict[str, Any]) -> float:
        others = [o for o in days if o is not d]
        refs = references_of([o for o in others if o["healthy"]], raw)
        return values(d, separation(others, refs) if fitted else weights, refs)["rhi"]

    unseen = {d["name"]: held_out_rhi(d) for d in days}
    held_out = [unseen[d["name"]] for d in days if d["healthy"]]
    held_out_broken = [unseen[d["name"]] for d in days if not d["healthy"]]
    # No component reads memory: a day broken only by facts it lost is the memory probe's to stop. The RHI's separation
    # of the sound days from the broken ones it can see
    memory_only = [
        d["name"]
        for d in days
        if not d["healthy"]
        and d["objective"]["broken_by"]
        and all(FACTS_LOST in why for why in d["objective"]["broken_by"])
    ]
    seen = [v["rhi"] for d, v in scored if not d["healthy"] and d["name"] not in memory_only]
    print(
        f"\n{'day':22s} {'kind':8s} "
        + " ".join(f"{k.upper():>6s}" for k in list(COMPONENTS) + ["rhi"])
        + "   (calibrated)"
    )
    for d, v in scored:
        print(
            f"{d['name']:22s} {'healthy' if d['healthy'] else 'broken':8s} "
            + " ".join(f"{v[k]:6.3f}" if v[k] is not None else "   n/a" for k in list(COMPONENTS) + ["rhi"])
            + (
                ""
                if d["healthy"] == d["intended"]
                else f"   (built as {'healthy' if d['intended'] else 'broken'}: "
                + ("; ".join(d["objective"]["broken_by"]) or "no objective measure calls it broken")
                + ")"
            )
        )
    # The gate is the RHI and its other checks together: the threshold is placed between the healthy days and the
    # broken days the other checks let through (all broken days where they stop none)
    # A component that alone tells every broken day the other checks let through from every healthy one, by a gap at
    # least half the healthy days' own spread (a sound day a little lower must still pass), gets a floor at the gap's
    # midpoint, below which it refuses on its own
    passing = [(d, v) for d, v in scored if not d["healthy"] and d["gate"]["passed"]]
    floors = {}
    for k in COMPONENTS:
        b = [v[k] for _, v in passing if v[k] is not None]
        if healthy[k] and b and min(healthy[k]) - max(b) >= (max(healthy[k]) - min(healthy[k])) / 2:
            floors[k] = round((max(b) + min(healthy[k])) / 2, 3)

    def floored(v: dict[str, float]) -> list[str]:
        return [
            f"{k.upper()} {v[k]:.3f} below its floor {f}" for k, f in floors.items() if v[k] is not None and v[k] < f
        ]

    through = [(d["name"], v["rhi"]) for d, v in passing if not floored(v)]
    if through:
        threshold, how = choose_threshold(healthy["rhi"], [x for _, x in through])
        how = (
            "against the broken days the gate's other checks and floors pass "
            f"({', '.join(n for n, _ in through)}): {how}"
        )
    # the other checks and the floors stop every broken day: the index is the safety net below the sound days' spread
    else:
        low, high = min(healthy["rhi"]), max(healthy["rhi"])
        threshold = round(low - (high - low) / 2, 3)
        how = (
            f"half the sound days' range ({low:.3f}-{high:.3f}) below the lowest of them: the other "
            "checks and the floors "
            "stop every broken day"
        )
    print(
        "\nfloors: "
        + (
            ", ".join(
                f"{k.upper()} {f} (healthy from {min(healthy[k]):.3f}; the broken days the other checks pass at most "
                f"{max(v[k] for _, v in passing):.3f})"
                for k, f in floors.items()
            )
            or "none"
        )
    )
    print(f"the gate at RHI {threshold} ({how}):")
    for d, v in scored:
        why = (
            (["the RHI"] if v["rhi"] < threshold else [])
            + floored(v)
            + (["; ".join(d["gate"]["reasons"])[:120]] if not d["gate"]["passed"] else [])
        )
        unmeasured = (
            ""
            if d["gate"].get("manifold_mean_correlation") is not None
            else "  (merging not measured: its build predates the check)"
        )
        print(
            f"  {d['name']:22s} {'healthy' if d['healthy'] else 'broken':8s} RHI {v['rhi']:.3f}  "
            + ("refuse by " + " and by ".join(why) if why else "promote")
            + unmeasured
        )
    for d in stopped:
        print(
            f"  {d['name']:22s} {'healthy' if d['healthy'] else 'broken':8s} stopped in "
            f"{d['stopped']['stage']} before the gate: {d['stopped']['error'][:110]}"
        )
    refused = [
        d["name"]
        for d, v in scored
        if not d["healthy"] and (v["rhi"] < threshold or floored(v) or not d["gate"]["passed"])
    ]
    refused += [d["name"] for d in stopped if not d["healthy"]]
    promoted = [
        d["name"]
        for d, v in scored
        if d["healthy"] and v["rhi"] >= threshold and not floored(v) and d["gate"]["passed"]
    ]
    print(
        f"  refuses {len(refused)} of {sum(not d['healthy'] for d in every)} broken days; promotes "
        f"{len(promoted)} of {sum(d['healthy'] for d in every)} healthy"
    )
    oc = load_config(root=ROOT).online
    partial = {
        d["name"]: (weights["dcs"] * (v["dcs"] or 0.0) + weights["gvs"] * (v["gvs"] or 0.0))
        / ((weights["dcs"] + weights["gvs"]) or 1.0)
        for d, v in scored
    }
    fast_thresholds = fast_loop_thresholds(
        [partial[d["name"]] for d in days if d["healthy"]], [partial[d["name"]] for d in days if not d["healthy"]]
    )
    fast = {}
    own = {"skip_below": oc.skip_below, "rollback_below": oc.rollback_below, "freeze_below": oc.freeze_below}
    ladders = ([("online", "online's settings", own)] if None not in own.values() else []) + [
        ("panel", "the panel's", fast_thresholds)
    ]
    for key, label, t in ladders:
        print(
            f"\nthe fast loop on each panel adapter, {label}: partial RHI (DCS, GVS) against skip_below "
            f"{t['skip_below']} / "
            f"rollback_below {t['rollback_below']} / freeze_below {t['freeze_below']}"
        )
        for d in days:
            x = partial[d["name"]]
            action = (
                "freeze"
                if x < t["freeze_below"]
                else "rollback"
                if x < t["rollback_below"]
                else "skip"
                if x < t["skip_below"]
                else "promote"
            )
            fast.setdefault(d["name"], {"partial": round(x, 4)})[key] = action
            print(f"  {d['name']:22s} {'healthy' if d['healthy'] else 'broken':8s} {x:.3f}  {action}")
    data = {
        "panel": {
            "command": ".venv/bin/python benchmarks/health_panel.py calibrate"
            + (f" --panel {panel}" if panel else ""),
            "date": dt.date.today().isoformat(),
            "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}",
            "healthy": sum(d["healthy"] for d in every),
            "broken": sum(not d["healthy"] for d in every),
            "threshold_placed": how,
            "weights_chosen": chosen,
            "stopped": {
                d["name"]: {
                    "healthy": d["healthy"],
                    "what": d["what"],
                    "stage": d["stopped"]["stage"],
                    "error": d["stopped"]["error"],
                    **({"broken_by": d["objective"]["broken_by"]} if d["objective"]["broken_by"] else {}),
                }
                for d in stopped
            },
            "days": {
                d["name"]: {
                    "healthy": d["healthy"],
                    "what": d["what"],
                    "rhi": round(v["rhi"], 4),
                    "components": {k: None if v[k] is None else round(v[k], 4) for k in COMPONENTS},
                    **({"broken_by": d["objective"]["broken_by"]} if d["objective"]["broken_by"] else {}),
                }
                for d, v in scored
            },
        },
        "references": references,
        "weights": weights,
        "threshold": threshold,
        "floors": floors,
        "gate": {
            "broken_refused": len(refused),
            "broken": sum(not d["healthy"] for d in every),
            "healthy_promoted": len(promoted),
            "healthy": sum(d["healthy"] for d in every),
        },
        "healthy": {k: [round(min(v), 4), round(max(v), 4)] for k, v in healthy.items()},
        "broken": {k: [round(min(v), 4), round(max(v), 4)] for k, v in broken.items()},
        "auc": {k: round(auc(healthy[k], broken[k]), 3) for k in healthy},
        "auc_held_out": {"rhi": round(auc(held_out, held_out_broken), 3)},
        "auc_without_memory_only": {
            "days_left_out": memory_only,
            "rhi": round(auc(healthy["rhi"], seen), 3),
            "rhi_held_out": round(
                auc(held_out, [unseen[d["name"]] for d in days if not d["healthy"] and d["name"] not in memory_only]),
                3,
            ),
        },
        "fast_loop": {"thresholds": fast_thresholds, "adapters": fast},
    }
    header = (
        "# The Reward Health Index's calibration on a panel of days whose answer is known "
        "(benchmarks/health_panel.py).\n"
        "# references: normalising constants from the healthy days (GVI_max per policy mode, MSS's "
        "drift and curvature maxima,\n"
        "# dcs_healthy: the coherence their dimensions have, which DCS is read against); weights: the "
        "components' weights (sum 1);\n"
        "# threshold: the RHI an adapter needs, chosen on the panel; floors: a component below its "
        "floor refuses on its own;\n"
        "# healthy / broken: each component's range over those days; auc: how well it separates them "
        "(auc_held_out: the RHI's with\n"
        "# each day scored under references and weights fitted on the others alone; "
        "auc_without_memory_only: over the broken days\n"
        "# whose fault is not only lost facts, which no component reads); fast_loop: the online fast "
        "loop's thresholds.\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + yaml.safe_dump(data, sort_keys=False, width=140))
    print(
        "AUC "
        + "  ".join(f"{k.upper()} {v}" for k, v in data["auc"].items())
        + f"; the RHI's with each day held out of the references and weights "
        f"{data['auc_held_out']['rhi']}; without the days broken only in memory ({', '.join(memory_only) or 'none'}), "
        f"{data['auc_without_memory_only']['rhi']} ({data['auc_without_memory_only']['rhi_held_out']} "
        f"held out)\nweights {weights}"
    )
    print(f"wrote {out}: threshold {threshold} ({how}); RHI AUC {data['auc']['rhi']}")
    return data


# --- variants: other readings of each component, from the ingredients alone
# ----------------------------------------------


def ingredient_table(g: dict[str, Any]) -> pd.DataFrame:
    """The evaluation table CDRS reads, from a day's ingredients (the evaluation's vectors where kept, else the
    reward model's raw ones)."""
    dims = g["dimensions"]
    ev = g.get("eval_vectors")
    sides = {side: ev[side] if ev else g[side]["vector"] for side in ("base", "adapter")}
    return pd.DataFrame(
        {
            "category": g["categories"],
            "adapter_outcome": [np.nan if x is None else x for x in g["adapter_outcome"]],
            **{f"{side}_vector": [dict(zip(dims, v)) for v in sides[side]] for side in sides},
        }
    )


def readings(g: dict[str, Any]) -> dict[str, float | None]:
    """Readings of the five components from one day's ingredients: the index's own (`components_from`,
    unnormalised) and the others measured beside them. Each is oriented so that higher should mean healthier
    (a raw quantity that is worse when high is negated)."""
    from hominem_pipeline.core.evaluation.health import cross_domain_robustness, predictivity_of

    index = {on: components_from(g, on, 1.0, None, None) for on in ("reward_model", "policy")}
    mine, mss = index["policy"], index["policy"]["mss"]
    norms = np.asarray(g["grad_norms"], dtype=float)
    late = norms[len(norms) // 2 :]
    base_s, ad_s = np.asarray(g["base"]["scalar"]), np.asarray(g["adapter"]["scalar"])
    kept = np.asarray(g.get("kept") or [i for i, a in enumerate(g["answered"]) if a])
    both = np.concatenate([base_s, ad_s])[np.asarray(g["halves_of"])]
    cdrs = mine["cdrs"]
    return {
        "dcs_backbone": index["reward_model"]["dcs"].value,
        "dcs_policy": mine["dcs"].value,
        "-gvi": -mine["gvs"].details["gvi"] if mine["gvs"].value is not None else None,
        "-gvi_late": -float(late.std() / late.mean()),
        "-rdm_drift": -mss.details["rdm_drift"] if mss.value is not None else None,
        "-curvature_variance": -mss.details["curvature_variance"] if mss.value is not None else None,
        "lrps": predictivity_of(np.asarray(g["halves"]["scalar"]), both).value,  # on base and adapter replies together
        "lrps_adapter": mine["lrps"].value,
        "cdrs": cross_domain_robustness(ingredient_table(g), g["dimensions"]).value,  # against the overall sign
        "cdrs_improvement": cdrs.value,
        "-c_contradiction_improvement": -cdrs.details["c_contradiction"] if cdrs.value is not None else None,
        "-c_entropy": -cdrs.details["c_entropy"] if cdrs.value is not None else None,
        "win_rm": float(np.mean(ad_s[kept] > base_s[kept])),
        "scalar_delta": float(np.mean(ad_s[kept] - base_s[kept])),
    }


def variants(panel: Path | None) -> None:
    """Every reading of `readings` on each measured day (labelled as `measured_days` labels it: by the
    objective measures), and its separation of healthy from broken (AUC)."""
    days = [(d, readings(d["health"]["ingredients"])) for d in measured_days(panel) if not d.get("stopped")]
    names = list(days[0][1])
    print(f"{'reading':30s} {'AUC':>5s}  " + " ".join(f"{d['name'][:9]:>9s}" for d, _ in days))
    print(f"{'':30s} {'':5s}  " + " ".join(f"{('healthy' if d['healthy'] else 'broken'):>9s}" for d, _ in days))
    for n in names:
        a = auc([v[n] for d, v in days if d["healthy"]], [v[n] for d, v in days if not d["healthy"]])
        print(
            f"{n:30s} {a if a is None else round(a, 2)!s:>5s}  "
            + " ".join(f"{v[n]:9.3f}" if v[n] is not None else f"{'n/a':>9s}" for _, v in days)
        )
