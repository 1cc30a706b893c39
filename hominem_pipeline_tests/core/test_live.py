"""The live pointer (core/online/live.py): promotions, rollbacks, freezes, crash safety, and the refusal
of adapters that could not serve."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hominem_pipeline.core.online.live import BadAdapter, LiveError, LiveState, check_adapter, find_adapter


def adapters(data: Path, *versions: str) -> dict[str, Path]:
    out = {}
    for v in versions:
        folder = data / "lora_adapter" / "2026-11-25" / v
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
        out[v] = folder
    return out


def test_promotions_and_rollbacks_replay_as_a_stack(tmp_path):
    a = adapters(tmp_path, "aaa", "bbb", "ccc")
    state = LiveState(tmp_path)
    assert state.current().is_base and state.history() == []
    for v in ("aaa", "bbb", "ccc"):
        live = state.promote(v, a[v], None, gate={"passed": True, "rhi": 0.8}, reason="daily", by="test")
    assert (
        live.version == "ccc"
        and json.loads((tmp_path / "live" / "current.json").read_text())["adapter"] == "lora_adapter/2026-11-25/ccc"
    )
    assert state.adapter_path() == a["ccc"]
    assert state.rollback(reason="worse", by="test").version == "bbb"
    assert (
        state.rollback(reason="still worse", by="test").version == "aaa"
    )  # a second rollback goes further back, not forward
    assert state.rollback("ccc", reason="it was fine", by="test").version == "ccc"
    assert state.rollback("base", reason="start over", by="test").is_base
    with pytest.raises(LiveError, match="nothing to roll back"):
        state.rollback(reason="again", by="test")
    with pytest.raises(LiveError, match="ddd was never live"):
        state.rollback("ddd", reason="?", by="test")
    actions = [e["action"] for e in state.history()]
    assert actions == ["promote"] * 3 + ["rollback"] * 4
    assert state.history()[0]["gate"] == {"passed": True, "rhi": 0.8} and state.history()[3]["previous"] == "ccc"


def test_a_refused_adapter_stays_a_candidate_with_its_reason(tmp_path):
    a = adapters(tmp_path, "aaa", "bbb")
    state = LiveState(tmp_path)
    state.refuse(
        "bbb",
        a["bbb"],
        None,
        gate={"passed": False, "win_rate_vs_live": float("nan")},
        reason="win rate 20% below 50%",
        by="test",
    )
    assert state.current().is_base
    (candidate,) = state.candidates()
    assert (
        candidate["version"] == "bbb"
        and candidate["reason"] == "win rate 20% below 50%"
        and candidate["gate"]["win_rate_vs_live"] is None
    )
    state.promote("bbb", a["bbb"], None, gate={}, reason="better after all", by="test")
    assert state.candidates() == []


def test_freeze_stops_promotions_but_not_rollbacks(tmp_path):
    a = adapters(tmp_path, "aaa", "bbb")
    state = LiveState(tmp_path)
    state.promote("aaa", a["aaa"], None, gate={}, reason="", by="test")
    state.promote("bbb", a["bbb"], None, gate={}, reason="", by="test")
    state.freeze(reason="partial RHI 0.15", by="scheduler")
    with pytest.raises(LiveError, match=r"frozen since .* \(partial RHI 0.15\)"):
        state.promote("aaa", a["aaa"], None, gate={}, reason="", by="test")
    live = state.rollback(reason="undo the bad update", by="test")
    assert live.version == "aaa" and live.frozen["reason"] == "partial RHI 0.15"  # still frozen after the rollback
    assert state.unfreeze(by="test").frozen is None
    state.note("warmer, but forgets my name", by="test")
    assert state.history()[-1] == {
        **state.history()[-1],
        "action": "note",
        "note": "warmer, but forgets my name",
        "version": "aaa",
    }
    with pytest.raises(LiveError, match="empty note"):
        state.note("  ", by="test")


def test_find_adapter_names_both_places_and_says_where_it_looked(tmp_path):
    a = adapters(tmp_path, "aaa")
    online = tmp_path / "live" / "adapters" / "u1"
    online.mkdir(parents=True)
    assert find_adapter(tmp_path, "aaa") == a["aaa"] and find_adapter(tmp_path, "u1") == online
    with pytest.raises(LiveError, match="no adapter 'zzz'"):
        find_adapter(tmp_path, "zzz")


WRITER = """
import sys
from pathlib import Path
from hominem_pipeline.core.online.live import LiveState
data, run = Path(sys.argv[1]), int(sys.argv[2])
state = LiveState(data)
i = 0
while True:
    v = "bbb" if state.current().version == "aaa" else "aaa"
    folder = data / "lora_adapter" / "2026-11-25" / v
    state.promote(v, folder, None, gate={"run": run, "i": i}, reason="loop", by="writer")
    i += 1
"""


def test_kill_9_during_promotions_leaves_a_whole_pointer(tmp_path):
    """A writer promoting in a loop is killed with SIGKILL at arbitrary moments: current.json always
    parses and names a whole adapter folder, and the next change restores any history entry the kill lost."""
    a = adapters(tmp_path, "aaa", "bbb")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    for run in range(8):
        proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), str(run)], start_new_session=True)
        time.sleep(1.0 + 0.07 * run)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        state = LiveState(tmp_path)
        live = state.current()
        assert live.version in a and state.adapter_path(live) == a[live.version]
        state.note(f"after kill {run}", by="test")  # a change under the lock: restores the entry a kill may have lost
        history = state.history()
        assert history[-1]["note"] == f"after kill {run}" and not list(
            (tmp_path / "live").glob(".*.tmp")
        )  # torn temp files swept
        changes = [e for e in history if e["action"] == "promote"]
        assert (
            changes[-1]["version"] == live.version and changes[-1]["gate"] == live.change["gate"]
        )  # the history agrees with the pointer
        steps = [e["gate"]["i"] for e in changes if e["gate"]["run"] == run]
        assert steps and steps == list(range(len(steps)))  # this run's promotions: none missing, none twice
    assert sum(e["action"] == "promote" for e in state.history()) > 16


def test_check_adapter_refuses_damaged_or_foreign_adapters(tmp_path, tiny_student):
    import torch
    from safetensors.torch import load_file, save_file

    from hominem_pipeline_tests.serving.conftest import make_adapter

    good = make_adapter(tiny_student, tmp_path / "good")
    (good / "METADATA.json").write_text(json.dumps({"base_checksum": "abc123"}))
    assert check_adapter(good, "abc123")["base_checksum"] == "abc123"
    with pytest.raises(BadAdapter, match="trained on another base"):
        check_adapter(good, "fff999")

    weights = good / "adapter_model.safetensors"
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    for f in good.iterdir():
        (truncated / f.name).write_bytes(f.read_bytes())
    (truncated / weights.name).write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(BadAdapter, match="unreadable"):
        check_adapter(truncated)

    nan = tmp_path / "nan"
    nan.mkdir()
    for f in good.iterdir():
        (nan / f.name).write_bytes(f.read_bytes())
    tensors = load_file(str(weights))
    first = sorted(tensors)[0]
    tensors[first] = torch.full_like(tensors[first], float("nan"))
    save_file(tensors, str(nan / weights.name))
    with pytest.raises(BadAdapter, match="NaN or infinite"):
        check_adapter(nan)

    (tmp_path / "empty").mkdir()
    with pytest.raises(BadAdapter, match="adapter_config.json"):
        check_adapter(tmp_path / "empty")


def test_the_service_serves_what_the_pointer_names(tmp_path, tiny_cfg):
    """serving.adapter `live` (the default): the base until an adapter is promoted, then that adapter;
    a live folder that has gone is an error naming the fix, not a silent fall back to the base."""
    import shutil

    from hominem_pipeline.serving.server import ServeError, resolve_adapter

    assert tiny_cfg.serving.adapter == "live" and resolve_adapter(tiny_cfg, "live") is None
    a = adapters(tiny_cfg.data_dir, "aaa")
    LiveState(tiny_cfg.data_dir).promote("aaa", a["aaa"], None, gate={}, reason="test", by="test")
    assert resolve_adapter(tiny_cfg, "live") == a["aaa"]
    shutil.rmtree(a["aaa"])
    with pytest.raises(ServeError, match="hominem live rollback"):
        resolve_adapter(tiny_cfg, "live")


def test_one_online_update_at_a_time_and_a_killed_one_leaves_nothing_behind(tiny_cfg):
    """One update at a time, never beside the daily run's training (each skipped with why), and a temp folder an
    update killed mid-training left is removed by the next."""
    from filelock import FileLock

    from hominem_pipeline.core.common.locks import TrainingBusy, training
    from hominem_pipeline.core.online.updates import run_update

    folder = tiny_cfg.data_dir / "live" / "adapters"
    torn = folder / ".online-0123456789ab.feedface.tmp"  # what an update killed mid-training leaves
    torn.mkdir(parents=True)
    with FileLock(str(folder / ".update.lock")):  # another process's update is running
        busy = run_update(tiny_cfg, by="test", reason="second")
    assert busy.outcome == "skipped" and "another online update" in busy.reason and torn.is_dir()
    with training(tiny_cfg.data_dir, "the daily run's lora_adapter 2026-12-06"):  # the daily run trains
        waiting = run_update(tiny_cfg, by="test", reason="beside the daily run")
        with pytest.raises(TrainingBusy, match="the daily run's lora_adapter 2026-12-06 is training"):
            with training(tiny_cfg.data_dir, "another", wait=0.2):
                pass
    assert waiting.outcome == "skipped" and "the daily run's lora_adapter 2026-12-06 is training" in waiting.reason
    assert "the next update tries again" in waiting.reason and torn.is_dir()
    with training(tiny_cfg.data_dir, "free again", wait=0):  # released, its holder's name gone
        assert (tiny_cfg.data_dir / ".training.holder").read_text().strip() == "free again"
    with pytest.raises(
        LiveError, match="no reward model to score people's pairs"
    ):  # nothing built in this project yet
        run_update(tiny_cfg, by="test", reason="first")
    assert not torn.exists()


def test_the_gate_s_reply_cache_keeps_replies_and_scalars_per_decoding_and_reward_model(tmp_path, tiny_cfg):
    """A version's greedy replies hold for one decoding; the reward model's scalars of them for one reward model."""
    from hominem_pipeline.core.online.reply_cache import ReplyCache

    cache = ReplyCache(tmp_path, tiny_cfg)
    cache.put("v1", {"Hi?": "Hello."}, {"Hi?": 0.25}, "/rm/a")
    cache.put("v1", {"Why?": "Because."}, {"Why?": float("nan")}, "/rm/b")  # an empty reply's NaN round-trips
    assert cache.get("v1") == {"Hi?": "Hello.", "Why?": "Because."} and cache.get(None) == {}
    assert (
        cache.scalars("v1", "/rm/a") == {"Hi?": 0.25}
        and cache.scalars("v1", "/rm/c") == {}
        and cache.scalars("v1", None) == {}
    )
    assert set(cache.scalars("v1", "/rm/b")) == {"Why?"}
    other = ReplyCache(
        tmp_path,
        tiny_cfg.model_copy(update={"evaluation": tiny_cfg.evaluation.model_copy(update={"max_new_tokens": 7})}),
    )
    assert other.get("v1") == {} and other.scalars("v1", "/rm/a") == {}  # another decoding: nothing holds
