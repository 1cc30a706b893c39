"""Guard features: what the judge's network reads badly, measured by the student itself and handed to
the heads beside the backbone's pooled state (`reward_model.guards`).

The 135M judge rates a string of emoji, a fluent reply to another question or a plain factual error
about as well as the right reply. The student's own language model sees these: a reply it finds
unlikely token by token is not fluent, and a reply that the prompt makes no more likely than it is on
its own does not answer that prompt (nor, for a plain question, state what the model knows). Each
guard is one column per reply:

    reply_logp    mean log-probability per reply token given the prompt (the student's chat template)
    prompt_gain   reply_logp minus the same mean without the prompt: how much the prompt explains the reply

The heads weigh the columns like any other feature (ridge, standardised); a guard that does not help
people's pairs gets a small weight. They cost two passes of the full student per reply.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from hominem_pipeline.core.common.progress import Progress

log = logging.getLogger(__name__)

GUARDS = {
    "reply_logp": "the student's mean log-probability per reply token, given the prompt (fluency)",
    "prompt_gain": "reply_logp minus the same without the prompt (does the reply answer this prompt)",
}
GUARD_MAX_LENGTH = 384  # tokens of prompt + reply in the student's chat template (the prompt cut from the left)
GUARD_BATCH = 8


def check_guards(names: Sequence[str]) -> tuple[str, ...]:
    unknown = [n for n in names if n not in GUARDS]
    if unknown or len(set(names)) != len(names):
        raise ValueError(
            f"reward_model.guards {list(names)}: name each at most once, from {', '.join(GUARDS)}; [] for none"
        )
    return tuple(names)


def reply_token_logps(
    model: Any,
    sequences: Sequence[tuple[list[int], int]],
    pad_id: int,
    batch_size: int = GUARD_BATCH,
    progress: Progress | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed log-probability of each sequence's reply tokens, their count), in the order given: the
    base network once per batch of similar length, the LM head on the reply positions alone (a long
    prompt costs its layers, not its 49k-way projections)."""
    from hominem_pipeline.core.policy.sequences import right_padded

    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i][0]))
    sums, counts = torch.zeros(len(sequences), dtype=torch.float64), torch.zeros(len(sequences), dtype=torch.long)
    body, head = model.get_decoder(), model.get_output_embeddings()
    device = model.device
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            ids, mask = right_padded([sequences[i][0] for i in rows], pad_id)
            hidden = body(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
            for j, i in enumerate(rows):
                seq, begin = sequences[i]
                first = max(begin, 1)
                if first >= len(seq):
                    continue
                logits = head(hidden[j, first - 1 : len(seq) - 1]).float()
                picked = logits.log_softmax(-1).gather(-1, torch.tensor(seq[first:], device=device).unsqueeze(1))[:, 0]
                sums[i], counts[i] = picked.cpu().double().sum().item(), len(picked)  # no float64 on a device
            if progress:
                progress.advance(len(rows))
    return sums, counts


class GuardScorer:
    """The guard columns of (prompt, reply) exchanges, from the student at `student` (loaded on first use).
    The columns of the last `MEMO` exchanges are kept by content: the gate scores a candidate's replies
    for its health index and again for its win rate, and the student is the costly part of both."""

    MEMO = 4096

    def __init__(
        self,
        names: Sequence[str],
        student: Path | str,
        cache: Path | None = None,
        shipped: Path | None = None,
        device: Any = None,
    ):
        """`cache`: a folder of feature caches (`feature_cache`) where the columns of every exchange
        measured are also kept on disk by content, for the next process (None: memoised in this one only);
        `shipped`: the project's shipped rows (`feature_cache.SHIPPED_FEATURES`), read with the cache;
        `device`: where the student runs (`core.lm.device`; None: the CPU)."""
        self.names = check_guards(names)
        self.device = device
        self.student = Path(student)
        self.cache_folder, self.shipped = cache, shipped
        self._cache: Any = None
        self._model: Any = None
        self._tokenizer: Any = None
        self._memo: OrderedDict[tuple[str, str], torch.Tensor] = OrderedDict()

    def disk_cache(self):
        """The on-disk cache of this student's columns (None without a cache folder)."""
        if self.cache_folder is not None and self._cache is None:
            from hominem_pipeline.core.pipeline.artifacts import folder_digest
            from hominem_pipeline.core.reward.feature_cache import FeatureCache

            self._cache = FeatureCache(
                self.cache_folder,
                ["guards", folder_digest(self.student), self.names, GUARD_MAX_LENGTH],
                len(self.names),
                shipped=self.shipped,
            )
        return self._cache

    def __len__(self) -> int:
        return len(self.names)

    def load(self) -> None:
        """Load the student now (else on first use)."""
        self._load()

    def _load(self) -> None:
        if self._model is None:
            from hominem_pipeline.core.lm.models import load_student

            self._model, self._tokenizer = load_student(self.student, self.device)

    def __call__(self, prompts: Sequence[str], replies: Sequence[str]) -> torch.Tensor:
        """(n, len(names)) float32, in the order of `names`."""
        if not self.names:
            return torch.zeros(len(prompts), 0)
        keys = list(zip(prompts, replies))
        todo = list(dict.fromkeys(k for k in keys if k not in self._memo))
        if todo:
            for key, row in zip(todo, self._compute([p for p, _ in todo], [r for _, r in todo])):
                self._memo[key] = row
            while len(self._memo) > self.MEMO:
                self._memo.popitem(last=False)
        for key in keys:
            self._memo.move_to_end(key)
        return torch.stack([self._memo[k] for k in keys]) if keys else torch.zeros(0, len(self.names))

    def _compute(self, prompts: Sequence[str], replies: Sequence[str]) -> torch.Tensor:
        from hominem_pipeline.core.reward.feature_cache import cached_rows, text_key

        keys = [text_key(p, r) for p, r in zip(prompts, replies)]
        return cached_rows(
            self.disk_cache(),
            keys,
            lambda todo: self._measure([prompts[i] for i in todo], [replies[i] for i in todo]),
            len(self.names),
        )

    def _measure(self, prompts: Sequence[str], replies: Sequence[str]) -> torch.Tensor:
        from hominem_pipeline.core.policy.sequences import encode

        self._load()
        tok = self._tokenizer
        with_prompt = [encode(tok, p, r, GUARD_MAX_LENGTH) for p, r in zip(prompts, replies)]
        alone = [encode(tok, "", r, GUARD_MAX_LENGTH) for r in replies]
        progress = (
            Progress("reward model guards", 2 * len(prompts), log, unit="replies") if len(prompts) > 256 else None
        )
        s, c = reply_token_logps(self._model, with_prompt, tok.pad_token_id, progress=progress)
        s0, c0 = reply_token_logps(self._model, alone, tok.pad_token_id, progress=progress)
        logp = s / c.clamp(min=1)
        columns = {"reply_logp": logp, "prompt_gain": logp - s0 / c0.clamp(min=1)}
        return torch.stack([columns[n] for n in self.names], 1).float()
