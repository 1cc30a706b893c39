"""The dashboard's views over a data folder written the way the stages write it."""

import json
import math

import numpy as np
import pandas as pd

from hominem_pipeline.core.dashboard.probe import score_side_by_side
from hominem_pipeline.core.dashboard.views import DashboardData, pattern


def version(data, asset, day, v, metrics, inputs=None, created=None, complete=True):
    folder = data / asset / day / v
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "asset": asset,
                "partition": day,
                "version": v,
                "complete": complete,
                "metrics": metrics,
                "inputs": inputs or {},
                "created_at": created or f"{day}T03:00:00+00:00",
            }
        )
    )
    return folder


def test_the_timeline_takes_each_day_s_newest_version_and_marks_live_events(tmp_path):
    data = tmp_path / "data"
    version(data, "reward_health_index", "2026-11-01", "a", {"rhi": 0.7, "dcs": 0.5})
    version(data, "reward_health_index", "2026-11-02", "b", {"rhi": 0.6})
    version(
        data, "reward_health_index", "2026-11-02", "c", {"rhi": 0.8}, created="2026-11-02T09:00:00+00:00"
    )  # built later that day
    version(
        data,
        "reward_health_index",
        "2026-11-02",
        "d",
        {"rhi": 0.1},
        created="2026-11-02T10:00:00+00:00",
        complete=False,
    )  # never finished
    version(data, "attunement", "2026-11-03", "e", {"people_agreement": 0.62, "people_ece": 0.04})
    (data / "live").mkdir()
    (data / "live" / "history.json").write_text(
        json.dumps(
            [
                {"time": "2026-11-02T05:00:00+00:00", "action": "promote", "version": "c", "reason": "passed"},
                {"time": "2026-11-02T06:00:00+00:00", "action": "note", "reason": "not an event"},
            ]
        )
    )
    view = DashboardData(data)
    t = view.timeline()
    assert t["days"] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert (
        t["series"]["rhi"] == [0.7, 0.8, None]
        and t["series"]["people_agreement"] == [None, None, 0.62]
        and t["series"]["dcs"] == [0.5, None, None]
    )
    assert [e["action"] for e in t["events"]] == ["promote"]
    # a new version appears on the next read (the day's folder changed), the old ones are read from memory
    version(data, "reward_health_index", "2026-11-03", "f", {"rhi": 0.75})
    assert view.timeline()["series"]["rhi"] == [0.7, 0.8, 0.75]
    health = view.health()
    assert (
        health["rhi"] == 0.75
        and health["day"] == "2026-11-03"
        and [c["key"] for c in health["components"]] == ["dcs", "gvs", "mss", "cdrs", "lrps"]
    )
    assert health["trend"]["rhi"] == [0.7, 0.8, 0.75] and health["actions"][0]["action"] == "promote"
    # the gate that decided what is served: with the base live, the newest refusal and its sampled checks
    from hominem_pipeline.core.evaluation.noise import NoiseRule, paired_check
    from hominem_pipeline.core.online.live import LiveState

    assert health["gate"] == {"version": None, "checks": []}
    recall = paired_check("recall", "recall", [0.0] * 9 + [1.0], [1.0] * 10, NoiseRule(0.0, 0.98, 0.8), "the base")
    (data / "adapter").mkdir()
    LiveState(data).refuse(
        "g", data / "adapter", None, gate={"checks": {"recall": recall.as_dict()}}, reason="x", by="t"
    )
    gate = view.health()["gate"]
    assert gate["version"] == "g" and gate["checks"][0]["refused"] and gate["checks"][0]["standard_error"] > 0
    # each gate's figures over time: a person's taste share beside the quality checks, None where not measured
    taste = paired_check("taste:ana", "ana's taste", [0.7] * 10, [0.5] * 10, NoiseRule(0.0, 0.98, 0.8), "the base")
    LiveState(data).refuse(
        "h", data / "adapter", None, gate={"checks": {"taste:ana": taste.as_dict()}}, reason="y", by="t"
    )
    trend = view.health()["gate_trend"]
    assert [g["version"] for g in trend["gates"]] == ["g", "h"] and [g["action"] for g in trend["gates"]] == [
        "refuse",
        "refuse",
    ]
    assert trend["series"]["recall"]["values"] == [0.1, None]
    assert trend["series"]["taste:ana"] == {"what": "ana's taste", "values": [None, 0.7]}


def test_compare_puts_two_reward_models_probing_suites_side_by_side(tmp_path):
    data = tmp_path / "data"
    for day, v, choices in (("2026-11-01", "p1", ["a", "b"]), ("2026-11-02", "p2", ["a", "a"])):
        folder = version(
            data,
            "probes",
            day,
            v,
            {"probe_tradeoffs_as_expected": 0.5 + (v == "p1") * 0.5},
            {"reward_model": [{"asset": "reward_model", "partition": day, "version": f"rm-{day}"}]},
        )
        pd.DataFrame(
            {
                "id": ["x", "y"],
                "trade": "empathy_vs_honesty",
                "expected": ["a", "b"],
                "choice": choices,
                "scalar_gap": [0.1, 0.2],
            }
        ).to_parquet(folder / "tradeoffs.parquet")
    view = DashboardData(data)
    options = view.options()
    labels = [o["label"] for o in options["reward_models"]]
    assert (
        labels == ["reward_model/2026-11-01/rm-2026-11-01", "reward_model/2026-11-02/rm-2026-11-02"]
        and options["adapters"] == []
    )
    out = view.compare("reward_models", *labels)
    assert out["metrics"][labels[0]]["probe_tradeoffs_as_expected"] == 1.0
    assert [(t["id"], t["a"], t["b"]) for t in out["tradeoffs"]] == [("x", "a", "a"), ("y", "b", "a")]


def test_rhi_patterns_of_design_001_10_4():
    assert pattern([0.8, 0.82, 0.81, 0.65]) == "sharp drop"
    assert pattern([0.7, 0.78, 0.71, 0.77, 0.72]) == "oscillation"
    assert pattern([0.5, 0.52, 0.49, 0.51]) == "flat near 0.5"
    assert pattern([0.97, 0.99, 1.0]) == "flat near 1.0"
    assert pattern([0.7, 0.72, 0.74]) is None and pattern([0.7]) is None and pattern([None, 0.7]) is None


def test_every_version_is_listed_with_what_read_it_and_what_the_live_loop_did(tmp_path):
    """The timeline's table of builds: two reward models of one day (not only the newest), each with the
    attunement that read it; an adapter with its evaluation's figures and its refusal."""
    data = tmp_path / "data"
    rm = lambda day, v: {"reward_model": [{"asset": "reward_model", "partition": day, "version": v}]}  # noqa: E731
    version(data, "reward_model", "2026-11-02", "r1", {"fixture_accuracy": 0.8}, created="2026-11-02T03:00:00+00:00")
    version(data, "reward_model", "2026-11-02", "r2", {"fixture_accuracy": 0.9}, created="2026-11-02T09:00:00+00:00")
    version(data, "attunement", "2026-11-02", "t1", {"people_agreement": 0.6}, rm("2026-11-02", "r1"))
    version(data, "lora_adapter", "2026-11-02", "l1", {}, rm("2026-11-02", "r2"), created="2026-11-02T10:00:00+00:00")
    version(
        data,
        "evaluation",
        "2026-11-02",
        "e1",
        {"win_rate": 0.55},
        {"lora_adapter": [{"asset": "lora_adapter", "partition": "2026-11-02", "version": "l1"}]},
    )
    (data / "live").mkdir()
    (data / "live" / "history.json").write_text(
        json.dumps([{"time": "2026-11-02T11:00:00+00:00", "action": "refuse", "version": "l1", "reason": "RHI"}])
    )
    builds = DashboardData(data).timeline()["builds"]
    assert [(b["asset"], b["version"]) for b in builds] == [
        ("lora_adapter", "l1"),
        ("reward_model", "r2"),
        ("reward_model", "r1"),
    ]
    assert (
        builds[0]["figures"]["win_rate"] == 0.55
        and builds[0]["live"] == ["refuse"]
        and builds[0]["reward_model"] == "reward_model/2026-11-02/r2"
    )
    assert builds[2]["figures"] == {
        "fixture_accuracy": 0.8,
        "people_accuracy": None,
        "people_agreement": 0.6,
        "people_ece": None,
    }
    assert builds[1]["figures"]["people_agreement"] is None  # no attunement read r2


class Kind:
    """A toy reward model: empathy counts "sorry", truth counts "paris"; the scalar is their sum."""

    dimensions = ["empathy", "truth"]

    def raw_scores(self, prompts, replies):
        vec = np.array([[r.lower().count("sorry"), r.lower().count("paris")] for r in replies], dtype=float)
        return {"vector": vec, "scalar": vec.sum(1)}

    def probability(self, gap):
        return 1 / (1 + math.exp(-gap))


def test_two_adapters_replies_are_compared_on_one_reward_model_s_scale(tmp_path):
    """Each evaluation's own scalars come from its day's reward model; the dashboard rescoring both sides on
    one model gives the per-dimension change b - a with its standard error, on the prompts both share."""
    data = tmp_path / "data"
    for day, adapter, ev, replies in (
        ("2026-11-01", "l1", "e1", ["It is Paris.", "Go on.", "Fine."]),
        ("2026-11-02", "l2", "e2", ["Sorry, it is Paris.", "Sorry to hear it.", "Sorry."]),
    ):
        folder = version(
            data,
            "evaluation",
            day,
            ev,
            {"win_rate": 0.5},
            {
                "lora_adapter": [{"asset": "lora_adapter", "partition": day, "version": adapter}],
                "reward_model": [{"asset": "reward_model", "partition": day, "version": f"rm{day[-1]}"}],
            },
        )
        pd.DataFrame(
            {
                "prompt": ["Capital of France?", "I lost my job.", "Hi" + day],
                "adapter_response": replies,
                "adapter_scalar": [1.0, 2.0, 3.0],
            }
        ).to_parquet(folder / "generations.parquet")
    view = DashboardData(data)
    a, b = "lora_adapter/2026-11-01/l1", "lora_adapter/2026-11-02/l2"
    out = view.compare("adapters", a, b)
    assert [r["prompt"] for r in out["replies"]] == [
        "Capital of France?",
        "I lost my job.",
    ]  # the third prompts differ
    assert out["scored_by"] == {a: "reward_model/2026-11-01/rm1", b: "reward_model/2026-11-02/rm2"}
    pairs = view.adapter_replies(a, b)
    scored = score_side_by_side(
        Kind(), list(pairs["prompt"]), list(pairs["adapter_response_a"]), list(pairs["adapter_response_b"])
    )
    assert scored["delta"]["empathy"] == {"mean": 1.0, "se": 0.0} and scored["delta"]["truth"]["mean"] == 0.0
    assert scored["scalar"]["mean"] == 1.0 and scored["b_wins"] == 2 and scored["replies"][0]["p_b"] > 0.5


def test_the_asked_pairs_curve_sums_their_expected_information_against_random_picks(tmp_path):
    data = tmp_path / "data"
    assert DashboardData(data).drift()["asked"]["answers"] == 0
    for day, rows in (
        ("2026-11-01", [(0.5, "information"), (0.1, "random"), (None, None)]),  # a chat choice: not asked
        ("2026-11-02", [(0.4, "information"), (0.3, "random")]),
    ):
        folder = version(data, "human_feedback", day, "v", {})
        frame = pd.DataFrame(rows, columns=["asked_value", "asked_by"])
        frame.to_parquet(folder / "pairs.parquet")
    asked = DashboardData(data).drift()["asked"]
    assert asked["answers"] == 4 and asked["by_information"] == 2 and asked["at_random"] == 2
    assert asked["count"] == [1, 2, 3, 4] and np.allclose(asked["as_asked"], [0.5, 0.6, 1.0, 1.3])
    assert asked["random_rate"] == 0.2 and np.allclose(asked["if_at_random"], [0.2, 0.4, 0.6, 0.8])


def test_a_rater_sees_everyones_cluster_figures_and_only_their_own_words(tmp_path):
    data = tmp_path / "data"
    folder = version(data, "attunement", "2026-11-03", "v", {})
    (folder / "attunement.json").write_text(json.dumps({"drift": {"drifted": []}}))
    examples = [
        {"pair_id": "p1", "prompt": "ana's words", "chosen": "a", "rejected": "b", "p_chosen": 0.2, "rater": "r-ana"},
        {"pair_id": "p2", "prompt": "ben's words", "chosen": "c", "rejected": "d", "p_chosen": 0.3, "rater": "r-ben"},
        {"pair_id": "p3", "prompt": "nobody's", "chosen": "e", "rejected": "f", "p_chosen": 0.1},  # built before
    ]
    pd.DataFrame([{"cluster": 0, "name": "c", "size": 3, "examples": examples}]).to_parquet(
        folder / "clusters.parquet"
    )
    view = DashboardData(data)
    [everyone] = view.drift()["clusters"]
    [ana] = view.drift(rater="r-ana")["clusters"]
    assert [e["prompt"] for e in everyone["examples"]] == ["ana's words", "ben's words", "nobody's"]
    assert [e["prompt"] for e in ana["examples"]] == ["ana's words"] and ana["examples_hidden"] == 2
    assert ana["size"] == everyone["size"] == 3
