"""The attunement loop's parts: drift statistics against hand-computed cases, preference drift naming
the dimension that moved, the error clusters naming a planted cluster and following it, and the
selection of the next question."""

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from hominem_pipeline.core.attune import clusters, drift, selection, stats
from hominem_pipeline.core.config.loader import load_config

DIMS = ["empathy", "honesty"]


def test_psi_by_hand():
    reference = np.array([1, 2, 3, 4], dtype=float)  # 2 bins split at the median 2.5: 2 and 2
    recent = np.array([1, 1, 1, 4], dtype=float)  # 3 below, 1 above
    expected = (0.75 - 0.5) * math.log(0.75 / 0.5) + (0.25 - 0.5) * math.log(0.25 / 0.5)
    assert stats.psi(reference, recent, bins=2) == pytest.approx(expected)
    assert stats.psi(reference, reference, bins=2) == 0.0


def test_ks_and_wasserstein_by_hand():
    a, b = np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    assert stats.ks(a, b).statistic == pytest.approx(1 / 3)  # the CDFs differ by a third between 0 and 3
    assert stats.wasserstein(a, b) == pytest.approx(1.0)  # every point moved by one
    assert stats.ks(a, a).p_value == pytest.approx(1.0)
    far = stats.ks(np.arange(50.0), np.arange(50.0) + 100)
    assert far.statistic == 1.0 and far.p_value < 1e-10


def test_two_proportions_by_hand():
    s = stats.proportion_shift(30, 60, 15, 60)  # 50% -> 25%
    pooled = 45 / 120
    assert s.shift == pytest.approx(-0.25)
    assert s.z == pytest.approx(-0.25 / math.sqrt(pooled * (1 - pooled) * (2 / 60)))
    with pytest.raises(ValueError, match="both windows non-empty"):
        stats.proportion_shift(1, 0, 1, 2)


def _pred(n, rng, empathy_first=0.8, shorter=0.5, day="2026-11-01", rater="r1"):
    """People's choices whose chosen reply is higher on empathy `empathy_first` of the time, shorter `shorter` of
    the time."""
    emp = np.where(rng.random(n) < empathy_first, 1.0, -1.0) * rng.uniform(0.1, 1, n)
    hon = rng.normal(0, 1, n)
    short = rng.random(n) < shorter
    return pd.DataFrame(
        {
            "pair_id": [f"{day}-{i}" for i in range(n)],
            "day": day,
            "rater": rater,
            "gap_empathy": emp,
            "gap_honesty": hon,
            "chosen_words": np.where(short, 10, 30),
            "rejected_words": np.where(short, 30, 10),
            "correct": emp > 0,
        }
    )


def test_preference_drift_names_the_dimension_and_the_direction():
    cfg = load_config().attunement.drift
    rng = np.random.default_rng(0)
    before, after = _pred(200, rng), _pred(60, rng, empathy_first=0.3, shorter=0.9)
    found = {d["dimension"]: d for d in drift.preference_drift(before, after, DIMS, cfg) if d["scope"] == "all"}
    assert (
        found["empathy"]["drifted"]
        and found["empathy"]["direction"] == "down"
        and "empathy counts less for them" in found["empathy"]["says"]
    )
    assert found["length"]["drifted"] and "shorter" in found["length"]["says"]
    assert not found["honesty"]["drifted"]
    assert {d["scope"] for d in drift.preference_drift(before, after, DIMS, cfg)} == {"all"}  # one rater is the whole
    two = drift.preference_drift(
        pd.concat([before, _pred(200, rng, rater="r2")]), pd.concat([after, _pred(60, rng, rater="r2")]), DIMS, cfg
    )
    by_scope = {(d["scope"], d["dimension"]): d["drifted"] for d in two}
    assert by_scope[("r1", "length")] and not by_scope[("r2", "length")]  # per rater: only r1's taste turned
    domains = drift.preference_drift(
        pd.concat([before.assign(domain="a"), _pred(200, rng).assign(domain="b")]),
        pd.concat([after.assign(domain="a"), _pred(60, rng).assign(domain="b")]),
        DIMS,
        cfg,
    )
    by_domain = {(d["scope"], d["dimension"]): d["drifted"] for d in domains}
    assert by_domain[("domain a", "length")] and not by_domain[("domain b", "length")]  # per domain too

    # the model's agreement falls before any one dimension's share passes the thresholds: the ones that moved most are
    # named
    def exact(
        n, empathy, correct
    ):  # shares exactly: empathy's and the model's as given, honesty's and the length's one half
        i = np.arange(n)
        return pd.DataFrame(
            {
                "gap_empathy": np.where(i < empathy * n, 1.0, -1.0),
                "gap_honesty": np.where(i % 2 == 0, 1.0, -1.0),
                "chosen_words": np.where(i % 2 == 1, 10, 30),
                "rejected_words": 20,
                "correct": i < correct * n,
                "rater": "r1",
            }
        )

    alone = {
        d["dimension"]: d for d in drift.preference_drift(exact(200, 0.8, 0.85), exact(60, 0.7, 1 / 3), DIMS, cfg)
    }
    assert alone["scalar"]["drifted"] and not any(alone[d]["drifted"] for d in (*DIMS, "length"))
    assert alone["scalar"]["suspects"][0] == "empathy down" and "moved most: empathy (" in alone["scalar"]["says"]
    same = drift.preference_drift(before, _pred(60, rng), DIMS, cfg)
    assert not any(d["drifted"] for d in same)
    assert drift.preference_drift(before.head(5), after, DIMS, cfg) == []  # too few choices: not tested


def test_served_drift_needs_a_real_and_large_shift():
    cfg = load_config().attunement.drift
    rng = np.random.default_rng(1)
    ref = rng.normal(0, 1, (300, 2))
    moved = np.column_stack([rng.normal(-1.0, 1, 100), rng.normal(0, 1, 100)])
    out = {d["dimension"]: d for d in drift.served_drift(ref, moved, DIMS, cfg)}
    assert (
        out["empathy"]["drifted"] and out["empathy"]["direction"] == "down" and out["empathy"]["wasserstein_sd"] > 0.5
    )
    assert not out["honesty"]["drifted"]
    assert drift.served_drift(ref, moved[:5], DIMS, cfg) == []


def test_the_windows_end_on_the_day_and_the_reference_comes_before():
    reference, recent = drift.windows("2026-11-20", 3, 4)
    assert recent == ["2026-11-18", "2026-11-19", "2026-11-20"] and reference == [
        "2026-11-14",
        "2026-11-15",
        "2026-11-16",
        "2026-11-17",
    ]


def _errors(rng):
    """Twelve planted errors about taxes where the person chose the shorter reply and empathy sided with the
    rejected one, among twelve mixed ones about other things."""
    rows = []
    asks = [
        "How do I file my tax return?",
        "Is my tax refund late?",
        "What tax form do freelancers use?",
        "Can I deduct my tax adviser?",
    ]
    for i in range(12):
        rows.append(
            {
                "prompt": asks[i % 4] + f" ({['quick', 'urgent', 'simple'][i % 3]} one)",
                "domain": "information_seeking",
                "tag": None,
                "category": None,
                "chosen": "Use the form.",
                "rejected": "Let me walk you through every step of the tax form in detail " * 2,
                "chosen_words": 3,
                "rejected_words": 24,
                "gap_empathy": -1 - rng.random(),
                "gap_honesty": rng.normal(0, 0.1),
            }
        )
    topics = ["my dog", "a poem", "the moon", "chess", "a recipe", "my sister"]
    for i in range(12):
        rows.append(
            {
                "prompt": f"Tell me about {topics[i % 6]} please",
                "domain": "creative",
                "tag": "hh",
                "category": None,
                "chosen": "x " * 12,
                "rejected": "y " * 10,
                "chosen_words": 12,
                "rejected_words": 10,
                "gap_empathy": rng.normal(0.5, 0.2),
                "gap_honesty": -1 - rng.random(),
            }
        )
    frame = pd.DataFrame(rows)
    return frame.assign(
        pair_id=[f"p{i}" for i in range(len(frame))], gap=-rng.random(len(frame)), p_chosen=0.3, correct=False
    )


def test_the_error_clusters_name_a_planted_cluster_and_follow_it():
    cfg = load_config().attunement.clusters
    rng = np.random.default_rng(2)
    errors = _errors(rng)
    scale = {"empathy": 1.0, "honesty": 1.0, "length": 10.0}
    found, labels = clusters.cluster_errors(errors, DIMS, scale, None, cfg, seed=0)
    taxes = found[found["terms"].map(lambda t: "tax" in t)]
    assert len(taxes) == 1, found["name"].tolist()
    planted = taxes.iloc[0]
    assert planted["size"] == 12 and set(labels[:12]) == {planted["cluster"]}
    assert "chosen 21 words shorter" in planted["name"] and "empathy sided with the rejected reply" in planted["name"]
    assert planted["domain"] == "information_seeking" and len(planted["examples"]) == cfg.examples
    today = clusters.follow(found, None, "2026-11-02", cfg.match_similarity)
    assert set(today["status"]) == {"new"}
    grown, _ = clusters.cluster_errors(
        pd.concat([errors, errors.head(6).assign(pair_id=lambda f: f["pair_id"] + "b")]),
        DIMS,
        scale,
        None,
        cfg,
        seed=0,
    )
    followed = clusters.follow(grown, today, "2026-11-03", cfg.match_similarity)
    tax_row = followed[followed["terms"].map(lambda t: "tax" in t)].iloc[0]
    assert (
        tax_row["status"] == "grew"
        and tax_row["previous_size"] == 12
        and tax_row["cluster"] == today.loc[taxes.index[0], "cluster"]
    )
    gone = clusters.follow(found.iloc[0:0], today, "2026-11-03", cfg.match_similarity)
    assert set(gone["status"]) == {"closed"} and (gone["size"] == 0).all()
    few, _ = clusters.cluster_errors(errors.head(cfg.min_errors - 1), DIMS, scale, None, cfg, seed=0)
    assert few.empty


def test_the_selection_prefers_the_uncertain_pair_and_keeps_the_random_share():
    weights = SimpleNamespace(uncertainty=1.0, disagreement=1.0, cluster=0.5, novelty=0.5)
    p_a = np.array([0.97, 0.52, 0.1])
    gap = np.array([2.0, 0.05, -1.5])
    info = selection.information(p_a, gap, np.array([0.1, 0.1, 0.1]), weights)
    assert info["value"].idxmax() == 1 and info.loc[1, "disagreement"] > 0.5 > info.loc[0, "disagreement"]
    sure = selection.pick(info, 0.0, np.random.default_rng(0), p_a)
    assert sure.index == 1 and sure.by == "information" and "unsure" in sure.reason and "0.52" in sure.reason
    rng = np.random.default_rng(3)
    picks = [selection.pick(info, 0.25, rng, p_a) for _ in range(2000)]
    random_share = np.mean([p.by == "random" for p in picks])
    assert 0.22 < random_share < 0.28 and all(p.index == 1 for p in picks if p.by == "information")
    assert {p.index for p in picks if p.by == "random"} == {0, 1, 2} and "unbiased sample" in next(
        p.reason for p in picks if p.by == "random"
    )
    novel = selection.information(
        np.array([0.6, 0.6]), np.array([0.3, 0.3]), np.zeros(2), weights, novelty=np.array([0.0, 0.9])
    )
    assert (
        novel["value"].idxmax() == 1
        and "unlike anything" in selection.pick(novel, 0.0, rng, np.array([0.6, 0.6])).reason
    )
    with pytest.raises(ValueError, match="question pool is empty"):
        selection.pick(info.iloc[0:0], 0.2, rng)


def test_questions_hide_which_reply_was_chosen_and_read_transcripts_as_messages(tmp_path):
    from hominem_pipeline.core.attune import questions

    q1 = questions.make("Hi?", "Hello there.", "Go away.", "file:x")
    q2 = questions.make("Hi?", "Go away.", "Hello there.", "file:y")
    assert (
        (q1.id, q1.a, q1.b) == (q2.id, q2.a, q2.b) and q1.id.startswith("q") and len(q1.id) == 17
    )  # the order never says which was chosen
    transcript = "\n\nHuman: My cat is sick.\n\nAssistant: I'm sorry. How old is she?\n\nHuman: Twelve.\n\nAssistant:"
    q = questions.make(transcript, "Take her to a vet.", "Cats are fine.", "hh")
    assert q.messages == (
        ("user", "My cat is sick."),
        ("assistant", "I'm sorry. How old is she?"),
        ("user", "Twelve."),
    )
    assert q.prompt == transcript  # as the pair's prompt reads back from the log
    # an imported transcript with stray spaces: written to a question file and read back, it keeps its id
    spaced = "\n\nHuman: My cat is sick. \n\nAssistant:  I'm sorry. How old is she?\n\nHuman: Twelve.\n\nAssistant:"
    written, _ = questions.write_question_file(
        pd.DataFrame({"prompt": [spaced], "chosen": ["Take her to a vet."], "rejected": ["Cats are fine."]}),
        tmp_path,
        "file:hh",
    )
    [back] = questions.read_question_file(written)
    assert back.id == questions.make(spaced, "Cats are fine.", "Take her to a vet.", "hh").id == q.id
    frame = pd.DataFrame(
        {
            "prompt_id": ["p1"] * 3 + ["p2"] * 2,
            "prompt": ["A?"] * 3 + ["B?"] * 2,
            "response": ["x", "y", "z", "u", "v"],
        }
    )
    assert len(questions.from_candidates(frame, "teacher:2026-11-20")) == 3 + 1


def test_choose_asks_the_unsure_pair_first_and_never_an_answered_one():
    from hominem_pipeline.core.attune import questions

    pool = [questions.make(f"Question {i}?", f"yes {i}", f"no {i}", "file:x") for i in range(3)]
    p = {pool[0].id: 0.95, pool[1].id: 0.5, pool[2].id: 0.1}

    def score(qs):  # the calibrated P(A) of each question, as the served reward model would give it
        pa = np.array([p[q.id] for q in qs])
        return {
            "p_a": pa,
            "gap": np.log(pa / (1 - pa)),
            "spread": np.zeros(len(qs)),
            "a": [None] * len(qs),
            "b": [None] * len(qs),
        }

    cfg = SimpleNamespace(
        pool_sample=10,
        random_share=0.0,
        weights=SimpleNamespace(uncertainty=1.0, disagreement=1.0, cluster=0.5, novelty=0.5),
    )
    rng = np.random.default_rng(0)
    first, pick, _ = questions.choose(pool, set(), [], score, [], cfg, rng)
    assert first.id == pool[1].id and pick.by == "information" and "P(A) = 0.50" in pick.reason
    second, _, _ = questions.choose(pool, {pool[1].id}, [first.prompt], score, [], cfg, rng)
    assert second.id != pool[1].id
    assert questions.choose(pool, {q.id for q in pool}, [], score, [], cfg, rng) is None
    growing = [{"name": "tax forms", "terms": ["question", "2"]}]
    _, pick, _ = questions.choose(pool, {pool[1].id}, [], score, growing, cfg, rng)
    assert pick.parts["cluster"] in (0.0, 0.5, 1.0)
    blind, pick, _ = questions.choose(
        pool, set(), [], None, [], cfg, rng
    )  # no reward model served: at random, and it says so
    assert pick.by == "random" and "no reward model" in pick.reason


def test_an_answer_to_an_asked_question_weighs_more_by_its_expected_information_when_boosted():
    from hominem_pipeline.core.builds.reward_model import boosted
    from hominem_pipeline.core.online.events import context_digest
    from hominem_pipeline.core.online.feedback import feedback_tables

    messages = [{"role": "user", "content": "My cat is sick."}]
    turn = {
        "kind": "turn",
        "time": "2026-11-20T09:00:00+00:00",
        "rater": "ana",
        "messages": messages,
        "finish_reason": "stop",
        "completion_tokens": 0,
        "context": context_digest(messages),
        "adapter": None,
    }
    asked = {
        "model": "question",
        "sampling": {
            "question": "q0123456789abcdef",
            "by": "information",
            "value": 0.8,
            "reason": "asked because ...",
        },
    }
    events = [
        turn | asked | {"id": "q0123456789abcdef-a", "reply": "Call a vet."},
        turn | asked | {"id": "q0123456789abcdef-b", "reply": "Cats are fine."},
        turn | {"id": "t1", "model": "hominem", "sampling": {}, "reply": "Poor cat."},
        turn | {"id": "t2", "model": "hominem", "sampling": {}, "reply": "Eh."},
        {
            "kind": "choice",
            "id": "c1",
            "time": "2026-11-20T09:01:00+00:00",
            "rater": "ana",
            "chosen": "q0123456789abcdef-a",
            "rejected": "q0123456789abcdef-b",
            "strength": "clear",
        },
        {
            "kind": "choice",
            "id": "c2",
            "time": "2026-11-20T09:02:00+00:00",
            "rater": "ana",
            "chosen": "t1",
            "rejected": "t2",
            "strength": "clear",
        },
    ]
    pairs = feedback_tables(events).pairs.set_index("pair_id")
    assert pairs.loc["c1", "asked_value"] == 0.8 and pd.isna(pairs.loc["c2", "asked_value"])
    weighed = boosted(pairs.reset_index(), 1.0).set_index("pair_id")["weight"]
    assert weighed["c1"] == pytest.approx(1.8) and weighed["c2"] == 1.0  # a chat choice as given
    assert boosted(pairs.reset_index(), 0.0)["weight"].tolist() == [1.0, 1.0]
    # asked of another person later: their choice records how it was picked for them, over the turns' first asker's
    ben = events[4] | {"id": "c3", "rater": "ben", "asked": {"by": "random", "value": 0.3}}
    pairs = feedback_tables([*events, ben]).pairs.set_index("pair_id")
    assert pairs.loc["c1", "asked_by"] == "information" and pairs.loc["c1", "asked_value"] == 0.8
    assert pairs.loc["c3", "asked_by"] == "random" and pairs.loc["c3", "asked_value"] == 0.3
