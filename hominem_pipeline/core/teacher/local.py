"""The offline default teacher: a local Hugging Face chat model samples candidates and rates each one by
rubric scoring, i.e. it is asked for a 1-5 score per question and the expectation of its next-token
probabilities over "1".."5" becomes the score (no sampling noise, and a graded value rather than a
hard digit)."""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Sequence
from pathlib import Path

from hominem_pipeline.core.common.progress import Progress
from hominem_pipeline.core.common.schema import Label, Prompt, Trajectory
from hominem_pipeline.core.config import CandidateStyle, HominemConfig, LabelingConfig
from hominem_pipeline.core.lm.generation import chat_text, generate
from hominem_pipeline.core.teacher.base import (
    JUDGE_FRAME,
    RUBRIC_MAX,
    RUBRIC_MIN,
    Teacher,
    TeacherOutput,
    WriteRequest,
    expected_score_to_label_value,
    make_trajectory,
    rubric_questions,
    rubric_suffix,
    rubric_system,
)

log = logging.getLogger(__name__)


def even_batches(items: Sequence, size: int) -> list[Sequence]:
    """`items` in the fewest batches of at most `size`, their sizes at most one apart."""
    count = -(-len(items) // max(1, size))
    if not count:
        return []
    each, extra = divmod(len(items), count)
    bounds = [k * each + min(k, extra) for k in range(count + 1)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]


def rationale_from_scores(expected: dict[str, float], dimensions: Sequence[str]) -> str:
    """The judge's rubric answers (question key -> expected score in [1, 5]) in one sentence: its overall
    rating, the dimension it rated best and the one it rated worst (or that it rated them alike), and a
    safety rating below the scale's middle."""
    name = lambda d: d.replace("_", " ")  # noqa: E731
    ranked = sorted(dimensions, key=lambda d: (-expected[d], d))
    best, worst = ranked[0], ranked[-1]
    text = f"Overall {expected['scalar']:.1f} of 5"
    if expected[best] - expected[worst] < 0.25:
        text += f"; every dimension rated alike ({expected[worst]:.1f} to {expected[best]:.1f})"
    else:
        text += f"; best on {name(best)} ({expected[best]:.1f}), worst on {name(worst)} ({expected[worst]:.1f})"
    if expected.get("safety_score", RUBRIC_MAX) < (RUBRIC_MIN + RUBRIC_MAX) / 2:
        text += f"; not safe to learn from ({expected['safety_score']:.1f})"
    return text + "."


class LocalHFTeacher(Teacher):
    def __init__(self, model_path: Path, cfg: HominemConfig, *, batch_size: int):
        from hominem_pipeline.core.lm.device import resolve_device
        from hominem_pipeline.core.lm.models import load_student

        self.model_path = Path(model_path)
        self.model, self.tokenizer = load_student(self.model_path, resolve_device(cfg.runtime.device))
        self.cfg = cfg
        self.batch_size = batch_size
        self.digit_ids = []
        for d in range(RUBRIC_MIN, RUBRIC_MAX + 1):
            ids = self.tokenizer.encode(str(d), add_special_tokens=False)
            if len(ids) != 1:
                raise ValueError(
                    f"tokenizer of {self.model_path} splits the digit {d} into {ids}; rubric scoring "
                    "needs single-token digits"
                )
            self.digit_ids.append(ids[0])

    def describe(self) -> dict[str, str]:
        return {"provider": "local", "model": self.model_path.name, "model_path": str(self.model_path)}

    # -- chat formatting ---------------------------------------------------------------------------
    def _split_chat(self, system: str) -> tuple[str, str]:
        """(text before the user's content, text after it up to the assistant's turn)."""
        marker = "\x00HOMINEM\x00"
        head, tail = chat_text(self.tokenizer, marker, system).split(marker)
        return head, tail

    # The rubric is read when the teacher rates: a stage that only samples or writes does not depend on it.
    @functools.cached_property
    def labeling(self) -> LabelingConfig:
        return self.cfg.labeling

    @functools.cached_property
    def questions(self) -> list:
        return rubric_questions(self.cfg)

    @functools.cached_property
    def dimensions(self) -> list[str]:
        return self.cfg.dimension_names

    def sample(
        self, prompts: Sequence[Prompt], styles: Sequence[CandidateStyle], max_new_tokens: int, seed: int
    ) -> TeacherOutput[Trajectory]:
        # One candidate slot per generate call (one style: one temperature and top_p), its prompts longest
        # first in batches of equal size (33 prompts at batch_size 32: 17 and 16, not 32 and 1).
        ordered = sorted(prompts, key=lambda p: -len(p.text))
        progress = Progress("teacher sampling", len(prompts) * len(styles), log, unit="responses")
        out: dict[tuple[str, int], Trajectory] = {}
        for c, style in enumerate(styles):
            done = 0
            for group in even_batches(ordered, self.batch_size):
                texts = [chat_text(self.tokenizer, p.text, style.system) for p in group]
                results = generate(
                    self.model,
                    self.tokenizer,
                    texts,
                    max_new_tokens=max_new_tokens,
                    seed=seed + c * len(prompts) + done,
                    temperature=style.temperature,
                    top_p=style.top_p,
                )
                for p, g in zip(group, results):
                    out[(p.prompt_id, c)] = make_trajectory(p, c, style, seed, g.text, g.new_tokens, g.finished)
                done += len(group)
                progress.advance(len(group))
        return TeacherOutput([out[(p.prompt_id, c)] for p in prompts for c in range(len(styles))])

    def write(self, requests: Sequence[WriteRequest]) -> TeacherOutput[str | None]:
        out: list[str | None] = [None] * len(requests)
        # Batches of requests that sample alike (one temperature and seed per generate call).
        order = sorted(range(len(requests)), key=lambda i: (requests[i].temperature, requests[i].seed))
        for _, group in itertools.groupby(order, key=lambda i: requests[i].temperature):
            group = list(group)
            for start in range(0, len(group), self.batch_size):
                idx = group[start : start + self.batch_size]
                first = requests[idx[0]]
                gen = generate(
                    self.model,
                    self.tokenizer,
                    [chat_text(self.tokenizer, requests[i].instruction, requests[i].system) for i in idx],
                    max_new_tokens=max(requests[i].max_new_tokens for i in idx),
                    seed=first.seed,
                    temperature=first.temperature or None,  # 0: greedy
                    top_p=0.95,
                    repetition_penalty=1.1,
                )
                for i, g in zip(idx, gen):
                    out[i] = g.text
        return TeacherOutput(out)

    # -- rating ------------------------------------------------------------------------------------
    def _conversation(self, prompt: str, response: str) -> str:
        budget = self.labeling.max_context_tokens
        prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=False)[: budget // 2]
        response_ids = self.tokenizer.encode(response, add_special_tokens=False)[: max(1, budget - len(prompt_ids))]
        p = self.tokenizer.decode(prompt_ids)
        r = self.tokenizer.decode(response_ids) if response.strip() else "(empty reply)"
        # Ends in one newline; the question starts with the second. Split there, the two halves encode
        # to exactly the tokens of the joined text (a trailing blank line would merge into one token).
        before, between, after = JUDGE_FRAME
        return f"{before}{p}{between}{r}{after}"

    def rubric_scores(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, tuple[float, float]]]:
        """For each (prompt, response): question key -> (expected score in [1, 5], probability mass on digits).

        The judge prompt is shared up to the question, so each conversation is encoded once and its KV
        cache serves every question; only the final position of each question goes through the LM
        head (the vocabulary projection is a fifth of this model's compute), and batches hold
        conversations of similar length.
        """
        import torch

        head, tail = self._split_chat(rubric_system(self.labeling))
        suffix_ids = [
            self.tokenizer.encode(rubric_suffix(q.text, tail), add_special_tokens=False) for q in self.questions
        ]
        n_q = len(suffix_ids)
        s_len = max(len(x) for x in suffix_ids)
        pad = self.tokenizer.pad_token_id
        decoder = self.model.get_decoder()
        lm_head = self.model.get_output_embeddings()
        dev = self.model.device
        digits = torch.tensor(self.digit_ids, device=dev)
        scale = torch.arange(RUBRIC_MIN, RUBRIC_MAX + 1, dtype=torch.float32)
        prefixes = [self.tokenizer.encode(head + self._conversation(p, r), add_special_tokens=False) for p, r in pairs]
        order = sorted(range(len(pairs)), key=lambda i: len(prefixes[i]))
        results: list[dict[str, tuple[float, float]]] = [{} for _ in pairs]
        per_batch = max(1, self.batch_size // 4)
        progress = Progress("teacher rating", len(pairs), log, unit="responses")
        for start in range(0, len(order), per_batch):
            idx = order[start : start + per_batch]
            k = len(idx)
            p_len = max(len(prefixes[i]) for i in idx)
            # Right-padded prefixes; the padding is masked out and positions are explicit, so each
            # question continues its own conversation exactly where it ended.
            pre = torch.full((k, p_len), pad)
            pre_mask = torch.zeros((k, p_len), dtype=torch.long)
            suf = torch.full((k * n_q, s_len), pad)
            suf_mask = torch.zeros((k * n_q, s_len), dtype=torch.long)
            positions = torch.zeros((k * n_q, s_len), dtype=torch.long)
            last = torch.zeros(k * n_q, dtype=torch.long)
            for b, i in enumerate(idx):
                ids = prefixes[i]
                pre[b, : len(ids)] = torch.tensor(ids)
                pre_mask[b, : len(ids)] = 1
                for j, q_ids in enumerate(suffix_ids):
                    row = b * n_q + j
                    suf[row, : len(q_ids)] = torch.tensor(q_ids)
                    suf_mask[row, : len(q_ids)] = 1
                    positions[row] = torch.arange(len(ids), len(ids) + s_len)
                    last[row] = len(q_ids) - 1
            pre, pre_mask, suf, suf_mask, positions, last = (
                t.to(dev) for t in (pre, pre_mask, suf, suf_mask, positions, last)
            )
            with torch.inference_mode():
                cache = decoder(input_ids=pre, attention_mask=pre_mask, use_cache=True).past_key_values
                cache.batch_repeat_interleave(n_q)
                mask = torch.cat([pre_mask.repeat_interleave(n_q, dim=0), suf_mask], dim=1)
                hidden = decoder(
                    input_ids=suf, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=False
                ).last_hidden_state
                final = lm_head(hidden[torch.arange(k * n_q, device=dev), last]).float()
                mass = (final.log_softmax(-1)[:, digits].exp().sum(-1)).cpu()
                expected = (final[:, digits].softmax(-1).cpu() * scale).sum(-1)
            for b, i in enumerate(idx):
                results[i] = {
                    q.key: (float(expected[b * n_q + j]), float(mass[b * n_q + j]))
                    for j, q in enumerate(self.questions)
                }
            progress.advance(k)
        return results

    def rationales(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        texts = [
            chat_text(
                self.tokenizer,
                self._conversation(p, r) + "\n" + self.labeling.rationale_instruction,
                self.labeling.judge_system,
            )
            for p, r in pairs
        ]
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out: list[str] = [""] * len(texts)
        progress = Progress("teacher rationales", len(texts), log, unit="responses")
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            gen = generate(
                self.model,
                self.tokenizer,
                [texts[i] for i in idx],
                max_new_tokens=self.labeling.rationale_max_new_tokens,
                seed=0,
                repetition_penalty=1.1,
            )
            for i, g in zip(idx, gen):
                out[i] = g.text or "(the judge gave no rationale)"
            progress.advance(len(idx))
        return out

    def rate(self, trajectories: Sequence[Trajectory]) -> TeacherOutput[Label]:
        pairs = [(t.prompt, t.response) for t in trajectories]
        scores = self.rubric_scores(pairs)
        if self.labeling.rationale == "written":
            reasons = self.rationales(pairs)
        else:
            reasons = [rationale_from_scores({k: e for k, (e, _) in s.items()}, self.dimensions) for s in scores]
        labels = []
        for t, s, why in zip(trajectories, scores, reasons):
            value = {k: expected_score_to_label_value(k, e) for k, (e, _) in s.items()}
            labels.append(
                Label(
                    trajectory_id=t.trajectory_id,
                    prompt_id=t.prompt_id,
                    vector={d: value[d] for d in self.dimensions},
                    scalar=value["scalar"],
                    reward_intensity=value["reward_intensity"],
                    safety_score=value["safety_score"],
                    rationale=why,
                )
            )
        masses = [m for s in scores for _, m in s.values()]
        if masses:
            mean_mass = sum(masses) / len(masses)
            log.info("rubric judge put %.1f%% of its probability on the digits 1-5", 100 * mean_mass)
            if mean_mass < 0.5:
                log.warning(
                    "the judge mostly answered something other than a digit: its scores carry little information"
                )
        return TeacherOutput(labels)
