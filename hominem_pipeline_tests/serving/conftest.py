"""Fixtures of the service tests: `hominem serve` started as a user starts it (its own process group,
real HTTP), with a real PEFT adapter and a reward model trained on the tiny models."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from hominem_pipeline.core.online.log import InteractionLog
from hominem_pipeline.testing.service import ServeFailed, start_serve, stop_serve

RATER_TOKEN, ADMIN_TOKEN = "rater-token-0123456789abcdef", "admin-token-0123456789abcdef"


@dataclass
class Served:
    url: str
    project: Path
    proc: subprocess.Popen

    def events(self) -> list[dict]:
        log = InteractionLog(self.project / "data" / "online" / "log")
        return [e for day in log.days() for e in log.read(day)]


def start(project: Path, *args: str, env: dict | None = None) -> Served:
    try:
        proc, url, _ = start_serve(
            ["--config", "config/tiny.yaml", *args],
            project,
            env={"HOMINEM_HOME": str(project), **(env or {})},
            timeout=120,
            stdout=subprocess.PIPE,
        )
    except ServeFailed as exc:
        raise AssertionError(str(exc)) from None
    return Served(url, project, proc)


def stop(proc: subprocess.Popen) -> str:
    return stop_serve(proc)


def make_adapter(student: Path, out: Path) -> Path:
    """A real PEFT adapter with random (not zero) LoRA weights, so its replies differ from the base's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(student),
        LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    model.save_pretrained(out)
    return out


def make_reward_model(encoder: Path, dimensions: list[str], out: Path) -> Path:
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
    from hominem_pipeline_tests.conftest import REPO

    rows = [
        {
            "prompt_id": f"p{i}",
            "prompt": f"Something sad happened, number {i}.",
            "response": reply,
            "vector": {d: value for d in dimensions},
            "scalar": value,
            "reward_intensity": 0.5,
            "safety_score": 0.9,
        }
        for i in range(6)
        for reply, value in [("I am so sorry, that sounds hard. Tell me more?", 0.8), ("Whatever.", -0.8)]
    ]
    cfg = load_config(
        REPO / "config" / "reward" / "encoder.yaml",
        root=REPO,
        overrides={
            "reward_model": {
                "epochs": 2,
                "batch_size": 4,
                "max_length": 48,
                "val_fraction": 0.34,
                "uncertainty": {"method": "none"},
            }
        },
    ).reward_model
    train_reward_model(
        pd.DataFrame(rows),
        dimensions=dimensions,
        sources=RewardSources(encoder),
        cfg=cfg,
        out_dir=out,
        seed=0,
        data_digest="t",
        date="2026-11-25",
    )
    return out


@pytest.fixture(scope="session")
def served(tmp_path_factory, tiny_student, tiny_encoder):
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline_tests.conftest import make_project

    project = make_project(tmp_path_factory.mktemp("serve") / "project", tiny_student, tiny_encoder)
    dims = load_config(project / "config" / "tiny.yaml", root=project).dimension_names
    adapter = make_adapter(tiny_student, project / "adapter")
    reward = make_reward_model(tiny_encoder, dims, project / "reward")
    # replies of 64 tokens at most: the tiny random model seldom stops by itself, and the page asks for two
    server = start(
        project, "--adapter", str(adapter), "--reward-model", str(reward), "--set", "serving.max_new_tokens=64"
    )
    yield server
    stop(server.proc)
