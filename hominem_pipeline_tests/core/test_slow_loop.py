"""The slow loop's rules on constructed nights and histories, its actions on a real live state, the
settings an adjustment gives a day's adapter, and the people's start cut to a smaller rank."""

import json

import pytest
import torch

from hominem_pipeline.core.config import SlowLoopConfig
from hominem_pipeline.core.online.live import LiveState
from hominem_pipeline.core.online.slow_loop import (
    AdjustedPolicy,
    Adjustment,
    Night,
    act,
    adjusted_rank,
    adjustment,
    decide,
    ladder,
    read_nights,
    status,
)
from hominem_pipeline.core.policy.people_start import truncate_lora

CFG = SlowLoopConfig(
    enabled=True,
    falling_nights=3,
    min_fall=0.005,
    recovery_nights=2,
    steps=["lower_lr", "shrink_rank", "freeze"],
    lr_factor=0.5,
    rank_factor=0.5,
    revert_dip=0.05,
)


def nights(*values, start=1, adapters=None):
    return [Night(f"2026-11-{start + i:02d}", v, (adapters or {}).get(start + i)) for i, v in enumerate(values)]


def step(name, night, **extra):
    return {
        "time": f"{night}T03:00:00+00:00",
        "action": "adjust",
        "slow_loop_step": name,
        "slow_loop_night": night,
        **extra,
    }


def test_three_falling_nights_take_the_first_step_two_do_not_and_a_flat_night_breaks_the_run():
    assert [s.step for s in decide(nights(0.9, 0.85, 0.8, 0.75), [], CFG, None)] == ["lower_lr"]
    assert decide(nights(0.9, 0.85, 0.8), [], CFG, None) == []  # two falls
    assert (
        decide(nights(0.9, 0.85, 0.849, 0.8, 0.75), [], CFG, None) == []
    )  # a move under min_fall is no fall: the run is two
    assert decide(nights(0.9, 0.85, 0.8, None), [], CFG, None) == []  # no RHI tonight: nothing judged


def test_each_further_step_needs_a_new_run_of_falls_and_the_ladder_ends():
    series = nights(0.9, 0.85, 0.8, 0.75, 0.7, 0.65)
    after_one = [step("lower_lr", "2026-11-04")]
    assert decide(series[:5], after_one, CFG, None) == []  # one fall since the step
    assert decide(nights(0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6), after_one, CFG, None)[0].step == "shrink_rank"
    all_three = after_one + [step("shrink_rank", "2026-11-07"), step("freeze", "2026-11-10")]
    assert [e["slow_loop_step"] for e in ladder(all_three)] == ["lower_lr", "shrink_rank", "freeze"]
    assert decide(nights(*[0.9 - 0.05 * i for i in range(14)]), all_three, CFG, None) == []  # nothing left to take


def test_rising_nights_undo_the_last_step_first():
    taken = [step("lower_lr", "2026-11-04"), step("shrink_rank", "2026-11-07")]
    rising = nights(0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.62, 0.64)
    out = decide(rising, taken, CFG, None)
    assert [s.step for s in out] == ["restore_rank"] and "shrink_rank undone" in out[0].reason
    undone = taken + [step("restore_rank", "2026-11-09")]
    assert [e["slow_loop_step"] for e in ladder(undone)] == ["lower_lr"]
    assert decide(rising + nights(0.66, 0.68, start=10), undone, CFG, None)[0].step == "restore_lr"
    assert decide(nights(0.6, 0.62, 0.64), [], CFG, None) == []  # nothing in force: nothing to undo


def test_a_dip_the_night_after_a_promotion_reverts_it_and_nothing_else_does():
    promoted = [{"time": "2026-11-02T03:00:00+00:00", "action": "promote", "version": "ad2"}]
    series = nights(0.8, 0.78, 0.7, adapters={2: "ad2", 3: "ad3"})
    out = decide(series, promoted, CFG, "ad2")
    assert [(s.step, s.version) for s in out] == [("revert", "ad2")] and "dip after consolidation" in out[0].reason
    assert decide(nights(0.8, 0.78, 0.75, adapters={2: "ad2"}), promoted, CFG, "ad2") == []  # a dip within revert_dip
    assert decide(series, promoted, CFG, "ad9") == []  # another adapter is live now
    assert decide(series, [], CFG, "ad2") == []  # it was never promoted (live by another way)
    assert decide(series, promoted, CFG.model_copy(update={"revert_dip": None}), "ad2") == []
    assert (
        decide(series, promoted + [{"action": "rollback", "slow_loop_night": "2026-11-03"}], CFG, "ad2") == []
    )  # judged already


def test_adjustments_apply_from_the_next_day_with_the_factors_they_leave():
    history = [
        step(
            "lower_lr", "2026-11-04", applies_from="2026-11-05", lr_factor=0.5, rank_factor=1.0, in_force=["lower_lr"]
        ),
        step(
            "shrink_rank",
            "2026-11-07",
            applies_from="2026-11-08",
            lr_factor=0.5,
            rank_factor=0.5,
            in_force=["lower_lr", "shrink_rank"],
        ),
        step(
            "restore_rank",
            "2026-11-09",
            applies_from="2026-11-10",
            lr_factor=0.5,
            rank_factor=1.0,
            in_force=["lower_lr"],
        ),
    ]
    assert adjustment(history, "2026-11-04") == Adjustment() and adjustment(history, "2026-11-04").digest() is None
    assert adjustment(history, "2026-11-05") == Adjustment(0.5, 1.0, ("lower_lr",))
    assert adjustment(history, "2026-11-08").digest() == {"lr_factor": 0.5, "rank_factor": 0.5}
    assert adjustment(history, "2026-11-12").steps == ("lower_lr",)


def test_the_adjusted_policy_changes_the_learning_rate_and_rank_and_reads_the_rest_through(tiny_cfg):
    policy = tiny_cfg.policy
    adjusted = AdjustedPolicy(policy, Adjustment(0.5, 0.5, ("lower_lr", "shrink_rank")))
    assert adjusted.learning_rate == policy.learning_rate / 2 and adjusted.max_steps == policy.max_steps
    assert (adjusted.lora.r, adjusted.lora.alpha) == (
        2,
        4.0,
    ) and adjusted.lora.target_modules == policy.lora.target_modules
    dumped = adjusted.model_dump()
    assert (
        dumped["learning_rate"] == adjusted.learning_rate
        and dumped["lora"]["r"] == 2
        and dumped["beta"] == policy.beta
    )
    assert adjusted_rank(1, 2.0, 0.5) == (1, 2.0)  # never below rank 1


def test_act_carries_out_each_step_on_the_live_state_and_spares_a_freeze_by_hand(tmp_path):
    data = tmp_path / "data"
    state = LiveState(data)
    values = [0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5, 0.45, 0.5, 0.55, 0.6]
    done = []
    for night in nights(*values):
        report = act(data, night, CFG, by="test")
        done += [s.step for s in report.steps]
    assert done == ["lower_lr", "shrink_rank", "freeze", "unfreeze"]
    history = state.history()
    assert [e["action"] for e in history] == ["adjust", "adjust", "freeze", "unfreeze"]
    assert history[0]["applies_from"] == "2026-11-05" and history[0]["reason"].startswith(
        "slow loop: the RHI fell 3 nights"
    )
    assert not state.current().frozen and [n.rhi for n in read_nights(data)] == values
    shown = status(data, CFG, "2026-11-14")
    assert (
        shown["in_force"] == ["lower_lr", "shrink_rank"] and shown["rank_factor"] == 0.5 and len(shown["nights"]) == 7
    )
    # a re-run of the last night does nothing more
    assert act(data, nights(0.6, start=13)[0], CFG, by="test").steps == [] and len(state.history()) == 4
    # a freeze someone made by hand is not lifted by recovery
    hand = tmp_path / "hand"
    LiveState(hand).freeze(reason="I am away this week", by="cli:ana")
    for night in nights(0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5, 0.45, 0.5, 0.55):
        act(hand, night, CFG, by="test")
    assert LiveState(hand).current().frozen["reason"] == "I am away this week"
    entries = [e for e in LiveState(hand).history() if e.get("slow_loop_step") in ("freeze", "unfreeze")]
    assert "already frozen" in entries[0]["reason"] and "left frozen" in entries[1]["reason"]


def test_a_disabled_slow_loop_records_the_nights_and_does_nothing(tmp_path):
    off = CFG.model_copy(update={"enabled": False})
    for night in nights(0.9, 0.85, 0.8, 0.75):
        report = act(tmp_path, night, off, by="test")
    assert report.steps == [] and "recorded only" in report.description and len(read_nights(tmp_path)) == 4
    assert json.loads((tmp_path / "live" / "nights.json").read_text())["2026-11-04"]["rhi"] == 0.75


def test_a_step_named_twice_is_refused():
    with pytest.raises(ValueError, match="names a step twice"):
        SlowLoopConfig(**{**CFG.model_dump(), "steps": ["lower_lr", "lower_lr"]})


def test_the_people_s_start_cut_to_a_smaller_rank_keeps_its_strongest_directions():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 24, generator=g), torch.randn(16, 8, generator=g)
    state = {"m.lora_A.weight": a, "m.lora_B.weight": b}
    cut = truncate_lora(state, 4)
    assert cut["m.lora_A.weight"].shape == (4, 24) and cut["m.lora_B.weight"].shape == (16, 4)
    u, s, vh = torch.linalg.svd((b @ a).double())
    best = (u[:, :4] * s[:4]) @ vh[:4]  # Eckart-Young: the best rank-4 approximation
    assert torch.allclose((cut["m.lora_B.weight"] @ cut["m.lora_A.weight"]).double(), best, atol=1e-4)
    whole = truncate_lora(state, 8)
    assert torch.allclose(whole["m.lora_B.weight"] @ whole["m.lora_A.weight"], b @ a, atol=1e-4)


def test_the_factors_in_force_are_part_of_the_daily_adapter_s_version_from_the_day_they_apply(tiny_cfg):
    """A day before the first step keeps its version (a quiet history changes nothing); the day a step
    applies from, the adapter's files digest (so its version) names the factors."""
    from hominem_pipeline.core.pipeline.stages import STAGES_BY_NAME

    files = STAGES_BY_NAME["lora_adapter"].files
    before = {day: files(tiny_cfg, day) for day in ("2026-11-04", "2026-11-05")}
    for night in nights(0.9, 0.85, 0.8, 0.75):
        act(tiny_cfg.data_dir, night, CFG, by="test")
    assert files(tiny_cfg, "2026-11-04") == before["2026-11-04"]
    after = files(tiny_cfg, "2026-11-05")
    assert after != before["2026-11-05"] and after["slow_loop"] == {"lr_factor": 0.5, "rank_factor": 1.0}
