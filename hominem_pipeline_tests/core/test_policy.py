import os

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.policy.dpo import train_dpo_adapter
from hominem_pipeline.core.policy.lora import base_checksum, load_policy
from hominem_pipeline_tests.conftest import REPO


def pairs(n=4):
    return pd.DataFrame(
        {
            "prompt": [f"Tell me about day {i}." for i in range(n)],
            "chosen": ["It was a kind, calm day."] * n,
            "rejected": ["Bad. Go away."] * n,
        }
    )


def test_dpo_trains_the_adapter_and_leaves_the_base_untouched(tiny_student, tmp_path):
    from transformers import AutoModelForCausalLM

    cfg = load_config(
        root=REPO,
        overrides={
            "policy": {
                "max_steps": 3,
                "batch_size": 2,
                "max_length": 48,
                "learning_rate": 0.01,
                "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "layers": None},
            }
        },
    ).policy
    before = base_checksum(AutoModelForCausalLM.from_pretrained(tiny_student))
    result = train_dpo_adapter(pairs(), student_path=tiny_student, cfg=cfg, out_dir=tmp_path, seed=0)

    assert result.metrics["steps"] == 3 and len(result.grad_norms) == 3
    assert result.base_checksum == before  # computed inside, on the PEFT-wrapped model
    assert base_checksum(AutoModelForCausalLM.from_pretrained(tiny_student)) == before  # the files on disk too
    weights = load_file(str(tmp_path / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and all(v.abs().sum() > 0 for v in lora_b)  # lora_B starts at zero: non-zero means it trained
    assert not any("lora" not in k for k in weights)  # only adapter tensors are saved

    model, _ = load_policy(tiny_student, tmp_path)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        with model.disable_adapter():
            base_logits = model(ids).logits
        adapted_logits = model(ids).logits
    assert not torch.allclose(base_logits, adapted_logits)


def test_dpo_refuses_an_empty_pair_table(tiny_student, tmp_path):
    cfg = load_config(root=REPO).policy
    with pytest.raises(ValueError, match="at least one preference pair"):
        train_dpo_adapter(pairs(0), student_path=tiny_student, cfg=cfg, out_dir=tmp_path, seed=0)


def test_export_merges_the_adapter_into_a_plain_model(tiny_student, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from hominem_pipeline.core.policy.export import export_merged

    cfg = load_config(
        root=REPO,
        overrides={
            "policy": {
                "max_steps": 2,
                "batch_size": 2,
                "max_length": 48,
                "learning_rate": 0.01,
                "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "layers": None},
            }
        },
    ).policy
    adapter = tmp_path / "adapter"
    train_dpo_adapter(pairs(), student_path=tiny_student, cfg=cfg, out_dir=adapter, seed=0)
    out = tmp_path / "merged"
    info = export_merged(adapter, out)
    assert info["base"] == str(tiny_student)  # read from the adapter's config
    assert not any("lora" in k for k in load_file(str(out / "model.safetensors")))
    mask = os.umask(0)
    os.umask(mask)
    assert {f.name: f.stat().st_mode & 0o777 for f in out.iterdir()} == {
        f.name: 0o666 & ~mask for f in out.iterdir()
    }  # 0644 under 022
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    policy, _ = load_policy(tiny_student, adapter)
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.inference_mode():
        torch.testing.assert_close(merged(ids).logits, policy(ids).logits, atol=1e-4, rtol=1e-4)
    with pytest.raises(FileExistsError, match="is not empty"):
        export_merged(adapter, out)
    with pytest.raises(FileNotFoundError, match="not a PEFT adapter folder"):
        export_merged(tmp_path, tmp_path / "x")


def test_policy_seed_zero_keeps_the_stage_seed_and_others_draw_new_ones():
    from hominem_pipeline.core.builds.lora_adapter import policy_seed
    from hominem_pipeline.core.config.loader import load_config

    assert load_config().policy.seed == 0
    assert policy_seed(1234, 0) == 1234  # adapters trained before the setting existed train the same way
    seeds = {policy_seed(1234, k) for k in range(1, 6)}
    assert len(seeds) == 5 and 1234 not in seeds
    assert all(0 <= s < 2**31 - 1 for s in seeds) and policy_seed(1234, 3) == policy_seed(1234, 3)
    assert policy_seed(99, 3) != policy_seed(1234, 3)  # still tied to the day's own seed
