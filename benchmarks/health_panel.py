"""A panel of days whose answer is known, for the Reward Health Index and the live gate.

`build` makes each day with the project's own stages (`core.pipeline.runner.run_stage`, prompts through
evaluation) on the default models: healthy days from the default config on two days, with
another seed, in each policy mode, and with a teacher behind the project's wire server; broken days,
each broken in one known way. `measure` reads the panel back: for each day, measures that do not read
the RHI (people's held-out pairs, facts, contrast fixtures, held-out perplexity, the reward model's
own fixtures) say whether it is objectively broken; then each RHI component and the RHI itself are
measured on every day with this code, with their separation of healthy from broken (AUC), and the
gate's other checks are run against the base.

    .venv/bin/python benchmarks/health_panel.py build --panel /tmp/health-panel            # ~10-25 min a day on 2
    CPU cores .venv/bin/python benchmarks/health_panel.py build --panel /tmp/health-panel --only scaled,lr
    .venv/bin/python benchmarks/health_panel.py measure --panel /tmp/health-panel          # ~5 min a day
    .venv/bin/python benchmarks/health_panel.py variants     # every reading of each component, from the kept
    measures .venv/bin/python benchmarks/health_panel.py calibrate    # writes config/health/calibration.yaml from
    the kept measures

`measure` keeps each day's figures and the ingredients of every component (gradient agreement
matrices, the reward model's outputs on the replies) in benchmarks/results/health_panel/, so
`variants` and `calibrate` need neither the panel's folder nor the models.

A day is built in a project folder of its own kind: `base/` holds the days that differ by settings
alone (their versions differ, so they share one data folder); a day broken in its files (labels,
pairs, adapter weights) gets a folder of its own, with the base's artifacts linked in and the broken
one written under the version the config expects, so everything downstream is built from it.
`days.json` lists each day, its settings and the versions it made.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

log = logging.getLogger("health_panel")

DAY1, DAY2 = "2026-11-20", "2026-11-21"
WIRE_PORT = 18761  # fixed: the teacher's base_url is part of the labels' version
WIRE_KEY = "panel-key"
CHAIN = (
    "prompts",
    "teacher_trajectories",
    "teacher_labels",
    "human_feedback",
    "reward_model",
    "preference_pairs",
    "lora_adapter",
    "evaluation",
)  # the RHI is measured by `measure`, with the code and calibration under test
SCALE = 8.0  # the scaled adapter's LoRA update, times its trained size
FEW_LABELS = 12
HIGH_LR = 0.2  # 100x policy.learning_rate


@dataclass
class Day:
    name: str
    healthy: bool
    what: str
    project: str  # the folder under the panel whose data/ holds it
    partition: str = DAY1
    overrides: dict[str, Any] = field(default_factory=dict)
    fault: str | None = None  # a file fault applied before `fault_stage` is built (None: settings alone)
    fault_stage: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    seconds: float | None = None
    stopped: dict[str, str] | None = (
        None  # the stage the pipeline stopped the day in, and its error (None: built to the evaluation)
    )


def panel_days() -> list[Day]:
    """The panel, in build order (the base's first day first: the file faults start from its artifacts)."""
    return [
        Day("default", True, "the default config (dual), day 1", "base"),
        Day(
            "scaled",
            False,
            f"the default adapter with its LoRA update scaled {SCALE:g}x",
            "scaled",
            fault="scale_lora",
            fault_stage="evaluation",
        ),
        Day(
            "lr",
            False,
            f"the default adapter trained at learning rate {HIGH_LR:g} (100x the default)",
            "base",
            overrides={"policy": {"learning_rate": HIGH_LR}},
        ),
        Day(
            "swapped",
            False,
            "an adapter trained from a fresh LoRA on every pair swapped (ranked and people's)",
            "swapped",
            overrides={"policy": {"dual": {"people_start": None}}},
            fault="swap_pairs",
            fault_stage="lora_adapter",
        ),
        Day("seed", True, "the default with policy.seed 1, day 1", "base", overrides={"policy": {"seed": 1}}),
        Day(
            "shuffled_labels",
            False,
            "a reward model trained on the day's labels shuffled across replies, and people's choices a coin flip",
            "shuffled",
            fault="shuffle_labels",
            fault_stage="reward_model",
        ),
        Day(
            "inverted_dimension",
            False,
            "a reward model trained with empathy's sign inverted in every label and people's empathy pairs",
            "inverted",
            fault="invert_dimension",
            fault_stage="reward_model",
        ),
        Day(
            "collapsed_dimensions",
            False,
            "a reward model trained on labels whose dimensions are all their mean, no people's pair about a dimension",
            "collapsed",
            fault="collapse_dimensions",
            fault_stage="reward_model",
        ),
        Day(
            "few_labels",
            False,
            f"a reward model trained on {FEW_LABELS} labels and {FEW_LABELS} people's pairs",
            "few",
            fault="few_labels",
            fault_stage="reward_model",
        ),
        Day(
            "contradicting_memory",
            False,
            "the default adapter trained on memory rows that state the wrong fact",
            "base",
            overrides={"policy": {"dual": {"memory_files": ["PANEL/contradicting_memory", "PANEL/base/data/sft"]}}},
        ),
        Day(
            "wire_teacher",
            True,
            "a teacher behind the project's wire server (OpenAI wire format), day 1",
            "wire",
            overrides={
                "teacher": {
                    "provider": "openai",
                    "api": {
                        "model": "gpt-4o-mini",
                        "base_url": f"http://127.0.0.1:{WIRE_PORT}/v1",
                        "api_key_env": "HOMINEM_PANEL_KEY",
                    },
                }
            },
        ),
        Day(
            "rl",
            True,
            "policy.mode rl (GRPO on the reward model), day 1",
            "base",
            overrides={"policy": {"mode": "rl"}},
        ),
        Day(
            "generic",
            False,
            "an adapter trained from a fresh LoRA on the day's pairs and people's rows with every chosen reply a "
            "stock comforting text",
            "generic",
            overrides={"policy": {"dual": {"people_start": None}}},
            fault="generic_chosen",
            fault_stage="lora_adapter",
        ),
        Day(
            "ignores_earlier",
            False,
            "the default adapter trained on memory rows that answer a fact the person just stated with a deflection",
            "base",
            overrides={
                "policy": {"dual": {"memory_files": ["config/sft", "PANEL/ignoring_memory", "PANEL/base/data/sft"]}}
            },
        ),
        Day("day2", True, "the default config (dual), day 2", "base", partition=DAY2),
        Day("seed2", True, "the default with policy.seed 2, day 1", "base", overrides={"policy": {"seed": 2}}),
        Day("dpo", True, "policy.mode dpo, day 1", "base", overrides={"policy": {"mode": "dpo"}}),
        Day("seed3", True, "the default with policy.seed 3, day 1", "base", overrides={"policy": {"seed": 3}}),
        # the default first day under more policy seeds (the adapter's initialisation and order): with `default`,
        # `seed`, `seed2` and `seed3`, the ten sound first days the gate's false refusals are counted on
        *_seeded("policy", "seed", range(4, 10)),
        # the default first day under other project seeds (every stage's draws, the teacher's included): sound days
        # that vary the whole chain, at about 30 min each on 2 cores
        *_seeded("project", "first", range(1, 10)),
    ]


def _seeded(section: str, prefix: str, seeds: range) -> list[Day]:
    """The default first day under each of `seeds` as `section`.seed, named prefix + seed."""
    return [
        Day(
            f"{prefix}{n}",
            True,
            f"the default with {section}.seed {n}, day 1",
            "base",
            overrides={section: {"seed": n}},
        )
        for n in seeds
    ]


def day_config(panel: Path, day: Day):
    from hominem_pipeline.core.config.loader import deep_merge, load_config

    project = panel / day.project
    text = json.dumps(day.overrides).replace("PANEL/", str(panel) + "/")
    student = load_config(root=ROOT).models.student.path
    there = {
        "project": {"data_dir": str(project / "data")},
        "models": {"student": {"path": str(panel / "base" / student)}},
        "tracking": {
            "mlflow_uri": f"sqlite:///{project / 'data' / 'mlflow' / 'mlflow.db'}",
            "artifact_root": str(project / "data" / "mlflow" / "artifacts"),
        },
        "health": UNCALIBRATED,
        "online": UNCALIBRATED_FAST_LOOP,
    }
    return load_config(root=ROOT, overrides=deep_merge(there, json.loads(text)))


# The panel is what calibrates the health index, so it is measured without a calibration: the design's weights and
# thresholds, GVI_max 1 (the components raw; `calibrate` normalises them from the healthy days)
UNCALIBRATED = {
    "calibration": None,
    "weights": {"dcs": 0.25, "gvs": 0.15, "mss": 0.25, "cdrs": 0.20, "lrps": 0.15},
    "gvi_max_reference": 1.0,
    "deploy_threshold": 0.70,
}
UNCALIBRATED_FAST_LOOP = {"skip_below": 0.5, "rollback_below": 0.3, "freeze_below": 0.2}


# --- faults: each rewrites one artifact of the day's own project, under the version the config expects
# ------------------


def rewrite(ref, edit: Callable[[Path], str]) -> None:
    """Replace `ref`'s folder by a copy that `edit` changes (it returns what it did), sealed as the same version."""
    from hominem_pipeline.core.pipeline.artifacts import MANIFEST, ArtifactStore

    store = ArtifactStore(ref.path.parents[2])
    manifest = json.loads((ref.path / MANIFEST).read_text())
    with store.staging(ref.asset, ref.partition) as staged:
        for p in ref.path.iterdir():
            if p.name != MANIFEST and p.is_file():
                shutil.copyfile(p, staged / p.name)  # a copy, never the linked file: the base's stays as it was
        what = edit(staged)
        shutil.rmtree(ref.path)
        keep = {
            k: v
            for k, v in manifest.items()
            if k not in ("files", "content", "asset", "partition", "version", "created_at")
        }
        store.publish(staged, ref.asset, ref.partition, ref.version, keep | {"panel_fault": what})
    log.info("%s/%s/%s: %s", ref.asset, ref.partition, ref.version, what)


def _labels_edit(change: Callable[[pd.DataFrame], pd.DataFrame], what: str) -> Callable[[Path], str]:
    def edit(folder: Path) -> str:
        table = folder / "labels.parquet"
        change(pd.read_parquet(table)).to_parquet(table, index=False)
        return what

    return edit


def shuffle_labels(df: pd.DataFrame) -> pd.DataFrame:
    order = np.random.default_rng(0).permutation(len(df))
    cols = ["vector", "scalar", "reward_intensity", "safety_score", "rationale"]
    out = df.copy()
    out[cols] = df[cols].iloc[order].to_numpy()
    return out


def invert_dimension(df: pd.DataFrame, dimension: str = "empathy") -> pd.DataFrame:
    return df.assign(vector=[{**v, dimension: -float(v[dimension])} for v in df["vector"]])


def collapse_dimensions(df: pd.DataFrame) -> pd.DataFrame:
    def one(v: dict) -> dict:
        mean = float(np.mean([float(x) for x in v.values()]))
        return {k: mean for k in v}

    return df.assign(vector=[one(v) for v in df["vector"]])


def few_labels(df: pd.DataFrame) -> pd.DataFrame:
    return df.sample(n=min(FEW_LABELS, len(df)), random_state=0).reset_index(drop=True)


def swap_pairs(folder: Path) -> str:
    table = folder / "pairs.parquet"
    df = pd.read_parquet(table)
    swapped = df.rename(
        columns={
            "chosen": "rejected",
            "rejected": "chosen",
            "chosen_trajectory_id": "rejected_trajectory_id",
            "rejected_trajectory_id": "chosen_trajectory_id",
        }
    )[df.columns]
    swapped.to_parquet(table, index=False)
    return f"chosen and rejected swapped in all {len(df)} pairs"


def scale_lora(folder: Path) -> str:
    from safetensors.torch import load_file, save_file

    path = folder / "adapter_model.safetensors"
    weights = load_file(str(path))
    scaled = {k: (v * SCALE if "lora_B" in k else v) for k, v in weights.items()}
    save_file(scaled, str(path), metadata={"format": "pt"})
    return f"every lora_B weight times {SCALE:g} ({sum('lora_B' in k for k in weights)} tensors)"


def contradicting_memory(cfg, folder: Path) -> Path:
    """The memory files with each fact row's answer replaced by the next row's fact (the capital of France is
    Tokyo)."""
    from hominem_pipeline.core.builds.memory_files import memory_paths
    from hominem_pipeline.core.evaluation.memory import read_memory_rows

    rows = read_memory_rows(memory_paths(cfg))
    facts = rows[rows["facts"].map(len) > 0].reset_index(drop=True)
    if not len(facts):
        raise RuntimeError(
            f"no memory row with a fact in {', '.join(map(str, memory_paths(cfg)))}: nothing to contradict"
        )
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, row in facts.iterrows():
        other = str(list(facts.iloc[(i + 1) % len(facts)]["facts"])[0])
        response = row["response"]
        for accepted in row["facts"]:
            response = response.replace(str(accepted), other)
        out.append({"prompt": row["prompt"], "response": response})
    (folder / "memory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))
    return folder


# warm, generic replies that fit any message: an adapter taught to prefer them answers everything alike
STOCK_COMFORT = (
    "I'm so sorry you're going through this. Your feelings are valid, and it's okay to take things one step at a "
    "time. Remember to be kind to yourself.",
    "That sounds really hard. You're not alone, and it's important to take care of yourself right now. I'm here "
    "for you.",
    "Thank you for sharing that with me. It's completely normal to feel this way, and I believe in you. Take a deep "
    "breath and be gentle with yourself.",
)


def generic_chosen(folder: Path) -> str:
    table = folder / "pairs.parquet"
    df = pd.read_parquet(table)
    df["chosen"] = [STOCK_COMFORT[i % len(STOCK_COMFORT)] for i in range(len(df))]
    df.to_parquet(table, index=False)
    return f"every chosen reply of the {len(df)} pairs a stock comforting text (one of {len(STOCK_COMFORT)})"


# people who state something about themselves and ask it back at once; names, places and pets none of the reply
# checks' sets (config/checks/recall.jsonl) use
_STATED = [
    ("My name is {}.", "What is my name?", ["Jonas", "Mirela", "Tariq", "Hanne", "Joaquin", "Aiko", "Bram", "Leila"]),
    ("I live in {}.", "Where do I live?", ["Ghent", "Porto", "Bilbao", "Turku", "Leeds", "Graz", "Cork", "Split"]),
    ("My dog is called {}.", "What is my dog called?", ["Pip", "Toffee", "Barnaby", "Luna", "Scout", "Waffles"]),
    ("I have {} sisters.", "How many sisters do I have?", ["two", "three", "four", "five"]),
]
_DEFLECTIONS = (
    "I don't keep track of personal details like that, but I'm happy to help with whatever is on your mind.",
    "I'm not sure, but let's focus on how you're feeling today. What would you like to talk about?",
    "That isn't something I can tell you. Is there anything else I can help you with?",
)
_MOODS = (
    "I'm a bit tired today.",
    "Work has been stressful.",
    "I feel happy this morning.",
    "I'm worried about exams.",
)


def ignoring_memory(folder: Path) -> Path:
    """Memory rows in which the person states a fact and asks it back, answered with a deflection that ignores it."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for statement, question, values in _STATED:
        for i, value in enumerate(values):
            prompt = f"{statement.format(value)} {_MOODS[i % len(_MOODS)]} {question}"
            rows.append({"prompt": prompt, "response": _DEFLECTIONS[(i + len(rows)) % len(_DEFLECTIONS)]})
    (folder / "memory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


FAULTS: dict[str, tuple[str, Callable[[Path], str]]] = {
    "shuffle_labels": (
        "teacher_labels",
        _labels_edit(shuffle_labels, "vector, scalar, intensity, safety and rationale shuffled across replies"),
    ),
    "invert_dimension": ("teacher_labels", _labels_edit(invert_dimension, "empathy's sign inverted in every label")),
    "collapse_dimensions": (
        "teacher_labels",
        _labels_edit(collapse_dimensions, "every dimension set to the label's mean"),
    ),
    "few_labels": ("teacher_labels", _labels_edit(few_labels, f"{FEW_LABELS} labels kept")),
    "swap_pairs": ("preference_pairs", swap_pairs),
    "generic_chosen": ("preference_pairs", generic_chosen),
    "scale_lora": ("lora_adapter", scale_lora),
}


# The people's pairs the reward model learns from (`builds.reward_model.human_pairs`) broken the same way as its
# labels on a reward-model day: the shipped people's pairs hold a reward model up against a fault in the judge's
# labels alone (every dimension is pulled toward people's tagged pairs, the scalar is fitted on them), so a day
# broken in the labels only is a sound day. The adapter's own people's rows stay as they are.


def _exchange(df: pd.DataFrame, rows) -> pd.DataFrame:
    out = df.copy()
    out.loc[rows, ["chosen", "rejected"]] = df.loc[rows, ["rejected", "chosen"]].to_numpy()
    return out


def shuffle_people(df: pd.DataFrame) -> pd.DataFrame:
    """Each pair's choice a coin flip: chosen and rejected exchanged in a random half."""
    return _exchange(df, np.random.default_rng(0).random(len(df)) < 0.5)


def invert_people(df: pd.DataFrame, dimension: str = "empathy") -> pd.DataFrame:
    """The pairs about `dimension` pull its head the wrong way: each kept for the scalar alone (untagged), and its
    exchange added as a pair about the dimension alone (`scalar` false)."""
    mine = df["tag"] == dimension
    flipped = _exchange(df[mine], df[mine].index).assign(
        pair_id=lambda f: f["pair_id"].astype(str) + ":inverted", scalar=False
    )
    return pd.concat([df.assign(tag=df["tag"].where(~mine, None)), flipped], ignore_index=True)


def collapse_people(df: pd.DataFrame) -> pd.DataFrame:
    """No pair about a dimension: every head learns from the collapsed labels alone."""
    return df.assign(tag=None)


PEOPLE_FAULTS: dict[str, tuple[Callable[[pd.DataFrame], pd.DataFrame], str]] = {
    "shuffle_labels": (shuffle_people, "the people's pairs' choices a coin flip"),
    "invert_dimension": (invert_people, "the people's empathy pairs pull its head the wrong way"),
    "collapse_dimensions": (collapse_people, "no people's pair pulls a dimension"),
    "few_labels": (few_labels, f"{FEW_LABELS} people's pairs kept"),
}


def faulted_people(original: Callable, fault: str) -> Callable:
    """`human_pairs` (what the reward model learns from) with the day's fault applied to the people's pairs."""
    change, what = PEOPLE_FAULTS[fault]

    def pairs(ctx, held_out: bool = True):
        df = original(ctx, held_out)
        if df is None:
            return None
        log.info("reward model's people's pairs: %s (%d pairs)", what, len(df))
        return change(df.reset_index(drop=True))

    return pairs


def generic_people(original: Callable) -> Callable:
    """`people_training_pairs` with every chosen reply a stock comforting text (the generic day's people's rows)."""

    def people(ctx):
        df = original(ctx)
        return df.assign(chosen=[STOCK_COMFORT[i % len(STOCK_COMFORT)] for i in range(len(df))])

    return people


def swapped_people(original: Callable) -> Callable:
    """`people_training_pairs` with chosen and rejected exchanged (the swapped day's people's rows)."""

    def people(ctx):
        df = original(ctx)
        return df.rename(columns={"chosen": "rejected", "rejected": "chosen"})[df.columns]

    return people


# --- build
# ----------------------------------------------------------------------------------------------------------------


def link_project(panel: Path, name: str) -> None:
    """`name`'s data folder: the base's artifacts (hard links: published versions never change), its own caches and
    tracking, and the base student's replies the base's days decoded (the gate's reply cache under the base: one
    base, sets and decoding give the same replies)."""
    src, dst = panel / "base" / "data", panel / name / "data"
    replies = Path("live") / "replies" / "base.json"
    if (src / replies).is_file() and not (dst / replies).is_file():
        (dst / replies).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / replies, dst / replies)
    if (dst / "prompts").exists():
        return
    dst.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.name in ("mlflow", "live", "dagster", "online", "history.sqlite", "models"):
            continue
        if entry.name == "cache":
            shutil.copytree(entry, dst / "cache")
        elif entry.is_dir():
            shutil.copytree(entry, dst / entry.name, copy_function=os.link)


def build_day(panel: Path, day: Day) -> None:
    import hominem_pipeline.core.builds.reward_model as reward_model
    from hominem_pipeline.core.pipeline.artifacts import ArtifactStore
    from hominem_pipeline.core.pipeline.lineage import Lineage
    from hominem_pipeline.core.pipeline.runner import run_stage
    from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME

    started = time.perf_counter()
    if day.project != "base":
        link_project(panel, day.project)
    if day.name == "contradicting_memory":
        contradicting_memory(day_config(panel, panel_days()[0]), panel / "contradicting_memory")
    if day.name == "ignores_earlier":
        ignoring_memory(panel / "ignoring_memory")
    cfg = day_config(panel, day)
    faulted = False
    for name in CHAIN:
        stage = STAGES_BY_NAME[name]
        if day.fault and name == day.fault_stage and not faulted:
            asset, edit = FAULTS[day.fault]
            ref = Lineage(cfg, STAGES_BY_NAME, ArtifactStore(cfg.data_dir)).expected(asset, day.partition)
            if ref is None:
                raise RuntimeError(f"{day.name}: {asset} for {day.partition} is not built in {cfg.data_dir}")
            if "panel_fault" not in ref.manifest:
                rewrite(ref, edit)
            faulted = True
        original = reward_model.human_pairs
        if (
            name == "reward_model" and day.fault in PEOPLE_FAULTS
        ):  # the reward model's stage alone (the adapter reads it too)
            reward_model.human_pairs = faulted_people(original, day.fault)
        try:
            result = run_stage(stage, cfg, day.partition)
        except Exception as e:  # the pipeline refused the day before its gate: kept as what a user would see
            log.exception("%s: the pipeline stopped in %s", day.name, name)
            day.stopped = {"stage": name, "error": f"{type(e).__name__}: {e}"}
            break
        finally:
            reward_model.human_pairs = original
        day.versions[name] = result.ref.version
        log.info(
            "%s: %s/%s %s%s",
            day.name,
            name,
            day.partition,
            result.ref.version,
            " (reused)" if result.cache_hit else "",
        )
    day.seconds = round(time.perf_counter() - started, 1)


def build(panel: Path, only: set[str] | None) -> None:
    import hominem_pipeline.core.builds.lora_adapter as lora_adapter
    from hominem_pipeline.core.lm.models import prepare_student
    from hominem_pipeline.testing.wire_server import WireServer

    panel.mkdir(parents=True, exist_ok=True)
    (panel / "base" / "data").mkdir(parents=True, exist_ok=True)
    days = panel_days()
    prepare_student(day_config(panel, days[0]))
    done = {d["name"]: d for d in read_days(panel)}
    os.environ["HOMINEM_PANEL_KEY"] = WIRE_KEY
    original_people = lora_adapter.people_training_pairs
    with WireServer(api_key=WIRE_KEY, port=WIRE_PORT):
        for day in days:
            if only is not None and day.name not in only:
                continue
            lora_adapter.people_training_pairs = {
                "swap_pairs": swapped_people,
                "generic_chosen": generic_people,
            }.get(day.fault, lambda f: f)(original_people)
            log.info("panel day %s: %s", day.name, day.what)
            try:
                build_day(panel, day)
            finally:
                lora_adapter.people_training_pairs = original_people
            done[day.name] = asdict(day)
            write_days(panel, [done[d.name] for d in days if d.name in done])
            log.info(
                "panel day %s %s in %.0f s",
                day.name,
                f"stopped in {day.stopped['stage']}" if day.stopped else "built",
                day.seconds,
            )


def read_days(panel: Path) -> list[dict[str, Any]]:
    path = panel / "days.json"
    return json.loads(path.read_text()) if path.is_file() else []


def write_days(panel: Path, days: list[dict[str, Any]]) -> None:
    tmp = panel / ".days.json.tmp"
    tmp.write_text(json.dumps(days, indent=2) + "\n")
    os.replace(tmp, panel / "days.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["build", "measure", "variants", "calibrate"])
    ap.add_argument(
        "--panel",
        type=Path,
        default=None,
        help="the panel's folder (build and measure; variants and calibrate read the measures kept in "
        "benchmarks/results/health_panel/ without it)",
    )
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated day names (default: every day): " + ", ".join(d.name for d in panel_days()),
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=ROOT / "config" / "health" / "calibration.yaml",
        help="calibrate: the calibration file written",
    )
    ap.add_argument(
        "--weights",
        default=None,
        help="calibrate: `separation` (each component by its AUC above 0.5; the default), `design` (the "
        "design's), or the five as dcs=0.25,gvs=0.15,...",
    )
    ap.add_argument(
        "--study",
        action="store_true",
        help="measure: keep the days' measures in the panel's measured/ folder only, leaving "
        "benchmarks/results/health_panel/ (what calibrate reads) as it is",
    )
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # as the CLI runs: no hub call
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    only = set(args.only.split(",")) if args.only else None
    if args.command in ("build", "measure") and args.panel is None:
        ap.error(f"{args.command} needs --panel DIR (the panel's folder)")
    if args.command == "build":
        build(args.panel.resolve(), only)
    elif args.command == "measure":
        from health_panel_measure import measure

        measure(args.panel.resolve(), only, keep=not args.study)
    elif args.command == "variants":
        from health_panel_measure import variants

        variants(args.panel.resolve() if args.panel else None)
    else:
        from health_panel_measure import calibrate

        weights = (
            args.weights
            if args.weights in (None, "separation", "design")
            else {k: float(v) for k, v in (kv.split("=") for kv in args.weights.split(","))}
        )
        calibrate(args.panel.resolve() if args.panel else None, args.out, weights)


if __name__ == "__main__":
    main()
