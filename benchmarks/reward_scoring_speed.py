"""Reward model scoring speed on the CPU, against a naive loop in the same process.

Scores the chosen and rejected replies of real HH-RLHF pairs (real lengths) two ways:
  naive      one example at a time, padded to max_length (what `tokenizer(..., padding="max_length")`
             and a per-example forward give), truncating the end of the text
  score()    `RewardModel.score`: length-sorted batches padded to their own longest item, the prompt
             cut from the left so the final turn stays; a model reading the judge frame runs the
             frame's head once per batch (KV cache), and is also timed with the head in every row
and prints pairs per second, the ratio to the naive loop (goal >= 1.5x), the share of the machine's
fp32 matmul ceiling (measured here) that score() reaches on the real tokens. Last, the
training time per 1,000 labels (the default trainer: one epoch, or with ridge heads the whole fit). The
naive loop of a judge-frame model tokenizes the frame's text written out around the exchange.

    .venv/bin/python benchmarks/reward_scoring_speed.py                       # newest data/reward_model
    .venv/bin/python benchmarks/reward_scoring_speed.py --model PATH --pairs 256
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.core.human.preferences import parse_preference_file
from hominem_pipeline.core.lm.models import reward_backbone
from hominem_pipeline.core.pipeline.lineage import lineage
from hominem_pipeline.core.reward.model import RewardModel
from hominem_pipeline.core.reward.network import member_mean_std
from hominem_pipeline.core.reward.training import RewardSources, train_reward_model
from hominem_pipeline.core.teacher.base import rubric_system

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"


def matmul_ceiling(seconds: float = 2.0) -> float:
    """Best fp32 GFLOP/s of torch.matmul over shapes like the encoder's (tokens x 384 by 384 x 1536)."""
    best = 0.0
    for m, k, n in ((2048, 384, 1536), (2048, 1536, 384), (4096, 384, 384), (1024, 1024, 1024)):
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.matmul(a, b)
        reps, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds / 4:
            torch.matmul(a, b)
            reps += 1
        best = max(best, 2 * m * k * n * reps / (time.perf_counter() - started) / 1e9)
    return best


def forward_flops(config, lengths: list[int]) -> float:
    """Matmul FLOPs of a transformer forward over sequences of these lengths (no padding): BERT-style
    (q, k, v, o and a two-matrix FFN) or Llama-style (grouped k, v and a gated three-matrix FFN)."""
    h, ff, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = h * getattr(config, "num_key_value_heads", config.num_attention_heads) // config.num_attention_heads
    ffn = (3 if hasattr(config, "num_key_value_heads") else 2) * h * ff
    return sum(layers * (2 * L * (2 * h * h + 2 * h * kv + ffn) + 2 * 2 * L * L * h) for L in lengths)


def naive_text(rm: RewardModel, prompt: str, response: str) -> tuple[str, str | None]:
    """What a naive caller hands the tokenizer: the pair, or the judge frame's text written out."""
    frame = rm.metadata.frame
    if frame is None:
        return prompt, response
    return frame["head"] + frame["before"] + prompt + frame["between"] + response + frame["after"], None


def naive_scores(rm: RewardModel, prompts: list[str], responses: list[str]) -> np.ndarray:
    out = np.zeros(len(prompts), np.float32)
    tok = rm.tokenizer
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    with torch.inference_mode():
        for i, (p, r) in enumerate(zip(prompts, responses)):
            enc = tok(
                *naive_text(rm, p, r),
                truncation=True,
                max_length=rm.max_length,
                padding="max_length",
                return_tensors="pt",
                add_special_tokens=False,
            )
            mean, _ = member_mean_std(rm.net(enc["input_ids"], enc["attention_mask"]))
            out[i] = float(mean["scalar"][0])
    return out


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def newest_model() -> Path | None:
    cfg = load_config(root=ROOT)
    ref = lineage(cfg).latest("reward_model")
    return ref.path if ref else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument(
        "--model", type=Path, default=None, help="reward model folder (default: the newest under data/reward_model)"
    )
    ap.add_argument("--pairs", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--train-labels", type=int, default=500, help="labels for the training-time figure (0: skip)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not args.data.is_file():
        sys.exit(f"{args.data} not found; pass --data PATH to harmless-base-test.jsonl.gz")
    model = args.model or newest_model()
    if model is None:
        sys.exit("no reward model under data/reward_model; run `make run` first or pass --model PATH")
    pairs = parse_preference_file(args.data, "hh-rlhf", args.data.name).pairs
    pairs = pairs.sample(n=min(args.pairs, len(pairs)), random_state=0).reset_index(drop=True)
    n = len(pairs)
    prompts = list(pairs["prompt"]) * 2
    responses = list(pairs["chosen"]) + list(pairs["rejected"])
    print(f"model {model}; {n} HH-RLHF pairs ({2 * n} replies); torch threads {torch.get_num_threads()}", flush=True)

    rm = RewardModel.load(model)
    lengths = [len(x) for x in rm.encode(prompts, responses)]
    print(
        f"real lengths: mean {np.mean(lengths):.0f}, median {np.median(lengths):.0f}, max {max(lengths)} "
        f"tokens (max_length {rm.max_length})"
    )
    rm.raw_scores(prompts[:8], responses[:8])  # warm-up
    naive, t_naive = timed(lambda: naive_scores(rm, prompts, responses))
    fast, t_fast = timed(lambda: rm.score(prompts, responses, batch_size=args.batch_size))
    fast_scalar = np.array([o.scalar for o in fast])
    prefix, rm.net.shared_prefix = rm.net.shared_prefix, None
    if prefix is not None:  # the judge frame's head run with every row, as before the KV cache of it
        whole, t_whole = timed(lambda: rm.raw_scores(prompts, responses, batch_size=args.batch_size)["scalar"])
        rm.net.shared_prefix = prefix
    ceiling = matmul_ceiling()
    flops = forward_flops(rm.net.backbone.config, lengths)
    fp32_gap = fast_scalar[:n] - fast_scalar[n:]
    naive_agree = float((np.sign(fp32_gap) == np.sign(naive[:n] - naive[n:])).mean())
    print(f"naive loop (one at a time, padded to {rm.max_length}): {n / t_naive:7.2f} pairs/s")
    print(
        f"score() fp32 (length-sorted batches of {args.batch_size}):  {n / t_fast:7.2f} pairs/s   "
        f"{t_naive / t_fast:.2f}x the naive loop "
        f"(the naive loop's end-truncation agrees on {naive_agree:.2%} of the decisions)"
    )
    if prefix is not None:
        print(
            f"score() fp32, the frame's {len(prefix)}-token head run with every row: {n / t_whole:7.2f} "
            "pairs/s; the head once per batch is "
            f"{t_whole / t_fast:.2f}x faster (largest score difference {np.abs(whole - fast_scalar).max():.1e})"
        )
    # With the head cached score() skips work these FLOPs count, so the whole-row pass is the one measured against the
    # ceiling.
    busy, which = (t_whole, "with the head in every row") if prefix is not None else (t_fast, "fp32")
    print(
        f"fp32 matmul ceiling {ceiling:.1f} GFLOP/s; score() {which} does {flops / busy / 1e9:.1f} "
        f"GFLOP/s of real-token work = {flops / busy / 1e9 / ceiling:.0%} of it",
        flush=True,
    )

    if args.train_labels:
        cfg = load_config(root=ROOT, overrides={"reward_model": {"epochs": 1}})
        k = args.train_labels // 2
        rows = []
        for i, row in pairs.head(k).iterrows():
            for reply, value in ((row["chosen"], 0.5), (row["rejected"], -0.5)):
                rows.append(
                    {
                        "prompt_id": f"p{i}",
                        "prompt": row["prompt"],
                        "response": reply,
                        "vector": {d: value for d in cfg.dimension_names},
                        "scalar": value,
                        "reward_intensity": 0.5,
                        "safety_score": 0.5 + value / 2,
                        "rationale": "",
                    }
                )
        labels = pd.DataFrame(rows)
        with tempfile.TemporaryDirectory() as tmp:
            metrics, seconds = timed(
                lambda: (
                    train_reward_model(
                        labels,
                        dimensions=cfg.dimension_names,
                        sources=RewardSources(
                            reward_backbone(cfg),
                            judge_system=rubric_system(cfg.labeling),
                            judge_question=cfg.labeling.scalar_question,
                        ),
                        cfg=cfg.reward_model,
                        out_dir=Path(tmp),
                        seed=0,
                        data_digest="bench",
                        date="benchmark",
                    ).metrics
                )
            )
        trained = metrics["train_sequences"]
        how = (
            "ridge heads: one backbone pass, the heads solved and cross-validated, calibration, saving"
            if cfg.reward_model.head_fit == "ridge"
            else "1 epoch with validation, calibration and saving"
        )
        print(
            f"training: {trained} labels ({how}) in {seconds:.1f} s = {seconds / trained * 1000:.0f} s "
            "per 1,000 labels"
        )


if __name__ == "__main__":
    main()
