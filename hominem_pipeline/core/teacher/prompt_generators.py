"""Prompt generators: more, and harder, prompts than the hand-written seeds.

- templated: slots in `config/prompts/templates.yaml` filled by a seeded draw;
- perturbation: a seed prompt with added conflict, ambiguity or emotional intensity, or made typo'd
  or terse (rule-based, so free and exactly repeatable);
- evolutionary: the teacher rewrites a prompt to be harder along a named axis (Evol-Instruct);
- freeform: the teacher writes a new prompt from an instruction, a category and a domain.

Every generator is deterministic under its seed (the teacher ones through the teacher's seed or the
API call cache). `deduplicate` then drops near-duplicates: the same normalised text, or an embedding
cosine similarity at or above the threshold, against every known prompt and each other.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Formatter

import numpy as np
import yaml

from hominem_pipeline.core.common.schema import Prompt
from hominem_pipeline.core.config import HominemConfig, PromptGeneratorsConfig
from hominem_pipeline.core.pipeline.artifacts import fingerprint

log = logging.getLogger(__name__)

Embed = Callable[[list[str]], np.ndarray]


class TemplateFileError(ValueError):
    """The template file is missing or malformed."""


def normalize(text: str) -> str:
    """Lowercase words only: what two prompts share when they differ in case, punctuation or spacing."""
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


def _prompt_id(source: str, seed: int, text: str) -> str:
    return f"gen-{source[:4]}-{fingerprint([seed, source, text], 10)}"


# --- templated -------------------------------------------------------------------------------------


def _slot_names(template: str) -> list[str]:
    """The template's slots, each once, in the order they appear: the draws for them follow this order,
    so it must not depend on the process (a set's order of strings does, through hash randomisation)."""
    return list(dict.fromkeys(f for _, f, _, _ in Formatter().parse(template) if f))


def load_templates(path: Path, categories: list[str]) -> tuple[dict[str, list[str]], list[dict]]:
    if not path.is_file():
        raise TemplateFileError(
            f"template file {path} does not exist; set prompts.generators.templated.file or its count to 0"
        )
    raw = yaml.safe_load(path.read_text()) or {}
    slots, templates = raw.get("slots"), raw.get("templates")
    if not isinstance(slots, dict) or not isinstance(templates, list) or not templates:
        raise TemplateFileError(
            f"{path} must hold `slots:` (name -> list of fillers) and a non-empty `templates:` list"
        )
    for i, t in enumerate(templates):
        if not isinstance(t, dict) or not {"text", "category", "difficulty"} <= set(t):
            raise TemplateFileError(f"{path}: template {i} needs text, category and difficulty, got {t!r}")
        if t["category"] not in categories:
            raise TemplateFileError(
                f"{path}: template {i} has category {t['category']!r}; allowed (prompts.categories): {categories}"
            )
        names = _slot_names(t["text"])
        missing = sorted(n for n in names if not slots.get(n))
        if missing:
            raise TemplateFileError(
                f"{path}: template {i} uses slots {missing} that `slots:` does not list (or lists empty)"
            )
    return slots, templates


def templated(path: Path, categories: list[str], count: int, seed: int) -> list[Prompt]:
    slots, templates = load_templates(path, categories)
    rng = random.Random(seed)
    out = []
    for i in range(count):
        t = templates[i % len(templates)] if i < len(templates) else rng.choice(templates)
        names = _slot_names(t["text"])
        text = t["text"].format(**{n: rng.choice(slots[n]) for n in names})
        text = text[0].upper() + text[1:]
        out.append(
            Prompt(
                prompt_id=_prompt_id("templated", seed, text),
                text=text,
                category=t["category"],
                difficulty=int(t["difficulty"]),
                tags=["templated"],
                source="templated",
            )
        )
    rng.shuffle(out)
    return out


# --- perturbation ----------------------------------------------------------------------------------

CONFLICT = [
    "My family thinks the opposite, and they're usually right about these things.",
    "Part of me agrees, but my partner says I'm being unfair, and now I don't know.",
    "My best friend told me to do the exact opposite of what my gut says.",
]
AMBIGUITY = [
    "It's complicated and I can't really share the details.",
    "I'm not sure I'm describing it right, honestly.",
    "There's more to it, but I'd rather not get into it.",
]
INTENSITY = [
    "I haven't slept in two days over this.",
    "I'm honestly shaking as I type this.",
    "I feel like I'm falling apart.",
]
FUNCTION_WORDS = {
    "a",
    "an",
    "the",
    "in",
    "on",
    "of",
    "to",
    "for",
    "with",
    "and",
    "or",
    "but",
    "my",
    "our",
    "at",
    "that",
}
QWERTY_NEIGHBOURS = {
    "a": "s",
    "e": "r",
    "i": "o",
    "o": "i",
    "n": "m",
    "t": "r",
    "s": "a",
    "r": "e",
    "h": "j",
    "l": "k",
}


def _typos(text: str, rng: random.Random) -> str:
    words = text.split()
    for i, w in enumerate(words):
        if len(w) > 3 and rng.random() < 0.35:
            j = rng.randrange(1, len(w) - 1)
            if rng.random() < 0.5:
                w = w[:j] + w[j + 1] + w[j] + w[j + 2 :]  # swap two letters
            else:
                w = w[:j] + QWERTY_NEIGHBOURS.get(w[j].lower(), w[j]) + w[j + 1 :]  # hit the key next door
            words[i] = w
    return " ".join(words).replace("'", "").lower()


def _terse(text: str) -> str:
    first = re.split(r"(?<=[.?!])\s+", text.strip())[0]
    words = re.sub(r"^(please|hi|hey|so|honestly|okay|ok)[,!]?\s+", "", first, flags=re.I).split()
    words = words[:10]
    while len(words) > 3 and words[-1].lower().strip(".,!?") in FUNCTION_WORDS:
        words.pop()
    return " ".join(words).rstrip(".,!?").lower() + ("?" if "?" in first else "")


def perturb(prompt: Prompt, kind: str, seed: int) -> Prompt:
    rng = random.Random(f"{seed}-{prompt.prompt_id}-{kind}")
    harder = kind in ("conflict", "ambiguity", "intensity")
    if kind == "conflict":
        text = f"{prompt.text} {rng.choice(CONFLICT)}"
    elif kind == "ambiguity":
        text = f"{prompt.text} {rng.choice(AMBIGUITY)}"
    elif kind == "intensity":
        text = f"{rng.choice(INTENSITY)} {prompt.text}"
    elif kind == "typo":
        text = _typos(prompt.text, rng)
    elif kind == "terse":
        text = _terse(prompt.text)
    else:
        raise ValueError(f"unknown perturbation {kind!r}; use conflict, ambiguity, intensity, typo or terse")
    return Prompt(
        prompt_id=_prompt_id("perturbation", seed, text),
        text=text,
        category=prompt.category,
        difficulty=min(5, prompt.difficulty + 1) if harder else prompt.difficulty,
        tags=[*prompt.tags, f"perturbed:{kind}"],
        source="perturbation",
        parent_id=prompt.prompt_id,
    )


def perturbations(base: Sequence[Prompt], kinds: Sequence[str], count: int, seed: int) -> list[Prompt]:
    rng = random.Random(seed)
    parents = list(base)
    rng.shuffle(parents)
    return [perturb(parents[i % len(parents)], kinds[i % len(kinds)], seed) for i in range(count)] if parents else []


# --- teacher-written ---------------------------------------------------------------------------------


def clean_generated(text: str | None, min_words: int, max_words: int) -> str | None:
    """The prompt in a teacher's reply: labels, quotes and trailing chatter removed; None if unusable."""
    if not text:
        return None
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    first = re.sub(r"^(rewritten message|message|here is[^:]*|sure[^:]*)\s*:\s*", "", lines[0], flags=re.I).strip()
    if not first and len(lines) > 1:
        first = lines[1]
    first = first.strip().strip("\"“”'").strip()
    n = len(first.split())
    if n < min_words or n > max_words:
        return None
    return first


@dataclass
class WrittenPlan:
    source: str
    category: str
    difficulty: int
    tags: list[str]
    parent_id: str | None
    instruction: str


def evolution_plans(
    base: Sequence[Prompt], axes: dict[str, str], instruction: str, count: int, seed: int
) -> list[WrittenPlan]:
    rng = random.Random(seed)
    parents = list(base)
    rng.shuffle(parents)
    names = sorted(axes)
    plans = []
    for i in range(count if parents else 0):
        p, axis = parents[i % len(parents)], names[(i + rng.randrange(len(names))) % len(names)]
        plans.append(
            WrittenPlan(
                "evolutionary",
                p.category,
                min(5, p.difficulty + 1),
                [*p.tags, f"evolved:{axis}"],
                p.prompt_id,
                instruction.format(axis=axis, meaning=axes[axis], prompt=p.text),
            )
        )
    return plans


def freeform_plans(
    categories: Sequence[str], domains: Sequence[str], instruction: str, count: int, seed: int
) -> list[WrittenPlan]:
    rng = random.Random(seed)
    plans = []
    for i in range(count):
        category, domain = categories[i % len(categories)], rng.choice(list(domains))
        readable = category.replace("_", " ")
        plans.append(
            WrittenPlan(
                "freeform",
                category,
                3,
                [domain, "freeform"],
                None,
                instruction.format(category=readable, domain=domain),
            )
        )
    return plans


# --- near-duplicates -------------------------------------------------------------------------------


@dataclass
class Dedup:
    kept: list[Prompt]
    dropped: list[dict[str, str]] = field(default_factory=list)  # prompt_id, text, reason


def deduplicate(
    known: Sequence[Prompt],
    candidates: Sequence[Prompt],
    embed: Embed | None,
    threshold: float,
    min_parent_similarity: float = 0.0,
) -> Dedup:
    """Keep each candidate unless its normalised text, or its embedding (cosine >= threshold), matches a
    known prompt or a candidate kept before it. A variant is not compared with its own parent (being
    close to it is the point), but an evolved prompt must stay within `min_parent_similarity` of it:
    further away, the rewrite has lost the situation it was meant to make harder."""
    out = Dedup([])
    seen = {normalize(p.text): p.prompt_id for p in known}
    fresh = []
    for c in candidates:
        key = normalize(c.text)
        if key in seen:
            out.dropped.append({"prompt_id": c.prompt_id, "text": c.text, "reason": f"same text as {seen[key]}"})
            continue
        seen[key] = c.prompt_id
        fresh.append(c)
    if embed is None or not fresh:
        out.kept = fresh
        return out
    known_list = list(known)
    vectors = embed([p.text for p in known_list] + [c.text for c in fresh])
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    ref_ids = [p.prompt_id for p in known_list]
    ref = list(vectors[: len(known_list)])
    for c, v in zip(fresh, vectors[len(known_list) :]):
        if c.parent_id in ref_ids and c.source == "evolutionary":
            to_parent = float(ref[ref_ids.index(c.parent_id)] @ v)
            if to_parent < min_parent_similarity:
                out.dropped.append(
                    {
                        "prompt_id": c.prompt_id,
                        "text": c.text,
                        "reason": f"drifted from {c.parent_id} (cosine {to_parent:.3f})",
                    }
                )
                continue
        if ref:
            sims = np.stack(ref) @ v
            sims[[i for i, rid in enumerate(ref_ids) if rid == c.parent_id]] = -1.0
            j = int(np.argmax(sims))
            if sims[j] >= threshold:
                out.dropped.append(
                    {"prompt_id": c.prompt_id, "text": c.text, "reason": f"cosine {sims[j]:.3f} to {ref_ids[j]}"}
                )
                continue
        out.kept.append(c)
        ref.append(v)
        ref_ids.append(c.prompt_id)
    return out


def sentence_embedder(encoder_path: Path, batch_size: int = 32) -> Embed:
    """Mean-pooled encoder embeddings (all-MiniLM-L6-v2's own pooling)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(encoder_path)
    model = AutoModel.from_pretrained(encoder_path).eval()

    def embed(texts: list[str]) -> np.ndarray:
        chunks = []
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[start : start + batch_size], padding=True, truncation=True, max_length=128, return_tensors="pt"
            )
            with torch.inference_mode():
                hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            chunks.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1)).numpy())
        return np.concatenate(chunks) if chunks else np.zeros((0, 1))

    return embed


# --- all together ----------------------------------------------------------------------------------


@dataclass
class Generated:
    prompts: list[Prompt]
    dropped: list[dict[str, str]]
    proposed: dict[str, int]  # source -> prompts proposed before filtering


def generate_prompts(
    cfg: HominemConfig,
    base: Sequence[Prompt],
    known: Sequence[Prompt],
    seed: int,
    *,
    write: Callable[[list[WrittenPlan]], list[str | None]] | None,
    embed: Embed | None,
) -> Generated:
    """Generated prompts for one partition: perturbed and evolved from `base` (the day's seed prompts),
    templated and free-form ones besides, minus anything too close to `known` or to each other.
    `write` runs teacher instructions (needed when evolutionary or freeform counts are above 0)."""
    g: PromptGeneratorsConfig = cfg.prompts.generators
    proposed: dict[str, int] = {}
    dropped: list[dict[str, str]] = []
    candidates: list[Prompt] = []
    if g.templated.count:
        items = templated(cfg.path(g.templated.file), cfg.prompts.categories, g.templated.count, seed)
        candidates += items
        proposed["templated"] = len(items)
    if g.perturbation.count:
        items = perturbations(base, g.perturbation.kinds, g.perturbation.count, seed + 1)
        candidates += items
        proposed["perturbation"] = len(items)
    plans = evolution_plans(base, g.evolutionary.axes, g.evolutionary.instruction, g.evolutionary.count, seed + 2)
    plans += freeform_plans(
        cfg.prompts.categories, g.freeform.domains, g.freeform.instruction, g.freeform.count, seed + 3
    )
    if plans:
        if write is None:
            raise ValueError("evolutionary and freeform generators need the teacher; pass `write`")
        for plan, text in zip(plans, write(plans)):
            proposed[plan.source] = proposed.get(plan.source, 0) + 1
            if (
                text is None
            ):  # the call failed after its retries: not the teacher's output, and the version is left partial
                dropped.append({"prompt_id": "", "text": "", "reason": f"{plan.source}: teacher call failed"})
                continue
            cleaned = clean_generated(text, g.min_words, g.max_words)
            if cleaned is None:
                dropped.append(
                    {"prompt_id": "", "text": text[:300], "reason": f"{plan.source}: unusable teacher output"}
                )
                continue
            candidates.append(
                Prompt(
                    prompt_id=_prompt_id(plan.source, seed, cleaned),
                    text=cleaned,
                    category=plan.category,
                    difficulty=plan.difficulty,
                    tags=plan.tags,
                    source=plan.source,
                    parent_id=plan.parent_id,
                )
            )
    result = deduplicate(known, candidates, embed, g.near_duplicate_similarity, g.evolution_min_similarity)
    return Generated(result.kept, dropped + result.dropped, proposed)
