"""The multi-head reward model: an HF backbone with heads for the reward vector, scalar, intensity and safety.

The backbone is any HF encoder (mean pooling) or decoder (last-token pooling), fine-tuned fully, with
LoRA (merged before saving) or frozen. Each head has `members` outputs: a small deep ensemble on the
shared backbone, each member trained on its own bootstrap weights of the prompts, whose spread is the
model's uncertainty (or MC dropout: several stochastic passes at scoring time).

Training minimises, per member, the regression losses on the teacher's labels plus a Bradley-Terry
loss on the scalar over same-prompt teacher pairs and imported human pairs (and, optionally, an
auxiliary loss predicting the embedding of the teacher's rationale), with early stopping on a
validation split held out by prompt. Pairwise preferences are then calibrated by temperature scaling.

Saved as a folder: `backbone/` (HF `save_pretrained`, with its tokenizer), `heads.safetensors` and
`METADATA.json` (dimensions, ranges, semantics, backbone, calibration, training data digest, metrics,
date). `RewardModel.load(path).score(prompts, responses)` is the interface every later stage uses.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import logging
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from hominem_pipeline.core.config import RewardModelConfig
from hominem_pipeline.core.progress import Progress
from hominem_pipeline.core.schema import INTENSITY_RANGE, SAFETY_RANGE, SCALAR_RANGE, VECTOR_RANGE, vector_matrix
from hominem_pipeline.core.stats import pearson

log = logging.getLogger(__name__)

METADATA = "METADATA.json"
HEADS = "heads.safetensors"
RELIABILITY_PLOT = "reliability.png"
DIMENSION_PLOT = "reliability_dimensions.png"
BACKBONE_DIR = "backbone"
PAIR_GAP = 0.1  # teacher gap at which two candidates of a prompt form a pair (training, accuracy, calibration)
HEAD_OUTPUTS = ("vector", "scalar", "reward_intensity", "safety_score")
MAX_CHARS = 100_000  # per prompt or response: far beyond any max_length, so longer input is a caller's mistake
MC_SEED = 0  # MC dropout masks are seeded so that the same inputs get the same uncertainty
# int8 gaps this close to a tie are rescored in fp32 (`pair_gaps`) at least: the floor of the margin each
# model measures in training (`measure_int8`), and the margin of models saved before that (set on MiniLM,
# where int8 moved a pair's gap by 0.004 median and 0.02 at most)
INT8_RECHECK_MARGIN = 0.01
INT8_CALIBRATION = "int8_calibration.safetensors"  # per linear layer: the largest |input| per channel seen in training
INT8_SMOOTHING = 0.5  # SmoothQuant's alpha: how much of the activations' channel range moves into the weights
INT8_SAMPLE = 64  # training replies that measure the activation ranges, and as many others that measure int8's error
INT8_MARGIN_QUANTILE = 0.95  # the recheck margin: this quantile of int8's error on a pair gap, measured at training
FEW_VAL_PAIRS = 30  # fewer teacher pairs than this in the validation split: its accuracy is mostly the split's luck
ECE_NOISE_WARNING = 0.05  # above this noise floor (too few held-out pairs) the stage warns that its ECE says little
BUCKET_GROUPS = 64  # training batches are drawn from windows of this many groups sorted by length
RIDGE_FOLDS = 5  # ridge heads: prompt folds for the penalty and for the held-out figures
POOLINGS = ("mean", "last", "last_mean")
STANDARDISATION = ("feature_mean", "feature_std")  # head buffers that models saved before them lack (identity)


@dataclass(frozen=True)
class RewardOutput:
    vector: dict[str, float]
    scalar: float
    reward_intensity: float
    safety_score: float
    # Standard deviation per output (each dimension, scalar, reward_intensity, safety_score) across the
    # ensemble members or MC dropout passes; all 0.0 for a model trained without an uncertainty method.
    uncertainty: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "vector": self.vector,
            "scalar": self.scalar,
            "reward_intensity": self.reward_intensity,
            "safety_score": self.safety_score,
            "uncertainty": self.uncertainty,
        }


def backbone_kind(config: Any) -> str:
    """"decoder" for causal LMs (pooled at the last real token), else "encoder" (mean pooling)."""
    architectures = getattr(config, "architectures", None) or []
    if getattr(config, "is_decoder", False) or any(a.endswith("ForCausalLM") for a in architectures):
        return "decoder"
    return "encoder"


class RewardNet(nn.Module):
    """Backbone -> pooling -> four heads with `members` outputs each. Bounded outputs match the label ranges.

    With `length_feature` the heads also read log(number of real tokens) next to the pooled vector: mean
    pooling averages length away, and within one prompt (same prompt tokens) it is the reply's length, which
    LLM judges weigh (their verbosity bias). A sequence cut to max_length reads max_length: size max_length
    so that prompt and reply fit.

    Pooling `last_mean` hands the heads both the last real token's state and the mean. With `layers`,
    the states pooled are those after each of these layers (1 = the first block's output) side by side,
    instead of the last one alone. The heads read the features standardised by `feature_mean` /
    `feature_std` (identity unless ridge-fitted heads set them)."""

    def __init__(self, backbone: nn.Module, n_dims: int, *, members: int = 1, pooling: str = "mean", dropout: float = 0.1, length_feature: bool = False,
                 layers: Sequence[int] | None = None):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r}: use one of {', '.join(POOLINGS)}")
        self.layers = None if layers is None else check_layers(layers, backbone.config.num_hidden_layers)
        self.backbone = backbone
        self.n_dims, self.members, self.pooling, self.length_feature = n_dims, members, pooling, length_feature
        hidden = backbone.config.hidden_size * (2 if pooling == "last_mean" else 1) * (1 if self.layers is None else len(self.layers))
        self.feature_size = hidden + int(length_feature)  # what the heads read
        self.register_buffer("feature_mean", torch.zeros(self.feature_size))
        self.register_buffer("feature_std", torch.ones(self.feature_size))
        # Token ids every input of a causal decoder starts with (the judge frame's head): set, inference
        # passes encode it once per batch and the rows continue from its KV cache (`frame_prefix`). A
        # buffer, so it moves with the net, but not saved: the frame in METADATA rebuilds it.
        self.shared_prefix: torch.Tensor | None
        self.register_buffer("shared_prefix", None, persistent=False)
        self.dropout = nn.Dropout(dropout)
        self.vector_head = nn.Linear(self.feature_size, members * n_dims)
        self.scalar_head = nn.Linear(self.feature_size, members)
        self.intensity_head = nn.Linear(self.feature_size, members)
        self.safety_head = nn.Linear(self.feature_size, members)

    def _prefix_applies(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> bool:
        p = self.shared_prefix
        return (p is not None and not torch.is_grad_enabled() and input_ids.shape[1] > len(p)
                and bool((input_ids[:, : len(p)] == p).all()) and bool(attention_mask[:, : len(p) + 1].all()))  # every row goes on after it

    def _run(self, **inputs: Any) -> tuple[torch.Tensor, Any]:
        """The backbone's output and the states the heads pool: the last hidden state, or with `layers`
        those layers' states side by side (B, T, H * len(layers))."""
        if self.layers is None:
            out = self.backbone(**inputs)
            return out.last_hidden_state, out
        out = self.backbone(**inputs, output_hidden_states=True)
        return torch.cat([out.hidden_states[i] for i in self.layers], dim=-1), out

    def states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The states the heads pool (the last hidden state, or `layers`): (B, T, H), or with a shared
        prefix that every row starts with (inference only), (B, T - P, H) for the tokens after it and the
        prefix's own (P, H), which are the same for every row of a causal model. The prefix then runs
        once, not once per row."""
        if not self._prefix_applies(input_ids, attention_mask):
            return self._run(input_ids=input_ids, attention_mask=attention_mask)[0], None
        prefix, (b, t) = self.shared_prefix, input_ids.shape
        first_states, first = self._run(input_ids=prefix.unsqueeze(0), use_cache=True)
        cache = first.past_key_values
        cache.batch_repeat_interleave(b)
        positions = torch.arange(len(prefix), t, device=input_ids.device).unsqueeze(0).expand(b, -1)
        rest = self._run(input_ids=input_ids[:, len(prefix) :], attention_mask=attention_mask, position_ids=positions,
                         past_key_values=cache, use_cache=False)[0]
        return rest, first_states[0]

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, feature_size): the pooled hidden state, then log(real tokens) with `length_feature`."""
        hidden, prefix = self.states(input_ids, attention_mask)
        skip = 0 if prefix is None else len(prefix)  # tokens before `hidden`'s first
        n_real = attention_mask.sum(1).clamp(min=1)
        parts = []
        if self.pooling in ("last", "last_mean"):  # right-padded: the last real token has seen the whole text
            parts.append(hidden[torch.arange(hidden.shape[0], device=hidden.device), n_real - 1 - skip])
        if self.pooling in ("mean", "last_mean"):
            mask = attention_mask[:, skip:].unsqueeze(-1).to(hidden.dtype)
            total = (hidden * mask).sum(1) + (0 if prefix is None else prefix.sum(0))
            parts.append(total / n_real.unsqueeze(-1).to(hidden.dtype))
        pooled = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
        if not self.length_feature:
            return pooled
        return torch.cat([pooled, n_real.to(pooled.dtype).log().unsqueeze(-1)], dim=-1)

    def heads(self, pooled: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per member: vector (B, M, D), scalar / reward_intensity / safety_score (B, M)."""
        h = self.dropout((pooled - self.feature_mean) / self.feature_std)
        return {
            "vector": torch.tanh(self.vector_head(h)).view(-1, self.members, self.n_dims),
            "scalar": torch.tanh(self.scalar_head(h)),
            "reward_intensity": torch.sigmoid(self.intensity_head(h)),
            "safety_score": torch.sigmoid(self.safety_head(h)),
        }

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.heads(self.pooled(input_ids, attention_mask))

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.state_dict().items() if not k.startswith("backbone.")}


def check_layers(layers: Sequence[int], depth: int) -> tuple[int, ...]:
    """`reward_model.backbone.layers` checked against a backbone of `depth` layers: distinct, in 1..depth."""
    chosen = tuple(int(x) for x in layers)
    if not chosen or len(set(chosen)) != len(chosen) or not all(1 <= x <= depth for x in chosen):
        raise ValueError(f"reward_model.backbone.layers {list(layers)}: name distinct layers from 1 to {depth} (this backbone's "
                         f"depth; 1 = the first block's output), e.g. [{', '.join(map(str, range(max(1, depth - 2), depth + 1)))}], or null for the last alone")
    return chosen


def member_mean_std(heads: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Mean and (population) standard deviation over the member axis (dim 1) of each head."""
    return {k: v.mean(1) for k, v in heads.items()}, {k: v.std(1, unbiased=False) for k, v in heads.items()}


def _cut_exchange(tokenizer: Any, prompt: str, response: str, budget: int) -> tuple[list[int], list[int]]:
    """Prompt and response tokens in at most `budget` together: the response keeps its start (up to 3/4
    of the budget), the prompt its end (the latest turn)."""
    # verbose=False: the texts are cut here, so the "longer than the model's maximum" notice is noise.
    p = tokenizer.encode(prompt, add_special_tokens=False, verbose=False)
    r = tokenizer.encode(response, add_special_tokens=False, verbose=False)
    r = r[: max(budget - len(p), (3 * budget) // 4)]
    return p[max(0, len(p) - (budget - len(r))) :], r


def encode_pair(tokenizer: Any, prompt: str, response: str, max_length: int) -> list[int]:
    """[CLS] prompt [SEP] response [SEP] in at most `max_length` tokens: the response keeps its start
    (up to 3/4 of the budget), the prompt keeps its end (the latest turn), which is what is judged.
    Decoders without CLS/SEP get their BOS/EOS tokens instead."""
    p, r = _cut_exchange(tokenizer, prompt, response, max_length - 3)
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    return [t for t in (start,) if t is not None] + p + [sep] + r + [sep]


FRAME_PARTS = ("head", "before", "between", "after")  # the fixed texts of a frame, in the order they surround the exchange


def frame_tokens(tokenizer: Any, frame: dict[str, str]) -> list[list[int]]:
    """The token ids of the frame's fixed parts (`FRAME_PARTS`), each encoded on its own as the model reads them."""
    return [tokenizer.encode(frame[k], add_special_tokens=False, verbose=False) for k in FRAME_PARTS]


def frame_prefix(tokenizer: Any, frame: dict[str, str] | None, kind: str) -> torch.Tensor | None:
    """The token ids every framed input starts with (head, then the text before the prompt), for
    `RewardNet.shared_prefix`; None without a frame or for an encoder, whose prefix states depend on
    what follows."""
    if frame is None or kind != "decoder":
        return None
    head, before, _, _ = frame_tokens(tokenizer, frame)
    return torch.tensor(head + before)


def encode_framed(tokenizer: Any, fixed: list[list[int]], prompt: str, response: str, max_length: int) -> list[int]:
    """head + before + prompt + between + response + after, in at most `max_length` tokens, cut as
    `encode_pair` cuts (the response keeps its start, the prompt its end). `fixed`: the frame's parts as
    `frame_tokens` encodes them (once per model, not per reply)."""
    budget = max_length - sum(len(f) for f in fixed)
    if budget < 8:
        raise ValueError(f"reward_model.max_length {max_length} leaves {budget} tokens for the exchange after the judge frame's {max_length - budget}; raise it")
    p, r = _cut_exchange(tokenizer, prompt, response, budget)
    head, before, between, after = fixed
    return head + before + p + between + r + after


def judge_frame(tokenizer: Any, system: str, question: str | None = None) -> dict[str, str]:
    """The local judge's frame for `frame: judge`: the chat template's text up to the user's content
    (with `system`), then the judge's "Conversation to judge" lines. With `question` (`frame:
    judge_question`) the exchange is followed by that rubric question as the judge is asked it, up to
    "Rating: ", so the last token is where the judge gives its rating. Stored in METADATA, so a saved
    model scores as it was trained whatever the config says later."""
    from hominem_pipeline.core.generation import chat_text

    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("reward_model.backbone.frame judge needs a backbone with a chat template (a chat model such as the student); use frame: pair")
    from hominem_pipeline.core.teacher import JUDGE_FRAME, rubric_suffix

    marker = "\x00HOMINEM\x00"
    head, tail = chat_text(tokenizer, marker, system).split(marker)
    before, between, after = JUDGE_FRAME
    frame = {"kind": "judge", "head": head, "before": before, "between": between, "after": after}
    if question is not None:
        frame |= {"kind": "judge_question", "after": after + rubric_suffix(question, tail)}
    return frame


def make_encoder(tokenizer: Any, frame: dict[str, str] | None, max_length: int) -> Callable[[str, str], list[int]]:
    """(prompt, response) -> token ids, as the model was trained to read them."""
    if frame is None:
        return lambda p, r: encode_pair(tokenizer, p, r, max_length)
    fixed = frame_tokens(tokenizer, frame)
    return lambda p, r: encode_framed(tokenizer, fixed, p, r, max_length)


def pad_id(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def pad_batch(batch: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(x) for x in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, : len(x)] = torch.tensor(x)
        mask[i, : len(x)] = 1
    return ids, mask


def length_sorted_batches(encoded: list[list[int]], batch_size: int, pad: int) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """(positions, ids, mask) batches sorted by length, so each batch pads only to its own longest item."""
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        ids, mask = pad_batch([encoded[i] for i in idx], pad)
        yield idx, ids, mask


def _check_inputs(prompts: Sequence[str], responses: Sequence[str]) -> None:
    if isinstance(prompts, str) or isinstance(responses, str):
        raise TypeError("score() takes lists of strings, not a single string; wrap it: score([prompt], [response])")
    if len(prompts) != len(responses):
        raise ValueError(f"score() got {len(prompts)} prompts but {len(responses)} responses; pass one prompt per response")
    for i, (p, r) in enumerate(zip(prompts, responses)):
        if not isinstance(p, str) or not isinstance(r, str):
            raise TypeError(f"item {i}: prompt and response must be str, got {type(p).__name__} and {type(r).__name__}")
        if not r.strip():
            raise ValueError(f"item {i}: the response is empty; there is nothing to score")
        for name, text in (("prompt", p), ("response", r)):
            if len(text) > MAX_CHARS:
                raise ValueError(
                    f"item {i}: the {name} is {len(text):,} characters, more than the {MAX_CHARS:,} score() accepts "
                    f"(the model reads at most its max_length tokens); pass one conversation turn, not a whole file"
                )


def load_backbone(source: Path | str) -> tuple[nn.Module, Any]:
    from transformers import AutoModel, AutoTokenizer

    from hominem_pipeline.core.models import quiet_hf_progress

    quiet_hf_progress()
    return AutoModel.from_pretrained(source, dtype=torch.float32), AutoTokenizer.from_pretrained(source)


def keep_layers(backbone: nn.Module, depth: int | None) -> nn.Module:
    """The backbone cut to its first `depth` transformer layers (None: unchanged). The cut model is a
    plain HF model of that depth: its config says so, so it saves and loads as one (the final norm of a
    decoder, if it has one, still applies)."""
    if depth is None:
        return backbone
    total = getattr(backbone.config, "num_hidden_layers", None)
    stacks = [(name, m) for name, m in backbone.named_modules() if isinstance(m, nn.ModuleList) and len(m) == total]
    if total is None or not stacks:
        raise ValueError(f"reward_model.backbone.depth {depth}: this backbone ({type(backbone).__name__}) has no layer stack to cut; set depth: null")
    if depth > total:
        raise ValueError(f"reward_model.backbone.depth {depth} is more than the backbone's {total} layers; use at most {total}, or null for all")
    name, stack = min(stacks, key=lambda item: item[0].count("."))  # the outermost stack of num_hidden_layers blocks
    parent = backbone.get_submodule(name.rpartition(".")[0]) if "." in name else backbone
    setattr(parent, name.rpartition(".")[2], nn.ModuleList(list(stack)[:depth]))
    backbone.config.num_hidden_layers = depth
    if isinstance(getattr(backbone.config, "layer_types", None), list):  # per-layer attention kinds (transformers 5)
        backbone.config.layer_types = backbone.config.layer_types[:depth]
    return backbone


INT8_WEIGHT_LEVELS = 63  # weights in 7 bits: AVX2's u8 x s8 pair sums (vpmaddubsw) saturate int16 with 8-bit weights


class Int8Linear(nn.Module):
    """An nn.Linear computed in int8 by PyTorch's quantized CPU kernels (fbgemm/oneDNN on x86, QNNPACK
    on ARM): weights quantized once per output channel, activations per token (row) at each call.

    Per-token activation scales matter for transformers, whose special and punctuation tokens carry
    activations tens of times larger than the rest: one scale per batch (what the kernels' dynamic
    quantization does) spends the 8 bits on those few tokens and rounds every other token coarsely.
    So each row is divided by its own absolute maximum before the kernel (every row then spans
    [-1, 1] and the batch's one scale fits each of them) and the output row is multiplied back.
    Activations keep 8 bits (`reduce_range=False`) and weights take 7 (`INT8_WEIGHT_LEVELS`), so the
    AVX2 kernels cannot saturate; CPUs with VNNI run the same kernels. (`torch._int_mm`, used before,
    is fast only on CPUs with VNNI: 20-40x slower than fp32 on an AVX2-only CPU.)"""

    def __init__(self, linear: nn.Linear, input_absmax: torch.Tensor | None = None):
        super().__init__()
        weight = linear.weight.detach().float()
        # SmoothQuant (Xiao et al. 2023): with `input_absmax` (the largest |input| per channel seen on real
        # text), channel j of the input is divided by s_j = absmax_j^a / max|W[:, j]|^(1-a) and weight column
        # j multiplied by it: the product is unchanged, and the few outlier channels no longer take the 8
        # bits of every token. (Per-token scales alone leave those channels setting each row's scale.)
        smooth = None
        if input_absmax is not None:
            w_max = weight.abs().amax(0).clamp(min=1e-5)
            smooth = (input_absmax.float().clamp(min=1e-5) ** INT8_SMOOTHING / w_max ** (1 - INT8_SMOOTHING)).clamp(min=1e-5)
            weight = weight * smooth
        self.register_buffer("inverse_smooth", None if smooth is None else 1.0 / smooth)
        scale = weight.abs().amax(1).clamp(min=1e-12) / INT8_WEIGHT_LEVELS
        with warnings.catch_warnings():  # torch 2.13 marks quantized tensor constructors as deprecated
            warnings.simplefilter("ignore", UserWarning)
            quantized = torch.quantize_per_channel(weight, scale.double(), torch.zeros(len(scale), dtype=torch.long), 0, torch.qint8)
            try:
                self._packed = torch.ops.quantized.linear_prepack(quantized, None)
            except RuntimeError as err:
                raise RuntimeError(
                    f"int8 scoring needs PyTorch's quantized CPU kernels, and this build's engine "
                    f"{torch.backends.quantized.engine!r} refused a linear layer ({err}); load the model without quantize='int8' (fp32)"
                ) from err
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float()
        if self.inverse_smooth is not None:
            rows = rows * self.inverse_smooth
        norm = rows.abs().amax(1, keepdim=True).clamp(min=1e-12)
        y = torch.ops.quantized.linear_dynamic(rows / norm, self._packed, False).mul_(norm)
        if self.bias is not None:
            y.add_(self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)


def quantize_int8(module: nn.Module, input_absmax: dict[str, torch.Tensor] | None = None, prefix: str = "") -> nn.Module:
    """Every nn.Linear in `module` replaced, in place, by an `Int8Linear` (inference only), smoothed by
    its entry in `input_absmax` (names as `module.named_modules()` gives them) where there is one."""
    for name, child in list(module.named_children()):
        full = f"{prefix}{name}"
        if isinstance(child, nn.Linear):
            setattr(module, name, Int8Linear(child, None if input_absmax is None else input_absmax.get(full)))
        else:
            quantize_int8(child, input_absmax, f"{full}.")
    return module


def linear_input_absmax(net: RewardNet, encoded: list[list[int]], batch_size: int, pad: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Per nn.Linear of the backbone (by its name there), the largest |input| per channel over `encoded`;
    and, from the same pass, the pooled vector of each sequence (as `_pooled_all` gives it)."""
    absmax: dict[str, torch.Tensor] = {}

    def hook(name: str) -> Callable[..., None]:
        def record(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            seen = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).abs().amax(0).float()
            absmax[name] = seen if name not in absmax else torch.maximum(absmax[name], seen)
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in net.backbone.named_modules() if isinstance(m, nn.Linear)]
    try:
        pooled = _pooled_all(net, encoded, batch_size, pad)
    finally:
        for h in handles:
            h.remove()
    return absmax, pooled


def int8_split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Which of `n` training replies calibrate the int8 path and which measure its error: `INT8_SAMPLE`
    each, at random by `seed` (a set too small for two of each: all of them for both)."""
    order = np.random.default_rng(seed).permutation(n)
    calibrate, check = order[:INT8_SAMPLE], order[INT8_SAMPLE : 2 * INT8_SAMPLE]
    return (order, order) if len(check) < 2 else (calibrate, check)


def pooled_and_int8_ranges(net: RewardNet, encoded: list[list[int]], calibrate: np.ndarray, batch_size: int, pad: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`_pooled_all` of every sequence, with the int8 activation ranges (`linear_input_absmax`) of the
    `calibrate` ones recorded on the way: a frozen backbone's one pass serves training and calibration."""
    pooled = torch.zeros(len(encoded), net.feature_size)
    absmax, pooled[calibrate] = linear_input_absmax(net, [encoded[i] for i in calibrate], batch_size, pad)
    rest = np.setdiff1d(np.arange(len(encoded)), calibrate)
    if len(rest):
        pooled[rest] = _pooled_all(net, [encoded[i] for i in rest], batch_size, pad)
    return pooled, absmax


def measure_int8(net: RewardNet, encoded: list[list[int]], seed: int, batch_size: int, pad: int,
                 pooled: torch.Tensor | None = None, absmax: dict[str, torch.Tensor] | None = None) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """Calibrate the int8 path on training replies (`int8_split`): the activation ranges `Int8Linear`
    smooths by, from `INT8_SAMPLE` replies, then int8's error on the scalar and every dimension over
    `INT8_SAMPLE` others, compared with fp32. A frozen backbone's training pass already holds both fp32
    parts: `pooled` (every reply's pooled vector, in `encoded`'s order) and `absmax` (the ranges of
    `int8_split`'s calibration replies, `pooled_and_int8_ranges`); given, they are not computed again.
    Returns (input_absmax, report with the recheck margins `pair_gaps` uses: for the scalar and for each
    dimension, the `INT8_MARGIN_QUANTILE` quantile of int8's error on the gap of every pair of those
    replies, never below `INT8_RECHECK_MARGIN`; the median and largest error are the scalar's); None
    when the quantized engine refuses the layers."""
    calibrate, check = int8_split(len(encoded), seed)
    net.eval()
    if absmax is None:
        absmax, _ = linear_input_absmax(net, [encoded[i] for i in calibrate], batch_size, pad)
    try:
        quantized = copy.deepcopy(net)
        quantized.backbone = quantize_int8(quantized.backbone, absmax)
    except RuntimeError as err:
        log.warning("int8 calibration skipped: %s", err)
        return None
    sample = [encoded[i] for i in check]

    def outputs(model: RewardNet, features: torch.Tensor | None = None) -> torch.Tensor:  # (reply, scalar and each dimension)
        mean, _ = member_mean_std(model.heads(_pooled_all(model, sample, batch_size, pad) if features is None else features))
        return torch.cat([mean["scalar"][:, None], mean["vector"]], 1)

    with torch.inference_mode():
        exact = outputs(net, None if pooled is None else pooled[torch.as_tensor(check)])
        error = (outputs(quantized) - exact).double().numpy()
    i, j = np.triu_indices(len(check), 1)
    gap_error = np.abs(error[i] - error[j])  # (pair, output): the scalar, then each dimension
    margins = [max(INT8_RECHECK_MARGIN, float(np.quantile(gap_error[:, k], INT8_MARGIN_QUANTILE))) for k in range(gap_error.shape[1])]
    return absmax, {
        "smoothing": INT8_SMOOTHING, "calibrated_on": len(calibrate), "measured_on": len(check),
        "median_gap_error": float(np.median(gap_error[:, 0])), "max_gap_error": float(gap_error[:, 0].max()),
        "recheck_margin": margins[0], "dimension_recheck_margins": margins[1:],
    }


class RewardModel:
    """A trained reward model loaded for scoring."""

    def __init__(self, net: RewardNet, tokenizer: Any, metadata: dict[str, Any]):
        self.net = net.eval()
        self.tokenizer = tokenizer
        self.metadata = metadata
        self.dimensions: list[str] = list(metadata["dimensions"])
        self.max_length: int = int(metadata["max_length"])
        uncertainty = metadata.get("uncertainty") or {}
        self.uncertainty_method: str = uncertainty.get("method", "none")
        self.mc_samples: int = int(uncertainty.get("mc_samples", 0))
        self.exact_net: RewardNet | None = None  # the fp32 network when `net` runs in int8
        self._encode = make_encoder(tokenizer, metadata.get("frame"), self.max_length)

    @classmethod
    def load(cls, path: str | Path, quantize: str | None = None) -> RewardModel:
        """Load a saved model; `quantize="int8"` runs the backbone's linear layers in int8 (`Int8Linear`:
        faster on CPUs; `benchmarks/reward_scoring_speed.py` measures speed and agreement with fp32)."""
        from safetensors.torch import load_file

        path = Path(path)
        if not (path / METADATA).is_file():
            raise FileNotFoundError(f"{path} is not a reward model folder (no {METADATA}); pass a data/reward_model/<date>/<version> folder")
        if quantize not in (None, "int8"):
            raise ValueError(f"quantize={quantize!r}: use None (fp32) or 'int8'")
        if not (path / BACKBONE_DIR).is_dir():
            raise FileNotFoundError(
                f"{path} has no {BACKBONE_DIR}/ folder: it was saved by an earlier hominem in another layout; "
                "rebuild that day's model with `hominem run --date <date> --select reward_model`"
            )
        metadata = json.loads((path / METADATA).read_text())
        backbone, tokenizer = load_backbone(path / BACKBONE_DIR)
        bb = metadata.get("backbone") or {}
        net = RewardNet(backbone, len(metadata["dimensions"]), members=int(metadata.get("members", 1)), pooling=bb.get("pooling", "mean"),
                        dropout=float(metadata.get("dropout", 0.1)), length_feature=bool(metadata.get("length_feature", False)), layers=bb.get("layers"))
        missing = net.load_state_dict(load_file(str(path / HEADS)), strict=False)
        if missing.unexpected_keys or any(not k.startswith("backbone.") and k not in STANDARDISATION for k in missing.missing_keys):
            raise ValueError(f"{path / HEADS} does not match the model: {missing}")
        net.shared_prefix = frame_prefix(tokenizer, metadata.get("frame"), bb.get("kind", "encoder"))
        model = cls(net, tokenizer, metadata)
        if quantize == "int8":
            model.exact_net = copy.deepcopy(net).eval()  # fp32, for the near-ties `pair_gaps` rechecks
            # models saved before the int8 calibration existed quantize without smoothing
            absmax = load_file(str(path / INT8_CALIBRATION)) if (path / INT8_CALIBRATION).is_file() else None
            net.backbone = quantize_int8(net.backbone, absmax)
        return model

    @property
    def temperature(self) -> float:
        """The fitted preference temperature (1.0, uncalibrated, when training had no validation pairs)."""
        return float((self.metadata.get("calibration") or {}).get("temperature", 1.0))

    def probability(self, gap: float, dimension: str | None = None) -> float:
        """The calibrated probability that a reply is preferred over another whose score is `gap` lower:
        the scalar's gap (or, with `dimension`, that dimension's gap) through its fitted temperature."""
        from hominem_pipeline.core.calibration import preference_probability

        if dimension is None:
            return float(preference_probability(gap, self.temperature))
        self._dimension_index(dimension)
        per_dim = ((self.metadata.get("calibration") or {}).get("dimensions") or {}).get(dimension) or {}
        return float(preference_probability(gap, float(per_dim.get("temperature", 1.0))))

    def prefer(self, prompt: str, a: str, b: str, dimension: str | None = None) -> float:
        """The calibrated probability that response `a` is preferred over `b` for `prompt`: overall (by the
        scalar), or on one reward dimension (by its own fitted temperature)."""
        return self.probability(float(self.pair_gaps([prompt], [a], [b], dimension)[0]), dimension)

    def recheck_margin(self, dimension: str | None = None) -> float:
        """The int8 gap (of the scalar, or of `dimension`) under which `pair_gaps` rescores a pair in fp32:
        the margin measured when the model was trained (`measure_int8`), or `INT8_RECHECK_MARGIN` for
        models saved before."""
        int8 = self.metadata.get("int8") or {}
        if dimension is None:
            return float(int8.get("recheck_margin", INT8_RECHECK_MARGIN))
        margins = int8.get("dimension_recheck_margins")
        return float(margins[self._dimension_index(dimension)]) if margins else INT8_RECHECK_MARGIN

    def pair_gaps(self, prompts: Sequence[str], a: Sequence[str], b: Sequence[str], dimension: str | None = None,
                  recheck_margin: float | None = None, batch_size: int = 32) -> np.ndarray:
        """Score gap (a minus b) per pair, by the scalar or one dimension: positive where `a` is preferred.

        On an int8 model, pairs whose int8 gap is within `recheck_margin` of a tie (None: the model's
        `recheck_margin(dimension)`, what int8 moved such a gap by on 95% of the training replies' pairs) are scored
        again in fp32, so the decisions are the fp32 model's wherever int8 moves a gap less than that
        (`benchmarks/reward_scoring_speed.py` measures the agreement); 0 turns the recheck off."""
        if recheck_margin is None:
            recheck_margin = self.recheck_margin(dimension)
        if not len(prompts) == len(a) == len(b):
            raise ValueError(f"pair_gaps takes one prompt per pair: got {len(prompts)} prompts, {len(a)} a and {len(b)} b replies")
        column = None if dimension is None else self._dimension_index(dimension)  # checked before scoring

        def gaps(net: RewardNet, idx: np.ndarray) -> np.ndarray:
            ps = [prompts[i] for i in idx]
            raw = self.raw_scores(ps + ps, [a[i] for i in idx] + [b[i] for i in idx], batch_size, net=net)
            values = (raw["scalar"] if column is None else raw["vector"][:, column]).astype(np.float64)  # exact gaps of float32 scores
            return values[: len(idx)] - values[len(idx) :]

        out = gaps(self.net, np.arange(len(prompts)))
        if self.exact_net is not None and recheck_margin > 0:
            near = np.flatnonzero(np.abs(out) < recheck_margin)
            if len(near):
                out[near] = gaps(self.exact_net, near)
        return out

    def _dimension_index(self, dimension: str) -> int:
        if dimension not in self.dimensions:
            raise ValueError(f"unknown dimension {dimension!r}; this model has {', '.join(self.dimensions)}")
        return self.dimensions.index(dimension)

    def encode(self, prompts: Sequence[str], responses: Sequence[str]) -> list[list[int]]:
        return [self._encode(p, r) for p, r in zip(prompts, responses)]

    def _mc_passes(self, net: RewardNet, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """Standard deviation of `net`'s member-mean outputs over `mc_samples` passes with dropout on."""
        dropouts = [m for m in net.modules() if isinstance(m, nn.Dropout)]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(MC_SEED)
            for m in dropouts:
                m.train()
            try:
                samples = [member_mean_std(net(ids, mask))[0] for _ in range(self.mc_samples)]
            finally:
                for m in dropouts:
                    m.eval()
        return {k: torch.stack([s[k] for s in samples]).std(0, unbiased=False) for k in samples[0]}

    def raw_scores(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 32, uncertainty: bool = False,
                   net: RewardNet | None = None) -> dict[str, Any]:
        """Head outputs as arrays: vector (n, D), scalar, reward_intensity, safety_score (n,); with
        `uncertainty`, also "std": the same keys holding standard deviations. `net`: another network
        than the loaded one (`exact_net`, the fp32 twin of an int8 model)."""
        _check_inputs(prompts, responses)
        net = self.net if net is None else net
        n = len(prompts)
        shapes = {"vector": (n, len(self.dimensions)), "scalar": (n,), "reward_intensity": (n,), "safety_score": (n,)}
        out: dict[str, Any] = {k: np.zeros(s, dtype=np.float32) for k, s in shapes.items()}
        std = {k: np.zeros(s, dtype=np.float32) for k, s in shapes.items()}
        with torch.inference_mode():
            for idx, ids, mask in length_sorted_batches(self.encode(prompts, responses), batch_size, pad_id(self.tokenizer)):
                mean, spread = member_mean_std(net(ids, mask))
                if uncertainty and self.uncertainty_method == "mc_dropout":
                    spread = self._mc_passes(net, ids, mask)
                for key in shapes:
                    out[key][idx] = mean[key].float().numpy()
                    std[key][idx] = spread[key].float().numpy()
        if uncertainty:
            out["std"] = std
        return out

    def score(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 32) -> list[RewardOutput]:
        raw = self.raw_scores(prompts, responses, batch_size, uncertainty=True)
        std = raw["std"]
        results = []
        for i in range(len(prompts)):
            spread = {d: float(std["vector"][i, j]) for j, d in enumerate(self.dimensions)}
            spread.update({k: float(std[k][i]) for k in ("scalar", "reward_intensity", "safety_score")})
            results.append(
                RewardOutput(
                    vector={d: float(raw["vector"][i, j]) for j, d in enumerate(self.dimensions)},
                    scalar=float(raw["scalar"][i]),
                    reward_intensity=float(raw["reward_intensity"][i]),
                    safety_score=float(raw["safety_score"][i]),
                    uncertainty=spread,
                )
            )
        return results


# --- training -------------------------------------------------------------------------------------


def pairwise_accuracy(pairs: np.ndarray, predicted: np.ndarray) -> float | None:
    """Share of (preferred, other) pairs that the prediction orders the same way (a tie counts as wrong)."""
    if len(pairs) == 0:
        return None
    predicted = np.asarray(predicted, dtype=np.float64)
    return float((predicted[pairs[:, 0]] > predicted[pairs[:, 1]]).mean())


@dataclass
class TrainingSet:
    """Every sequence the model sees, with its targets, grouped for batching.

    Sequences 0..labeled-1 are the labeled examples (in frame order); the rest are the chosen and
    rejected replies of human pairs. A group is one prompt's candidates, or one human pair: batches are
    made of whole groups, so a batch holds both sides of every pair it trains on."""

    encoded: list[list[int]]
    labeled: int
    targets: dict[str, torch.Tensor]
    group_of: np.ndarray  # sequence -> group
    groups: list[np.ndarray]  # group -> sequences
    pairs: np.ndarray  # (k, 2) preferred, other (sequence indices)
    pair_weight: np.ndarray  # (k,)
    pair_group: np.ndarray  # (k,) group of each pair
    pair_human: np.ndarray  # (k,) bool

    @classmethod
    def build(cls, encode: Callable[[str, str], list[int]], labels: pd.DataFrame, human: pd.DataFrame | None, dimensions: list[str], cfg: RewardModelConfig) -> TrainingSet:
        from hominem_pipeline.core.calibration import same_prompt_pairs

        encoded = [encode(p, r) for p, r in zip(labels["prompt"], labels["response"])]
        n = len(labels)
        vec = vector_matrix(labels["vector"], dimensions, np.float32)
        targets = {
            "vector": torch.tensor(vec),
            **{k: torch.tensor(labels[k].to_numpy(np.float32)) for k in ("scalar", "reward_intensity", "safety_score")},
        }
        prompt_ids = np.asarray(labels["prompt_id"]) if n else np.array([], dtype=object)
        names = {p: i for i, p in enumerate(sorted(set(prompt_ids)))}
        group_of = np.array([names[p] for p in prompt_ids], dtype=np.int64)
        pairs = same_prompt_pairs(prompt_ids, labels["scalar"].to_numpy(np.float64), PAIR_GAP) if n else np.zeros((0, 2), np.int64)
        weights = np.full(len(pairs), cfg.pair_loss.teacher_weight)
        human_flags = np.zeros(len(pairs), bool)
        if human is not None and len(human):
            start, g0 = len(encoded), len(names)
            for prompt, chosen, rejected in zip(human["prompt"], human["chosen"], human["rejected"]):
                encoded += [encode(prompt, chosen), encode(prompt, rejected)]
            h = len(human)
            group_of = np.concatenate([group_of, np.repeat(np.arange(g0, g0 + h), 2)])
            chosen_idx = start + 2 * np.arange(h)
            pairs = np.concatenate([pairs, np.stack([chosen_idx, chosen_idx + 1], 1)])
            weights = np.concatenate([weights, np.full(h, cfg.pair_loss.human_weight)])
            human_flags = np.concatenate([human_flags, np.ones(h, bool)])
        n_groups = int(group_of.max()) + 1 if len(group_of) else 0
        order = np.argsort(group_of, kind="stable")
        groups = np.split(order, np.cumsum(np.bincount(group_of, minlength=n_groups))[:-1]) if n_groups else []
        return cls(encoded, n, targets, group_of, groups, pairs, weights, group_of[pairs[:, 0]] if len(pairs) else np.zeros(0, np.int64), human_flags)

    def split(self, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Group ids (train, val): labeled prompts and human pairs each split by `val_fraction`, so a
        prompt's candidates (or a pair's two replies) are never on both sides."""
        rng = np.random.default_rng(seed)
        labeled_groups = np.unique(self.group_of[: self.labeled])
        human_groups = np.unique(self.group_of[self.labeled :])
        train, val = [], []
        for groups in (labeled_groups, human_groups):
            groups = rng.permutation(groups)
            n_val = max(1, round(len(groups) * val_fraction)) if len(groups) > 1 else 0
            val.append(groups[:n_val])
            train.append(groups[n_val:])
        return np.concatenate(train).astype(np.int64), np.concatenate(val).astype(np.int64)

    def batches(self, groups: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Groups packed into batches of at most `batch_size` sequences (a bigger group alone). The groups
        are shuffled, then sorted by length within windows of BUCKET_GROUPS, so that a batch holds texts of
        similar length and pads little; the batches are shuffled again."""
        shuffled = rng.permutation(groups)
        out: list[np.ndarray] = []
        for start in range(0, len(shuffled), BUCKET_GROUPS):
            window = sorted(shuffled[start : start + BUCKET_GROUPS].tolist(), key=lambda g: max(len(self.encoded[s]) for s in self.groups[g]))
            current: list[int] = []
            for g in window:
                members = self.groups[g]
                if current and len(current) + len(members) > batch_size:
                    out.append(np.asarray(current))
                    current = []
                current.extend(members.tolist())
            if current:
                out.append(np.asarray(current))
        return [out[i] for i in rng.permutation(len(out))]

    def pairs_within(self, seqs: np.ndarray) -> np.ndarray:
        """Indices of the pairs both of whose sequences are in `seqs`."""
        inside = np.zeros(len(self.encoded), bool)
        inside[seqs] = True
        return np.flatnonzero(inside[self.pairs[:, 0]] & inside[self.pairs[:, 1]]) if len(self.pairs) else np.zeros(0, np.int64)


def _bootstrap(n_groups: int, members: int, rng: np.random.Generator) -> np.ndarray:
    """Weights (group, member): Poisson(1) per group and member (the online bootstrap), so each member
    trains on its own resample; all ones for a single member."""
    if members == 1:
        return np.ones((n_groups, 1), np.float32)
    w = rng.poisson(1.0, size=(n_groups, members)).astype(np.float32)
    empty = w.sum(0) == 0
    w[:, empty] = 1.0  # a member that drew nothing at all trains on everything
    return w


def _pooled_all(net: RewardNet, encoded: list[list[int]], batch_size: int, pad: int) -> torch.Tensor:
    """The backbone's pooled vector for every encoded sequence, as it is now (eval mode)."""
    out = torch.zeros(len(encoded), net.feature_size)
    net.eval()
    progress = Progress("reward model backbone pass", len(encoded), log, unit="sequences") if len(encoded) > 256 else None
    with torch.inference_mode():
        for idx, ids, mask in length_sorted_batches(encoded, batch_size, pad):
            out[idx] = net.pooled(ids, mask)
            if progress:
                progress.advance(len(idx))
    return out


def _rationale_targets(net: RewardNet, tokenizer: Any, rationales: Sequence[str], max_length: int, batch_size: int) -> torch.Tensor:
    """The untrained backbone's pooled embedding of each rationale: what the auxiliary head predicts."""
    encoded = [tokenizer.encode(r or "", add_special_tokens=True, truncation=True, max_length=max_length) or [pad_id(tokenizer)] for r in rationales]
    return _pooled_all(net, encoded, batch_size, pad_id(tokenizer))


def feature_stats(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and spread of `features` per column (a constant column's spread kept at 1)."""
    std = features.std(0, unbiased=False)
    return features.mean(0), torch.where(std > 1e-6, std, torch.ones_like(std))


def standardise(net: RewardNet, features: torch.Tensor) -> None:
    """Set the heads' input standardisation to the mean and spread of `features`."""
    mean, std = feature_stats(features)
    net.feature_mean.copy_(mean)
    net.feature_std.copy_(std)


def ridge_design(features: torch.Tensor, rows: np.ndarray, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(n, F + 1) float64: the features of `rows` standardised by `mean` / `std`, then a column of ones (the intercept)."""
    x = ((features[torch.as_tensor(rows)] - mean) / std).double()
    return torch.cat([x, torch.ones(len(rows), 1, dtype=torch.float64)], 1)


def ridge_targets(targets: dict[str, torch.Tensor], rows: np.ndarray) -> torch.Tensor:
    """(n, D + 3) float64: the labels of `rows` before the heads' squashing (atanh for the vector and the
    scalar, logit for intensity and safety), clipped just inside the ranges."""
    idx = torch.as_tensor(rows)
    unit = lambda k: torch.logit(targets[k][idx].double().clamp(0.005, 0.995)).unsqueeze(1)  # noqa: E731
    return torch.cat([torch.atanh(targets["vector"][idx].double().clamp(-0.995, 0.995)),
                      torch.atanh(targets["scalar"][idx].double().clamp(-0.995, 0.995)).unsqueeze(1), unit("reward_intensity"), unit("safety_score")], 1)


def ridge_solve(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, alpha: float) -> torch.Tensor:
    """(F + 1, outputs): argmin sum_i w_i |y_i - x_i B|^2 + alpha |B without its last (intercept) row|^2."""
    return _ridge_from_gram(x.T @ (w.unsqueeze(1) * x), x.T @ (w.unsqueeze(1) * y), alpha)


def _ridge_from_gram(gram: torch.Tensor, moment: torch.Tensor, alpha: float) -> torch.Tensor:
    """`ridge_solve` from X'WX and X'WY, so that several penalties share one pass over the rows."""
    penalty = torch.full((gram.shape[0],), float(alpha), dtype=torch.float64)
    penalty[-1] = 1e-9
    return torch.linalg.solve(gram + torch.diag(penalty), moment)


def _squash(pre: torch.Tensor, n_dims: int) -> torch.Tensor:
    """Ridge outputs (n, D + 3) through the heads' own squashing."""
    return torch.cat([torch.tanh(pre[:, : n_dims + 1]), torch.sigmoid(pre[:, n_dims + 1 :])], 1)


def prompt_folds(groups: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Fold of each row: its group's (prompt's) place in a seeded shuffle of the groups, modulo `folds`."""
    names = np.random.default_rng(seed).permutation(np.unique(groups))
    fold = {g: i % folds for i, g in enumerate(names)}
    return np.array([fold[g] for g in groups], dtype=np.int64)


def choose_ridge_alpha(x: torch.Tensor, y: torch.Tensor, groups: np.ndarray, alphas: Sequence[float], output_weights: torch.Tensor, seed: int,
                       folds: int = RIDGE_FOLDS) -> tuple[float, dict[float, float]]:
    """The penalty with the least weighted squared error (in the labels' ranges) over `folds` folds of
    the prompts of `x` (one validation split of a few prompts picks it too noisily), and every penalty's error."""
    which = prompt_folds(groups, folds, seed)
    n_dims = y.shape[1] - 3
    truth = _squash(y, n_dims)
    errors = {float(a): 0.0 for a in alphas}
    for k in np.unique(which):
        fit, held = torch.as_tensor(which != k), torch.as_tensor(which == k)
        gram, moment = x[fit].T @ x[fit], x[fit].T @ y[fit]  # once per fold, for every penalty
        for alpha in alphas:
            err = ((_squash(x[held] @ _ridge_from_gram(gram, moment, alpha), n_dims) - truth[held]) ** 2) * output_weights
            errors[float(alpha)] += float(err.sum()) / len(y)
    return min(errors, key=errors.__getitem__), errors


def ridge_out_of_fold(features: torch.Tensor, targets: dict[str, torch.Tensor], rows: np.ndarray, groups: np.ndarray, alphas: Sequence[float],
                      output_weights: torch.Tensor, seed: int, folds: int = RIDGE_FOLDS) -> tuple[torch.Tensor, list[float]]:
    """(len(rows), D + 3) predictions in the labels' ranges, each row's from heads that never saw its
    prompt: fitted on the other folds' prompts, standardised on them, with the penalty chosen by
    cross-validation inside them. These are the held-out figures of ridge heads, over every prompt.
    Also each fold's penalty."""
    which = prompt_folds(groups, folds, seed)
    out = torch.zeros(len(rows), targets["vector"].shape[1] + 3, dtype=torch.float64)
    chosen = []
    for k in np.unique(which):
        fit, held = rows[which != k], rows[which == k]
        if len(fit) < 2:
            raise ValueError(f"head_fit ridge needs labeled replies of at least 2 prompts, got {len(np.unique(groups))}; label more prompts")
        mean, std = feature_stats(features[torch.as_tensor(fit)])
        x, y = ridge_design(features, fit, mean, std), ridge_targets(targets, fit)
        alpha, _ = choose_ridge_alpha(x, y, groups[which != k], alphas, output_weights, seed + 1 + int(k), folds)
        coef = ridge_solve(x, y, torch.ones(len(fit), dtype=torch.float64), alpha)
        out[torch.as_tensor(which == k)] = _squash(ridge_design(features, held, mean, std) @ coef, y.shape[1] - 3)
        chosen.append(alpha)
    return out, chosen


def set_ridge_heads(net: RewardNet, coefs: Sequence[torch.Tensor]) -> None:
    """Load one (F + 1, D + 3) ridge solution per member into the heads."""
    d = net.n_dims
    with torch.no_grad():
        for m, coef in enumerate(coefs):
            weight, bias = coef[:-1].T.float(), coef[-1].float()
            net.vector_head.weight[m * d : (m + 1) * d] = weight[:d]
            net.vector_head.bias[m * d : (m + 1) * d] = bias[:d]
            for j, head in enumerate((net.scalar_head, net.intensity_head, net.safety_head)):
                head.weight[m] = weight[d + j]
                head.bias[m] = bias[d + j]


def _wrap_backbone(backbone: nn.Module, cfg: RewardModelConfig) -> nn.Module:
    mode = cfg.backbone.finetune
    if mode == "frozen":
        backbone.requires_grad_(False)
    elif mode == "lora":
        from peft import LoraConfig, get_peft_model

        lc = cfg.backbone.lora
        try:
            backbone = get_peft_model(backbone, LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout, target_modules=lc.target_modules))
        except ValueError as exc:
            raise ValueError(f"LoRA on the reward backbone failed ({exc}); set reward_model.backbone.lora.target_modules to its projection layers") from exc
    return backbone


def _unwrap_backbone(backbone: nn.Module) -> nn.Module:
    """The plain backbone to save: LoRA merged into the weights, so loading needs no PEFT."""
    return backbone.merge_and_unload() if hasattr(backbone, "merge_and_unload") else backbone


def calibrate(pairs: np.ndarray, pair_group: np.ndarray, predicted: np.ndarray) -> dict[str, Any] | None:
    """Temperature scaling of P(first preferred) = sigmoid(predicted gap / T) on (preferred, other) pairs,
    with ECE / MCE / Brier before and after, and a held-out ECE: T fitted on half the prompts and
    applied to the other half (both ways). None when there is no pair."""
    from hominem_pipeline.core.calibration import both_orders, calibration_report, ece_noise_floor, fit_temperature, preference_probability

    if len(pairs) == 0:
        return None
    gaps, outcomes = both_orders(pairs, predicted)
    temperature = fit_temperature(gaps, outcomes)
    fold = np.tile(np.asarray(pair_group) % 2, 2)
    after = calibration_report(preference_probability(gaps, temperature), outcomes)
    held_out = None
    if len(np.unique(fold)) == 2:
        probs = np.zeros(len(gaps))
        for f in (0, 1):
            t = fit_temperature(gaps[fold != f], outcomes[fold != f])
            probs[fold == f] = preference_probability(gaps[fold == f], t)
        held_out = calibration_report(probs, outcomes)
        held_out["noise_floor"] = ece_noise_floor(probs[: len(pairs)])
    else:
        after["noise_floor"] = ece_noise_floor(preference_probability(gaps[: len(pairs)], temperature))
    return {
        "temperature": temperature,
        "before": calibration_report(preference_probability(gaps, 1.0), outcomes),
        "after": after,
        "held_out": held_out,
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _drop_bins(report: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if report is None else {k: v for k, v in report.items() if k != "bins"}


def calibrate_validation(
    data: TrainingSet, val_seqs: np.ndarray, val_pairs: np.ndarray, full: dict[str, np.ndarray], prompt_ids: list[str], dimensions: list[str], out_dir: Path, date: str,
    source: str = "validation",
) -> tuple[dict[str, Any] | None, dict[str, float]]:
    """Calibration on the held-out pairs (`source`: the validation split's, or every pair scored out of
    fold): the scalar (teacher and human pairs), then each dimension on the teacher pairs with a gap on
    it. Draws both reliability plots into `out_dir`. Returns the METADATA block (None when there is no
    pair) and the metrics."""
    from hominem_pipeline.core.calibration import reliability_diagram, reliability_grid, same_prompt_pairs

    overall = calibrate(data.pairs[val_pairs], data.pair_group[val_pairs], full["scalar"])
    if overall is None:
        log.warning("no validation pair (teacher gap of %.2f or more, or human pair): the reward model's preferences stay uncalibrated", PAIR_GAP)
        return None, {}
    held = overall["held_out"]
    reported = held or overall["after"]
    n_pairs = overall["after"]["pairs"] // 2
    if reported["noise_floor"] > ECE_NOISE_WARNING:
        log.warning("calibration measured on %d %s pairs: a perfectly calibrated model would read an ECE of %.3f on them, so the ECE of %.3f says "
                    "little about calibration; a wider window (reward_model.window_days) of labeled days gives more pairs", n_pairs, source,
                    reported["noise_floor"], reported["ece"])
    reliability_diagram(
        overall["before"], overall["after"], out_dir / RELIABILITY_PLOT,
        f"reward model {date}: {n_pairs} {source} pairs, T = {overall['temperature']:.3g}"
        + ("" if held is None else f"\nheld-out ECE {held['ece']:.3f} (T fitted on the other half of the prompts)")
        + f"\na perfectly calibrated model would read {reported['noise_floor']:.3f} on these pairs",
    )
    metrics = {
        "temperature": overall["temperature"],
        "val_ece": reported["ece"],
        "val_ece_noise_floor": reported["noise_floor"],
        "val_ece_in_sample": overall["after"]["ece"],
        "val_ece_uncalibrated": overall["before"]["ece"],
        "val_mce": reported["mce"],
        "val_brier": reported["brier"],
    }
    calibration: dict[str, Any] = {
        "method": "temperature scaling: P(a preferred over b) = sigmoid((scalar_a - scalar_b) / temperature)",
        "fitted_on": f"{source} pairs (same prompt with teacher scalar gap >= {PAIR_GAP}, and human pairs), each counted in both orders",
        "held_out_ece": f"val_ece: temperature fitted on half the {source} prompts, applied to the other half (both ways)" if held else "in sample (one prompt group only)",
        "ece_noise_floor": "val_ece_noise_floor: the mean ECE of a perfectly calibrated model on these pairs (outcomes drawn from the reported "
                           "probabilities, 400 draws): an ECE near it is what the pair count allows",
        "temperature": overall["temperature"],
        "before": overall["before"],
        "after": overall["after"],
        "held_out": _drop_bins(held),
        "dimensions": {},
    }
    lab = val_seqs[val_seqs < data.labeled]
    ids = np.asarray(prompt_ids)
    panels = {}
    for j, d in enumerate(dimensions):
        teacher_d = data.targets["vector"][:, j].numpy()
        pairs_d = lab[same_prompt_pairs(ids[lab], teacher_d[lab], PAIR_GAP)]
        dim = calibrate(pairs_d, data.group_of[pairs_d[:, 0]], full["vector"][:, j])
        if dim is None:
            continue
        report = dim["held_out"] or dim["after"]
        calibration["dimensions"][d] = {"temperature": dim["temperature"], "ece": report["ece"], "ece_noise_floor": report["noise_floor"],
                                        "ece_in_sample": dim["after"]["ece"], "pairs": dim["after"]["pairs"] // 2}
        metrics[f"val_ece_dim_{d}"] = report["ece"]
        panels[d] = (dim["after"], dim["temperature"], None if dim["held_out"] is None else dim["held_out"]["ece"])
    if panels:
        reliability_grid(panels, out_dir / DIMENSION_PLOT, f"reward model {date}: per-dimension pair calibration")
    return calibration, metrics


def train_reward_model(
    examples: pd.DataFrame,
    *,
    dimensions: list[str],
    backbone_path: Path | str,
    cfg: RewardModelConfig,
    out_dir: Path,
    seed: int,
    data_digest: str,
    date: str,
    human_pairs: pd.DataFrame | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    judge_system: str | None = None,
    judge_question: str | None = None,
) -> dict[str, Any]:
    """Train on labeled examples (columns prompt_id, prompt, response, vector, scalar, reward_intensity,
    safety_score, rationale) and optional human pairs (prompt, chosen, rejected); save the model to
    `out_dir`. Returns the final metrics. `judge_system`: the judge's system text, which `frame: judge`
    needs (`teacher.rubric_system`); `judge_question`: the question `frame: judge_question` asks after
    the exchange (`labeling.scalar_question`)."""
    from safetensors.torch import save_file

    n_human = 0 if human_pairs is None else len(human_pairs)
    if len(examples) < 4 and n_human < 4:
        raise ValueError(f"reward model training needs at least 4 labeled examples or 4 human pairs, got {len(examples)} and {n_human}; label more trajectories")
    if len(examples) == 0:
        examples = pd.DataFrame(columns=["prompt_id", "prompt", "response", "vector", *HEAD_OUTPUTS[1:], "rationale"])
    torch.manual_seed(seed)
    backbone, tokenizer = load_backbone(backbone_path)
    kind = backbone_kind(backbone.config) if cfg.backbone.kind == "auto" else cfg.backbone.kind
    backbone = keep_layers(backbone, cfg.backbone.depth)
    pooling = cfg.backbone.pooling if cfg.backbone.pooling != "auto" else ("last" if kind == "decoder" else "mean")
    members = cfg.uncertainty.members if cfg.uncertainty.method == "ensemble" else 1
    net = RewardNet(_wrap_backbone(backbone, cfg), len(dimensions), members=members, pooling=pooling, dropout=cfg.dropout, length_feature=cfg.length_feature,
                    layers=cfg.backbone.layers)
    frame = None
    if cfg.backbone.frame in ("judge", "judge_question"):
        if not judge_system or (cfg.backbone.frame == "judge_question" and not judge_question):
            raise ValueError(f"reward_model.backbone.frame {cfg.backbone.frame} needs the judge's system text"
                             + (" and its overall question" if cfg.backbone.frame == "judge_question" else "")
                             + " (train_reward_model(judge_system=..., judge_question=...))")
        frame = judge_frame(tokenizer, judge_system, judge_question if cfg.backbone.frame == "judge_question" else None)
    net.shared_prefix = frame_prefix(tokenizer, frame, kind)
    data = TrainingSet.build(make_encoder(tokenizer, frame, cfg.max_length), examples, human_pairs, dimensions, cfg)
    if cfg.head_fit == "ridge":
        # Closed-form heads need no early stopping: they are fitted on every prompt, and their held-out
        # figures come from cross-validation over every prompt (ridge_out_of_fold), not from one split.
        if len(np.unique(data.group_of[: data.labeled])) < 2:
            raise ValueError(f"head_fit ridge needs labeled replies of at least 2 prompts to cross-validate, got {len(examples)} replies of "
                             f"{len(np.unique(data.group_of[: data.labeled]))}; label more prompts")
        train_groups = val_groups = np.arange(len(data.groups), dtype=np.int64)
    else:
        train_groups, val_groups = data.split(cfg.val_fraction, seed)
    if len(val_groups) == 0:
        raise ValueError("reward model validation split is empty: the data covers a single prompt; label more prompts")
    rng = np.random.default_rng(seed)
    boot = torch.tensor(_bootstrap(len(data.groups), members, rng))
    seq_boot = boot[torch.as_tensor(data.group_of)]  # (sequence, member)
    val_seqs = np.concatenate([data.groups[g] for g in val_groups])
    val_pairs = data.pairs_within(val_seqs)

    rationale_head = None
    if cfg.head_fit == "ridge" and (n_human or cfg.rationale_weight > 0):
        log.warning("head_fit ridge fits the heads to the teacher's labels only: the %d human pairs only measure the model, and the rationale target is not used", n_human)
    if cfg.rationale_weight > 0 and cfg.head_fit == "gradient" and data.labeled and "rationale" in examples:
        rationale_targets = _rationale_targets(net, tokenizer, list(examples["rationale"].fillna("")), cfg.max_length, cfg.batch_size)
        has_rationale = torch.zeros(len(data.encoded), dtype=torch.bool)  # per sequence: human replies have none
        has_rationale[: data.labeled] = torch.tensor(examples["rationale"].fillna("").str.strip().astype(bool).to_numpy())
        rationale_head = nn.Linear(net.feature_size, net.feature_size)

    # A frozen backbone gives every sequence the same pooled vector in every epoch: computed once.
    # Its int8 activation ranges are recorded in the same pass (`measure_int8` needs no pass of its own).
    int8_pool = data.labeled or len(data.encoded)  # the replies the int8 path is calibrated and measured on: the labeled ones
    frozen, int8_absmax = (pooled_and_int8_ranges(net, data.encoded, int8_split(int8_pool, seed)[0], cfg.batch_size, pad_id(tokenizer))
                           if cfg.backbone.finetune == "frozen" else (None, None))
    head_params = [p for n, p in net.named_parameters() if not n.startswith("backbone.")] + (list(rationale_head.parameters()) if rationale_head else [])
    backbone_params = [p for p in net.backbone.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        ([{"params": backbone_params, "lr": cfg.learning_rate}] if backbone_params else []) + [{"params": head_params, "lr": cfg.head_learning_rate}],
        weight_decay=cfg.weight_decay,
    )
    w = cfg.loss_weights
    weights = {"vector": w.vector, "scalar": w.scalar, "reward_intensity": w.intensity, "safety_score": w.safety}
    pad = pad_id(tokenizer)

    def regression_losses(seqs: torch.Tensor, heads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per head: the bootstrap-weighted squared error over the batch's labeled sequences and members."""
        labeled = seqs < data.labeled
        if not labeled.any():
            return {}
        rows, bw = seqs[labeled], seq_boot[seqs[labeled]]  # bw: (b, M)
        out = {}
        for k in weights:
            err = (heads[k][labeled] - data.targets[k][rows].unsqueeze(1)) ** 2
            if k == "vector":
                err = err.mean(-1)
            out[k] = (err * bw).sum() / bw.sum().clamp(min=1e-6)
        return out

    def pair_loss(seqs: np.ndarray, scalar: torch.Tensor) -> torch.Tensor | None:
        """Bradley-Terry: -log sigmoid(scale * (s_preferred - s_other)), per member, weighted."""
        which = data.pairs_within(seqs)
        if len(which) == 0:
            return None
        position = {s: i for i, s in enumerate(seqs.tolist())}
        first = torch.tensor([position[s] for s in data.pairs[which, 0]])
        second = torch.tensor([position[s] for s in data.pairs[which, 1]])
        pw = torch.tensor(data.pair_weight[which], dtype=torch.float32).unsqueeze(1) * seq_boot[torch.as_tensor(data.pairs[which, 0])]
        logits = cfg.pair_loss.scale * (scalar[first] - scalar[second])
        return (nn.functional.softplus(-logits) * pw).sum() / pw.sum().clamp(min=1e-6)

    def predict(seqs: np.ndarray) -> dict[str, np.ndarray]:
        """Member-mean predictions for `seqs`, keyed like the heads."""
        net.eval()
        out = {"vector": np.zeros((len(seqs), len(dimensions)), np.float32), **{k: np.zeros(len(seqs), np.float32) for k in HEAD_OUTPUTS[1:]}}
        with torch.inference_mode():
            if frozen is not None:
                mean, _ = member_mean_std(net.heads(frozen[torch.as_tensor(seqs)]))
                return {k: mean[k].numpy() for k in out}
            for pos, ids, mask in length_sorted_batches([data.encoded[i] for i in seqs], cfg.batch_size, pad):
                mean, _ = member_mean_std(net(ids, mask))
                for k in out:
                    out[k][pos] = mean[k].numpy()
        return out

    def predict_val() -> dict[str, np.ndarray]:
        """Member-mean validation predictions, indexed by sequence (zero elsewhere)."""
        preds = predict(val_seqs)
        full = {k: np.zeros((len(data.encoded),) + v.shape[1:], np.float32) for k, v in preds.items()}
        for k in preds:
            full[k][val_seqs] = preds[k]
        return full

    def evaluate(full: dict[str, np.ndarray]) -> dict[str, Any]:
        metrics: dict[str, Any] = {}
        lab = val_seqs[val_seqs < data.labeled]
        val_loss = 0.0
        if len(lab):
            for k in weights:
                t = data.targets[k][torch.as_tensor(lab)].numpy()
                metrics[f"val_mse_{k}"] = float(((full[k][lab] - t) ** 2).mean())
                val_loss += weights[k] * metrics[f"val_mse_{k}"]
            tv = data.targets["vector"][torch.as_tensor(lab)].numpy()
            for j, d in enumerate(dimensions):
                metrics[f"val_mse_dim_{d}"] = float(((full["vector"][lab, j] - tv[:, j]) ** 2).mean())
                metrics[f"val_pearson_{d}"] = pearson(full["vector"][lab, j], tv[:, j])
            metrics["val_pearson_scalar"] = pearson(full["scalar"][lab], data.targets["scalar"][torch.as_tensor(lab)].numpy())
        teacher, human = val_pairs[~data.pair_human[val_pairs]], val_pairs[data.pair_human[val_pairs]]
        metrics["val_pairwise_accuracy"] = pairwise_accuracy(data.pairs[teacher], full["scalar"])
        metrics["val_pairs"] = len(teacher)
        if n_human:
            metrics["val_human_accuracy"] = pairwise_accuracy(data.pairs[human], full["scalar"])
            metrics["val_human_pairs"] = len(human)
        if len(val_pairs):
            gap = full["scalar"][data.pairs[val_pairs, 0]] - full["scalar"][data.pairs[val_pairs, 1]]
            metrics["val_pair_nll"] = float(np.logaddexp(0.0, -cfg.pair_loss.scale * gap).mean())
            val_loss += cfg.pair_loss.weight * metrics["val_pair_nll"]
        metrics["val_loss"] = val_loss
        return metrics

    best_loss, best_state, best_epoch, stale = math.inf, None, 0, 0
    best_full: dict[str, np.ndarray] = {}
    best_metrics: dict[str, Any] = {}
    history = []
    if cfg.head_fit == "ridge":
        labeled = np.arange(data.labeled)
        output_weights = torch.tensor([w.vector / len(dimensions)] * len(dimensions) + [w.scalar, w.intensity, w.safety], dtype=torch.float64)
        held_out, fold_alphas = ridge_out_of_fold(frozen, data.targets, labeled, data.group_of[labeled], cfg.ridge_alphas, output_weights, seed)
        standardise(net, frozen[torch.as_tensor(labeled)])
        x, y = ridge_design(frozen, labeled, net.feature_mean, net.feature_std), ridge_targets(data.targets, labeled)
        alpha, errors = choose_ridge_alpha(x, y, data.group_of[labeled], cfg.ridge_alphas, output_weights, seed)
        for step, (a, err) in enumerate(errors.items(), 1):
            history.append({"epoch": step, "ridge_alpha": a, "ridge_cv_error": err})
            if on_epoch:
                on_epoch(step, {"ridge_alpha": a, "ridge_cv_error": err})
        log.info("reward model ridge heads: penalty %g chosen by %d-fold cross-validation over the prompts (errors %s)", alpha, RIDGE_FOLDS,
                 ", ".join(f"{a:g}: {e:.4f}" for a, e in errors.items()))
        set_ridge_heads(net, [ridge_solve(x, y, seq_boot[torch.as_tensor(labeled), m].double(), alpha) for m in range(members)])
        best_full = predict_val()  # human pairs (never fitted) by the final heads; every labeled reply out of fold:
        d = len(dimensions)
        for j, k in enumerate(HEAD_OUTPUTS):
            best_full[k][labeled] = (held_out[:, :d] if k == "vector" else held_out[:, d + j - 1]).numpy()
        best_metrics = {"ridge_alpha": alpha, "ridge_fold_alphas": fold_alphas, **evaluate(best_full)}
        log.info("reward model ridge heads: out of fold (%d prompt folds) they order %s of %d teacher pairs", RIDGE_FOLDS,
                 _pct(best_metrics["val_pairwise_accuracy"]), best_metrics["val_pairs"])
        best_epoch = list(errors).index(alpha) + 1
        best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    epochs = cfg.epochs if cfg.head_fit == "gradient" else 0  # ridge: solved above
    steps_per_epoch = len(data.batches(train_groups, cfg.batch_size, np.random.default_rng(0)))
    progress = Progress("reward model training", epochs * steps_per_epoch, log, unit="steps") if epochs else None
    for epoch in range(1, epochs + 1):
        net.train()
        running: dict[str, float] = {}
        counts: dict[str, int] = {}
        for batch in data.batches(train_groups, cfg.batch_size, rng):
            seqs = torch.as_tensor(batch)
            pooled = frozen[seqs] if frozen is not None else net.pooled(*pad_batch([data.encoded[i] for i in batch], pad))
            heads = net.heads(pooled)
            parts = regression_losses(seqs, heads)
            loss = sum((weights[k] * v for k, v in parts.items()), torch.zeros(()))
            bt = pair_loss(batch, heads["scalar"])
            if bt is not None:
                parts["pair"] = bt
                loss = loss + cfg.pair_loss.weight * bt
            if rationale_head is not None:
                explained = has_rationale[seqs]
                if explained.any():
                    guess = rationale_head(net.dropout(pooled[explained]))
                    parts["rationale"] = (1 - nn.functional.cosine_similarity(guess, rationale_targets[seqs[explained]], dim=-1)).mean()
                    loss = loss + cfg.rationale_weight * parts["rationale"]
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], 1.0)
            optimizer.step()
            for k, v in parts.items():
                running[k] = running.get(k, 0.0) + v.item() * len(batch)
                counts[k] = counts.get(k, 0) + len(batch)
            if progress:
                progress.advance(1, epoch=epoch, loss=f"{loss.item():.4f}")
        metrics = {("train_mse_" if k in weights else "train_loss_") + k: running[k] / counts[k] for k in running}
        full = predict_val()
        metrics.update(evaluate(full))
        history.append({"epoch": epoch, **metrics})
        log.info(
            "reward model epoch %d: val loss %.4f, teacher pair accuracy %s, human pair accuracy %s",
            epoch, metrics["val_loss"], _pct(metrics["val_pairwise_accuracy"]), _pct(metrics.get("val_human_accuracy")),
        )
        if on_epoch:
            on_epoch(epoch, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        if metrics["val_loss"] < best_loss - 1e-6:
            best_loss, best_epoch, stale = metrics["val_loss"], epoch, 0
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
            best_full, best_metrics = full, {k: v for k, v in metrics.items() if not k.startswith("train_")}
        else:
            stale += 1
            if stale >= cfg.early_stopping_patience:
                log.info("early stopping after epoch %d (best epoch %d)", epoch, best_epoch)
                break
    if best_state is None:  # every epoch's validation loss was NaN
        raise ValueError("reward model training diverged (validation loss is not finite); lower reward_model.learning_rate")
    net.load_state_dict(best_state)
    full, final = best_full, best_metrics  # the best epoch's validation predictions and metrics
    fitted = data.labeled if cfg.head_fit == "ridge" else int(sum(len(data.groups[g]) for g in train_groups))
    final.update({"best_epoch": best_epoch, "epochs_run": len(history), "train_sequences": fitted, "val_sequences": len(val_seqs)})
    validation = (f"out of fold: every prompt's replies scored by heads fitted on the other {RIDGE_FOLDS - 1} of {RIDGE_FOLDS} prompt folds "
                  "(penalty chosen inside them); the saved heads are fitted on every prompt; human pairs (never fitted) scored by the saved heads"
                  if cfg.head_fit == "ridge" else f"split by prompt: {cfg.val_fraction:g} of the prompts (and of the human pairs) held out, for early stopping and these figures")
    accuracy, n_val = final["val_pairwise_accuracy"], final["val_pairs"]
    if accuracy is not None and n_val < FEW_VAL_PAIRS:
        p = (accuracy * n_val + 1) / (n_val + 2)  # add-one estimate: 2 of 2 right is not a standard error of 0
        log.warning(
            "only %d held-out teacher pairs: their accuracy %s is +- %.0f points (one standard error); "
            "benchmarks/reward_teacher_agreement.py cross-validates over more (head_fit: ridge scores every prompt out of fold)",
            n_val, _pct(accuracy), 100 * math.sqrt(p * (1 - p) / n_val),
        )

    out_dir.mkdir(parents=True, exist_ok=True)
    calibration, calibration_metrics = calibrate_validation(data, val_seqs, val_pairs, full, list(examples["prompt_id"]), dimensions, out_dir, date,
                                                            source="out-of-fold" if cfg.head_fit == "ridge" else "validation")
    final.update(calibration_metrics)

    backbone = net.backbone = _unwrap_backbone(net.backbone)
    backbone.save_pretrained(out_dir / BACKBONE_DIR)
    tokenizer.save_pretrained(out_dir / BACKBONE_DIR)
    save_file({k: v.contiguous() for k, v in net.head_state_dict().items()}, str(out_dir / HEADS))
    int8 = measure_int8(net, data.encoded[:int8_pool], seed, cfg.batch_size, pad,
                        pooled=None if frozen is None else frozen[:int8_pool], absmax=int8_absmax)
    if int8 is not None:
        save_file({k: v.contiguous() for k, v in int8[0].items()}, str(out_dir / INT8_CALIBRATION))
        log.info("int8 path calibrated on %d training replies: it moves a pair's gap by %.4f (median), so pair_gaps rescores gaps under %.4f in fp32",
                 int8[1]["calibrated_on"], int8[1]["median_gap_error"], int8[1]["recheck_margin"])
    metadata = {
        "dimensions": dimensions,
        "ranges": {"vector": list(VECTOR_RANGE), "scalar": list(SCALAR_RANGE), "reward_intensity": list(INTENSITY_RANGE), "safety_score": list(SAFETY_RANGE)},
        "semantics": {
            "vector": "per dimension: -1 worst, 0 neutral, 1 best",
            "scalar": "overall preference, -1 worst to 1 best",
            "reward_intensity": "0 = should not drive learning, 1 = should drive it strongly",
            "safety_score": "1 = safe to learn from; low values gate learning (skip, down-weight or invert)",
            "uncertainty": f"standard deviation of each output across {cfg.uncertainty.method}"
            + (f" ({members} members)" if cfg.uncertainty.method == "ensemble" else f" ({cfg.uncertainty.mc_samples} passes)" if cfg.uncertainty.method == "mc_dropout" else ""),
        },
        "normalisation": ("heads read features standardised by the training split's mean and spread (feature_mean, feature_std in the heads file); "
                          if cfg.head_fit == "ridge" else "none; ") + "heads are bounded to the label ranges (tanh for vector and scalar, sigmoid for intensity and safety)",
        "max_length": cfg.max_length,
        "backbone": {"source": str(backbone_path), "kind": kind, "pooling": pooling, "finetune": cfg.backbone.finetune,
                     "depth": backbone.config.num_hidden_layers, "layers": None if net.layers is None else list(net.layers)},
        "frame": frame,
        "head_fit": cfg.head_fit,
        "validation": validation,
        "length_feature": cfg.length_feature,
        "members": members,
        "dropout": cfg.dropout,
        "uncertainty": {"method": cfg.uncertainty.method, "mc_samples": cfg.uncertainty.mc_samples},  # members: above
        "losses": {"regression": weights, "pair": cfg.pair_loss.model_dump(), "rationale_weight": cfg.rationale_weight if rationale_head else 0.0},
        "training_data_digest": data_digest,
        "date": date,
        "training_examples": len(examples),
        "human_pairs": n_human,
        "calibration": calibration,
        "int8": None if int8 is None else {**int8[1], "calibration_file": INT8_CALIBRATION},
        "metrics": final,
        "history": history,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(),
    }
    (out_dir / METADATA).write_text(json.dumps(metadata, indent=2, default=float) + "\n")
    return final
