"""The reward network: an HF backbone (cut to a depth, pooled) with heads for the reward vector, scalar,
intensity and safety, each with `members` outputs (a small ensemble on one backbone)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

POOLINGS = ("mean", "last", "last_mean")


def backbone_kind(config: Any) -> str:
    """ "decoder" for causal LMs (pooled at the last real token), else "encoder" (mean pooling)."""
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
    instead of the last one alone. `guards` more columns (`reward.guards`), measured outside the
    backbone, follow the pooled features (`features`). The heads read the features standardised by
    `feature_mean` / `feature_std` (identity unless ridge-fitted heads set them)."""

    def __init__(
        self,
        backbone: nn.Module,
        n_dims: int,
        *,
        members: int = 1,
        pooling: str = "mean",
        dropout: float = 0.1,
        length_feature: bool = False,
        layers: Sequence[int] | None = None,
        guards: int = 0,
        combined: bool = False,
    ):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r}: use one of {', '.join(POOLINGS)}")
        self.layers = None if layers is None else check_layers(layers, backbone.config.num_hidden_layers)
        self.backbone = backbone
        self.n_dims, self.members, self.pooling, self.length_feature = n_dims, members, pooling, length_feature
        hidden = (
            backbone.config.hidden_size
            * (2 if pooling == "last_mean" else 1)
            * (1 if self.layers is None else len(self.layers))
        )
        self.guards = guards
        self.feature_size = hidden + int(length_feature) + guards  # what the heads read
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
        # combined: the scalar is tanh(c . vector + w * people + b) (`reward.combination`), these (D + 2,)
        # c, w, b; `scalar_head` is then unused. The people's score is the last feature column, read as it is.
        self.combined = combined
        if combined:
            self.register_buffer("scalar_weights", torch.zeros(n_dims + 2))

    def _prefix_applies(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> bool:
        p = self.shared_prefix
        return (
            p is not None
            and not torch.is_grad_enabled()
            and input_ids.shape[1] > len(p)
            and bool((input_ids[:, : len(p)] == p).all())
            and bool(attention_mask[:, : len(p) + 1].all())
        )  # every row goes on after it

    def _run(self, **inputs: Any) -> tuple[torch.Tensor, Any]:
        """The backbone's output and the states the heads pool: the last hidden state, or with `layers`
        those layers' states side by side (B, T, H * len(layers))."""
        if self.layers is None:
            out = self.backbone(**inputs)
            return out.last_hidden_state, out
        out = self.backbone(**inputs, output_hidden_states=True)
        return torch.cat([out.hidden_states[i] for i in self.layers], dim=-1), out

    def states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
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
        rest = self._run(
            input_ids=input_ids[:, len(prefix) :],
            attention_mask=attention_mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=False,
        )[0]
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

    def features(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, guards: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, feature_size): `pooled`, then the batch's guard columns (B, guards)."""
        pooled = self.pooled(input_ids, attention_mask)
        if not self.guards:
            return pooled
        if guards is None or guards.shape != (pooled.shape[0], self.guards):
            raise ValueError(
                f"this reward net reads {self.guards} guard columns per row; got "
                f"{None if guards is None else tuple(guards.shape)}"
            )
        return torch.cat([pooled, guards.to(pooled.dtype)], dim=-1)

    def heads(self, pooled: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per member: vector (B, M, D), scalar / reward_intensity / safety_score (B, M)."""
        h = self.dropout((pooled - self.feature_mean) / self.feature_std)
        vector = torch.tanh(self.vector_head(h)).view(-1, self.members, self.n_dims)
        return {
            "vector": vector,
            "scalar": self._combined_scalar(vector, pooled) if self.combined else torch.tanh(self.scalar_head(h)),
            "reward_intensity": torch.sigmoid(self.intensity_head(h)),
            "safety_score": torch.sigmoid(self.safety_head(h)),
        }

    def _combined_scalar(self, vector: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        """(B, M): per member, the combination of the members' mean vector plus that member's own
        deviation, so the members' mean is exactly tanh(c . mean vector + w * people + b) (a reply at least
        as good on every dimension as read, and on the people's score, never scores lower) and their spread
        is the spread of each member's own combination."""
        d = self.n_dims
        c, w, b = self.scalar_weights[:d].to(vector.dtype), self.scalar_weights[d], self.scalar_weights[d + 1]
        offset = (w * pooled[:, -1] + b).to(vector.dtype).unsqueeze(1)  # (B, 1)
        own = torch.tanh(vector @ c + offset)  # (B, M)
        of_mean = torch.tanh(vector.mean(1) @ c + offset[:, 0]).unsqueeze(1)
        return of_mean + own - own.mean(1, keepdim=True)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, guards: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        return self.heads(self.features(input_ids, attention_mask, guards))

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.state_dict().items() if not k.startswith("backbone.")}


def check_layers(layers: Sequence[int], depth: int) -> tuple[int, ...]:
    """`reward_model.backbone.layers` checked against a backbone of `depth` layers: distinct, in 1..depth."""
    chosen = tuple(int(x) for x in layers)
    if not chosen or len(set(chosen)) != len(chosen) or not all(1 <= x <= depth for x in chosen):
        raise ValueError(
            f"reward_model.backbone.layers {list(layers)}: name distinct layers from 1 to {depth} (this backbone's "
            "depth; 1 = the first block's output), e.g. "
            f"[{', '.join(map(str, range(max(1, depth - 2), depth + 1)))}], or null for the last alone"
        )
    return chosen


def member_mean_std(heads: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Mean and (population) standard deviation over the member axis (dim 1) of each head."""
    return {k: v.mean(1) for k, v in heads.items()}, {k: v.std(1, unbiased=False) for k, v in heads.items()}


BACKBONE_REFERENCE = (
    "reference.json"  # in a model's backbone/ folder when the backbone was frozen: where it is and its digest
)


def write_backbone_reference(folder: Path, source: Path | str) -> None:
    """Record a frozen backbone by its name and the digest of its files, instead of copying its weights
    (found again on any machine by `model_refs.find_model`)."""
    from hominem_pipeline.core.lm.model_refs import model_name
    from hominem_pipeline.core.pipeline.artifacts import folder_digest

    folder.mkdir(parents=True, exist_ok=True)
    (folder / BACKBONE_REFERENCE).write_text(
        json.dumps({"name": model_name(source), "sha256": folder_digest(Path(source))}, indent=2) + "\n"
    )


def backbone_source(model_dir: Path) -> Path:
    """The folder a saved model's backbone loads from: its own `backbone/`, or the frozen backbone it
    references, found by the digest recorded at training."""
    from hominem_pipeline.core.lm.model_refs import find_model

    folder = model_dir / "backbone"
    reference = folder / BACKBONE_REFERENCE
    if not reference.is_file():
        return folder
    ref = json.loads(reference.read_text())
    return find_model(ref.get("name") or ref["path"], ref["sha256"], f"{model_dir} reads its frozen backbone")


def load_backbone(source: Path | str) -> tuple[nn.Module, Any]:
    from transformers import AutoModel, AutoTokenizer

    from hominem_pipeline.core.lm.models import quiet_hf_progress

    quiet_hf_progress()
    return AutoModel.from_pretrained(source, dtype=torch.float32), AutoTokenizer.from_pretrained(source)


def layer_stack(backbone: nn.Module) -> tuple[str, nn.ModuleList] | None:
    """The backbone's stack of transformer blocks, with its module path (the outermost `ModuleList` of
    `config.num_hidden_layers` blocks), or None when it has none."""
    total = getattr(backbone.config, "num_hidden_layers", None)
    stacks = [(name, m) for name, m in backbone.named_modules() if isinstance(m, nn.ModuleList) and len(m) == total]
    return min(stacks, key=lambda item: item[0].count(".")) if total and stacks else None


def top_parameters(backbone: nn.Module, layers: int | None) -> list[nn.Parameter]:
    """The parameters of the backbone's last `layers` transformer blocks and of what runs after them (a
    decoder's final norm); None, or a backbone without a layer stack: every parameter."""
    found = layer_stack(backbone) if layers is not None else None
    if found is None:
        return list(backbone.parameters())
    _, stack = found
    top = list(stack)[-layers:]
    in_stack = {id(p) for p in stack.parameters()}
    after = [
        p for n, p in backbone.named_parameters() if id(p) not in in_stack and "embed" not in n
    ]  # final norms, not the input embeddings
    return [p for block in top for p in block.parameters()] + after


def keep_layers(backbone: nn.Module, depth: int | None) -> nn.Module:
    """The backbone cut to its first `depth` transformer layers (None: unchanged). The cut model is a
    plain HF model of that depth: its config says so, so it saves and loads as one (the final norm of a
    decoder, if it has one, still applies)."""
    if depth is None:
        return backbone
    found = layer_stack(backbone)
    if found is None:
        raise ValueError(
            f"reward_model.backbone.depth {depth}: this backbone ({type(backbone).__name__}) has no "
            "layer stack to cut; set depth: null"
        )
    name, stack = found
    total = len(stack)
    if depth > total:
        raise ValueError(
            f"reward_model.backbone.depth {depth} is more than the backbone's {total} layers; use at "
            f"most {total}, or null for all"
        )
    parent = backbone.get_submodule(name.rpartition(".")[0]) if "." in name else backbone
    setattr(parent, name.rpartition(".")[2], nn.ModuleList(list(stack)[:depth]))
    backbone.config.num_hidden_layers = depth
    if isinstance(getattr(backbone.config, "layer_types", None), list):  # per-layer attention kinds (transformers 5)
        backbone.config.layer_types = backbone.config.layer_types[:depth]
    return backbone
