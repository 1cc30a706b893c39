"""The attunement loop over days, as a user runs it: a rater's choices in the service's log on three days,
their taste turning on the third (from the longer reply to the shorter one); `hominem run` each day;
the prediction log, the drift check naming the length and the direction, `hominem attune`, and the
retrain sensor counting the drift."""

import json
import re

import numpy as np
import pandas as pd

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.pipeline.lineage import lineage
from hominem_pipeline_tests.integration.test_cli import hominem

DAYS = ["2026-11-17", "2026-11-18", "2026-11-19"]
SETS = [
    "--set",
    "attunement.drift.recent_days=1",
    "--set",
    "attunement.drift.reference_days=2",
    "--set",
    "attunement.drift.min_choices=20",
    "--set",
    "attunement.drift.z=3.0",
]
TOPICS = [
    "my garden",
    "a tax form",
    "my cat",
    "a job interview",
    "the weather",
    "a chess opening",
    "my sister",
    "a recipe",
]


def write_day(project, day, shorter_share, rng, n=40):
    """`n` choices between a short and a long reply to one message each; the short one chosen `shorter_share` of the
    time."""
    from hominem_pipeline.core.online.events import context_digest

    events = []
    for i in range(n):
        messages = [{"role": "user", "content": f"Can you help me with {TOPICS[i % len(TOPICS)]}? ({day}, {i})"}]
        base = {
            "kind": "turn",
            "time": f"{day}T10:{i % 60:02d}:00+00:00",
            "rater": "ana",
            "session": f"s{i}",
            "messages": messages,
            "model": "hominem",
            "adapter": None,
            "sampling": {},
            "finish_reason": "stop",
            "completion_tokens": 5,
            "context": context_digest(messages),
        }
        short, long = f"{day}-{i}-short", f"{day}-{i}-long"
        events += [
            base | {"id": short, "reply": "Sure, start small."},
            base
            | {
                "id": long,
                "reply": "Sure. Let us go through it together step by step, starting with what you have already "
                "tried and what worked.",
            },
        ]
        chosen, rejected = (short, long) if rng.random() < shorter_share else (long, short)
        events.append(
            {
                "kind": "choice",
                "id": f"{day}-{i}-c",
                "time": f"{day}T11:{i % 60:02d}:00+00:00",
                "rater": "ana",
                "chosen": chosen,
                "rejected": rejected,
                "strength": "clear",
            }
        )
    folder = project / "data" / "online" / "log"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{day}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_the_prediction_log_the_drift_check_and_hominem_attune_over_days(tmp_path, tiny_student, tiny_encoder):
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    rng = np.random.default_rng(0)
    for day, shorter in zip(DAYS, (0.15, 0.15, 0.9)):
        write_day(project, day, shorter, rng)
        done = hominem(
            project, "run", "--config", "config/tiny.yaml", "--date", day, "--select", "*predictions,attunement", *SETS
        )
        assert done.returncode == 0, done.stdout + done.stderr
    cfg = load_config(
        project / "data" / "overlays" / sorted(p.name for p in (project / "data" / "overlays").iterdir())[-1],
        root=project,
    )
    data = lineage(cfg)

    # the prediction log: each day's 40 choices, predicted by the reward model of the day before (the first day: its
    # own, said so)
    logs = {day: pd.read_parquet(data.expected("predictions", day).file("predictions.parquet")) for day in DAYS}
    for day, log in logs.items():
        people = log[log["source"] == "page"]
        assert len(people) == 40 and set(people["rater"]) == {"ana"} and people["time"].str.startswith(day).all()
        assert (
            people["p_chosen"].between(0, 1).all() and people["served_p_chosen"].isna().all()
        )  # the log's turns were not scored when served
        assert set(people["domain"]) <= set(cfg.prompts.categories) and {
            f"gap_{d}" for d in cfg.dimension_names
        } <= set(people.columns)
    assert logs[DAYS[0]]["in_sample"].all() and not logs[DAYS[1]]["in_sample"].any()
    assert set(logs[DAYS[1]]["reward_model"]) == {
        str(data.expected("reward_model", DAYS[0]).path.resolve().relative_to(cfg.data_dir.resolve()))
    }

    # the third day's attunement: the length drifted, downwards, and the check says so
    attune = hominem(project, "attune", "--config", "config/tiny.yaml", "--date", DAYS[2], *SETS)
    out = " ".join(attune.stdout.split())
    assert attune.returncode == 0, attune.stdout + attune.stderr
    assert "people: " in out and "of 120 choices ordered as chosen, ECE" in out  # the window's 3 days
    assert "all: people now choose the longer reply less often" in out and "they favour shorter replies" in out
    assert "error clusters" in out and re.search(
        r"\[(new|grew|shrank|held, was \d+|grew, was \d+|shrank, was \d+)\] \d+ pairs: ", out
    ), out
    summary = json.loads(data.expected("attunement", DAYS[2]).file("attunement.json").read_text())
    assert any(d["dimension"] == "length" and d["direction"] == "down" for d in summary["drift"]["drifted"])
    before = json.loads(data.expected("attunement", DAYS[1]).file("attunement.json").read_text())
    assert before["drift"]["drifted"] == [] or all(d["dimension"] != "length" for d in before["drift"]["drifted"])

    from hominem_pipeline.defs.sensors import sensor_tick

    request, _, reason = sensor_tick(
        json.dumps({"conversations": 10**6, "preference_pairs": 10**6}), cfg
    )  # no new data: only the drift
    # the largest shifts first (the dimensions the tiny model's random heads tie to the length move with it)
    assert (
        request is not None
        and request.tags["hominem/trigger"] == "drift"
        and reason.startswith(f"drift on {DAYS[2]}: all: people now choose ")
    )
