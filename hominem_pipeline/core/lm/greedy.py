"""Greedy decoding of many prompts at once, each with its own token limit, on one shared KV cache.

`model.generate` decodes one left-padded batch until its longest reply ends: every row pays for every step, and
a batch pays a CPU step's fixed cost (about 50 ms for the 135M student on 2 cores, whatever the rows) until its
last row is done. Here:
- the first tokens every prompt shares (a chat template's system turn) are read once, and each row's cache starts
  with a copy of them;
- the rest of each prompt is read in groups of like length (little padding), and the groups' caches are joined into
  one batch (`lm.rows`);
- a row that ends (its end token or its own limit) leaves the batch with the next few that end, and waiting prompts
  take the places they leave.
So replies of every limit share full steps, and few steps are spent on finished rows.

The replies are those `model.generate` gives greedy with the same repetition penalty and plain start, one prompt at
a time: the penalty reads each row's own tokens (the prompt's and the reply's), never padding, so a reply does not
depend on the batch it was decoded in, but where two tokens are nearly tied in float arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hominem_pipeline.core.lm import rows as row_cache
from hominem_pipeline.core.lm.generation import Generated, symbol_token_ids
from hominem_pipeline.core.lm.rows import prompt_positions

PREFILL_TOKENS = 4096  # prompt tokens (padding included) read in one forward pass
MIN_SHARED = 8  # the first tokens every prompt shares (a chat template's system turn) are read once, if this many


def greedy(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    limits: Sequence[int] | int,
    *,
    repetition_penalty: float = 1.0,
    plain_start: bool = False,
    rows: int = 96,
    done: Callable[[int], None] | None = None,
) -> list[Generated]:
    """Greedy replies to `texts` (prompts as the model reads them, `messages_text`), each at most its `limits`
    tokens (one int: all), `rows` of them decoded at a time (1-1024); `done(n)` is told as replies end."""
    import torch

    n = len(texts)
    limits = [int(limits)] * n if isinstance(limits, int) else [int(x) for x in limits]
    if len(limits) != n:
        raise ValueError(f"{len(limits)} token limits for {n} prompts; give one per prompt, or one int")
    if any(x < 1 for x in limits):
        raise ValueError(f"token limits {sorted(set(limits))[:3]} include one below 1; each reply needs at least 1")
    if not 1 <= rows <= 1024:
        raise ValueError(f"rows {rows} is outside 1-1024: the replies decoded together")
    if not n:
        return []
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    if any(not ids for ids in encoded):
        raise ValueError("a prompt is empty; greedy decoding needs at least one token to read")
    dev = next(model.parameters()).device
    state = _Batch(model, tokenizer.eos_token_id, repetition_penalty, len(tokenizer), dev)
    suppress = torch.tensor(symbol_token_ids(tokenizer), dtype=torch.long) if plain_start else None
    shared = _shared_prefix(encoded)
    if shared >= MIN_SHARED:
        state.share(encoded[0][:shared])
    # Longest prompts first: a joined batch is as long as its longest row, so short rows join it later cheaply.
    waiting = sorted(range(n), key=lambda i: (-len(encoded[i]), i))
    out: list[Generated | None] = [None] * n
    with torch.inference_mode():
        while waiting or state.live:
            room = rows - state.live
            if waiting and room > 0 and (not state.size or room >= max(1, rows // 4) or len(waiting) <= room):
                take, waiting = waiting[:room], waiting[room:]
                state.admit(take, [encoded[i] for i in take], [limits[i] for i in take], suppress)
            for i, ids, finished in state.step():
                text = tokenizer.decode(ids, skip_special_tokens=True).strip()
                out[i] = Generated(text, len(ids), finished)
                if done is not None:
                    done(1)
    return [g for g in out if g is not None]


def decode_as_evaluated(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    limits: Sequence[int] | int,
    cfg: Any,
    what: str,
    unit: str = "replies",
) -> list[Generated]:
    """`greedy` as the evaluation decodes (`cfg`: its `EvaluationConfig`): its repetition penalty and plain start,
    `cfg.batch_size` rows at a time, with progress; each of `texts` (as the model reads them) to its token limit."""
    import logging

    from hominem_pipeline.core.common.progress import Progress

    progress = Progress(what, len(texts), logging.getLogger(__name__), unit=unit)
    return greedy(
        model,
        tokenizer,
        texts,
        limits,
        repetition_penalty=cfg.repetition_penalty,
        plain_start=cfg.plain_start,
        rows=cfg.batch_size,
        done=progress.advance,
    )


class _Batch:
    """The rows being decoded: their KV cache (left-padded to one length), attention mask, next positions, the
    tokens each has seen (for the repetition penalty), the next token each reads, and its reply so far."""

    def __init__(self, model: Any, eos: int, penalty: float, vocab: int, device: Any):
        self.model, self.eos, self.penalty, self.vocab, self.device = model, eos, penalty, vocab, device
        self.index: list[int] = []  # each row's prompt index
        self.limit: list[int] = []
        self.reply: list[list[int]] = []
        self.cache: Any = None  # the model's DynamicCache: per layer keys and values (rows, heads, T, dim)
        self.mask = self.position = self.seen = self.next = None
        self.prefix: tuple[list[int], list[tuple[Any, Any]]] | None = None  # shared tokens, their keys and values

    @property
    def size(self) -> int:
        return len(self.index)

    @property
    def live(self) -> int:
        """Rows still decoding (the others ended, and leave with the next few that end)."""
        return sum(i >= 0 for i in self.index)

    def admit(self, index: list[int], prompts: list[list[int]], limits: list[int], suppress: Any) -> None:
        """Read `prompts` (in groups of like length) and join them to the batch, their first tokens chosen."""
        import torch

        if self.live < self.size:
            self._keep([r for r, i in enumerate(self.index) if i >= 0])

        groups, start = [], 0
        while start < len(prompts):
            longest = len(prompts[start])
            count = max(1, min(len(prompts) - start, PREFILL_TOKENS // longest))
            groups.append((start, start + count))
            start += count
        shared = 0 if self.prefix is None else len(self.prefix[0])
        for a, b in groups:
            rest = [p[shared:] for p in prompts[a:b]]
            longest = max(len(p) for p in rest)
            ids = torch.full((b - a, longest), self.eos, dtype=torch.long)
            mask = torch.ones((b - a, shared + longest), dtype=torch.long)
            mask[:, shared:] = 0
            for r, p in enumerate(rest):
                ids[r, longest - len(p) :] = torch.tensor(p)
                mask[r, shared + longest - len(p) :] = 1
            position = prompt_positions(mask)  # the prefix's, then each row's own after it (padding between)
            out = self.model(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                position_ids=position[:, shared:].to(self.device),
                past_key_values=self._prefix_cache(b - a),
                use_cache=True,
                logits_to_keep=1,
            )
            seen = torch.zeros((b - a, self.vocab), dtype=torch.bool, device=self.device)
            for r, p in enumerate(prompts[a:b]):
                seen[r, torch.tensor(p, device=self.device)] = True
            logits = out.logits[:, -1, :].float()
            if suppress is not None:
                logits[:, suppress.to(self.device)] = float("-inf")
            self._join(out.past_key_values, mask.to(self.device), position[:, -1:].to(self.device) + 1, seen, logits)
        self.index += index
        self.limit += limits
        self.reply += [[] for _ in index]

    def share(self, prefix: list[int]) -> None:
        """Read `prefix`, the tokens every prompt starts with, once: each row's cache starts with a copy of it."""
        import torch

        out = self.model(input_ids=torch.tensor([prefix], device=self.device), use_cache=True, logits_to_keep=1)
        self.prefix = (prefix, [(layer.keys, layer.values) for layer in out.past_key_values.layers])

    def _prefix_cache(self, rows: int) -> Any:
        """A cache of `rows` rows holding the shared prefix (None: none is shared)."""
        if self.prefix is None:
            return None
        from transformers import DynamicCache

        layers = [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in self.prefix[1]]
        return DynamicCache(ddp_cache_data=layers, config=self.model.config)

    def _join(self, cache: Any, mask: Any, position: Any, seen: Any, logits: Any) -> None:
        """Add rows (their cache, mask, next position, seen tokens, and the logits of their first token)."""
        import torch

        chosen = self._choose(logits, seen)
        if self.cache is None:
            self.mask = row_cache.join(None, None, cache, mask)
            self.cache, self.position, self.seen, self.next = cache, position, seen, chosen
            return
        self.mask = row_cache.join(self.cache, self.mask, cache, mask)
        self.position = torch.cat([self.position, position])
        self.seen = torch.cat([self.seen, seen])
        self.next = torch.cat([self.next, chosen])

    def _choose(self, logits: Any, seen: Any) -> Any:
        """The greedy token of each row, its seen tokens penalised as `RepetitionPenaltyLogitsProcessor` does;
        marks the chosen tokens seen."""
        import torch

        if self.penalty != 1.0:
            logits = torch.where(seen, torch.where(logits < 0, logits * self.penalty, logits / self.penalty), logits)
        chosen = logits.argmax(-1)
        seen[torch.arange(len(chosen), device=seen.device), chosen] = True
        return chosen

    def step(self) -> list[tuple[int, list[int], bool]]:
        """Take each row's chosen token; returns the rows that ended (their prompt index, reply tokens, whether the
        end token ended it), which leave the batch once an eighth of it has ended; the rest read their token and
        choose the next."""
        import torch

        chosen = self.next.tolist()
        ended = []
        for r, token in enumerate(chosen):
            if self.index[r] < 0:
                continue
            if token != self.eos:
                self.reply[r].append(token)
            if token == self.eos or len(self.reply[r]) >= self.limit[r]:
                ended.append((self.index[r], self.reply[r], token == self.eos))
                self.index[r] = -1
        live = self.live
        # A row that ended leaves with others (each leaving copies the cache): until then it decodes unread.
        if live < self.size and (not live or self.size - live >= max(1, self.size // 8)):
            self._keep([r for r, i in enumerate(self.index) if i >= 0])
        if not live:
            return ended
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.size, 1))], dim=1)
        out = self.model(
            input_ids=self.next[:, None],
            attention_mask=self.mask,
            position_ids=self.position,
            past_key_values=self.cache,
            use_cache=True,
        )
        self.position = self.position + 1
        self.next = self._choose(out.logits[:, -1, :].float(), self.seen)
        return ended

    def _keep(self, keep: list[int]) -> None:
        """Only rows `keep` stay; the cache's leading columns no row reads any more are cut."""
        import torch

        self.index = [self.index[r] for r in keep]
        self.limit = [self.limit[r] for r in keep]
        self.reply = [self.reply[r] for r in keep]
        if not keep:
            self.cache = self.mask = self.position = self.seen = self.next = None
            return
        self.mask = row_cache.keep(self.cache, self.mask, keep)
        index = torch.tensor(keep, device=self.device)
        self.position, self.seen, self.next = self.position[index], self.seen[index], self.next[index]


def _shared_prefix(encoded: list[list[int]]) -> int:
    """How many first tokens every prompt shares, leaving each at least its last token to read itself."""
    shortest = min(len(ids) for ids in encoded) - 1
    first = encoded[0]
    for n in range(shortest):
        if any(ids[n] != first[n] for ids in encoded):
            return n
    return max(shortest, 0)
