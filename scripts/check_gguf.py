"""Check an exported GGUF with llama.cpp itself: export the student with an adapter (f16 and Q8_0), then per prompt
compare llama.cpp's next-token log-probabilities with the merged HF model's (f16: within the stated tolerance; Q8_0:
the same top token), chat once through the file's chat template, and read the file again with transformers' GGUF
loader. Needs llama-cpp-python (`make llama`).

    .venv/bin/python scripts/check_gguf.py [--adapter live|PATH] [--prompts FILE] [--out DIR]

`--prompts`: one prompt per line, e.g. written by someone outside the project.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

PROMPTS = ["The capital of France is", "I feel sad today because", "Write a haiku about rain:"]


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from hominem_pipeline.cli.models import _live_adapter
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.policy.gguf import F16_TOLERANCE, export_gguf, llama_cpp_check
    from hominem_pipeline.core.policy.lora import load_policy

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", default="live")
    parser.add_argument("--prompts", type=Path)
    parser.add_argument("--out", type=Path, help="keep the GGUF files here (default: a temporary folder)")
    args = parser.parse_args()
    cfg = load_config(None)
    adapter = _live_adapter(cfg) if args.adapter == "live" else Path(args.adapter)
    prompts = [p for p in args.prompts.read_text().splitlines() if p.strip()] if args.prompts else PROMPTS
    policy, tokenizer = load_policy(student_path(cfg), adapter)
    merged = policy.merge_and_unload().eval()
    out = args.out or Path(tempfile.mkdtemp(prefix="hominem-gguf-check-"))
    failed = False
    for outtype in ("f16", "q8_0"):
        info = export_gguf(adapter, out / f"student-{outtype}.gguf", student_path(cfg), outtype)
        check = llama_cpp_check(out / info["file"], merged, tokenizer, prompts, chat="Hello, who are you?")
        worst = max(r["max_top10_diff"] for r in check["prompts"])
        same = sum(r["top1_same"] for r in check["prompts"])
        ok = worst < F16_TOLERANCE if outtype == "f16" else same == len(prompts)
        failed |= not ok
        print(
            f"{outtype}: {info['bytes'] / 1e6:.0f} MB; llama.cpp against the merged model: largest top-10 difference "
            f"{worst:.4f} nats, same top token {same}/{len(prompts)} -> {'ok' if ok else 'FAILED'}"
        )
        print(f"  llama.cpp chat ({check['chat_format']}): {check['chat']!r}")
        reread = AutoModelForCausalLM.from_pretrained(out, gguf_file=info["file"], dtype=torch.float32).eval()
        ids = tokenizer(prompts[0], return_tensors="pt").input_ids
        with torch.inference_mode():
            agree = bool(reread(ids).logits[0, -1].argmax() == merged(ids).logits[0, -1].argmax())
        print(f"  transformers' GGUF reader: same top token on the first prompt: {agree}")
        failed |= not agree
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
