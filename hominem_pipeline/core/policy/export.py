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
    readable(out_dir)
    return info


def readable(folder: Path) -> None:
    """Give every file under `folder` the mode a new file gets under the umask (0644 under the usual 022):
    safetensors writes its file 0600, which another user's LM Studio or llama.cpp could not read."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    for path in folder.rglob("*"):
        if path.is_file():
            path.chmod(0o666 & ~mask)


def write_model_card(
    out_dir: Path,
    *,
    base_hub_id: str | None,
    base_path: str,
    gguf_package: str | None,
    mode: str,
    date: str,
    metrics: dict[str, Any],
    data: dict[str, Any],
) -> Path:
    """The adapter's README.md (Hugging Face model card): what it is, what it was trained on, how to load it.
    `base_path`: the student folder as the project names it (`models.shown_path`), never an absolute path."""
    base = base_hub_id or str(base_path)
    front = [
        "---",
        "library_name: peft",
        f"base_model: {base}" if base_hub_id else "",
        "pipeline_tag: text-generation",
        "tags: [hominem, lora, " + mode + "]",
        "---",
    ]
    source = (
        (
            f"The base was loaded from `{base_path}`, converted once from the Q4_1 GGUF that the "
            f"`{gguf_package}` package ships "
            "(weights dequantized to fp32): the adapter was trained on those weights, which differ "
            "slightly from the hub's fp32 ones."
        )
        if gguf_package
        else f"The base was loaded from `{base_path}`."
    )
    shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    lines = [
        *[x for x in front if x],
        "",
        f"# hominem LoRA adapter ({mode}, {date})",
        "",
        f"A LoRA adapter on `{base}` trained by [hominem](https://pypi.org/project/hominem-pipeline/) "
        f"with `policy.mode: {mode}` "
        "on preference pairs a reward model ranked (and, for `dual`, on memory rows). The base weights are unchanged.",
        "",
        source,
        "",
        "## Load it",
        "",
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f"base = AutoModelForCausalLM.from_pretrained({str(base_path)!r})",
        f"model = PeftModel.from_pretrained(base, {str(out_dir.name)!r})  # this folder",
        f"tokenizer = AutoTokenizer.from_pretrained({str(out_dir.name)!r})",
        "```",
        "",
        "`hominem export --adapter THIS_FOLDER --merged OUT` writes the merged model as plain safetensors.",
        "",
        "## Training",
        "",
        *[f"- {k}: {v}" for k, v in data.items()],
        "",
        "| metric | value |",
        "| --- | --- |",
        *[f"| {k} | {v:.4g} |" for k, v in sorted(shown.items())],
        "",
        "`METADATA.json` beside this card records the reward model, the pairs and the settings it came from.",
        "",
    ]
    path = out_dir / "README.md"
    path.write_text("\n".join(lines))
    return path
