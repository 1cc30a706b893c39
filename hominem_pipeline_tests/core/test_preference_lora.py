"""The preference LoRA: a reward backbone trained end to end on people's pairs with TRL's RewardTrainer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from safetensors import safe_open

from hominem_pipeline.core.reward.encoding import make_encoder
from hominem_pipeline.core.reward.preference_lora import (
    PreferenceLoraSettings,
    load_preference_lora,
    preference_scores,
    train_preference_lora,
)

TOPICS = ["my exam", "the rain", "my cat", "work", "the bus", "my sister", "dinner", "the news", "a film", "money"]


def pairs(n: int, offset: int = 0) -> pd.DataFrame:
    """People who always prefer the thankful reply to the dismissive one, whatever the topic."""
    rows = []
    for i in range(offset, offset + n):
        topic = TOPICS[i % len(TOPICS)]
        prompt = f"Can we talk about {topic}? ({i})"
        rows.append({"prompt": prompt, "chosen": "Thank you, gladly.", "rejected": "Go away now."})
    return pd.DataFrame(rows)


def encode(tokenizer):
    return make_encoder(tokenizer, None, 64)


def test_the_backbone_learns_what_people_prefer_and_reads_it_back_as_trained(tiny_student, tmp_path):
    settings = PreferenceLoraSettings(rank=4, alpha=8, layers=1, epochs=6, learning_rate=1e-2, batch_size=8)
    seen = []
    metrics = train_preference_lora(
        tiny_student, pairs(48), encode, tmp_path / "lora", depth=2, settings=settings, progress=seen.append
    )
    assert metrics["train_loss"] > 0 and seen and seen[-1]["step"] == seen[-1]["steps"]  # progress as it trains
    with safe_open(str(tmp_path / "lora" / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert any("score" in k for k in keys)  # the head is saved beside the LoRA
    lora = [k for k in keys if "lora_" in k]
    assert lora and all(".layers.1." in k for k in lora)  # the top layer alone learns; the one below stays frozen
    model, tok = load_preference_lora(tiny_student, tmp_path / "lora", depth=2)
    unmerged, _ = load_preference_lora(tiny_student, tmp_path / "lora", depth=2, merge=False)
    fresh = pairs(20, offset=100)  # prompts it never saw
    read = encode(tok)
    chosen = preference_scores(model, tok, read, fresh["prompt"], fresh["chosen"])
    rejected = preference_scores(model, tok, read, fresh["prompt"], fresh["rejected"])
    assert (chosen > rejected).mean() >= 0.9  # a tiny random network: nearly every new prompt
    np.testing.assert_allclose(
        chosen, preference_scores(unmerged, tok, read, fresh["prompt"], fresh["chosen"]), atol=1e-4
    )  # merged as trained


def test_a_lora_deeper_than_the_kept_backbone_is_refused_naming_the_range(tiny_student, tmp_path):
    with pytest.raises(ValueError, match=r"layers 3: use 1 to 2"):
        train_preference_lora(
            tiny_student, pairs(4), encode, tmp_path / "x", depth=2, settings=PreferenceLoraSettings(layers=3)
        )
    with pytest.raises(ValueError, match="no people's pairs"):
        train_preference_lora(tiny_student, pairs(0), encode, tmp_path / "x", depth=2)
