"""The people's start: a LoRA adapter trained once on the people's own training pairs (the shipped ones but the
held-out, `builds.reward_model.people_pairs`) and the memory files, for about one pass over them, with the dual
trainer (`policy.dual.people_start`; `builds.shipping.ship_people_start`), and shipped in the project's features
folder. Each day's dual adapter starts from it instead of a fresh LoRA, then trains its own steps on the day's
pairs: a daily job on 2 CPU cores affords ~50 steps, which move the student toward people's held-out choices little
(docs/BENCHMARKS.md), while one pass over the people's pairs moves it clearly, and is the same every day, so it is
done once. The reference stays the base (adapter off): every figure of an adapter that started here counts what the
start learned.

One file per base student: `<base checksum>-people-start.safetensors`, its LoRA weights with the settings
it was trained with in the header. It is used only where it fits: the same LoRA shape as `policy.lora`
and the same people's training pairs (a changed `held_out` must not let an adapter start from pairs it is
judged on)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from hominem_pipeline.core.config import PolicyLoraConfig
from hominem_pipeline.core.pipeline.artifacts import fingerprint


def people_start_file(folder: Path, base: str) -> Path:
    """The people's start shipped in `folder` for the base student whose checksum is `base`."""
    return folder / f"{base[:16]}-people-start.safetensors"


def people_start_digest(folder: Path) -> list[list[str | None]]:
    """(name, sha256) of every people's start shipped in `folder`: a retrained one rebuilds the adapters that start
    from it."""
    from hominem_pipeline.core.pipeline.artifacts import optional_file_digest

    return [[path.name, optional_file_digest(path)] for path in sorted(folder.glob("*-people-start.safetensors"))]


def lora_shape(lora: PolicyLoraConfig) -> dict[str, Any]:
    """What an adapter's weights must match to be loaded into a fresh LoRA of `policy.lora`."""
    return {"r": lora.r, "alpha": lora.alpha, "target_modules": sorted(lora.target_modules), "layers": lora.layers}


def pairs_key(pairs: pd.DataFrame) -> str:
    """The people's training pairs a start was trained on, as one key (their pair ids, in any order)."""
    return fingerprint(sorted(pairs["pair_id"].astype(str)), 16)


def load_people_start(model: Any, folder: Path, base: str, lora: PolicyLoraConfig, key: str) -> str:
    """Load the people's start shipped in `folder` for this base into `model`'s fresh LoRA where it fits
    (`lora`'s shape, the people's training pairs `key`). Returns what the adapter starts from, in words."""
    path = people_start_file(folder, base)
    if not path.is_file():
        return (
            f"a fresh LoRA: no people's start for this student in {folder} (`hominem data ship-features` trains one)"
        )
    from peft import set_peft_model_state_dict
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), "pt") as fh:
        settings = json.loads(fh.metadata()["settings"])
    shape, cut = lora_shape(lora), False
    if settings["lora"] != shape:
        if not _smaller(settings["lora"], shape):
            return (
                f"a fresh LoRA: {path.name} was trained for LoRA {settings['lora']}, not policy.lora's "
                f"{shape} (`hominem data ship-features` retrains it)"
            )
        cut = True  # the slow loop shrank the rank: the start's updates cut to it
    if settings["pairs_key"] != key:
        return (
            f"a fresh LoRA: {path.name} was trained on other people's pairs than reward_model.people_pairs' "
            "training part (`hominem data ship-features` retrains it)"
        )
    state = load_file(str(path), device=str(next(model.parameters()).device))
    if cut:
        state = truncate_lora(state, lora.r)
    loaded = set_peft_model_state_dict(model, state)
    if loaded.unexpected_keys:
        raise RuntimeError(
            f"{path} holds weights the LoRA lacks ({loaded.unexpected_keys[:3]}...); rebuild it with "
            "`hominem data ship-features`"
        )
    what = f"the people's start {path.name}: {settings['max_steps']} steps over {settings['pairs']} people's pairs"
    return what + (f", cut from rank {settings['lora']['r']} to {lora.r} (SVD)" if cut else "")


def _smaller(trained: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """`wanted` is `trained` at a lower rank with the same scaling (alpha / r): its updates can be cut to it."""
    same = {k: v for k, v in trained.items() if k not in ("r", "alpha")} == {
        k: v for k, v in wanted.items() if k not in ("r", "alpha")
    }
    return (
        same
        and wanted["r"] < trained["r"]
        and abs(wanted["alpha"] / wanted["r"] - trained["alpha"] / trained["r"]) < 1e-9
    )


def truncate_lora(state: dict[str, Any], r: int) -> dict[str, Any]:
    """LoRA weights cut to rank `r` with the same scaling: each module's update B @ A replaced by its best
    rank-r approximation (the top r singular directions, split evenly between B and A). What shrinking an
    adapter keeps is what it had learned most of."""
    import torch

    out = dict(state)
    for key in [k for k in state if k.endswith("lora_A.weight")]:
        b_key = key.replace("lora_A.weight", "lora_B.weight")
        a, b = state[key].double(), state[b_key].double()  # a: r0 x in, b: out x r0
        qb, rb = torch.linalg.qr(b)  # the product's SVD through the two thin factors: B A = Qb (Rb A)
        u, sv, vh = torch.linalg.svd(rb @ a, full_matrices=False)
        root = sv[:r].sqrt()
        out[b_key] = ((qb @ u[:, :r]) * root).to(state[b_key].dtype)
        out[key] = (root[:, None] * vh[:r]).to(state[key].dtype)
    return out
