"""Where each day's prompts come from (`prompts:`): the seed file and the generators."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hominem_pipeline.core.config.base import _Frozen

PerturbationKind = Literal["conflict", "ambiguity", "intensity", "typo", "terse"]


class TemplatedGeneratorConfig(_Frozen):
    count: int = Field(ge=0, le=100_000, description="Prompts a day, >= 0.")
    file: str = Field(description="YAML of templates and the lists their slots are filled from.")


class PerturbationGeneratorConfig(_Frozen):
    count: int = Field(ge=0, le=100_000, description="Prompts a day, >= 0.")
    kinds: list[PerturbationKind] = Field(
        min_length=1, description="Perturbations drawn from: conflict, ambiguity, intensity, typo, terse."
    )


class EvolutionaryGeneratorConfig(_Frozen):
    count: int = Field(
        ge=0,
        le=100_000,
        description="Prompts a day, >= 0 (the teacher rewrites a sampled prompt to be harder along one axis).",
    )
    axes: dict[str, str] = Field(min_length=1, description="Axis name -> what harder along it means.")
    instruction: str = Field(
        min_length=1, description="Instruction to the teacher, with {axis}, {meaning} and {prompt}."
    )
    max_new_tokens: int = Field(ge=8, le=2048, description="Tokens the teacher may write, 8-2048.")


class FreeformGeneratorConfig(_Frozen):
    count: int = Field(
        ge=0,
        le=100_000,
        description="Prompts a day, >= 0 (the teacher writes new prompts from the instruction and a domain).",
    )
    instruction: str = Field(min_length=1, description="Instruction to the teacher, with {category} and {domain}.")
    domains: list[str] = Field(min_length=1, description="Domains drawn from.")
    max_new_tokens: int = Field(ge=8, le=2048, description="Tokens the teacher may write, 8-2048.")


class PromptGeneratorsConfig(_Frozen):
    templated: TemplatedGeneratorConfig = Field(description="Slots of templates filled from lists.")
    perturbation: PerturbationGeneratorConfig = Field(
        description="A sampled seed prompt with added conflict, ambiguity, emotional intensity, typos, or made terse."
    )
    evolutionary: EvolutionaryGeneratorConfig = Field(
        description="The teacher rewrites a sampled prompt to be harder along one axis (Evol-Instruct)."
    )
    freeform: FreeformGeneratorConfig = Field(
        description="The teacher writes new prompts from an instruction and a domain."
    )
    min_words: int = Field(ge=1, le=1000, description="Teacher-written prompts shorter than this are dropped.")
    max_words: int = Field(ge=1, le=10_000, description="Teacher-written prompts longer than this are dropped.")
    near_duplicate_similarity: float = Field(
        gt=0.0,
        le=1.0,
        description="A generated prompt at or above this embedding cosine similarity to a seed, evaluation or other "
        "generated prompt is dropped (0-1; not compared with its own parent).",
    )
    evolution_min_similarity: float = Field(
        ge=-1.0,
        le=1.0,
        description="An evolved prompt less similar than this to its parent has lost the situation and is dropped "
        "(-1 to 1).",
    )

    @property
    def uses_teacher(self) -> bool:
        return self.evolutionary.count > 0 or self.freeform.count > 0

    @property
    def enabled(self) -> bool:
        return self.templated.count > 0 or self.perturbation.count > 0 or self.uses_teacher


class PromptsConfig(_Frozen):
    seed_file: str = Field(description="YAML of seed prompts, each with a category.")
    categories: list[str] = Field(
        min_length=1, description="Prompt categories; every seed prompt's category must be one of them."
    )
    per_partition: int = Field(
        ge=1, le=100_000, description="Seed prompts sampled (stratified by category) into each daily partition."
    )
    eval_per_category: int = Field(
        ge=0, le=1_000, description="Prompts per category held out of training for the evaluation stage."
    )
    generators: PromptGeneratorsConfig = Field(
        description="Generated prompts joining the day's seed prompts, seeded by the partition; near-duplicates "
        "dropped."
    )
