"""The service follows the live pointer over real HTTP: a promotion written by another process is
hot-swapped in while clients chat (none fails), an adapter that cannot serve is refused with the old
one still answering, and the admin endpoints roll back and freeze, audited."""

from __future__ import annotations

import json
import threading
import time

import httpx2 as httpx

from hominem_pipeline_tests.serving.conftest import make_adapter, start, stop


def served_adapter(url: str) -> str | None:
    return next(m["adapter"] for m in httpx.get(f"{url}/v1/models", timeout=30).json()["data"] if m["id"] == "hominem")


def wait_for(url: str, label: str | None, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if served_adapter(url) == label:
            return
        time.sleep(0.2)
    raise AssertionError(f"the service still serves {served_adapter(url)!r}, not {label!r}")


def test_the_service_hot_swaps_to_what_the_pointer_names(tmp_path, tiny_student, tiny_encoder):
    import torch
    from safetensors.torch import load_file, save_file

    from hominem_pipeline.core.lm.models import load_student
    from hominem_pipeline.core.online.live import LiveState
    from hominem_pipeline.core.policy.lora import base_checksum
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path / "project", tiny_student, tiny_encoder)
    data = project / "data"
    checksum = base_checksum(load_student(tiny_student)[0])
    folders = {}
    for name in ("first", "second", "broken"):
        folder = make_adapter(tiny_student, data / "lora_adapter" / "2026-11-25" / name)
        (folder / "METADATA.json").write_text(json.dumps({"base_checksum": checksum}))
        folders[name] = folder
    weights = folders["broken"] / "adapter_model.safetensors"
    save_file({k: torch.full_like(v, float("nan")) for k, v in load_file(str(weights)).items()}, str(weights))
    state = LiveState(data)
    state.promote("first", folders["first"], None, gate={"passed": True}, reason="test", by="test")

    server = start(
        project,
        "--reward-model",
        "none",
        "--set",
        "serving.max_new_tokens=16",
        "--set",
        "serving.live_poll_seconds=0.2",
    )
    try:
        url = server.url
        assert served_adapter(url) == "lora_adapter/2026-11-25/first"  # serving.adapter: live (the default)
        failures, replies, stop_chat = [], [], threading.Event()

        def client() -> None:
            with httpx.Client(timeout=120) as http:
                while not stop_chat.is_set():
                    r = http.post(
                        f"{url}/v1/chat/completions",
                        json={"model": "hominem", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
                    )
                    (replies if r.status_code == 200 else failures).append(r)

        clients = [threading.Thread(target=client) for _ in range(4)]
        for c in clients:
            c.start()
        time.sleep(1.0)
        state.promote("second", folders["second"], None, gate={"passed": True}, reason="test", by="another process")
        wait_for(url, "lora_adapter/2026-11-25/second")
        deadline = time.monotonic() + 120  # the clients go on until a reply from the new adapter is logged
        while time.monotonic() < deadline and not any(
            e.get("adapter") == "lora_adapter/2026-11-25/second" for e in server.events()
        ):
            time.sleep(0.2)
        stop_chat.set()
        for c in clients:
            c.join()
        assert not failures and len(replies) >= 8  # clients chatted through the swap
        turns = [e for e in server.events() if e["kind"] == "turn"]
        assert {t["adapter"] for t in turns} == {
            "lora_adapter/2026-11-25/first",
            "lora_adapter/2026-11-25/second",
        }  # each turn names its own

        state.promote("broken", folders["broken"], None, gate={"passed": True}, reason="bypassing the gate", by="test")
        time.sleep(2.0)
        assert served_adapter(url) == "lora_adapter/2026-11-25/second"  # refused: the old one keeps answering
        ok = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "hominem", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=60,
        )
        assert ok.status_code == 200

        rolled = httpx.post(f"{url}/admin/live/rollback", json={"version": "first", "reason": "back"}, timeout=60)
        assert rolled.status_code == 200 and rolled.json() == {
            "live": "first",
            "serving": "lora_adapter/2026-11-25/first",
        }
        assert (
            httpx.post(f"{url}/admin/live/freeze", json={"reason": "hold"}, timeout=60).json()["frozen"]["reason"]
            == "hold"
        )
        refused = httpx.post(f"{url}/admin/live/promote", json={"version": "second"}, timeout=60)
        assert refused.status_code == 409 and "frozen" in refused.json()["error"]["message"]
        status = httpx.get(f"{url}/admin/live", timeout=30).json()
        assert (
            status["live"]["version"] == "first"
            and status["serving"] == "lora_adapter/2026-11-25/first"
            and status["live"]["frozen"]
        )
        based = httpx.post(
            f"{url}/admin/live/rollback", json={"version": "base", "reason": "the base alone"}, timeout=60
        )
        assert (
            based.json() == {"live": "base", "serving": None} and served_adapter(url) is None
        )  # back to the base: followed too
        audit = [json.loads(line) for line in (data / "online" / "audit.jsonl").read_text().splitlines()]
        actions = [a["action"] for a in audit]
        assert {
            "live_swap",
            "live_swap_refused",
            "live_rollback",
            "live_freeze",
            "live_promote",
            "live_promote_refused",
        } <= set(actions)
        refusal = next(a for a in audit if a["action"] == "live_swap_refused")
        assert refusal["version"] == "broken" and "NaN" in refusal["reason"] and refusal["serving"] == "second"
    finally:
        stop(server.proc)
