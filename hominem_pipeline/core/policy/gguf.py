"""The student out as GGUF, for llama.cpp, LM Studio and any runner that loads it.

`export_gguf` merges an adapter into the student (`export.export_merged`) and hands the merged folder to llama.cpp's
own converter (`convert_hf_to_gguf.py` and the gguf-py it is written with, installed from the llama-cpp-python
source package by `make install`: `scripts/vendor_llama_convert.py`): the weights at f16 or quantised to Q8_0, the
tokenizer and its chat template inside the file. `export_gguf_lora` writes the adapter alone as a GGUF LoRA
(`convert_lora_to_gguf.py`), for runners that apply adapters to a base GGUF. Each file gets a sidecar `<file>.json`:
what was exported, from which adapter version and its digest, and the file's own sha256.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TYPES = ("f16", "q8_0")  # what `--gguf-type` offers: half precision, or 8-bit blocks (about half the size)
F16_TOLERANCE = 0.05  # nats: the largest difference of a top-10 next-token log-probability, f16 file against fp32
# (Q8_0 is held to the same top token instead)
CONVERTERS_ENV = "HOMINEM_LLAMA_CPP"  # a llama.cpp checkout whose converters to use instead of the installed ones


class ConverterMissing(FileNotFoundError):
    """llama.cpp's converters are not installed."""


def converters() -> Path:
    """The folder holding llama.cpp's `convert_hf_to_gguf.py` and `convert_lora_to_gguf.py`."""
    folder = Path(os.environ.get(CONVERTERS_ENV) or Path(sys.prefix) / "share" / "llama.cpp")
    if not (folder / "convert_hf_to_gguf.py").is_file():
        raise ConverterMissing(
            f"llama.cpp's GGUF converter is not in {folder}; run `make install` (it installs it from the "
            f"llama-cpp-python source package: scripts/vendor_llama_convert.py), or set ${CONVERTERS_ENV} to a "
            "llama.cpp checkout"
        )
    return folder


def _convert(script: str, args: list[str], out: Path) -> None:
    """Run one of llama.cpp's converters, writing `out`; its last lines name what went wrong when it fails. It writes
    beside `out` first and the file takes its name only when whole, so a failed or stopped export leaves nothing
    (and the next one is not refused for a file that exists)."""
    folder, partial = converters(), out.with_name(f"{out.name}.partial")
    partial.unlink(missing_ok=True)  # an earlier export's, stopped
    try:
        done = subprocess.run(
            [sys.executable, str(folder / script), *args, "--outfile", str(partial)],
            cwd=folder,
            capture_output=True,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"},  # its own gguf-py, shipped beside it
        )
        if done.returncode:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
            raise RuntimeError(f"llama.cpp's {script} failed (exit {done.returncode}):\n{tail}")
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)


def _adapter_identity(adapter: Path) -> dict[str, Any]:
    """The adapter's version (its folder's name) and digest (its manifest's content digest, else its files')."""
    from hominem_pipeline.core.pipeline.artifacts import folder_digest

    manifest = adapter / "manifest.json"
    digest = json.loads(manifest.read_text()).get("content") if manifest.is_file() else None
    return {
        "adapter": str(adapter),
        "adapter_version": adapter.name,
        "adapter_digest": digest or folder_digest(adapter),
    }


def _sidecar(out: Path, info: dict[str, Any]) -> dict[str, Any]:
    from hominem_pipeline.core.pipeline.artifacts import file_sha256

    info = info | {"file": out.name, "bytes": out.stat().st_size, "sha256": file_sha256(out)}
    Path(f"{out}.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def export_gguf(adapter: Path, out: Path, student: Path | None = None, outtype: str = "f16") -> dict[str, Any]:
    """The adapter merged into the student, as one GGUF file at `out` (`outtype`: f16 or q8_0) with the tokenizer and
    chat template; returns what the sidecar records."""
    from hominem_pipeline.core.policy.export import export_merged

    if outtype not in TYPES:
        raise ValueError(f"GGUF type {outtype!r} is not offered; use one of {', '.join(TYPES)}")
    adapter, out = Path(adapter).resolve(), Path(out).resolve()  # the converter runs in its own folder
    if out.exists():
        raise FileExistsError(f"{out} exists; choose a new file for the GGUF")
    converters()  # before the merge: say at once when the converter is missing
    with tempfile.TemporaryDirectory(prefix="hominem-gguf-") as tmp:
        merged = export_merged(adapter, Path(tmp) / "merged", student)
        out.parent.mkdir(parents=True, exist_ok=True)
        _convert("convert_hf_to_gguf.py", [str(Path(tmp) / "merged"), "--outtype", outtype], out)
    mask = os.umask(0)
    os.umask(mask)
    out.chmod(0o666 & ~mask)  # the converter's file, readable by another user's runner as any new file is
    return _sidecar(out, _adapter_identity(adapter) | {"base": merged["base"], "format": f"GGUF {outtype}, merged"})


def export_gguf_lora(adapter: Path, out: Path, student: Path | None = None) -> dict[str, Any]:
    """The adapter alone as a GGUF LoRA at `out` (f16), for a runner that applies it to the student's GGUF."""
    from hominem_pipeline.core.policy.lora import adapter_config

    adapter, out = Path(adapter).resolve(), Path(out).resolve()  # the converter runs in its own folder
    if out.exists():
        raise FileExistsError(f"{out} exists; choose a new file for the GGUF LoRA")
    base = Path(student or adapter_config(adapter)["base_model_name_or_path"]).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    _convert("convert_lora_to_gguf.py", [str(adapter), "--base", str(base), "--outtype", "f16"], out)
    return _sidecar(out, _adapter_identity(adapter) | {"base": str(base), "format": "GGUF LoRA f16"})


def llama_cpp_check(gguf: Path, reference: Any, tokenizer: Any, prompts: list[str], chat: str | None = None) -> dict:
    """llama.cpp itself (llama-cpp-python) on an exported file: per prompt, the next token's log-probabilities against
    `reference` (the merged HF model, fp32) on the same token ids, the largest difference over the reference's top 10
    and whether both pick the same token; with `chat`, llama.cpp's reply to it through the file's chat template."""
    import numpy as np
    import torch
    from llama_cpp import Llama

    llm = Llama(
        model_path=str(gguf), n_ctx=512, n_threads=max(1, os.cpu_count() or 1), logits_all=True, verbose=False, seed=0
    )  # logits_all: the logits stay readable after eval (llama-cpp-python keeps them only then)
    rows = []
    for prompt in prompts:
        ids = tokenizer(prompt).input_ids
        llm.reset()
        llm.eval(ids)
        theirs = torch.log_softmax(torch.tensor(np.asarray(llm.scores[len(ids) - 1]), dtype=torch.float32), -1)
        with torch.inference_mode():
            ours = torch.log_softmax(reference(torch.tensor([ids])).logits[0, -1].float(), -1)
        top = ours.topk(10).indices
        rows.append(
            {
                "prompt": prompt,
                "max_top10_diff": float((ours[top] - theirs[top]).abs().max()),
                "top1_same": bool(ours.argmax() == theirs.argmax()),
                "margin": float(ours[top[0]] - ours[top[1]]),
            }
        )
    out: dict[str, Any] = {"prompts": rows}
    if chat is not None:
        answer = llm.create_chat_completion(
            messages=[{"role": "user", "content": chat}], max_tokens=24, temperature=0.0, seed=0
        )
        out["chat"] = answer["choices"][0]["message"]["content"]
        out["chat_format"] = llm.chat_format
    llm.close()
    return out
