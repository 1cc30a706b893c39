import math

import pandas as pd

from hominem_pipeline.core.teacher.labeling import (
    validate_labels,
    verifier_verdict,
    verify_labels,
)

DIMS = ["empathy"]


def row(tid, response="fine", empathy=0.5, scalar=0.1):
    return {
        "trajectory_id": tid,
        "prompt_id": "p",
        "vector": {"empathy": empathy},
        "scalar": scalar,
        "reward_intensity": 0.5,
        "safety_score": 0.9,
        "rationale": "ok",
        "prompt": "hi",
        "response": response,
    }


def test_verifier_keeps_good_rows_and_quarantines_the_rest_with_reasons():
    labels = pd.DataFrame(
        [row("a"), row("b", empathy=1.7), row("c", response="  "), row("a"), row("d", scalar=math.inf)]
    )
    kept, quarantine = verify_labels(labels, DIMS)
    assert list(kept.trajectory_id) == ["a"]
    assert dict(zip(quarantine.trajectory_id, quarantine.check)) == {
        "b": "schema",
        "c": "empty_response",
        "a": "duplicate_trajectory",
        "d": "schema",
    }
    assert "vector.empathy: 1.7000 outside [-1.0, 1.0]" in quarantine.set_index("trajectory_id").loc["b", "reason"]
    assert "scalar: not finite (inf)" in quarantine.set_index("trajectory_id").loc["d", "reason"]


def test_verdict_and_report_use_the_configured_failure_rate():
    assert verifier_verdict(95, 5, 0.05) == (True, "5/100 rows quarantined (5.0% without a label; allowed 5.0%)")
    assert verifier_verdict(94, 6, 0.05)[0] is False
    # labels whose rating calls failed for good count too: none quarantined, but 10 of 105 have no label
    assert verifier_verdict(95, 0, 0.05, missing=10) == (
        False,
        "0/105 rows quarantined, 10 missing (their rating calls failed) (9.5% without a label; allowed 5.0%)",
    )
    assert verifier_verdict(0, 0, 0.05) == (False, "no label passed the verifier (0 quarantined)")

    kept = pd.DataFrame([row("a"), row("b")])
    quarantine = pd.DataFrame(
        [{"trajectory_id": "c", "check": "empty_response", "reason": "empty response", "row": "{}"}]
    )
    report = validate_labels(kept, DIMS, quarantine=quarantine)
    assert report.quarantined["empty_response"] == 1 and report.failure_rate == 1 / 3
    assert report.ok(0.5) and not report.ok(0.2)
    tampered = validate_labels(pd.DataFrame([row("a", empathy=2.0)]), DIMS)
    assert not tampered.ok(1.0)  # a bad stored row always fails, whatever the rate


def test_word_salad_and_one_word_over_and_over_are_flagged_kept_and_never_chosen():
    """verifier.min_reply_logp: a candidate the student finds unlikely token by token (word salad), or one
    with no words or one word repeated, is a warning (kept: it can still be a pair's rejected reply) and
    a pair that would choose it is dropped."""
    from hominem_pipeline.core.builds.preference_pairs import without_degenerate_chosen
    from hominem_pipeline.core.teacher.labeling import DEGENERATE, degenerate_rows

    labels = pd.DataFrame(
        [
            row("ok", "Take a breath; what happened?") | {"reply_logp": -1.3},
            row("salad", "Serflasfivirril comparison chart WHO SOUL Altshapei") | {"reply_logp": -8.1},
            row("emoji", "🙂🙂🙂 🎉🎉") | {"reply_logp": -2.0},
            row("again", "no no no no no no no no") | {"reply_logp": -0.4},
        ]
    )
    flagged = degenerate_rows(labels, -4.0)
    assert (
        set(flagged) == {"salad", "emoji", "again"}
        and "-8.10 nats per token" in flagged["salad"]
        and "only symbols" in flagged["emoji"]
    )
    assert degenerate_rows(labels, None) == {} and set(degenerate_rows(labels.drop(columns="reply_logp"), -4.0)) == {
        "emoji",
        "again",
    }
    report = validate_labels(labels, DIMS, min_reply_logp=-4.0)
    assert report.warnings[DEGENERATE] == 3 and report.failed_rows == 0 and report.ok(0.0)  # a warning, not a failure
    pairs = pd.DataFrame(
        {"chosen_trajectory_id": ["ok", "salad", "ok"], "rejected_trajectory_id": ["salad", "ok", "again"]}
    )
    kept, dropped = without_degenerate_chosen(pairs, labels, -4.0)
    assert (
        dropped == 1
        and list(kept["chosen_trajectory_id"]) == ["ok", "ok"]
        and list(kept["rejected_trajectory_id"]) == ["salad", "again"]
    )
    assert without_degenerate_chosen(pairs, labels, None) == (pairs, 0)
