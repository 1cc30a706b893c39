"""An adapter merged into its base as a plain safetensors model, for LM Studio, llama.cpp and transformers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hominem_pipeline.core.policy.lora import adapter_config, load_policy

log = logging.getLogger(__name__)


def export_merged(adapter_path: Path, out_dir: Path, student_path: Path | None = None) -> dict[str, Any]:
    """Merge a LoRA adapter into its base and save a plain HF model (safetensors) with the tokenizer:
    what LM Studio, llama.cpp's `convert_hf_to_gguf.py` and any `from_pretrained` can load. The base is
    `student_path`, else the one the adapter names in its `adapter_config.json`."""
    import json

    adapter_path, out_dir = Path(adapter_path), Path(out_dir)
    base = Path(student_path or adapter_config(adapter_path)["base_model_name_or_path"])
    if not (base / "config.json").is_file():
        raise FileNotFoundError(f"the adapter's base model {base} is missing; pass the student folder with --base")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty; choose a new folder for the merged model")
    model, tokenizer = load_policy(base, adapter_path)
    merged = model.merge_and_unload()
    out_dir.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    info = {"base": str(base), "adapter": str(adapter_path), "format": "safetensors, fp32, LoRA merged"}
    (out_dir / "EXPORT.json").write_text(json.dumps(info, indent=2) + "\n")
    return info
